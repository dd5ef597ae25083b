"""Read-only tools run while the caller is still speaking (voice_agent/brain/ahead.py through
EngineLLMService.speculate): a guess that calls only tools marked read-only runs them at once and
decodes the answer from their results; the turn that comes with the same words uses both. A tool
with side effects never runs ahead, and a guess the turn does not confirm is dropped and counted."""

from __future__ import annotations

import asyncio
import json

from pipecat.frames.frames import FunctionCallResultFrame, LLMContextFrame, LLMTextFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMAssistantAggregator
from pipecat.tests.utils import run_test

from tests.pipeline_taps import StopAfterResponses
from voice_agent.brain import Brain, TurnResult
from voice_agent.brain.engine_bridge import SpeculationStats
from voice_agent.brain.types import TurnEvent
from voice_agent.services.llm import EngineLLMService, tools_schema

TOOLS = [{"type": "function", "function": {"name": name, "description": name, "parameters": {
    "type": "object", "properties": {"day": {"type": "string"}}, "required": ["day"]}}}
    for name in ("find_free_slots", "book_appointment")]


class DeskBrain(Brain):
    """Calls find_free_slots (or book_appointment when the caller says "book") for the last word;
    after a result, reads it back. Records each round it was asked for."""

    session = object()  # an in-process brain: decode_ahead applies

    def __init__(self) -> None:
        super().__init__()
        self.speculation = SpeculationStats()
        self.rounds: list[str] = []
        self.prefilled: list[list[dict]] = []

    def _prefill_ahead(self, messages, params):
        self.prefilled.append(messages)

    @property
    def model_name(self) -> str:
        return "desk"

    async def _attempt(self, messages, params):
        last = messages[-1]
        await asyncio.sleep(0.02)
        if last["role"] == "tool":
            self.rounds.append(f"answer {last['content']}")
            text = f"I have {json.loads(last['content'])['free']}."
            yield TurnEvent("answer", text)
            yield TurnEvent("done", result=TurnResult(text, "", [], [], "stop"))
            return
        words = last["content"].split()
        name = "book_appointment" if "book" in words else "find_free_slots"
        self.rounds.append(f"call {name} {words[-1]}")
        call = {"id": f"call_{words[-1]}", "type": "function",
                "function": {"name": name, "arguments": json.dumps({"day": words[-1]})}}
        yield TurnEvent("tool_call")
        yield TurnEvent("done", result=TurnResult("", "", [call], [], "tool_calls"))


class Desk:
    def __init__(self) -> None:
        self.ran: list[tuple[str, str]] = []

    def find_free_slots(self, args: dict) -> dict:
        self.ran.append(("find_free_slots", args["day"]))
        return {"free": f"9 am on {args['day']}"}

    def book_appointment(self, args: dict) -> dict:
        self.ran.append(("book_appointment", args["day"]))
        return {"free": f"you booked on {args['day']}"}


async def _turn(said: str, guesses: list[str]) -> tuple[DeskBrain, Desk, list[str]]:
    brain, desk = DeskBrain(), Desk()
    llm = EngineLLMService(brain, system_instruction="You are a receptionist.", reasoning_effort="instant",
                           decode_ahead=True, read_only_tools={"find_free_slots"}, filler="One moment.",
                           tools={"find_free_slots": desk.find_free_slots, "book_appointment": desk.book_appointment})
    ctx = LLMContext([], tools=tools_schema(TOOLS))
    for heard in guesses:
        await llm.speculate(ctx, heard)
    await asyncio.sleep(0.3)  # the end-of-turn wait: the guess, its tool and its answer run meanwhile
    ran_before_turn = list(desk.ran)
    ctx.add_message({"role": "user", "content": said})
    tap = StopAfterResponses(2)
    await run_test(Pipeline([llm, tap, LLMAssistantAggregator(ctx)]), frames_to_send=[LLMContextFrame(ctx)],
                   send_end_frame=False)
    results = [f.result for f in tap.frames if isinstance(f, FunctionCallResultFrame)]
    assert len(results) == 1
    desk.before_turn = ran_before_turn  # type: ignore[attr-defined]
    return brain, desk, [f.text for f in tap.frames if isinstance(f, LLMTextFrame)]


async def test_a_read_only_call_heard_early_runs_ahead_and_its_answer_is_decoded_before_the_turn():
    brain, desk, spoken = await _turn("anything on friday", ["anything on friday"])
    assert "".join(spoken) == "I have 9 am on friday."
    assert desk.before_turn == [("find_free_slots", "friday")]  # ran while the caller was still speaking
    assert desk.ran == [("find_free_slots", "friday")]  # and not again at the turn
    assert brain.rounds == ["call find_free_slots friday", 'answer {"free": "9 am on friday"}']
    s = brain.speculation
    assert (s.tools_run, s.tools_used, s.tools_wasted, s.tools_skipped) == (1, 1, 0, 0)
    assert (s.decode_used, s.answers_ahead_used) == (1, 1)
    assert brain.prefilled == []  # a read-only call's answer decoded ahead: nothing else to prefill


async def test_a_tool_with_side_effects_never_runs_ahead():
    brain, desk, spoken = await _turn("please book friday", ["please book friday"])
    assert desk.before_turn == []  # the guess stopped at the call
    assert desk.ran == [("book_appointment", "friday")]  # made once, by the turn
    # ... and the prompt up to that call was prefilled while the caller was still speaking
    (prefilled,) = brain.prefilled
    assert prefilled[-2]["content"] == "please book friday"
    assert prefilled[-1]["tool_calls"][0]["function"]["name"] == "book_appointment"
    assert "".join(spoken) == "I have you booked on friday."
    s = brain.speculation
    assert (s.tools_run, s.tools_used, s.tools_skipped, s.answers_ahead_used) == (0, 0, 1, 0)


async def test_a_read_only_result_the_turn_does_not_confirm_is_dropped_and_counted():
    brain, desk, spoken = await _turn("anything on saturday", ["anything on friday"])
    assert "".join(spoken) == "I have 9 am on saturday."  # never the friday result
    assert desk.ran == [("find_free_slots", "friday"), ("find_free_slots", "saturday")]
    s = brain.speculation
    assert (s.tools_run, s.tools_used, s.tools_wasted, s.answers_ahead_used) == (1, 0, 1, 0)
