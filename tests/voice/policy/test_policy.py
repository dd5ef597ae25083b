"""The dialogue state (voice_agent/policy/state.py) and each decision of the policy
(voice_agent/policy/decisions.py), alone, on a scenario written here: a restaurant that no code knows."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from voice_agent.policy import decisions as D
from voice_agent.policy.state import DialogueState, StateTracker
from voice_agent.scenarios import parse_scenario

TODAY = dt.date(2026, 12, 1)  # a Tuesday
RESTAURANT = parse_scenario({
    "name": "trattoria",
    "system_prompt": "You take table bookings for Trattoria Sole.",
    "opening_hours": "17:00-23:00",
    "greeting_reply": "Hello! How can I help?",
    "goodbye_reply": "Thanks for calling Trattoria Sole. Goodbye!",
    "facts": {"hours": "Every evening, 5 pm to 11 pm."},
    "fact_questions": {"hours": ["when are you open", "opening hours"]},
    "ask": {"guest_name": "What name is the table under?", "cancel_table.guest_name": "Sure. What name is it under?",
            "book_table.seating": "Inside or on the terrace?"},
    "intents": {"cancel_table": ["cancel"], "find_tables": ["anything free", "do you have"]},
    "instead": {"find_tables": {"when_said": "time", "call": "book_table"},
                "book_table": {"after": "book_table", "call": "change_table"}},
    "tools": [
        {"name": "find_tables", "parameters": {"type": "object", "properties": {
            "date": {"type": "string", "x-kind": "date"}}, "required": ["date"]}},
        {"name": "book_table", "parameters": {"type": "object", "properties": {
            "guest_name": {"type": "string", "x-kind": "person_name"},
            "date": {"type": "string", "x-kind": "date"}, "time": {"type": "string", "x-kind": "time"},
            "seating": {"type": "string", "enum": ["inside", "terrace"], "x-kind": "enum",
                        "x-synonyms": {"terrace": ["outside", "outdoors"]}}},
            "required": ["guest_name", "date", "time"]}},
        {"name": "change_table", "parameters": {"type": "object", "properties": {
            "guest_name": {"type": "string", "x-kind": "person_name"},
            "new_date": {"type": "string", "x-kind": "date"}, "new_time": {"type": "string", "x-kind": "time"}},
            "required": ["guest_name", "new_date", "new_time"]}},
        {"name": "cancel_table", "parameters": {"type": "object", "properties": {
            "guest_name": {"type": "string", "x-kind": "person_name"}}, "required": ["guest_name"]}},
    ],
})
SYSTEM = {"role": "system", "content": RESTAURANT.system_prompt_for(TODAY)}


def convo(*turns: str | dict) -> list[dict]:
    """Caller lines as user messages; a dict is put in as it is (the agent's words, a call, a result)."""
    return [SYSTEM, *({"role": "user", "content": t} if isinstance(t, str) else t for t in turns)]


def agent(text: str) -> dict:
    return {"role": "assistant", "content": text}


def booked(args: dict) -> list[dict]:
    return [{"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "book_table", "arguments": json.dumps(args)}}]},
            {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"booked": True})},
            agent("You're booked. Anything else?")]


def state_of(msgs: list[dict]) -> DialogueState:
    return StateTracker(RESTAURANT.policy).read(msgs, RESTAURANT.tools)


# -- the state ------------------------------------------------------------------------------------

def test_slots_are_kept_by_kind_with_the_turn_they_were_said_in():
    s = state_of(convo("a table on the terrace friday at seven please", agent("What name is the table under?"),
                       "Giulia Bianchi"))
    assert {k: (v.words, v.turn) for k, v in s.slots.items()} == {
        "date": ("friday", 0), "time": ("seven", 0), "seating": ("terrace", 0), "person_name": ("giulia bianchi", 1)}


def test_a_refused_value_is_no_slot_and_the_newest_value_wins():
    s = state_of(convo("friday at seven", "sorry, eight not seven"))
    assert s.slots["time"].words == "eight" and s.slots["date"].words == "friday"
    assert "date" not in state_of(convo("I can't do thursday")).slots


def test_the_tool_wanted_comes_from_intents_questions_and_enum_choices():
    assert state_of(convo("I need to cancel")).wanted == "cancel_table"                          # intent phrase
    assert state_of(convo("a table outside please")).wanted == "book_table"                      # its enum named
    asked = convo("hello", agent(RESTAURANT.ask["cancel_table.guest_name"]), "Marco Polo")
    assert state_of(asked).wanted == "cancel_table"                                              # its own question
    assert state_of(convo("hello there")).wanted is None


def test_a_successful_call_clears_the_wanted_tool_and_keeps_its_outcome():
    s = state_of(convo("terrace friday at seven, Giulia Bianchi", *booked({"guest_name": "giulia bianchi"})))
    assert s.wanted is None and [o.tool for o in s.succeeded("book_table")] == ["book_table"]


