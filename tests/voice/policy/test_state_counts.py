"""What the state reads from a caller's line for counts, emails, choices and days: rules that hold
for any scenario (a count said with its argument's own noun, a count asked for is no time of day,
"double oh" is digits, a phrase naming two choices is neither, "tonight" is today)."""

from __future__ import annotations

import datetime as dt

from voice_agent.policy.kinds import KindContext, parse_email, parse_integer
from voice_agent.policy.state import StateTracker
from voice_agent.scenarios import parse_scenario

TODAY = dt.date(2026, 12, 1)
LODGE = parse_scenario({
    "name": "lodge", "system_prompt": "You book stays and classes.", "opening_hours": "07:00-22:00",
    "ask": {"nights": "How many nights?", "email": "What's your email?", "party_size": "How many people?"},
    "tools": [
        {"name": "book_stay", "parameters": {"type": "object", "properties": {
            "arrival": {"type": "string", "x-kind": "date"}, "nights": {"type": "integer", "x-kind": "integer"},
            "kind": {"type": "string", "enum": ["single", "double"], "x-kind": "enum"},
            "phone": {"type": "string", "x-kind": "phone_number"}}, "required": ["arrival", "nights", "kind"]}},
        {"name": "book_class", "parameters": {"type": "object", "properties": {
            "party_size": {"type": "integer", "x-kind": "integer"}, "time": {"type": "string", "x-kind": "time"},
            "email": {"type": "string", "x-kind": "email"},
            "style": {"type": "string", "enum": ["haircut", "beard"], "x-kind": "enum",
                      "x-synonyms": {"haircut": ["trim"], "beard": ["beard trim"]}}},
            "required": ["party_size", "time"]}},
    ]})


def slots(*lines: str) -> dict[str, str]:
    msgs = [{"role": "system", "content": LODGE.system_prompt_for(TODAY)}]
    for line in lines:
        msgs.append({"role": "assistant", "content": line[2:]} if line.startswith("A:") else {"role": "user", "content": line})
    state = StateTracker(LODGE.policy).read(msgs, LODGE.tools)
    return {k: v.words for k, v in state.slots.items()}


def test_a_count_said_with_its_arguments_noun_is_taken_unasked():
    assert slots("a double for three nights from friday")["nights"] == "3"
    assert slots("a class for four people at six pm")["party_size"] == "4"
    got = slots("a double from friday, I have two dogs")
    assert "nights" not in got and "party_size" not in got  # not an argument's noun


def test_a_number_answering_a_count_question_is_the_count_not_a_time():
    got = slots("A:How many people?", "yeah, one")
    assert got["party_size"] == "1" and "time" not in got
    assert slots("A:How many people?", "two people at 6 pm")["time"] == "6 pm"  # a clock cue is still a time


def test_the_first_number_said_is_the_count():
    assert parse_integer("make that two nights, not three", KindContext()) == 2
    assert parse_integer("twenty two", KindContext()) == 22
    assert parse_integer("for four people", KindContext()) == 4


def test_double_before_a_digit_is_part_of_a_number_not_a_choice():
    got = slots("a single please, my number is oh seven seven double oh one two three")
    assert got["kind"] == "single"


def test_a_phrase_that_names_two_choices_is_neither_and_does_not_crash():
    got = slots("A:How many people?", "just one for a beard trim")
    assert got["party_size"] == "1" and "style" not in got


def test_an_email_said_in_passing_is_taken_and_lead_in_words_are_not_part_of_it():
    assert slots("book me in, my email is jo dot lee at example dot com")["email"] == "jo.lee@example.com"
    assert parse_email("yeah brunod at mail dot com please", KindContext()) == "brunod@mail.com"


def test_tonight_is_today():
    assert slots("a single for tonight")["date"] == "tonight"


