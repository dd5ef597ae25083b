"""Ask, do not guess (voice_agent/brain/ask_guard.py): a call whose grounded argument nobody said
does not run; the scenario's question for that argument is spoken instead."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from pipecat.frames.frames import FunctionCallResultFrame, LLMContextFrame, LLMTextFrame
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import run_test

from voice_agent.brain import Brain, TurnResult
from voice_agent.brain.ask_guard import ask_instead, check_calls, unsaid_argument
from voice_agent.brain.types import TurnEvent
from voice_agent.scenarios import CallPolicy, ScenarioError, load_scenario, parse_scenario
from voice_agent.services.llm import EngineLLMService, tools_schema

SCENARIO = load_scenario("dental_clinic")
TODAY = dt.date(2026, 11, 30)


def _book(**args) -> dict:
    return {"id": "call_1", "type": "function", "function": {"name": "book_appointment", "arguments": json.dumps(args)}}


class ScriptedBrain(Brain):
    """A brain whose every turn makes the given calls (the model's part is not under test here)."""

    def __init__(self, calls: list[dict]) -> None:
        super().__init__()
        self.calls, self.turns = calls, 0

    @property
    def model_name(self) -> str:
        return "scripted"

    async def _attempt(self, messages, params):
        self.turns += 1
        calls = self.calls if self.turns == 1 else []
        yield TurnEvent("done", result=TurnResult(text="" if calls else "Done.", reasoning="", tool_calls=calls,
                                                  tool_errors=[], finish_reason="tool_calls" if calls else "stop"))


def test_a_name_or_time_nobody_said_is_found_and_said_ones_are_not():
    msgs = [{"role": "assistant", "content": SCENARIO.greeting},
            {"role": "user", "content": "i'd like a cleaning on friday later in the day"}]
    unsaid = unsaid_argument([_book(patient_name="Maya", date="friday", time="one")], SCENARIO.tools, msgs, SCENARIO.ask)
    assert (unsaid.argument, unsaid.value, unsaid.question) == ("patient_name", "Maya", SCENARIO.ask["patient_name"])
    msgs.append({"role": "user", "content": "it's maria lopez"})
    unsaid = unsaid_argument([_book(patient_name="maria lopez", date="friday", time="one")], SCENARIO.tools, msgs,
                             SCENARIO.ask)
    assert unsaid.argument == "time" and unsaid.question == "What time would suit you?"
    # Said words that are no time are asked about too (the tool could not read them either).
    unsaid = unsaid_argument([_book(patient_name="maria lopez", date="friday", time="later in the day")],
                             SCENARIO.tools, msgs, SCENARIO.ask)
    assert (unsaid.argument, unsaid.value) == ("time", "later in the day")
    msgs.append({"role": "user", "content": "make it two thirty"})
    # The caller's words in another order are said; a word nobody used is not.
    assert unsaid_argument([_book(patient_name="lopez maria", date="friday", time="two thirty")],
                           SCENARIO.tools, msgs, SCENARIO.ask) is None
    assert unsaid_argument([_book(patient_name="Maria Lopez", date="friday", time="two thirty")], SCENARIO.tools,
                           msgs, SCENARIO.ask) is None
    assert unsaid_argument([_book(patient_name="Maya", date="friday", time="one")], SCENARIO.tools, msgs, {}) is None


async def test_the_service_asks_and_books_nothing_when_the_call_invents_a_name(tmp_path):
    backend = SCENARIO.open_backend(tmp_path / "store", TODAY)
    db = backend.db
    brain = ScriptedBrain([_book(patient_name="sarah", date="2026-12-02", time="9 am")])
    llm = EngineLLMService(brain, system_instruction=SCENARIO.system_prompt_for(TODAY), reasoning_effort="instant",
                           tools=SCENARIO.bind_handlers(backend), policy=SCENARIO.policy)
    ctx = LLMContext([{"role": "user", "content": "wednesday at nine am please"}],
                     tools=tools_schema(SCENARIO.tools))
    down, _ = await run_test(llm, frames_to_send=[LLMContextFrame(ctx)])
    assert "".join(f.text for f in down if isinstance(f, LLMTextFrame)) == SCENARIO.ask["patient_name"]
    assert not [f for f in down if isinstance(f, FunctionCallResultFrame)]
    assert db.appointments("sarah") == []
    assert llm.turn_metrics[0]["asked_instead_of_call"] == {"tool": "book_appointment", "argument": "patient_name",
                                                            "value": "sarah"}


def test_the_ask_block_names_real_arguments():
    data = {"name": "x", "system_prompt": "hi", "tools": SCENARIO.tools, "ask": {"patient_nmae": "Your name?"}}
    with pytest.raises(ScenarioError, match="ask.patient_nmae: no tool has an argument 'patient_nmae'"):
        parse_scenario(data)


async def test_the_brain_itself_asks_so_every_framework_gets_the_same_turn():
    brain = ScriptedBrain([_book(patient_name="sarah", date="2026-12-02", time="9 am")])
    brain.policy = SCENARIO.policy
    # (no service named: no tool is wanted yet, so the policy leaves the turn to the model)
    msgs = [{"role": "user", "content": "2026-12-02 at 9 am please"}]
    events = [ev async for ev in brain.turn(msgs, tools=SCENARIO.tools)]
    assert [(e.type, e.text) for e in events] == [("answer", SCENARIO.ask["patient_name"]), ("done", "")]
    done = events[-1].result
    assert done.tool_calls == [] and done.text == SCENARIO.ask["patient_name"] and done.finish_reason == "stop"
    brain.policy, brain.turns = CallPolicy(), 0  # without the blocks, the call goes through as the model made it
    events = [ev async for ev in brain.turn(msgs, tools=SCENARIO.tools)]
    assert [e.type for e in events] == ["done"] and events[-1].result.tool_calls


def _turn(*lines: str) -> list[dict]:
    return [{"role": "system", "content": SCENARIO.system_prompt_for(dt.date(2026, 12, 1))},
            {"role": "assistant", "content": SCENARIO.greeting}] + [{"role": "user", "content": x} for x in lines]


def _args(call: dict) -> dict:
    return json.loads(call["function"]["arguments"])


def test_a_mangled_day_or_time_takes_the_callers_own_phrase_instead_of_asking_for_it_again():
    # Adapter v7 on held-out calls: "1:00" for "half past one", the name as the day, "this coming tomorrow".
    msgs = _turn("a checkup could we do the 9th half past one would be great", "it's anika malik")
    calls = [_book(patient_name="anika malik", date="the 9th", time="1:00", service="checkup")]
    mended, unsaid = check_calls(calls, SCENARIO.tools, msgs, SCENARIO.ask)
    assert unsaid is None and _args(calls[0])["time"] == "half past one"
    assert [(m.argument, m.written, m.said) for m in mended] == [("time", "1:00", "half past one")]
    calls = [_book(patient_name="fatima honeycutt", date="fatima honeycutt", time="one o'clock", service="filling")]
    msgs = _turn("when are you free the second of december", "make it one o'clock", "a filling it's fatima honeycutt")
    assert check_calls(calls, SCENARIO.tools, msgs, SCENARIO.ask)[1] is None
    assert _args(calls[0]) == {"patient_name": "fatima honeycutt", "date": "the second of december",
                               "time": "one o'clock", "service": "filling"}
    free = [{"id": "c", "type": "function", "function": {"name": "find_free_slots",
                                                         "arguments": json.dumps({"date": "this coming tomorrow"})}}]
    check_calls(free, SCENARIO.tools, _turn("what times have you got free tomorrow?"), SCENARIO.ask)
    assert _args(free[0])["date"] == "tomorrow"


def test_the_service_is_what_the_callers_latest_words_chose():
    # held-out gen_001: "i was hoping to book a clean" was booked as a checkup
    msgs = _turn("good morning i was hoping to book a clean let's say tuesday the eighth",
                 "make it ten am it's for igor fitzgerald")
    calls = [_book(patient_name="igor fitzgerald", date="tuesday the eighth", time="ten am", service="checkup")]
    mended, unsaid = check_calls(calls, SCENARIO.tools, msgs, SCENARIO.ask)
    assert unsaid is None and _args(calls[0])["service"] == "cleaning"
    assert [(m.argument, m.written, m.said) for m in mended] == [("service", "checkup", "cleaning")]
    # the same service in other words leaves the model's choice alone
    calls = [_book(patient_name="ana silva", date="friday", time="ten", service="cleaning")]
    lines = ("a hygiene visit on friday at ten", "it's ana silva")
    assert check_calls(calls, SCENARIO.tools, _turn(*lines), SCENARIO.ask) == ([], None)
    assert _args(calls[0])["service"] == "cleaning"
    # a service the call left out is taken from the caller's words
    calls = [_book(patient_name="ana silva", date="friday", time="ten")]
    mended, unsaid = check_calls(calls, SCENARIO.tools, _turn(*lines), SCENARIO.ask)
    assert unsaid is None and [(m.argument, m.written, m.said) for m in mended] == [("service", "", "cleaning")]
    # seed-1 gen_022/034/038: a caller who never named one is asked, as the policy asks, not booked a
    # checkup they did not ask for (whether the model chose one or left it out)
    for args in ({"service": "checkup"}, {}):
        calls = [_book(patient_name="jia sokolov", date="the 7th", time="ten thirty", **args)]
        msgs = _turn("when are you free the 7th the like name is jia sokolov", "ten thirty would be great")
        unsaid = check_calls(calls, SCENARIO.tools, msgs, SCENARIO.ask)[1]
        assert unsaid is not None and (unsaid.argument, unsaid.question) == (
            "service", SCENARIO.ask["book_appointment.service"])
    # a caller who changes their mind: the latest words win
    calls = [_book(patient_name="ana silva", date="friday", time="ten", service="cleaning")]
    msgs = _turn("a cleaning on friday at ten for ana silva", "actually make it whitening")
    assert check_calls(calls, SCENARIO.tools, msgs, SCENARIO.ask)[1] is None
    assert _args(calls[0])["service"] == "whitening"


def test_a_copied_name_loses_the_callers_hesitations():
    # held-out gen_038: "the name is karin um das" was booked as "Karin Um Das", a patient nobody is
    msgs = _turn("i'm calling to set up an appointment the name is karin um das", "whitening on thursday at noon")
    calls = [_book(patient_name="karin um das", date="thursday", time="noon", service="whitening")]
    mended, unsaid = check_calls(calls, SCENARIO.tools, msgs, SCENARIO.ask)
    assert unsaid is None and _args(calls[0])["patient_name"] == "karin das"
    assert [(m.argument, m.written, m.said) for m in mended] == [("patient_name", "karin um das", "karin das")]
    # nothing but a hesitation, or a day or a time copied from what was said, is no name: asked about
    for name in ("um", "December 7th", "thursday", "noon"):
        calls = [_book(patient_name=name, date="thursday", time="noon")]
        msgs = _turn("um", "thursday at noon", "the next open day is December 7th")
        unsaid = check_calls(calls, SCENARIO.tools, msgs, SCENARIO.ask)[1]
        assert unsaid is not None and unsaid.argument == "patient_name", name


def test_two_different_times_or_none_at_all_are_still_asked_about():
    calls = [{"id": "c", "type": "function", "function": {"name": "move_appointment", "arguments": json.dumps(
        {"patient_name": "amara okafor", "new_date": "wednesday", "new_time": "one"})}}]
    msgs = _turn("a filling on wednesday at ten my name is amara okafor", "could it be eleven or ten")
    unsaid = check_calls(calls, SCENARIO.tools, msgs, SCENARIO.ask)[1]
    assert (unsaid.argument, unsaid.value) == ("new_time", "one") and _args(calls[0])["new_time"] == "one"
    # held-out hw_correction_time: "eleven not ten" says eleven, so the refused "ten" is mended too
    for written in ("one", "ten"):
        calls[0]["function"]["arguments"] = json.dumps(
            {"patient_name": "amara okafor", "new_date": "wednesday", "new_time": written})
        msgs = _turn("a filling on wednesday at ten my name is amara okafor", "sorry i meant eleven not ten")
        assert check_calls(calls, SCENARIO.tools, msgs, SCENARIO.ask)[1] is None
        assert _args(calls[0])["new_time"] == "eleven", written
    # "the 9th" names a day, not nine o'clock
    unsaid = unsaid_argument([_book(patient_name="anita moreau", date="the 9th", time="9")], SCENARIO.tools,
                             _turn("a filling for anita moreau let's say the 9th later in the day"), SCENARIO.ask)
    assert (unsaid.argument, unsaid.value) == ("time", "9")


def test_the_done_event_carries_the_mended_calls_and_says_what_was_taken():
    calls = [_book(patient_name="mikhail fitzgerald", date="the 8th", time="one", service="checkup")]
    result = TurnResult(text="", reasoning="", tool_calls=calls, tool_errors=[], finish_reason="tool_calls")
    msgs = _turn("an exam half past ten would be great", "could we do the 8th", "the name is mikhail fitzgerald")
    [done] = ask_instead(result, SCENARIO.tools, msgs, SCENARIO.ask)
    assert _args(done.result.tool_calls[0])["time"] == "half past ten"
    assert done.result.metrics["said_phrase_repairs"] == [
        {"tool": "book_appointment", "argument": "time", "written": "one", "said": "half past ten"}]
    assert _args(calls[0])["time"] == "one"  # the engine's own result is left as it was


def test_a_tool_can_ask_in_its_own_words_and_the_ask_block_checks_them():
    cancel = [{"id": "c", "type": "function", "function": {"name": "cancel_appointment",
                                                           "arguments": json.dumps({"patient_name": "Maya"})}}]
    unsaid = unsaid_argument(cancel, SCENARIO.tools, _turn("call off my visit please"), SCENARIO.ask)
    assert unsaid.question == SCENARIO.ask["cancel_appointment.patient_name"]
    assert "cancel" in unsaid.question and unsaid.question != SCENARIO.ask["patient_name"]
    for key, error in (("cancel_apointment.patient_name", "no tool named 'cancel_apointment'"),
                       ("cancel_appointment.time", "cancel_appointment has no argument 'time'")):
        with pytest.raises(ScenarioError, match=error):
            parse_scenario({"name": "x", "system_prompt": "hi", "tools": SCENARIO.tools, "ask": {key: "Sorry?"}})


def test_a_grounded_mark_must_be_true_or_a_known_kind_of_phrase():
    tool = {"name": "book", "parameters": {"type": "object", "properties": {"date": {"type": "string",
                                                                                  "x-grounded": "dya"}}}}
    with pytest.raises(ScenarioError, match=r"book\)\.date: x-grounded must be true or one of day, time, choice; got 'dya'"):
        parse_scenario({"name": "x", "system_prompt": "hi", "tools": [tool]})
    tool["parameters"]["properties"]["date"]["x-grounded"] = "day"
    assert parse_scenario({"name": "x", "system_prompt": "hi", "tools": [tool]}).tools[0]["function"]["name"] == "book"


def test_a_name_nobody_said_takes_the_name_the_caller_gave():
    # held-out hw_weekend_request: v7 wrote "sunday", then "December 7th", as the patient's name and was asked again
    msgs = [{"role": "assistant", "content": SCENARIO.greeting},
            {"role": "user", "content": "can i come in for a checkup on saturday morning its oluwaseun adeyemi"},
            {"role": "assistant", "content": "The clinic is closed on weekends. What other day would suit you?"},
            {"role": "user", "content": "oh okay then monday at nine please"}]
    # ... and the AR output (order "verify", session 15) copied the caller's "monday at nine"
    for written in ("sunday", "December 7th", "monday at nine"):
        calls = [_book(patient_name=written, date="monday", time="nine", service="checkup")]
        mended, unsaid = check_calls(calls, SCENARIO.tools, msgs, SCENARIO.ask)
        assert unsaid is None
        assert json.loads(calls[0]["function"]["arguments"])["patient_name"] == "oluwaseun adeyemi"
        assert [(m.argument, m.written, m.said) for m in mended] == [("patient_name", written, "oluwaseun adeyemi")]


def test_part_of_the_given_name_takes_it_whole_and_no_given_name_is_still_asked_for():
    # held-out hw_move_half_past: "tomasz" found no patient ("Did you mean Tomasz Nowak?")
    msgs = [{"role": "user", "content": "hey it's tomasz nowak can i push my checkup to thursday at half past two"}]
    move = {"id": "c", "type": "function", "function": {"name": "move_appointment", "arguments": json.dumps(
        {"patient_name": "tomasz", "new_date": "thursday", "new_time": "half past two"})}}
    assert check_calls([move], SCENARIO.tools, msgs, SCENARIO.ask)[1] is None
    assert json.loads(move["function"]["arguments"])["patient_name"] == "tomasz nowak"
    # a caller who gave no name (only "tomasz", no cue) is asked, as before
    msgs = [{"role": "user", "content": "can i push my checkup to thursday at half past two"}]
    unsaid = unsaid_argument([_book(patient_name="sarah", date="thursday", time="half past two")], SCENARIO.tools,
                             msgs, SCENARIO.ask)
    assert unsaid is not None and unsaid.argument == "patient_name"
    # a whole name the caller said is kept, whatever cue came before it
    msgs = [{"role": "user", "content": "it's maria lopez, a cleaning thursday at half past two"}]
    call = _book(patient_name="maria lopez", date="thursday", time="half past two", service="cleaning")
    assert check_calls([call], SCENARIO.tools, msgs, SCENARIO.ask) == ([], None)


def test_day_words_alone_are_no_name_and_the_callers_latest_time_wins_over_a_listed_one():
    # seed-1 gen_058/gen_035: "december" and "december of december" were booked as patients
    msgs = _turn("i'm calling to book a cavity looked at make it 3:30 could we do the eleventh of december")
    for name in ("december", "december of december", "the eleventh"):
        calls = [_book(patient_name=name, date="the eleventh of december", time="3:30", service="filling")]
        unsaid = check_calls(calls, SCENARIO.tools, msgs, SCENARIO.ask)[1]
        assert unsaid is not None and unsaid.argument == "patient_name", name
    # seed-4 gen_012: "yes", said, was booked as the patient
    msgs_yes = _turn("Hi yes I'm looking to get a filling done make it three thirty pm", "Could we do this friday?")
    for name in ("yes", "hi yes"):
        calls = [_book(patient_name=name, date="friday", time="three thirty pm", service="filling")]
        unsaid = check_calls(calls, SCENARIO.tools, msgs_yes, SCENARIO.ask)[1]
        assert unsaid is not None and unsaid.argument == "patient_name", name
    # seed-1 gen_005: "noon would be great" was booked at 12:30, a time read from the tool's free list
    msgs = _turn("a filling make it 12:00", "let's say the tenth the name is yolanda achterberg")
    taken = "Thursday, December 10th at 12 pm is already taken. Free times that day include 11 am and 12:30 pm."
    msgs += [{"role": "assistant", "tool_calls": [_book(patient_name="yolanda achterberg", date="the tenth",
                                                         time="12:00", service="filling")]},
             {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"error": taken})},
             {"role": "assistant", "content": f"Sorry, {taken} Would one of those work?"},
             {"role": "user", "content": "noon would be great"}]
    calls = [_book(patient_name="yolanda achterberg", date="the tenth", time="12:30", service="filling")]
    mended, unsaid = check_calls(calls, SCENARIO.tools, msgs, SCENARIO.ask)
    assert unsaid is None and [(m.argument, m.written, m.said) for m in mended] == [("time", "12:30", "noon")]
    # the caller's own pick from the list, or newest words that name no time, keep the listed time
    for line in ("12:30 pm would be great", "the later one please"):
        calls = [_book(patient_name="yolanda achterberg", date="the tenth", time="12:30", service="filling")]
        assert check_calls(calls, SCENARIO.tools, msgs[:-1] + [{"role": "user", "content": line}],
                           SCENARIO.ask) == ([], None), line


