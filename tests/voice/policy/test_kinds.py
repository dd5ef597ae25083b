"""Argument kinds: one parser per kind (voice_agent/policy/kinds.py), each on its own."""

from __future__ import annotations

import datetime as dt

import pytest

from voice_agent.policy.calendar_words import Hours, parse_time
from voice_agent.policy.kinds import KINDS, PARSERS, KindContext, KindError, kind_for, parse, spoken_digits

TODAY = dt.date(2026, 12, 1)  # a Tuesday
CTX = KindContext(today=TODAY)


def test_every_kind_has_one_parser():
    assert set(PARSERS) == set(KINDS)


@pytest.mark.parametrize(("words", "value"), [
    ("next tuesday", "2026-12-08"), ("the ninth", "2026-12-09"), ("tomorrow", "2026-12-02"),
    ("December 14th", "2026-12-14"), ("2026-12-20", "2026-12-20")])
def test_date(words, value):
    assert parse("date", words, CTX) == value


def test_date_that_is_not_one_says_why():
    with pytest.raises(KindError, match="didn't catch the day"):
        parse("date", "whenever suits", CTX)


@pytest.mark.parametrize(("words", "hours", "value"), [
    ("half past seven", None, "07:30"),            # a business day: 7 is morning
    ("half past seven", "17:00-23:00", "19:30"),   # a restaurant's evening
    ("seven", "06:00-14:00", "07:00"),             # a bakery's morning
    ("four", "09:00-17:00", "16:00"),
    ("10 am", "17:00-23:00", "10:00"),             # said am wins over the hours
    ("2 pm", None, "14:00"),
    ("noon", None, "12:00"),
])
def test_time_reads_a_bare_hour_inside_the_scenarios_hours(words, hours, value):
    ctx = KindContext(today=TODAY, hours=Hours.of(hours) if hours else None)
    assert parse("time", words, ctx) == value


def test_time_without_hours_keeps_the_business_day_reading():
    assert [parse_time(str(h)) for h in range(1, 13)] == [
        "13:00", "14:00", "15:00", "16:00", "17:00", "18:00", "07:00", "08:00", "09:00", "10:00", "11:00", "12:00"]


def test_opening_hours_are_checked():
    with pytest.raises(ValueError, match="09:00-17:00"):
        Hours.of("nine to five")
    with pytest.raises(ValueError, match="open before they close"):
        Hours.of("17:00-09:00")


@pytest.mark.parametrize(("words", "value"), [
    ("for four people", 4), ("4", 4), ("twenty two", 22), ("a dozen", 12), ("two hundred", 200),
    ("a couple of us", 2)])
def test_integer_is_a_count_not_a_time(words, value):
    assert parse("integer", words, CTX) == value


def test_integer_without_a_number_says_so():
    with pytest.raises(KindError, match="number"):
        parse("integer", "a few", CTX)


@pytest.mark.parametrize(("words", "digits"), [
    ("oh seven seven double oh, one two three", "07700123"), ("555 0142", "5550142"),
    ("five five five, oh one four two", "5550142"), ("triple five one two", "55512")])
def test_phone_number_is_a_digit_string(words, digits):
    assert parse("phone_number", words, CTX) == digits


def test_phone_number_too_short_asks_for_the_whole_number():
    with pytest.raises(KindError, match="whole number"):
        parse("phone_number", "five five", CTX)


def test_digits_are_read_back_one_by_one_in_groups():
    assert spoken_digits("5550142") == "5 5 5, 0 1 4 2"
    assert spoken_digits("07700900123") == "0 7 7, 0 0 9 0, 0 1 2 3"


@pytest.mark.parametrize(("words", "plate"), [
    ("A B one two C D E", "AB12CDE"), ("ab12 cde", "AB12CDE"), ("it's kilo lima six four x ray yankee zulu", "KL64XYZ")])
def test_plate(words, plate):
    assert parse("plate", words, CTX) == plate


def test_plate_without_digits_is_not_one():
    with pytest.raises(KindError, match="registration"):
        parse("plate", "my blue car", CTX)


@pytest.mark.parametrize(("words", "name"), [
    ("it's um karin das", "Karin Das"), ("my name is jordan lee", "Jordan Lee"), ("Tomasz Nowak", "Tomasz Nowak")])
def test_person_name(words, name):
    assert parse("person_name", words, CTX) == name


def test_person_name_of_cue_words_only_is_none():
    with pytest.raises(KindError, match="name"):
        parse("person_name", "it's um", CTX)


def test_enum_through_its_synonyms():
    ctx = KindContext(today=TODAY, choices={"mot": ("mot", "m o t", "annual test"), "tyres": ("tyres", "tires")})
    assert parse("enum", "it's due its annual test", ctx) == "mot"
    assert parse("enum", "new tires please", ctx) == "tyres"
    with pytest.raises(KindError, match="which one"):
        parse("enum", "the mot and the tyres", ctx)
    with pytest.raises(KindError, match="the choices are mot or tyres"):
        parse("enum", "a wash", ctx)


def test_text_drops_hesitations():
    assert parse("text", "um the screen is uh cracked", CTX) == "the screen is cracked"


def test_email():
    assert parse("email", "jo dot lee at example dot com", CTX) == "jo.lee@example.com"
    with pytest.raises(KindError):
        parse("email", "no idea", CTX)


def test_boolean():
    assert parse("boolean", "I restarted it and now it works", CTX) is True
    assert parse("boolean", "I restarted it and it still doesn't work", CTX) is False
    assert parse("boolean", "yes", CTX) is True and parse("boolean", "no", CTX) is False
    with pytest.raises(KindError):
        parse("boolean", "the APN settings", CTX)


def test_an_unknown_kind_is_an_error():
    with pytest.raises(KindError, match="unknown argument kind"):
        parse("colour", "red", CTX)


@pytest.mark.parametrize("argument, spec, kind", [
    ("check_in_date", {"type": "string"}, "date"), ("day", {"type": "string"}, "date"),
    ("pickup_time", {"type": "string"}, "time"), ("guest_name", {"type": "string"}, "person_name"),
    ("name", {}, "person_name"), ("product_name", {"type": "string"}, None),
    ("party_size", {"type": "integer"}, "integer"), ("room_type", {"type": "string", "enum": ["single", "double"]}, "enum"),
    ("mobile", {"type": "string"}, "phone_number"), ("card_number", {"type": "string"}, "phone_number"),
    ("email_address", {"type": "string"}, "email"), ("registration", {"type": "string"}, "plate"),
    ("notes", {"type": "string"}, None), ("confirmed", {"type": "boolean"}, "boolean"), ("phone", {"type": "boolean"}, "boolean"),
    ("amount", {"type": "number"}, None)])
def test_a_kind_left_out_is_read_from_the_arguments_name_and_schema(argument, spec, kind):
    assert kind_for(argument, spec) == kind


def test_the_shipped_packs_explicit_kinds_are_what_the_names_imply():
    # the rule reproduces what pack authors wrote (free text is never implied: it must be asked for)
    from voice_agent.scenarios import load_scenario
    checked = 0
    for name in ("dental_clinic", "telecom_support", "car_garage"):
        for t in load_scenario(name).tools:
            for arg, spec in t["function"]["parameters"]["properties"].items():
                if spec.get("x-kind") not in (None, "text"):
                    assert kind_for(arg, spec) == spec["x-kind"], (name, t["function"]["name"], arg)
                    checked += 1
    assert checked >= 30
