"""Which words of the caller name a day, a time or a choice: the phrases a typed tool argument takes.

A tool argument of `x-kind: date` or `time` (`x-grounded: day`, `time`) must be the caller's
own phrase for a day or a time. Adapter v7 often made the right call with a mangled copy: "1:00" or
"9" for "half past one", "this coming tomorrow" for "tomorrow", the caller's name as the date. The
ask guard (voice_agent/brain/ask_guard.py) then asked for what the caller had just said. With these
finders it takes the caller's phrase instead, when the caller's latest words that name one name
exactly one, and asks only when they name none or two different ones. A phrase right after "not"
is one the caller refuses: "sorry i meant eleven not ten" says eleven.

A phrase is a run of words that `policy/calendar_words` parses, with a marker of its kind: a weekday, month,
ordinal, "today" or "tomorrow" for a day; a bare number, a clock time, am/pm, "o'clock", "half past"
or "noon" for a time, and no ordinal, weekday or month (so "the 9th" is a day, not nine o'clock).

An enum argument (`x-kind: enum`, `x-grounded: choice`) is a choice, not a copy: v7 booked "a clean"
as a checkup. The caller's latest words that name one value (the value or one of its `x-synonyms`:
"a clean", "hygiene visit", "cavity") decide it; the argument takes the value itself. The choices
come from the scenario's tools (`Choices`: value -> words).

A name is what follows the words callers introduce one with ("the name is karin um das", "it's for
isabel so wojcik", "this is tomasz nowak"): up to three words that are no common word and no day
or time word, hesitations left out. Only a name of two words or more counts, so that "i'm
calling" or "it's urgent" never reads as one. An intent is a phrase of the scenario's `intents`
block ("call off", "what time is my"), matched as whole words.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from functools import lru_cache

from voice_agent.policy.calendar_words import (
    _ORDINALS,
    _UNITS,
    MONTHS,
    WEEKDAYS,
    parse_day,
    parse_time,
)

Choices = Mapping[str, tuple[str, ...]]  # an enum value -> the caller's words for it (itself included)

MAX_WORDS = 5
_WORD = re.compile(r"\d{4}-\d{2}-\d{2}|[a-z0-9:']+")  # an ISO date is one word: its "12" is no time
_WORD_OR_COMMA = re.compile(r"\d{4}-\d{2}-\d{2}|[a-z0-9:']+|,")
_MONTHS = set(MONTHS) | {m[:3] for m in MONTHS}
_DAYS = set(WEEKDAYS) | {d + "s" for d in WEEKDAYS}
_ORDINAL = re.compile(r"\d{1,2}(st|nd|rd|th)")
# Words that may sit inside a phrase but never start or end one ("at ten please" is "ten").
_GLUE = {"at", "on", "the", "of", "in", "um", "uh", "like", "so", "please", "around", "about", "for", "or",
         "maybe", "and", "a"}
_NUMERAL = re.compile(r"\d{1,2}(:\d{2})?|\d{1,2}(st|nd|rd|th)|\d{4}-\d{2}-\d{2}")  # "10", "9:30", "7th", an ISO date
_CALENDAR_GLUE = {"at", "on", "around", "about", "by"}  # "monday at nine": words between a day and a time
_DAY_LEADS = {"the", "next", "this"}     # "the ninth", "next tuesday", "this coming friday"
_DAY_NAMES = _DAYS | _MONTHS | {"today", "tonight", "tomorrow"}
_DAY_VOCAB = _DAY_NAMES | set(_UNITS) | set(_ORDINALS) | {"the", "of", "next", "this", "coming", "day", "after"}


_GREETING = re.compile(r"\bgood (morning|afternoon|evening|day)\b")


@lru_cache(maxsize=64)
def _choice_finder(words: tuple[tuple[str, tuple[str, ...]], ...]) -> tuple[re.Pattern | None, dict[str, str]]:
    """A whole-word finder of every choice's words (longest first), and each word -> its value."""
    of = {" ".join(_words(w.replace("-", " "))): value for value, ws in words for w in ws}
    of.pop("", None)
    if not of:
        return None, {}
    return re.compile(r"\b(" + "|".join(re.escape(w) for w in sorted(of, key=len, reverse=True)) + r")\b"), of


