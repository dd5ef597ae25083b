"""Engine errors: each carries a stable `code` (what callers test) and the request field it is about.

The message is for people and may change; `code` and `param` are the contract (the server maps them
to OpenAI's error body, the voice services decide on `code`, e.g. drop the oldest turn on
`context_length_exceeded`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"
INVALID_MESSAGES = "invalid_messages"
INVALID_TOOLS = "invalid_tools"
INVALID_TOOL_CHOICE = "invalid_tool_choice"
INVALID_REASONING_EFFORT = "invalid_reasoning_effort"
INVALID_MAX_TOKENS = "invalid_max_tokens"
INVALID_TEMPERATURE = "invalid_temperature"
INVALID_STOP = "invalid_stop"
INVALID_ORDER = "invalid_order"
SESSION_BUSY = "session_busy"


class EngineError(Exception):
    """An error of the engine. `code` says what happened, `param` which request field it is about."""

    code = "engine_error"
    param: str | None = None

    def __init__(self, message: str, code: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        if param is not None:
            self.param = param


class EngineInputError(EngineError, ValueError):
    """Bad input from the caller (messages, tools, effort, sizes). The message says what to fix."""

    code = "invalid_request"


class SettingError(EngineError, ValueError):
    """A setting the engine cannot run with (an argument or environment variable, read at load): the
    commands print the message and exit 2, without a traceback."""

    code = "invalid_setting"


def run_tool(main: Callable[[], int], prog: str) -> int:
    """An engine tool's exit code (`python -m engine.tools.bench` and the like): a bad setting prints its code
    and message and exits 2, another engine error (a server that would not start) exits 1; no traceback."""
    try:
        return main()
    except EngineError as e:
        print(f"{prog}: error [{e.code}]: {e}", file=sys.stderr)
        return 2 if isinstance(e, SettingError) else 1


class SessionBusy(EngineError, RuntimeError):
    """Another turn of the same call holds its session."""

    code = SESSION_BUSY


__all__ = ["CONTEXT_LENGTH_EXCEEDED", "INVALID_MAX_TOKENS", "INVALID_MESSAGES", "INVALID_ORDER",
           "INVALID_REASONING_EFFORT", "INVALID_STOP", "INVALID_TEMPERATURE", "INVALID_TOOLS", "INVALID_TOOL_CHOICE",
           "SESSION_BUSY", "EngineError", "EngineInputError", "SessionBusy", "SettingError", "run_tool"]
