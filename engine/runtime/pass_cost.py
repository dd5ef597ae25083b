"""What a pass costs by its width, relative to a 1-token pass, for the runner's linear kernel.

The verify planner (engine/runtime/pass_plan.py) weighs a draft's odds of holding against the width it
adds, so it needs the shape of this curve, not its absolute level (which moves with other tenants
by 1.5x within minutes on a shared machine). The curves are medians of whole passes (SmolLM2-135M,
480-token cache, 2 threads, `engine.tools.bench.ms_per_pass`), interpolated linearly between widths and
extrapolated from the last two. They are fixed per kernel, not measured at load, so that a decode's
pass layout, and so its pass count, is the same on every run of a machine.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from operator import itemgetter

# Each: (width, cost relative to width 1), widths ascending, starting at 1.
CURVES: dict[str, tuple[tuple[int, float], ...]] = {
    # int8 weights with fp32 activations (no native bf16): `_weight_int8pack_mm` up to 8 rows, whose
    # cost grows per row (a step past 4 rows), then the packed fp32 de-quantised copy. Intel Xeon
    # without AVX512-BF16, 2026-12-04, medians of 4 rounds interleaved with fp32: 19.9 ms at 1 token.
    "int8-fp32": ((1, 1.0), (2, 1.1), (3, 1.21), (4, 1.3), (5, 1.79), (6, 1.85), (8, 2.06), (10, 2.49),
                  (12, 2.6), (16, 2.87), (24, 3.31), (32, 3.84), (48, 5.16)),
    # int8 weights with bf16 activations: the int8 kernel up to 3 rows, then packed bf16, nearly flat.
    # AMD EPYC with AVX512-BF16, 2026-12-03 (engine/model/quant.py's table; docs/benchmarks.md, session 14). On the
    # same kind on 2026-12-05 whole passes measured steeper (1 / 2 / 4 / 6 / 8 / 12 / 16 / 32 tokens:
    # 1 / 1.17 / 1.34 / 1.43 / 1.58 / 1.77 / 2.0 / 2.95), but planning with that curve decoded no faster
    # (one process, 3 rounds each: instant 53.5 vs 55.7 tok/s, low 102 vs 105), so this one stays.
    "int8-bf16": ((1, 1.0), (2, 1.1), (4, 1.25), (6, 1.25), (8, 1.5), (12, 1.6), (16, 1.75), (32, 2.4)),
    # fp32 oneDNN-packed (engine/model/packed.py): slow growth. The Intel Xeon above, the same rounds.
    "fp32": ((1, 1.0), (2, 1.03), (3, 1.09), (4, 1.13), (6, 1.2), (8, 1.26), (12, 1.38), (16, 1.52), (24, 1.83),
             (32, 2.03), (48, 2.74)),
    # bf16 with native bf16 matmuls: the same AMD EPYC, medians of 3 rounds, 35.6 ms at 1 token
    # (session 11 measured it flat to 16 tokens; here 16 cost 1.54). Planned with this curve
    # instead of that flat one, in one process, 2 rounds each: instant 34.7 vs 32.5 tok/s, low 66.8 vs 67.2.
    "bf16": ((1, 1.0), (2, 1.01), (3, 1.06), (4, 1.1), (6, 1.2), (8, 1.27), (12, 1.38), (16, 1.54), (24, 1.85),
             (32, 2.04), (48, 2.88)),
    # w8a8 without native bf16: int8 x int8 (quantized.linear_dynamic) up to 3 rows, flat to 2 rows,
    # then a step (the Xeon above, measured with plain fp32 `nn.Linear` above 3 rows; the packed fp32
    # copy that replaced it is not slower).
    "w8a8-fp32": ((1, 1.0), (2, 1.0), (4, 1.85), (8, 2.25), (16, 2.3), (32, 3.1)),
    # w8a8 with native bf16: int8 x int8 up to 4 rows (8 since 2026-12-06), then the packed bf16 copy (engine/model/quant.py),
    # bf16 activations. AMD EPYC with AVX512-BF16, 2026-12-05: whole passes measured 16.0 ms at 1 token
    # and, relative to it, 1.06 / 1.12 / 1.17 / 1.54 / 1.59 / 1.77 / 2.01 / 2.34 / 3.36 at 2 / 3 / 4 / 5 /
    # 6 / 8 / 12 / 16 / 32 tokens (medians of 3 rounds). Planning with that curve decoded slower than with
    # this flatter one (one process, 2 rounds: instant 62.8 vs 68.1 tok/s, low 120.0 vs 121.6), as the
    # int8 one above did: the planner undervalues width, so the planning curve is the flatter one.
    # With narrow passes on one thread (engine/runtime/pass_threads.py, 2026-12-06, same CPU kind): 12.5 ms at
    # 1 token, then 1.09 / 1.15 / 1.2 / 1.84 / 2.03 / 2.07 / 2.35 / 2.83 / 3.45 at 2 / 3 / 4 / 5 / 6 / 8 / 12 /
    # 16 / 32 tokens. Planned with that, with this one and with one half as steep (one process, 3
    # rounds, 48 tokens): instant 86.8 / 84.5 / 77.9 tok/s, low 160 / 168 / 178: no clear winner, so
    # this one stays. With the int8 kernel up to 8 rows (engine/model/quant.py, 2026-12-06) a pass measured
    # 1.08 / 1.15 / 1.19 / 1.42 / 1.47 / 1.57 / 2.21 / 2.36 at 2 / 3 / 4 / 5 / 6 / 8 / 10 / 12 tokens; planned
    # with this curve, with that one and with a flatter one (6: 1.3, 8: 1.4) (one process, 3 rounds, 48
    # tokens, medians): instant 90.9 / 89.3 / 83.0 tok/s, low 134.3 / 130.9 / 140.2; again, 4 rounds over
    # 8 turns: instant 91.6 / 95.0 / 89.2, low 159.6 / 152.6 / 158.6. No clear winner, so this one stays.
    # With the fp32 stream and query groups folded up to 8 tokens (2026-12-06, same CPU kind, medians of
    # 3 rounds): 1.18 / 1.24 / 1.36 / 1.40 / 1.51 / 1.73 at 3 / 4 / 5 / 6 / 8 / 12 tokens (11.25 ms at 1);
    # not A/B'd as a planning curve, so this one stays. With the native layers (engine/model/native.py, a slower
    # machine of the kind, fastest of 3 rounds): 1.03 / 1.1 / 1.16 / 1.25 / 1.34 / 1.53 / 2.02 / 2.17 / 2.32 /
    # 2.99 / 3.66 at 2 / 3 / 4 / 5 / 6 / 8 / 10 / 12 / 16 / 24 / 32 tokens (12.2 ms at 1). Planned with it on 20
    # held-out calls at instant, 2 rounds against this one: the same 543 passes, wall 42.0 / 43.9 s against
    # 42.9 / 45.3, TTFAT p50 179 / 186 ms against 176 / 183: no clear winner, so this one stays.
    # With the hand loops, Int8Matrix and one-region passes (engine/model/native.py, session 25, 2026-12-06, a
    # 1-token pass 6.7-7.6 ms): 1.0-1.2 / 1.35 / 1.4-1.6 / 2.5 at 2 / 3 / 4 / 8 tokens, a step past 4
    # rows (FBGEMM and a parallel op per linear above). Planned with the curve before this one (2: 1.04,
    # 4: 1.1, 6: 1.55, 8: 1.75, 12: 1.9, 16: 2.2, 32: 3.4), with this one and with one between them
    # (one process, 3 rounds, the bench turns, 48 tokens, medians): instant 91.1 / 124.2 / 104.4 tok/s
    # (1.36-1.50 / 1.15 / 1.25-1.29 tokens a pass), `low` 115.4 / 123.5 / 123.3; an earlier 3 rounds:
    # instant 91.5 / 122.5, low 124.6 / 116.2. Instant now commits ~1 token a pass plus what drafts
    # add: at these costs a 4-token pass must commit 1.6 tokens to pay.
    "w8a8-bf16": ((1, 1.0), (2, 1.08), (3, 1.35), (4, 1.6), (5, 2.2), (8, 2.6), (12, 3.0), (16, 3.3), (32, 4.5)),
    # A GPU pass is launch-bound far beyond any verify pass's width.
    "flat": ((1, 1.0), (64, 1.05)),
}


@dataclass(frozen=True)
class PassCost:
    """cost(width): a pass over `width` new tokens a row, in units of a 1-token pass of one row.
    A batched pass pads its `rows` rows to the widest, so its linears see rows x width tokens."""

    kernel: str
    rows: int = 1
    # a curve measured on this machine (engine/runtime/pass_calibration.py), in CURVES' form; None: CURVES[kernel]
    points: tuple[tuple[int, float], ...] | None = None

    def __post_init__(self) -> None:
        if self.points is None and self.kernel not in CURVES:
            raise ValueError(f"no pass-cost curve for kernel {self.kernel!r}; known: {', '.join(CURVES)}")
        if self.points is not None and (len(self.points) < 2 or self.points[0] != (1, 1.0)):
            raise ValueError("a measured pass-cost curve starts at (1, 1.0) and has two widths at least")

    def __call__(self, width: int) -> float:
        pts = self.points or CURVES[self.kernel]
        w = max(1, width) * max(1, self.rows)
        i = bisect_left(pts, w, key=itemgetter(0))  # no list built per call: the planner asks every pass
        if i < len(pts) and pts[i][0] == w:
            return pts[i][1]
        (w0, c0), (w1, c1) = (pts[i - 1], pts[i]) if i < len(pts) else (pts[-2], pts[-1])
        return c0 + (c1 - c0) * (w - w0) / (w1 - w0)


def curve_for(device_type: str, precision: str | None, native_bf16: bool) -> str:
    """The curve of a runner: its device, precision name and whether the CPU multiplies bf16 natively."""
    if device_type != "cpu":
        return "flat"
    if precision in ("int8", "w8a8"):
        return f"{precision}-bf16" if native_bf16 else f"{precision}-fp32"
    if precision == "bf16":
        return precision
    return "fp32"


__all__ = ["CURVES", "PassCost", "curve_for"]
