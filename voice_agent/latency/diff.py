"""Compare two replay reports and gate regressions.

`voice-agent report diff OLD.json NEW.json` prints every summary metric side by side and exits
1 when the p95 of `e2e_ms`, `answer_e2e_ms` or `ttfat_ms` got worse by more than BOTH the absolute and the
relative threshold (so run-to-run noise on a fast metric does not trip it), or when a budget
pass rate dropped by more than its threshold. 0 means no regression; 2 means a report could not
be read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from voice_agent.latency.report import load_report

DIST_METRICS = ("e2e_ms", "answer_e2e_ms", "ttfat_ms", "ttft_ms", "stt_ms", "tts_ttfb_ms", "vad_stop_ms", "bot_longest_pause_ms")
GATED_P95 = ("e2e_ms", "answer_e2e_ms", "ttfat_ms")
RATES = ("budget_pass_rate", "answer_budget_pass_rate", "ttfat_budget_pass_rate", "filler_turn_share")
GATED_RATES = ("budget_pass_rate",)


@dataclass(frozen=True)
class Thresholds:
    p95_ms: float = 50.0        # a p95 may grow by this many ms ...
    p95_pct: float = 10.0       # ... or this many percent, whichever is larger, before it fails
    pass_rate_drop: float = 0.05  # absolute drop in budget_pass_rate that fails (0.05 = 5 points)


@dataclass(frozen=True)
class Change:
    metric: str
    old: float | None
    new: float | None
    regression: bool = False

    @property
    def delta(self) -> float | None:
        return None if self.old is None or self.new is None else self.new - self.old


def compare(old: dict, new: dict, th: Thresholds = Thresholds()) -> list[Change]:
    so, sn = old["summary"], new["summary"]
    changes: list[Change] = []
    for metric in DIST_METRICS:
        for stat in ("p50", "p95", "p99", "mean"):
            a = (so.get(metric) or {}).get(stat)
            b = (sn.get(metric) or {}).get(stat)
            bad = False
            if stat == "p95" and metric in GATED_P95 and b is not None:
                if a is None:
                    bad = False  # nothing to compare against
                else:
                    grew = b - a
                    bad = grew > th.p95_ms and grew > a * th.p95_pct / 100
            changes.append(Change(f"{metric}.{stat}", a, b, bad))
    for metric in RATES:
        a, b = so.get(metric), sn.get(metric)
        bad = metric in GATED_RATES and a is not None and (b is None or a - b > th.pass_rate_drop + 1e-9)
        changes.append(Change(metric, a, b, bad))
    for metric in ("turns", "answered_turns", "calls_failed"):
        changes.append(Change(metric, so.get(metric), sn.get(metric)))
    for stage, a in (so.get("breakdown_mean_ms") or {}).items():
        changes.append(Change(f"breakdown.{stage}", a, (sn.get("breakdown_mean_ms") or {}).get(stage)))
    return changes


COUNTS = ("turns", "answered_turns", "calls_failed")


def _fmt(v: float | None, metric: str) -> str:
    if v is None:
        return "-"
    if metric in RATES:
        return f"{v:.1%}"
    return f"{v:.0f}" if metric in COUNTS else f"{v:.1f}"


def format_changes(changes: list[Change], old_name: str, new_name: str) -> str:
    lines = [f"{'metric':<32} {'old':>10} {'new':>10} {'change':>17}   ({old_name} -> {new_name})"]
    for c in changes:
        if c.delta is None:
            delta = "-"
        elif c.metric in RATES:
            delta = f"{c.delta * 100:+.1f} pt"
        elif c.metric in COUNTS:
            delta = f"{c.delta:+.0f}"
        else:
            pct = f" ({c.delta / c.old * 100:+.0f}%)" if c.old else ""
            delta = f"{c.delta:+.1f}{pct}"
        mark = "  REGRESSION" if c.regression else ""
        lines.append(f"{c.metric:<32} {_fmt(c.old, c.metric):>10} {_fmt(c.new, c.metric):>10} {delta:>17}{mark}")
    return "\n".join(lines)


def _name(path: Path) -> str:
    """report.json files usually differ by folder: show that."""
    path = Path(path)
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name


def run_diff(old_path: Path, new_path: Path, th: Thresholds = Thresholds()) -> int:
    try:
        old, new = load_report(old_path), load_report(new_path)
    except ValueError as e:
        print(f"error: {e}")
        return 2
    changes = compare(old, new, th)
    print(format_changes(changes, _name(old_path), _name(new_path)))
    bad = [c for c in changes if c.regression]
    if bad:
        print(f"\nFAIL: {len(bad)} regression(s) past the thresholds (p95 +{th.p95_ms:g} ms and "
              f"+{th.p95_pct:g}%, pass rate -{th.pass_rate_drop:.0%}): " + ", ".join(c.metric for c in bad))
        return 1
    print("\nOK: no regression past the thresholds")
    return 0
