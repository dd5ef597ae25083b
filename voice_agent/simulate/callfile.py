"""The call file of `voice-agent simulate`: scripted callers and what each call must achieve.

    scenario: dental_clinic            # optional: a name, or a pack folder relative to this file (default:
                                       # the pack whose callers/ holds the file, else dental_clinic)
    today: 2026-12-01                  # the scenario's "today" for every call (default: the real today)
    calls:
      - id: book_cleaning              # unique
        setup:                         # optional: handed to the backend's setup() before the call
          empty: true                  #   (what it takes is the pack's: see its backend.py)
          appointments:
            - {patient_name: "Ana Ruiz", date: "2026-12-03", time: "09:00", service: checkup}
        caller:                        # what the caller says, one turn each, in order
          - "Hi, I'd like a cleaning next Tuesday at ten. I'm Jordan Lee."
        expect:                        # optional; every entry must hold
          state:                       # a subset of the backend's snapshot() after the call
            appointments:              #   (voice_agent/packs/state_match.py: lists match exactly)
              "Jordan Lee": [{date: "2026-12-08", time: "10:00", service: cleaning}]
              "Ana Ruiz": [{date: "2026-12-03", time: "09:00"}]     # [] = none
          tool_calls: [find_free_slots]          # or {name: book_appointment, arguments: {time: "10:00"}}
          no_tool_calls: [cancel_appointment]
          must_say: ["Tuesday"]                  # case and punctuation ignored
          must_not_say: ["as an AI"]

Older files' spelling still works: `db:` is `setup:`, and `expect: appointments:` is
`expect: state: appointments:`.

Any other key, a missing `caller` or a `today` that is not a YYYY-MM-DD calendar date is a
CallFileError whose message names the key and the call; what `setup` holds is the backend's to check
(a setup it refuses fails that call, and the batch goes on). A bare 10:00 stays the text "10:00"
(YAML 1.1 would read it as the number 600).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

TOP_KEYS = ("scenario", "today", "calls")
CALL_KEYS = ("id", "setup", "db", "caller", "expect")
EXPECT_KEYS = ("state", "appointments", "tool_calls", "no_tool_calls", "must_say", "must_not_say")
TOOL_CALL_KEYS = ("name", "arguments")


class _Loader(yaml.SafeLoader):
    """SafeLoader that leaves dates as text (this module checks them, with a message that says where)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
for _first in "0123456789":  # a clock time is text, not YAML 1.1's base-60 number (10:00 is not 600)
    _Loader.yaml_implicit_resolvers[_first] = [
        ("tag:yaml.org,2002:str", re.compile(r"^\d{1,2}:\d{2}$")), *_Loader.yaml_implicit_resolvers.get(_first, [])]


class CallFileError(ValueError):
    """A call file that cannot be read or does not have the format above; the message says where."""


@dataclass(frozen=True)
class Expect:
    state: dict = field(default_factory=dict)  # a subset of the backend's snapshot() (packs/state_match.py)
    tool_calls: tuple[dict, ...] = ()          # {"name": str, "arguments": dict}; arguments: a subset
    no_tool_calls: tuple[str, ...] = ()
    must_say: tuple[str, ...] = ()
    must_not_say: tuple[str, ...] = ()


@dataclass(frozen=True)
class Call:
    id: str
    caller: tuple[str, ...]
    setup: dict | None = None                  # None: the backend as it starts (the dental pack: a seeded diary)
    expect: Expect = field(default_factory=Expect)


@dataclass(frozen=True)
class CallFile:
    scenario: str | None                       # None: the pack whose callers/ holds the file, else the default
    today: dt.date
    calls: tuple[Call, ...]
    source: Path | None = None


def load_callfile(path: str | Path) -> CallFile:
    """Read and check a call file. Raises CallFileError (unreadable, not YAML, wrong format)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CallFileError(f"{path}: cannot read the call file ({e})") from None
    return loads_callfile(text, source=path)


def loads_callfile(text: str, source: Path | None = None) -> CallFile:
    """A call file's text, read and checked (dates stay text, a bare 10:00 stays "10:00")."""
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader)
    except (yaml.YAMLError, ValueError) as e:
        raise CallFileError(f"{source or 'call file'}: not valid YAML: {e}") from None
    return parse_callfile(data, source=source)


def parse_callfile(data: Any, source: Path | None = None) -> CallFile:
    where = str(source) if source else "call file"
    if not isinstance(data, dict):
        raise CallFileError(f"{where}: must be a mapping with keys {', '.join(TOP_KEYS)}")
    _no_unknown(data, TOP_KEYS, f"{where}: top level")
    scenario = data.get("scenario")
    if scenario is not None and (not isinstance(scenario, str) or not scenario.strip()):
        raise CallFileError(f"{where}: 'scenario' must be a scenario name or a pack folder")
    today = _date(data["today"], f"{where}: 'today'") if "today" in data else dt.date.today()
    calls = data.get("calls")
    if not isinstance(calls, list) or not calls:
        raise CallFileError(f"{where}: 'calls' must be a non-empty list of calls")
    parsed: list[Call] = []
    seen: set[str] = set()
    for i, c in enumerate(calls):
        call = _call(c, where, i)
        if call.id in seen:
            raise CallFileError(f"{where}: call {call.id!r}: duplicate id")
        seen.add(call.id)
        parsed.append(call)
    return CallFile(scenario=scenario.strip() if scenario else None, today=today, calls=tuple(parsed), source=source)


