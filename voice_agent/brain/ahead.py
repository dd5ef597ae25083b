"""A turn decoded ahead: the brain's first round over the caller's words as heard so far, started
before the turn is decided and held, unspoken, until it is.

The turn strategy asks the LLM only after the VAD's own 0.2 s stop and its own wait (0.15 s for
words that end a sentence, services/turn_text.py; 0.2 s or more otherwise), and the words are
there sooner: the early STT pass runs inside the VAD's wait, and its words come as a guess when it
finishes first. Decoding from them at once puts the model's first passes inside those waits. Nothing
leaves this object until the turn comes: events are buffered, and tool calls run only when the
service acts on the turn's "done" event, so a guess the turn does not confirm costs compute, never
a spoken word or a booking. A guess is used only when the turn's messages and parameters are
exactly those it decoded; otherwise it is cancelled (the engine stops after its current pass and
keeps the cache, as on barge-in) and the turn decodes as usual.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from voice_agent.brain.base import Brain
from voice_agent.brain.types import TurnEvent

_END = object()


class TurnAhead:
    """One guess at a turn, decoding in a task of its own from the moment it is made. `after`: the
    guess it replaces, cancelled first (the call's session serves one decode at a time)."""

    def __init__(self, brain: Brain, messages: list[dict], params: dict[str, Any],
                 after: TurnAhead | None = None) -> None:
        self.messages, self.params = [dict(m) for m in messages], dict(params)
        self.started = time.perf_counter()
        self._events: asyncio.Queue = asyncio.Queue()
        self._task = asyncio.create_task(self._run(brain, after), name="turn-ahead")

    async def _run(self, brain: Brain, after: TurnAhead | None) -> None:
        try:
            if after is not None:
                await after.cancel()
            async with contextlib.aclosing(brain.turn(self.messages, **self.params)) as events:
                async for ev in events:
                    self._events.put_nowait(ev)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # raised where the turn reads it, as a turn's own error would be
            self._events.put_nowait(e)
        finally:
            self._events.put_nowait(_END)

    def matches(self, messages: list[dict], params: dict[str, Any]) -> bool:
        return messages == self.messages and params == self.params

    def ahead_ms(self) -> float:
        """How long ago the decode started (at the moment the turn takes it: how far ahead it ran)."""
        return (time.perf_counter() - self.started) * 1000

    async def events(self) -> AsyncIterator[TurnEvent]:
        """The turn's events: those buffered so far, then the rest as they come."""
        while (item := await self._events.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            yield item

    async def cancel(self) -> None:
        """Stop the decode (a wrong guess, or the call ended) and wait until the session is free."""
        if not self._task.done():
            self._task.cancel()
        await asyncio.wait({self._task})  # never raises the task's error; our own cancel still propagates


__all__ = ["TurnAhead"]
