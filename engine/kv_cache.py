"""Preallocated KV cache for a batch of sequences: write, commit, crop, fork.

`lengths[b]` is how many positions of row b are committed. A forward pass writes the K/V of its
new tokens into the slots right after that; only `commit` makes them part of the cache, so a
denoising pass over a block costs no copy and is simply overwritten by the next pass.
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
    ) -> None:
        self.shape = (n_layers, batch, n_kv_heads, head_dim)
        self.dtype = dtype
        self.max_capacity = max_capacity
        self.k = torch.zeros(n_layers, batch, n_kv_heads, capacity, head_dim, dtype=dtype)
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
        k = torch.zeros(*self.k.shape[:3], cap, self.k.shape[4], dtype=self.dtype)
        v = torch.zeros_like(k)
        k[:, :, :, : self.capacity] = self.k
        v[:, :, :, : self.capacity] = self.v
        self.k, self.v = k, v

    def slots_for(self, t: int) -> torch.Tensor:
        """Slots [B, T] for T new tokens placed right after each row's committed length."""
        return self.lengths[:, None] + torch.arange(t)[None, :]

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor, span: int):
        """Store k/v [B, H, T, D] at `slots`; return the first `span` slots of the layer."""
        kb, vb = self.k[layer], self.v[layer]
        if kb.shape[0] == 1:
            s0 = int(slots[0, 0])
            kb[0, :, s0 : s0 + k.shape[2]] = k[0]
            vb[0, :, s0 : s0 + v.shape[2]] = v[0]
        else:
            rows = torch.arange(kb.shape[0])[:, None].expand_as(slots)
            kb.permute(0, 2, 1, 3)[rows, slots] = k.transpose(1, 2)
            vb.permute(0, 2, 1, 3)[rows, slots] = v.transpose(1, 2)
        return kb[:, :, :span], vb[:, :, :span]

    def mask(self, intra: torch.Tensor, t: int) -> tuple[torch.Tensor, int]:
        """Attention mask [B, 1, T, S] for T new tokens whose mutual visibility is `intra`.

        Every committed slot of a row is visible; the new tokens see each other by `intra`
        ([T, T] or [B, T, T]); nothing else (other rows' padding, stale slots) is visible.
        """
        lengths = self.lengths
        span = int(lengths.max()) + t
        self.ensure(span)
        if intra.dim() == 2:
            intra = intra.unsqueeze(0).expand(self.batch, t, t)
        if self.batch == 1:
            n = int(lengths[0])
            m = torch.ones(1, t, span, dtype=torch.bool)
            m[:, :, n:] = intra
            return m.unsqueeze(1), span
        j = torch.arange(span)[None, :]
        rel = j - lengths[:, None]  # [B, S]
        prefix = rel < 0
        inside = (rel >= 0) & (rel < t)
        gathered = torch.gather(intra, 2, rel.clamp(0, t - 1)[:, None, :].expand(-1, t, -1))
        m = prefix[:, None, :] | (inside[:, None, :] & gathered)
        return m.unsqueeze(1), span

    def commit(self, counts: torch.Tensor | int) -> None:
        """Make the first `counts` written tokens of each row part of the cache."""
        self.lengths += counts if isinstance(counts, torch.Tensor) else int(counts)

    def crop(self, length: int, row: int = 0) -> None:
        self.lengths[row] = min(int(self.lengths[row]), length)

    def fork(self) -> KVCache:
        other = KVCache.__new__(KVCache)
        other.shape, other.dtype, other.max_capacity = self.shape, self.dtype, self.max_capacity
        n = int(self.lengths.max()) if self.lengths.numel() else 0
        cap = self.capacity
        other.k = torch.zeros_like(self.k)
        other.v = torch.zeros_like(self.v)
        other.k[:, :, :, :n] = self.k[:, :, :, :n]
        other.v[:, :, :, :n] = self.v[:, :, :, :n]
        assert other.capacity == cap
        other.lengths = self.lengths.clone()
        return other

    def load_row(self, row: int, src: KVCache, src_row: int = 0) -> None:
        """Copy one row of another cache (a call's own cache) into row `row` of this one."""
        n = int(src.lengths[src_row])
        self.ensure(n)
        self.k[:, row, :, :n] = src.k[:, src_row, :, :n]
        self.v[:, row, :, :n] = src.v[:, src_row, :, :n]
        self.lengths[row] = n

    def extract_row(self, row: int, into: KVCache) -> None:
        """Copy row `row` back into a single-row cache (the call's own)."""
        n = int(self.lengths[row])
        into.ensure(n)
        into.k[:, 0, :, :n] = self.k[:, row, :, :n]
        into.v[:, 0, :, :n] = self.v[:, row, :, :n]
        into.lengths[0] = n

    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() * 2
