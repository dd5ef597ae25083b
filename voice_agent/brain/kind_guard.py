"""A number, registration or email argument that is not one is taken from the caller's words or asked for.

The tool-call guide makes a small model fill every required argument, so on a scenario it never
saw it may write the guest's name where the phone number goes ("phone_number": "tom hughes"), or a
count of nights as "the ninth". Such a call either fails in the backend or, worse, finds the wrong
record. Each argument whose `x-kind` is a phone number, registration, email or count is read by its
kind's parser (voice_agent/policy/kinds.py); one that does not read as its kind, or a number or plate
the caller never said ("five five four three" for "five five five oh one four two"), takes the value
of that kind the caller said most recently, and when they said none the scenario's question for it
is asked instead (`ask`), as the ask guard does for names, days and times.
"""

from __future__ import annotations

import json

from voice_agent.brain.mends import Mended, Unsaid
from voice_agent.policy.kinds import KindContext, KindError, find_digits, find_plate, parse
from voice_agent.said_phrases import caller_turns
from voice_agent.scenarios import ask_question

GUARDED_KINDS = ("phone_number", "plate", "email", "integer")


def mend_kinds(calls: list[dict], tools: list[dict], messages: list[dict],
               ask: dict[str, str]) -> tuple[list[Mended], Unsaid | None]:
    """Mend, in place, each guarded argument that is not of its kind; the first one the caller never
    said a value for, with a question in `ask`, is returned to be asked."""
    by_name = {t["function"]["name"]: t["function"] for t in tools or []}
    users = caller_turns(messages)
    mended: list[Mended] = []
    for call in calls:
        fn = call.get("function", {})
        props = ((by_name.get(fn.get("name")) or {}).get("parameters") or {}).get("properties") or {}
        raw = fn.get("arguments") or "{}"
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except json.JSONDecodeError:
            continue
        if not isinstance(args, dict):
            continue
        changed = False
        for key, value in list(args.items()):
            kind = (props.get(key) or {}).get("x-kind")
            if kind not in GUARDED_KINDS or value is None:
                continue
            if _reads_as(kind, value) and (kind not in _COPIED or _was_said(kind, value, users)):
                continue
            said = _latest(kind, users)
            if said is not None:
                mended.append(Mended(fn["name"], key, str(value), said))
                args[key], changed = said, True
            elif (question := ask_question(ask, fn["name"], key)) is not None:
                return mended, Unsaid(fn["name"], key, str(value), question)
        if changed:
            fn["arguments"] = json.dumps(args) if isinstance(raw, str) else args
    return mended, None


_COPIED = ("phone_number", "plate")  # copied from the caller: a number they never said is not theirs


def _was_said(kind: str, value: object, users: list[str]) -> bool:
    """The caller said this number (or plate), or said none at all (then it cannot be checked)."""
    own = str(parse(kind, value, KindContext()))
    said = [v for v in (_found(kind, t) for t in users) if v]
    return not said or any(own == v or (kind == "phone_number" and len(own) >= 7 and own in v) for v in said)


def _found(kind: str, text: str) -> str | None:
    return find_digits(text, at_least=4) if kind == "phone_number" else find_plate(text)


def _reads_as(kind: str, value: object) -> bool:
    try:
        parse(kind, value, KindContext())  # a phone number's parser also wants four digits or more
    except KindError:
        return False
    return True


def _latest(kind: str, users: list[str]) -> str | None:
    """The caller's newest value of `kind` (a count only as digits said with nothing else)."""
    for text in reversed(users):
        if kind == "phone_number" and (d := find_digits(text, at_least=4)):
            return d
        if kind == "plate" and (p := find_plate(text)):
            return p
        if kind == "email":
            try:
                return str(parse("email", text, KindContext()))
            except KindError:
                continue
    return None


__all__ = ["GUARDED_KINDS", "mend_kinds"]
