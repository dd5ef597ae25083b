"""`DialogueState`: what a call has established so far, updated once per message.

    state = DialogueState(tools, policy, today)
    for message in messages:
        state.update(message)
    state.slots["date"]          # Slot(words="next monday", turn=2): the caller's latest day
    state.wanted                 # "book_appointment": the tool the caller is after
    state.asked                  # ("book_appointment", "patient_name"): what the agent's last question asked

Slots are kept by argument kind (the tools' `x-kind`), so they are the scenario's, not a dental
diary's: a date, a time, a person's name, digits, a plate, and each enum argument's choice by the
argument's name. A slot is the caller's own words (tools parse them with the pack's hours), with the
caller turn it was said in; a value the caller refused ("ten, not half past nine") is never a slot.

The tool the caller is after (`wanted`) is set by the caller's words or the agent's question, newest
first:
- the caller names one tool's `intents` phrases ("cancel", "move my");
- the agent asked a tool's own question (`ask: tool.argument`);
- the caller names a value of an enum argument of a tool that has no intent phrases (naming a
  service is booking one, naming a plan is changing to it).
It is cleared when that tool succeeds (`done`), which keeps the call's arguments for a correction.

`StateTracker` keeps one state per call and feeds it only the messages it has not seen; a history
that was trimmed or rewritten is read again from the start.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field
from typing import Any

from engine import grounding_mark
from voice_agent.policy.kinds import (
    HESITATIONS,
    WORKS_CUE,
    KindContext,
    KindError,
    find_digits,
    find_plate,
    parse,
    without_plate,
)
from voice_agent.said_phrases import (
    latest_said,
    name_like_run,
    only_calendar_words,
    only_common_words,
    said_intents,
    said_name,
)
from voice_agent.scenarios import SYNONYMS_KEY, CallPolicy, today_of

KIND_OF_MARK = {"day": "date", "time": "time", True: "person_name", "choice": "enum"}
# Kinds whose slot is the argument's own (two enums, two texts or two counts are different things); the rest
# are kept by kind, so a date said for the search is the booking's date too.
PER_ARGUMENT = ("enum", "text", "integer", "boolean")
_NUMBER_KINDS = ("integer", "phone_number")
# "double oh seven" is two digits, not a double room
_DIGIT_REPEAT = re.compile(r"\b(?:double|triple)(?=\s+(?:oh|o|zero|one|two|three|four|five|six|seven|eight|nine|\d)\b)",
                           re.IGNORECASE)
# What makes a bare number a time of day even when the agent asked for a count.
_CLOCK_CUE = re.compile(r"\d:\d|\b(am|pm|a\.m|p\.m|o'?clock|half|quarter|noon|midday|morning|afternoon|evening)\b",
                        re.IGNORECASE)
_EMAIL_SAID = re.compile(r"\S\s+at\s+\S+\s+dot\s+\S|\S@\S+\.\S", re.IGNORECASE)
MAX_BARE_NAME_WORDS = 4  # a reply to the name question that is longer is not only a name


@dataclass(frozen=True)
class Slot:
    words: str      # what the caller said (an enum: the value itself)
    turn: int       # the caller turn it was said in (0-based)


@dataclass(frozen=True)
class Outcome:
    tool: str
    arguments: dict
    result: Any
    turn: int       # the caller turn it answered

    @property
    def ok(self) -> bool:
        return not (isinstance(self.result, dict) and "error" in self.result)


@dataclass
class DialogueState:
    tools: list[dict]
    policy: CallPolicy
    today: dt.date = field(default_factory=dt.date.today)
    turn: int = -1                                       # the latest caller turn (0-based); -1 before any
    slots: dict[str, Slot] = field(default_factory=dict)
    wanted: str | None = None                            # the tool the caller is after
    wanted_turn: int = -1                                # the caller turn that last asked for it
    wanted_since: int = 0                                # where its request began: after the last other tool's
    asked: tuple[str, str] | None = None                 # (tool or "", argument) the agent's last question asked for
    outcomes: list[Outcome] = field(default_factory=list)
    caller_words: list[str] = field(default_factory=list)
    maybe_name_turn: int = -1                            # the latest caller turn with words that may be an uncued name
    _pending: dict[str, tuple[str, dict]] = field(default_factory=dict)  # call id -> (tool, arguments)

    # -- what the tools take ---------------------------------------------------------------------
    def kinds(self, tool: str) -> dict[str, str]:
        """Argument -> kind for one tool: its `x-kind`, else the kind its grounding mark implies."""
        props = self._props(tool)
        out = {}
        for arg, spec in props.items():
            kind = spec.get("x-kind") if isinstance(spec, dict) else None
            kind = kind or KIND_OF_MARK.get(grounding_mark(spec))  # type: ignore[arg-type]
            if kind:
                out[arg] = kind
        return out

    def required(self, tool: str) -> list[str]:
        fn = self._fn(tool)
        return list(((fn or {}).get("parameters") or {}).get("required") or [])

    def slot_for(self, tool: str, arg: str) -> Slot | None:
        kind = self.kinds(tool).get(arg)
        return None if kind is None else self.slots.get(arg if kind in PER_ARGUMENT else kind)

    def _fn(self, tool: str) -> dict | None:
        return next((t["function"] for t in self.tools if t["function"]["name"] == tool), None)

    def _props(self, tool: str) -> dict:
        return ((self._fn(tool) or {}).get("parameters") or {}).get("properties") or {}

    @property
    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tools]

    def succeeded(self, tool: str) -> list[Outcome]:
        return [o for o in self.outcomes if o.tool == tool and o.ok]

    # -- one message at a time ---------------------------------------------------------------------
    def update(self, message: dict) -> None:
        role = message.get("role")
        if role == "user" and isinstance(message.get("content"), str):
            self._caller(message["content"])
        elif role == "assistant":
            for call in message.get("tool_calls") or []:
                fn = call.get("function") or {}
                self._pending[call.get("id", "")] = (fn.get("name", ""), _as_dict(fn.get("arguments")))
            text = message.get("content")
            if isinstance(text, str) and text.strip() and not message.get("tool_calls"):
                self.asked = self._question(text.strip())
        elif role == "tool":
            tool, args = self._pending.pop(message.get("tool_call_id", ""), ("", {}))
            if tool:
                outcome = Outcome(tool, args, _as_dict(message.get("content")), self.turn)
                self.outcomes.append(outcome)
                if outcome.ok and tool == self.wanted:
                    self.wanted = None  # served; its arguments stay in the outcome for a correction
                    self.wanted_since = self.turn + 1

    def _caller(self, text: str) -> None:
        self.turn += 1
        self.caller_words.append(text)
        asked, self.asked = self.asked, None
        found = self._slots_in(text, asked)
        for key, words in found.items():
            self.slots[key] = Slot(words, self.turn)
        if "person_name" not in found and self._may_name(text):
            self.maybe_name_turn = self.turn
        named = said_intents(text, self.policy.intents) & set(self.tool_names)
        if len(named) == 1:
            self._want(next(iter(named)))
        elif not named and asked and asked[0] in self.tool_names and self.wanted in (None, asked[0]):
            self._want(asked[0])  # the agent's own question for a tool carries it, unless the caller named another
        if not named:
            chosen = self._enum_choice_tool(text)
            if chosen and (self.wanted is None or self.wanted_turn < self.turn):
                self._want(chosen)

    def _may_name(self, text: str) -> bool:
        """`text` has words that may be a name no cue introduced ("book jordan lee for a checkup"),
        none of them a choice or an intent phrase of the scenario's: the state cannot say the name
        is missing."""
        run = name_like_run(text)
        return bool(run) and not self._choice_words_in(run) and not said_intents(run, self.policy.intents)

    def _want(self, tool: str) -> None:
        if self.wanted is not None and tool != self.wanted:
            self.wanted_since = self.turn  # another request: what was said for the one before is not this one's
        self.wanted, self.wanted_turn = tool, self.turn

    def _enum_choice_tool(self, text: str) -> str | None:
        """The one tool that takes an enum value the caller named: a tool without intent phrases
        first (naming a service is booking one), else, when nothing is wanted yet, one with them
        ("switch to the plus plan"; "anything in the morning?" after a search keeps the booking wanted);
        right after the wanted tool was served, that tool again when its own choice is named anew
        (the next check of a checklist)."""
        served = self.outcomes[-1].tool if self.outcomes and self.outcomes[-1].ok and self.wanted is None \
            and self.outcomes[-1].turn == self.turn - 1 else None
        if served and self._names_choice_of(served, text):
            return served
        hits = [t for t in self.tool_names if t not in self.policy.intents and self._names_choice_of(t, text)]
        if not hits and self.wanted is None:  # nothing asked for yet: "switch to the plus plan" is a plan change
            hits = [t for t in self.tool_names if t in self.policy.intents and self._names_choice_of(t, text)]
        if len(hits) > 1:  # several take it (a search and a booking): the one the caller's words fill most
            filled = {t: sum(self.slot_for(t, a) is not None for a in self.required(t)) for t in hits}
            best = max(filled.values())
            hits = [t for t in hits if filled[t] == best]
        return hits[0] if len(hits) == 1 else None

    def _names_choice_of(self, tool: str, text: str) -> bool:
        return any(kind == "enum" and latest_said("choice", [text], self.today, self._choices(tool, arg))
                   for arg, kind in self.kinds(tool).items())

    def _choice_words_in(self, text: str) -> bool:
        """`text` names a value of some enum argument ("teeth whitening" is no name)."""
        return any(latest_said("choice", [text], self.today, self._choices(t, a)) is not None
                   for t in self.tool_names for a, k in self.kinds(t).items() if k == "enum")

    def _choices(self, tool: str, arg: str) -> dict[str, tuple[str, ...]]:
        spec = self._props(tool).get(arg) or {}
        synonyms = spec.get(SYNONYMS_KEY) or {}
        return {str(v): (str(v), *synonyms.get(v, ())) for v in spec.get("enum") or []}

    def _slots_in(self, text: str, asked: tuple[str, str] | None) -> dict[str, str]:
        """Slot key -> the caller's words, for every kind the tools take that `text` names."""
        kinds = {(arg if kind in PER_ARGUMENT else kind): (tool, arg, kind)
                 for tool in self.tool_names for arg, kind in self.kinds(tool).items()}
        out: dict[str, str] = {}
        ctx = KindContext(today=self.today)
        if any(kind == "plate" for _, _, kind in kinds.values()) and (plate := find_plate(text)):
            out["plate"] = plate
            text = without_plate(text)  # its "one two" is no time, its letters no name
        asked_kind = self.kinds(asked[0]).get(asked[1]) if asked and asked[0] else _kind_of_arg(self, asked)
        for key, (tool, arg, kind) in kinds.items():
            words = None
            if kind == "date":
                words = latest_said("day", [text], self.today)
            elif kind == "time":
                words = latest_said("time", [text], self.today)
                if words and asked_kind in _NUMBER_KINDS and not _CLOCK_CUE.search(words):
                    words = None  # "one" in reply to "how many people?" is the count, not 1 pm
            elif kind == "enum":
                words = latest_said("choice", [_DIGIT_REPEAT.sub(" ", text)], self.today, self._choices(tool, arg))
                if words is not None:
                    try:
                        words = str(parse("enum", words, KindContext(choices=self._choices(tool, arg))))
                    except KindError:
                        words = None  # the phrase names two choices ("beard trim" is a trim and a beard): not one
            elif kind == "person_name":
                words = said_name([text])
                if words is None and (asked_kind == "person_name" or not self._choice_words_in(text)):
                    words = _bare_name(text)  # a reply that is only a name is one, asked for or not
            elif kind == "phone_number":  # a number said in passing is a whole one; asked for, any length
                words = find_digits(text, at_least=4 if asked_kind == kind else 7)
                if words is None and (named := _after_argument_name(text, arg)) is not None:
                    words = find_digits(named, at_least=3)  # "my card number is four four seven one"
            elif kind == "email" and asked_kind != kind and _EMAIL_SAID.search(text):
                try:
                    words = str(parse(kind, text, ctx))  # "x at y dot com" is an address, asked or not
                except KindError:
                    words = None
            elif kind == "boolean":  # its own question's answer, or "now it works" / "still doesn't work"
                if (asked is not None and asked[1] == arg) or WORKS_CUE.search(text):
                    try:
                        words = "true" if parse("boolean", text, ctx) else "false"
                    except KindError:
                        words = None
            elif kind == "integer" and not (asked is not None and asked[1] == arg):
                words = _count_with_unit(text, arg)  # "for three nights" fills `nights` unasked; a bare number does not
            elif ((kind == "email" and asked_kind == kind)
                  or (kind in ("integer", "text") and asked is not None and asked[1] == arg)):  # its own answer only
                try:
                    words = str(parse(kind, text, ctx))
                except KindError:
                    words = None
            if words:
                out[key] = words
        return out

    def _question(self, text: str) -> tuple[str, str] | None:
        """(tool or "", argument) of the `ask` question the agent's text is; None when it is none."""
        for key, question in self.policy.ask.items():
            if question.strip() == text:
                tool, _, arg = key.rpartition(".")
                return tool, arg
        return None