def test_a_day_or_time_copied_only_in_part_takes_the_callers_whole_phrase():
    # seed-5 gen_016: "eleven thirty am would be great" was booked at 11:00 from the copy "eleven"
    msgs = _turn("i'm looking to get a cavity filled done eleven thirty am would be great",
                 "let's say the tenth of so december", "it's for alice mbeki")
    calls = [_book(patient_name="alice mbeki", date="the tenth of ", time="eleven", service="filling")]
    mended, unsaid = check_calls(calls, SCENARIO.tools, msgs, SCENARIO.ask)
    assert unsaid is None and _args(calls[0])["time"] == "eleven thirty am"
    assert [(m.argument, m.written, m.said) for m in mended] == [("time", "eleven", "eleven thirty am")]
    # a part that means the same, or a time the caller said later on its own, stays as written
    calls = [_book(patient_name="alice mbeki", date="the tenth of ", time="eleven thirty", service="filling")]
    assert check_calls(calls, SCENARIO.tools, msgs, SCENARIO.ask) == ([], None)
    later = _turn("a filling the tenth eleven thirty am would be great", "actually make it eleven", "it's alice mbeki")
    calls = [_book(patient_name="alice mbeki", date="the tenth", time="eleven", service="filling")]
    assert check_calls(calls, SCENARIO.tools, later, SCENARIO.ask)[1] is None
    assert _args(calls[0])["time"] == "eleven"


