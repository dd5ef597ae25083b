"""`EngineBrain`: the in-process engine behind a call. The blocking `engine.stream()` runs in a
worker thread and hands its events to asyncio as each block commits; one engine Session per call
keeps the KV cache between turns."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from typing import Any

from loguru import logger

from voice_agent.brain.base import Brain
from voice_agent.brain.types import BrainError, TurnEvent, TurnResult

_DONE = object()


@dataclass
class SpeculationStats:
    """Per call: the speculative prefills of turns not yet decided, and what became of them."""

    started: int = 0   # prefills of the caller's words as heard before the turn was decided (a turn
    #                    heard in several transcripts gets one per transcript; the last is judged)
    skipped: int = 0   # not run: the session was busy with a turn, or the guess would crop its prompt
    used: int = 0      # the turn came with exactly the words prefilled (or began with them)
    wasted: int = 0    # the turn's words differed: the prefill past their common prefix was thrown away
    # Decodes ahead (voice_agent/brain/ahead.py), counted by the service that starts them:
    decoded: int = 0        # the caller's words as heard, decoded before the turn was decided
    decode_used: int = 0    # the turn came with exactly those words: its answer was already decoding
    decode_wasted: int = 0  # it did not (or the call ended first): the decode was cancelled
    # Read-only tools a guess called, run while the caller was still speaking (brain/ahead.py):
    tools_run: int = 0      # run ahead
    tools_used: int = 0     # the turn made the same call: its result was already there
    tools_wasted: int = 0   # the turn did not: the result was dropped
    tools_skipped: int = 0  # not run ahead: the guess called a tool with side effects
    answers_ahead_used: int = 0  # the answer from those results was decoding before the turn asked

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class EngineBrain(Brain):
    def __init__(self, engine: Any, session: Any = None) -> None:
        super().__init__()
        self.engine = engine
        self.session = session if session is not None else engine.session()
        self._warming: concurrent.futures.Future | None = None
        self.warm_tokens = 0  # what the warm prefill put into the session cache
        self.warm_ms: float | None = None
        self.speculation = SpeculationStats()
        self._guess: tuple[list[dict], concurrent.futures.Future] | None = None  # the last one, and its end

    @property
    def model_name(self) -> str:
        return self.engine.model_name

    def warm(self, messages: list[dict], **params: Any) -> None:
        if self._warming is not None or getattr(self.session, "tokens", None) or not hasattr(self.engine, "warm"):
            return  # once per call, never over turns already cached, and only where there is a cache

        def work() -> int:
            t0 = time.perf_counter()
            self.warm_tokens = self.engine.warm(self.session, messages, **_prefill_params(params))
            self.warm_ms = (time.perf_counter() - t0) * 1000
            logger.debug(f"{self.model_name}: warm prefill of {self.warm_tokens} tokens in {self.warm_ms:.0f} ms")
            return self.warm_tokens

        self._warming = self._background("warm prefill", work)  # a failure costs the first turn its prefill

    async def warmed(self) -> None:
        if self._warming is not None:
            await asyncio.shield(asyncio.wrap_future(self._warming))

    def _prefill_ahead(self, messages: list[dict], params: dict) -> None:
        if not hasattr(self.engine, "prefill_ahead"):
            return
        guess = [dict(m) for m in messages]
        before = self._guess[1] if self._guess is not None else None

        def work() -> int | None:
            if before is not None:
                before.result()  # a guess extends the one before it (the turn's first words)
            held = self.engine.prefill_ahead(self.session, guess, **_prefill_params(params))
            if held is None:
                self.speculation.skipped += 1
            else:
                self.speculation.started += 1
            return held

        # The latest guess is the one the turn is judged against; a failed one costs nothing but itself.
        self._guess = (guess, self._background("speculative prefill", work))

    def _background(self, what: str, fn: Any) -> concurrent.futures.Future:
        """Run `fn` in a worker thread; its future holds the result, or None if it raised (logged)."""
        done: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            result = None
            try:
                result = fn()
            except Exception as e:
                logger.warning(f"{self.model_name}: {what} failed ({type(e).__name__}: {e})")
            finally:
                done.set_result(result)

        threading.Thread(target=run, name=f"{what.replace(' ', '-')}-{self.model_name}", daemon=True).start()
        return done

    async def _settle_guess(self, messages: list[dict]) -> None:
        """The turn is decided: was the last guess at it right? (A guess still prefilling holds
        the session; the turn would wait for it anyway.)"""
        if self._guess is None:
            return
        (guess, done), self._guess = self._guess, None
        if await asyncio.shield(asyncio.wrap_future(done)) is None:
            return  # skipped: counted as such
        if messages[: len(guess)] == guess:
            self.speculation.used += 1  # the turn's prompt, or its start (a round's prompt up to its tool call)
        else:
            self.speculation.wasted += 1

    async def _attempt(self, messages: list[dict], params: dict) -> AsyncIterator[TurnEvent]:
        await self.warmed()  # the session is busy until then
        await self._settle_guess(messages)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        stop = threading.Event()

        def put(item: object) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop is gone (pipeline torn down): nobody listens, stop decoding
                stop.set()

        def work() -> None:
            try:
                # `stop` ends the decode after its current pass, also inside a tool call (which
                # streams nothing, so the check below alone could let it run on for a second).
                # call_progress: a call's arguments as they are written (Brain._ask_early).
                gen = self.engine.stream(messages, session=self.session, stop=stop, call_progress=True, **params)
                try:
                    for ev in gen:
                        if stop.is_set():
                            # Barge-in: stop at this committed block. Closing the generator makes
                            # the engine record what the cache holds (Request.abandon), so the next
                            # turn reuses it; the cache is kept, not reset.
                            break
                        put(ev)
                finally:
                    gen.close()  # releases the session lock
            except Exception as e:  # handed to the event loop, which raises it as a BrainError
                put(e)
            finally:
                put(_DONE)

        threading.Thread(target=work, name=f"engine-{self.model_name}", daemon=True).start()
        try:
            while (item := await queue.get()) is not _DONE:
                if isinstance(item, Exception):
                    raise engine_error(item)
                yield _event(item)
        finally:
            stop.set()


def _prefill_params(params: dict) -> dict:
    """The turn parameters that shape a prefill's tokens."""
    return {k: params[k] for k in ("tools", "reasoning_effort") if params.get(k) is not None}


def engine_error(e: Exception) -> BrainError:
    """The engine's exception as a BrainError, decided on the engine's `code`."""
    if isinstance(e, BrainError):
        return e
    from engine import EngineInputError

    if isinstance(e, EngineInputError):
        code = BrainError.CONTEXT_TOO_LONG if e.code == BrainError.CONTEXT_TOO_LONG else BrainError.INVALID_REQUEST
        return BrainError(code, str(e))
    return BrainError(BrainError.ENGINE_ERROR, f"{type(e).__name__}: {e}")


def _event(ev: Any) -> TurnEvent:
    r = ev.result
    result = None if r is None else TurnResult(
        text=r.text, reasoning=r.reasoning, tool_calls=list(r.tool_calls), tool_errors=list(r.tool_errors),
        finish_reason=r.finish_reason, metrics=dict(r.metrics))
    return TurnEvent(ev.type, ev.text, ev.t_ms, result)
