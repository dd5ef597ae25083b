"""The scenario's `instead` block at the policy's second point, when the model has written a call:

- `{when_said: K, call: T}`: a call to the listed tool made while the caller's latest words name a
  phrase of kind K is made again as T (a search for free times while the caller names the time is
  the booking itself);
- `{after: A, call: T}`: a call to the listed tool for a person A already served in this call is
  made as T (a second booking for the caller just booked is their booking moved).

The first point (before the decode) reads the same block from the dialogue state
(`decisions.search_first`, `decisions.correct_done_call`).
"""

from __future__ import annotations

import json

from voice_agent.said_phrases import NAME_ARGUMENT, phrases_in
from voice_agent.scenarios import today_of


def named(tool: str) -> dict:
    """OpenAI's tool_choice for one function."""
    return {"type": "function", "function": {"name": tool}}


def instead_tool(calls: list[dict], messages: list[dict], instead: dict[str, dict[str, str]]) -> str | None:
    """The tool to call in place of `calls` by the `instead` block, or None."""
    if not calls or not instead:
        return None
    latest = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), None)
    if not isinstance(latest, str):
        return None
    today = today_of(messages)
    for call in calls:
        fn = call.get("function", {})
        rule = instead.get(fn.get("name", ""))
        if not rule:
            continue
        if "when_said" in rule and phrases_in(latest, rule["when_said"], today):
            return rule["call"]
        if "after" in rule and _names_of(fn.get("arguments")) & _served(messages, rule["after"]):
            return rule["call"]
    return None


def _as_dict(value: object) -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {}
    return value if isinstance(value, dict) else {}


def _names_of(arguments: object) -> set[str]:
    """The name arguments' values of a call, lowercased."""
    return {" ".join(str(v).lower().split()) for k, v in _as_dict(arguments).items() if NAME_ARGUMENT.search(k) and v}


def _served(messages: list[dict], tool: str) -> set[str]:
    """The names that calls to `tool` in `messages` succeeded for (the call's and the result's)."""
    results = {m.get("tool_call_id"): _as_dict(m.get("content")) for m in messages if m.get("role") == "tool"}
    out: set[str] = set()
    for m in messages:
        for call in m.get("tool_calls") or []:
            fn = call.get("function") or {}
            result = results.get(call.get("id"))
            if fn.get("name") == tool and result is not None and "error" not in result:
                out |= _names_of(fn.get("arguments")) | _names_of(result)
    return out


__all__ = ["instead_tool", "named"]
