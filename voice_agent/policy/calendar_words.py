"""The caller's own words for days and times, resolved in code against the call's today and the
scenario's opening hours.

Tools take what the caller said ("next tuesday", "the ninth", "ten thirty", "half past two"), so the
model copies words instead of computing dates: a small model copies well and computes calendars
badly (BRAIN.md: dates copied from a calendar were right 57% of the time). Each parser returns the
canonical value or raises WordsError with a message the agent can say.

    parse_day("next tuesday", today=date(2026, 12, 1))   -> date(2026, 12, 8)
    parse_time("half past two")                          -> "14:30"
    parse_time("seven", hours=Hours.of("17:00-23:00"))   -> "19:00"  (a restaurant's evening)
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september",
          "october", "november", "december")
_UNITS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
          "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
          "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30}
_ORDINALS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8,
             "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12, "thirteenth": 13, "fourteenth": 14,
             "fifteenth": 15, "sixteenth": 16, "seventeenth": 17, "eighteenth": 18, "nineteenth": 19,
             "twentieth": 20, "thirtieth": 30}


class WordsError(ValueError):
    """Words that do not name one day or time; the message says why, for the caller."""


@dataclass(frozen=True)
class Hours:
    """When a scenario is open, in minutes after midnight: an hour said without am or pm is read as
    the one of its two readings that falls inside them ("seven" is 19:00 for a restaurant open
    17:00-23:00, 7:00 for a bakery open 6:00-14:00)."""

    open_min: int
    close_min: int

    @classmethod
    def of(cls, text: str) -> Hours:
        """"09:00-17:00" (24-hour)."""
        m = re.fullmatch(r"\s*(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\s*", str(text))
        if not m:
            raise ValueError(f"opening hours must look like 09:00-17:00; got {text!r}")
        a, b = int(m.group(1)) * 60 + int(m.group(2)), int(m.group(3)) * 60 + int(m.group(4))
        if not 0 <= a < b <= 24 * 60:
            raise ValueError(f"opening hours must open before they close, within one day; got {text!r}")
        return cls(a, b)

    def holds(self, hour: int, minute: int) -> bool:
        return self.open_min <= hour * 60 + minute < self.close_min


# Without a scenario's hours, a bare hour is read as a business day's: 7-11 am, 12 noon, 1-6 pm.
DAYTIME = Hours(7 * 60, 19 * 60)


def _clean(text: object, what: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise WordsError(f"{what} is missing")
    t = text.lower().replace("'", "").replace("-", " ").replace(",", " ").replace(".", " ")
    t = re.sub(r"\b(um+|uh+|er|please|on|at|for|around|about|maybe|like)\b", " ", t)
    return " ".join(t.split())


def _number(words: list[str]) -> tuple[int, int] | None:
    """A number at the front of `words` ("twenty one", "21", "ninth", "21st"): (value, words used)."""
    if not words:
        return None
    w = words[0]
    m = re.fullmatch(r"(\d{1,2})(st|nd|rd|th)?", w)
    if m:
        return int(m.group(1)), 1
    if w in ("twenty", "thirty") and len(words) > 1:
        nxt = _ORDINALS.get(words[1]) or _UNITS.get(words[1])
        if nxt and nxt < 10:
            return _UNITS[w] + nxt, 2
    if w in _ORDINALS:
        return _ORDINALS[w], 1
    if w in _UNITS:
        return _UNITS[w], 1
    return None


def parse_day(text: object, today: dt.date) -> dt.date:
    """A day the caller named, resolved against `today` (weekday names mean the next one to come)."""
    t = _clean(text, "the day")
    iso = re.fullmatch(r"(\d{4})\s(\d{1,2})\s(\d{1,2})", t.replace("/", " "))
    if re.fullmatch(r"\d{4} \d{2} \d{2}", t) or iso:
        y, mo, d = (int(x) for x in t.replace("/", " ").split())
        try:
            return dt.date(y, mo, d)
        except ValueError:
            raise WordsError(f"{text} is not a real calendar date") from None
    t = re.sub(r"\b(in the )?(morning|afternoon|evening|early|late|first thing)\b", " ", t)
    t = re.sub(r"\bthe\b|\bof\b|\bthis coming\b|\bcoming\b", " ", t)
    words = t.split()
    if not words:
        raise WordsError("which day would you like?")
    if words[:3] == ["day", "after", "tomorrow"]:
        return today + dt.timedelta(days=2)
    if words[0] in ("today", "tonight"):
        return today
    if words[0] in ("tomorrow", "tmrw"):
        return today + dt.timedelta(days=1)
    if words[0] in ("next", "this"):
        words = words[1:]
    if words and words[0] in ("week", "month") or not words:
        raise WordsError("which day exactly? For example Tuesday, or the ninth")
    for i, name in enumerate(WEEKDAYS):
        if words[0] in (name, name[:3], name + "s"):
            ahead = (i - today.weekday()) % 7
            if ahead == 0:
                ahead = 7
            day = today + dt.timedelta(days=ahead)
            rest = words[1:]
            if rest:  # "tuesday the eighth": the number must agree with the weekday
                num = _number(rest)
                if num:
                    day = _day_of_month(num[0], today)
                    if day.weekday() != i:
                        raise WordsError(f"the {_ordinal(num[0])} is a {day:%A}, not a {name.title()}")
            return day
    month = None
    if words[0] in MONTHS or words[0][:3] in [m[:3] for m in MONTHS]:
        month = [m[:3] for m in MONTHS].index(words[0][:3]) + 1
        words = words[1:]
    num = _number(words)
    if num is None:
        raise WordsError(f"I didn't catch the day in {text!r}")
    words = words[num[1]:]
    if month is None and words and words[0][:3] in [m[:3] for m in MONTHS]:
        month = [m[:3] for m in MONTHS].index(words[0][:3]) + 1
    if month is None:
        return _day_of_month(num[0], today)
    year = today.year + (1 if month < today.month else 0)
    try:
        return dt.date(year, month, num[0])
    except ValueError:
        raise WordsError(f"{MONTHS[month - 1].title()} has no {_ordinal(num[0])}") from None


def _day_of_month(n: int, today: dt.date) -> dt.date:
    """"the ninth": this month's if still to come, else next month's."""
    for months_ahead in (0, 1):
        y, m = today.year, today.month + months_ahead
        if m > 12:
            y, m = y + 1, 1
        try:
            d = dt.date(y, m, n)
        except ValueError:
            continue
        if d >= today:
            return d
    raise WordsError(f"there is no {_ordinal(n)} coming up")


def parse_time(text: object, hours: Hours | None = None) -> str:
    """A time of day as HH:MM (24-hour). An hour said without am, pm, morning or evening is the reading
    inside `hours` when exactly one is, else the reading inside a business day (`DAYTIME`)."""
    t = _clean(text, "the time")
    if t in ("noon", "midday", "twelve noon"):
        return "12:00"
    pm = bool(re.search(r"\b(pm|p m|afternoon|evening)\b", t))
    am = bool(re.search(r"\b(am|a m|morning)\b", t))
    t = " ".join(re.sub(r"\b(pm|p m|am|a m|in the|the|afternoon|evening|morning|o ?clock|sharp)\b", " ", t).split())
    t = re.sub(r"(\d)(am|pm)$", r"\1", t)
    m = re.fullmatch(r"(\d{1,2})(?:[: ](\d{2}))?", t)
    if m:
        hour, minute = int(m.group(1)), int(m.group(2) or 0)
    else:
        words = t.split()
        half = re.fullmatch(r"(half|quarter) (past|to) (.+)", " ".join(words))
        if half:
            n = _number(half.group(3).split())
            if n is None:
                raise WordsError(f"I didn't catch the time in {text!r}")
            delta = 30 if half.group(1) == "half" else 15
            hour, minute = (n[0], delta) if half.group(2) == "past" else (n[0] - 1, 60 - delta)
        else:
            n = _number(words)
            if n is None:
                raise WordsError(f"I didn't catch the time in {text!r}")
            hour, rest = n[0], words[n[1]:]
            minute = 0
            if rest:
                if rest[0] == "oh" and len(rest) > 1:
                    rest = rest[1:]
                mn = _number(rest)
                if mn is None:
                    raise WordsError(f"I didn't catch the time in {text!r}")
                minute = mn[0]
    if hour is None or not 0 <= hour <= 23 or not 0 <= minute <= 59:
        raise WordsError(f"{text!r} is not a time of day")
    if pm and hour < 12:
        hour += 12
    elif not am and 1 <= hour <= 12:
        hour = _open_reading(hour, minute, hours)
    return f"{hour:02d}:{minute:02d}"


def _open_reading(hour: int, minute: int, hours: Hours | None) -> int:
    """The 24-hour reading of a bare `hour` (1-12): the one inside `hours` when only one is."""
    readings = (hour % 12, hour % 12 + 12) if hour != 12 else (12,)
    for within in (hours, DAYTIME):
        inside = [h for h in readings if within is not None and within.holds(h, minute)]
        if len(inside) == 1:
            return inside[0]
    return hour


def spoken_day(d: dt.date) -> str:
    """"Tuesday, December 8th": what the agent reads back."""
    return f"{d:%A}, {d:%B} {_ordinal(d.day)}"


def spoken_time(hhmm: str) -> str:
    """"10 am", "2:30 pm"."""
    h, m = (int(x) for x in hhmm.split(":"))
    suffix = "am" if h < 12 else "pm"
    h12 = h % 12 or 12
    return f"{h12} {suffix}" if m == 0 else f"{h12}:{m:02d} {suffix}"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
