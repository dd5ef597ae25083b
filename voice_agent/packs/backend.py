"""A scenario's tool backend: one method per tool, called with the arguments as keywords.

    class Library(Backend):
        def renew_book(self, member_id: str, title: str) -> dict:
            ...
            return {"renewed": title, "due": "2026-12-22"}     # JSON-able; {"error": "..."} is read out

        def setup(self, block: dict) -> None: ...    # a call file's `setup:` (simulate) or a recording's
        def snapshot(self) -> dict: ...              # the state a call leaves, graded by `expect: state:`

Like Pipecat's `register_function` and LiveKit's `function_tool`, a tool is a function the agent calls
by name; here the class keeps the tools of one scenario together with the store they share. The
backend is made once per call (`Backend(store=..., today=..., hours=...)`); durable state lives in
`store`, a folder of its own (the dental pack keeps its SQLite diary there).

`bind_tools` makes every tool total: bad arguments, a missing method, an exception or a result that is
not JSON become `{"error": ...}` that the agent can say, and the call goes on.
"""

from __future__ import annotations

import datetime as dt
import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loguru import logger

from voice_agent.policy.calendar_words import Hours

ToolHandler = Callable[[dict], dict]


class ToolError(Exception):
    """Raised inside a tool for a request it refuses; the message is read out to the caller as is."""


class Backend:
    """Base class of a pack's backend. Subclasses add one method per tool."""

    def __init__(self, store: Path, today: dt.date | None = None, hours: Hours | None = None) -> None:
        self.store = Path(store)
        self.store.mkdir(parents=True, exist_ok=True)
        self._today = today
        self.hours = hours

    def today(self) -> dt.date:
        return self._today or dt.date.today()

    def setup(self, block: dict) -> None:
        """Put the store in the state a call file's `setup:` block describes (simulate, replay)."""
        if block:
            raise ToolError(f"{type(self).__name__} takes no setup block; got keys {', '.join(map(str, block))}")

    def snapshot(self) -> dict:
        """The state the call leaves, as JSON: what `expect: state:` is matched against."""
        return {}

    def close(self) -> None:
        """Release what the backend holds (connections)."""


def bind_tools(backend: Any, tools: list[dict]) -> dict[str, ToolHandler]:
    """Each tool name of `tools` (OpenAI shape) -> a total handler over `backend`'s method of that
    name. A tool the backend lacks answers that it is not available."""
    out: dict[str, ToolHandler] = {}
    for tool in tools:
        fn = tool["function"]
        method = getattr(backend, fn["name"], None)
        out[fn["name"]] = _total(fn["name"], method, fn.get("parameters") or {}) if callable(method) \
            else _unavailable(fn["name"])
    return out


def _total(name: str, method: Callable[..., Any], params: dict) -> ToolHandler:
    declared = set(params.get("properties") or {})
    try:
        sig = inspect.signature(method)
        takes_any = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
        accepted = {k for k, p in sig.parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        # A required argument the method has no default for: asked for here, not a TypeError there.
        required = [k for k in params.get("required") or [] if k in sig.parameters
                    and sig.parameters[k].default is inspect.Parameter.empty]
    except (TypeError, ValueError):
        takes_any, accepted, required = True, set(), []

    def handler(args: dict | None = None) -> dict:
        if args is None:
            args = {}
        if not isinstance(args, dict):
            return {"error": "The request was not understood; please say it again."}
        missing = [k for k in required if args.get(k) in (None, "")]
        if missing:
            return {"error": f"I still need the {' and '.join(k.replace('_', ' ') for k in missing)}."}
        # Arguments the schema does not declare are dropped: a model may add one, a tool must not fail on it.
        kwargs = {k: v for k, v in args.items() if (k in declared or not declared) and (takes_any or k in accepted)}
        try:
            result = method(**kwargs)
        except ToolError as e:
            return {"error": str(e)}
        except Exception as e:  # a failing tool must not end the call
            logger.exception(f"tool {name} raised")
            return {"error": f"Sorry, the system had a problem with that ({type(e).__name__}). Please try again."}
        return _as_result(name, result)

    handler.__name__ = name
    return handler


def _as_result(name: str, result: Any) -> dict:
    if not isinstance(result, dict):
        result = {"result": result}
    try:
        return json.loads(json.dumps(result, default=str))
    except (TypeError, ValueError) as e:
        logger.error(f"tool {name} returned a result that is not JSON: {e}")
        return {"error": "Sorry, the system gave an answer I cannot read. Please try again."}


def _unavailable(name: str) -> ToolHandler:
    def handler(_args: dict | None = None) -> dict:
        return {"error": f"The tool {name} is not available right now."}

    return handler


__all__ = ["Backend", "ToolError", "ToolHandler", "bind_tools"]
