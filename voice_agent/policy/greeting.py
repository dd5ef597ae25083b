"""A caller who only greets, or only asks for help, is greeted back and asked what they need.

Callers often answer the agent's greeting with one of their own ("Good morning.", "hi yes um") and
say what they want after a pause; with the end-of-turn wait set by the words, that greeting is a
turn of its own. The training dialogues have no such turn, and the model answered "Good morning."
with "Thanks for calling Bright Smile Dental. Goodbye!" and "hi yes um i need some help" with "We
can come with your full name, please." The scenario's `greeting_reply` is said instead, without a
decode, when the caller's latest words are greeting and hesitation words only.
"""

from __future__ import annotations

import re

from voice_agent.said_phrases import latest_caller_words
from voice_agent.scenarios import CallPolicy

GREETINGS = frozenset({"hi", "hello", "hey", "hiya", "morning", "afternoon", "evening"})
# An ask for help that names nothing to help with ("can you help me with something", "i have a
# question"): v7 answered "hi yes um i need some help" with "We can come with your full name, please."
HELP = frozenset({"help", "question"})
# Words a greeting or a bare ask for help may carry besides them.
_FILL = frozenset({"good", "yes", "yeah", "yep", "um", "umm", "uh", "er", "erm", "hmm", "oh", "ok", "okay", "so",
                   "there", "again", "and", "a", "very", "to", "you", "too", "can", "could", "would", "will",
                   "me", "i", "im", "i'm", "need", "some", "with", "something", "have", "got", "quick", "please",
                   "hoping", "wondering", "if", "out", "just", "little", "bit", "of", "was"})
_WORD = re.compile(r"[a-z']+")


def greeting_only(text: str, names: frozenset[str] = frozenset()) -> bool:
    """`text` holds a greeting, or a bare ask for help, and nothing else a turn could act on ("Good
    morning.", "hi yes um", "can you help me with something?"); `names`: the agent's own name's words
    ("hi sam", to the agent who greeted as Sam)."""
    words = _WORD.findall(text.lower().replace("’", "'"))
    opener = GREETINGS | HELP
    return bool(words) and any(w in opener for w in words) and all(
        w in opener or w in _FILL or w in names for w in words)


def greeting_answer(messages: list[dict], policy: CallPolicy) -> str | None:
    """The scenario's reply to a caller who only greeted, when the latest message is theirs."""
    latest = latest_caller_words(messages)
    names = frozenset(policy.agent_name.lower().split())
    return policy.greeting_reply if policy.greeting_reply and latest is not None and greeting_only(latest, names) \
        else None


__all__ = ["GREETINGS", "greeting_answer", "greeting_only"]
