"""`Brain`: the LLM behind one call, whichever framework drives it (Pipecat's EngineLLMService,
LiveKit's EngineLLM) and wherever the model runs.

    async with contextlib.aclosing(brain.turn(messages, tools=..., reasoning_effort="low")) as events:
        async for ev in events:      # "reasoning" / "answer" text as it is decided, then "done"
            ...

One policy for every framework:
- leaving the loop early (barge-in, a cancelled task) stops the model at its next committed block
  and keeps the call's KV cache: the engine records what the cache really holds, and the next
  turn reuses its longest matching prefix exactly;
- a history too long for the context is trimmed by the one rule in `trim.py`, once per turn, and
  the cut is kept for the turns after it;
- a failed turn raises `BrainError` (with a code); the brain stays usable for the next turn;
- a greeting alone, a closing alone, or a question about the scenario's facts alone, is answered in
  the scenario's own words (greeting.py, closing.py, facts.py); a call whose first written argument nobody said is replaced by the
  question as soon as that argument is written (ask_guard.py).
"""

from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from loguru import logger

from voice_agent.brain.ask_guard import (
    NAME_ARGUMENT,
    ask_instead,
    asked_early,
    call_of,
    partial_call,
    unsaid_before_decoded,
)
from voice_agent.brain.trim import HistoryTrimmer
from voice_agent.brain.types import BrainError, TurnEvent, TurnResult
from voice_agent.policy.decisions import Decision, as_tool_call, decide
from voice_agent.policy.instead import instead_tool, named
from voice_agent.policy.state import DialogueState, StateTracker
from voice_agent.scenarios import CallPolicy

TURN_PARAMS = ("tools", "tool_choice", "reasoning_effort", "max_tokens", "temperature", "seed", "stop")


class Brain(ABC):
    session: Any = None  # the in-process engine's Session (this call's KV cache); None when remote

    def __init__(self) -> None:
        self.trimmer = HistoryTrimmer()
        # The scenario's ask, instead and intents blocks, for every framework alike: a call whose
        # grounded argument nobody said becomes the question (ask_guard.py); the tool a turn must call
        # where the dialogue state has decided it (voice_agent/policy/).
        self.policy = CallPolicy()
        self._tracker: StateTracker | None = None  # the call's DialogueState (voice_agent/policy/state.py)

    @property
    @abstractmethod
    def model_name(self) -> str: ...

    async def turn(self, messages: list[dict], **params: Any) -> AsyncIterator[TurnEvent]:
        """One LLM round over OpenAI-shaped `messages`; `params` are TURN_PARAMS."""
        unknown = set(params) - set(TURN_PARAMS)
        if unknown:
            raise BrainError(BrainError.INVALID_REQUEST, f"unknown turn parameter(s): {', '.join(sorted(unknown))}")
        t0 = time.perf_counter()
        msgs = self.trimmer.apply(messages)
        chosen: dict[str, Any] = {}
        if params.get("tool_choice") in (None, "auto"):  # never when the client chose the tool
            # The policy's first point: before the decode (voice_agent/policy/decisions.py).
            state = self._state(msgs, params.get("tools"))
            decision = decide(state, msgs)
            if decision is not None:
                logger.info(f"the policy decides the turn: {decision.name}")
                if decision.say:
                    yield TurnEvent("answer", decision.say)
                yield from_policy(decision, state.turn, elapsed_ms=(time.perf_counter() - t0) * 1000,
                                  reasoning_effort=params.get("reasoning_effort"))
                return
        while True:
            started = answered = False
            try:
                instead, discarded = None, None
                async with contextlib.aclosing(self._attempt(msgs, params)) as events:
                    async for ev in events:
                        if ev.type == "tool_args":  # a call still being written: is its question decided?
                            early = None if answered else self._ask_early(ev, msgs, params, check_instead=True)
                            for asked in early or []:
                                yield _noted(asked, chosen)
                            if early:
                                return  # closing the attempt stops the decode after its current pass
                            continue
                        started = True
                        answered = answered or (ev.type == "answer" and bool(ev.text.strip()))
                        if ev.type == "done" and ev.result is not None and not answered:
                            instead = instead_tool(ev.result.tool_calls, msgs, self.policy.instead)
                            if instead is None:
                                for asked in ask_instead(ev.result, params.get("tools"), msgs, self.policy.ask):
                                    yield _noted(asked, chosen)
                            else:
                                discarded = ev.result.metrics  # the decode the second attempt replaces
                            continue
                        yield _noted(ev, chosen)
                if instead is not None:
                    async for ev in self._made_instead(msgs, params, instead, discarded or {}):
                        yield ev
                return
            except BrainError as e:
                shorter = self.trimmer.shorter(msgs) if e.code == BrainError.CONTEXT_TOO_LONG and not started else None
                if shorter is None:
                    raise
                logger.warning(f"{self.model_name}: {e.message}; dropping the oldest turn "
                               f"({len(msgs)} -> {len(shorter)} messages)")
                msgs = shorter

    async def _made_instead(self, msgs: list[dict], params: dict, tool: str,
                            discarded: dict) -> AsyncIterator[TurnEvent]:
        """The turn again, with `tool` named (the scenario's `instead` rule, policy/instead.py), through the ask guard.
        The metrics say what the thrown-away first decode cost, so no pass goes uncounted."""
        logger.info(f"the caller's latest words fit {tool}: this turn calls {tool} instead")
        forced = {**params, "tool_choice": named(tool)}
        cost = {f"discarded_{k}": discarded[k] for k in ("total_ms", "forward_passes", "completion_tokens")
                if discarded.get(k) is not None}
        async with contextlib.aclosing(self._attempt(msgs, forced)) as events:
            async for ev in events:
                if ev.type == "tool_args":
                    early = self._ask_early(ev, msgs, params, check_instead=False)
                    for asked in early or []:
                        yield _noted(asked, {"instead": tool, **cost})
                    if early:
                        return
                    continue
                if ev.type == "done" and ev.result is not None:
                    for asked in ask_instead(ev.result, params.get("tools"), msgs, self.policy.ask):
                        yield _noted(asked, {"instead": tool, **cost})
                    continue
                yield _noted(ev, {"instead": tool, **cost})

    def _state(self, msgs: list[dict], tools: list[dict] | None) -> DialogueState:
        """The call's dialogue state, fed the messages it has not seen (one tracker per policy)."""
        if self._tracker is None or self._tracker.policy is not self.policy:
            self._tracker = StateTracker(self.policy)
        return self._tracker.read(msgs, tools)

    def _ask_early(self, ev: TurnEvent, msgs: list[dict], params: dict, check_instead: bool) -> list[TurnEvent] | None:
        """The question, when the call being written (a "tool_args" event) already decides that the
        ask guard will replace it (ask_guard.unsaid_before_decoded), and no `instead` rule could still
        replace the call first; None to decode on."""
        part = partial_call(ev.text) if ev.result is not None else None
        if part is None:
            return None
        name, args = part
        tools = params.get("tools") or []
        unsaid = unsaid_before_decoded(name, args, tools, msgs, self.policy.ask)
        if unsaid is None:
            return None
        if check_instead:
            rule = self.policy.instead.get(name) or {}
            props = next((t["function"].get("parameters", {}).get("properties", {}) for t in tools
                          if t["function"]["name"] == name), {})
            if "after" in rule and any(NAME_ARGUMENT.search(k) and k not in args for k in props):
                return None  # the rule reads the call's names: not written yet
            if instead_tool([call_of(name, args)], msgs, self.policy.instead) is not None:
                return None
        return asked_early(ev.result, unsaid)

    def warm(self, messages: list[dict], **params: Any) -> None:  # noqa: B027 - a remote server keeps its own prefix cache
        """Start prefilling the call's fixed prefix (system prompt + tools) in the background, e.g.
        while the greeting plays; the next turn waits for it and prefills only what follows."""

    async def warmed(self) -> None:  # noqa: B027 - nothing to wait for where nothing warms
        """Return once a warm-up started with `warm` has finished (at once if none runs)."""

    def prefill_ahead(self, messages: list[dict], **params: Any) -> None:
        """Start a speculative prefill of a turn not yet decided (the caller's words so far), so
        the turn, if it comes with the same words, has only its last tokens left to prefill."""
        self._prefill_ahead(self.trimmer.apply(messages), params)  # trimmed as the turn will be

    def _prefill_ahead(self, messages: list[dict], params: dict) -> None:  # noqa: B027 - nothing to prefill remotely
        """Brains with a local cache prefill `messages` in the background."""

    @abstractmethod
    def _attempt(self, messages: list[dict], params: dict) -> AsyncIterator[TurnEvent]:
        """One request as given; raises BrainError."""

    async def aclose(self) -> None:  # noqa: B027 - most brains hold nothing to release
        """Release what the brain holds (connections)."""