def test_the_tracker_reads_only_new_messages_and_restarts_on_a_rewritten_history():
    tracker = StateTracker(RESTAURANT.policy)
    msgs = convo("a table friday")
    first = tracker.read(msgs, RESTAURANT.tools)
    assert tracker.read([*msgs, agent("What time?"), {"role": "user", "content": "seven"}], RESTAURANT.tools) is first
    assert first.turn == 1 and first.slots["time"].words == "seven"
    again = tracker.read(convo("cancel please"), RESTAURANT.tools)
    assert again is not first and again.wanted == "cancel_table"


def test_an_hour_said_without_am_or_pm_is_read_inside_the_scenarios_hours():
    assert RESTAURANT.hours is not None and RESTAURANT.hours.holds(19, 0) and not RESTAURANT.hours.holds(7, 0)


# -- each decision alone ---------------------------------------------------------------------------

def test_greeting_only():
    d = D.greeting_only(state_of(convo("good evening")), convo("good evening"))
    assert d is not None and d.say == RESTAURANT.greeting_reply
    assert D.greeting_only(state_of(convo("hi, a table friday")), convo("hi, a table friday")) is None


def test_closing_only():
    msgs = convo("great, that's all, bye")
    assert D.closing_only(state_of(msgs), msgs).say == RESTAURANT.goodbye_reply
    assert D.closing_only(state_of(convo("thanks")), convo("thanks")) is None


def test_facts_only():
    msgs = convo("when are you open?")
    assert D.facts_only(state_of(msgs), msgs).say.startswith("Every evening, 5 pm to 11 pm.")
    assert D.facts_only(state_of(convo("cancel, when are you open")), convo("cancel, when are you open")) is None


def test_call_when_ready_makes_the_call_once_the_last_argument_is_said():
    msgs = convo("a table friday at seven on the terrace", agent(RESTAURANT.ask["guest_name"]), "Giulia Bianchi")
    d = D.call_when_ready(state_of(msgs), msgs)
    assert d.call == ("book_table", {"guest_name": "giulia bianchi", "date": "friday", "time": "seven",
                                     "seating": "terrace"})


@pytest.mark.parametrize("turns", [
    ("a table friday at seven",),                                        # no name yet
    ("a table friday at seven, Giulia Bianchi",),                        # the seating the scenario asks for: unsaid
    ("a table outside friday at seven, Giulia Bianchi", agent("Anything else?"), "thanks"),  # nothing new said
])
def test_call_when_ready_waits_for_what_is_missing_or_new(turns):
    msgs = convo(*turns)
    assert D.call_when_ready(state_of(msgs), msgs) is None


def test_call_when_ready_follows_the_scenarios_instead_rule():
    msgs = convo("do you have anything friday at seven outside? it's for Giulia Bianchi")
    assert D.call_when_ready(state_of(msgs), msgs).call[0] == "book_table"     # a time named: not the search
    msgs = convo("do you have anything friday?")
    assert D.call_when_ready(state_of(msgs), msgs).call == ("find_tables", {"date": "friday"})


def test_correct_done_call_changes_what_succeeded_with_the_new_value_and_the_rest_as_it_was():
    msgs = convo("terrace friday at seven, Giulia Bianchi",
                 *booked({"guest_name": "giulia bianchi", "date": "friday", "time": "seven", "seating": "terrace"}),
                 "actually can we make it eight")
    d = D.correct_done_call(state_of(msgs), msgs)
    assert d.call == ("change_table", {"guest_name": "giulia bianchi", "new_date": "friday", "new_time": "eight"})
    same = convo("terrace friday at seven, Giulia Bianchi",
                 *booked({"guest_name": "giulia bianchi", "date": "friday", "time": "seven", "seating": "terrace"}),
                 "see you friday at seven then")
    assert D.correct_done_call(state_of(same), same) is None                  # the same values: nothing to change


def test_search_first_reads_the_day_before_the_time_is_asked():
    msgs = convo("a table on the terrace friday please")
    assert D.search_first(state_of(msgs), msgs).call == ("find_tables", {"date": "friday"})
    timed = convo("a table on the terrace friday at seven please")
    assert D.search_first(state_of(timed), timed) is None            # a time named: the booking is due instead
    searched = convo("a table on the terrace friday please", {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "find_tables", "arguments": '{"date": "friday"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"free": ["7 pm"]}'}, agent("I have 7 pm."), "friday then")
    assert D.search_first(state_of(searched), searched) is None      # that day was searched


def test_ask_missing_asks_the_tools_own_question_first_and_never_twice_in_a_row():
    msgs = convo("I need to cancel")
    made = D.ask_missing(state_of(msgs), msgs)
    assert made.say == RESTAURANT.ask["cancel_table.guest_name"] and made.metrics["asked"]["argument"] == "guest_name"
    assert D.ask_missing(state_of(convo("a table friday at seven")), convo("a table friday at seven")) is None
    msgs = convo("a table outside friday at seven")
    assert D.ask_missing(state_of(msgs), msgs).say == RESTAURANT.ask["guest_name"]
    again = convo("a table outside friday at seven", agent(RESTAURANT.ask["guest_name"]), "outside, I said")
    assert D.ask_missing(state_of(again), again) is None              # asked already: the model reads the answer
    assert D.ask_missing(state_of(convo("hmm")), convo("hmm")) is None  # nothing wanted