def _kind_of_arg(state: DialogueState, asked: tuple[str, str] | None) -> str | None:
    """The kind of an argument asked for by its plain question (any tool that takes it)."""
    if not asked:
        return None
    for tool in state.tool_names:
        kind = state.kinds(tool).get(asked[1])
        if kind:
            return kind
    return None


def _after_argument_name(text: str, arg: str) -> str | None:
    """What `text` says after naming the argument ("card number" for `card_number`); None when it
    does not name it."""
    m = re.search(r"\b" + r"\s+".join(map(re.escape, arg.lower().split("_"))) + r"\b", text.lower())
    return None if m is None else text[m.end():]


_NUMBER_WORD = (r"(?:\d+|a couple|a dozen|(?:twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)(?:[ -](?:one|two|three|"
                r"four|five|six|seven|eight|nine))?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
                r"thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twenty)")
_PEOPLE = ("people", "persons", "guests", "adults", "of us", "person", "guest", "adult")


def _count_with_unit(text: str, arg: str) -> str | None:
    """A count said with the argument's own noun ("three nights" for `nights`, "four people" for
    `party_size`), as digits; None when the text has no such count."""
    words = [w for w in arg.lower().split("_") if len(w) > 2]
    units = {w for w in words} | {w.rstrip("s") for w in words} | {w + "s" for w in words if not w.endswith("s")}
    if any(w in ("party", "people", "guests", "size", "covers", "group", "adults") for w in words):
        units |= set(_PEOPLE)
    pattern = r"\b(" + _NUMBER_WORD + r")\s+(?:" + "|".join(map(re.escape, sorted(units, key=len, reverse=True))) + r")\b"
    m = re.search(pattern, text.lower())
    if not m:
        return None
    try:
        return str(parse("integer", m.group(1), KindContext()))
    except KindError:
        return None


