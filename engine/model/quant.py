"""Weight-only int8 for CPU inference (gpt-fast style): per-output-channel symmetric int8 weights.

    quantize_int8(model)        # every nn.Linear of the layers and the LM head, in place

A linear's weight W [N, K] becomes int8 Q = round(W / s) with one scale per output channel,
s = max|W[n, :]| / 127, and the matmul runs in PyTorch's own kernel `torch._weight_int8pack_mm`
(activations in the model's dtype, fp32 or bf16; the kernel de-quantises on the fly). A pass then
reads a quarter of the fp32 weight bytes. Applied at load time, after the adapter merge, so the
merged weights are what is quantised. With tied embeddings the LM head gets its own int8 copy;
the embedding table stays in the activation dtype (a lookup reads only the rows it needs).

    quantize_w8a8(model)        # the same int8 weights, and int8 activations quantised per pass

W8A8 keeps those per-channel int8 weights in PyTorch's FBGEMM/oneDNN packed form and quantises each
input on the fly (one asymmetric uint8 scale per call: `torch.ops.quantized.linear_dynamic`), so
the matmul runs int8 x int8. For 1-2 rows it runs engine.model.native's `Int8Matrix` instead (the same
numbers; it reads each weight row once, where FBGEMM's set-up costs a 1-row call as much as its reads;
`Int8Matrix.alone_rows`). Without AVX512 that kernel streams the weights at memory speed where
`_weight_int8pack_mm` de-quantises them in bf16 (measured below).

What it costs in accuracy is stated in `INT8_TOLERANCE` (tests/engine/unit/test_quant.py checks it on tiny
random weights; the quality check on the trained brain is separate, see docs/engine.md, Precision).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import nn

from engine import cpu_isa
from engine.model.precision import native_bf16_flags
from engine.model.transformer import RMSNorm, Transformer


@dataclass(frozen=True)
class Int8Tolerance:
    """How far int8 logits may be from fp32's on the same weights and tokens (teacher-forced).

    Per-channel rounding moves each weight by at most 1/254 of its channel's largest weight.
    Measured (bf16 kernel inputs): tiny random qwen2/llama/qwen3 models, largest difference 2-3% of
    the logit range; SmolLM2-135M (AR base) on two receptionist prompts plus fp32's greedy replies,
    largest difference ~1.5 logits of a ~71 range, argmax agreement 0.92-0.98 (bf16: 1.27, 0.96-1.0).
    Whether that keeps the trained brain's calls intact is a separate check (task success, ROUGE-L)."""

    max_abs_logit_diff: float = 2.5    # per logit, on the real weights (as BF16_TOLERANCE)
    max_rel_logit_diff: float = 0.05   # max |int8 - fp32| / (max fp32 logit - min fp32 logit)
    min_top1_agreement: float = 0.9    # share of positions whose argmax matches fp32 (AR weights)


INT8_TOLERANCE = Int8Tolerance()


# Passes wider than this many rows multiply a de-quantised copy in oneDNN's blocked layout instead
# of the int8 kernel, whose cost grows with every row (it streams the weights once per row).
# Measured on an AMD EPYC with AVX512-BF16, 2 threads, SmolLM2-135M, 480-token cache, whole pass in
# ms by new tokens, int8 kernel up to 12 rows vs packed above 3: 1: 30.2 / 30.5, 2: 34.1 / 34.8,
# 4: 37.7 / 38.3, 6: 52.6 / 37.9, 8: 60.9 / 46.9, 12: 77.0 / 49.5 (interleaved, same process). The
# 210 layer linears alone, streamed, 1 / 2 / 4 / 8 / 12 rows: int8 7.5 / 9.5 / 11.4 / 26.8 / 30.1,
# packed bf16 11.4 / 11.3 / 9.7 / 11.7 / 12.6. Without native bf16 the de-quantised copy is fp32,
# twice those bytes, and the int8 kernel wins up to 8 rows (`int8_dense_above`): Intel Xeon with
# AVX512F but no AVX512-BF16, 2 threads, whole pass in ms, rows 4 / 6 / 8 / 10 / 12, packed above 3
# rows: 55.6 / 57.5 / 62.2 / 62.9 / 66.3; above 8: 32.9 / 44.5 / 54.8 / 61.3 / 59.7 (medians of 4
# interleaved rounds).
DENSE_ABOVE_ROWS = 3
DENSE_ABOVE_ROWS_FP32 = 8
KERNEL_DTYPE = torch.bfloat16