class WritingBrain(Brain):
    """A brain whose model writes one call in steps, as the engine streams it with call_progress:
    a "tool_args" event per step, then "done". `closed` says whether the decode was stopped early."""

    def __init__(self, steps: list[str], call: dict) -> None:
        super().__init__()
        self.policy = SCENARIO.policy
        self.steps, self.call, self.streamed, self.closed_after = steps, call, 0, None

    @property
    def model_name(self) -> str:
        return "writing"

    async def _attempt(self, messages, params):
        partial = TurnResult(text="", reasoning="", tool_calls=[], tool_errors=[], finish_reason="partial",
                             metrics={"forward_passes": 1})
        try:
            yield TurnEvent("tool_call")
            for step in self.steps:
                self.streamed += 1
                yield TurnEvent("tool_args", step, result=partial)
            yield TurnEvent("done", result=TurnResult(text="", reasoning="", tool_calls=[self.call], tool_errors=[],
                                                      finish_reason="tool_calls", metrics={"forward_passes": 9}))
        finally:
            self.closed_after = self.closed_after or self.streamed


BOOK_STEPS = ['<tool_call>\n{"name": "book_appointment", "arguments": {"patient_name": "sa',
              '<tool_call>\n{"name": "book_appointment", "arguments": {"patient_name": "sarah", "',
              '<tool_call>\n{"name": "book_appointment", "arguments": {"patient_name": "sarah", "date": "wednesday", "',
              '<tool_call>\n{"name": "book_appointment", "arguments": {"patient_name": "sarah", "date": "wednesday", '
              '"time": "nine am", "service": "checkup"}}\n</tool_call>']


