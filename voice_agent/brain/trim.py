"""The one rule for a call whose history outgrew the model's context.

Drop the oldest whole turn (a user message and every reply and tool result up to the next user
message), keep the leading system messages, never drop the latest user turn; repeat until the
request fits. The cut is remembered: the next turns start where the last one did, so the prompt
keeps the same prefix and the session's KV cache stays valid for it (the longest cached prefix is
reused exactly) instead of shifting, and being re-prefilled, on every turn.
"""

from __future__ import annotations


def _head(messages: list[dict]) -> int:
    """How many leading system messages there are."""
    n = 0
    while n < len(messages) and messages[n].get("role") == "system":
        n += 1
    return n


def drop_oldest_turn(messages: list[dict]) -> list[dict] | None:
    """`messages` without its oldest turn; None when only the latest user turn is left."""
    head = _head(messages)
    users = [i for i in range(head, len(messages)) if messages[i].get("role") == "user"]
    if len(users) < 2:
        return None
    return messages[:head] + messages[users[1]:]


class HistoryTrimmer:
    """Applies the rule for one call and remembers its cut. One turn at a time (a brain's turns
    are sequential)."""

    def __init__(self) -> None:
        self._dropped: list[dict] = []  # the non-system messages cut off the start so far

    @property
    def dropped(self) -> int:
        return len(self._dropped)

    def apply(self, messages: list[dict]) -> list[dict]:
        """`messages` with the remembered cut made, if they still start with what was cut (a call's
        history only grows); otherwise the cut is forgotten and `messages` come back whole."""
        head = _head(messages)
        n = len(self._dropped)
        if n and messages[head:head + n] == self._dropped and len(messages) > head + n:
            return messages[:head] + messages[head + n:]
        self._dropped = []
        return list(messages)

    def shorter(self, messages: list[dict]) -> list[dict] | None:
        """`messages` (as `apply` gave them) with one more turn cut, remembered; None if none is left."""
        out = drop_oldest_turn(messages)
        if out is not None:
            head = _head(messages)
            self._dropped += messages[head:head + len(messages) - len(out)]
        return out
