"""Run scripted calls as text through the live call's turn logic, with no audio.

Each call is a Pipecat pipeline of the live call's own pieces, minus the audio:

    user context aggregator -> EngineLLMService -> TurnCollector (where the TTS would be)
        -> assistant context aggregator

built like `voice_agent/pipeline.py` builds them: the same EngineLLMService arguments (scenario
system prompt for the file's today, tools bound to a fresh backend of the scenario, filler and filler_after_s,
reasoning_effort, max_tokens, temperature: CallOptions fields), an LLMContext with the scenario's
tools, an LLMContextAggregatorPair with the live turn strategies, and a PipelineWorker run by a
WorkerRunner. The context starts with the scenario's greeting as the
assistant's first message, as the live call's context does once the TTS has spoken it.

Each caller line goes in as an `LLMMessagesAppendFrame(run_llm=True)` (what a finished user turn
does after STT). The TurnCollector records what reaches the TTS side (answer text per LLM response,
the filler, tool calls with their results) and ends the turn once every LLM response has ended, no
tool call is still running, and every context sent to the LLM (the user aggregator's, and each one
the assistant aggregator sends back upstream after tool results) has had its response. Tool rounds
are Pipecat's: `run_function_calls` in the service, results back into the context by the assistant
aggregator, which runs the LLM again.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loguru import logger
from pipecat.frames.frames import (
    EndFrame,
    Frame,
    FunctionCallResultFrame,
    FunctionCallsStartedFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMMessagesAppendFrame,
    LLMTextFrame,
    TTSSpeakFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner

from voice_agent.config import CallOptions
from voice_agent.pipeline import _turn_strategies
from voice_agent.scenarios import Scenario
from voice_agent.services.llm import EngineLLMService, tools_schema
from voice_agent.simulate.callfile import Call
from voice_agent.simulate.transcript import CallRecord, Reply, ToolCallRecord, TurnRecord

END_TIMEOUT_S = 30.0


@dataclass(kw_only=True)
class RunOptions(CallOptions):
    """The call's knobs (CallOptions: reasoning_effort, max_tokens, filler_after_s, ...) and the run's own."""

    turn_timeout_s: float = 300.0         # one caller turn, tool rounds included
    # Hear each caller turn's words this long before the turn ends, as the live pipeline's early STT
    # pass does: the turn is decoded ahead and its read-only tools run meanwhile (0: off).
    hear_early_s: float = 0.0


class TurnCollector(FrameProcessor):
    """Stands where the TTS stands: records one caller turn at a time and says when it is over."""

    def __init__(self, filler: str, fallbacks: tuple[str, ...]) -> None:
        super().__init__()
        self.filler = filler.strip()
        self.fallbacks = {f.strip() for f in fallbacks if f.strip()}
        self.turn: TurnRecord | None = None
        self.done = asyncio.Event()
        self._open = 0                  # LLM responses started and not yet ended
        self._running: set[str] = set()  # tool calls started, no result yet
        self._contexts = 0              # contexts sent to the LLM whose response has not started
        self._result_owed = False       # a tool result in, the assistant aggregator's context not yet
        self._parts: list[str] = []
        self._t0 = 0.0

    def begin(self, caller: str) -> TurnRecord:
        self.turn = TurnRecord(caller=caller)
        self._contexts, self._result_owed, self._parts = 1, False, []  # the user aggregator's context
        self._t0 = time.perf_counter()
        self.done.clear()
        return self.turn

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction == FrameDirection.DOWNSTREAM and self.turn is not None:
            self._record(frame, self.turn)
        elif direction == FrameDirection.UPSTREAM and isinstance(frame, LLMContextFrame):
            # the assistant aggregator runs the LLM again (after tool results)
            self._contexts += 1
            self._result_owed = False
        await self.push_frame(frame, direction)
        if self.turn is not None and not (self._open or self._running or self._contexts or self._result_owed):
            self.done.set()

    def _record(self, frame: Frame, turn: TurnRecord) -> None:
        if isinstance(frame, LLMFullResponseStartFrame):
            self._open += 1
            self._contexts = max(0, self._contexts - 1)
            self._parts = []
        elif isinstance(frame, LLMTextFrame):
            self._parts.append(frame.text)
            if turn.first_answer_ms is None and frame.text.strip() and "".join(self._parts).strip() not in self.fallbacks:
                turn.first_answer_ms = round((time.perf_counter() - self._t0) * 1000, 1)
        elif isinstance(frame, LLMFullResponseEndFrame):
            self._open = max(0, self._open - 1)
            text = "".join(self._parts).strip()
            if text:
                turn.replies.append(Reply(text=text, fallback=text in self.fallbacks))
            self._parts = []
        elif isinstance(frame, TTSSpeakFrame):
            if frame.text.strip() == self.filler:
                turn.fillers.append(frame.text)
            else:
                turn.replies.append(Reply(text=frame.text.strip()))
        elif isinstance(frame, FunctionCallsStartedFrame):
            self._running |= {c.tool_call_id for c in frame.function_calls}
        elif isinstance(frame, FunctionCallResultFrame):
            self._running.discard(frame.tool_call_id)
            turn.tool_calls.append(ToolCallRecord(name=frame.function_name, arguments=dict(frame.arguments or {}),
                                                  result=frame.result))
            if frame.result:  # the assistant aggregator runs the LLM again on a non-empty result
                self._result_owed = True


async def run_call(call: Call, scenario: Scenario, engine: Any, today: dt.date, opts: RunOptions,
                   db_dir: Path | None = None, on_turn: Callable[[TurnRecord], None] | None = None) -> CallRecord:
    """One scripted call on a fresh backend (the scenario's, on a store of its own, put in the call's
    `setup` state); never raises for a failing call (the record's `error` says what went wrong)."""
    record = CallRecord(id=call.id)
    t_wall = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="simulate-", dir=db_dir) as tmp:
        try:
            backend = scenario.open_backend(Path(tmp) / "store", today)
            backend.setup(dict(call.setup or {}))
        except Exception as e:  # a pack's setup that refuses the call's block: this call fails, the batch goes on
            record.error = f"setup: {e}"
            return record
        try:
            await _converse(call, scenario, engine, backend, today, opts, record, on_turn)
        except Exception as e:  # one call failing must not stop the batch
            logger.exception(f"simulated call {call.id} failed")
            record.error = f"{type(e).__name__}: {e}"
        try:
            record.state = backend.snapshot()
        except Exception as e:
            logger.exception(f"simulated call {call.id}: snapshot failed")
            record.error = record.error or f"snapshot: {type(e).__name__}: {e}"
        finally:
            backend.close()
    record.wall_s = time.perf_counter() - t_wall
    return record