def int8_dense_above() -> int:
    """Rows above which an int8 pass multiplies the packed de-quantised copy on this CPU: bf16 where
    the CPU multiplies it natively, fp32 (twice the bytes) elsewhere."""
    return DENSE_ABOVE_ROWS if native_bf16_flags() else DENSE_ABOVE_ROWS_FP32


def can_pack(dtype: torch.dtype) -> bool:
    """Whether a de-quantised weight of `dtype` can be reordered for oneDNN here (bf16 needs AVX512BW or
    AVX-NE-CONVERT: `engine.cpu_isa.packs_bf16`); where not, wide passes multiply the plain tensor."""
    return torch.backends.mkldnn.is_available() and (dtype != torch.bfloat16 or cpu_isa.packs_bf16())


class Int8Linear(nn.Module):
    """y = x @ (Q * s[:, None]).T + b, with Q int8 [N, K] and s [N] per output channel.

    `kernel_dtype` is what `torch._weight_int8pack_mm` runs in (the input is cast to it and the
    result back): PyTorch's int8 kernel is vectorised for bf16 on AVX2 and AVX512 but falls back to
    a scalar loop for fp32 inputs without AVX512 (measured 9x slower than the bf16 one there)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, act_dtype: torch.dtype,
                 kernel_dtype: torch.dtype | None = None, dense_above: int = DENSE_ABOVE_ROWS,
                 keep_dense: bool = True) -> None:
        super().__init__()
        w = weight.detach().float()
        scales = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
        q = torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8)
        self.in_features, self.out_features = w.shape[1], w.shape[0]
        self.act_dtype = act_dtype
        self.kernel_dtype = kernel_dtype or act_dtype
        self.dense_above = dense_above
        self.register_buffer("weight", q.contiguous())
        self.register_buffer("scales", scales.to(self.kernel_dtype))
        self.register_buffer("bias", None if bias is None else bias.detach().to(act_dtype))
        # What wide passes multiply by: the de-quantised weight, so both paths hold the same values.
        # On CPU it is reordered once into oneDNN's blocked layout (engine/model/packed.py), whose cost
        # barely grows with the rows of a narrow pass, where the int8 kernel's grows with each row.
        dense = self.dequantized(act_dtype).contiguous() if keep_dense else None
        self._packed = None  # an opaque MKLDNN tensor: not a buffer (.to() and state_dict cannot hold it)
        if dense is not None and dense.device.type == "cpu" and can_pack(dense.dtype):
            self._packed = torch.ops.mkldnn._reorder_linear_weight(dense, None)
            dense = None
        self.register_buffer("dense_weight", dense, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, self.in_features)
        if x2.shape[0] > self.dense_above:
            if self._packed is not None and x2.device.type == "cpu":
                x2 = x2.to(self.act_dtype).contiguous()
                y = torch.ops.mkldnn._linear_pointwise(x2, self._packed, None, "none", [], "")
            else:
                w = self.dense_weight if self.dense_weight is not None else self.dequantized(x2.dtype)
                y = torch.nn.functional.linear(x2, w.to(x2.dtype))
            y = y.to(x.dtype)
        else:
            y = torch._weight_int8pack_mm(x2.to(self.kernel_dtype).contiguous(), self.weight, self.scales)
            y = y.to(x.dtype)
        if self.bias is not None:
            y = y + self.bias
        return y.view(*shape[:-1], self.out_features)

    def dequantized(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        dtype = dtype or self.scales.dtype
        return self.weight.to(dtype) * self.scales.to(dtype)[:, None]

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, int8 per-channel, "
                f"kernel {str(self.kernel_dtype).replace('torch.', '')}")


# W8A8 passes up to this many rows run int8 x int8; wider ones the packed de-quantised copy. Measured
# on an AMD EPYC with AVX512-BF16, 2 threads, SmolLM2-135M, 480-token cache, whole pass in ms by new
# tokens, int8 x int8 up to 8 rows: 1 / 2 / 4 / 6 / 8: 16.4 / 17.0 / 18.3 / 20.3 / 28.0 (a step at 8
# rows), against the packed bf16 copy's 25.6 at 4 and 29-30 at 8. Decoding at instant, with the pass
# cost curve of each cutoff (engine/runtime/pass_cost.py), one process, 2 rounds: int8 x int8 up to 4 rows
# 69.0 tok/s, up to 6 rows 62.3, int8 weights alone (`Int8Linear`) 51.8; so the cutoff was 4 rows.
# Since narrow passes run on one thread (engine/runtime/pass_threads.py; then up to 12 tokens for w8a8), the int8
# kernel no longer steps at 8 rows: the same CPU kind, 2026-12-06, fastest of 2 rounds, cutoff 4 / 8 /
# 12 rows, ms at 4 / 5 / 6 / 8 / 10 / 12 tokens: 14.7 / 22.4 / 22.8 / 24.9 / 27.3 / 28.9, 14.5 / 17.3 /
# 17.9 / 19.1 / 26.9 / 28.6, 14.4 / 17.3 / 18.0 / 19.3 / 23.4 / 24.7. Decoding (one process, 3 rounds,
# 48 tokens, medians): instant 81.6 / 90.9 / 90.0 tok/s; `low` 143.5 / 134.3 / 123.8, where the
# replies themselves changed (one activation scale now spans more rows), `low`'s to ones whose
# thinking repeats less (3.6 -> 3.3 / 2.6 tokens a pass). Quality against fp32 (`engine.tools.eval --batch 1
# --limit 40 --effort instant`): ROUGE-L 0.850 / 0.839 / 0.839, the same tool behaviour on 20 / 19 /
# 19 of 22 tool turns. 8 rows: the 5-8 token verify passes of `instant` cost 17-19 ms instead of 22-25.
W8A8_DENSE_ABOVE_ROWS = 8
# Without native bf16 (an AVX2-only CPU, fp32 activations) it was 3 rows while PyTorch's kernel ran the
# narrow passes; with the native layers (AVX2 int8 kernels, one region up to 4 rows) the fp32 copy, 4x
# the int8 bytes, loses up to 8 rows: AMD EPYC capped to AVX2 (VOICE_AGENT_CPU_ISA=avx2), 2 threads, the
# default model, 480-token cache, fastest of 3 interleaved rounds, ms at 1 / 2 / 3 / 4 / 5 / 6 / 8 / 12 /
# 16 / 32 tokens (2026-12-07): cutoff 3 8.3 / 11.9 / 15.6 / 41.3 / 44.1 / 46.8 / 50.1 / 58.1 / 61.2 / 92.6,
# cutoff 8 8.2 / 11.9 / 15.3 / 19.5 / 31.2 / 35.3 / 44.8 / 54.9 / 63.7 / 89.0.
W8A8_DENSE_ABOVE_ROWS_FP32 = 8


def w8a8_dense_above() -> int:
    return W8A8_DENSE_ABOVE_ROWS if native_bf16_flags() else W8A8_DENSE_ABOVE_ROWS_FP32


class W8A8Linear(nn.Module):
    """y = dynamic_int8(x) @ Q.T * s + b: the same per-channel int8 weights as Int8Linear, packed
    for PyTorch's quantized CPU kernels, with the input quantised per call (uint8, one scale). The
    output comes back in the input's dtype (the model's activations: bf16 or fp32).

    Only narrow passes (up to `dense_above` rows: the verify passes of a decode) run int8 x int8.
    Wider ones (a prefill, a wide verify pass) multiply the de-quantised weight in oneDNN's blocked
    layout, in bf16 where the CPU multiplies it natively and fp32 elsewhere: one activation scale
    over many tokens would let a single outlier token (SmolLM2 has some) flatten all the others.

    Measured without AVX512 (SmolLM2-135M, 480-token cache, 1 thread, a busy machine), ms per pass
    by new tokens, fp32 / W8A8: 1: 116 / 54, 2: 176 / 61, 4: 176 / 66, 8: 203 / 89, 32: 427 / 242."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, dense_above: int | None = None,
                 dense_dtype: torch.dtype | None = None) -> None:
        super().__init__()
        w = weight.detach().float()
        scales = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
        with warnings.catch_warnings():
            # torch 2.13 (pinned) marks quantized tensors deprecated; they work there, and the
            # warning would print on every default-model load on a native-bf16 CPU.
            warnings.filterwarnings("ignore", message=r".*quantized tensor creation.*deprecated", category=UserWarning)
            q = torch.quantize_per_channel(w, scales.double(), torch.zeros(w.shape[0], dtype=torch.long), 0,
                                           torch.qint8)
        self.in_features, self.out_features = w.shape[1], w.shape[0]
        self.dense_above = w8a8_dense_above() if dense_above is None else dense_above
        self.weight_bytes = w.numel() + scales.numel() * 4 + (0 if bias is None else bias.numel() * 4)
        self._packed = torch.ops.quantized.linear_prepack(q, None if bias is None else bias.detach().float())
        self.dense_dtype = dense_dtype or (torch.bfloat16 if native_bf16_flags() else torch.float32)
        dense = q.dequantize().to(self.dense_dtype).contiguous()
        self._dense_packed = None  # opaque MKLDNN tensor (see Int8Linear)
        if can_pack(self.dense_dtype):
            self._dense_packed = torch.ops.mkldnn._reorder_linear_weight(dense, None)
            dense = None
        self.register_buffer("dense_weight", dense, persistent=False)
        self.register_buffer("bias", None if bias is None else bias.detach().float(), persistent=False)
        from engine.model.native import int8_matrix  # here: the extension loads on first use

        self._gemv = int8_matrix(q.int_repr(), scales, self.bias)  # None: linear_dynamic's kernel

    @property
    def narrow_kernel(self):
        """The native int8 kernel for 1-2 rows (engine/csrc/int8_gemv.cpp), or None (PyTorch's runs)."""
        return self._gemv

    def native_parts(self, dense_above: int) -> tuple | None:
        """What the native layers take of this linear (engine/runtime/native_layers.py): the int8 and dense
        packs, the bias, the dense dtype's name and the narrow kernel. None without a oneDNN dense pack
        or with another narrow-pass cutoff than `dense_above`."""
        if self._dense_packed is None or self.dense_above != dense_above:
            return None
        return (self._packed, self._dense_packed, self.bias, str(self.dense_dtype).replace("torch.", ""),
                self._gemv)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, self.in_features)
        if x2.shape[0] > self.dense_above:
            xd = x2.to(self.dense_dtype).contiguous()
            if self._dense_packed is not None:
                y = torch.ops.mkldnn._linear_pointwise(xd, self._dense_packed, None, "none", [], "")
            else:
                y = torch.nn.functional.linear(xd, self.dense_weight)
            y = y.to(x.dtype)
            if self.bias is not None:
                y = y + self.bias.to(x.dtype)
        else:
            # reduce_range: 7-bit activations, so the AVX2 u8 x s8 pair sums cannot saturate int16
            if self._gemv is not None and x2.shape[0] <= self._gemv.alone_rows:
                y = self._gemv.forward(x2).to(x.dtype)
            else:
                y = torch.ops.quantized.linear_dynamic(x2.float().contiguous(), self._packed, True).to(x.dtype)
        return y.view(*shape[:-1], self.out_features)

    def dequantized(self) -> torch.Tensor:
        """The int8 weights times their scales, fp32: what both paths multiply by."""
        return torch.ops.quantized.linear_unpack(self._packed)[0].dequantize()

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, int8 weights and activations "
                f"up to {self.dense_above} rows, {str(self.dense_dtype).replace('torch.', '')} above")


