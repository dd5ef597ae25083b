"""Ask, do not guess: a tool call whose argument the caller never said is replaced by the question.

A small model sometimes calls `book_appointment` before it has every detail, and the tool-call guide
makes it fill every required argument, so it invents one: a name nobody gave ("sarah", or the
receptionist's own "Maya"), "one" for a time the caller never named. Running such a call books the
wrong patient or the wrong hour. The scenario's `ask` block says what to say for each argument
that must come from the caller (the same questions the training dialogues ask). When a call's
grounded argument (engine/grounding.py) is neither close to a span of what was said nor made of
words that were said ("december the ninth" after "the ninth of december" is), that question is
spoken instead and the call does not run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from loguru import logger

from engine.grounding import WORD_RE, grounded_arguments, nearest_span, source_texts
from voice_agent.brain.types import TurnEvent, TurnResult

# Words a value may add to what was said: "december the ninth" for "the ninth of december".
LINK_WORDS = frozenset({"the", "of", "at", "on", "in", "a", "an"})


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
    sources = source_texts(messages)
    heard = {w.lower() for src in sources for w in WORD_RE.findall(src)}
    for fn, args, keys in grounded_arguments(calls, tools):
        for key in keys:
            if key not in ask or key not in args:
                continue
            value = args[key]
            if not isinstance(value, str) or not _was_said(value, sources, heard):
                return Unsaid(fn["name"], key, str(value), ask[key])
    return None


def ask_instead(result: TurnResult, tools: list[dict] | None, messages: list[dict],
                ask: dict[str, str]) -> list[TurnEvent]:
    """The turn's last events: its own "done", or, when a call carries an argument nobody said, the
    question as the answer and a "done" without the calls (`metrics["asked_instead_of_call"]`)."""
    unsaid = unsaid_argument(result.tool_calls, tools or [], messages, ask)
    if unsaid is None:
        return [TurnEvent("done", result=result)]
    logger.info(f"{unsaid.tool} had {unsaid.argument}={unsaid.value!r}, which the caller never said; asking instead")
    metrics = {**result.metrics, "asked_instead_of_call": {"tool": unsaid.tool, "argument": unsaid.argument,
                                                           "value": unsaid.value}}
    asked = replace(result, text=unsaid.question, tool_calls=[], finish_reason="stop", metrics=metrics)
    return [TurnEvent("answer", unsaid.question), TurnEvent("done", result=asked)]


def _was_said(value: str, sources: list[str], heard: set[str]) -> bool:
    """A span of what was said (engine/grounding.py's rule), or its words in another order."""
    words = {w.lower() for w in WORD_RE.findall(value)} - LINK_WORDS
    return bool(words) and (words <= heard or nearest_span(value, sources) is not None)


__all__ = ["LINK_WORDS", "Unsaid", "ask_instead", "unsaid_argument"]