def _call(c: Any, file: str, index: int) -> Call:
    if not isinstance(c, dict):
        raise CallFileError(f"{file}: calls[{index}]: a call must be a mapping with keys {', '.join(CALL_KEYS)}")
    cid = c.get("id")
    if not isinstance(cid, str | int) or isinstance(cid, bool) or not str(cid).strip():
        raise CallFileError(f"{file}: calls[{index}]: every call needs an 'id'")
    cid = str(cid).strip()
    where = f"{file}: call {cid!r}"
    _no_unknown(c, CALL_KEYS, where)
    caller = c.get("caller")
    if "caller" not in c:
        raise CallFileError(f"{where}: missing 'caller' (the caller's turns, a list of strings)")
    if not isinstance(caller, list) or not caller:
        raise CallFileError(f"{where}: 'caller' must be a non-empty list of strings, one per turn")
    for j, line in enumerate(caller):
        if not isinstance(line, str) or not line.strip():
            raise CallFileError(f"{where}: caller[{j}] must be a non-empty string; got {line!r}")
    if c.get("setup") is not None and c.get("db") is not None:
        raise CallFileError(f"{where}: give 'setup' or its older name 'db', not both")
    setup = c.get("setup") if c.get("setup") is not None else c.get("db")  # `db`: the older name
    if setup is not None and not isinstance(setup, dict):
        raise CallFileError(f"{where}: {'setup' if 'setup' in c else 'db'}: must be a mapping (what the backend takes)")
    expect = _expect(c["expect"], f"{where}: expect") if c.get("expect") is not None else Expect()
    return Call(id=cid, caller=tuple(s.strip() for s in caller), setup=setup, expect=expect)


def _expect(e: Any, where: str) -> Expect:
    if not isinstance(e, dict):
        raise CallFileError(f"{where}: must be a mapping with keys {', '.join(EXPECT_KEYS)}")
    _no_unknown(e, EXPECT_KEYS, where)
    state = e.get("state") or {}
    if not isinstance(state, dict):
        raise CallFileError(f"{where}: 'state' must be a mapping: a subset of the backend's snapshot")
    appts = e.get("appointments")  # the older name of `state: appointments:`
    if appts is not None and not isinstance(appts, dict):
        raise CallFileError(f"{where}: 'appointments' must be a mapping (the older name of state: appointments:)")
    if appts:
        if "appointments" in state:
            raise CallFileError(f"{where}: give 'appointments' or 'state: appointments', not both")
        state = {**state, "appointments": appts}
    return Expect(state=state, tool_calls=tuple(_tool_calls(e.get("tool_calls"), f"{where}: tool_calls")),
                  no_tool_calls=_strings(e.get("no_tool_calls"), f"{where}: no_tool_calls"),
                  must_say=_strings(e.get("must_say"), f"{where}: must_say"),
                  must_not_say=_strings(e.get("must_not_say"), f"{where}: must_not_say"))


def _tool_calls(items: Any, where: str) -> list[dict]:
    if items is None:
        return []
    if not isinstance(items, list):
        raise CallFileError(f"{where}: must be a list of tool names or {{name, arguments}}")
    out = []
    for k, item in enumerate(items):
        if isinstance(item, str) and item.strip():
            out.append({"name": item.strip(), "arguments": {}})
            continue
        if not isinstance(item, dict):
            raise CallFileError(f"{where}[{k}]: must be a tool name or {{name, arguments}}; got {item!r}")
        _no_unknown(item, TOOL_CALL_KEYS, f"{where}[{k}]")
        if not isinstance(item.get("name"), str) or not item["name"].strip():
            raise CallFileError(f"{where}[{k}]: missing 'name'")
        args = item.get("arguments") or {}
        if not isinstance(args, dict):
            raise CallFileError(f"{where}[{k}]: 'arguments' must be a mapping")
        out.append({"name": item["name"].strip(), "arguments": dict(args)})
    return out


def _strings(items: Any, where: str) -> tuple[str, ...]:
    if items is None:
        return ()
    if not isinstance(items, list) or not all(isinstance(s, str) and s.strip() for s in items):
        raise CallFileError(f"{where}: must be a list of non-empty strings")
    return tuple(s.strip() for s in items)


def _no_unknown(d: dict, known: tuple[str, ...], where: str) -> None:
    for key in d:
        if key not in known:
            raise CallFileError(f"{where}: unknown key {key!r} (allowed: {', '.join(known)})")


def _date(value: Any, where: str) -> dt.date:
    if isinstance(value, dt.datetime):
        raise CallFileError(f"{where} must be a date YYYY-MM-DD, not a date and time; got {value!r}")
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", value.strip()):
        try:
            return dt.date.fromisoformat(value.strip())
        except ValueError:
            raise CallFileError(f"{where}: {value!r} is not a real calendar date") from None
    raise CallFileError(f"{where} must be a date YYYY-MM-DD; got {value!r}")
