"""`EngineBrain`: the in-process engine behind a call. The blocking `engine.stream()` runs in a
worker thread and hands its events to asyncio as each block commits; one engine Session per call
keeps the KV cache between turns."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

from voice_agent.brain.base import Brain
from voice_agent.brain.types import BrainError, TurnEvent, TurnResult

_DONE = object()


class EngineBrain(Brain):
    def __init__(self, engine: Any, session: Any = None) -> None:
        super().__init__()
        self.engine = engine
        self.session = session if session is not None else engine.session()

    @property
    def model_name(self) -> str:
        return self.engine.model_name

    async def _attempt(self, messages: list[dict], params: dict) -> AsyncIterator[TurnEvent]:
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
