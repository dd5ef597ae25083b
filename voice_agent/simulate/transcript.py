"""What a simulated call produced, turn by turn: the records the runner fills and the grader reads.

Plain dataclasses (no Pipecat, no engine), so tests build transcripts by hand.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class ToolCallRecord:
    name: str
    arguments: dict
    result: Any = None

    @property
    def error(self) -> bool:
        return isinstance(self.result, dict) and "error" in self.result


@dataclass
class Reply:
    """The spoken text of one LLM response (what reached the TTS side, after the SpeakableFilter).
    `fallback`: it is the service's own stand-in ("Sorry, could you say that again?" when the model
    produced nothing speakable, or the apology after an engine error), not the model's answer."""

    text: str
    fallback: bool = False


@dataclass
class TurnRecord:
    caller: str
    replies: list[Reply] = field(default_factory=list)
    fillers: list[str] = field(default_factory=list)        # the filler phrase, each time it was spoken
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    metrics: list[dict] = field(default_factory=list)       # the engine's metrics, one per LLM round
    first_answer_ms: float | None = None                    # caller's text in -> first answer text out
    errors: list[str] = field(default_factory=list)         # ErrorFrames the pipeline reported
    timed_out: bool = False

    @property
    def spoken(self) -> str:
        """The answer text of the turn (fillers excluded)."""
        return " ".join(r.text.strip() for r in self.replies if r.text.strip())

    @property
    def answered(self) -> bool:
        return any(r.text.strip() and not r.fallback for r in self.replies)


@dataclass
class CallRecord:
    id: str
    turns: list[TurnRecord] = field(default_factory=list)
    state: dict | None = None                               # the backend's snapshot() after the call
    error: str | None = None                                # the call could not be run to the end
    wall_s: float = 0.0
    speculation: dict | None = None  # with --hear-early-s: the turns decoded ahead, the tools run ahead

    @property
    def spoken(self) -> str:
        """Everything the caller heard from the bot, fillers included."""
        return " ".join(x for t in self.turns for x in [*t.fillers, t.spoken] if x)

    @property
    def tool_calls(self) -> list[ToolCallRecord]:
        return [c for t in self.turns for c in t.tool_calls]

    def to_dict(self) -> dict:
        d = asdict(self)
        for t, td in zip(self.turns, d["turns"], strict=True):
            td["spoken"], td["answered"] = t.spoken, t.answered
        return d