async def test_a_name_nobody_said_is_asked_for_as_soon_as_it_is_written_and_the_decode_stops():
    msgs = [{"role": "user", "content": "wednesday at nine am please"}]
    brain = WritingBrain(BOOK_STEPS, _book(patient_name="sarah", date="wednesday", time="nine am", service="checkup"))
    events = [ev async for ev in brain.turn(msgs, tools=SCENARIO.tools)]
    assert [(e.type, e.text) for e in events if e.type != "tool_call"] == [("answer", SCENARIO.ask["patient_name"]),
                                                                          ("done", "")]
    assert brain.closed_after == 2  # stopped at the step that closed the name, not after the whole call
    done = events[-1].result
    assert done.tool_calls == [] and done.metrics["forward_passes"] == 1
    assert done.metrics["asked_instead_of_call"]["before_decoded"] is True
    # A name the caller gave is not asked for: the call is decoded to its end and goes through.
    # (the name question was just asked, so the policy leaves the answer to the model)
    said = msgs + [{"role": "assistant", "content": SCENARIO.ask["patient_name"]},
                   {"role": "user", "content": "a checkup, it's for sarah"}]
    brain = WritingBrain(BOOK_STEPS, _book(patient_name="sarah", date="wednesday", time="nine am", service="checkup"))
    events = [ev async for ev in brain.turn(said, tools=SCENARIO.tools)]
    assert brain.closed_after == len(BOOK_STEPS) and events[-1].result.tool_calls


