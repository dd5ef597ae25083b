"""What the scripted agent says about a tool's result: the error as a sentence with the question
that moves the call on, or the result read back in words, from the result's own fields.

Generic by construction: it reads the result's keys (a list of free times, `when`, `was`, a
`say` sentence, a done flag such as `booked: true`), never a tool's name, so every pack and every
synthetic scenario reads back the same way.
"""

from __future__ import annotations

import re

from voice_agent.policy.facts import FOLLOW_UP

DONE_WORDS = {"booked": "You're booked", "cancelled": "That's cancelled", "canceled": "That's cancelled",
              "moved": "Done, that's moved", "changed": "Done, that's changed", "opened": "Done, that's open",
              "added": "Done, that's added", "renewed": "Done, that's renewed", "ordered": "Done, that's ordered",
              "recorded": "Got it, I've noted that", "refilled": "Done, the refill is in"}
NOT_FOUND = re.compile(r"\b(can't find|cannot find|no booking|no appointment|no account|not find|there's no|there is no|"
                       r"not on file|unknown)\b", re.IGNORECASE)
SLOT_PROBLEM = re.compile(r"\b(taken|fully booked|not free|outside|closed|in the past|not a start time|only goes)\b",
                          re.IGNORECASE)
MAX_OFFERED = 3  # free times read out of a longer list
OPTIONS = re.compile(r"time|slot|free|avail|opening", re.IGNORECASE)  # a list of these is offered to pick from
_SKIP = {"read_back", "date", "time", "id", "plate", "phone", "phone_number", "error", "say", "day"}


def sentence(text: str) -> str:
    text = str(text).strip()
    return text if text.endswith((".", "?", "!")) else text + "."


def error_reply(error: str, identity_word: str | None, retimes: bool) -> tuple[str, str]:
    """(what to say, why) for a tool error: the error, then the question that moves the call on."""
    said = sentence(error)
    if said.endswith("?"):  # the error asks its own question
        return f"Sorry, {said[0].lower() + said[1:]}", "not_found" if NOT_FOUND.search(error) else "other"
    if NOT_FOUND.search(error) and identity_word:
        return f"Sorry, {said[0].lower() + said[1:]} Could you check the {identity_word} for me?", "not_found"
    if SLOT_PROBLEM.search(error) and retimes:
        return f"Sorry, {said[0].lower() + said[1:]} What other day or time would suit you?", "slot"
    return f"Sorry, {said[0].lower() + said[1:]} How would you like to go on?", "other"


def success_reply(result: dict) -> tuple[str, str]:
    """(what to say, why) for a result without an error."""
    times = next((v for k, v in result.items() if isinstance(v, list) and OPTIONS.search(k)), None)
    if isinstance(times, list):
        if not times:
            return sentence(result.get("say") or "Nothing is free then") + " Would another day work?", "nothing_free"
        day = result.get("day")
        # Three at most: a generalist taught to read every free time listed all eight of a dental day
        # and ran on past the list (43/60 held-out dental calls, against 60/60), so it is never taught to.
        times = times[:MAX_OFFERED]
        listed = ", ".join(map(str, times[:-1])) + (f" or {times[-1]}" if len(times) > 1 else str(times[0]))
        return (f"{'On ' + str(day) + ' ' if day else ''}I have {listed}. Which would suit you?"), "options"
    flag = next((k for k, v in result.items() if v is True), None)
    done = DONE_WORDS.get(flag or "", "Done") if flag else None
    details = [str(v) if _is_sentence(v) else f"{_words(k)} {v}" for k, v in result.items()
               if k not in _SKIP and k not in DONE_WORDS and k not in ("when", "was", "old")
               and not any(w in k for w in ("name", "customer")) and isinstance(v, str | int | float)
               and not isinstance(v, bool) and str(v).strip()][:3]
    parts = []
    if done:
        when, was = result.get("when"), result.get("was") or result.get("old")
        if flag in ("cancelled", "canceled", "deleted", "removed"):
            was, when = was or when, None
        parts.append(f"{done}{' for ' + str(when) if when and done.startswith('You') else ''}"
                     f"{', now ' + str(when) if when and not done.startswith('You') else ''}"
                     f"{' (it was ' + str(was) + ')' if was else ''}.")
    elif result.get("when"):
        parts.append(f"It's on {result['when']}.")
    if result.get("say"):
        said = sentence(result["say"])
        parts.append(said[0].upper() + said[1:])
    elif details:
        listed = ", ".join(details)
        parts.append(sentence(listed[0].upper() + listed[1:]))
    parts.append(FOLLOW_UP)
    return " ".join(parts), "read_back"


def _is_sentence(value: object) -> bool:
    return isinstance(value, str) and len(value.split()) > 3 and value.rstrip().endswith((".", "!"))


def _words(key: str) -> str:
    return key.replace("_", " ")


__all__ = ["error_reply", "sentence", "success_reply"]
