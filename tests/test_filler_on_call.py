"""The filler is spoken the moment the model opens a tool call, once per caller turn
(voice_agent/services/llm.py), from the engine's "tool_call" stream event (engine/chat_format.py)."""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest
from pipecat.frames.frames import FunctionCallResultFrame, LLMContextFrame, TTSSpeakFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMAssistantAggregator
from pipecat.tests.utils import run_test

from engine.chat_format import OutputParser
from tests.dental_pack import ClinicDB
from tests.pipeline_taps import StopAfterResponses
from voice_agent.brain import Brain, TurnResult
from voice_agent.brain.types import TurnEvent
from voice_agent.scenarios import load_scenario
from voice_agent.services.llm import EngineLLMService, tools_schema

SCENARIO = load_scenario("dental_clinic")
TODAY = dt.date(2026, 11, 30)


def test_the_parser_says_when_a_call_opens_even_across_blocks():
    p = OutputParser()
    events = p.feed("Sure. <tool") + p.feed("_call>\n{\"name\": ") + p.feed("\"x\"}\n</tool_call>")
    assert events == [("answer", "Sure. "), ("tool_call", "")]
    assert p.tool_text.startswith("<tool_call>")


class CallingBrain(Brain):
    """Turn 1 opens a call and makes it; the round after the result answers."""

    def __init__(self, call: dict) -> None:
        super().__init__()
        self.call, self.rounds = call, 0

    @property
    def model_name(self) -> str:
        return "calling"

    async def _attempt(self, messages, params):
        self.rounds += 1
        if messages[-1]["role"] == "tool":
            yield TurnEvent("answer", "You're booked.")
            yield TurnEvent("done", result=TurnResult("You're booked.", "", [], [], "stop"))
            return
        yield TurnEvent("tool_call")
        yield TurnEvent("done", result=TurnResult("", "", [self.call], [], "tool_calls"))


# A fast tool under a long filler_after_s gets the filler only because the call opened; a slow one
# under a short filler_after_s would get a second one without the per-round hold.
@pytest.mark.parametrize("tool_s, filler_after_s", [(0.0, 10.0), (0.3, 0.05)])
async def test_the_filler_comes_when_the_call_opens_and_a_slow_tool_adds_no_second_one(tmp_path, tool_s,
                                                                                      filler_after_s):
    db = ClinicDB(tmp_path / "clinic.sqlite", today=TODAY)
    day, t = "2026-12-02", "9 am"
    args = {"patient_name": "Jordan Lee", "date": day, "time": t, "service": "checkup"}
    call = {"id": "call_1", "type": "function", "function": {"name": "book_appointment", "arguments": json.dumps(args)}}

    def slow_book(a: dict) -> dict:
        time.sleep(tool_s)
        return db.book_appointment(a)

    llm = EngineLLMService(CallingBrain(call), system_instruction=SCENARIO.system_prompt_for(TODAY),
                           reasoning_effort="instant", tools={"book_appointment": slow_book},
                           filler=SCENARIO.filler, filler_after_s=filler_after_s, policy=SCENARIO.policy)
    ctx = LLMContext([{"role": "user", "content": "book jordan lee for a checkup on 2026-12-02 at 9 am"}],
                     tools=tools_schema(SCENARIO.tools))
    tap = StopAfterResponses(2)
    await run_test(Pipeline([llm, tap, LLMAssistantAggregator(ctx)]), frames_to_send=[LLMContextFrame(ctx)],
                   send_end_frame=False)
    kinds = [type(f).__name__ for f in tap.frames if isinstance(f, TTSSpeakFrame | FunctionCallResultFrame)]
    assert kinds == ["TTSSpeakFrame", "FunctionCallResultFrame"]  # the filler came before the result, once
    assert llm.fillers_spoken == 1
    assert db.appointments("Jordan Lee")