def test_an_argument_is_decided_early_only_when_every_grounded_one_before_it_is_written():
    from voice_agent.brain.ask_guard import partial_call, unsaid_before_decoded

    msgs = _turn("i'd like a checkup it's for maria lopez")
    head = '<tool_call>\n{"name": "book_appointment", "arguments": {'
    assert partial_call(head[:30]) is None
    assert partial_call(head + '"patient_name": "maria lo') == ("book_appointment", {})
    # the time is unsaid, but the date before it is not written yet: it could be the one asked about
    text = head + '"patient_name": "maria lopez", "time": "one", "'
    assert partial_call(text) == ("book_appointment", {"patient_name": "maria lopez", "time": "one"})
    assert unsaid_before_decoded(*partial_call(text), SCENARIO.tools, msgs, SCENARIO.ask) is None
    full = head + '"patient_name": "maria lopez", "date": "monday", "time": "one", "'
    unsaid = unsaid_before_decoded(*partial_call(full), SCENARIO.tools, msgs, SCENARIO.ask)
    assert unsaid is not None and unsaid.argument == "date"  # "monday" nobody said either, and it comes first
    assert unsaid_before_decoded(*partial_call(full), SCENARIO.tools, msgs, {}) is None  # no ask block: never


def test_a_number_argument_that_is_not_one_is_taken_from_the_caller_or_asked():
    from voice_agent.brain.ask_guard import check_calls

    tools = [{"type": "function", "function": {"name": "book_room", "parameters": {"type": "object", "properties": {
        "guest_name": {"type": "string", "x-kind": "person_name"},
        "phone_number": {"type": "string", "x-kind": "phone_number"},
        "nights": {"type": "integer", "x-kind": "integer"}}}}}]
    ask = {"phone_number": "What's your phone number?", "nights": "How many nights?"}

    def call(args: dict) -> list[dict]:
        return [{"id": "c", "type": "function", "function": {"name": "book_room", "arguments": json.dumps(args)}}]

    said = [{"role": "user", "content": "a room for tom hughes, my number is five five five oh one four two"}]
    calls = call({"guest_name": "tom hughes", "phone_number": "tom hughes", "nights": 2})
    mended, unsaid = check_calls(calls, tools, said, ask)
    assert unsaid is None and json.loads(calls[0]["function"]["arguments"])["phone_number"] == "5550142"
    assert [(m.argument, m.said) for m in mended] == [("phone_number", "5550142")]
    nothing = [{"role": "user", "content": "a room for tom hughes please"}]
    _, unsaid = check_calls(call({"guest_name": "tom hughes", "phone_number": "tom hughes"}), tools, nothing, ask)
    assert unsaid is not None and unsaid.question == "What's your phone number?"
    _, unsaid = check_calls(call({"phone_number": "5550142", "nights": "the ninth"}), tools, said, ask)
    assert unsaid is not None and unsaid.argument == "nights"
    assert check_calls(call({"phone_number": "555 0142", "nights": "3"}), tools, said, ask) == ([], None)


