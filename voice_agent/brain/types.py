"""What a brain (the LLM behind a call) streams, the same whether the model runs in this process
(`EngineBrain`) or on an OpenAI-compatible server (`RemoteBrain`), and how a turn fails."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TurnResult:
    """One LLM round, once it is over."""

    text: str                 # the answer (what may be spoken)
    reasoning: str            # never spoken
    tool_calls: list[dict]    # OpenAI shape: {"id", "type": "function", "function": {"name", "arguments": str}}
    tool_errors: list[str]    # calls the model made that were rejected, and why
    finish_reason: str
    metrics: dict = field(default_factory=dict)  # MISSION.md names, milliseconds (ttft_ms, ttfat_ms, ...)


@dataclass
class TurnEvent:
    type: str  # "reasoning" | "answer" | "tool_call" | "tool_args" | "queued" (behind other calls) | "done"
    text: str = ""
    t_ms: float = 0.0         # since the turn started
    result: TurnResult | None = None  # on "done"


class BrainError(Exception):
    """A turn the brain could not answer. `code` is stable (for programs and logs); the message
    says what happened and what to check."""

    CONTEXT_TOO_LONG = "context_length_exceeded"  # the engine's code and OpenAI's, the same string
    INVALID_REQUEST = "invalid_request"      # the request itself is wrong (effort, tools, sizes)
    UNREACHABLE = "llm_unreachable"          # no connection to --llm-url
    TIMEOUT = "llm_timeout"
    SERVER_ERROR = "llm_server_error"        # the server answered with an error
    BAD_RESPONSE = "llm_bad_response"        # the server answered something that is not a chat stream
    ENGINE_ERROR = "engine_error"            # the in-process engine failed
    OVERLOADED = "engine_overloaded"         # the turn waited past its limit behind other calls' turns

    def __init__(self, code: str, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status

    @property
    def caller_fault(self) -> bool:
        """The request was wrong, not the model or the server: retrying it unchanged fails again."""
        return self.code in (self.CONTEXT_TOO_LONG, self.INVALID_REQUEST)

    def __str__(self) -> str:
        return f"{self.message} [{self.code}]"
