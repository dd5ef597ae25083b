"""The numbers of a simulate run, and its pass/fail table.

- task_success_rate = calls that succeeded / calls
- answered_rate     = caller turns with a spoken answer (not the filler, not the fallback) / caller turns
- clean_reply_rate  = speakable replies / replies (a reply: one LLM response's non-empty spoken text)
- tool_error_rate   = tool results with an "error" key / tool calls
- ttfat_ms_p50/p95  = the engine's ttfat_ms over the LLM rounds that spoke
- tokens_per_forward = model-decoded tokens / forward passes, summed over every LLM round (the
  engine's own per-round ratio, aggregated: infilled tool-call skeleton tokens are not counted);
  decoded_tokens and forward_passes are its two sums (the passes are what a call waits for)
- first_answer_ms_p50/p95 = per caller turn, from its text going in to the first answer text out
  (tool rounds included; a filler is not the answer): the text-level answer_e2e_ms
- filler_turn_share = caller turns where the filler was spoken (the answer was late) / caller turns
- speculation       = with --hear-early-s: the calls' decodes ahead and read-only tools run ahead,
  added up (tools_run, tools_used, tools_wasted, tools_skipped, ...); None otherwise
- policy_share      = caller turns whose action the policy decided (a scripted answer, the tool it
  named, the question it asked instead of a call: `decided_by`) / caller turns; model_share the rest
A rate whose denominator is 0 is None.
"""

from __future__ import annotations

from typing import Any

from voice_agent.latency.metrics import add_counters, distribution
from voice_agent.simulate.grade import speakable_problems
from voice_agent.simulate.transcript import CallRecord, TurnRecord

# The metrics a brain adds when the policy, not the model, decided a turn's action (brain/base.py).
POLICY_MARKS = ("decided_by", "answered_greeting", "answered_goodbye", "answered_from_facts", "tool_choice",
                "asked_instead_of_call")


def decided_by(turn: TurnRecord) -> list[str]:
    """The policy's decisions in a caller turn's LLM rounds ("tool_choice", "answered_from_facts",
    ...); [] when the model decided every round."""
    return [k for m in turn.metrics for k in POLICY_MARKS if m.get(k)]


def per_call(record: CallRecord, reasons: list[str]) -> dict:
    replies = [r for t in record.turns for r in t.replies if r.text.strip()]
    return {
        "id": record.id,
        "success": not reasons,
        "reasons": reasons,
        "turns": len(record.turns),
        "answered_turns": sum(t.answered for t in record.turns),
        "replies": len(replies),
        "clean_replies": sum(not speakable_problems(r.text) for r in replies),
        "tool_calls": [c.name for c in record.tool_calls],
        "tool_errors": sum(c.error for c in record.tool_calls),
        "policy_turns": sum(bool(decided_by(t)) for t in record.turns),
        "wall_s": round(record.wall_s, 2),
    }


def summarize(records: list[CallRecord], reasons: list[list[str]], **extra: Any) -> dict:
    rows = [per_call(r, why) for r, why in zip(records, reasons, strict=True)]
    rounds = [m for r in records for t in r.turns for m in t.metrics]
    decoded = sum((m.get("completion_tokens") or 0) - (m.get("infilled_tokens") or 0) for m in rounds)
    forwards = sum(m.get("forward_passes") or 0 for m in rounds)
    ttfat = distribution(m.get("ttfat_ms") for m in rounds)
    first = distribution(t.first_answer_ms for r in records for t in r.turns)
    return {
        "calls": len(records),
        "task_success_rate": _rate(sum(x["success"] for x in rows), len(rows)),
        "answered_rate": _rate(sum(x["answered_turns"] for x in rows), sum(x["turns"] for x in rows)),
        "clean_reply_rate": _rate(sum(x["clean_replies"] for x in rows), sum(x["replies"] for x in rows)),
        "tool_error_rate": _rate(sum(x["tool_errors"] for x in rows), sum(len(x["tool_calls"]) for x in rows)),
        "tool_errors": sum(x["tool_errors"] for x in rows),
        "policy_share": _rate(sum(x["policy_turns"] for x in rows), sum(x["turns"] for x in rows)),
        "model_share": _rate(sum(x["turns"] - x["policy_turns"] for x in rows), sum(x["turns"] for x in rows)),
        "ttfat_ms_p50": ttfat["p50"],
        "ttfat_ms_p95": ttfat["p95"],
        "tokens_per_forward": round(decoded / forwards, 3) if forwards else None,
        "decoded_tokens": decoded,
        "forward_passes": forwards,
        "first_answer_ms_p50": first["p50"],
        "first_answer_ms_p95": first["p95"],
        "filler_turn_share": _rate(sum(bool(t.fillers) for r in records for t in r.turns),
                                   sum(len(r.turns) for r in records)),
        "speculation": add_counters(r.speculation for r in records) if any(r.speculation for r in records) else None,
        **extra,
        "per_call": rows,
    }


def table_text(summary: dict) -> str:
    """One line per call: PASS/FAIL, the id, turns answered, tools used, and why it failed."""
    rows = summary["per_call"]
    width = max([len(x["id"]) for x in rows] + [4])
    lines = [f"{'':4}  {'call':<{width}}  answered  policy  tools"]
    for x in rows:
        tools = ",".join(x["tool_calls"]) or "-"
        lines.append(f"{'PASS' if x['success'] else 'FAIL'}  {x['id']:<{width}}  "
                     f"{x['answered_turns']:>3}/{x['turns']:<4}  {x['policy_turns']:>3}/{x['turns']:<2}  {tools}")
        for why in x["reasons"]:
            lines.append(f"{'':6}{'':<{width}}  - {why}")
    lines.append(f"{sum(x['success'] for x in rows)}/{len(rows)} calls succeeded; "
                 f"answered {_pct(summary['answered_rate'])}, clean replies {_pct(summary['clean_reply_rate'])}, "
                 f"tool errors {_pct(summary['tool_error_rate'])}, policy decided {_pct(summary['policy_share'])} "
                 f"of turns (model {_pct(summary['model_share'])}), ttfat p50/p95 "
                 f"{summary['ttfat_ms_p50']}/{summary['ttfat_ms_p95']} ms, first answer p50/p95 "
                 f"{summary['first_answer_ms_p50']}/{summary['first_answer_ms_p95']} ms, "
                 f"filler on {_pct(summary['filler_turn_share'])} of turns, "
                 f"tokens/forward {summary['tokens_per_forward']}")
    spec = summary.get("speculation")
    if spec:
        lines.append(f"heard early: {spec.get('decode_used', 0)} of {spec.get('decoded', 0)} turns decoded ahead were used; "
                     f"read-only tools run ahead {spec.get('tools_run', 0)}, used {spec.get('tools_used', 0)}, "
                     f"wasted {spec.get('tools_wasted', 0)}, skipped (side effects) {spec.get('tools_skipped', 0)}; "
                     f"answers decoded ahead from them {spec.get('answers_ahead_used', 0)}")
    return "\n".join(lines)


def _rate(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"