def _finder(choices: Choices | None) -> tuple[re.Pattern | None, dict[str, str]]:
    return _choice_finder(tuple((v, tuple(ws)) for v, ws in (choices or {}).items()))


def parse_choice(text: object, choices: Choices | None) -> str:
    """The one value whose words `text` names."""
    finder, of = _finder(choices)
    named = {of[m] for m in finder.findall(" ".join(_words(text.replace("-", " "))))} if (
        finder is not None and isinstance(text, str)) else set()
    if len(named) != 1:
        raise ValueError(f"{text!r} names {'no' if not named else 'more than one'} choice")
    return named.pop()
_ONE_OF = {"that", "this", "which", "later", "earlier", "first", "last", "other", "next", "second", "third",
           "any", "no", "each", "morning", "afternoon", "early", "late", "best", "same",
           # "can I book one", "I need one": a thing, not one o'clock
           "book", "get", "have", "need", "want", "take", "another", "just", "only", "a"}
# Words after a number that make it a time of day, whatever comes before ("december ten am").
_CLOCK_MARKS = {"am", "pm", "m", "o'clock", "oclock"}
_TIME_VOCAB = {"am", "pm", "a", "m", "p", "in", "the", "morning", "afternoon", "evening", "o'clock", "oclock",
               "sharp", "half", "quarter", "past", "to", "oh", "noon", "midday"}


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace("’", "'"))


def _is_ordinal(w: str) -> bool:
    return w in _ORDINALS or bool(_ORDINAL.fullmatch(w))


def _is_number(w: str) -> bool:
    return w in _UNITS or bool(re.fullmatch(r"\d{1,2}(:\d{2})?(am|pm)?", w))


_ISO_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


def _names_a_day(words: list[str]) -> bool:
    return bool(set(words) & _DAY_NAMES) or any(_is_ordinal(w) or _ISO_DAY.fullmatch(w) for w in words)


def is_day_phrase(words: list[str], today: dt.date) -> bool:
    if not _names_a_day(words):
        return False
    # Every word must belong to a day (the parser skips words it does not know).
    if not all(w in _DAY_VOCAB or _is_ordinal(w) or re.fullmatch(r"\d{1,2}", w) or _ISO_DAY.fullmatch(w) for w in words):
        return False
    try:
        parse_day(" ".join(words), today)
    except ValueError:
        return False
    return True


def is_time_phrase(words: list[str], before: str = "") -> bool:
    text = " ".join(words)
    if _names_a_day(words):
        return False
    if not (any(_is_number(w) for w in words) or text in ("noon", "midday")):
        return False
    if not all(w in _TIME_VOCAB or _is_number(w) for w in words):  # the parser skips words it does not know
        return False
    if (before in _MONTHS or before == "the") and not set(words) & _CLOCK_MARKS:
        return False  # "december 10", "the 9": a day of the month ("the eleventh of december ten am" is a time)
    if text == "one" and before in _ONE_OF:  # "the later one", "that one": a pick, not one o'clock
        return False
    try:
        parse_time(text)
    except ValueError:
        return False
    return True


def _maximal_spans(text: str, ok: Callable[[list[str], str], bool], leads: set[str]) -> tuple[list[tuple[int, int]], list[str]]:
    # ASR's hesitations inside a day or a time are not part of it: "ten um thirty am" is ten thirty
    # (seed-4 gen_020 was booked at ten).
    words = [w for w in _words(text) if w not in FILLERS]
    spans = []
    for i in range(len(words)):
        if words[i] in _GLUE and words[i] not in leads:
            continue
        for j in range(min(len(words), i + MAX_WORDS), i, -1):
            if words[j - 1] in _GLUE:
                continue
            if ok(words[i:j], words[i - 1] if i else ""):
                spans.append((i, j))
                break
    spans = [s for s in spans if not any(o != s and o[0] <= s[0] and s[1] <= o[1] for o in spans)]
    return spans, words


def phrases_in(text: str, kind: str, today: dt.date, choices: Choices | None = None) -> list[str]:
    """The maximal phrases of `kind` ("day", "time" or "choice": words of `choices`) in `text`, in order."""
    return [p for p, _ in _phrases(text, kind, today, choices)]


