"""How wide a verify pass is: a draft is worth its width only where it is likely to hold.

A verify pass (order "verify", engine/runtime/sequence.py) carries the pending tokens, then `k` drafts
checked as an AR model would, then `b` masks whose predictions are the next pass's drafts, and,
where a draft may fail, a branch of `b` more masks that predicts from the pending tokens alone. Each
draft that holds is a token without a pass of its own, but each position widens the pass, and on a
CPU a wider pass costs more (engine/runtime/pass_cost.py: an int8 pass of 12 tokens costs 2.6 one-token
passes on a CPU without native bf16, an fp32 one 1.4). The output is the same whatever the layout
(AR-exact); only the tokens a pass and the cost a pass move. So for each pass the planner:
- sizes the block by the steady state of its drafts: `b` masks give `b - 1` drafts that hold with
  the odds seen so far, checked in a pass of `1 + (b - 1) + b` tokens; the `b` with the most
  expected tokens per unit of cost wins (0: no block, an AR pass with whatever drafts it has);
- keeps the prefix of the drafts it has that gives the most expected tokens per unit of cost;
- widens the block to its full size where each mask costs next to nothing (a wide pass);
- adds the branch only where it costs almost nothing.

How likely a draft is to hold (`hold_odds`), measured on the bench turns and 30 held-out simulated
calls at instant (int8, 2026-12-04; P(draft i holds | the drafts before it held)):
- the block's own predictions: by their confidence c, 0.2-0.45 below c = 0.7, 0.56-0.70 for
  0.7-0.9, 0.80-0.93 above (1,060 drafts): about 0.9 c;
- the pool's (engine/runtime/drafts.py): the first 0.32 on chit-chat, 0.67-0.77 on calls; once one held,
  the next 0.76-1.0. So these odds start at a prior and follow what the pool's drafts do (`HoldRate`);
- the tool-call guide's (engine/text/tool_guide.py): the first 0.85, then 0.88-1.0.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

# The branch is added where it makes the pass at most this much dearer; a mask past the block's
# steady-state size where it adds at most this much.
BRANCH_FREE = 1.1
FREE_MASK = 1.02
POOL_ODDS = (0.5, 0.85)  # (the first draft, each one after)
GUIDE_ODDS = (0.85, 0.95)
# A sequence's block drafts start with these odds, worth this many drafts, then move with what held.
BLOCK_PRIOR_ODDS = 0.5
BLOCK_PRIOR_WEIGHT = 4.0


def block_odds(confidence: float) -> float:
    return min(0.95, 0.9 * confidence)


def run_odds(first: float, rest: float, n: int) -> list[float]:
    """The odds of a run of `n` drafts: the first, then each one after one that held."""
    return [first] + [rest] * max(n - 1, 0) if n else []


def hold_odds(source: str, n: int) -> list[float]:
    """The prior odds of `n` drafts from the pool or the guide ("pool" | "guide")."""
    return run_odds(*(POOL_ODDS if source == "pool" else GUIDE_ODDS), n)


class HoldRate:
    """How often a source's drafts have held: the first of a run, and each one after one that held,
    starting from prior odds worth `weight` drafts. The pool keeps one for all calls (engine/runtime/drafts.py):
    its drafts hold far more often in `low`'s repeated notes than in open chit-chat. A sequence keeps
    one for its block's own drafts (`rate`: every draft checked, first or not)."""

    def __init__(self, first: float, rest: float, weight: float = 8.0) -> None:
        self._counts = [first * weight, weight, rest * weight, weight]  # held, seen: first; held, seen: rest
        self._lock = threading.Lock()

    def record(self, k: int, a: int) -> None:
        """`k` drafts were checked and the first `a` held."""
        if k <= 0:
            return
        with self._lock:
            c = self._counts
            c[0] += a > 0
            c[1] += 1
            c[2] += max(min(a, k) - 1, 0)
            c[3] += min(a, k - 1)

    def odds(self, n: int) -> list[float]:
        with self._lock:
            first, rest = self._counts[0] / self._counts[1], self._counts[2] / self._counts[3]
        return run_odds(first, rest, n)

    def rate(self) -> float:
        """The share of all the drafts checked that held."""
        with self._lock:
            c = self._counts
            return (c[0] + c[2]) / (c[1] + c[3])


def expected_tokens(odds: list[float], k: int) -> float:
    """Tokens a pass finalises with the first `k` drafts: the one after the last that held, plus
    each draft that held (draft i only where every one before it did)."""
    total, run = 1.0, 1.0
    for p in odds[:k]:
        run *= p
        total += run
    return total


@dataclass(frozen=True)
class PassLayout:
    drafts: int  # drafts kept (a prefix)
    block: int  # masks after them (0: none)
    branch: bool


def plan(n_pending: int, odds: list[float], max_block: int, block_rate: float,
         cost: Callable[[int], float]) -> PassLayout:
    """The layout of one pass: `odds` are the drafts' hold odds (each given the ones before held),
    `max_block` the most masks the block may have, `block_rate` the odds of the block's own drafts."""
    pending = max(n_pending, 1)
    sizes = [0] + list(range(2, max_block + 1))
    # steady state: b masks now are b - 1 drafts next pass, in a pass of 1 + (b - 1) + b tokens
    block = max(sizes, key=lambda b: (expected_tokens([block_rate] * max(b - 1, 0), b - 1) / cost(2 * b or 1), -b))
    best, keep = -1.0, 0
    for k in range(len(odds) + 1):
        score = expected_tokens(odds, k) / cost(pending + k + block)
        if score > best * (1 + 1e-9):
            best, keep = score, k
    width = pending + keep + block
    # In a pass that is wide anyway (a turn's first, with the new prompt in it) more masks cost next to
    # nothing, and they are the next pass's drafts.
    while block < max_block and cost(width + 1) <= FREE_MASK * cost(width):
        block, width = block + 1, width + 1
    branch = keep > 0 and block > 0 and cost(width + block) <= BRANCH_FREE * cost(width)
    return PassLayout(keep, block, branch)


__all__ = ["BRANCH_FREE", "FREE_MASK", "HoldRate", "PassLayout", "block_odds", "expected_tokens", "hold_odds", "plan",
           "run_odds"]
