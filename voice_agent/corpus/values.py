"""Values a caller says, drawn per argument kind: the canonical value a tool stores, and the words
a caller says for it (digits in words, "half past two", "A B one two C D E").

    bank = ValueBank(split="train", seed=0)
    value = bank.draw("date", rng, today=..., hours=...)   # Value(canonical="2026-12-09", words="the ninth")

Every spoken form is checked with the runtime's own parser (`voice_agent.policy.kinds.parse`), so a
corpus never teaches words the state cannot read. Names are split by first and last name: a held-out
split draws names the training split never does.
"""

from __future__ import annotations

import datetime as dt
import random
import string
import zlib
from dataclasses import dataclass

from voice_agent.dialogues.lexicon import FIRST, LAST
from voice_agent.policy.calendar_words import WEEKDAYS, Hours, spoken_time
from voice_agent.policy.kinds import KindContext, KindError, parse

DIGIT_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
UNITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
         "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"]
ORDINALS = ["", "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth",
            "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth", "seventeenth",
            "eighteenth", "nineteenth", "twentieth"]
MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december"]
EMAIL_HOSTS = ["gmail dot com", "outlook dot com", "yahoo dot com", "icloud dot com", "proton dot me",
               "example dot org", "hotmail dot co dot uk", "mail dot com"]
HELDOUT_SHARE = 5  # one name part in five is held out


@dataclass(frozen=True)
class Value:
    canonical: str   # what the tool stores ("2026-12-09", "14:30", "5550142", "Maria Lopez")
    words: str       # what the caller says


def held_out(word: str) -> bool:
    """A stable fifth of the name parts (and of any other bank keyed by words) is held out."""
    return zlib.crc32(word.lower().encode()) % HELDOUT_SHARE == 0