def _phrases(text: str, kind: str, today: dt.date, choices: Choices | None = None) -> list[tuple[str, bool]]:
    """(phrase, refused) for each phrase of `kind` in `text`; refused: "not" comes right before it
    ("eleven, not ten": ten is refused)."""
    if kind == "day":
        spans, words = _maximal_spans(text, lambda w, _b: is_day_phrase(w, today), _DAY_LEADS)
        spans = [_without_clock_number(span, words, today) for span in spans]
    elif kind == "time":
        spans, words = _maximal_spans(text, is_time_phrase, set())
        spans = [(i, j) for i, j in spans if not _counts(words, j)]
    elif kind == "choice":
        finder, _ = _finder(choices)
        plain = _GREETING.sub(" ", " ".join(_words(text.replace("-", " "))))  # "good morning" chooses no morning
        return [] if finder is None else [(p, False) for p in finder.findall(plain)]
    else:
        return []
    return [(" ".join(words[i:j]), _refused(words[:i])) for i, j in spans]


# Words after a number that make it a count, not a time of day ("for four people", "two new tyres").
_COUNTED = frozenset({"people", "persons", "guests", "adults", "kids", "children", "of", "new", "more", "extra",
                      "nights", "tickets", "seats", "tables", "times", "hours", "minutes", "weeks", "months", "years",
                      "items", "pieces", "bags", "rooms", "cars", "tyres", "tires", "teeth", "us"})


def _counts(words: list[str], end: int) -> bool:
    """The number phrase ending before `words[end]` counts things ("four people"): no time."""
    return end < len(words) and words[end] in _COUNTED and words[end - 1] not in _CLOCK_MARKS


def _without_clock_number(span: tuple[int, int], words: list[str], today: dt.date) -> tuple[int, int]:
    """A day phrase less its last number when a clock mark follows it and the rest is still a day:
    "the eleventh of december ten am" names the 11th, and ten am is its time."""
    i, j = span
    if j < len(words) and words[j] in _CLOCK_MARKS | {"a"} and _is_number(words[j - 1]) and j - 1 > i:
        k = j - 1
        while k > i and words[k - 1] in _GLUE:
            k -= 1
        if k > i and is_day_phrase(words[i:k], today):
            return i, k
    return span


# Words that refuse what follows them within a few words ("I can't make it on Thursday": Thursday is
# refused; "eleven, not ten": ten is).
_NEGATORS = frozenset({"not", "cant", "cannot", "wont", "couldnt", "unable", "dont"})
_REFUSAL_REACH = 5  # words between a negator and the phrase it refuses


def _refused(before: list[str]) -> bool:
    while before and before[-1] in _GLUE:
        before = before[:-1]
    if bool(before) and before[-1] in ("not", "instead"):
        return True
    return any(w.replace("'", "") in _NEGATORS for w in before[-_REFUSAL_REACH:])


def value_of(phrase: str, kind: str, today: dt.date, choices: Choices | None = None) -> object:
    if kind == "choice":
        return parse_choice(phrase, choices)
    return parse_day(phrase, today) if kind == "day" else parse_time(phrase)


def as_argument(phrase: str, kind: str, today: dt.date, choices: Choices | None = None) -> str:
    """What a typed argument takes for the caller's `phrase`: the words themselves for a day or a time
    (the tools resolve them), the value itself for a choice (an enum)."""
    return str(value_of(phrase, kind, today, choices)) if kind == "choice" else phrase


def is_phrase(value: str, kind: str, today: dt.date, choices: Choices | None = None) -> bool:
    """`value` as a whole is a phrase of `kind` (kinds without a finder: always)."""
    if kind not in PHRASE_KINDS:
        return True
    if kind == "day" and re.fullmatch(r"\d{4}-\d{2}-\d{2}", value.strip()):  # a date a tool result gave
        try:
            return bool(parse_day(value, today))
        except ValueError:
            return False
    if kind == "choice":
        try:
            return bool(parse_choice(value, choices))
        except ValueError:
            return False
    words = _words(value)
    return bool(words) and (is_day_phrase(words, today) if kind == "day" else is_time_phrase(words))


def _newest_named(kind: str, user_turns: list[str], today: dt.date,
                  choices: Choices | None = None) -> list[tuple[str, bool]]:
    """(phrase, refused) of `kind` in the newest of `user_turns` that names any; [] when none does."""
    for text in reversed(user_turns):
        if named := _phrases(text, kind, today, choices):
            return named
    return []


