"""Argument kinds: what a tool argument holds, and the one parser that reads it from the caller's words.

A scenario's tool schema marks each argument with `x-kind` (scenarios/*/scenario.yaml):

    date          "next tuesday", "the ninth"                  -> "2026-12-08"
    time          "half past seven" (read against the hours)   -> "19:30" for a restaurant, "07:30" for a bakery
    person_name   "it's um karin das"                          -> "Karin Das"
    integer       "for four people", "a dozen", "12"           -> 4, 12, 12
    phone_number  "oh seven seven double oh, one two three"    -> "0770012 3"... digits only: "07700123"
    plate         "A B one two C D E", "ab12 cde"              -> "AB12CDE"
    enum          the caller's word for one of the schema's `enum` values, through `x-synonyms`
    text          free text, trimmed of hesitations
    email         "jo dot lee at example dot com"              -> "jo.lee@example.com"

Every parser takes the words and a `KindContext` (the call's today, the scenario's hours, the
argument's choices) and returns the canonical value, or raises `KindError` with a message the agent
can read out. Tools receive the canonical value where the pack asks for it (`normalise`); a value
that must be read back digit by digit has `spoken_digits`.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from voice_agent.policy.calendar_words import (
    _UNITS,
    Hours,
    WordsError,
    parse_day,
    parse_time,
)

KINDS = ("date", "time", "person_name", "integer", "phone_number", "plate", "enum", "text", "email", "boolean")
# Words before `_name` that name a thing, not a person ("product_name" is no caller's name).
_THING_NAMES = frozenset({"product", "item", "book", "title", "company", "business", "file", "plan", "service",
                          "street", "city", "town", "store", "shop", "hotel", "room", "event", "course", "drug",
                          "medication", "medicine", "model", "brand", "user"})


def kind_for(argument: str, spec: dict) -> str | None:
    """The kind an argument's name and schema imply, for a pack that left `x-kind` out: an `enum` list
    is a choice, an integer a count; `date`/`*_date`/`day` a date, `time`/`*_time` a time, `name`/
    `*_name` a person (not `product_name`), `phone`, `mobile` or `*_number` digits, `email` an email,
    `plate`/`registration` a plate. None: a free string only the model fills."""
    if isinstance(spec.get("enum"), list):
        return "enum"
    if spec.get("type") == "integer":
        return "integer"
    if spec.get("type") == "boolean":
        return "boolean"
    if spec.get("type") not in (None, "string"):
        return None
    words = argument.lower().replace("-", "_").split("_")
    last = words[-1]
    if last in ("date", "day"):
        return "date"
    if last == "time":
        return "time"
    if last == "name" and (len(words) == 1 or words[-2] not in _THING_NAMES):
        return "person_name"
    if "email" in words:
        return "email"
    if "plate" in words or "registration" in words:
        return "plate"
    if "phone" in words or "mobile" in words or last == "number":
        return "phone_number"
    return None


# The hesitations ASR writes down: never part of a value.
HESITATIONS = frozenset({"um", "umm", "uh", "uhh", "er", "erm", "uhm", "hmm"})


class KindError(ValueError):
    """Words that are not a value of the kind; the message says why, for the caller."""


@dataclass(frozen=True)
class KindContext:
    today: dt.date = field(default_factory=dt.date.today)
    hours: Hours | None = None                              # the scenario's opening hours
    choices: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # enum value -> its synonyms


def _words(text: object, what: str) -> list[str]:
    if not isinstance(text, str | int) or isinstance(text, bool) or not str(text).strip():
        raise KindError(f"{what} is missing")
    t = str(text).lower().replace("’", "'").replace("-", " ").replace(",", " ")
    return [w for w in re.findall(r"[a-z0-9@.']+", t) if w.strip(".") and w not in HESITATIONS]


def parse_date(text: object, ctx: KindContext) -> str:
    try:
        return parse_day(text, ctx.today).isoformat()
    except WordsError as e:
        raise KindError(str(e)) from None


def parse_clock_time(text: object, ctx: KindContext) -> str:
    try:
        return parse_time(text, ctx.hours)
    except WordsError as e:
        raise KindError(str(e)) from None


_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
         "ninety": 90}
_SMALL = {**{k: v for k, v in _UNITS.items() if v < 20}, "zero": 0, "couple": 2, "pair": 2}
_TIMES = {"dozen": 12, "hundred": 100}


def parse_integer(text: object, ctx: KindContext) -> int:
    """A count said as digits or words: "4", "for four people", "twenty two", "a dozen", "two hundred".
    Words that are not part of a number ("people", "of us") are skipped; the first number said is
    the count ("two nights, not three" is 2)."""
    value, seen = 0, False
    for w in _words(text, "the number"):
        if re.fullmatch(r"\d+", w):
            if seen:
                break
            value, seen = int(w), True
        elif w in _TENS or w in _SMALL:
            if seen and not (w in _SMALL and value in _TENS.values() and _SMALL[w] < 10):
                break  # a second number ("twenty two" goes on; "two ... three" does not)
            value, seen = value + (_TENS.get(w) or _SMALL[w]), True
        elif w in _TIMES:
            value, seen = max(value, 1) * _TIMES[w], True
        elif seen and w not in ("and", "a"):
            break
    if not seen:
        raise KindError(f"I didn't catch a number in {str(text)!r}")
    return value


_DIGIT_WORDS = {"zero": "0", "oh": "0", "o": "0", "nought": "0", "one": "1", "two": "2", "three": "3",
                "four": "4", "five": "5", "six": "6", "seven": "7", "eight": "8", "nine": "9"}


def parse_phone_number(text: object, ctx: KindContext) -> str:
    """A phone or account number as its digits: "oh seven seven double oh one two" -> "0770012".
    "double"/"triple" repeat the next digit, as callers say them."""
    digits: list[str] = []
    repeat = 1
    for w in _words(text, "the number"):
        if w in ("double", "triple"):
            repeat = 2 if w == "double" else 3
            continue
        d = _DIGIT_WORDS.get(w) or (w if re.fullmatch(r"\+?\d+", w) else None)
        if d is None:
            repeat = 1
            continue
        digits.append(d.lstrip("+") * repeat if len(d) == 1 else d.lstrip("+"))
        repeat = 1
    out = "".join(digits)
    if len(out) < 4:
        raise KindError(f"I need the whole number, digit by digit; I heard {str(text)!r}")
    return out


_PHONETIC = {"alpha": "A", "bravo": "B", "charlie": "C", "delta": "D", "echo": "E", "foxtrot": "F", "golf": "G",
             "hotel": "H", "india": "I", "juliet": "J", "kilo": "K", "lima": "L", "mike": "M", "november": "N",
             "oscar": "O", "papa": "P", "quebec": "Q", "romeo": "R", "sierra": "S", "tango": "T", "uniform": "U",
             "victor": "V", "whiskey": "W", "xray": "X", "yankee": "Y", "zulu": "Z"}


def parse_plate(text: object, ctx: KindContext) -> str:
    """A vehicle registration as capital letters and digits: "A B one two C D E" and "ab12 cde" are
    "AB12CDE"; spelling alphabet words count as their letters."""
    out = []
    words = " ".join(_words(text, "the registration")).replace("x ray", "xray").split()
    for w in words:
        if w in _PHONETIC:
            out.append(_PHONETIC[w])
        elif w in _DIGIT_WORDS and w not in ("o", "oh"):
            out.append(_DIGIT_WORDS[w])
        elif re.fullmatch(r"[a-z0-9]+", w) and (len(w) <= 4 or any(c.isdigit() for c in w)):
            out.append(w.upper())
        elif w in ("registration", "reg", "plate", "number", "is", "its", "it's", "the", "my"):
            continue
        else:
            raise KindError(f"I didn't catch the registration in {str(text)!r}; could you spell it?")
    plate = "".join(out)
    if not 2 <= len(plate) <= 8 or not any(c.isdigit() for c in plate) or not any(c.isalpha() for c in plate):
        raise KindError(f"a registration has letters and digits; I heard {str(text)!r}")
    return plate


_NOT_NAME = frozenset({"its", "it's", "it", "is", "my", "name", "names", "the", "this", "i'm", "im", "i", "am",
                       "for", "under", "mister", "mr", "mrs", "ms", "miss", "yes", "yeah", "sure", "ok", "okay"})


def parse_person_name(text: object, ctx: KindContext) -> str:
    """A person's name as the caller said it, without cue words and hesitations, in title case:
    "it's um karin das" -> "Karin Das"."""
    words = [w for w in _words(text, "the name") if not re.search(r"\d", w)]
    while words and words[0].strip("'") in _NOT_NAME:
        words = words[1:]
    if not words:
        raise KindError(f"I didn't catch a name in {str(text)!r}")
    return " ".join(w.strip(".'").capitalize() for w in words[:4])


def parse_enum(text: object, ctx: KindContext) -> str:
    """The choice the words name: an enum value itself, or one of its synonyms (whole words, the
    longest match first); exactly one choice must be named."""
    t = " " + " ".join(_words(text, "the choice")) + " "
    named = set()
    for value, synonyms in ctx.choices.items():
        for phrase in (value, *synonyms):
            p = " ".join(_words(phrase, "a synonym"))
            if p and f" {p} " in t:
                named.add(value)
    if len(named) == 1:
        return named.pop()
    options = list(ctx.choices)
    listed = ", ".join(options[:-1]) + (f" or {options[-1]}" if len(options) > 1 else "".join(options))
    raise KindError(f"which one: {listed}?" if named else f"the choices are {listed}; I heard {str(text)!r}")


# What a free-text answer opens with that is not part of it ("well, it's the hobbit").
_TEXT_LEAD_IN = re.compile(r"^(?:(?:well|so|yeah|yes|okay|ok|it'?s|it is|that'?s|that is)\b[\s,]*)+", re.IGNORECASE)


def parse_text(text: object, ctx: KindContext) -> str:
    """Free words as the caller said them, without hesitations, a lead-in or the closing
    punctuation: "um it's the hobbit." -> "the hobbit"."""
    words = str(text).replace("’", "'").split() if isinstance(text, str) else []
    kept = " ".join(w for w in words if w.lower().strip(",.") not in HESITATIONS)
    kept = _TEXT_LEAD_IN.sub("", kept).strip(" .,!?")
    if not kept:
        raise KindError("that is missing")
    return kept


_EMAIL_NOT_LOCAL = frozenset({"yeah", "yes", "its", "it's", "it", "is", "my", "email", "e", "mail", "address", "the",
                              "sure", "ok", "okay", "so", "that's", "thats", "please", "um", "uh", "oh", "and"})
_EMAIL_JOIN = {"dot": ".", "underscore": "_", "dash": "-", "hyphen": "-"}


def parse_email(text: object, ctx: KindContext) -> str:
    """"jo dot lee at example dot com" -> "jo.lee@example.com"; words around the address ("yeah it's
    ... please") are not part of it."""
    raw = str(text).strip() if isinstance(text, str) else ""
    if m := re.search(r"[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,}", raw.lower()):
        return m.group(0).rstrip(".")
    words = [w.strip(".") for w in _words(text, "the email address")]
    if "at" not in words:
        raise KindError(f"I didn't catch an email address in {str(text)!r}")
    at = len(words) - 1 - words[::-1].index("at")
    local: list[str] = []
    for w in reversed(words[:at]):
        if w in _EMAIL_NOT_LOCAL or len(local) >= 5:
            break
        local.insert(0, _EMAIL_JOIN.get(w, w))
    domain, i = [words[at + 1]] if at + 1 < len(words) else [], at + 2
    while i + 1 < len(words) and words[i] in ("dot", "."):
        domain += [".", words[i + 1]]
        i += 2
    address = "".join(local) + "@" + "".join(domain)
    if not re.fullmatch(r"[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,}", address):
        raise KindError(f"I didn't catch an email address in {str(text)!r}")
    return address


_NO = re.compile(r"\b(no|nope|nah|not|still|isn'?t|doesn'?t|didn'?t|won'?t|can'?t|broken|nothing|never)\b")
_YES = re.compile(r"\b(yes|yeah|yep|yup|correct|sure|works?|working|fixed|sorted|it does|it is)\b")
# A statement that answers "is it working now?" unasked ("now it works", "it still doesn't work").
WORKS_CUE = re.compile(r"\b(works?|working|fixed|sorted)\b", re.IGNORECASE)


def parse_boolean(text: object, ctx: KindContext) -> bool:
    """A yes or a no: "yes", "it works now", "fixed" are true; "no", "still not working", "it doesn't
    work" are false (a negation wins)."""
    if isinstance(text, bool):
        return text
    t = " ".join(_words(text, "the answer"))
    if t in ("true", "1"):
        return True
    if t in ("false", "0"):
        return False
    if _NO.search(t):
        return False
    if _YES.search(t):
        return True
    raise KindError(f"I didn't catch a yes or a no in {str(text)!r}")


# -- finders: a value of a kind inside a longer sentence ------------------------------------------------

_PLATE_STOP = frozenset({"the", "for", "and", "is", "at", "on", "in", "my", "it", "its", "it's", "an", "to", "of", "me",
                         "by", "or", "so", "um", "uh", "oh", "reg", "car", "yes", "no", "ok", "mot", "hi", "we", "be"})


def _plate_token(w: str) -> bool:
    return (len(w) == 1 and w.isalpha()) or w in _PHONETIC or (w in _DIGIT_WORDS and w not in ("o", "oh")) or (
        any(c.isdigit() for c in w) and w.isalnum() and len(w) <= 7) or (w.isalpha() and len(w) in (2, 3)
                                                                           and w not in _PLATE_STOP)


def find_plate(text: str) -> str | None:
    """The registration spelled out somewhere in `text` ("the reg is A B one two C D E and ..."): the
    longest run of letters, digits and short letter groups that reads as one; None when none does."""
    found = _plate_run(text)
    return None if found is None else found[0]


def without_plate(text: str) -> str:
    """`text` without the words of the registration in it (so its "one two" is no time of day)."""
    found = _plate_run(text)
    if found is None:
        return text
    _, start, end, words = found
    return " ".join(words[:start] + words[end:])


def _plate_run(text: str) -> tuple[str, int, int, list[str]] | None:
    words = " ".join(w.strip(".") for w in _words(text, "the registration")).replace("x ray", "xray").split() \
        if str(text).strip() else []
    best: tuple[str, int, int, list[str]] | None = None
    i = 0
    while i < len(words):
        j = i
        while j < len(words) and _plate_token(words[j]):
            j += 1
        for start in range(i, j):
            for end in range(j, start, -1):
                try:
                    plate = parse_plate(" ".join(words[start:end]), KindContext())
                except KindError:
                    continue
                if len(plate) >= 5 and (best is None or len(plate) > len(best[0])):
                    best = (plate, start, end, words)
                break
        i = max(j, i + 1)
    return best


def find_digits(text: str, at_least: int = 4) -> str | None:
    """The longest run of digits said in a row ("my number is five five five, oh one four two"):
    a phone or account number inside a sentence; None when no run has `at_least` digits."""
    runs: list[str] = []
    run: list[str] = []
    repeat = 1
    for w in (w.strip(".") for w in _words(text, "the number")) if str(text).strip() else []:
        if w in ("double", "triple"):
            repeat = 2 if w == "double" else 3
            continue
        d = _DIGIT_WORDS.get(w) if w != "o" else None
        if d is None and re.fullmatch(r"\+?\d+", w):
            d = w.lstrip("+")
        if d is None:
            runs.append("".join(run))
            run, repeat = [], 1
            continue
        run.append(d * repeat if len(d) == 1 else d)
        repeat = 1
    runs.append("".join(run))
    best = max(runs, key=len)
    return best if len(best) >= at_least else None


PARSERS: dict[str, Callable[[object, KindContext], object]] = {
    "date": parse_date, "time": parse_clock_time, "person_name": parse_person_name, "integer": parse_integer,
    "phone_number": parse_phone_number, "plate": parse_plate, "enum": parse_enum, "text": parse_text,
    "email": parse_email, "boolean": parse_boolean,
}
assert set(PARSERS) == set(KINDS)


def parse(kind: str, text: object, ctx: KindContext) -> object:
    """The canonical value of `text` read as `kind`; KindError when it is not one."""
    parser = PARSERS.get(kind)
    if parser is None:
        raise KindError(f"unknown argument kind {kind!r}; known: {', '.join(KINDS)}")
    return parser(text, ctx)


def spoken_digits(digits: str) -> str:
    """A number read back digit by digit, in groups of three and four as people say them:
    "5551234" -> "5 5 5, 1 2 3 4"."""
    d, groups = re.sub(r"\D", "", digits), []
    while len(d) > 4 and len(d) % 4:
        groups, d = [*groups, d[:3]], d[3:]
    groups += [d[i:i + 4] for i in range(0, len(d), 4)]
    return ", ".join(" ".join(g) for g in groups)


def day_words(value: str) -> str:
    """An ISO date as the agent reads it back: "Tuesday, December 8th"."""
    from voice_agent.policy.calendar_words import spoken_day

    return spoken_day(dt.date.fromisoformat(value))


__all__ = ["HESITATIONS", "WORKS_CUE", "parse_boolean", "KINDS", "KindContext", "KindError", "PARSERS", "day_words", "kind_for", "find_digits", "find_plate", "parse",
           "without_plate",
           "spoken_digits"]
