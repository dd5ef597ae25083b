"""Per-turn latency: the Pipecat observer that records each turn's timeline (observer.py), the
offline ground truth of when the caller spoke (truth.py), the numbers and e2e breakdown
(metrics.py), report.json + report.html (report.py; schema in SCHEMA.md), report diffs for CI
gates (diff.py) and per-call QA expectations (expectations.py).

Importing this package is cheap; the submodules that need Pipecat import it themselves.
"""

from voice_agent.latency.metrics import DEFAULT_BUDGET_MS, STAGE_NAMES

__all__ = ["DEFAULT_BUDGET_MS", "STAGE_NAMES"]
