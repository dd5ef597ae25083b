"""The model runner: owns the weights, their precision, the device and the kernels, and runs passes.

It turns a pass's rows (token lists, layouts) into tensors on the model's device, runs one forward
over a contiguous run of cache rows, and applies the LM head only at the positions whose
predictions are read (the vocabulary projection is ~20% of a pass). The tensors that depend only
on a pass's layout (mask, slots, positions, read indices) are built once and reused while the
layout holds: within a block, every denoising pass after the first has the same layout.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

import torch

from engine.model.families import Family
from engine.model.kv_cache import KVCache
from engine.model.precision import Precision, PrecisionError, fp32_linears, native_bf16_flags
from engine.model.transformer import Transformer
from engine.runtime.masks import intra_mask, prefill_mask, read_positions, with_branch
from engine.runtime.pass_calibration import pass_cost_for
from engine.runtime.pass_threads import NarrowThreads, serial_up_to
from engine.runtime.sequence import StepInput


@dataclass
class StepPlan:
    """The layout tensors of one pass over cache rows lo..hi-1 (on the device)."""

    key: tuple
    base: torch.Tensor  # the cache's K tensor the views were taken of (a grown cache needs new views)
    lo: int
    hi: int
    t: int
    view: KVCache
    mask: torch.Tensor
    slots: torch.Tensor
    pos: torch.Tensor
    flat: torch.Tensor  # indices into the [rows * t] hidden states whose logits are read
    offsets: dict[int, tuple[int, int, int]]  # row -> (its first row in the logits, the input index that
    # row holds, how many rows it has)


def _linear_kernel(precision: Precision | None, packed: bool, native: bool = False) -> str:
    if precision is not None and precision.int8_activations and native:
        from engine.model.native import int8_isa

        return f"int8 x int8 (native layers, {int8_isa()} kernels; FBGEMM for 5-8 rows)"
    if precision is not None and precision.int8_activations:
        return "int8 x int8 (quantized.linear_dynamic)"
    if precision is not None and precision.int8_weights:
        return "int8 weights (_weight_int8pack_mm)"
    return "fp32 oneDNN-packed" if packed else "dense (nn.Linear)"


class ModelRunner:
    def __init__(self, model: Transformer, precision: Precision | None = None,
                 device: torch.device | str | None = None) -> None:
        self.precision = precision
        self.info: dict = {}
        target = torch.device(device) if device is not None else model.embed_tokens.weight.device
        if precision is not None and precision.int8_activations and target.type != "cpu":
            raise PrecisionError(f"w8a8 runs on PyTorch's quantized CPU kernels only; on {target.type} use bf16")
        if precision is not None and precision.int8_activations:
            from engine.model.quant import quantize_w8a8

            self.info["int8_linears"] = quantize_w8a8(model)
        elif precision is not None and precision.int8_weights:
            from engine.model.quant import quantize_int8

            self.info["int8_linears"] = quantize_int8(model, precision.dtype)
        self.device = target
        self.model = model.to(self.device)
        if precision is not None and precision.int8_activations:
            from engine.runtime.native_layers import native_layers_for

            # A pass's layers in one C++ call, the same bits (engine/model/native.py).
            self.model.native_layers, self.info["native_layers"] = native_layers_for(self.model)
        if precision is not None and precision.name == "fp32" and target.type == "cpu" and fp32_linears() == "packed":
            from engine.model.packed import onednn_available, pack_fp32

            if onednn_available():
                self.info["packed_linears"] = pack_fp32(self.model)
        self.info["linear_kernel"] = _linear_kernel(precision, "packed_linears" in self.info,
                                                    self.model.native_layers is not None)
        name = precision.name if precision else None
        # A narrow pass runs on one thread or all, whichever its passes measure cheaper on this machine
        # now: waking the other threads costs more than they give on some CPUs (engine/runtime/pass_threads.py).
        self.serial_up_to = serial_up_to(self.device.type, name)
        self.narrow_threads = NarrowThreads(self.serial_up_to)
        self.info["serial_pass_tokens"] = self.serial_up_to
        self.info["narrow_threads"] = self.narrow_threads.mode
        # What a pass costs by its width here: how wide a verify pass is worth (engine/runtime/pass_plan.py);
        # measured on this machine the first time (engine/runtime/pass_calibration.py), then kept.
        self.pass_cost = pass_cost_for(self, self.device.type, name, bool(native_bf16_flags()))
        self.info["pass_cost_curve"] = self.pass_cost.kernel

    @property
    def dtype(self) -> torch.dtype:
        return self.model.dtype

    @contextmanager
    def python_layers(self) -> Iterator[None]:
        """Passes inside run the Python layers even where native ones are attached (engine/model/native.py):
        the bench's same-run comparison. Not for use while other threads decode on this runner."""
        native, self.model.native_layers = self.model.native_layers, None
        # Their own thread choice: Python layers' timings must not steer the native layers' choice.
        chooser, self.narrow_threads = self.narrow_threads, NarrowThreads(self.serial_up_to, self.narrow_threads.mode)
        try:
            yield
        finally:
            self.model.native_layers, self.narrow_threads = native, chooser

    def new_cache(self, batch: int = 1, capacity: int = 512, max_capacity: int = 8192) -> KVCache:
        cfg = self.model.cfg
        return KVCache(cfg.n_layers, batch, cfg.n_kv_heads, cfg.head_dim, capacity, self.model.dtype,
                       max_capacity=max_capacity, device=self.device)

    # -- prefill ----------------------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, cache: KVCache, rows: list[tuple[int, list[int]]], family: Family) -> list[torch.Tensor]:
        """Write each row's tokens into the cache (a contiguous run of rows, in order) in one forward
        and commit them; return each row's logits for its next token.

        Each row's tokens see the row's cache and each other as a lone prefill does; padding sees
        only itself. The logits come from each row's own last position, one vector at a time, so a
        batched prefill matches a lone one."""
        lo, hi = rows[0][0], rows[-1][0] + 1
        if [r for r, _ in rows] != list(range(lo, hi)):
            raise ValueError("a prefill covers a contiguous run of rows, in order")
        if any(not toks for _, toks in rows):
            raise ValueError("prefill needs at least one token per row")
        model = self.model
        t = max(len(toks) for _, toks in rows)
        cache.ensure(int(cache.lengths[lo:hi].max()) + t)  # grow the parent before taking views
        view = cache.rows(lo, hi)
        x = torch.tensor([toks + [0] * (t - len(toks)) for _, toks in rows], dtype=torch.long)
        intra = torch.zeros(len(rows), t, t, dtype=torch.bool)
        for i, (row, toks) in enumerate(rows):
            n = len(toks)
            intra[i, :n, :n] = prefill_mask(n, family.cache_attention, family.block_size, int(cache.lengths[row]))
            idx = torch.arange(n, t)
            intra[i, idx, idx] = True
        mask, _ = view.mask(intra[0] if len(rows) == 1 else intra, t)
        slots = view.slots_for(t).to(self.device)
        pos = slots.clamp(max=model.cfg.max_seq_len - 1)
        with self.narrow_threads.run(x.numel()):
            h = model.hidden(x.to(self.device), pos, mask, view, slots)
        out = []
        for i, (row, toks) in enumerate(rows):
            cache.advance(row, len(toks))
            out.append(model.lm_head(h[i, len(toks) - 1]).float())
        return out

    # -- a decoding pass --------------------------------------------------------------------------
    @staticmethod
    def _span(rows: list[tuple[int, StepInput]]) -> tuple[int, int, int]:
        """A pass over `rows` covers cache rows lo..hi-1, each padded to `t` tokens."""
        return (min(r for r, _ in rows), max(r for r, _ in rows) + 1, max(len(inp.tokens) for _, inp in rows))

    def threads(self, rows: list[tuple[int, StepInput]]) -> AbstractContextManager[None]:
        """The thread count for a pass over `rows` and the work on its logits: where its linears see few
        tokens, one thread or all, whichever measured cheaper (engine/runtime/pass_threads.py)."""
        lo, hi, t = self._span(rows) if rows else (0, 0, 0)
        return self.narrow_threads.run((hi - lo) * t)

    @torch.inference_mode()
    def plan(self, cache: KVCache, rows: list[tuple[int, StepInput]], family: Family,
             reuse: StepPlan | None = None) -> StepPlan:
        """The layout tensors of a pass over `rows` ((cache row, input), in the order their logits
        come back); `reuse` is returned as it is when the layout has not changed."""
        lo, hi, t = self._span(rows)
        cache.ensure(int(cache.lengths[lo:hi].max()) + t)  # grow the parent before taking views
        key = (family, lo, hi, t, tuple(cache.lengths[lo:hi].tolist()),
               tuple((r, len(inp.tokens), inp.n_block, inp.window, inp.n_draft, inp.n_branch) for r, inp in rows))
        if reuse is not None and reuse.key == key and reuse.base is cache.k:
            return reuse
        # Rows inside the run that have nothing to do get one padding token that sees only itself.
        view = cache.rows(lo, hi)
        intra = torch.eye(t, dtype=torch.bool).repeat(hi - lo, 1, 1)
        flat: list[int] = []
        offsets: dict[int, tuple[int, int, int]] = {}
        shifts: list[tuple[int, int, int]] = []  # (row, first input index, positions back): a branch
        for r, inp in rows:
            n = len(inp.tokens)
            start = int(cache.lengths[r]) if family.align_blocks else None
            m = intra_mask(n - inp.n_block - inp.n_branch, inp.n_block, family.cache_attention,
                           family.block_size, start)
            if inp.n_branch:
                m = with_branch(m, inp.n_pending, inp.n_branch)
                shifts.append((r - lo, n - inp.n_branch, inp.n_draft + inp.n_block))
            intra[r - lo, :n, :n] = m
            read = read_positions(n - inp.window, inp.n_block - inp.window, family.token_shift, inp.n_draft,
                                  inp.n_branch)
            offsets[r] = (len(flat), read.start, len(read))
            flat.extend((r - lo) * t + p for p in read)
        mask, _ = view.mask(intra, t)
        slots = view.slots_for(t)
        pos = slots.clone()
        for i, first, back in shifts:  # the branch sits where the drafts sit; its K/V go past the block's
            pos[i, first:] -= back
        slots = slots.to(self.device)
        pos = pos.clamp(max=self.model.cfg.max_seq_len - 1).to(self.device)
        return StepPlan(key, cache.k, lo, hi, t, view, mask, slots, pos,
                        torch.tensor(flat, dtype=torch.long, device=self.device), offsets)

    @torch.inference_mode()
    def forward(self, plan: StepPlan, rows: list[tuple[int, StepInput]]) -> torch.Tensor:
        """One forward over the plan's rows; the logits [N, V] at the read positions, row after row.
        Its caller picks the thread count (`threads`), so that the work on the logits runs on the same."""
        tokens = {r: inp.tokens for r, inp in rows}
        x = torch.tensor([tokens.get(r, []) + [0] * (plan.t - len(tokens.get(r, [])))
                          for r in range(plan.lo, plan.hi)], dtype=torch.long)
        return self.model.logits(x.to(self.device), plan.pos, plan.mask, plan.view, plan.slots, plan.flat)


__all__ = ["ModelRunner", "StepPlan"]
