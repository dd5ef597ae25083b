"""`EngineBrain`: the in-process engine behind a call. The blocking `engine.stream()` runs in a
worker thread and hands its events to asyncio as each block commits; one engine Session per call
keeps the KV cache between turns."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from loguru import logger

from voice_agent.brain.base import Brain
from voice_agent.brain.types import BrainError, TurnEvent, TurnResult

_DONE = object()


class EngineBrain(Brain):
    def __init__(self, engine: Any, session: Any = None) -> None:
        super().__init__()
        self.engine = engine
        self.session = session if session is not None else engine.session()
        self._warming: concurrent.futures.Future | None = None
        self.warm_tokens = 0  # what the warm prefill put into the session cache
        self.warm_ms: float | None = None

    @property
    def model_name(self) -> str:
        return self.engine.model_name

    def warm(self, messages: list[dict], **params: Any) -> None:
        if self._warming is not None or self.session.tokens:
            return  # once per call, and never over turns already cached
        kw = {k: params[k] for k in ("tools", "reasoning_effort") if params.get(k) is not None}
        self._warming = concurrent.futures.Future()

        def work() -> None:
            t0 = time.perf_counter()
            try:
                self.warm_tokens = self.engine.warm(self.session, messages, **kw)
                self.warm_ms = (time.perf_counter() - t0) * 1000
                logger.debug(f"{self.model_name}: warm prefill of {self.warm_tokens} tokens in {self.warm_ms:.0f} ms")
            except Exception as e:  # a failed warm-up costs the first turn its prefill, nothing more
                logger.warning(f"{self.model_name}: warm prefill failed ({type(e).__name__}: {e})")
            finally:
                self._warming.set_result(None)

        threading.Thread(target=work, name=f"warm-{self.model_name}", daemon=True).start()

    async def _attempt(self, messages: list[dict], params: dict) -> AsyncIterator[TurnEvent]:
        if self._warming is not None and not self._warming.done():
            await asyncio.shield(asyncio.wrap_future(self._warming))  # the session is busy until then
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
                gen = self.engine.stream(messages, session=self.session, **params)
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
