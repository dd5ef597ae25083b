"""Grade a simulated call against its `expect` block: by the state its backend is left in, the tools
used, what was said, and whether every reply can be spoken.

A call succeeds when it ran to the end and
- every `expect` entry holds: `state` is a subset of the backend's `snapshot()` (lists match
  exactly: packs/state_match.py); each `tool_calls` entry was called at least
  once (with the listed arguments as a subset, if any); no `no_tool_calls` tool was called; every
  `must_say` phrase was said and no `must_not_say` phrase (whole words, case and punctuation
  ignored, over everything spoken, the filler included);
- every caller turn got a non-empty spoken answer: the filler and the service's fallback phrase
  ("Sorry, could you say that again?") do not count;
- every reply is speakable (`speakable_problems`).
`grade` returns the reasons a call failed; none means success.
"""

from __future__ import annotations

import json
import re
from typing import Any

from voice_agent.packs.state_match import state_mismatches
from voice_agent.simulate.callfile import Call
from voice_agent.simulate.transcript import CallRecord

MAX_WORDS = 40
_TAG = re.compile(r"[<>]")
_JSON_PUNCT = re.compile(r"[{}\[\]]")
_QUOTED_KEY = re.compile(r'"[^"\s]+"\s*:')
_BARE_KEY = re.compile(r"\b[A-Za-z_]\w*\s*:(?!\d)")   # "name: Jo, date: ..." (two or more in a reply)
_TOOL_WORDS = re.compile(r"tool_?call|\barguments\b", re.IGNORECASE)


def speakable_problems(text: str) -> list[str]:
    """Why a reply cannot be read out by a TTS as it is: none means speakable."""
    problems = []
    if _TAG.search(text):
        problems.append("a tag (< or >)")
    if _JSON_PUNCT.search(text) or _QUOTED_KEY.search(text) or len(_BARE_KEY.findall(text)) >= 2:
        problems.append("JSON")
    if _TOOL_WORDS.search(text):
        problems.append("'tool_call'/'arguments'")
    words = len(text.split())
    if words > MAX_WORDS:
        problems.append(f"{words} words (at most {MAX_WORDS})")
    return problems


def grade(call: Call, record: CallRecord) -> list[str]:
    reasons: list[str] = []
    if record.error:
        reasons.append(f"the call did not run to the end: {record.error}")
    for i, turn in enumerate(record.turns, 1):
        if turn.timed_out:
            reasons.append(f"turn {i}: no end of the answer within the time limit")
        if not turn.answered:
            heard = f" (only the fallback {turn.spoken!r})" if turn.spoken else ""
            reasons.append(f"turn {i} ({_short(turn.caller)}): no spoken answer{heard}")
        for reply in turn.replies:
            problems = speakable_problems(reply.text)
            if problems:
                reasons.append(f"turn {i}: not speakable ({', '.join(problems)}): {_short(reply.text, 60)}")
    if len(record.turns) < len(call.caller) and not record.error:
        reasons.append(f"only {len(record.turns)} of {len(call.caller)} caller turns ran")
    reasons += _state_reasons(call, record)
    reasons += _tool_reasons(call, record)
    said = f" {_norm(record.spoken)} "
    for phrase in call.expect.must_say:
        if f" {_norm(phrase)} " not in said:
            reasons.append(f"never said {phrase!r}")
    for phrase in call.expect.must_not_say:
        if f" {_norm(phrase)} " in said:
            reasons.append(f"said {phrase!r}")
    return reasons


def _state_reasons(call: Call, record: CallRecord) -> list[str]:
    if not call.expect.state:
        return []
    if record.state is None:
        return ["the backend's state was not read back"]
    return state_mismatches(call.expect.state, record.state)


def _tool_reasons(call: Call, record: CallRecord) -> list[str]:
    reasons = []
    made = record.tool_calls
    for spec in call.expect.tool_calls:
        hits = [c for c in made if c.name == spec["name"]]
        if not hits:
            reasons.append(f"{spec['name']} was never called")
        elif spec["arguments"] and not any(_args_match(spec["arguments"], c.arguments) for c in hits):
            got = "; ".join(json.dumps(c.arguments, ensure_ascii=False) for c in hits)
            reasons.append(f"{spec['name']} never called with {json.dumps(spec['arguments'])} (got {got})")
    names = {c.name for c in made}
    for name in call.expect.no_tool_calls:
        if name in names:
            reasons.append(f"{name} was called")
    return reasons


def _args_match(expected: dict, actual: Any) -> bool:
    return isinstance(actual, dict) and all(_norm(str(actual.get(k, ""))) == _norm(str(v)) for k, v in expected.items())


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9:']+", " ", text.lower()).split())


def _short(text: str, n: int = 40) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= n else text[: n - 3] + "...")