def latest_said(kind: str, user_turns: list[str], today: dt.date, choices: Choices | None = None) -> str | None:
    """The one phrase of `kind` in the newest of `user_turns` that names any, leaving out those the
    caller refused ("eleven, not ten" says eleven); None when none is left or two different values."""
    found = [p for p, refused in _newest_named(kind, user_turns, today, choices) if not refused]
    if not found:
        return None
    values = set()
    for p in found:
        try:
            values.add(value_of(p, kind, today, choices))
        except ValueError:
            return None
    return max(found, key=len) if len(values) == 1 else None


def refused_latest(kind: str, user_turns: list[str], today: dt.date) -> set[object]:
    """The values of `kind` that the newest of `user_turns` naming any refuses ("not ten")."""
    out = set()
    for p, refused in _newest_named(kind, user_turns, today):
        if refused:
            try:
                out.add(value_of(p, kind, today))
            except ValueError:
                pass
    return out


# Words that introduce a name ("it's" and "its": ASR drops the apostrophe), longest first.
_NAME_CUES = sorted((tuple(c.split()) for c in (
    "my name is", "my names", "the name is", "the names", "name is", "names", "name", "this is", "its for", "it is for", "its",
    "it is", "im", "i am", "under", "put it under", "for a mister", "for mister", "for miss", "for ms", "for mrs")),
    key=len, reverse=True)
# Hesitations ASR writes down ("it's for kofi rahman like"); never part of a name.
HESITATIONS = frozenset({"um", "umm", "uh", "uhh", "er", "erm", "uhm", "hmm", "so", "like"})
FILLERS = HESITATIONS - {"so", "like"}  # the hesitations that are never words of the line ("so" and "like" can be)
# Words no name is made of: a name runs up to the first of these.
_COMMON = set("""a about actually again all also am an and any anything anyone appointment are around as at
available back be been booked booking book but by calling call can cancel cant check come coming could day
did do does doing dont down else evening fine for free from get give going good got great had has have hello
help here hey hi hoping how i id if ill im in is it its just know later let lets like looking make me mine
morning move my name need new next no not now of off ok okay on one or our out over patient please put really
reschedule right say see should so some someone something soon sorry speaking still sure than thank thanks
registration reg plate number card account phone mobile email address car
that thats the them then there this time to today tomorrow too trying up urgent us visit want wanted was
we well were what whats when where which who will with would yeah yes you your""".split())


def said_name(user_turns: list[str]) -> str | None:
    """The name the newest of `user_turns` that gives one gives after a cue ("the name is ..."),
    without hesitations; None when no turn does."""
    for text in reversed(user_turns):
        # hesitations may sit inside a cue too: "it's like for simone silva" (seed-6 gen_048)
        # a comma after two words ends a name: "it's karl meyer, something's come up"
        words = _name_words(text)
        for i in range(len(words)):
            cue = next((c for c in _NAME_CUES if tuple(words[i:i + len(c)]) == c), None)
            if cue is not None and len(name := _name_after(words[i + len(cue):])) >= 2:
                return " ".join(name)
    return None


# A month's short form is a name too ("Jun Khan", "Jan Novak"); only whole month names end a name.
_NAME_DAY_VOCAB = _DAY_VOCAB - ({m[:3] for m in MONTHS} - set(MONTHS))


def _name_words(text: str) -> list[str]:
    """`text`'s words and commas, lowercase, apostrophes and hesitations gone: what a name is looked for in."""
    return [w.replace("'", "") for w in _WORD_OR_COMMA.findall(text.lower().replace("’", "'")) if w not in HESITATIONS]


def _may_be_name_word(w: str) -> bool:
    """No common word, day, time or number (nor a comma) is part of a name."""
    return w.isalpha() and w not in _COMMON and w not in _NAME_DAY_VOCAB and w not in _TIME_VOCAB


def _name_after(words: list[str]) -> list[str]:
    name: list[str] = []
    for w in words:  # _name_words has dropped the hesitations
        if w == ",":
            if len(name) >= 2:
                break
            continue
        if len(name) == 3 or not _may_be_name_word(w):
            break
        name.append(w)
    return name


