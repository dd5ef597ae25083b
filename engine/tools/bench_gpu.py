"""python -m engine.tools.bench_gpu: one short run on an accelerator - decode tok/s and TTFAT at batch 1
and batch 8, for a random-weight model of SDAR-1.7B's shape (Qwen3-1.7B: 28 layers, dim 2048, 16
heads, 8 KV heads) and for the default model, on the same code path as the CPU.

    python -m engine.tools.bench_gpu --device cuda            # what engine/tools/bench_gpu.sh runs
    python -m engine.tools.bench_gpu --device cpu --shape 64x2 --models random   # the mechanics, anywhere

Batch 1: `--turns` warm-session turns at `instant` (the second turn of each call, so TTFAT is a
live call's: the system prompt is cached); TTFAT p50/p95 and decode tok/s. Batch 8: the same
prompts decoded together (`Engine.generate`), aggregate completion tok/s. The last stdout line is
one JSON object: {"device", "precision", "models": {name: {"batch1_decode_tok_s", "ttfat_ms_p50",
"ttfat_ms_p95", "batch8_tok_s", "batch8_over_batch1"}}}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from engine.api import Engine
from engine.tools.loadtest import write_random_model

SDAR_1_7B = {"dim": 2048, "layers": 28, "heads": 16, "kv_heads": 8, "intermediate": 6144}
USER_TURNS = ["Hi, I'd like to book a cleaning for next Tuesday.", "Do you take Aetna insurance?",
              "Can I move my appointment to Friday at ten?", "What time do you close on Mondays?",
              "I need to cancel my checkup, my name is Jordan Lee.", "Is there parking near you?",
              "Do you have anything on Thursday morning?", "How much is a filling?"]
SYSTEM = "You are Maya, the receptionist at Bright Smile Dental. Answer in one short sentence."


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))], 1)


def measure(eng: Engine, turns: int, max_tokens: int) -> dict:
    ttfat, tok_s, single = [], [], 0.0
    for user in USER_TURNS[:turns]:
        sess = eng.session()
        first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
        r1 = eng.chat(first, reasoning_effort="instant", max_tokens=max_tokens, session=sess)
        second = [*first, r1.message(), {"role": "user", "content": "And what about the week after?"}]
        r2 = eng.chat(second, reasoning_effort="instant", max_tokens=max_tokens, session=sess)
        ttfat.append(float(r2.metrics.get("ttfat_ms") or r2.metrics["ttft_ms"]))
        tok_s.append(float(r2.metrics.get("decode_tok_s") or 0.0))
    reqs = [eng.prepare([{"role": "system", "content": SYSTEM}, {"role": "user", "content": u}],
                        reasoning_effort="instant", max_tokens=max_tokens) for u in (USER_TURNS * 2)[:8]]
    t0 = time.perf_counter()
    out = eng.generate(reqs)
    wall = time.perf_counter() - t0
    batch8 = sum(int(r.metrics.get("completion_tokens") or 0) for r in out) / wall
    single = statistics.median(tok_s) if tok_s else 0.0
    return {"batch1_decode_tok_s": round(single, 1), "ttfat_ms_p50": _pct(ttfat, 0.5), "ttfat_ms_p95": _pct(ttfat, 0.95),
            "batch8_tok_s": round(batch8, 1), "batch8_over_batch1": round(batch8 / single, 2) if single else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.tools.bench_gpu", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", help="torch device (cuda, cuda:1, cpu)")
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp32"], help="weights and activations")
    p.add_argument("--models", default="random,default", help="comma-separated: 'random' (SDAR-1.7B's shape), "
                   "'default' (the embedded dLLM), or local folders")
    p.add_argument("--shape", default=None, metavar="DIMxLAYERS",
                   help="the random model's size instead of SDAR-1.7B's (e.g. 64x2 for a quick check)")
    p.add_argument("--turns", type=int, default=4, help=f"calls at batch 1 (max {len(USER_TURNS)})")
    p.add_argument("--max-tokens", type=int, default=32)
    a = p.parse_args(argv)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        p.error("--device cuda: this torch sees no CUDA device (the pinned wheel is CPU-only; install a CUDA "
                "build of torch 2.13 on the GPU box)")
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        for name in [m.strip() for m in a.models.split(",") if m.strip()]:
            path: str | Path = name
            if name == "random":
                shape = dict(SDAR_1_7B)
                if a.shape:
                    dim, layers = (int(x) for x in a.shape.split("x"))
                    shape = {"dim": dim, "layers": layers, "heads": max(dim // 128, 2), "kv_heads": max(dim // 256, 1),
                             "intermediate": dim * 3}
                path = write_random_model(Path(tmp) / "random", **shape)
            t0 = time.perf_counter()
            eng = Engine.load(path, precision=a.precision, device=a.device)
            load_s = time.perf_counter() - t0
            print(f"{name}: loaded on {a.device} ({a.precision}) in {load_s:.1f} s", flush=True)
            results[name] = measure(eng, max(1, min(a.turns, len(USER_TURNS))), a.max_tokens)
            print(f"{name}: {results[name]}", flush=True)
            del eng
    print(json.dumps({"device": a.device, "precision": a.precision, "models": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
