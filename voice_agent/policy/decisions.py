"""The policy: small named decisions over the call's `DialogueState`, tried in an explicit priority.

    decision = decide(state, messages)    # before the decode; None: the model decides the turn
    decision.say        # words to speak, no decode (a greeting, a goodbye, the facts)
    decision.call       # (tool, arguments) to make, no decode: the state holds every argument

| priority | decision | when |
| --- | --- | --- |
| 1 | `greeting_only` | the caller only greets: the scenario's `greeting_reply` |
| 2 | `closing_only` | the caller only closes the call: the scenario's `goodbye_reply` |
| 3 | `correct_done_call` | the caller changes a value of a call that succeeded, and the scenario says which tool changes it (`instead: {after: T, call: M}`): M, with the new value and the rest of T's arguments |
| 4 | `call_when_ready` | the tool the caller is after has every argument it needs in the state, one of them just said: that call |
| 5 | `facts_only` | the caller only asks about the scenario's facts (no call is ready): those facts, word for word |
| 6 | `search_first` | the tool the caller is after has a search in the scenario's `instead` block, and the caller named what it needs but not yet what switches to the tool: the search |
| 7 | `ask_missing` | the caller's words moved the tool on and it still lacks an argument: the scenario's question for it (the tool's own first; then what, when, who) |
| 8 | `follow_result` | a tool's result has the field the scenario's `instead: {T: {when_result: F, call: M}}` names, true: M, with its arguments from the state and T's call |

None of them: the model decides the turn. A call the model writes is checked at the second point
(brain/ask_guard.py: an argument nobody said is asked for instead; policy/instead.py: the scenario's
`instead` block).
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
from voice_agent.said_phrases import phrases_in
from voice_agent.scenarios import ask_question


@dataclass(frozen=True)
class Decision:
    name: str                                  # the decision that fired (reported as `decided_by`)
    say: str | None = None
    call: tuple[str, dict] | None = None
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
    args |= _optional_said(state, tool, args)
    if any(_same_args(state, tool, o.arguments, args) for o in state.outcomes if o.tool == tool):
        return None  # made already with these values (a failed one is the model's to answer)
    return Decision("call_when_ready", call=(tool, args))


def _optional_said(state: DialogueState, tool: str, args: dict) -> dict:
    """The tool's other arguments the caller said for this request (a yes/no only in this turn: it
    answers about what was just said)."""
    out = {}
    for arg, kind in state.kinds(tool).items():
        slot = state.slot_for(tool, arg)
        if arg in args or slot is None or slot.turn < state.wanted_since:
            continue
        if kind == "boolean" and slot.turn != state.turn:
            continue
        out[arg] = (slot.words == "true") if kind == "boolean" else slot.words
    return out


def follow_result(state: DialogueState, messages: list[dict]) -> Decision | None:
    """The scenario's `instead: {T: {when_result: F, call: M}}`: a result of T whose field F is true
    is followed by M, with M's arguments from the state and T's call by kind (the last data check
    that failed opens the ticket)."""
    if not messages or messages[-1].get("role") != "tool" or not state.outcomes:
        return None
    last = state.outcomes[-1]
    rule = state.policy.instead.get(last.tool) or {}
    field_name, follow = rule.get("when_result"), rule.get("call")
    if not field_name or not follow or not (isinstance(last.result, dict) and last.result.get(field_name) is True):
        return None
    by_kind = {state.kinds(last.tool).get(a): v for a, v in last.arguments.items()}
    args = {}
    for arg in state.required(follow):
        slot = state.slot_for(follow, arg)
        kind = state.kinds(follow).get(arg)
        if kind in by_kind and kind not in ("enum", "text", "boolean", "integer"):
            args[arg] = by_kind[kind]
        elif slot is not None:
            args[arg] = slot.words
        else:
            return None
    if any(o.tool == follow and o.ok and o.turn == state.turn for o in state.outcomes):
        return None
    return Decision("follow_result", call=(follow, args))


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


def search_first(state: DialogueState, messages: list[dict]) -> Decision | None:
    """The scenario's search for the tool the caller is after (`instead: {S: {when_said: K, call: T}}`:
    S finds what T takes), once the caller named what S needs and not yet a phrase of kind K: S, with
    no decode ("a cleaning on the 9th" reads the 9th's free times before the time is asked). A search
    made already with the same values is not made again."""
    tool = state.wanted
    if tool is None or not _caller_last(messages):
        return None
    for search, rule in state.policy.instead.items():
        if rule.get("call") != tool or "when_said" not in rule:
            continue
        said_kind = {"day": "date"}.get(rule["when_said"], rule["when_said"])
        if any(state.slots.get(k) is not None and state.slots[k].turn >= state.wanted_since
               for k in (said_kind, rule["when_said"])):
            return None  # named already: the call itself is due (call_when_ready), or its question
        args = {}
        for arg in state.required(search):
            slot = state.slot_for(search, arg)
            if slot is None:
                return None
            args[arg] = slot.words
        optional = [a for a, k in state.kinds(search).items() if a not in args and k == "enum"]
        args |= {a: slot.words for a in optional if (slot := state.slot_for(search, a)) is not None}
        if not any(state.slot_for(search, a).turn == state.turn for a in args):
            return None
        if any(_same_args(state, search, o.arguments, args) for o in state.outcomes if o.tool == search and o.ok):
            return None
        return Decision("search_first", call=(search, args))
    return None


# The order a missing argument is asked for in: what, when, then who (identifiers last).
_ASK_ORDER = {"enum": 0, "date": 1, "time": 2, "integer": 3, "text": 4, "plate": 5, "phone_number": 6, "email": 7,
              "person_name": 8}


def ask_missing(state: DialogueState, messages: list[dict]) -> Decision | None:
    """The question for the first argument the tool the caller is after still lacks, when the
    caller's latest words moved it on (named the tool, or one of its arguments): the scenario's own
    words (`ask: tool.argument`, else `ask: argument`), with no decode. The tool's own questions come
    first, then what, when and who."""
    tool = state.wanted
    if tool is None or not _caller_last(messages):
        return None
    kinds = state.kinds(tool)
    fresh = state.wanted_turn == state.turn or any(
        (slot := state.slot_for(tool, a)) is not None and slot.turn == state.turn for a in kinds)
    if not fresh:
        return None
    missing = [a for a in needed(state, tool) if state.slot_for(tool, a) is None]
    # the tool's own questions first, in the order the scenario wrote them (a move asks whose booking
    # before when), then what, when, who
    own = [key for key in state.policy.ask if key.startswith(f"{tool}.")]
    missing.sort(key=lambda a: (f"{tool}.{a}" not in own, own.index(f"{tool}.{a}") if f"{tool}.{a}" in own else 0,
                                _ASK_ORDER.get(kinds.get(a, ""), 9)))
    for arg in missing:
        if kinds.get(arg) == "person_name" and state.maybe_name_turn == state.turn:
            return None  # words that may be the name, with no cue: the model reads them
        question = ask_question(state.policy.ask, tool, arg)
        if question and question.strip() != _last_said(messages):  # asked and answered: the model reads the answer
            return Decision("ask_missing", say=question, metrics={"asked": {"tool": tool, "argument": arg}})
        if question:
            return None
    return None


DECISIONS: list[Callable[[DialogueState, list[dict]], Decision | None]] = [
    greeting_only, closing_only, correct_done_call, call_when_ready, facts_only, search_first, ask_missing,
    follow_result]


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


def _last_said(messages: list[dict]) -> str:
    """The agent's words just before the caller's latest ones ("" when it said none)."""
    for m in reversed(messages[:-1]):
        if m.get("role") == "assistant" and isinstance(m.get("content"), str) and m["content"].strip():
            return m["content"].strip()
        if m.get("role") == "user":
            return ""
    return ""


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
