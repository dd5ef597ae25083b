"""A failed call as plain text, for a person to read in a minute: why it failed, then each caller
turn with what the agent said, the tools it called (arguments and results), and who decided the
turn's action (the policy, and which decision, or the model)."""

from __future__ import annotations

import json
from pathlib import Path

from voice_agent.simulate.summary import decided_by
from voice_agent.simulate.transcript import CallRecord

MAX_RESULT_CHARS = 300


def readable_transcript(record: CallRecord, reasons: list[str], scenario: str = "") -> str:
    lines = [f"call {record.id}" + (f" ({scenario})" if scenario else "")]
    lines += ["failed because:", *(f"  - {why}" for why in reasons), ""]
    for i, turn in enumerate(record.turns, 1):
        decided = decided_by(turn)
        lines.append(f"{i:>2} CALLER: {turn.caller}")
        lines.append(f"   decided by: {'policy (' + ', '.join(dict.fromkeys(decided)) + ')' if decided else 'model'}")
        for c in turn.tool_calls:
            result = json.dumps(c.result, ensure_ascii=False, default=str)
            if len(result) > MAX_RESULT_CHARS:
                result = result[: MAX_RESULT_CHARS - 3] + "..."
            lines.append(f"   TOOL {c.name}({json.dumps(c.arguments, ensure_ascii=False)}) -> {result}")
        for filler in turn.fillers:
            lines.append(f"   AGENT (filler): {filler}")
        for reply in turn.replies:
            lines.append(f"   AGENT{' (fallback)' if reply.fallback else ''}: {reply.text}")
        if not turn.replies:
            lines.append("   AGENT: (nothing)")
        for err in turn.errors:
            lines.append(f"   ERROR: {err}")
    if record.error:
        lines.append(f"the call stopped: {record.error}")
    if record.state is not None:
        state = json.dumps(record.state, ensure_ascii=False, default=str)
        lines.append(f"state after the call: {state if len(state) <= 1200 else state[:1197] + '...'}")
    return "\n".join(lines) + "\n"


def write_failed(out_dir: Path, items: list[tuple[CallRecord, list[str]]], scenario: str = "") -> list[Path]:
    """DIR/failed/<id>.txt for each failed call (the folder is emptied first); the paths written."""
    folder = out_dir / "failed"
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.txt"):
        old.unlink()
    written = []
    for record, reasons in items:
        if reasons:
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in record.id)
            path = folder / f"{safe}.txt"
            path.write_text(readable_transcript(record, reasons, scenario), encoding="utf-8")
            written.append(path)
    return written