def name_like_run(text: str) -> str | None:
    """The first run of two or three words in `text` that could be a name though no cue introduced it
    ("book jordan lee for a checkup"): none of them a common word, a day, a time or a number. Not
    taken as the name (its words may be a service the pack calls otherwise); it only says the
    caller may have given one."""
    run: list[str] = []
    for w in [*_name_words(text), ","]:  # the comma closes the last run
        if _may_be_name_word(w):
            run.append(w)
            continue
        if 2 <= len(run) <= 3:
            return " ".join(run)
        run = []
    return None


def only_common_words(text: str) -> bool:
    """`text` is made of words no name is made of ("yes", "hi there", "okay"): no name."""
    words = [w.replace("'", "") for w in _words(text.lower()) if w not in HESITATIONS]
    return bool(words) and all(w in _COMMON for w in words)


def only_calendar_words(text: str) -> bool:
    """`text` is made of day and time words only ("december", "december of december", "monday at
    nine": held-out hw_weekend_request booked a patient of that name): no name."""
    words = [w for w in _words(text.lower()) if w not in HESITATIONS]
    return (bool(words) and all(w in _DAY_VOCAB or w in _TIME_VOCAB or w in _CALENDAR_GLUE or _NUMERAL.fullmatch(w)
                                for w in words)
            and not all(w in _CALENDAR_GLUE for w in words))


_CONTRACTED_IS = re.compile(r"\b(when|what|where|who|how|that|there|it|here)['’]s\b", re.IGNORECASE)


def _expanded(text: str) -> str:
    """"when's my visit" as "when is my visit": a phrase matches however it was contracted."""
    return _CONTRACTED_IS.sub(r"\1 is", text)


def said_intents(text: str, intents: dict[str, tuple[str, ...]]) -> set[str]:
    """The tools of `intents` ({tool: phrases}) whose phrases `text` says, as whole words ("call off my
    visit" says cancel_appointment's "call off"; apostrophes are ignored, so "cant" is "can't"). A
    hesitation inside a phrase is skipped: "call uh off my visit" is a cancel too (unseen seed-12
    gen_056 got the goodbye)."""
    flat = " " + " ".join(w.replace("'", "") for w in _words(_expanded(text)) if w not in FILLERS) + " "
    return {tool for tool, phrases in intents.items()
            if any(f" {' '.join(w.replace(chr(39), '') for w in _words(p))} " in flat for p in phrases)}


# A part of the day the caller asks for without a time ("anything in the morning", "later in the day
# would be good"): the free-times search's `part_of_day`. Whole words; a phrase that names a time
# ("ten in the morning") is a time, not a part.
_PARTS = {"morning": ("morning", "mornings", "before lunch", "early in the day", "first thing"),
          "afternoon": ("afternoon", "afternoons", "after lunch", "later in the day", "late in the day",
                        "end of the day")}


def part_of_day(text: str, today: dt.date) -> str | None:
    """The one part of the day `text` asks for ("morning" or "afternoon"), when it names no time."""
    if phrases_in(text, "time", today):
        return None
    parts = said_intents(text, _PARTS)  # the same whole-word match as a tool's intent phrases
    return parts.pop() if len(parts) == 1 else None


NAME_ARGUMENT = re.compile(r"(^|_)name$")  # a free-text argument that holds a person's name
PHRASE_KINDS = ("day", "time", "choice")
CHOSEN_KINDS = ("choice",)  # an enum choice: the caller's latest words decide it, whatever was said before
COPIED_KINDS = ("day", "time")  # a copy of what was said: the caller's own phrase of its kind


def latest_caller_words(messages: list[dict]) -> str | None:
    """The caller's words when the conversation's latest message is theirs; None otherwise."""
    if not messages or messages[-1].get("role") != "user":
        return None
    latest = messages[-1].get("content")
    return latest if isinstance(latest, str) else None


def caller_turns(messages: list[dict]) -> list[str]:
    """The caller's words of each user message of an OpenAI-shaped conversation, oldest first."""
    return [m["content"] for m in messages if m.get("role") == "user" and isinstance(m.get("content"), str)]

__all__ = ["CHOSEN_KINDS", "NAME_ARGUMENT", "COPIED_KINDS", "FILLERS", "HESITATIONS", "PHRASE_KINDS", "as_argument", "caller_turns", "is_day_phrase", "is_phrase", "is_time_phrase", "latest_caller_words", "latest_said", "name_like_run", "only_common_words",
           "only_calendar_words", "part_of_day", "phrases_in", "refused_latest", "said_intents", "said_name", "value_of"]