def _th(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _ordinal_words(n: int) -> str:
    if n <= 20:
        return ORDINALS[n]
    tens = "twenty" if n < 30 else "thirty"
    return tens + ("" if n % 10 == 0 else " " + ORDINALS[n % 10]) if n % 10 else ("thirtieth" if n == 30 else tens)


def _count_words(n: int) -> str:
    if n <= 20:
        return UNITS[n]
    tens = {2: "twenty", 3: "thirty", 4: "forty", 5: "fifty", 6: "sixty", 7: "seventy", 8: "eighty", 9: "ninety"}
    return tens[n // 10] + ("" if n % 10 == 0 else " " + UNITS[n % 10])


class ValueBank:
    """Draws values of each kind for one split ("train" or "heldout")."""

    def __init__(self, split: str = "train") -> None:
        self.split = split
        keep = (lambda w: held_out(w)) if split == "heldout" else (lambda w: not held_out(w))
        self.firsts = sorted({w for w in FIRST if keep(w)})
        self.lasts = sorted({w for w in LAST if keep(w)})

    # -- one kind each ----------------------------------------------------------------------------
    def person_name(self, rng: random.Random) -> Value:
        first, last = rng.choice(self.firsts), rng.choice(self.lasts)
        name = f"{first} {last}"
        return Value(name, name if rng.random() < 0.5 else name.lower())

    def date(self, rng: random.Random, today: dt.date, open_days: tuple[int, ...] = (0, 1, 2, 3, 4, 5)) -> Value:
        for _ in range(20):
            d = today + dt.timedelta(days=rng.randint(1, 20))
            if d.weekday() in open_days:
                break
        forms = [f"the {_ordinal_words(d.day)}", f"the {_th(d.day)}", f"{MONTHS[d.month - 1]} {_th(d.day)}",
                 f"{WEEKDAYS[d.weekday()]} the {_ordinal_words(d.day)}"]
        if (d - today).days == 1:
            forms += ["tomorrow"] * 3
        if (d - today).days < 7:
            forms += [WEEKDAYS[d.weekday()]] * 3 + [f"this {WEEKDAYS[d.weekday()]}"]
        if (d - today).days < 14:
            forms += [f"next {WEEKDAYS[d.weekday()]}"]  # the parser decides which "next" it is
        return self._checked("date", d.isoformat(), forms, rng, KindContext(today=today))

    def time(self, rng: random.Random, hours: Hours | None, step: int = 30) -> Value:
        lo, hi = (hours.open_min, hours.close_min - 60) if hours else (9 * 60, 17 * 60)
        minute = rng.randrange(lo // step, hi // step + 1) * step
        h, m = divmod(minute, 60)
        hhmm = f"{h:02d}:{m:02d}"
        h12 = h % 12 or 12
        ampm = "am" if h < 12 else "pm"
        forms = [spoken_time(hhmm), spoken_time(hhmm).replace(" ", "")]
        if m == 0:
            forms += [UNITS[h12] if h12 <= 20 else str(h12), f"{UNITS[h12]} o'clock", f"{h12} {ampm}",
                      f"{UNITS[h12]} {ampm}", f"{UNITS[h12]} in the {'morning' if h < 12 else 'afternoon'}"]
            if h == 12:
                forms += ["noon", "midday"]
        elif m == 30:
            forms += [f"half past {UNITS[h12]}", f"{UNITS[h12]} thirty", f"{h12}:30 {ampm}"]
        elif m == 15:
            forms += [f"quarter past {UNITS[h12]}", f"{UNITS[h12]} fifteen"]
        elif m == 45:
            forms += [f"{UNITS[h12]} forty five", f"{h12}:45 {ampm}"]
        return self._checked("time", hhmm, forms, rng, KindContext(hours=hours))

    def integer(self, rng: random.Random, lo: int = 1, hi: int = 8) -> Value:
        n = rng.randint(lo, hi)
        forms = [str(n), _count_words(n)] + (["a couple", "two of us"] if n == 2 else [])
        return Value(str(n), rng.choice(forms))

    def phone_number(self, rng: random.Random, length: int | None = None) -> Value:
        length = length or rng.choice([7, 7, 8, 10, 11])
        digits = "".join(str(rng.randint(0, 9)) for _ in range(length))
        if length == 11:
            digits = "07" + digits[2:]
        return Value(digits, spoken_number(digits, rng))

    def plate(self, rng: random.Random) -> Value:
        letters = string.ascii_uppercase.replace("I", "").replace("O", "").replace("Q", "")
        p = (rng.choice(letters) + rng.choice(letters) + f"{rng.randint(10, 79):02d}"
             + "".join(rng.choice(letters) for _ in range(3)))
        style = rng.randrange(3)
        if style == 0:
            words = f"{p[:4]} {p[4:]}"
        else:
            out = [DIGIT_WORDS[int(c)] if c.isdigit() else c for c in p]
            words = " ".join(out) if style == 1 else " ".join(out[:4]) + ", " + " ".join(out[4:])
        return Value(p, words)

    def email(self, rng: random.Random) -> Value:
        first, last = rng.choice(self.firsts).lower(), rng.choice(self.lasts).lower().replace("'", "")
        local = rng.choice([f"{first} dot {last}", f"{first}{last[:1]}", f"{first[:1]}{last}", f"{first} {rng.randint(1, 99)}"])
        words = f"{local} at {rng.choice(EMAIL_HOSTS)}"
        try:
            return Value(str(parse("email", words, KindContext())), words)
        except KindError:
            return Value(f"{first}@example.org", f"{first} at example dot org")

    def enum(self, rng: random.Random, choices: dict[str, tuple[str, ...]]) -> Value:
        value = rng.choice(list(choices))
        words = rng.choice([value, *choices[value]]) if choices[value] else value
        return Value(value, words.replace("_", " "))  # "full_groom" is said "full groom"

    # -- the dispatcher -----------------------------------------------------------------------------
    def draw(self, kind: str, rng: random.Random, today: dt.date, hours: Hours | None = None,
             choices: dict[str, tuple[str, ...]] | None = None, texts: list[str] | None = None) -> Value:
        if kind == "date":
            return self.date(rng, today)
        if kind == "time":
            return self.time(rng, hours)
        if kind == "person_name":
            return self.person_name(rng)
        if kind == "integer":
            return self.integer(rng)
        if kind == "phone_number":
            return self.phone_number(rng)
        if kind == "plate":
            return self.plate(rng)
        if kind == "email":
            return self.email(rng)
        if kind == "enum" and choices:
            return self.enum(rng, choices)
        text = rng.choice(texts or ["it stopped working", "I need some help with it"])
        return Value(text, text)

    @staticmethod
    def _checked(kind: str, canonical: str, forms: list[str], rng: random.Random, ctx: KindContext) -> Value:
        """A form the runtime parser reads as `canonical`; the canonical value itself when none does."""
        rng.shuffle(forms)
        for words in forms:
            try:
                if parse(kind, words, ctx) == canonical:
                    return Value(canonical, words)
            except KindError:
                continue
        return Value(canonical, canonical)


def spoken_number(digits: str, rng: random.Random) -> str:
    """Digits as a caller says them: in words (with "oh" and "double"), as digits, or in groups."""
    style = rng.randrange(4)
    if style == 0:
        return digits if len(digits) < 8 else f"{digits[:3]} {digits[3:]}"
    words = []
    i = 0
    while i < len(digits):
        d = digits[i]
        if style == 2 and i + 1 < len(digits) and digits[i + 1] == d:
            words.append(f"double {'oh' if d == '0' else DIGIT_WORDS[int(d)]}")
            i += 2
            continue
        words.append("oh" if d == "0" and style != 3 else DIGIT_WORDS[int(d)])
        i += 1
    return " ".join(words)


__all__ = ["Value", "ValueBank", "held_out", "spoken_number"]
