"""The budget verdict: e2e_ms, answer_e2e_ms and ttfat_ms each judged against the budget
(MISSION.md), and the lines a command prints for it."""

from __future__ import annotations

from typing import Any

# The three latencies each judged against the budget (MISSION.md), and the share of turns each must
# keep within it for the run to pass: the capacity definition's 90%.
BUDGET_METRICS = ("e2e_ms", "answer_e2e_ms", "ttfat_ms")
BUDGET_PASS_SHARE = 0.9


def pass_rate(turns: list[dict], metric: str, budget_ms: float) -> float | None:
    """The share of `turns` whose `metric` was within the budget; a turn with no value is a miss."""
    if not turns:
        return None
    return round(sum(1 for t in turns if t.get(metric) is not None and t[metric] <= budget_ms) / len(turns), 4)


def budget_verdict(rates: dict[str, float | None]) -> dict[str, Any]:
    """Pass when each of BUDGET_METRICS kept at least BUDGET_PASS_SHARE of the turns within budget;
    `failed` names the ones that did not."""
    failed = [m for m in BUDGET_METRICS if rates.get(m) is not None and rates[m] < BUDGET_PASS_SHARE]
    judged = [m for m in BUDGET_METRICS if rates.get(m) is not None]
    return {"passed": bool(judged) and not failed, "failed": failed, "pass_share": BUDGET_PASS_SHARE}


def budget_lines(s: dict) -> list[str]:
    """e2e, answer_e2e and TTFAT side by side, then the budget verdict naming what failed."""
    lines = []
    for metric, rate_key in (("e2e_ms", "budget_pass_rate"), ("answer_e2e_ms", "answer_budget_pass_rate"),
                             ("ttfat_ms", "ttfat_budget_pass_rate")):
        d, rate = s.get(metric) or {}, s.get(rate_key)
        lines.append(f"{metric:<14} p50 {d.get('p50')}  p95 {d.get('p95')}  p99 {d.get('p99')}  "
                     f"within {s['budget_ms']:.0f} ms: {'-' if rate is None else f'{rate:.0%}'}")
    verdict = s.get("budget_verdict") or {}
    share = verdict.get("pass_share", 0.9)
    if verdict.get("passed"):
        lines.append(f"budget PASS: each of e2e, answer_e2e and TTFAT within {s['budget_ms']:.0f} ms on >= {share:.0%} "
                     "of turns")
    else:
        lines.append(f"budget FAIL: {', '.join(verdict.get('failed') or []) or 'no turn measured'} within "
                     f"{s['budget_ms']:.0f} ms on < {share:.0%} of turns")
    if s.get("false_cutoffs"):
        lines.append(f"false cut-offs: {s['false_cutoffs']} (the caller heard {s.get('cutoffs_heard', 0)} of those "
                     "answers begin)")
    filler = s.get("filler_turn_share")
    lines.append(f"dominant stage: {s['dominant_stage']}; turns with a filler: {'-' if filler is None else f'{filler:.0%}'}")
    steps = {k: v for k, v in (s.get("ttfat_breakdown_mean_ms") or {}).items() if v is not None}
    if steps:
        lines.append("ttfat steps (mean ms): " + ", ".join(f"{k.removesuffix('_ms')} {v:.0f}" for k, v in steps.items()))
    return lines
