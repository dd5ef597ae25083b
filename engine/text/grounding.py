"""Grounded tool arguments: a value that copies the conversation is mended to what was said.

A tool schema marks a string property `"x-grounded": true` (or a kind of phrase, `"x-grounded":
"time"`) when its value is a copy of words in the conversation: the caller's name, the day and time
in the caller's own words, or a date or time that a tool result gave back. A small model copies such spans well but not perfectly: measured on
60 held-out calls (default adapter v7), it wrote "adebayo dango" for "adebayo dang", "folak Maalouf"
for "Folake Maalouf" and "thisonday" for "this monday", and each slip lost the call.

After a call is parsed, each grounded value that is not a span of the conversation's words (case and
spacing aside) is replaced by the nearest span of about as many words, when the two agree closely
(`MIN_SIMILARITY` of difflib's ratio; for a free-text value such as a name whose last word was said
as written, `SAME_SURNAME_SIMILARITY`); a value with no close span stays as it is, and the tool
answers it. Spans come from the user turns, the tool results and earlier calls' arguments, newest
first; the system prompt and the assistant's own words are not sources (a receptionist's name there
is not the caller's).
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass

GROUNDED_KEY = "x-grounded"
MIN_SIMILARITY = 0.8
# A free-text value (a name) whose last word was said as written: "diana suzuki" for "deepa suzuki"
# (0.75), "maja oyelaran" for "marcus oyelaran" (0.79); "sarah lee" for "jordan lee" (0.53) stays.
SAME_SURNAME_SIMILARITY = 0.7
WORD_RE = re.compile(r"[\w'’:-]+")


@dataclass
class Repair:
    tool: str
    key: str
    written: str
    grounded: str


# An argument's kind (`"x-kind"`, voice_agent/policy/kinds.py) implies its mark when it has none: a
# date or a time is the caller's phrase of that kind, a person's name a copy of their words, an enum
# the caller's choice; other kinds (digits, plates, free text) are not copies the engine can check.
KIND_KEY = "x-kind"
GROUNDED_BY_KIND = {"date": "day", "time": "time", "person_name": True, "enum": "choice"}


def grounding_mark(spec: object) -> object:
    """A property's `x-grounded` mark, or the one its `x-kind` implies; None when it has neither."""
    if not isinstance(spec, dict):
        return None
    return spec[GROUNDED_KEY] if GROUNDED_KEY in spec else GROUNDED_BY_KIND.get(spec.get(KIND_KEY))


def grounded_kinds(tool: dict) -> dict[str, str]:
    """Grounded key -> its kind: `"x-grounded": true` is kind "text"; a string names the kind of
    phrase (a scenario's "day", "time"), which the engine passes on without reading it."""
    props = (tool.get("function", {}).get("parameters") or {}).get("properties") or {}
    kinds = {}
    for key, spec in props.items():
        mark = grounding_mark(spec)
        if mark is True or (isinstance(mark, str) and mark.strip()):
            kinds[key] = "text" if mark is True else mark.strip()
    return kinds


def grounded_keys(tool: dict) -> list[str]:
    return list(grounded_kinds(tool))


def source_texts(messages: list[dict]) -> list[str]:
    """What grounded values may copy, newest first: user turns, tool results, earlier call arguments."""
    out: list[str] = []
    for m in messages:
        role = m.get("role")
        if role in ("user", "tool") and isinstance(m.get("content"), str):
            out.append(m["content"])
        for call in m.get("tool_calls") or [] if role == "assistant" else []:
            args = call.get("function", {}).get("arguments")
            try:
                args = json.loads(args) if isinstance(args, str) else args
            except json.JSONDecodeError:
                continue
            if isinstance(args, dict):
                out.extend(str(v) for v in args.values() if isinstance(v, str))
    return out[::-1]


def _spans(words: list[str], n: int):
    for i in range(len(words) - n + 1):
        yield " ".join(words[i:i + n])


def nearest_span(value: str, sources: list[str], same_last_word: float | None = None) -> str | None:
    """`value` itself when it is a span of `sources` (case and spacing aside); else the closest span
    of one word fewer to one word more when it agrees by MIN_SIMILARITY; else None. With
    `same_last_word`, a span of as many words (two or more) that ends in the value's own last word
    needs only that similarity: a name whose surname was copied right and first name wrong."""
    want = WORD_RE.findall(value.lower())
    if not want:
        return None
    target = " ".join(want)
    floor = MIN_SIMILARITY if same_last_word is None or len(want) < 2 else min(MIN_SIMILARITY, same_last_word)
    best, best_ratio = None, floor
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(target)
    for src in sources:
        words = WORD_RE.findall(src)
        lower = [w.lower() for w in words]
        for n in (len(want), len(want) - 1, len(want) + 1):
            if n < 1 or n > len(words):
                continue
            for i, span in enumerate(_spans(lower, n)):
                if span == target:
                    return value
                need = best_ratio
                if floor < MIN_SIMILARITY and not (n == len(want) and lower[i + n - 1] == want[-1]):
                    need = max(best_ratio, MIN_SIMILARITY)
                matcher.set_seq1(span)
                if matcher.real_quick_ratio() <= need or matcher.quick_ratio() <= need:
                    continue
                r = matcher.ratio()
                if r > need:
                    best, best_ratio = " ".join(words[i:i + n]), r
    return best


def grounded_arguments(calls: list[dict], tools: list[dict]):
    """(function, its arguments as a dict, grounded key -> kind) of each call to a tool with grounded
    keys; calls whose arguments are not a JSON object are left out."""
    by_name = {t["function"]["name"]: t for t in tools or []}
    for call in calls:
        fn = call.get("function", {})
        keys = grounded_kinds(by_name.get(fn.get("name"), {}))
        if not keys:
            continue
        args = fn.get("arguments") or "{}"
        try:
            args = json.loads(args) if isinstance(args, str) else args
        except json.JSONDecodeError:
            continue
        if isinstance(args, dict):
            yield fn, args, keys


def ground_calls(calls: list[dict], tools: list[dict], messages: list[dict]) -> list[Repair]:
    """Mend the grounded arguments of OpenAI-shaped `calls` in place; return what was changed."""
    sources: list[str] | None = None
    repairs: list[Repair] = []
    by_name = {t["function"]["name"]: t for t in tools or []}
    for fn, args, keys in grounded_arguments(calls, tools):
        changed = False
        props = by_name[fn["name"]]["function"]["parameters"]["properties"]
        for key in keys:
            value = args.get(key)
            if not isinstance(value, str) or not value.strip() or value in (props[key].get("enum") or ()):
                continue  # an enum value is a choice, not a copy ("checkup" is no misspelt "check")
            if sources is None:
                sources = source_texts(messages)
            span = nearest_span(value, sources, SAME_SURNAME_SIMILARITY if keys[key] == "text" else None)
            if span is not None and span != value:
                repairs.append(Repair(fn["name"], key, value, span))
                args[key] = span
                changed = True
        if changed:
            fn["arguments"] = json.dumps(args) if isinstance(fn.get("arguments"), str) else args
    return repairs


__all__ = ["GROUNDED_BY_KIND", "KIND_KEY", "grounding_mark", "GROUNDED_KEY", "MIN_SIMILARITY", "SAME_SURNAME_SIMILARITY", "WORD_RE", "Repair", "ground_calls",
           "grounded_arguments", "grounded_keys", "grounded_kinds", "nearest_span", "source_texts"]
