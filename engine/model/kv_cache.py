"""Preallocated KV cache for a batch of sequences: write, commit, crop, fork, and row operations.

`lengths[b]` is how many positions of row b are committed. A forward pass writes the K/V of its
new tokens into the slots right after that; only a commit makes them part of the cache, so a
denoising pass over a block costs no copy and is simply overwritten by the next pass.

The layout ([layer, row, head, slot, dim] on `device`) is this module's business: callers move
rows, load and extract a call's row and copy prefixes through the methods below. `lengths` is
host metadata (a CPU tensor), so reading it never waits for the device.
"""

from __future__ import annotations

import torch


class KVCache:
    def __init__(
        self,
        n_layers: int,
        batch: int,
        n_kv_heads: int,
        head_dim: int,
        capacity: int = 512,
        dtype: torch.dtype = torch.float32,
        max_capacity: int = 8192,
        device: torch.device | str | None = None,
    ) -> None:
        self.shape = (n_layers, batch, n_kv_heads, head_dim)
        self.dtype = dtype
        self.max_capacity = max_capacity
        self.device = torch.device(device or "cpu")
        self.k = torch.zeros(n_layers, batch, n_kv_heads, capacity, head_dim, dtype=dtype, device=self.device)
        self.v = torch.zeros_like(self.k)
        self.lengths = torch.zeros(batch, dtype=torch.long)

    @property
    def batch(self) -> int:
        return self.k.shape[1]

    @property
    def capacity(self) -> int:
        return self.k.shape[3]

    def ensure(self, needed: int) -> None:
        """Grow (by doubling) so that `needed` slots fit; the old contents are kept."""
        if needed <= self.capacity:
            return
        if needed > self.max_capacity:
            raise ValueError(f"context of {needed} tokens exceeds the cache limit of {self.max_capacity}")
        cap = self.capacity
        while cap < needed:
            cap *= 2
        cap = min(cap, self.max_capacity)
        k = torch.zeros(*self.k.shape[:3], cap, self.k.shape[4], dtype=self.dtype, device=self.device)
        v = torch.zeros_like(k)
        k[:, :, :, : self.capacity] = self.k
        v[:, :, :, : self.capacity] = self.v
        self.k, self.v = k, v

    # -- one pass ----------------------------------------------------------------------------------
    def slots_for(self, t: int) -> torch.Tensor:
        """Slots [B, T] for T new tokens placed right after each row's committed length (on the host)."""
        if self.batch == 1:  # a call's own cache: fewer ops (each costs tens of us on caches a pass flushed)
            n = int(self.lengths[0])
            return torch.arange(n, n + t).unsqueeze(0)
        return self.lengths[:, None] + torch.arange(t)[None, :]

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor, span: int):
        """Store k/v [B, H, T, D] at `slots` (from `slots_for`); return the first `span` slots of the layer."""
        kb, vb = self.k[layer], self.v[layer]
        s0 = self.write_start()  # == slots[0, 0] for one row, read from the host
        if s0 >= 0:
            kb[0, :, s0 : s0 + k.shape[2]] = k[0]
            vb[0, :, s0 : s0 + v.shape[2]] = v[0]
        else:
            rows = torch.arange(kb.shape[0], device=slots.device)[:, None].expand_as(slots)
            kb.permute(0, 2, 1, 3)[rows, slots] = k.transpose(1, 2)
            vb.permute(0, 2, 1, 3)[rows, slots] = v.transpose(1, 2)
        return kb[:, :, :span], vb[:, :, :span]

    def write_start(self) -> int:
        """Where a pass's new K/V go, for `write` and for the writer outside Python
        (engine/csrc/native_layers.cpp): a one-row cache's first new slot, or -1 where they go by their slots."""
        return int(self.lengths[0]) if self.k.shape[1] == 1 else -1

    def mask(self, intra: torch.Tensor, t: int) -> tuple[torch.Tensor, int]:
        """Attention mask [B, 1, T, S] (on the device) for T new tokens whose mutual visibility is `intra`.

        Every committed slot of a row is visible; the new tokens see each other by `intra`
        ([T, T] or [B, T, T]); nothing else (other rows' padding, stale slots) is visible.
        """
        lengths = self.lengths
        if self.batch == 1:  # a call's own cache: fewer ops (each costs tens of us on caches a pass flushed)
            n = int(lengths[0])
            span = n + t
            self.ensure(span)
            m = torch.ones(1, 1, t, span, dtype=torch.bool)
            m[..., n:] = intra if intra.device.type == "cpu" else intra.cpu()
            return (m if self.device.type == "cpu" else m.to(self.device)), span
        span = int(lengths.max()) + t
        self.ensure(span)
        intra = intra.cpu()
        if intra.dim() == 2:
            intra = intra.unsqueeze(0).expand(self.batch, t, t)
        j = torch.arange(span)[None, :]
        rel = j - lengths[:, None]  # [B, S]
        prefix = rel < 0
        inside = (rel >= 0) & (rel < t)
        gathered = torch.gather(intra, 2, rel.clamp(0, t - 1)[:, None, :].expand(-1, t, -1))
        m = prefix[:, None, :] | (inside[:, None, :] & gathered)
        return m.unsqueeze(1).to(self.device), span

    def commit(self, counts: torch.Tensor | int) -> None:
        """Make the first `counts` written tokens of each row part of the cache."""
        self.lengths += counts if isinstance(counts, torch.Tensor) else int(counts)

    # -- rows --------------------------------------------------------------------------------------
    def length(self, row: int = 0) -> int:
        return int(self.lengths[row])

    def advance(self, row: int, n: int) -> None:
        """Commit the first `n` written tokens of one row."""
        self.lengths[row] += n

    def crop(self, length: int, row: int = 0) -> None:
        self.lengths[row] = min(int(self.lengths[row]), length)

    def reset_row(self, row: int) -> None:
        self.lengths[row] = 0

    def clear(self) -> None:
        self.lengths.zero_()

    def rows(self, lo: int, hi: int) -> KVCache:
        """Rows lo..hi-1 as a cache whose tensors are views of this one (writes go through)."""
        if (lo, hi) == (0, self.batch):
            return self
        return _RowView(self, lo, hi)

    def move_row(self, src: int, dst: int) -> None:
        """Move row `src` (its committed part is its whole state) into row `dst`; `src` is left empty."""
        n = int(self.lengths[src])
        self.k[:, dst, :, :n] = self.k[:, src, :, :n]
        self.v[:, dst, :, :n] = self.v[:, src, :, :n]
        self.lengths[dst] = n
        self.lengths[src] = 0

    def load_row(self, row: int, src: KVCache, src_row: int = 0, length: int | None = None) -> None:
        """Copy the first `length` (default: all) committed slots of another cache's row into row `row`."""
        n = int(src.lengths[src_row]) if length is None else min(length, int(src.lengths[src_row]))
        self.ensure(n)
        self.k[:, row, :, :n] = src.k[:, src_row, :, :n]
        self.v[:, row, :, :n] = src.v[:, src_row, :, :n]
        self.lengths[row] = n

    def extract_row(self, row: int, into: KVCache) -> None:
        """Copy row `row` back into a single-row cache (the call's own)."""
        into.load_row(0, self, row)

    def copy_prefix(self, row: int, n: int) -> KVCache:
        """A new single-row cache holding the first `n` slots of row `row` (a shared prompt prefix)."""
        n_layers, _, n_kv, head_dim = self.shape
        out = KVCache(n_layers, 1, n_kv, head_dim, capacity=n, dtype=self.dtype, max_capacity=self.max_capacity,
                      device=self.device)
        out.k[:, 0] = self.k[:, row, :, :n]
        out.v[:, 0] = self.v[:, row, :, :n]
        out.lengths[0] = n
        return out

    def fork(self) -> KVCache:
        other = KVCache.__new__(KVCache)
        other.shape, other.dtype, other.max_capacity, other.device = self.shape, self.dtype, self.max_capacity, self.device
        n = int(self.lengths.max()) if self.lengths.numel() else 0
        other.k = torch.zeros_like(self.k)
        other.v = torch.zeros_like(self.v)
        other.k[:, :, :, :n] = self.k[:, :, :, :n]
        other.v[:, :, :, :n] = self.v[:, :, :, :n]
        other.lengths = self.lengths.clone()
        return other

    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() * 2


class _RowView(KVCache):
    """A contiguous run of rows of a batch cache, as views that write through to the parent."""

    def __init__(self, parent: KVCache, lo: int, hi: int) -> None:
        self.parent = parent
        self.shape, self.dtype, self.max_capacity, self.device = parent.shape, parent.dtype, parent.max_capacity, parent.device
        self.k, self.v, self.lengths = parent.k[:, lo:hi], parent.v[:, lo:hi], parent.lengths[lo:hi]

    def ensure(self, needed: int) -> None:
        if needed > self.capacity:
            raise RuntimeError("row views cannot grow; ensure capacity on the parent cache first")