def _bare_name(text: str) -> str | None:
    """A reply to the name question that is only a name ("Peter Grant.", "it's jane doherty"): two to
    four words once cue words are gone, none of them a common word, a day or a time."""
    try:
        name = str(parse("person_name", text, KindContext()))
    except KindError:
        return None
    words = name.split()
    rest = [w for w in re.findall(r"[a-z']+", text.lower()) if w not in HESITATIONS]
    if (not 2 <= len(words) <= MAX_BARE_NAME_WORDS or len(rest) > len(words) + 3
            or any(only_common_words(w) or only_calendar_words(w) for w in words)):
        return None
    return name.lower()


def _as_dict(value: object) -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {}
    return value if isinstance(value, dict) else {}


class StateTracker:
    """One call's `DialogueState`, fed each message once."""

    def __init__(self, policy: CallPolicy) -> None:
        self.policy = policy
        self._seen: list[dict] = []
        self._tools_key = ""
        self.state: DialogueState | None = None

    def read(self, messages: list[dict], tools: list[dict] | None) -> DialogueState:
        key = json.dumps([t["function"]["name"] for t in tools or []])
        prefix = len(self._seen)
        if (self.state is None or key != self._tools_key or len(messages) < prefix
                or messages[:prefix] != self._seen):
            self.state = DialogueState(list(tools or []), self.policy, today_of(messages))
            self._tools_key, self._seen, prefix = key, [], 0
        for m in messages[prefix:]:
            self.state.update(m)
        self._seen = list(messages)
        return self.state


__all__ = ["DialogueState", "Outcome", "Slot", "StateTracker"]
