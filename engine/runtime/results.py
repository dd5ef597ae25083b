"""What a request gives back: streamed events and the final result (plain data, no engine imports)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ChatResult:
    text: str
    reasoning: str
    tool_calls: list[dict]
    tool_errors: list[str]
    finish_reason: str
    metrics: dict
    model: str
    raw_text: str = ""

    def message(self) -> dict:
        """The assistant message in OpenAI shape (with `reasoning_content`)."""
        m: dict = {"role": "assistant", "content": self.text or (None if self.tool_calls else "")}
        if self.reasoning:
            m["reasoning_content"] = self.reasoning
        if self.tool_calls:
            m["tool_calls"] = self.tool_calls
        return m


@dataclass
class StreamEvent:
    # "reasoning" | "answer" | "tool_call" (the model opened a call; no text) | "done"; with
    # call_progress, "tool_args" (the call's text so far; `result` is a partial snapshot)
    type: str
    text: str = ""
    t_ms: float = 0.0  # since the request started
    result: ChatResult | None = None


__all__ = ["ChatResult", "StreamEvent"]