def from_policy(decision: Decision, turn: int, elapsed_ms: float = 0.0,
                reasoning_effort: str | None = None) -> TurnEvent:
    """The turn's "done" when the policy decided it with no decode: words to say, or a call whose
    arguments the state holds. Its first token is the decision, `elapsed_ms` after the request
    began (the metric names of MISSION.md; no prompt was read and nothing decoded)."""
    calls = [as_tool_call(decision, turn)] if decision.call is not None else []
    ms = round(elapsed_ms, 2)
    metrics = {"ttft_ms": ms, "ttfat_ms": ms if decision.say else None, "prefill_ms": 0.0, "decode_ms": 0.0,
               "total_ms": ms, "forward_passes": 0, "completion_tokens": 0, "reasoning_tokens": 0,
               "prompt_tokens": 0, "cached_tokens": 0, "argument_repairs": [],
               "reasoning_effort": reasoning_effort,
               **decision.metrics, "decided_by": decision.name}
    return TurnEvent("done", result=TurnResult(text=decision.say or "", reasoning="", tool_calls=calls, tool_errors=[],
                                               finish_reason="tool_calls" if calls else "stop", metrics=metrics))


def _noted(ev: TurnEvent, chosen: dict[str, Any]) -> TurnEvent:
    """`ev`, its result's metrics recording which tool the turn was made to call (`tool_choice`) and
    which decision of the policy made it (`decided_by`)."""
    if ev.type != "done" or ev.result is None or not chosen:
        return ev
    choice = {k: v for k, v in chosen.items() if k != "decided_by"}
    decided = chosen.get("decided_by") or f"instead ({next(iter(choice.values()), '')})"
    return replace(ev, result=replace(ev.result, metrics={**ev.result.metrics, "tool_choice": choice,
                                                           "decided_by": decided}))