CHECKS = parse_scenario({
    "name": "support", "system_prompt": "You fix mobile data.",
    "intents": {"record_check": ["data not working"]},
    "instead": {"record_check": {"when_result": "open_a_ticket", "call": "open_ticket"}},
    "tools": [
        {"name": "record_check", "parameters": {"type": "object", "properties": {
            "phone": {"type": "string", "x-kind": "phone_number"},
            "check": {"type": "string", "enum": ["airplane_mode", "restart"], "x-kind": "enum",
                      "x-synonyms": {"airplane_mode": ["airplane mode"], "restart": ["restarted"]}},
            "fixed": {"type": "boolean"}}, "required": ["phone", "check"]}},
        {"name": "open_ticket", "parameters": {"type": "object", "properties": {
            "phone": {"type": "string", "x-kind": "phone_number"}}, "required": ["phone"]}}]})


def _decide(msgs: list[dict]):
    from voice_agent.policy.decisions import decide

    full = [{"role": "system", "content": CHECKS.system_prompt_for(TODAY)}, *msgs]
    return decide(StateTracker(CHECKS.policy).read(full, CHECKS.tools), full)


def test_an_optional_yes_no_said_this_turn_goes_in_the_call():
    d = _decide([{"role": "user", "content": "my data not working, the number is 5550142"},
                 {"role": "assistant", "content": "Is airplane mode off?"},
                 {"role": "user", "content": "I restarted it and now it works"}])
    assert d.name == "call_when_ready" and d.call == ("record_check", {"phone": "5550142", "check": "restart", "fixed": True})
    d = _decide([{"role": "user", "content": "my data not working, the number is 5550142"},
                 {"role": "user", "content": "airplane mode is off"}])
    assert d.call == ("record_check", {"phone": "5550142", "check": "airplane_mode"})  # no yes/no said: left out


def test_a_result_field_the_scenario_names_is_followed_by_its_call():
    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "record_check", "arguments": '{"phone": "5550142", "check": "restart", "fixed": false}'}}]}
    said = [{"role": "user", "content": "data not working, 5550142"}, {"role": "user", "content": "restarted, no luck"}]
    d = _decide([*said, call, {"role": "tool", "tool_call_id": "c1", "content": '{"open_a_ticket": true}'}])
    assert d.name == "follow_result" and d.call == ("open_ticket", {"phone": "5550142"})
    assert _decide([*said, call, {"role": "tool", "tool_call_id": "c1", "content": '{"open_a_ticket": false}'}]) is None


def test_a_tools_own_questions_are_asked_in_the_order_the_scenario_wrote_them():
    from voice_agent.policy.decisions import decide

    sc = parse_scenario({"name": "s", "system_prompt": "p",
                         "ask": {"record_check.phone": "Your number?", "record_check.check": "Is airplane mode off?"},
                         "intents": {"record_check": ["data not working"]}, "tools": CHECKS.tools})
    msgs = [{"role": "system", "content": sc.system_prompt_for(TODAY)}, {"role": "user", "content": "data not working"}]
    assert decide(StateTracker(sc.policy).read(msgs, sc.tools), msgs).say == "Your number?"  # who first, as written


def test_the_tool_just_served_is_wanted_again_when_its_choice_is_named_anew():
    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "record_check", "arguments": '{"phone": "5550142", "check": "airplane_mode"}'}}]}
    msgs = [{"role": "user", "content": "data not working, 5550142"}, {"role": "user", "content": "airplane mode is off"},
            call, {"role": "tool", "tool_call_id": "c1", "content": '{"recorded": "airplane_mode"}'},
            {"role": "assistant", "content": "Noted. Next, try a restart."},
            {"role": "user", "content": "I restarted it and it still doesn't work"}]
    d = _decide(msgs)
    assert d.name == "call_when_ready" and d.call == ("record_check", {"phone": "5550142", "check": "restart", "fixed": False})


def test_a_choice_of_a_tool_with_intent_phrases_asks_for_it_only_when_nothing_is_wanted():
    from voice_agent.scenarios import load_scenario

    sc = load_scenario("telecom_support")
    msgs = [{"role": "system", "content": sc.system_prompt_for(TODAY)},
            {"role": "user", "content": "I'd like to switch to the plus plan."}]
    assert StateTracker(sc.policy).read(msgs, sc.tools).wanted == "change_plan"
