"""The caller's phrases for days and times (voice_agent/said_phrases.py), on words from held-out calls."""

from __future__ import annotations

import datetime as dt

import pytest

from voice_agent.said_phrases import is_phrase, latest_said, phrases_in, said_intents, said_name
from voice_agent.scenarios import load_scenario

TODAY = dt.date(2026, 12, 1)
CHOICES = load_scenario("dental_clinic").policy.choices  # the dental pack's services and their x-synonyms


@pytest.mark.parametrize(("text", "days", "times"), [
    ("could we do the 9th half past one would be great", ["the 9th"], ["half past one"]),
    ("it's for Joseph Zimmermann could we do the 11th make it two thirty pm.", ["the 11th"], ["two thirty pm"]),
    ("Do you have december 3rd at 1 pm?", ["december 3rd"], ["1 pm"]),
    ("can i push my checkup to thursday at half past two", ["thursday"], ["half past two"]),
    ("Monday the fourteenth of December at two in the afternoon then.", ["monday the fourteenth of december"],
     ["two in the afternoon"]),
    ("this coming friday at ten thirty am", ["this coming friday"], ["ten thirty am"]),
    ("sorry i meant eleven not ten", [], ["eleven", "ten"]),
    ("make it one o'clock so", [], ["one o'clock"]),
    ("It's for Fatima Honeycutt.", [], []),
    ("later in the day would be good", [], []),
    ("the later one please, that one works", [], []),  # a pick from a list, not one o'clock
    ("at one please, that one", [], ["one"]),
    # seed-2 gen_038: "december ten" is a day, but "ten am" after a whole date is its time
    ("Let's say the eleventh of december ten am would be great.", ["the eleventh of december"], ["ten am"]),
    ("december ten works", ["december ten"], []),
    # ASR's hesitations inside a phrase are not part of it (seed-4 gen_020 was booked at ten)
    ("make it ten um thirty am", [], ["ten thirty am"]),
    ("the uh ninth of december", ["the ninth of december"], []),
])
def test_days_and_times_are_found_whole_and_a_day_of_the_month_is_no_time(text, days, times):
    assert phrases_in(text, "day", TODAY) == days
    assert phrases_in(text, "time", TODAY) == times


def test_the_newest_turn_that_names_one_decides_and_two_different_ones_decide_nothing():
    turns = ["I was hoping to book an exam half past ten would be great.", "could we do the 8th",
             "The name is Mikhail Fitzgerald."]
    assert latest_said("time", turns, TODAY) == "half past ten"
    assert latest_said("day", turns, TODAY) == "the 8th"
    assert latest_said("time", turns + ["could it be eleven or ten"], TODAY) is None
    # a time the caller refuses ("not ten", "instead of ten") is not what they said
    assert latest_said("time", turns + ["sorry i meant eleven not ten"], TODAY) == "eleven"
    assert latest_said("time", turns + ["eleven instead of ten please"], TODAY) == "eleven"
    assert latest_said("time", turns + ["not at ten"], TODAY) is None
    assert latest_said("time", ["at ten", "ten o'clock please"], TODAY) == "ten o'clock"  # one time, said two ways


@pytest.mark.parametrize(("value", "kind", "ok"), [
    ("1:00", "time", True), ("later in the day", "time", False), ("the seventh of december", "time", False),
    ("2026-12-10", "day", True), ("Wednesday, December 9th", "day", True), ("fatima Honeycutt", "day", False),
    ("anything", "text", True),
])
def test_a_value_is_a_phrase_of_its_kind_or_not(value, kind, ok):
    assert is_phrase(value, kind, TODAY) is ok


@pytest.mark.parametrize(("text", "services", "latest"), [
    ("good morning i was hoping to book a clean let's say tuesday the eighth", ["clean"], "clean"),
    ("a like cavity looked at please", ["cavity"], "cavity"),
    ("I'm looking to get a hygiene visit done make it twelve pm", ["hygiene"], "hygiene"),
    ("can you check thursday for me", [], None),           # "check" is a verb here, not a checkup
    ("a check-up and a cleaning", ["check up", "cleaning"], None),  # two services: the caller decides
    ("It's for Fatima Honeycutt.", [], None),
])
def test_choices_are_found_by_the_scenarios_own_words(text, services, latest):
    assert phrases_in(text, "choice", TODAY, CHOICES) == services
    assert latest_said("choice", [text], TODAY, CHOICES) == latest


