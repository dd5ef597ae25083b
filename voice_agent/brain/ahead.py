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

A guess that ends in calls to read-only tools only (a pack's `read_only: true`: searching free
times, looking a customer up) goes one step further with `run_tools`: those tools run at once, and
the round that answers from their results decodes ahead too (`follow`), so when the turn comes
with these words its answer is already decoding. A tool with side effects never runs ahead: the
guess stops at its call, which runs only when the turn takes it, and the prompt up to that call is
prefilled meanwhile, so the answer round after the tool has only the result to read.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from voice_agent.brain.base import Brain
from voice_agent.brain.types import TurnEvent

_END = object()
# Runs a guess's read-only calls: (calls) -> {call id: result}, or None when any call may not run
# ahead (the service's, which knows the tools and which have no side effects).
ToolsAhead = Callable[[list[dict]], Awaitable[dict[str, Any] | None]]
# Fits the parameters of the round after a tool result (the service's tool_choice rules).
ParamsAfterTools = Callable[[list[dict], dict[str, Any]], dict[str, Any]]


class TurnAhead:
    """One guess at a turn, decoding in a task of its own from the moment it is made. `after`: the
    guess it replaces, cancelled first (the call's session serves one decode at a time)."""

    def __init__(self, brain: Brain, messages: list[dict], params: dict[str, Any],
                 after: TurnAhead | None = None, run_tools: ToolsAhead | None = None,
                 params_after_tools: ParamsAfterTools | None = None) -> None:
        self.messages, self.params = [dict(m) for m in messages], dict(params)
        self.after_tools = bool(messages) and messages[-1].get("role") == "tool"  # an answer round (`follow`)
        self.started = time.perf_counter()
        self.consumed = False  # the turn read every event of this round
        # The read-only calls run ahead ({call id: result}) and the answer round decoding from them;
        # `follow_ready` is set once it is known whether there is one.
        self.tool_results: dict[str, Any] = {}
        self.tool_calls: list[dict] = []
        self.follow: TurnAhead | None = None
        self.follow_ready = asyncio.Event()
        self._events: asyncio.Queue = asyncio.Queue()
        self._task = asyncio.create_task(self._run(brain, after, run_tools, params_after_tools), name="turn-ahead")

    async def _run(self, brain: Brain, after: TurnAhead | None, run_tools: ToolsAhead | None,
                   params_after_tools: ParamsAfterTools | None) -> None:
        result = None
        try:
            if after is not None:
                await after.cancel()
            async with contextlib.aclosing(brain.turn(self.messages, **self.params)) as events:
                async for ev in events:
                    if ev.type == "done":
                        result = ev.result
                    self._events.put_nowait(ev)
        except asyncio.CancelledError:
            self.follow_ready.set()
            raise
        except Exception as e:  # raised where the turn reads it, as a turn's own error would be
            self._events.put_nowait(e)
        finally:
            self._events.put_nowait(_END)
        try:
            if result is not None and result.tool_calls and run_tools is not None and params_after_tools is not None:
                await self._answer_ahead(brain, result.tool_calls, run_tools, params_after_tools)
        finally:
            self.follow_ready.set()

    async def _answer_ahead(self, brain: Brain, calls: list[dict], run_tools: ToolsAhead,
                            params_after_tools: ParamsAfterTools) -> None:
        results = await run_tools(calls)
        call = {"role": "assistant", "content": "", "tool_calls": calls}
        if results is None:
            # A call with side effects waits for the turn; the prompt up to it need not.
            brain.prefill_ahead([*self.messages, call], **self.params)
            return
        self.tool_calls, self.tool_results = calls, results
        messages = [*self.messages, call,
                    *({"role": "tool", "content": json.dumps(results[c["id"]]), "tool_call_id": c["id"]}
                      for c in calls)]
        self.follow = TurnAhead(brain, messages, params_after_tools(messages, self.params))

    def matches(self, messages: list[dict], params: dict[str, Any]) -> bool:
        return _canonical(messages) == _canonical(self.messages) and params == self.params

    def ahead_ms(self) -> float:
        """How long ago the decode started (at the moment the turn takes it: how far ahead it ran)."""
        return (time.perf_counter() - self.started) * 1000

    async def events(self) -> AsyncIterator[TurnEvent]:
        """The turn's events: those buffered so far, then the rest as they come."""
        while (item := await self._events.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            yield item
        self.consumed = True

    async def cancel(self) -> None:
        """Stop the decode (a wrong guess, or the call ended) and wait until the session is free."""
        if not self._task.done():
            self._task.cancel()
        await asyncio.wait({self._task})  # never raises the task's error; our own cancel still propagates
        if self.follow is not None:
            await self.follow.cancel()


def _canonical(messages: list[dict]) -> list[tuple]:
    """Messages as the model sees them: a tool call's arguments and a tool's result compared as JSON
    (the context re-serialises them), an assistant's surrounding blanks ignored."""
    out = []
    for m in messages:
        calls = tuple((c.get("id"), c["function"]["name"], _json(c["function"].get("arguments")))
                      for c in m.get("tool_calls") or [])
        content = m.get("content") or ""
        if m.get("role") == "tool":
            content = _json(content)
        elif m.get("role") == "assistant":
            content = content.strip()
        out.append((m.get("role"), content, calls, m.get("tool_call_id")))
    return out


def _json(text: Any) -> Any:
    if not isinstance(text, str):
        return json.dumps(text, sort_keys=True)
    try:
        return json.dumps(json.loads(text or "{}"), sort_keys=True)
    except ValueError:
        return text


__all__ = ["TurnAhead"]
