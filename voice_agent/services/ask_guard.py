"""Ask, do not guess: a tool call whose argument the caller never said is replaced by the question.

A small model sometimes calls `book_appointment` before it has every detail, and the tool-call guide
makes it fill every required argument, so it invents one: a name nobody gave ("sarah", or the
receptionist's own "Maya"), "one" for a time the caller never named. Running such a call books the
wrong patient or the wrong hour. The scenario's `ask` block says what to say for each argument
that must come from the caller (the same questions the training dialogues ask); when a call's
grounded argument (engine/grounding.py) matches nothing that was said, that question is spoken
instead and the call does not run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from engine.grounding import grounded_keys, nearest_span, source_texts


@dataclass(frozen=True)
class Unsaid:
    tool: str
    argument: str
    value: str
    question: str


def unsaid_argument(calls: list[dict], tools: list[dict], messages: list[dict], ask: dict[str, str]) -> Unsaid | None:
    """The first grounded argument of `calls` with a question in `ask` whose value nobody said."""
    if not ask or not calls:
        return None
    by_name = {t["function"]["name"]: t for t in tools or []}
    sources = source_texts(messages)
    for call in calls:
        fn = call.get("function", {})
        tool = by_name.get(fn.get("name"))
        if tool is None:
            continue
        try:
            args = json.loads(fn.get("arguments") or "{}")
        except json.JSONDecodeError:
            continue
        for key in grounded_keys(tool):
            if key not in ask or key not in args:
                continue
            value = args[key]
            if not isinstance(value, str) or not value.strip() or nearest_span(value, sources) is None:
                return Unsaid(fn["name"], key, str(value), ask[key])
    return None


__all__ = ["Unsaid", "unsaid_argument"]
