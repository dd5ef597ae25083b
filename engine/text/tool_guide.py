"""Schema-guided tool calls: keep a call the model is writing inside the tools' JSON schemas.

Once the model opens `<tool_call>`, the call's skeleton (braces, quotes, `"name"`, `"arguments"`,
property keys, separators) is *infilled* by the engine, and only the open slots are decoded by the
model: the function name, each key, each value. Slots with a closed set of answers (names, keys,
enums, booleans) are snapped to the nearest allowed answer; free strings and numbers are read until
they end. Required properties are always written; the model decides on optional ones.

The guide sees text one finished block at a time and answers with an `Edit`: how many characters of
the block to keep, and the skeleton text to force after them. A small model thereby cannot produce
an unknown tool, a missing required argument or broken JSON, and the skeleton costs no forward pass.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass

NAME_OPEN = '\n{"name": "'
CLOSE = "}}\n</tool_call>"
MAX_SLOT_CHARS = 96  # a runaway value is cut here and closed
SNAP_SLOTS = ("name", "key", "enum", "boolean")
DRAFT_CHARS = 40  # the most of a caller's phrase drafted into a string value
# A free string ends at a raw newline (not valid inside a JSON string) or a "}": a small model often
# closes the object without closing the string ('"Thabo Shevchenko}}\n</tool_call>'), and the
# string then swallowed the close and whatever followed. Tool arguments spoken on a call (names,
# days, times) hold neither, nor any other control character, which JSON does not allow raw in a
# string (random weights wrote "\x03").
STRING_BREAKS = "\n}"


@dataclass
class Edit:
    keep: int  # characters of the block text to keep
    forced: str  # skeleton text to append after them
    done: bool = False  # the call is complete: end the turn


def _json_type(spec: dict) -> str:
    t = spec.get("type", "string")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), "string")
    if "enum" in spec and all(isinstance(v, str) for v in spec["enum"]):
        return "enum"
    return t if t in ("string", "integer", "number", "boolean") else "json"


def heard_continuation(begun: str, heard: str, limit: int = DRAFT_CHARS) -> str:
    """The rest of the caller's phrase that a string value has begun: after the latest word of
    `heard` that starts with `begun` (as written, else in any case), up to the clause's end. Names,
    days and times in a call's arguments are the caller's own words."""
    if not begun.strip():
        return ""
    for flags in (0, re.IGNORECASE):
        found = list(re.finditer(r"(?<!\w)" + re.escape(begun), heard, flags))
        if found:
            tail = heard[found[-1].end():found[-1].end() + limit]
            return re.split(r'[.,;:?!\n"]', tail, maxsplit=1)[0]
    return ""


def snap(text: str, options: list[str]) -> str:
    """The allowed option nearest to what the model wrote (prefix matches first)."""
    pref = [o for o in options if o.startswith(text)] or [o for o in options if text.startswith(o)]
    pool = pref or options
    return max(pool, key=lambda o: (difflib.SequenceMatcher(None, text, o).ratio(), -len(o)))


class ToolCallGuide:
    def __init__(self, tools: list[dict], forced_name: str | None = None, opened: bool = False) -> None:
        """`forced_name`: the prompt already holds the call up to `"arguments": ` (tool_choice named
        a function); `opened`: it holds `<tool_call>\n` (tool_choice "required")."""
        self.schemas = {t["function"]["name"]: t["function"].get("parameters", {}) for t in tools}
        self.expect = NAME_OPEN[1:] if opened else NAME_OPEN  # skeleton the model should write next
        self.slot = "name"
        self.slot_text = ""  # this slot's text from earlier blocks: already committed
        self.props: dict = {}
        self.required: list[str] = []
        self.remaining: list[str] = []
        self.key = ""
        self.done = False
        if forced_name is not None:  # tool_choice named a function: the prompt holds its opening
            self.expect = self._enter_arguments(forced_name)

    def take_opening(self) -> str:
        """The skeleton a forced call starts with (`{"` or more), for the prompt to end with: the
        first pass then decodes a slot instead of a brace the guide would force anyway."""
        head, self.expect = self.expect, ""
        return head

    def draft(self, heard: str) -> str:
        """What the call most likely goes on with, for the next pass to check as drafts (order
        "verify"; never forced): a key or name still open, completed to the first allowed one with
        the skeleton after it, or a string value begun from the caller's words (`heard`)."""
        if self.done:
            return ""
        if self.expect:
            return self.expect
        if self.slot in ("key", "name", "enum"):
            live = [o for o in self._options() if o.startswith(self.slot_text)]
            if not live:
                return ""
            rest = live[0][len(self.slot_text):]
            if self.slot == "key":
                quote = '"' if _json_type(self.props[live[0]]) in ("string", "enum") else ""
                return rest + '": ' + quote
            return rest + '"'
        if self.slot == "string" and self.slot_text:
            return heard_continuation(self.slot_text, heard)
        return ""

    # -- the grammar ------------------------------------------------------------------------
    def _enter_arguments(self, name: str) -> str:
        schema = self.schemas[name]
        self.props = schema.get("properties", {}) or {}
        self.required = [k for k in schema.get("required", []) if k in self.props]
        self.remaining = list(self.props)
        return "{" + self._next_member(first=True)

    def _missing_required(self) -> list[str]:
        return [k for k in self.required if k in self.remaining]

    def _next_member(self, first: bool) -> str:
        """Skeleton after '{' or after a value: the next key's opening, or the close."""
        if self._missing_required():
            self._open("key")
            opening = '"' if first else ', "'
            keys = self._key_options()
            if len(keys) == 1:  # any key the model wrote would snap to this one: no pass for it
                return opening + keys[0] + self._after_key(keys[0])
            return opening
        if self.remaining:
            self._open("more" if not first else "first")
            return ""
        self.done = True
        return CLOSE

    def _open(self, slot: str) -> None:
        self.slot, self.slot_text = slot, ""

    def _key_options(self) -> list[str]:
        return self._missing_required() or self.remaining

    def _after_key(self, key: str) -> str:
        self.key = key
        self.remaining.remove(key)
        kind = _json_type(self.props[key])
        self._open(kind)
        return '": ' + ('"' if kind in ("string", "enum") else "")

    def _finish_snap(self, value: str) -> str:
        """A snap slot (name, key, enum, boolean) resolved to `value`: the skeleton after it."""
        if self.slot == "name":
            return '", "arguments": ' + self._enter_arguments(value)
        if self.slot == "key":
            return self._after_key(value)
        if self.slot == "enum":
            return '"' + self._next_member(first=False)
        return self._next_member(first=False)  # boolean

    def _options(self) -> list[str]:
        if self.slot == "name":
            return list(self.schemas)
        if self.slot == "key":
            return self._key_options()
        if self.slot == "enum":
            return [str(v) for v in self.props[self.key]["enum"]]
        return ["true", "false"]

    # -- reading one block ----------------------------------------------------------------
    def feed(self, text: str) -> Edit | None:
        """Read one finished block of model text; None keeps it all and waits for more."""
        i = slot_start = 0
        while True:
            if self.expect:  # the model may write the skeleton itself; where it strays, force it
                if i < len(text) and text[i] == self.expect[0]:
                    self.expect = self.expect[1:]
                    i += 1
                    slot_start = i
                    continue
                return self._force(i, self.expect)
            if self.done:
                return self._force(i, "")
            if i == len(text):
                break
            c, here = text[i], self.slot_text + text[slot_start:i]
            if self.slot in SNAP_SLOTS:
                if (c == '"') if self.slot != "boolean" else not c.isalpha():
                    if self._keeps(here):
                        continue  # `expect` holds the skeleton after it, checked against what follows
                    return self._resolve(slot_start, here)
            elif self.slot == "string":
                if c == '"' and not here.endswith("\\"):
                    self.expect = '"' + self._next_member(first=False)
                    continue
                if c in STRING_BREAKS or c < " ":  # the model closed the object (or the line) but not the string
                    return self._force(i, '"' + self._next_member(first=False))
                if len(here) >= MAX_SLOT_CHARS:
                    return self._force(i, '"' + self._next_member(first=False))
            elif self.slot in ("integer", "number"):
                if c not in "-+.0123456789eE" or len(here) >= 24:
                    return self._force(i, ("" if here.strip() else "0") + self._next_member(first=False))
            elif self.slot in ("first", "more"):
                if not c.isspace():
                    if c == ('"' if self.slot == "first" else ","):
                        opening = '"' if self.slot == "first" else ', "'
                        self._open("key")
                        return self._force(i, opening)
                    self.done = True
                    return self._force(i, CLOSE)
            else:  # "json": an array or object value, read until it parses
                try:
                    json.JSONDecoder().raw_decode(here.lstrip())
                    return self._force(i, self._next_member(first=False))
                except json.JSONDecodeError:
                    if len(here) >= MAX_SLOT_CHARS:
                        return self._force(slot_start, "null" + self._next_member(first=False))
            i += 1
        # The block ended inside a slot: a snap slot decides now if its text already picks one.
        here = self.slot_text + text[slot_start:]
        if self.slot in SNAP_SLOTS and here:
            live = [o for o in self._options() if o.startswith(here)]
            if len(live) <= 1:
                return self._resolve(slot_start, here)
        self.slot_text = here
        return None

    def _keeps(self, here: str) -> bool:
        """The model wrote a whole allowed answer and closed it: its text stays, and the skeleton
        after it is checked against what the model wrote next (forced only where it strays). The
        tokens the model went on with in the same pass are not thrown away."""
        if here not in self._options():
            return False
        self.expect = self._finish_snap(here)
        self.slot_text = ""
        return True

    def _resolve(self, slot_start: int, here: str) -> Edit:
        committed = self.slot_text
        options = [o for o in self._options() if o.startswith(committed)] or self._options()
        value = snap(here, options)
        return self._force(slot_start, value[len(committed):] if value.startswith(committed) else "", then=value)

    def _force(self, keep: int, forced: str, then: str | None = None) -> Edit:
        if then is not None:
            forced += self._finish_snap(then)
        self.expect = ""
        self.slot_text = ""
        return Edit(keep, forced, self.done)