def test_ask_missing_leaves_words_that_may_be_an_uncued_name_to_the_model():
    # "book jordan lee ..." names nobody by a cue; two unknown words may be the name, so the state
    # cannot say it is missing (the model reads them) ...
    msgs = convo("book giulia bianchi a table outside friday at seven")
    state = state_of(msgs)
    assert "person_name" not in state.slots and state.maybe_name_turn == 0
    assert D.ask_missing(state, msgs) is None
    # ... but a choice of the scenario's, however many words, is no name, and the question stands
    msgs = convo("a table outside friday at seven please")
    assert state_of(msgs).maybe_name_turn == -1 and D.ask_missing(state_of(msgs), msgs) is not None


def test_the_decisions_and_their_priority():
    assert [d.__name__ for d in D.DECISIONS] == ["greeting_only", "closing_only", "correct_done_call",
                                                "call_when_ready", "facts_only", "search_first", "ask_missing",
                                                "follow_result"]


def test_decide_takes_the_first_decision_in_priority():
    msgs = convo("a table friday at seven outside, the name is Giulia Bianchi, and when are you open?")
    made = D.decide(state_of(msgs), msgs)
    assert made is not None and made.name == "call_when_ready"  # a ready call comes before a fact question
    assert D.decide(state_of(convo("hmm")), convo("hmm")) is None


def test_a_policy_call_is_openai_shaped():
    call = D.as_tool_call(D.Decision("call_when_ready", call=("cancel_table", {"guest_name": "marco polo"})), 3)
    assert call["type"] == "function" and json.loads(call["function"]["arguments"]) == {"guest_name": "marco polo"}


DESK = parse_scenario({
    "name": "loyalty_desk",
    "system_prompt": "You keep notes on loyalty members.",
    "ask": {"card_number": "What is your card number?", "add_note.note": "What should the note say?"},
    "intents": {"add_note": ["add a note", "leave a note"]},
    "tools": [{"name": "add_note", "parameters": {"type": "object", "properties": {
        "card_number": {"type": "string", "x-kind": "phone_number"},
        "note": {"type": "string", "x-kind": "text"}}, "required": ["card_number", "note"]}}],
})


def desk_state(*turns: str | dict) -> tuple[DialogueState, list[dict]]:
    msgs = [{"role": "system", "content": DESK.system_prompt_for(TODAY)},
            *({"role": "user", "content": t} if isinstance(t, str) else t for t in turns)]
    return StateTracker(DESK.policy).read(msgs, DESK.tools), msgs


def test_a_short_number_is_a_slot_when_the_caller_names_the_argument_it_is():
    state, _ = desk_state("I'd like to leave a note, my card number is four four seven one")
    assert state.slots["phone_number"].words == "4471"
    state, _ = desk_state("I'd like to leave a note for table four four seven one")
    assert "phone_number" not in state.slots  # four digits in passing, not named: no number


def test_a_free_text_is_the_reply_to_its_own_question_and_then_the_call_is_ready():
    state, msgs = desk_state("leave a note, my card number is 4471", agent(DESK.ask["add_note.note"]),
                             "um it's a window seat please")
    assert state.slots["note"].words == "a window seat please"
    made = D.decide(state, msgs)
    assert made.name == "call_when_ready" and made.call == ("add_note", {"card_number": "4471",
                                                                          "note": "a window seat please"})
    state, _ = desk_state("leave a note, my card number is 4471", "a window seat please")
    assert "note" not in state.slots  # not asked for: a free text is never guessed from a sentence


def test_a_pack_that_leaves_x_kind_out_gets_the_kinds_its_names_imply_and_the_policy_works():
    hotel = parse_scenario({
        "name": "front_desk", "system_prompt": "You book rooms.", "opening_hours": "00:00-23:59",
        "ask": {"guest_name": "What name should the booking be under?"},
        "tools": [{"name": "book_room", "parameters": {"type": "object", "properties": {
            "guest_name": {"type": "string"}, "check_in_date": {"type": "string"},
            "room_type": {"type": "string", "enum": ["single", "double"]}, "notes": {"type": "string"},
            "nights": {"type": "integer", "x-kind": None}},  # x-kind: null opts out
            "required": ["guest_name", "check_in_date", "room_type"]}}],
    })
    props = hotel.tools[0]["function"]["parameters"]["properties"]
    assert {k: v.get("x-kind") for k, v in props.items()} == {
        "guest_name": "person_name", "check_in_date": "date", "room_type": "enum", "notes": None, "nights": None}
    msgs = [{"role": "system", "content": hotel.system_prompt_for(TODAY)},
            {"role": "user", "content": "a double room from friday please, the name is Ana Ruiz"}]
    made = D.decide(StateTracker(hotel.policy).read(msgs, hotel.tools), msgs)
    assert made.name == "call_when_ready" and made.call[0] == "book_room"
    assert made.call[1]["room_type"] == "double" and made.call[1]["guest_name"].lower() == "ana ruiz"
