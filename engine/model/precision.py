"""The engine's numeric precision: one switch, one rule for `auto`, and what bf16 is allowed to differ by.

    VOICE_AGENT_PRECISION=fp32|bf16|int8|w8a8|auto     (or Engine.load(..., precision="fp32"), `--precision` on commands)

`auto` picks bf16 only where the CPU multiplies it natively (AMX or AVX512-BF16); elsewhere a bf16
matmul of more than one token is several times slower than fp32 (measured without AVX512: 8 tokens
190 vs 140 ms), so fp32 it is. For the embedded default model (`Engine.load("default")`), `auto`
picks w8a8 wherever the native int8 kernels run (AVX512-VNNI, AVX-VNNI or AVX2; engine/cpu_isa.py):
with bf16 activations on a native-bf16 CPU, fp32 ones elsewhere. Its quality was checked on both
(docs/benchmarks.md: the held-out simulated calls, `engine.tools.eval` against fp32), and its narrow passes
run the native layers (engine/model/native.py). The explicit argument wins over the variable, the variable
over auto.

`int8` is weight-only int8 (engine/model/quant.py: per-channel symmetric int8 linears and LM head, PyTorch's
`torch._weight_int8pack_mm`); its activations, norms, attention and KV cache run in `int8_activation_dtype()`:
bf16 where the CPU multiplies it natively, fp32 elsewhere. It is opt-in (a checkpoint's int8 quality
is not known), and what it promises is `engine.model.quant.INT8_TOLERANCE`.

`w8a8` is those int8 weights with int8 activations on narrow passes (each linear's input quantised
per pass, PyTorch's quantized CPU kernels); wide passes multiply the de-quantised weights, and the
norms, attention and KV cache run in `int8_activation_dtype()` as int8's do (a narrow pass carries
its residual stream, norms and MLP in fp32 between the int8 kernels: `engine.model.quant.fp32_stream`). Opt-in, but for the
default model's `auto` on a native-bf16 CPU.

fp32 on CPU multiplies with oneDNN-prepacked weights (engine/model/packed.py): a 2-8 token pass then costs
about what a 1-token pass does, where MKL's sgemm costs twice as much. `VOICE_AGENT_FP32_LINEARS=dense`
keeps plain `nn.Linear` (MKL), e.g. to measure the difference.

What is exact, and where:
- fp32: token-for-token equality of a session turn vs the same turn from scratch, of batched vs
  alone, and of block size 1 vs AR. The tests of those properties pin fp32.
- bf16: a prefix-cached or batched pass rounds differently from a from-scratch one, so greedy
  decoding may part after a few tokens. What holds is `BF16_TOLERANCE` against fp32, below.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from engine.config import ENV, PRECISIONS, engine_config
from engine.cpu_isa import cpu_flags, int8_kernel_isa
from engine.errors import SettingError

PRECISION_ENV = ENV["precision"]
FP32_LINEARS_ENV = ENV["fp32_linears"]
FP32_LINEARS = ("packed", "dense")
_ALIASES = {"float32": "fp32", "fp32": "fp32", "bfloat16": "bf16", "bf16": "bf16", "auto": "auto", "int8": "int8",
            "w8a8": "w8a8"}
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")


@dataclass(frozen=True)
class Bf16Tolerance:
    """How far bf16 may be from fp32 on the same weights and tokens (the tests and docs/engine.md use this).

    Measured without AVX512 (bf16 emulated) on four receptionist prompts, teacher-forced through the
    model: SmolLM2-135M's largest logit difference was 1.27 of a logit range of ~67, and every
    prompt position's argmax agreed; along fp32's own greedy replies 12 of 13 to 13 of 13 did (largest
    difference there 0.67).
    Whole greedy replies are not promised: they agreed for 3 to 15 tokens, then parted at a near tie
    (SmolLM2's top-1 margins are often under one logit). The embedded dLLM's AR readout is flatter
    (argmax agreement 0.90-0.93), and its diffusion decoding, whose commits compare confidences to a
    threshold, can part from fp32 at token 0: there bf16 promises the logit bound. The bounds leave
    room for native bf16 kernels, which round differently from the emulated ones measured here."""

    max_abs_logit_diff: float = 2.5     # per logit, at any position, in logit units
    min_top1_agreement: float = 0.9     # share of positions whose argmax matches fp32 (AR weights)


BF16_TOLERANCE = Bf16Tolerance()


class PrecisionError(SettingError):
    code = "invalid_precision"
    param = "precision"


@dataclass(frozen=True)
class Precision:
    name: str          # "fp32" | "bf16" | "int8" | "w8a8"
    dtype: torch.dtype  # the activations' (and the KV cache's) dtype; for int8 also the scales'
    reason: str        # why this one: "asked for", "VOICE_AGENT_PRECISION=...", or the CPU flags

    @property
    def int8_weights(self) -> bool:
        return self.name in ("int8", "w8a8")

    @property
    def int8_activations(self) -> bool:
        """W8A8: the linears' inputs are quantised to int8 per pass too (engine/model/quant.py)."""
        return self.name == "w8a8"


def native_bf16_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> list[str]:
    """The CPU flags that make bf16 matmuls fast here (empty when there are none)."""
    flags = cpu_flags(cpuinfo)
    return [f for f in NATIVE_BF16_FLAGS if f in flags]


def int8_activation_dtype() -> torch.dtype:
    """Activations of the int8 path: bf16 with native bf16 matmuls, else fp32.

    Either way the int8 kernel itself is fed bf16 (engine/model/quant.py: its fp32 path is scalar without
    AVX512). Measured on a 2-core EPYC without AVX512 (SmolLM2-135M, 480-token cache, 1 thread, a
    busy machine): bf16 activations were no faster on 1-8 token passes and made a 300-token prefill
    8x slower (22.6 vs 2.8 s: bf16 dense matmuls are emulated there), so fp32 it is.

    With native bf16, w8a8 with fp32 activations was tried (AMD EPYC with AVX512-BF16, 2026-12-06, 2
    threads): narrow passes 4-10% faster (ms at 1 / 5 / 8 tokens: 11.8 / 16.0 / 17.1 against 12.2 / 17.8 /
    19.3), wide ones slower (32 tokens: 42.9 against 38.9); decoding the bench turns faster (instant 89.0
    against 84.6 tok/s, `low` 170.7 against 154.0, over replies that changed), but on the 120 held-out
    simulated calls (two sets) the same task success (236 of 240 each) and no earlier first word (TTFAT
    p50 at instant 126 / 134 against 124 / 131 ms; at `low` 352 / 371 against 320 / 363, over thinking
    that changed too): a turn's first pass carries its new prompt, and that wide pass got slower. What a
    caller hears first did not improve, so bf16 stays. What was kept of it: w8a8's narrow passes alone
    carry an fp32 stream, the cache and attention staying bf16 and wide passes as they were
    (`engine.model.quant.fp32_stream`, 2026-12-06: TTFAT p50 at instant 121 / 122 against 124 / 131 ms on
    the two sets, 236 of 240 calls as before, ROUGE-L against fp32 0.856 against 0.839)."""
    return torch.bfloat16 if native_bf16_flags() else torch.float32


def fp32_linears() -> str:
    """How CPU fp32 linears multiply: "packed" (oneDNN's blocked layout; the default) or "dense" (MKL)."""
    choice = engine_config().fp32_linears
    if choice not in FP32_LINEARS:
        raise PrecisionError(f"{FP32_LINEARS_ENV} must be one of {', '.join(FP32_LINEARS)}; got {choice!r}")
    return choice


def resolve_precision(choice: str | torch.dtype | None = None, *, int8_checked: bool = False) -> Precision:
    """The precision to load with: `choice` if given, else $VOICE_AGENT_PRECISION, else auto.
    `int8_checked`: the model's int8 (w8a8) quality is known (the embedded default), so auto may pick it."""
    if isinstance(choice, torch.dtype):
        for name, dt in _DTYPES.items():
            if dt == choice:
                return Precision(name, dt, "asked for")
        raise PrecisionError(f"unsupported dtype {choice}; use one of {', '.join(PRECISIONS)}")
    source = "asked for"
    if choice is None:
        cfg = engine_config()
        choice = cfg.precision
        source = f"{PRECISION_ENV}={choice}" if cfg.is_set("precision") else "auto"
    name = _ALIASES.get(str(choice).strip().lower())
    if name is None:
        raise PrecisionError(f"precision must be one of {', '.join(PRECISIONS)}; got {choice!r}")
    if name == "w8a8":
        act = int8_activation_dtype()
        return Precision("w8a8", act, f"{source}; int8 weights, int8 activations on narrow passes, "
                         f"{str(act).replace('torch.', '')} elsewhere")
    if name == "int8":
        act = int8_activation_dtype()
        return Precision("int8", act, f"{source}; int8 weights, {str(act).replace('torch.', '')} activations")
    if name != "auto":
        return Precision(name, _DTYPES[name], source)
    flags = native_bf16_flags()
    if flags and int8_checked:
        return Precision("w8a8", torch.bfloat16, f"auto: the CPU has {', '.join(flags)} (native bf16 matmuls) and "
                         "the default model's w8a8 quality is checked: int8 weights, int8 activations on narrow "
                         "passes, bf16 elsewhere")
    if flags:
        return Precision("bf16", torch.bfloat16, f"auto: the CPU has {', '.join(flags)} (native bf16 matmuls)")
    isa = int8_kernel_isa()
    if isa and int8_checked:
        return Precision("w8a8", torch.float32, f"auto: the CPU has no AMX/AVX512-BF16 but multiplies int8 with "
                         f"{isa} and the default model's w8a8 quality is checked: int8 weights, int8 activations "
                         "on narrow passes, fp32 elsewhere")
    return Precision("fp32", torch.float32, "auto: the CPU has no AMX/AVX512-BF16, where bf16 matmuls are slower")


__all__ = ["BF16_TOLERANCE", "FP32_LINEARS", "FP32_LINEARS_ENV", "PRECISIONS", "PRECISION_ENV", "Precision",
           "PrecisionError", "cpu_flags", "fp32_linears", "int8_activation_dtype", "native_bf16_flags", "resolve_precision"]
