"""`EngineBrain`: the in-process engine behind a call. Its turns are requests to the process's one
continuous-batching scheduler (engine/serve/scheduler.py), whose thread hands each block's events to
asyncio as it commits; one engine Session per call keeps the KV cache between turns."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from typing import Any

from loguru import logger

from voice_agent.brain.base import Brain
from voice_agent.brain.types import BrainError, TurnEvent, TurnResult
from voice_agent.engine_host import call_scheduler


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
    """A call's brain on the process's engine. Its turns, its warm-up and its guesses go to the
    engine's one scheduler (`call_scheduler`), batched with every other call's."""

    def __init__(self, engine: Any, session: Any = None, scheduler: Any = None) -> None:
        super().__init__()
        self.engine = engine
        self.session = session if session is not None else engine.session()
        self.scheduler = scheduler if scheduler is not None else call_scheduler(engine)
        self._warming: concurrent.futures.Future | None = None
        self.warm_tokens = 0  # what the warm prefill put into the session cache
        self.warm_ms: float | None = None
        self.speculation = SpeculationStats()
        self._guess: tuple[list[dict], concurrent.futures.Future, Any] | None = None  # the last one, its end, its ticket

    @property
    def model_name(self) -> str:
        return self.engine.model_name

    def warm(self, messages: list[dict], **params: Any) -> None:
        if self._warming is not None or getattr(self.session, "tokens", None) or not hasattr(self.engine, "warm_request"):
            return  # once per call, never over turns already cached, and only where there is a cache
        t0 = time.perf_counter()

        def warmed(held: int | None) -> None:
            self.warm_tokens = held or 0
            self.warm_ms = (time.perf_counter() - t0) * 1000
            logger.debug(f"{self.model_name}: warm prefill of {self.warm_tokens} tokens in {self.warm_ms:.0f} ms")

        # A failure costs the first turn its prefill, nothing more.
        self._warming = self._prefill("warm prefill", lambda: self.engine.warm_request(
            self.session, messages, **_prefill_params(params)), guess=False, then=warmed)[0]

    async def warmed(self) -> None:
        if self._warming is not None:
            await asyncio.shield(asyncio.wrap_future(self._warming))

    def _prefill_ahead(self, messages: list[dict], params: dict) -> None:
        if not hasattr(self.engine, "guess_request"):
            return
        guess = [dict(m) for m in messages]

        def counted(held: int | None) -> None:
            if held is None:
                self.speculation.skipped += 1
            else:
                self.speculation.started += 1

        # The latest guess is the one the turn is judged against; it extends the one before it (the
        # scheduler prefills a call's requests in order). A failed one costs nothing but itself.
        self._guess = (guess, *self._prefill("speculative prefill", lambda: self.engine.guess_request(
            self.session, guess, **_prefill_params(params)), guess=True, then=counted))

    def _prefill(self, what: str, make: Any, *, guess: bool, then: Any) -> tuple[concurrent.futures.Future, Any]:
        """Submit a prefill without a turn: (a future of the cached length, or None if it was skipped
        or failed (logged); the scheduler's ticket, None if it never got one). `then` sees the value first."""
        out: concurrent.futures.Future = concurrent.futures.Future()

        def settle(held: int | None) -> None:
            try:
                then(held)
            finally:
                out.set_result(held)

        try:
            ticket = self.scheduler.submit_prefill(make(), guess=guess)
        except Exception as e:
            logger.warning(f"{self.model_name}: {what} failed ({type(e).__name__}: {e})")
            settle(None)
            return out, None

        def finished(f: concurrent.futures.Future) -> None:
            e = f.exception()
            if e is not None:
                logger.warning(f"{self.model_name}: {what} failed ({type(e).__name__}: {e})")
            settle(None if e is not None else f.result())

        ticket.done.add_done_callback(finished)
        return out, ticket

    def _settle_guess(self, messages: list[dict]) -> None:
        """The turn is decided: the last guess at it, if still queued, is dropped (the turn prefills
        those words itself; waiting for it would only delay the turn), and is judged once it ends."""
        if self._guess is None:
            return
        (guess, done, ticket), self._guess = self._guess, None
        if ticket is not None:
            ticket.cancel()  # admitted already: it ends first, as the scheduler keeps a call's requests in order

        def judge(f: concurrent.futures.Future) -> None:
            if f.result() is None:
                return  # skipped or dropped: counted as skipped
            if messages[: len(guess)] == guess:
                self.speculation.used += 1  # the turn's prompt, or its start (a round's prompt up to its tool call)
            else:
                self.speculation.wasted += 1

        done.add_done_callback(judge)

    @property
    def backlogged(self) -> bool:
        """Turns of this process are waiting for the engine: guesses should give way."""
        return bool(self.scheduler.backlogged)

    async def _attempt(self, messages: list[dict], params: dict) -> AsyncIterator[TurnEvent]:
        # No waiting for the warm-up or a guess: the scheduler runs a call's requests in order.
        self._settle_guess(messages)
        try:
            req = self.engine.prepare(messages, session=self.session, call_progress=True, **params)
        except Exception as e:
            raise engine_error(e) from None
        if not req.call_announced:  # a forced call is known before its prompt is prefilled: say so now
            req.call_announced = True
            yield TurnEvent("tool_call", "", req._ms())
        try:
            ticket = self.scheduler.submit(req, asyncio.get_running_loop())
        except Exception as e:
            raise engine_error(e) from None
        if ticket.waits:
            yield TurnEvent("queued", "", req._ms())  # behind other calls' turns: the answer will be late
        try:
            while True:
                item = await ticket.get()
                if item.kind == "event":
                    yield _event(item.event)
                elif item.kind == "done":
                    yield TurnEvent("done", "", req._ms(), _result(item.result))
                    return
                elif item.kind == "error":
                    raise engine_error(item.error)
        finally:
            # Barge-in, or the pipeline torn down: the scheduler drops the row before its next step.
            # The call's cache keeps what it held before this turn; the next turn reuses its prefix.
            if not ticket.finished:
                ticket.cancel()


def _prefill_params(params: dict) -> dict:
    """The turn parameters that shape a prefill's tokens."""
    return {k: params[k] for k in ("tools", "reasoning_effort") if params.get(k) is not None}


def engine_error(e: BaseException) -> BrainError:
    """The engine's exception as a BrainError, decided on the engine's `code`."""
    if isinstance(e, BrainError):
        return e
    from engine import EngineInputError, Rejected

    if isinstance(e, Rejected):
        return BrainError(BrainError.OVERLOADED, str(e))

    if isinstance(e, EngineInputError):
        code = BrainError.CONTEXT_TOO_LONG if e.code == BrainError.CONTEXT_TOO_LONG else BrainError.INVALID_REQUEST
        return BrainError(code, str(e))
    return BrainError(BrainError.ENGINE_ERROR, f"{type(e).__name__}: {e}")


def _event(ev: Any) -> TurnEvent:
    return TurnEvent(ev.type, ev.text, ev.t_ms, _result(ev.result))


def _result(r: Any) -> TurnResult | None:
    return None if r is None else TurnResult(
        text=r.text, reasoning=r.reasoning, tool_calls=list(r.tool_calls), tool_errors=list(r.tool_errors),
        finish_reason=r.finish_reason, metrics=dict(r.metrics))
