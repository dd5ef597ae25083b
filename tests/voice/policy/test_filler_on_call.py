"""The filler is spoken only when the answer is late: a tool call is under way (the engine's
"tool_call" stream event, engine/text/chat_format.py) and no answer text came `filler_after_s` after the
caller's turn reached the LLM; once per caller turn (voice_agent/services/llm.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time

import pytest
from pipecat.frames.frames import FunctionCallResultFrame, LLMContextFrame, TTSSpeakFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMAssistantAggregator
from pipecat.tests.utils import run_test

from engine.text.chat_format import OutputParser
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


def _booking(tmp_path, tool_s: float):
    db = ClinicDB(tmp_path / "clinic.sqlite", today=TODAY)
    args = {"patient_name": "Jordan Lee", "date": "2026-12-02", "time": "9 am", "service": "checkup"}
    call = {"id": "call_1", "type": "function", "function": {"name": "book_appointment", "arguments": json.dumps(args)}}

    def slow_book(a: dict) -> dict:
        time.sleep(tool_s)
        return db.book_appointment(a)

    return db, call, slow_book


async def _run(brain: Brain, book, filler_after_s: float) -> tuple[EngineLLMService, list]:
    llm = EngineLLMService(brain, system_instruction=SCENARIO.system_prompt_for(TODAY),
                           reasoning_effort="instant", tools={"book_appointment": book},
                           filler=SCENARIO.filler, filler_after_s=filler_after_s, policy=SCENARIO.policy)
    ctx = LLMContext([{"role": "user", "content": "book jordan lee for a checkup on 2026-12-02 at 9 am"}],
                     tools=tools_schema(SCENARIO.tools))
    tap = StopAfterResponses(2)
    await run_test(Pipeline([llm, tap, LLMAssistantAggregator(ctx)]), frames_to_send=[LLMContextFrame(ctx)],
                   send_end_frame=False)
    return llm, [f for f in tap.frames if isinstance(f, TTSSpeakFrame | FunctionCallResultFrame)]


# A slow tool outlasts a short filler_after_s: the filler comes before its result, once, though the
# turn then has two rounds. A fast tool and answer under a long filler_after_s need none.
@pytest.mark.parametrize("tool_s, filler_after_s, fillers", [(0.3, 0.05, 1), (0.0, 10.0, 0)])
async def test_the_filler_comes_only_when_the_answer_is_late(tmp_path, tool_s, filler_after_s, fillers):
    db, call, book = _booking(tmp_path, tool_s)
    llm, frames = await _run(CallingBrain(call), book, filler_after_s)
    kinds = [type(f).__name__ for f in frames]
    assert kinds == ["TTSSpeakFrame"] * fillers + ["FunctionCallResultFrame"]
    assert llm.fillers_spoken == fillers
    assert db.appointments("Jordan Lee")


class AnsweringBrain(Brain):
    """A slow turn that asks a question and calls nothing."""

    @property
    def model_name(self) -> str:
        return "asking"

    async def _attempt(self, messages, params):
        await asyncio.sleep(0.3)
        yield TurnEvent("answer", "What time suits you?")
        yield TurnEvent("done", result=TurnResult("What time suits you?", "", [], [], "stop"))


async def test_a_turn_that_asks_without_a_tool_gets_no_filler_however_slow(tmp_path):
    _, _, book = _booking(tmp_path, 0.0)
    llm = EngineLLMService(AnsweringBrain(), system_instruction=SCENARIO.system_prompt_for(TODAY),
                           reasoning_effort="instant", tools={"book_appointment": book},
                           filler=SCENARIO.filler, filler_after_s=0.05)
    ctx = LLMContext([{"role": "user", "content": "can i book something"}], tools=tools_schema(SCENARIO.tools))
    tap = StopAfterResponses(1)
    await run_test(Pipeline([llm, tap, LLMAssistantAggregator(ctx)]), frames_to_send=[LLMContextFrame(ctx)],
                   send_end_frame=False)
    assert llm.fillers_spoken == 0
    assert not [f for f in tap.frames if isinstance(f, TTSSpeakFrame)]
