"""A turn decoded ahead (voice_agent/brain/ahead.py through EngineLLMService.speculate): the answer to
the caller's words as heard is decoded before the turn is decided, held unspoken, and used only when
the turn comes with exactly those words; a wrong guess is cancelled and the turn decodes as usual."""

from __future__ import annotations

import asyncio

import pytest
from pipecat.frames.frames import LLMContextFrame, LLMTextFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import run_test

from tests.pipeline_taps import StopAfterResponses
from voice_agent.brain import Brain, TurnResult
from voice_agent.brain.engine_bridge import SpeculationStats
from voice_agent.brain.types import TurnEvent
from voice_agent.services.llm import EngineLLMService

SYSTEM = "You are a receptionist."


class EchoBrain(Brain):
    """Answers "heard: <the caller's last words>" in two pieces, slowly; records every turn it was
    asked for and every turn that was stopped before its end."""

    session = object()  # an in-process brain: decode_ahead applies

    def __init__(self, piece_s: float = 0.05) -> None:
        super().__init__()
        self.speculation = SpeculationStats()
        self.asked: list[str] = []
        self.stopped: list[str] = []
        self.piece_s = piece_s

    @property
    def model_name(self) -> str:
        return "echo"

    async def _attempt(self, messages, params):
        heard = messages[-1]["content"]
        self.asked.append(heard)
        text = f"heard: {heard}"
        finished = False
        try:
            for piece in (text[:6], text[6:]):
                await asyncio.sleep(self.piece_s)
                yield TurnEvent("answer", piece)
            yield TurnEvent("done", result=TurnResult(text, "", [], [], "stop", metrics={"ttft_ms": 50.0}))
            finished = True
        finally:
            if not finished:
                self.stopped.append(heard)


def _service(brain: Brain, decode_ahead: bool = True) -> EngineLLMService:
    return EngineLLMService(brain, system_instruction=SYSTEM, reasoning_effort="instant", decode_ahead=decode_ahead)


async def _turn(llm: EngineLLMService, said: str, guesses: list[str]) -> list[str]:
    """The caller's words heard as `guesses` (one speculate each) before the turn ends with `said`;
    returns the text the service spoke."""
    ctx = LLMContext([])
    for heard in guesses:
        await llm.speculate(ctx, heard)
    await asyncio.sleep(0.2)  # the end-of-turn wait: the guess decodes meanwhile
    ctx.add_message({"role": "user", "content": said})
    tap = StopAfterResponses(1)
    await run_test(Pipeline([llm, tap]), frames_to_send=[LLMContextFrame(ctx)], send_end_frame=False)
    return [f.text for f in tap.frames if isinstance(f, LLMTextFrame)]


async def test_the_turn_heard_is_answered_from_the_decode_that_ran_ahead():
    brain = EchoBrain()
    llm = _service(brain)
    spoken = await _turn(llm, "a cleaning on friday", ["a cleaning", "a cleaning on friday"])
    assert "".join(spoken) == "heard: a cleaning on friday"
    # one decode per guess, the first stopped by the second; the turn itself decoded nothing new
    assert brain.asked == ["a cleaning", "a cleaning on friday"] and brain.stopped == ["a cleaning"]
    assert (brain.speculation.decoded, brain.speculation.decode_used, brain.speculation.decode_wasted) == (2, 1, 1)
    ahead_ms = llm.last_metrics["decoded_ahead_ms"]
    assert 150 <= ahead_ms < 5000  # it started before the 0.2 s end-of-turn wait


async def test_a_wrong_guess_is_cancelled_and_the_turn_decodes_what_was_said():
    brain = EchoBrain(piece_s=0.5)  # still decoding when the turn comes
    llm = _service(brain)
    spoken = await _turn(llm, "a cleaning on friday please", ["a cleaning on friday"])
    assert "".join(spoken) == "heard: a cleaning on friday please"
    assert brain.asked == ["a cleaning on friday", "a cleaning on friday please"]
    assert brain.stopped == ["a cleaning on friday"]  # never spoken, stopped mid-decode
    assert (brain.speculation.decode_used, brain.speculation.decode_wasted) == (0, 1)
    assert "decoded_ahead_ms" not in llm.last_metrics


async def test_without_decode_ahead_the_guess_is_only_prefilled():
    brain = EchoBrain()
    llm = _service(brain, decode_ahead=False)
    assert "".join(await _turn(llm, "hello", ["hello"])) == "heard: hello"
    assert brain.asked == ["hello"] and brain.speculation.decoded == 0


@pytest.mark.slow
async def test_on_the_real_engine_the_answer_decoded_ahead_is_the_answer_decoded_at_the_turn(base_engine):
    # the same call twice, once decoding the heard words ahead and once only at the turn: the
    # same words, and the ahead decode's prompt was cached by the time the turn came
    import datetime as dt

    from pipecat.frames.frames import TranscriptionFrame

    from voice_agent.scenarios import load_scenario
    from voice_agent.services.llm import tools_schema
    from voice_agent.services.speculative_prefill import SpeculativePrefill

    scenario = load_scenario("dental_clinic")
    said = "Hi, do you take Aetna insurance?"
    answers = {}
    for ahead in (True, False):
        llm = EngineLLMService(base_engine, system_instruction=scenario.system_prompt_for(dt.date(2026, 11, 30)),
                               reasoning_effort="instant", max_tokens=12, decode_ahead=ahead)
        ctx = LLMContext(messages=[], tools=tools_schema(scenario.tools))
        await run_test(SpeculativePrefill(llm, ctx), frames_to_send=[TranscriptionFrame(said, "caller", "t")])
        ctx.add_message({"role": "user", "content": said})
        tap = StopAfterResponses(1)
        await run_test(Pipeline([llm, tap]), frames_to_send=[LLMContextFrame(ctx)], send_end_frame=False)
        answers[ahead] = "".join(f.text for f in tap.frames if isinstance(f, LLMTextFrame))
        spec = llm.brain.speculation
        assert (spec.decoded, spec.decode_used) == ((1, 1) if ahead else (0, 0))
        assert ("decoded_ahead_ms" in llm.last_metrics) is ahead
    assert answers[True] == answers[False] and answers[True].strip()


@pytest.mark.slow
def test_the_engine_stops_a_turn_at_the_next_pass_and_the_session_serves_the_next_one(base_engine):
    # a dropped guess must free the session at once, even inside a tool call (which streams nothing)
    import threading

    session = base_engine.session()
    msgs = [{"role": "user", "content": "Book me a cleaning on Friday at ten, my name is Ana Silva."}]
    tools = [{"type": "function", "function": {"name": "book", "parameters": {
        "type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}}]
    stop = threading.Event()
    events = []
    for ev in base_engine.stream(msgs, session=session, tools=tools, max_tokens=24, stop=stop,
                                 tool_choice={"type": "function", "function": {"name": "book"}}):
        events.append(ev.type)
        stop.set()  # after the first event: the call's arguments are never finished
    assert "done" not in events and len(events) <= 2
    assert not session.lock.locked()
    assert list(base_engine.stream(msgs, session=session, max_tokens=4))[-1].type == "done"
