"""Block-diffusion decoding with an exact KV cache. AR decoding is the block size 1 case.

Each `step` runs ONE forward over every active row of a batch. A row's input is its `pending`
tokens (committed, not yet in the cache) followed by its current block (masks where nothing is
committed yet). Writing the previous block is thereby fused into the first denoising pass of the
next block, so a block costs exactly its denoising passes. After the pass the pending tokens are
committed to the cache and every masked block position whose confidence clears the threshold is
committed (at least one, all of them on the block's last allowed step).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.families import Family
from engine.kv_cache import KVCache
from engine.model import Transformer


@dataclass
class DecodeParams:
    block_size: int
    threshold: float
    max_steps_per_block: int
    max_tokens: int
    temperature: float = 0.0
    seed: int | None = None
    dedup_guard: bool = True


@dataclass
class SeqState:
    params: DecodeParams
    row: int
    next_logits: torch.Tensor | None  # predicts block[0] (token-shift families)
    eos_ids: frozenset[int]
    pending: list[int] = field(default_factory=list)
    block: list[int] = field(default_factory=list)
    committed: list[bool] = field(default_factory=list)
    steps_in_block: int = 0
    generated: list[int] = field(default_factory=list)
    new_final: list[int] = field(default_factory=list)  # tokens finalised by the last step
    forced: list[int] = field(default_factory=list)  # tokens to append before the next block
    done: bool = False
    finish_reason: str | None = None
    forward_passes: int = 0
    infilled: int = 0  # tokens the engine wrote without the model (forced text, tool-call skeleton)
    banned: frozenset[int] = frozenset()  # tokens never committed (e.g. end of turn inside a tool call)
    generator: torch.Generator | None = None
    # Families with blocks at absolute multiples of B (Family.align_blocks): `carry` holds the
    # prompt's leftover tokens for the first block, `prompt_len` the absolute length of the prompt,
    # and `offset` how many leading positions of the current block are final tokens carried in
    # (the prompt's leftover, or the tail of the previous output) rather than decoded.
    carry: list[int] = field(default_factory=list)
    prompt_len: int = 0
    offset: int = 0
    window: int = 0  # masks of the rest of the generation window in the last input (Family.masked_window)

    def remaining(self) -> int:
        return self.params.max_tokens - len(self.generated)


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


def prefill_mask(n: int, cache_attention: str, block_size: int, start: int) -> torch.Tensor:
    if cache_attention == "causal":
        return torch.ones(n, n, dtype=torch.bool).tril()
    if cache_attention == "full":
        return torch.ones(n, n, dtype=torch.bool)
    blk = (torch.arange(n) + start) // max(block_size, 1)
    return blk[None, :] <= blk[:, None]


class BlockDecoder:
    def __init__(self, model: Transformer, family: Family, mask_id: int) -> None:
        self.model = model
        self.family = family
        self.mask_id = mask_id

    # -- prefill ---------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, cache: KVCache, tokens: list[int]) -> torch.Tensor:
        """Write `tokens` into a single-row cache; return the logits that predict the next token."""
        if not tokens:
            raise ValueError("prefill needs at least one token")
        n = len(tokens)
        start = int(cache.lengths[0])
        intra = prefill_mask(n, self.family.cache_attention, self.family.block_size, start)
        mask, _ = cache.mask(intra, n)
        slots = cache.slots_for(n)
        pos = slots.clamp(max=self.model.cfg.max_seq_len - 1)
        x = torch.tensor([tokens], dtype=torch.long)
        h = self.model.hidden(x, pos, mask, cache, slots)
        cache.commit(n)
        return self.model.lm_head(h[0, -1]).float()

    # -- decoding ----------------------------------------------------------------------
    def split_prompt(self, n_tokens: int, cached: int) -> tuple[int, int]:
        """How a prompt of `n_tokens`, of which `cached` are in the cache, is prefilled:
        (k, end) = keep the first k cached, prefill tokens[k:end]; tokens[end:] are carried into
        the first block. Families without aligned blocks prefill everything but what is cached
        (at least one token, for the logits that predict the next one)."""
        if not self.family.align_blocks:
            return min(cached, n_tokens - 1), n_tokens
        b = max(self.family.block_size, 1)
        end = n_tokens // b * b
        cached = cached // b * b  # a block-causal position's K/V depend on the rest of its block
        if end == n_tokens:  # aligned: the first token comes from the prefill's last logits
            return min(cached, n_tokens - 1), n_tokens
        return min(cached, end), end

    def start(self, params: DecodeParams, next_logits: torch.Tensor | None, row: int, eos_ids,
              carry: list[int] | None = None, prompt_len: int = 0) -> SeqState:
        st = SeqState(params=params, row=row, next_logits=next_logits, eos_ids=frozenset(eos_ids),
                      carry=list(carry or []), prompt_len=prompt_len)
        if params.temperature > 0:
            st.generator = torch.Generator().manual_seed(params.seed if params.seed is not None else 0)
        self._new_block(st)
        return st

    def _new_block(self, st: SeqState) -> None:
        if st.forced:
            st.infilled += len(st.forced)
            st.generated.extend(st.forced)
            st.pending.extend(st.forced)
            st.new_final.extend(st.forced)
            st.forced = []
        carry: list[int] = []
        if self.family.align_blocks:
            # The block spans [q*B, (q+1)*B): the final tokens already in that span (the prompt's
            # leftover, or the tail of the previous output when a rewrite or forced text moved
            # the boundary) sit in it as committed positions, not in the cache.
            bsz = max(st.params.block_size, 1)
            if st.carry:
                carry, st.carry = st.carry, []
            else:
                r = min((st.prompt_len + len(st.generated)) % bsz, len(st.pending))
                if r:
                    carry, st.pending = st.pending[-r:], st.pending[:-r]
        b = min(st.params.block_size - len(carry), st.remaining())
        if b <= 0:
            st.done, st.finish_reason = True, "length"
            st.block, st.committed = [], []
            st.pending.extend(carry)
            return
        st.block = carry + [self.mask_id] * b
        st.committed = [True] * len(carry) + [False] * b
        st.offset = len(carry)
        st.steps_in_block = 0

    def _needs_block_in_input(self, st: SeqState) -> bool:
        # With token shift, position 0 of the block is predicted by the clean token before it, so
        # a block whose only open position is 0 does not need to be in the input (AR mode).
        if not self.family.token_shift:
            return True
        if self.family.first_token_at_once and st.committed and not st.committed[0]:
            # Fast-dLLM v2: the block's first token is committed from the logits of the pass
            # that wrote the previous block (or of the prefill) before the block is denoised, so
            # that pass carries only the pending tokens (or there is none: the prefill gave them).
            return False
        return any(not c for c in st.committed[1:])

    @torch.inference_mode()
    def step(self, cache: KVCache, states: list[SeqState]) -> None:
        """One batched forward over every row in `states`, then commit by confidence."""
        active = [s for s in states if not s.done]
        for s in active:
            s.new_final = []
        inputs: list[tuple[SeqState, list[int], int]] = []
        for s in active:
            with_block = self._needs_block_in_input(s)
            s.window = self._window(s) if with_block else 0
            toks = s.pending + (s.block + [self.mask_id] * s.window if with_block else [])
            inputs.append((s, toks, len(s.block) + s.window if with_block else 0))
        fwd = [x for x in inputs if x[1]]
        logits_by_row: dict[int, torch.Tensor] = {}
        if fwd:
            logits_by_row = self._forward(cache, fwd)
        for s, _toks, n_block in inputs:
            out = logits_by_row.get(s.row)
            npend = len(s.pending)
            if out is not None:
                s.forward_passes += 1
                if npend:
                    s.next_logits = out[npend - 1]
                    cache.lengths[s.row] += npend
                    s.pending = []
            self._commit(s, out, npend, n_block)

    def _window(self, s: SeqState) -> int:
        """Full-diffusion families (LLaDA, Dream) were trained to see the whole generation window:
        the block is followed by masks up to max_tokens (rounded up to whole blocks), as their
        samplers lay it out. Their predictions are not read; their K/V are never kept."""
        if not self.family.masked_window:
            return 0
        b = max(s.params.block_size, 1)
        total = -(-s.params.max_tokens // b) * b
        return max(0, total - len(s.generated) - (len(s.block) - s.offset))

    def _forward(self, cache: KVCache, fwd) -> dict[int, torch.Tensor]:
        # Forward the contiguous run of rows that spans every row with input: a view of the
        # cache, never a copy. Rows inside the run that have nothing to do get one padding token.
        by_row = {s.row: (toks, n_block) for s, toks, n_block in fwd}
        window = {s.row: s.window for s, _, _ in fwd}
        lo, hi = min(by_row), max(by_row) + 1
        t = max(len(toks) for toks, _ in by_row.values())
        cache.ensure(int(cache.lengths[lo:hi].max()) + t)  # grow the parent before taking views
        view = cache if (lo, hi) == (0, cache.batch) else _RowSubset(cache, list(range(lo, hi)))
        x = torch.zeros(hi - lo, t, dtype=torch.long)
        intra = torch.eye(t, dtype=torch.bool).repeat(hi - lo, 1, 1)  # padding sees itself only
        for row, (toks, n_block) in by_row.items():
            n = len(toks)
            x[row - lo, :n] = torch.tensor(toks)
            start = int(cache.lengths[row]) if self.family.align_blocks else None
            intra[row - lo, :n, :n] = intra_mask(n - n_block, n_block, self.family.cache_attention,
                                                 self.family.block_size, start)
        mask, _ = view.mask(intra, t)
        slots = view.slots_for(t)
        pos = slots.clamp(max=self.model.cfg.max_seq_len - 1)
        h = self.model.hidden(x, pos, mask, view, slots)
        # One lm_head call for all rows, and only at the positions whose prediction is read: the
        # last pending token and the block positions (the vocabulary projection is ~20% of a pass).
        rows = list(by_row)
        need = {r: self._needed_positions(len(by_row[r][0]) - window[r], by_row[r][1] - window[r]) for r in rows}
        logits = self.model.lm_head(torch.cat([h[r - lo, need[r]] for r in rows])).float()
        out = {}
        for r, part in zip(rows, logits.split([len(need[r]) for r in rows]), strict=True):
            full = part.new_zeros(len(by_row[r][0]), part.shape[-1])
            full[need[r]] = part
            out[r] = full
        return out

    def _needed_positions(self, n: int, n_block: int) -> list[int]:
        """The last pending token (next_logits) and the outputs that predict block positions
        (shifted one left under token shift)."""
        if not n_block:
            return [n - 1]
        last = n - 2 if self.family.token_shift else n - 1
        return list(range(max(n - n_block - 1, 0), last + 1))

    def _predictions(self, s: SeqState, out: torch.Tensor | None, npend: int, n_block: int) -> torch.Tensor:
        """Logits [b, V] predicting each block position."""
        b = len(s.block)
        rows = []
        for j in range(b):
            if self.family.token_shift:
                if j == 0:
                    rows.append(s.next_logits)
                else:
                    rows.append(out[npend + j - 1] if out is not None and n_block else None)
            else:
                rows.append(out[npend + j] if out is not None and n_block else None)
        v = next(r for r in rows if r is not None).shape[-1]
        return torch.stack([r if r is not None else torch.zeros(v) for r in rows])

    def _commit(self, s: SeqState, out: torch.Tensor | None, npend: int, n_block: int) -> None:
        open_pos = [j for j, c in enumerate(s.committed) if not c]
        if not open_pos:
            return
        sub = self.family.sub_block
        if sub and n_block:
            # Fast-dLLM v2: only the first sub-block that still has masks is unmasked this step.
            lo = open_pos[0] // sub * sub
            open_pos = [j for j in open_pos if j < lo + sub]
        logits = self._predictions(s, out, npend, n_block)[open_pos]
        if s.banned:
            logits[:, list(s.banned)] = float("-inf")
        probs = torch.softmax(logits / max(s.params.temperature, 1e-6) if s.params.temperature > 0 else logits, -1)
        if s.params.temperature > 0:
            tok = torch.multinomial(probs, 1, generator=s.generator).squeeze(-1)
            conf = probs.gather(-1, tok[:, None]).squeeze(-1)
        else:
            conf, tok = probs.max(-1)
        s.steps_in_block += 1
        last_step = s.steps_in_block >= s.params.max_steps_per_block
        if self.family.token_shift and not n_block:
            # Only position 0 had a prediction; the rest are predicted after it is in the input.
            chosen = [0] if open_pos[0] == 0 else []
        elif last_step:
            chosen = list(range(len(open_pos)))
        else:
            chosen = [i for i in range(len(open_pos)) if conf[i] >= s.params.threshold]
            if s.params.dedup_guard:
                chosen = self._drop_adjacent_duplicates(chosen, open_pos, tok, conf)
            if not chosen:
                chosen = [int(conf.argmax())]

        for i in chosen:
            j = open_pos[i]
            s.block[j] = int(tok[i])
            s.committed[j] = True
        if all(s.committed):
            self._finish_block(s)

    @staticmethod
    def _drop_adjacent_duplicates(chosen, open_pos, tok, conf) -> list[int]:
        # Parallel commits of the same token at neighbouring positions ("with with") are the
        # classic failure of small dLLMs: keep the more confident one, decide the other later.
        keep = list(chosen)
        for a, b in zip(chosen, chosen[1:], strict=False):
            if open_pos[b] == open_pos[a] + 1 and int(tok[a]) == int(tok[b]) and a in keep and b in keep:
                keep.remove(b if conf[a] >= conf[b] else a)
        return keep

    def _finish_block(self, s: SeqState) -> None:
        carried, toks = s.block[: s.offset], s.block[s.offset:]
        for i, t in enumerate(toks):
            if t in s.eos_ids:
                toks = toks[: i + 1]
                s.done, s.finish_reason = True, "stop"
                break
        s.generated.extend(toks)
        s.pending.extend(carried + toks)
        s.new_final.extend(toks)
        s.offset = 0
        if not s.done and s.remaining() <= 0:
            s.done, s.finish_reason = True, "length"
        if not s.done:
            self._new_block(s)
        else:
            s.block, s.committed = [], []


class _RowSubset(KVCache):
    """A contiguous run of rows of a batch cache, as views that write through to the parent."""

    def __init__(self, parent: KVCache, rows: list[int]) -> None:
        if rows != list(range(rows[0], rows[0] + len(rows))):
            raise ValueError("row views must be a contiguous run of rows")
        self.parent = parent
        self.shape, self.dtype, self.max_capacity = parent.shape, parent.dtype, parent.max_capacity
        sl = slice(rows[0], rows[0] + len(rows))
        self.k, self.v, self.lengths = parent.k[:, sl], parent.v[:, sl], parent.lengths[sl]

    def ensure(self, needed: int) -> None:
        if needed > self.capacity:
            raise RuntimeError("row views cannot grow; ensure capacity on the parent cache first")