def test_a_choice_argument_takes_the_value_itself():
    from voice_agent.said_phrases import as_argument, value_of
    assert as_argument("a clean", "choice", TODAY, CHOICES) == "cleaning"
    assert value_of("hygiene", "choice", TODAY, CHOICES) == value_of("cleaning", "choice", TODAY, CHOICES) == "cleaning"
    assert as_argument("half past one", "time", TODAY) == "half past one"  # days and times stay the caller's words
    assert is_phrase("checkup", "choice", TODAY, CHOICES) and not is_phrase("monday", "choice", TODAY, CHOICES)


def test_an_iso_date_is_no_time():
    # a date a tool result gave back, repeated by the caller: its "12" is no twelve o'clock
    assert phrases_in("please book me in on 2026-12-08 the name is jordan lee", "time", TODAY) == []
    assert phrases_in("on 2026-12-08 at 10:30", "time", TODAY) == ["10:30"]


@pytest.mark.parametrize(("text", "name"), [
    ("i'm calling to set up an appointment the name is karin um das", "karin das"),
    ("it's for isabel so wojcik", "isabel wojcik"),
    ("hey it's tomasz nowak can i push my checkup to thursday at half past two", "tomasz nowak"),
    ("can i come in for a checkup on saturday morning its oluwaseun adeyemi", "oluwaseun adeyemi"),
    ("Hello um I'm looking to get whitening done the name is Simone Wagner let's say the 9th.", "simone wagner"),
    ("it's for kofi rahman like", "kofi rahman"),
    ("i'm looking to get someone to look at my toothache done it's like for simone silva", "simone silva"),
    ("it's um for bruno costa", "bruno costa"),
    ("this is Maria Lopez, I need to cancel", "maria lopez"),
    # no name: cue words followed by common, day, time or service words, or a single word
    ("its urgent", None),
    ("i'm free thursday at ten", None),
    ("it is for the tenth", None),
    ("it's for a cleaning", None),
    ("this is silva", None),
    ("this is like the third time i call", None),
    ("i'm so sorry about that", None),
])
def test_the_name_a_caller_gives_is_the_words_after_their_cue(text, name):
    assert said_name([text]) == name


def test_the_newest_turn_that_gives_a_name_gives_it():
    assert said_name(["the name is ana silva", "thursday please", "sorry it's anna silvera"]) == "anna silvera"
    assert said_name(["the name is ana silva", "thursday please"]) == "ana silva"
    assert said_name(["thursday please"]) is None


def test_intents_are_whole_phrases_of_the_callers_words():
    intents = {"cancel_appointment": ("cancel", "call off"), "lookup_patient": ("what time is my",)}
    assert said_intents("Hey call off my visit please", intents) == {"cancel_appointment"}
    assert said_intents("what's your cancellation policy", intents) == set()  # "cancel" is a word, not a prefix
    assert said_intents("what time is my visit i might cancel it", intents) == {"cancel_appointment", "lookup_patient"}
    assert said_intents("What time is my visit?", intents) == {"lookup_patient"}
    # unseen seed-12 gen_056: a hesitation inside the phrase; "like" and "so" can be words, so they stay
    assert said_intents("good afternoon call uh off my visit please", intents) == {"cancel_appointment"}
    assert said_intents("what time like is my visit", intents) == set()


@pytest.mark.parametrize(("text", "part"), [
    ("Do you have anything in the morning?", "morning"),
    ("Later in the day would be good.", "afternoon"),
    ("something after lunch please", "afternoon"),
    ("10 in the morning works", None),  # a time, not a part
    ("mornings or afternoons, either", None),  # both: no one part
    ("thanks, bye", None),
])
def test_a_part_of_the_day_is_asked_for_without_a_time(text, part):
    from voice_agent.said_phrases import part_of_day

    assert part_of_day(text, dt.date(2026, 12, 1)) == part
