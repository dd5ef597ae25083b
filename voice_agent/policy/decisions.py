"""The policy: small named decisions over the call's `DialogueState`, tried in an explicit priority.

    decision = decide(state, messages)    # before the decode; None: the model decides the turn
    decision.say        # words to speak, no decode (a greeting, a goodbye, the facts)
    decision.call       # (tool, arguments) to make, no decode: the state holds every argument
    decision.tool_choice  # the tool the model must call (it writes the arguments)

| priority | decision | when |
| --- | --- | --- |
| 1 | `greeting_only` | the caller only greets: the scenario's `greeting_reply` |
| 2 | `closing_only` | the caller only closes the call: the scenario's `goodbye_reply` |
| 3 | `correct_done_call` | the caller changes a value of a call that succeeded, and the scenario says which tool changes it (`instead: {after: T, call: M}`): M, with the new value and the rest of T's arguments |
| 4 | `call_when_ready` | the tool the caller is after has every argument it needs in the state, one of them just said: that call |
| 5 | `facts_only` | the caller only asks about the scenario's facts (no call is ready): those facts, word for word |
| 6 | `conversation_tool` | the conversation has decided the tool (policy/tool_choice.py): the model writes its arguments |

A call being written is checked at the second point, when the model writes it (brain/ask_guard.py):
an argument nobody said is asked for instead.
Each decision reads the state and the scenario's data only; none names a scenario's tool or word.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from voice_agent.policy.closing import goodbye_answer
from voice_agent.policy.facts import fact_answer
from voice_agent.policy.greeting import greeting_answer
from voice_agent.policy.kinds import KindContext, KindError, parse
from voice_agent.policy.state import DialogueState
from voice_agent.policy.tool_choice import turn_tool_choice
from voice_agent.said_phrases import phrases_in
from voice_agent.scenarios import ask_question


@dataclass(frozen=True)
class Decision:
    name: str                                  # the decision that fired (reported as `decided_by`)
    say: str | None = None
    call: tuple[str, dict] | None = None
    tool_choice: str | None = None             # a tool's name, or "required"
    metrics: dict = field(default_factory=dict)


def greeting_only(state: DialogueState, messages: list[dict]) -> Decision | None:
    reply = greeting_answer(messages, state.policy)
    return None if reply is None else Decision("greeting_only", say=reply, metrics={"answered_greeting": True})


def closing_only(state: DialogueState, messages: list[dict]) -> Decision | None:
    reply = goodbye_answer(messages, state.policy)
    return None if reply is None else Decision("closing_only", say=reply, metrics={"answered_goodbye": True})


def facts_only(state: DialogueState, messages: list[dict]) -> Decision | None:
    answered = fact_answer(messages, state.policy)
    if answered is None:
        return None
    topics, text = answered
    return Decision("facts_only", say=text, metrics={"answered_from_facts": topics})


def needed(state: DialogueState, tool: str) -> list[str]:
    """A tool's required arguments, and the optional ones the scenario asks for when nobody said them."""
    out = state.required(tool)
    return out + [a for a in state.kinds(tool) if a not in out and ask_question(state.policy.ask, tool, a)]


def call_when_ready(state: DialogueState, messages: list[dict]) -> Decision | None:
    """The tool the caller is after, once the state holds every argument it needs and the caller's
    latest words said one of them (a name given after the day and time books; it is not looked up)."""
    tool = state.wanted
    if tool is None or state.turn < 0 or not _caller_last(messages):
        return None
    rule = state.policy.instead.get(tool) or {}
    if "when_said" in rule and phrases_in(state.caller_words[-1], rule["when_said"], state.today):
        tool = rule["call"]  # the scenario's `instead`: a search made while a time is named is the booking
    args = {}
    for arg in needed(state, tool):
        slot = state.slot_for(tool, arg)
        if slot is None:
            return None
        args[arg] = slot.words
    if not args or not any(state.slot_for(tool, a).turn == state.turn for a in args):
        return None
    if any(_same_args(state, tool, o.arguments, args) for o in state.outcomes if o.tool == tool):
        return None  # made already with these values (a failed one is the model's to answer)
    return Decision("call_when_ready", call=(tool, args))


def correct_done_call(state: DialogueState, messages: list[dict]) -> Decision | None:
    """A call that succeeded, whose value the caller's latest words change ("make that half past ten
    instead"), made again as the scenario's `instead: {after: T, call: M}` says: M, with the new value
    and, for the rest, T's own arguments by kind."""
    if not _caller_last(messages):
        return None
    for rule in state.policy.instead.values():
        done_tool, fix_tool = rule.get("after"), rule.get("call")
        done = state.succeeded(done_tool) if done_tool else []
        if not done or done[-1].turn >= state.turn or state.wanted_turn == state.turn and state.wanted != fix_tool:
            continue
        last, kinds = done[-1], state.kinds(done_tool)
        changed = False
        for arg, kind in kinds.items():
            slot = state.slot_for(done_tool, arg)
            if slot is not None and slot.turn == state.turn and arg in last.arguments and not _same(
                    state, kind, slot.words, last.arguments[arg]):
                changed = True
        if not changed:
            continue
        by_kind = {kind: last.arguments[arg] for arg, kind in kinds.items() if arg in last.arguments}
        args = {}
        for arg in needed(state, fix_tool):
            kind = state.kinds(fix_tool).get(arg)
            slot = state.slot_for(fix_tool, arg)
            if slot is not None and slot.turn == state.turn:
                args[arg] = slot.words
            elif kind in by_kind:
                args[arg] = by_kind[kind]
            else:
                break
        else:
            return Decision("correct_done_call", call=(fix_tool, args))
    return None


def conversation_tool(state: DialogueState, messages: list[dict]) -> Decision | None:
    decided = turn_tool_choice(messages, state.tools, state.policy)
    if decided is None:
        return None
    why, choice = decided
    return Decision(f"conversation_tool ({why})", tool_choice=choice, metrics={"tool_choice": {why: choice}})


DECISIONS: list[Callable[[DialogueState, list[dict]], Decision | None]] = [
    greeting_only, closing_only, correct_done_call, call_when_ready, facts_only, conversation_tool]


def decide(state: DialogueState, messages: list[dict]) -> Decision | None:
    """The first decision, in priority order, that decides this turn; None: the model decides."""
    for decision in DECISIONS:
        if (made := decision(state, messages)) is not None:
            return made
    return None


def as_tool_call(decision: Decision, turn: int) -> dict:
    """The decision's call in OpenAI's shape."""
    tool, args = decision.call or ("", {})
    return {"id": f"call_policy_{turn}", "type": "function",
            "function": {"name": tool, "arguments": json.dumps(args, ensure_ascii=False)}}


def _caller_last(messages: list[dict]) -> bool:
    return bool(messages) and messages[-1].get("role") == "user"


def _same(state: DialogueState, kind: str, a: object, b: object) -> bool:
    """Two values of one kind mean the same ("Wednesday the 9th" and "2026-12-09")."""
    ctx = KindContext(today=state.today, hours=None)
    try:
        return parse(kind, a, ctx) == parse(kind, b, ctx) if kind not in ("enum", "text") else (
            str(a).strip().lower() == str(b).strip().lower())
    except (KindError, ValueError):
        return " ".join(str(a).lower().split()) == " ".join(str(b).lower().split())


def _same_args(state: DialogueState, tool: str, made: dict, args: dict) -> bool:
    kinds = state.kinds(tool)
    return all(k in made and _same(state, kinds.get(k, "text"), made[k], v) for k, v in args.items())


__all__ = ["DECISIONS", "Decision", "as_tool_call", "decide", "needed"]
