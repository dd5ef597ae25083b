"""`expect: state:`: what a call must leave in its backend's `snapshot()`, as a subset match.

- A mapping matches when each of its keys matches the snapshot's value there (keys are compared
  without case or extra spaces: "jordan lee" finds "Jordan Lee"). The snapshot may hold more keys.
- A list matches a list of the same length whose items each match a different expected item, in
  any order. `[]` or `{}` also matches a key the snapshot does not have ("no bookings").
- Anything else matches the same value: text without case or extra spaces, numbers by value
  ("10:00" is "10:00", 4 is "4").

    state_mismatches({"appointments": {"Jo Lee": [{"time": "10:00"}]}}, backend.snapshot())
    -> ["appointments.Jo Lee: expected 1 item(s), found none"]
"""

from __future__ import annotations

import json
from typing import Any


def state_mismatches(expected: Any, actual: Any, where: str = "") -> list[str]:
    """Why `actual` does not match `expected`; [] when it does."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{where or 'state'}: expected a mapping, found {_show(actual)}"]
        out = []
        for key, want in expected.items():
            at = f"{where}.{key}" if where else str(key)
            found, have = _lookup(actual, key)
            if not found:
                if want in ([], {}):
                    continue
                out.append(f"{at}: missing (expected {_show(want)})")
                continue
            out += state_mismatches(want, have, at)
        return out
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return [f"{where}: expected {len(expected)} item(s), found {_show(actual)}"]
        if len(actual) != len(expected):
            return [f"{where}: expected {_show(expected)}, found {_show(actual) if actual else 'none'}"]
        left = list(actual)
        for want in expected:
            hit = next((i for i, have in enumerate(left) if not state_mismatches(want, have)), None)
            if hit is None:
                return [f"{where}: expected {_show(expected)}, found {_show(actual)}"]
            left.pop(hit)
        return []
    if not _same(expected, actual):
        return [f"{where}: expected {_show(expected)}, found {_show(actual)}"]
    return []


def _lookup(actual: dict, key: Any) -> tuple[bool, Any]:
    if key in actual:
        return True, actual[key]
    norm = _norm(key)
    for k, v in actual.items():
        if _norm(k) == norm:
            return True, v
    return False, None


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, int | float) and not isinstance(b, bool):
        try:
            return float(a) == float(b)
        except (TypeError, ValueError):
            return False
    return _norm(a) == _norm(b)


def _norm(x: Any) -> str:
    return " ".join(str(x).lower().split())


def _show(x: Any) -> str:
    text = json.dumps(x, ensure_ascii=False, default=str)
    return text if len(text) <= 160 else text[:157] + "..."


__all__ = ["state_mismatches"]
