"""The pass-cost curve of this machine: measured once per machine, model and kernel, then kept.

    VOICE_AGENT_PASS_COSTS=measured|fixed      (default: measured)

The verify planner (engine/runtime/pass_plan.py) weighs a draft's odds against the width it adds, so it needs
what a wider pass costs *here*. The fixed curves (engine/runtime/pass_cost.py) were each measured on one CPU:
an AVX2-only laptop's curve is not an AVX512 server's (on AVX2 a 32-token pass cost 3x one token; on
AVX512-BF16 with the native layers 2.3x). So a real model on a CPU times its own passes at the
planner's widths the first time it loads on a machine, and keeps the curve in
`~/.cache/voice-agent/pass_costs/`, keyed by the CPU, its flags and cap, the thread count, the model's
shape and the kernel. Later loads on the same machine read it back, so a decode's pass layout (and so its
pass count) is the same from run to run there, as with the fixed curves.

Tiny models (unit tests) and GPUs keep the fixed curves: a tiny model's passes cost next to nothing
whatever their width, and a GPU pass is launch-bound (the "flat" curve). `fixed` keeps them everywhere,
e.g. to compare with a measured curve.
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform
import time
from pathlib import Path

import torch

from engine.config import engine_config
from engine.cpu_isa import describe
from engine.errors import SettingError
from engine.runtime.pass_cost import PassCost, curve_for

log = logging.getLogger(__name__)

PASS_COSTS_ENV = "VOICE_AGENT_PASS_COSTS"
PASS_COSTS_MODES = ("measured", "fixed")
PASS_COSTS_DIR_ENV = "VOICE_AGENT_PASS_COSTS_DIR"
# The widths the planner asks about (it interpolates between them and extrapolates past the last two),
# on a cache as long as a call's (the bench's roofline uses the same)
WIDTHS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32)
CACHE_LEN = 480
REPS = 6
# Models narrower than this are test models (SmolLM2-135M, the smallest real one, is 576 wide): fixed curves
MIN_DIM = 256
CURVE_VERSION = 1  # bump when the measurement changes, so kept curves are taken again


class PassCostsError(SettingError):
    code = "invalid_pass_costs"
    param = PASS_COSTS_ENV


def pass_costs_mode() -> str:
    mode = engine_config().pass_costs
    if mode not in PASS_COSTS_MODES:
        raise PassCostsError(f"{PASS_COSTS_ENV}={mode!r}: expected one of {', '.join(PASS_COSTS_MODES)}")
    return mode


def curves_dir() -> Path:
    """Where kept curves lie: $VOICE_AGENT_PASS_COSTS_DIR, else pass_costs/ in the engine's cache folder."""
    return engine_config().pass_costs_path


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def curve_key(runner, fixed: str) -> dict:
    """What a kept curve is valid for: this CPU as capped, these threads, this model's shape and kernels."""
    cfg = runner.model.cfg
    native = None
    if runner.model.native_layers is not None:
        from engine.model.native import EXTENSION

        native = EXTENSION  # named by its sources' hash: changed kernels are timed again
    return {"version": CURVE_VERSION, "cpu": _cpu_model(), "flags": describe(), "threads": torch.get_num_threads(),
            "kernel": fixed, "native_layers": native, "torch": torch.__version__,
            "shape": [cfg.dim, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.intermediate_size,
                      cfg.vocab_size]}


def time_pass(runner, cache, x: torch.Tensor, intra: torch.Tensor) -> None:
    """One pass of `x` [1, T] over `cache` as the runner runs it: mask, forward, logits at every new token."""
    t = x.shape[1]
    mask, _ = cache.mask(intra, t)
    slots = cache.slots_for(t).to(cache.device)
    with runner.narrow_threads.run(x.numel()):  # one thread or all, as engine/runtime/pass_threads.py picks
        runner.model.logits(x.to(cache.device), slots, mask, cache, slots, torch.arange(t, device=cache.device))


@torch.inference_mode()
def measure(runner, widths=WIDTHS, reps: int = REPS, cache_len: int = CACHE_LEN) -> dict[int, float]:
    """The fastest ms of `reps` causal passes over each width of new tokens, on a `cache_len`-token cache:
    on a shared machine the pass other tenants disturbed least is the machine's own cost (a median taken
    beside a busy process read a 12-token pass at 12x a 1-token one, 2026-12-07)."""
    out = {}
    for t in widths:
        cache = runner.new_cache(capacity=cache_len + max(widths))
        cache.advance(0, cache_len)  # K/V content does not change the cost
        x = torch.randint(0, runner.model.cfg.vocab_size, (1, t), generator=torch.Generator().manual_seed(t))
        intra = torch.ones(t, t, dtype=torch.bool).tril()
        time_pass(runner, cache, x, intra)  # warm-up
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            time_pass(runner, cache, x, intra)
            times.append((time.perf_counter() - t0) * 1000)
        out[t] = min(times)
    return out


def relative(ms: dict[int, float]) -> tuple[tuple[int, float], ...]:
    """ms by width -> the planner's curve: cost relative to width 1, never falling as the width grows
    (a wider pass that timed cheaper is noise; the planner needs a cost that grows) and never above the
    width itself (w one-token passes do what a w-token pass does)."""
    base = ms[min(ms)]
    points, top = [], 1.0
    for w in sorted(ms):
        top = max(top, min(ms[w] / base, float(w)))
        points.append((w, round(top, 3)))
    points[0] = (points[0][0], 1.0)
    return tuple(points)


def pass_cost_for(runner, device_type: str, precision: str | None, native_bf16: bool) -> PassCost:
    """The runner's pass costs: this machine's measured curve for a real CPU model (kept after the first
    load), else the fixed curve of its kernel."""
    fixed = curve_for(device_type, precision, native_bf16)
    if device_type != "cpu" or pass_costs_mode() == "fixed":
        return PassCost(fixed)
    if runner.model.cfg.dim < MIN_DIM:
        return PassCost(fixed)
    key = curve_key(runner, fixed)
    path = curves_dir() / f"{hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]}.json"
    try:
        kept = json.loads(path.read_text())
        return PassCost(f"measured:{fixed}", points=tuple((int(w), float(c)) for w, c in kept["curve"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass  # not measured here yet (or unreadable): measure it
    t0 = time.perf_counter()
    ms = measure(runner)
    points = relative(ms)
    log.info("measured this machine's pass costs in %.1f s (kept in %s): %s", time.perf_counter() - t0, path, points)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"key": key, "ms": {str(w): round(v, 3) for w, v in ms.items()},
                                   "curve": points}, indent=1))
        tmp.replace(path)
    except OSError as e:  # a read-only home: measured again next load
        log.warning("could not keep the measured pass costs in %s: %s", path, e)
    return PassCost(f"measured:{fixed}", points=points)


__all__ = ["PASS_COSTS_ENV", "PASS_COSTS_MODES", "PassCostsError", "curve_key", "curves_dir", "measure",
           "pass_cost_for", "pass_costs_mode", "relative", "time_pass"]