def _stacked(lins: list[nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    # Per-channel scales are per output row, so quantising the stacked weight gives exactly the
    # rows (and scales) that quantising each linear alone would.
    w = torch.cat([lin.weight.detach() for lin in lins])
    bias = None if lins[0].bias is None else torch.cat([lin.bias.detach() for lin in lins])
    return w, bias


def replace_linears(model: nn.Module, make, fuse: bool) -> int:
    """Every nn.Linear of `model` -> make(weight, bias); with `fuse`, q/k/v and gate/up first become
    one `qkv_proj` and one `gate_up_proj` (4 kernel calls per layer instead of 7)."""
    count = 0
    if fuse:
        for mod in list(model.modules()):
            if hasattr(mod, "qkv_proj") and isinstance(getattr(mod, "q_proj", None), nn.Linear):
                mod.qkv_proj = make(*_stacked([mod.q_proj, mod.k_proj, mod.v_proj]))
                del mod.q_proj, mod.k_proj, mod.v_proj
                count += 3
            if hasattr(mod, "gate_up_proj") and isinstance(getattr(mod, "gate_proj", None), nn.Linear):
                mod.gate_up_proj = make(*_stacked([mod.gate_proj, mod.up_proj]))
                del mod.gate_proj, mod.up_proj
                count += 2
    targets = [(name, mod) for name, mod in model.named_modules() if isinstance(mod, nn.Linear)]
    for name, lin in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, make(lin.weight, lin.bias))
    return count + len(targets)


def quantize_w8a8(model: nn.Module, fuse: bool = True, dense_above: int | None = None) -> int:
    """Replace every nn.Linear in `model` (layers and LM head) by a W8A8Linear; returns how many
    linears were quantised. A tied LM head gets its own int8 copy; the embedding table stays.
    A Transformer's narrow passes (up to `dense_above` rows, default `w8a8_dense_above()`) then carry
    an fp32 stream (`fp32_stream`; a no-op cast in an fp32 model, where it marks the narrow passes)."""
    rows = w8a8_dense_above() if dense_above is None else dense_above
    count = replace_linears(model, lambda w, b: W8A8Linear(w, b, rows), fuse)
    if isinstance(model, Transformer):
        fp32_stream(model, rows)
    return count


def fp32_stream(model: Transformer, up_to: int) -> None:
    """Passes of at most `up_to` tokens carry the residual stream, norms, RoPE and MLP in fp32; the
    KV cache and attention keep the model's dtype.

    Why: a w8a8 narrow pass quantises each linear's input to 7 bits from fp32 and returns fp32, so
    rounding the stream to bf16 between them only adds casts: some 8 dispatched ops a layer (each norm
    4 -> 1, the casts around q/k/v and gate/up). Measured on an AMD EPYC with AVX512-BF16, one thread,
    SmolLM2 shapes, 480-token cache, medians of 3 interleaved rounds, ms at 1 / 3 / 4 / 5 / 8 / 16 tokens:
    11.89 / 13.85 / 14.33 / 16.92 / 18.58 / 21.21 bf16 stream, 11.07 / 12.97 / 13.27 / 16.16 / 17.41 /
    21.10 fp32 (16: a wide pass, unchanged). Unlike fp32 activations throughout (engine/model/precision.py),
    the wide passes that carry a turn's prompt stay as they were."""
    model.fp32_stream_up_to = up_to
    for mod in model.modules():
        if isinstance(mod, RMSNorm):
            mod.weight_fp32 = mod.weight.detach().float()


def quantize_int8(model: nn.Module, act_dtype: torch.dtype | None = None, kernel_dtype: torch.dtype | None = None,
                  dense_above: int | None = None, fuse: bool = True, keep_dense: bool = True) -> int:
    """Replace every nn.Linear in `model` (layers and LM head) by an Int8Linear; returns how many
    linears were quantised.

    `act_dtype` defaults to the model's dtype (its embedding's); `kernel_dtype` to bf16 (see
    Int8Linear). `keep_dense` keeps a de-quantised copy for passes wider than `dense_above` rows
    (default `int8_dense_above()`, by the CPU; memory: 1.25x fp32's weights; a narrow pass reads
    only the int8 bytes). With `fuse`, each attention's q/k/v become one `qkv_proj` and each MLP's gate/up
    one `gate_up_proj` (4 kernel calls per layer instead of 7; the same int8 rows and scales). A
    tied LM head gets its own int8 copy; the embedding table keeps its weights."""
    act = act_dtype or next(model.parameters()).dtype
    kernel = kernel_dtype or KERNEL_DTYPE
    rows = int8_dense_above() if dense_above is None else dense_above
    return replace_linears(model, lambda w, b: Int8Linear(w, b, act, kernel, rows, keep_dense), fuse)


def linear_bytes(model: nn.Module) -> int:
    """Bytes of every linear weight (and its scales and bias): what one forward pass must read."""
    total = 0
    for mod in model.modules():
        if hasattr(mod, "weight_bytes"):  # W8A8 and packed fp32 (engine/model/packed.py) hold opaque weights
            total += mod.weight_bytes
        elif isinstance(mod, nn.Linear | Int8Linear):
            for t in (mod.weight, getattr(mod, "scales", None), mod.bias):
                if t is not None:
                    total += t.numel() * t.element_size()
    return total


__all__ = ["INT8_TOLERANCE", "Int8Linear", "can_pack", "Int8Tolerance", "W8A8Linear", "fp32_stream", "linear_bytes", "quantize_int8",
           "quantize_w8a8", "replace_linears", "w8a8_dense_above"]
