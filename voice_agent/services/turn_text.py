"""How the caller's words so far end: a finished sentence, a line cut off mid-clause, or unsure.

The end-of-turn wait after the VAD's stop is a guess that the caller is done; the transcript,
back ~50 ms after the stop (early STT), says more. Whisper ends a finished line with `.`, `?` or
`!`, and one the caller is still building with a comma, an ellipsis, or a word that cannot end a
sentence ("and", "for", "my", "um"). `HoldOnSpeechStopStrategy` shortens its wait for the first and
lengthens it for the second. Text only: no model, so it costs nothing on the turn's path.
"""

from __future__ import annotations

import re
from typing import Literal

from voice_agent.said_phrases import FILLERS

TurnEnding = Literal["complete", "incomplete", "unsure"]

# Words a statement does not end on: conjunctions, most prepositions, articles and possessives, a
# subject with no verb yet, and the hesitations ASR writes down ("so" and "like" can end a line).
# A question may end on a preposition ("what is that for?"), so a `?` overrides the list.
CONTINUES = FILLERS | frozenset({
    "and", "or", "but", "because", "cause", "if", "than",
    "to", "for", "of", "at", "with", "from", "by", "into", "until", "till",
    "the", "a", "an", "my", "your", "our", "their",
    "i", "i'm", "we're", "it's",
})
_OPEN_MARKS = (",", "...", "…", "-", "—", "–", ":", ";")
_WORD = re.compile(r"[a-z0-9']+(?:-[a-z0-9']+)*")


def turn_ending(text: str) -> TurnEnding:
    """How `text` (the turn's transcript so far) ends; "unsure" for no text or no closing mark."""
    stripped = text.strip().strip('"').rstrip()
    words = _WORD.findall(stripped.lower())
    if not words:
        return "unsure"
    if stripped.endswith(_OPEN_MARKS) or (words[-1] in CONTINUES and not stripped.endswith("?")):
        return "incomplete"
    if stripped.endswith((".", "?", "!")):
        return "complete"
    return "unsure"
