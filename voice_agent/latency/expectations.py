"""Expectations: what a replayed call must do, turning replay into a QA gate.

An expectations file is YAML or JSON. It holds either one call's expectations, or several keyed
by file name (the name, the stem, or a glob such as "booking_*.wav"; "*" applies to every call):

    calls:
      sample_call.wav:
        tool_calls:                         # must be called somewhere in the call
          - find_free_slots
          - {name: book_appointment, arguments: {time: "10:00"}}   # argument subset must match
        no_tool_calls: [cancel_appointment] # must not be called
        must_say: ["Tuesday"]               # phrases the bot must say (case and punctuation ignored)
        must_not_say: ["as an AI"]          # phrases it must never say
        max_p95_e2e_ms: 2500                # optional latency bound for this call
        state:                              # a subset of the backend's snapshot() after the call
          appointments:                     # (packs/state_match.py; the dental pack's `appointments:` is sugar for this)
            "Jordan Lee": [{date: "2026-12-08", time: "10:00", service: cleaning}]   # [] = none

A sample call's metadata JSON can carry the same block under "expect".
"""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path
from typing import Any

from voice_agent.packs.state_match import state_mismatches

KNOWN_KEYS = {"tool_calls", "no_tool_calls", "must_say", "must_not_say", "max_p95_e2e_ms", "state", "appointments"}


class ExpectationsError(ValueError):
    """The expectations file cannot be read or has an unknown shape."""


def load_expectations(path: str | Path) -> dict[str, dict]:
    """file -> {pattern: expectations}. A file holding one call's expectations maps to '*'."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except (OSError, ValueError) as e:
        raise ExpectationsError(f"{path}: cannot read expectations ({e})") from e
    if isinstance(data, dict) and "expect" in data and "calls" not in data:
        data = data["expect"]  # a sample call's metadata file
    if not isinstance(data, dict):
        raise ExpectationsError(f"{path}: expected a mapping, got {type(data).__name__}")
    table = data["calls"] if "calls" in data else {"*": data}
    if not isinstance(table, dict):
        raise ExpectationsError(f"{path}: 'calls' must map file names to expectations")
    for name, exp in table.items():
        if not isinstance(exp, dict):
            raise ExpectationsError(f"{path}: expectations for {name!r} must be a mapping")
        unknown = set(exp) - KNOWN_KEYS
        if unknown:
            raise ExpectationsError(
                f"{path}: unknown key(s) {sorted(unknown)} for {name!r}; known: {sorted(KNOWN_KEYS)}")
    return table


def expectations_for(table: dict[str, dict], file: str) -> dict | None:
    name = Path(file).name
    stem = Path(file).stem
    for pattern in (name, stem, file):
        if pattern in table:
            return table[pattern]
    for pattern, exp in table.items():
        if fnmatch.fnmatch(name, pattern):
            return exp
    return None


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9:']+", " ", text.lower()).split())


def _said(call: dict) -> str:
    parts = []
    greeting = call.get("greeting") or {}
    parts.append(greeting.get("bot_text") or "")
    for t in call.get("turns", []):
        parts += [t.get("filler_text") or "", t.get("bot_text") or ""]
    return _norm(" ".join(parts))


def _args_match(expected: dict, actual: Any) -> bool:
    if not isinstance(actual, dict):
        return False
    return all(_norm(str(actual.get(k, ""))) == _norm(str(v)) for k, v in expected.items())


def check_call(call: dict, exp: dict) -> dict:
    """Run one call's expectations. Returns {"passed": bool, "checks": [{check, expected, actual,
    passed}]}."""
    checks: list[dict] = []
    said = _said(call)
    made = [c for t in call.get("turns", []) for c in t.get("tool_calls", [])]
    made_names = [c.get("name") for c in made]
    for item in exp.get("tool_calls") or []:
        spec = {"name": item} if isinstance(item, str) else dict(item)
        hits = [c for c in made if c.get("name") == spec.get("name")]
        ok = any(_args_match(spec.get("arguments") or {}, c.get("arguments")) for c in hits)
        checks.append({"check": "tool called", "expected": _spec_text(spec),
                       "actual": ", ".join(made_names) or "(no tool calls)", "passed": ok})
    for name in exp.get("no_tool_calls") or []:
        checks.append({"check": "tool not called", "expected": name,
                       "actual": ", ".join(made_names) or "(no tool calls)", "passed": name not in made_names})
    for phrase in exp.get("must_say") or []:
        ok = _norm(phrase) in said
        checks.append({"check": "bot says", "expected": phrase, "actual": "said" if ok else "not said",
                       "passed": ok})
    for phrase in exp.get("must_not_say") or []:
        ok = _norm(phrase) not in said
        checks.append({"check": "bot never says", "expected": phrase, "actual": "not said" if ok else "said",
                       "passed": ok})
    state = dict(exp.get("state") or {})
    if exp.get("appointments") is not None:  # the dental pack's sugar for state: appointments:
        state["appointments"] = exp["appointments"]
    if state:
        why = state_mismatches(state, call["state"]) if call.get("state") is not None else ["no state was read back"]
        checks.append({"check": "state after the call", "expected": json.dumps(state, ensure_ascii=False),
                       "actual": "; ".join(why) or "matches", "passed": not why})
    if exp.get("max_p95_e2e_ms") is not None:
        from voice_agent.latency.metrics import distribution

        p95 = distribution(t.get("e2e_ms") for t in call.get("turns", []))["p95"]
        limit = float(exp["max_p95_e2e_ms"])
        checks.append({"check": "p95 e2e_ms at most", "expected": limit, "actual": p95,
                       "passed": p95 is not None and p95 <= limit})
    return {"passed": all(c["passed"] for c in checks), "checks": checks}


def _spec_text(spec: dict) -> str:
    args = spec.get("arguments")
    return f"{spec.get('name')}({json.dumps(args)})" if args else str(spec.get("name"))


def apply(calls: list[dict], table: dict[str, dict]) -> dict:
    """Attach `expectations` to each call that has some; return the summary block."""
    checked = passed = 0
    for call in calls:
        exp = expectations_for(table, call["file"])
        if exp is None:
            continue
        if call.get("error"):
            call["expectations"] = {"passed": False, "checks": [
                {"check": "call replayed", "expected": "ok", "actual": call["error"], "passed": False}]}
        else:
            call["expectations"] = check_call(call, exp)
        checked += 1
        passed += int(call["expectations"]["passed"])
    return {"calls_checked": checked, "calls_passed": passed, "passed": checked > 0 and passed == checked}


def table_text(calls: list[dict]) -> str:
    """The pass/fail table for the terminal."""
    lines = []
    for call in calls:
        exp = call.get("expectations")
        if not exp:
            continue
        for c in exp["checks"]:
            lines.append(f"{'PASS' if c['passed'] else 'FAIL'}  {Path(call['file']).name}: {c['check']} "
                         f"{c['expected']!s}  (got: {c['actual']!s})")
    return "\n".join(lines)
