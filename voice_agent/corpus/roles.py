"""What each tool of a pack does, read from its name: search, create, update, delete, read or action.

The corpus generator plans calls by role: a cancel, move, look-up or action needs a record that
already exists, a booking does not, and a search precedes a booking. A synthetic scenario states
its roles; a pack's are read from the verbs its tool names start with.
"""

from __future__ import annotations

import re

from voice_agent.scenarios import Scenario

_VERBS: list[tuple[str, str]] = [
    (r"find_free|free_|availability|available|search|list_|opening", "search"),
    (r"^(cancel|delete|remove|drop)", "delete"),
    (r"^(move|reschedule|change|update|modify|edit|switch)", "update"),
    (r"^(book|reserve|schedule|make|create|register|sign_up|enrol)", "create"),
    (r"^(lookup|look_up|get|check|status|find|show|when)", "read"),
]
IDENTITY_KINDS = ("phone_number", "plate", "email", "person_name")


def infer_roles(scenario: Scenario) -> dict[str, str]:
    """Tool -> role, by the verb its name starts with; a tool no verb matches is an action."""
    out = {}
    for name in scenario.tool_names:
        out[name] = next((role for pattern, role in _VERBS if re.search(pattern, name)), "action")
    return out


def identity_argument(scenario: Scenario, tool: str) -> tuple[str, str] | None:
    """(argument, kind) a tool finds its record by: its first required identity-kind argument,
    preferring numbers and plates over names."""
    fn = next(t["function"] for t in scenario.tools if t["function"]["name"] == tool)
    props = (fn.get("parameters") or {}).get("properties") or {}
    required = (fn.get("parameters") or {}).get("required") or []
    found = [(a, props[a].get("x-kind")) for a in required if a in props and props[a].get("x-kind") in IDENTITY_KINDS]
    found.sort(key=lambda ak: IDENTITY_KINDS.index(ak[1]))
    return found[0] if found else None


__all__ = ["IDENTITY_KINDS", "identity_argument", "infer_roles"]