async def _converse(call: Call, scenario: Scenario, engine: Any, backend: Any, today: dt.date, opts: RunOptions,
                    record: CallRecord, on_turn: Callable[[TurnRecord], None] | None) -> None:
    llm = EngineLLMService(
        engine, system_instruction=scenario.system_prompt_for(today),
        reasoning_effort=opts.reasoning_effort or scenario.reasoning_effort, max_tokens=opts.max_tokens,
        temperature=opts.temperature, tools=scenario.bind_handlers(backend), filler=scenario.filler, filler_after_s=opts.filler_after_s,
        policy=scenario.policy, decode_ahead=opts.hear_early_s > 0, read_only_tools=scenario.read_only)
    greeting = [{"role": "assistant", "content": scenario.greeting}] if scenario.greeting else []
    context = LLMContext(messages=greeting, tools=tools_schema(scenario.tools)) if scenario.tools else LLMContext(greeting)
    # The live call's turn strategies; no VAD analyzer, as there is no audio.
    aggregators = LLMContextAggregatorPair(context, user_params=LLMUserAggregatorParams(
        user_turn_strategies=_turn_strategies(opts)))
    collector = TurnCollector(scenario.filler, (llm.no_answer, llm.apology))
    worker = PipelineWorker(
        Pipeline([aggregators.user(), llm, collector, aggregators.assistant()]),
        params=PipelineParams(enable_metrics=True, enable_usage_metrics=True), idle_timeout_secs=None)

    @worker.event_handler("on_pipeline_error")
    async def _on_error(_worker: PipelineWorker, frame: Any) -> None:
        if collector.turn is not None:
            collector.turn.errors.append(str(getattr(frame, "error", frame)))

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    run = asyncio.create_task(runner.run())
    try:
        if opts.warm_prefill:  # as a live call does while its greeting plays
            await llm.warm(context)
            await llm.brain.warmed()
        for line in call.caller:
            if opts.hear_early_s > 0:
                # the words heard before the end-of-turn wait is over (the early STT pass)
                await llm.speculate(context, line)
                await asyncio.sleep(opts.hear_early_s)
            turn = collector.begin(line)
            record.turns.append(turn)
            n_metrics = len(llm.turn_metrics)
            await worker.queue_frame(LLMMessagesAppendFrame(messages=[{"role": "user", "content": line}], run_llm=True))
            done = asyncio.create_task(collector.done.wait())
            await asyncio.wait({done, run}, timeout=opts.turn_timeout_s, return_when=asyncio.FIRST_COMPLETED)
            turn.metrics = [dict(m) for m in llm.turn_metrics[n_metrics:]]
            if run.done():
                done.cancel()
                run.result()
                raise RuntimeError("the pipeline ended in the middle of the call")
            if not done.done():
                done.cancel()
                turn.timed_out = True
                raise TimeoutError(f"turn {len(record.turns)} did not finish within {opts.turn_timeout_s:.0f} s")
            if on_turn is not None:
                on_turn(turn)
        collector.turn = None
    finally:
        await _hang_up(worker, run)
        stats = getattr(llm.brain, "speculation", None)
        record.speculation = stats.as_dict() if stats is not None and opts.hear_early_s > 0 else None
        lock = getattr(llm.session, "lock", None)
        if lock is not None and lock.acquire(timeout=60):  # a cut-off turn stops at its next block
            lock.release()


async def _hang_up(worker: PipelineWorker, run: asyncio.Task) -> None:
    if not run.done():
        await worker.queue_frame(EndFrame())
        try:
            await asyncio.wait_for(asyncio.shield(run), timeout=END_TIMEOUT_S)
        except TimeoutError:
            await asyncio.wait_for(worker.cancel(), timeout=END_TIMEOUT_S)
            await asyncio.wait_for(run, timeout=END_TIMEOUT_S)
    elif not run.cancelled() and run.exception() is not None:
        logger.warning(f"simulate: the pipeline ended with {run.exception()!r}")
