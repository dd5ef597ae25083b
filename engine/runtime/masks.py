"""Who sees whom among the new tokens of one pass, and which outputs of a pass are read.

Pure functions on host tensors: the runner turns them into device tensors once per layout.
"""

from __future__ import annotations

import torch


def prefill_mask(n: int, cache_attention: str, block_size: int, start: int) -> torch.Tensor:
    """Visibility among `n` clean tokens written at absolute position `start`."""
    if cache_attention == "causal":
        return torch.ones(n, n, dtype=torch.bool).tril()
    if cache_attention == "full":
        return torch.ones(n, n, dtype=torch.bool)
    blk = (torch.arange(n) + start) // max(block_size, 1)
    return blk[None, :] <= blk[:, None]


def intra_mask(n_pending: int, n_block: int, cache_attention: str, block_size: int,
               start: int | None = None) -> torch.Tensor:
    """Visibility among one row's new tokens: pending (clean) tokens, then the noisy block.

    With `start` (the pending tokens' absolute position) a "block" cache sees them block-causally
    at absolute multiples of `block_size`, as a prefill would; without it, all of them at once."""
    t = n_pending + n_block
    m = torch.zeros(t, t, dtype=torch.bool)
    if n_pending:
        if cache_attention == "causal":
            m[:n_pending, :n_pending] = torch.ones(n_pending, n_pending, dtype=torch.bool).tril()
        elif cache_attention == "block" and start is not None:
            m[:n_pending, :n_pending] = prefill_mask(n_pending, "block", block_size, start)
        else:
            m[:n_pending, :n_pending] = True
    m[n_pending:, :] = True  # the block sees the pending tokens and itself, bidirectionally
    return m


def with_branch(m: torch.Tensor, n_pending: int, n_branch: int) -> torch.Tensor:
    """`m` [t, t] for pending + drafts + block, grown by a second block of `n_branch` masks (order
    "verify") that sees only the pending tokens and itself, and that nothing else sees: the
    predictions a block would make right after the pending tokens, for when a draft fails."""
    t = m.shape[0]
    out = torch.zeros(t + n_branch, t + n_branch, dtype=torch.bool)
    out[:t, :t] = m
    out[t:, :n_pending] = True
    out[t:, t:] = True
    return out


def read_positions(n: int, n_block: int, token_shift: bool, n_draft: int = 0, n_branch: int = 0) -> range:
    """The outputs of a row's pass whose predictions are read: the last pending token (it predicts
    what follows the cache), the `n_draft` drafts after it (each predicts the next, engine/runtime/sampler.py
    "verify") and those that predict block positions (one left under token shift), through the
    `n_branch` block after it (`with_branch`).
    `n` counts the row's tokens without the masked window, `n_block` the block without it."""
    if not n_block:
        return range(max(n - n_draft - 1, 0), n)
    last = n - 2 if token_shift else n - 1
    return range(max(n - n_branch - n_block - n_draft - 1, 0), last + 1)


__all__ = ["intra_mask", "prefill_mask", "read_positions", "with_branch"]
