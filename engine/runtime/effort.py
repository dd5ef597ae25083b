"""The reasoning_effort presets: the one table that sets thinking budget and decoding parameters.

`threshold`: commit every masked position whose confidence is at least this.
`steps_per_block`: the step cap as a fraction of the block size (at the cap the rest commit at once).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class EffortPreset:
    thinking_budget: int  # max reasoning tokens before </think> is forced; 0 = answer directly
    threshold: float
    steps_per_block: float
    order: str  # what commits beside the positions above the threshold: engine.runtime.sampler.ORDERS

    def max_steps(self, block_size: int) -> int:
        return max(1, math.ceil(self.steps_per_block * block_size))


EFFORTS: dict[str, EffortPreset] = {
    # No step cap below the block size: a cap forces low-confidence tokens to commit together, and
    # on the default model that garbled every tool call (0 of 12 exact at 0.3 with a cap of half a
    # block, 4 of 12 at 0.9 uncapped, the same as AR; 3 of 12 at 0.9 with a cap of 3B/4, which
    # instant keeps so that a block takes at most three passes; probe of 2026-12-01, docs/model_history.md).
    # order="prefix": a position commits only once every position left of it has (held-out scripted
    # turns, adapter v6: 11-12 of 20 exact against 9 of 20 for "confidence", AR 14; first turns of
    # 30 held-out calls: no "Can day would you like" mixes, and 2.02 tokens a pass against 1.71).
    # order="verify" (2026-12-03): the block's predictions are drafts that the next pass checks as
    # an AR model would, so every effort writes exactly what AR decoding of the same weights
    # writes, several tokens a pass where the drafts hold. Unseen seed-9 calls at instant: 60 of
    # 60 and 2.36 tokens a pass, against 60 of 60 and 1.26 under "prefix". Families whose cache is
    # not an AR cache (SDAR, Fast-dLLM v2, LLaDA, Dream) decode by threshold and "prefix" instead.
    "instant": EffortPreset(thinking_budget=0, threshold=0.9, steps_per_block=0.75, order="verify"),
    "low": EffortPreset(thinking_budget=64, threshold=0.9, steps_per_block=1.0, order="verify"),
    "medium": EffortPreset(thinking_budget=256, threshold=0.9, steps_per_block=1.0, order="verify"),
    "high": EffortPreset(thinking_budget=1024, threshold=0.95, steps_per_block=1.0, order="verify"),
}


def get_effort(name: str) -> EffortPreset:
    try:
        return EFFORTS[name]
    except KeyError:
        raise ValueError(
            f"reasoning_effort must be one of {', '.join(EFFORTS)}; got {name!r}"
        ) from None
