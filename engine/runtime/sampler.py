"""The commit rule: from a step's logits at the open block positions to the positions committed.

Greedy rows of a batch share one softmax and one transfer to the host per step. Thresholds are
compared on the device in float32, exactly as a 0-d tensor compares with a Python float (the float
is rounded to float32 first: 0.9 must admit a confidence of float32(0.9)).
"""

from __future__ import annotations

import torch


def greedy(logits: torch.Tensor, thresholds: list[float],
           banned: list[tuple[int, int, list[int]]]) -> tuple[list[int], list[float], list[bool]]:
    """Argmax token, its probability, and whether it clears its row's threshold, per row of `logits`
    [N, V] (a copy this function may change). `banned`: (lo, hi, token ids) never chosen in rows lo..hi-1."""
    for lo, hi, ids in banned:
        logits[lo:hi, ids] = float("-inf")
    conf, tok = torch.softmax(logits, -1).max(-1)
    above = conf >= torch.tensor(thresholds, dtype=conf.dtype, device=conf.device)
    return tok.tolist(), conf.tolist(), above.tolist()


def sample(logits: torch.Tensor, temperature: float, threshold: float, banned: frozenset[int],
           generator: torch.Generator | None) -> tuple[list[int], list[float], list[bool]]:
    """The same for one sequence decoding at a temperature: a token drawn per row of `logits`."""
    if banned:
        logits[:, list(banned)] = float("-inf")
    probs = torch.softmax(logits / max(temperature, 1e-6), -1)
    tok = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    conf = probs.gather(-1, tok[:, None]).squeeze(-1)
    return tok.tolist(), conf.tolist(), (conf >= threshold).tolist()


# How a step picks the positions it commits, beyond "every one above the threshold":
# "confidence": at least the most confident one (Fast-dLLM's rule);
# "leftmost": at least the leftmost open one;
# "prefix": only the left-contiguous run above the threshold, at least the leftmost open one.
# "verify": the block's predictions are drafts; the next pass reads them as an AR model would, after
#   its pending tokens, and commits the run it agrees with plus its own next token
#   (Sequence.accept): exactly the AR output, several tokens a pass where the drafts hold. Greedy
#   only, on families whose cache is an AR cache (Family.verifies_drafts); elsewhere it is "prefix".
# A small dLLM's first reply token decides what the reply is ("Can I have your name" or "What day
# would you like"); a confident later token committed before it may belong to the other reply
# ("Can day would you like"). The leftmost is what an AR model would write next.
ORDERS = ("confidence", "leftmost", "prefix", "verify")
# verify: block predictions below this confidence (and all after them) are not drafted: a draft
# that will be rejected widens the next pass for nothing.
DRAFT_MIN_CONFIDENCE = 0.0


def choose(positions: list[int], tok: list[int], conf: list[float], above: list[bool], *, first_only: bool,
           last_step: bool, dedup: bool, order: str = "confidence") -> list[int]:
    """Indices (into `positions`, ascending) to commit under `order` (ORDERS); all of them on the
    block's last step; only position 0 when only it had a prediction."""
    if first_only:
        return [0] if positions and positions[0] == 0 else []
    if last_step:
        return list(range(len(positions)))
    if order in ("prefix", "verify"):
        run = 0
        while run < len(above) and above[run]:
            run += 1
        chosen = list(range(run))
    else:
        chosen = [i for i, a in enumerate(above) if a]
    if dedup:
        chosen = drop_adjacent_duplicates(chosen, positions, tok, conf)
    if not chosen:
        chosen = [max(range(len(conf)), key=conf.__getitem__)] if order == "confidence" else [0]
    return chosen


def drop_adjacent_duplicates(chosen: list[int], positions: list[int], tok: list[int], conf: list[float]) -> list[int]:
    # Parallel commits of the same token at neighbouring positions ("with with") are the classic
    # failure of small dLLMs: keep the more confident one, decide the other later.
    keep = list(chosen)
    for a, b in zip(chosen, chosen[1:], strict=False):
        if positions[b] == positions[a] + 1 and tok[a] == tok[b] and a in keep and b in keep:
            keep.remove(b if conf[a] >= conf[b] else a)
    return keep


__all__ = ["ORDERS", "choose", "drop_adjacent_duplicates", "greedy", "sample"]