def test_a_number_the_caller_never_said_is_replaced_by_the_one_they_said():
    from voice_agent.brain.ask_guard import check_calls

    tools = [{"type": "function", "function": {"name": "lookup_customer", "parameters": {"type": "object",
              "properties": {"phone_number": {"type": "string", "x-kind": "phone_number"}}}}}]
    ask = {"phone_number": "Can I have the mobile number, please?"}
    said = [{"role": "user", "content": "my data stopped working"}, {"role": "assistant", "content": "The number?"},
            {"role": "user", "content": "It's five five five oh one four two."}]
    calls = [{"id": "c", "type": "function", "function": {"name": "lookup_customer",
                                                          "arguments": json.dumps({"phone_number": "five five four three"})}}]
    mended, unsaid = check_calls(calls, tools, said, ask)
    assert unsaid is None and json.loads(calls[0]["function"]["arguments"]) == {"phone_number": "5550142"}
    calls[0]["function"]["arguments"] = json.dumps({"phone_number": "555 0142"})  # the caller's own, spaced: kept
    assert check_calls(calls, tools, said, ask) == ([], None)


def test_a_call_still_being_written_is_not_read_by_kind():
    from voice_agent.brain.ask_guard import unsaid_before_decoded

    tools = [{"type": "function", "function": {"name": "book_room", "parameters": {"type": "object", "properties": {
        "guest_name": {"type": "string", "x-kind": "person_name", "x-grounded": True},
        "phone_number": {"type": "string", "x-kind": "phone_number"}}}}}]
    ask = {"phone_number": "Your number?", "guest_name": "Your name?"}
    said = [{"role": "user", "content": "a room for liam doherty please"}]
    # half a number, mid-decode: no question and no error (it raised ValueError and cost the turn)
    assert unsaid_before_decoded("book_room", {"guest_name": "liam doherty", "phone_number": "07"}, tools, said, ask) is None
