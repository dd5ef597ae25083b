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
from voice_agent.brain.ask_guard import unsaid_argument
from voice_agent.brain.types import TurnEvent
from voice_agent.clinic_db import ClinicDB
from voice_agent.scenarios import ScenarioError, load_scenario, parse_scenario
from voice_agent.services.llm import EngineLLMService, tools_schema

SCENARIO = load_scenario("dental_receptionist")
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
    # The caller's words in another order are said; a word nobody used is not.
    assert unsaid_argument([_book(patient_name="lopez maria", date="friday", time="later in the day")],
                           SCENARIO.tools, msgs, SCENARIO.ask) is None
    msgs.append({"role": "user", "content": "make it two thirty"})
    assert unsaid_argument([_book(patient_name="Maria Lopez", date="friday", time="two thirty")], SCENARIO.tools,
                           msgs, SCENARIO.ask) is None
    assert unsaid_argument([_book(patient_name="Maya", date="friday", time="one")], SCENARIO.tools, msgs, {}) is None


async def test_the_service_asks_and_books_nothing_when_the_call_invents_a_name(tmp_path):
    db = ClinicDB(tmp_path / "clinic.sqlite", today=TODAY)
    brain = ScriptedBrain([_book(patient_name="sarah", date="2026-12-02", time="9 am")])
    llm = EngineLLMService(brain, system_instruction=SCENARIO.system_prompt_for(TODAY), reasoning_effort="instant",
                           tools=SCENARIO.bind_handlers(db), ask_for=SCENARIO.ask)
    ctx = LLMContext([{"role": "user", "content": "a checkup on wednesday at nine am please"}],
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
    brain.ask_for = SCENARIO.ask
    msgs = [{"role": "user", "content": "a checkup on 2026-12-02 at 9 am please"}]
    events = [ev async for ev in brain.turn(msgs, tools=SCENARIO.tools)]
    assert [(e.type, e.text) for e in events] == [("answer", SCENARIO.ask["patient_name"]), ("done", "")]
    done = events[-1].result
    assert done.tool_calls == [] and done.text == SCENARIO.ask["patient_name"] and done.finish_reason == "stop"
    brain.ask_for, brain.turns = {}, 0  # without the block, the call goes through as the model made it
    events = [ev async for ev in brain.turn(msgs, tools=SCENARIO.tools)]
    assert [e.type for e in events] == ["done"] and events[-1].result.tool_calls
