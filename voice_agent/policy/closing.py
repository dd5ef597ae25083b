"""A caller who only closes the call ("great that's all I needed", "cheers bye") is said goodbye to.

The training dialogues close with "Thanks for calling Bright Smile Dental, <name>. Goodbye!", but a
closing phrased as none of them sent the model back to the last tool: seed-5 gen_005 and gen_021
answered "great that's all i needed", after a booking, with a `move_appointment` of the booking
onto itself, and the turn spoke the tool's refusal. The scenario's `goodbye_reply` is said
instead, without a decode, when the caller's latest words are a closing and nothing else.
"""

from __future__ import annotations

import re

from voice_agent.said_phrases import latest_caller_words
from voice_agent.scenarios import CallPolicy

# What makes words a closing: a goodbye, or saying the call has got what it came for.
_CLOSER = re.compile(r"\b(?:bye|goodbye|that'?s (?:all|it|everything)|nothing else|have a (?:good|great|nice) "
                     r"(?:day|one|afternoon|evening|weekend))\b")
# Words a closing may carry besides its closer.
_FILL = frozenset({"ok", "okay", "great", "perfect", "wonderful", "lovely", "awesome", "cool", "alright", "right",
                   "good", "fine", "no", "nope", "yes", "yeah", "so", "um", "umm", "uh", "er", "erm", "oh", "well",
                   "thanks", "thank", "you", "much", "cheers", "for", "your", "the", "help", "that's", "thats",
                   "that", "is", "was", "all", "it", "everything", "i", "needed", "need", "nothing", "else", "have",
                   "a", "day", "one", "afternoon", "evening", "weekend", "nice", "bye", "goodbye", "then", "really",
                   "appreciate", "very", "now", "just", "wanted"})
_WORD = re.compile(r"[a-z']+")


def closing_only(text: str) -> bool:
    """`text` closes the call and holds nothing else a turn could act on ("great that's all I
    needed", "ok thank you bye bye"); "thanks" alone does not close (it answers a read-back too)."""
    low = text.lower().replace("’", "'")
    words = _WORD.findall(low)
    return bool(words) and _CLOSER.search(low) is not None and all(w in _FILL for w in words)


def goodbye_answer(messages: list[dict], policy: CallPolicy) -> str | None:
    """The scenario's goodbye to a caller who only closed, when the latest message is theirs."""
    latest = latest_caller_words(messages)
    return policy.goodbye_reply if policy.goodbye_reply and latest is not None and closing_only(latest) else None


__all__ = ["closing_only", "goodbye_answer"]
