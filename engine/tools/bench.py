"""python -m engine.tools.bench: block diffusion vs AR on the same weights, and the roofline, in one run.

For every reasoning_effort it decodes a fixed set of voice-agent turns twice, as block diffusion
and as AR (block size 1) on the same weights, and reports decode_tok_s, tokens_per_forward,
prefill_ms and TTFT/TTFAT p50/p95, and TTFAT again with each block streamed only once complete
(the same decode: what streaming a block's committed left part gains). TTFAT is measured on the
second turn of a call, with the call's session cache warm (the system prompt is not prefilled
again), as in a live call.

The roofline rows: the machine's measured memory read bandwidth; the weight bytes one forward
pass reads at the running precision and the floor that gives (bytes / bandwidth); the measured
ms of one pass over 1, 2, 4, 8, 16 and 32 new tokens on a 480-token cache (the median, and the
fastest of 12 as `ms_per_pass_min`: on a shared machine, the pass other tenants disturbed least), and
where the native layers run (engine/model/native.py), the same passes through the Python layers as
`ms_per_pass_python_layers` (null elsewhere).
A fixed baseline whatever the precision: AR decoding of the same weights in bf16, eager (`bf16_ar_decode_tok_s`, skipped
with `--no-bf16-ar`), against which `speedup_vs_bf16_ar` is taken.
Peers on the same weights and prompts: transformers `generate`, and llama.cpp (llama-cpp-python,
the optional `[peer]` extra) on the SmolLM2 GGUF at its own quantisation (Q4_1) and at Q8_0,
with the same thread count. When llama-cpp-python is not installed the bench says so and its
rows are null. Every row comes from the same process, so ratios between rows are honest on a
noisy machine. `--json` prints one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from engine.api import Engine
from engine.cpu_isa import describe
from engine.errors import EngineError
from engine.model.precision import PRECISIONS
from engine.model.quant import linear_bytes
from engine.runtime.drafts import NgramDrafts
from engine.runtime.effort import EFFORTS
from engine.runtime.pass_calibration import time_pass
from engine.tools.peer_llamacpp import llamacpp_available, llamacpp_decode_isolated

PASS_TOKENS = (1, 2, 4, 8, 16, 32)
PASS_CACHE = 480

PROMPTS_YAML = Path(__file__).resolve().parents[2] / "scenarios" / "dental_clinic" / "scenario.yaml"
TURNS = [
    ("Hi, is this Bright Smile Dental?", "I'd like to book a cleaning next week."),
    ("Hello, I have a question about my bill.", "Do you take Delta Dental insurance?"),
    ("Good morning!", "What are your opening hours on Fridays?"),
    ("Hi, this is Maria Lopez.", "Can I move my appointment to Thursday afternoon?"),
    ("Hey there.", "How long does a filling usually take?"),
    ("Hi.", "Sorry, I'm a bit nervous about the dentist."),
    ("Hello?", "Can you cancel my appointment tomorrow? I'm sick."),
    ("Hi, quick question.", "Do I need to bring anything to my first visit?"),
]


def pct(xs: list[float], q: float) -> float | None:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return round(xs[lo] + (xs[hi] - xs[lo]) * (k - lo), 2)


def system_prompt() -> str:
    import yaml

    return yaml.safe_load(PROMPTS_YAML.read_text())["system_prompt"].strip()


def run_turns(eng: Engine, effort: str, max_tokens: int, n: int) -> dict:
    """Two-turn calls: turn 1 warms the session; turn 2 is measured."""
    sys_msg = {"role": "system", "content": system_prompt()}
    rows = []
    for first, second in TURNS[:n]:
        sess = eng.session()
        msgs = [sys_msg, {"role": "user", "content": first}]
        r1 = eng.chat(msgs, reasoning_effort=effort, max_tokens=max_tokens, session=sess)
        msgs += [r1.message(), {"role": "user", "content": second}]
        r2 = eng.chat(msgs, reasoning_effort=effort, max_tokens=max_tokens, session=sess)
        rows.append(r2.metrics)
    tok = sum(m["completion_tokens"] for m in rows)
    dec_s = sum(m["decode_ms"] for m in rows) / 1000
    fwd = sum(m["forward_passes"] for m in rows)
    return {
        "decode_tok_s": round(tok / max(dec_s, 1e-9), 2),
        "tokens_per_forward": round(tok / max(fwd, 1), 3),
        "prefill_ms": pct([m["prefill_ms"] for m in rows], 0.5),
        "ttft_ms_p50": pct([m["ttft_ms"] for m in rows], 0.5),
        "ttft_ms_p95": pct([m["ttft_ms"] for m in rows], 0.95),
        "ttfat_ms_p50": pct([m["ttfat_ms"] for m in rows], 0.5),
        "ttfat_ms_p95": pct([m["ttfat_ms"] for m in rows], 0.95),
        "completion_tokens": tok,
    }


def hf_generate_tok_s(eng: Engine, max_tokens: int, n: int) -> float:
    """transformers `generate` (greedy, KV cache) on the same base weights and prompts."""
    from transformers import AutoModelForCausalLM

    from engine.model.loading import smollm2_folder

    hf = AutoModelForCausalLM.from_pretrained(str(smollm2_folder()), dtype=eng.model.dtype).eval()
    sys_msg = {"role": "system", "content": system_prompt()}
    tok_total, dec_s = 0, 0.0
    for first, _ in TURNS[:n]:
        ids = eng.tokenizer.encode(eng.chat_format.render([sys_msg, {"role": "user", "content": first}]),
                                   add_special_tokens=False).ids
        x = torch.tensor([ids])
        with torch.inference_mode():
            t = time.perf_counter()
            hf.generate(x, max_new_tokens=1, do_sample=False, min_new_tokens=1)
            t_prefill = time.perf_counter() - t
            t = time.perf_counter()
            out = hf.generate(x, max_new_tokens=max_tokens, min_new_tokens=max_tokens, do_sample=False)
            total = time.perf_counter() - t
        new = out.shape[1] - len(ids)
        tok_total += new - 1
        dec_s += max(total - t_prefill, 1e-9)
    return round(tok_total / dec_s, 2)

def read_bandwidth_gbps(mb: int = 256, reps: int = 7) -> float:
    """Memory read bandwidth: the best of `reps` sums over a buffer far larger than the caches."""
    x = torch.ones(mb * 2**20 // 4, dtype=torch.float32)
    x.sum()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        x.sum()
        best = min(best, time.perf_counter() - t)
    return round(x.numel() * 4 / best / 1e9, 2)


def weight_bytes_per_pass(eng: Engine) -> int:
    """Bytes of weights one forward pass must read: every linear (scales included) and the LM
    head, plus the norms. The embedding lookup reads only its rows and is not counted."""
    model = eng.model
    norms = sum(m.weight.numel() * m.weight.element_size() for n, m in model.named_modules() if n.endswith("norm"))
    return linear_bytes(model) + norms


def kv_bytes_per_pass(eng: Engine, cache_len: int = PASS_CACHE) -> int:
    cfg = eng.model.cfg
    return 2 * cfg.n_layers * cfg.n_kv_heads * cfg.head_dim * cache_len * eng.model.dtype.itemsize


@torch.inference_mode()
def ms_per_pass(eng: Engine, tokens=PASS_TOKENS, cache_len: int = PASS_CACHE,
                reps: int = 12) -> tuple[dict[str, float], dict[str, float]]:
    """Median and fastest ms of one engine pass (mask, forward, LM head at every new position)
    over T new tokens that see each other (a block) on top of a `cache_len`-token cache. On a
    shared machine the fastest is the one other tenants disturbed least."""
    med, best = {}, {}
    for t in tokens:
        cache = eng.new_cache(capacity=cache_len + max(tokens))
        cache.advance(0, cache_len)  # K/V content does not change the cost
        x = torch.randint(0, eng.model.cfg.vocab_size, (1, t))
        intra = torch.ones(t, t, dtype=torch.bool)
        for _ in range(2):
            time_pass(eng.runner, cache, x, intra)  # warm-up
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            time_pass(eng.runner, cache, x, intra)  # as the runner runs it (engine/runtime/pass_calibration.py)
            times.append((time.perf_counter() - t0) * 1000)
        med[str(t)], best[str(t)] = round(statistics.median(times), 2), round(min(times), 2)
    return med, best


def _first_turn_ids(eng: Engine, first: str) -> list[int]:
    msgs = [{"role": "system", "content": system_prompt()}, {"role": "user", "content": first}]
    return eng.tokenizer.encode(eng.chat_format.render(msgs), add_special_tokens=False).ids


def roofline(eng: Engine) -> dict:
    bw = read_bandwidth_gbps()
    wbytes = weight_bytes_per_pass(eng)
    med, best = ms_per_pass(eng)
    python_med = None
    if eng.model.native_layers is not None:  # the same passes without them, in the same run
        with eng.runner.python_layers():
            python_med, _ = ms_per_pass(eng)
    return {
        "bandwidth_gbps": bw,
        "weight_bytes_per_pass": wbytes,
        "kv_bytes_per_pass": kv_bytes_per_pass(eng),
        "floor_ms_per_pass": round(wbytes / (bw * 1e9) * 1000, 2),
        "ms_per_pass": med,
        "ms_per_pass_min": best,
        "ms_per_pass_python_layers": python_med,  # median; null where no native layers run
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.tools.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="default", help="'default' or a local HF folder")
    p.add_argument("--prompts", type=int, default=6, help=f"calls per effort (max {len(TURNS)})")
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--efforts", default=",".join(EFFORTS), help="comma-separated reasoning_effort values")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--precision", default=None, choices=[*PRECISIONS, "float32", "bfloat16"],
                   help="weights and activations (default: $VOICE_AGENT_PRECISION, else auto)")
    p.add_argument("--no-hf", action="store_true", help="skip the transformers generate baseline")
    p.add_argument("--no-llamacpp", action="store_true", help="skip the llama.cpp peer even when it is installed")
    p.add_argument("--no-bf16-ar", action="store_true",
                   help="skip the fixed baseline: AR decoding of the same weights in bf16 (instant)")
    p.add_argument("--roofline-only", action="store_true",
                   help="only the roofline rows (bandwidth, floor, ms per pass): no decoding")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    eng = Engine.load(a.model, precision=a.precision)
    precision = eng.info.get("precision")
    native = eng.info.get("native_layers")
    cost = eng.runner.pass_cost
    path = {"cpu": describe(), "precision_reason": eng.info.get("precision_reason"),
            "pass_cost_curve": cost.kernel, "pass_cost_points": cost.points}
    # which path runs here and why, before any number (a capped or a fallback run must say so)
    print(f"cpu: {path['cpu']}; precision {precision}: {path['precision_reason']}; native layers: {native or 'n/a'}; "
          f"pass costs: {cost.kernel}{f' {list(cost.points)}' if cost.points else ''}", flush=True)
    roof = roofline(eng)
    print(f"roofline ({precision}, linears: {eng.info.get('linear_kernel')}"
          f"{f', native layers: {native}' if native else ''}, {torch.get_num_threads()} threads): read bandwidth {roof['bandwidth_gbps']} GB/s, "
          f"weights {roof['weight_bytes_per_pass'] / 1e6:.1f} MB/pass -> floor {roof['floor_ms_per_pass']} ms/pass; "
          f"ms per pass by tokens (cache {PASS_CACHE}), median {roof['ms_per_pass']}, fastest {roof['ms_per_pass_min']}"
          f"{f'; Python layers, median {py}' if (py := roof['ms_per_pass_python_layers']) else ''}",
          flush=True)
    narrow = eng.runner.narrow_threads
    narrow_ms = narrow.costs()
    if narrow.limit:  # which thread count the narrow passes above ran on, and what each cost
        print(f"narrow passes (up to {narrow.limit} tokens): threads {narrow.mode}"
              f"{f', running ms {narrow_ms}' if narrow_ms else ''}", flush=True)
    if a.roofline_only:
        if a.json:
            print(json.dumps({"model": eng.model_name, "precision": precision, **path,
                              "linear_kernel": eng.info.get("linear_kernel"), "native_layers": native, "threads": torch.get_num_threads(),
                              "narrow_threads": narrow.mode, "narrow_threads_ms": narrow_ms, **roof}))
        return 0
    ar = eng.variant(family="ar")
    base_ar = Engine.load("smollm2-base", precision=precision) if a.model == "default" else ar
    efforts = [e.strip() for e in a.efforts.split(",") if e.strip()]
    by_effort = {}
    n = min(a.prompts, len(TURNS))
    run_turns(eng, efforts[0], 8, 1)  # warm-up: first-call allocations stay out of the numbers
    for eff in efforts:
        # Each measured run starts with an empty draft pool (engine/runtime/drafts.py): it may learn from
        # the calls before it in the same run, as a server does, never from an earlier run of them.
        eng.drafts = NgramDrafts()
        d = run_turns(eng, eff, a.max_tokens, n)
        r = run_turns(ar, eff, a.max_tokens, n)
        eng.stream_committed_prefix = False  # the same decode, each block streamed only when complete
        eng.drafts = NgramDrafts()
        w = run_turns(eng, eff, a.max_tokens, n)
        eng.stream_committed_prefix = True
        d["whole_block_ttfat_ms_p50"], d["whole_block_ttfat_ms_p95"] = w["ttfat_ms_p50"], w["ttfat_ms_p95"]
        d["ar_decode_tok_s"] = r["decode_tok_s"]
        d["ar_ttfat_ms_p50"] = r["ttfat_ms_p50"]
        d["speedup_vs_ar"] = round(d["decode_tok_s"] / max(r["decode_tok_s"], 1e-9), 3)
        by_effort[eff] = d
        print(f"{eff:8s} diffusion {d['decode_tok_s']:7.1f} tok/s  AR {r['decode_tok_s']:7.1f} tok/s  "
              f"speedup {d['speedup_vs_ar']:.2f}x  tokens/forward {d['tokens_per_forward']:.2f}  "
              f"prefill {d['prefill_ms']} ms  TTFT p50 {d['ttft_ms_p50']}  TTFAT p50/p95 {d['ttfat_ms_p50']}/{d['ttfat_ms_p95']} ms "
              f"(blocks streamed whole: {d['whole_block_ttfat_ms_p50']}/{d['whole_block_ttfat_ms_p95']})  "
              f"AR TTFAT p50 {d['ar_ttfat_ms_p50']} ms",
              flush=True)
    bf16_ar_tok_s = None
    if not a.no_bf16_ar:
        bf16_ar = eng if precision == "bf16" else Engine.load(a.model, precision="bf16")
        bf16_ar_tok_s = run_turns(bf16_ar.variant(family="ar"), "instant", a.max_tokens, n)["decode_tok_s"]
        del bf16_ar
        for d in by_effort.values():
            d["speedup_vs_bf16_ar"] = round(d["decode_tok_s"] / max(bf16_ar_tok_s, 1e-9), 3)
        print("fixed baseline, AR on the same weights in bf16: " f"{bf16_ar_tok_s} tok/s; diffusion over it: "
              + ", ".join(f"{eff} {d['speedup_vs_bf16_ar']:.2f}x" for eff, d in by_effort.items()), flush=True)
    base_ar_tok_s = run_turns(base_ar, "instant", a.max_tokens, n)["decode_tok_s"]
    hf = None if a.no_hf else hf_generate_tok_s(base_ar, a.max_tokens, n)
    print(f"same base weights, AR: ours {base_ar_tok_s} tok/s vs transformers generate {hf} tok/s")
    peer: dict[str, dict | None] = {"Q4_1": None, "Q8_0": None}
    peer_status = "skipped (--no-llamacpp)" if a.no_llamacpp else "absent (llama-cpp-python not installed)"
    if a.no_llamacpp:
        print("llama.cpp peer: skipped (--no-llamacpp)")
    elif not llamacpp_available():
        print("llama.cpp peer: ABSENT (llama-cpp-python is not installed; pip install -c constraints.txt "
              "-e '.[peer]' builds it, ~10 min) -> llamacpp rows are null")
    else:
        peer_status = "measured"
        prompts = [_first_turn_ids(base_ar, first) for first, _ in [TURNS[0], *TURNS[:n]]]  # [0]: warm-up
        for q in peer:
            try:  # in a child process: a crash of llama.cpp costs its rows only
                peer[q] = llamacpp_decode_isolated(q, prompts, a.max_tokens, torch.get_num_threads())
            except EngineError as e:
                peer_status = f"failed: {e}"
                print(f"llama.cpp peer {q}: FAILED ({e}) -> its rows are null", flush=True)
                continue
            print(f"llama.cpp {q} ({peer[q]['gguf']}, {torch.get_num_threads()} threads): decode "
                  f"{peer[q]['decode_tok_s']} tok/s, prefill p50 {peer[q]['prefill_ms_p50']} ms", flush=True)
    head = by_effort.get("low") or next(iter(by_effort.values()))
    summary = {
        "model": eng.model_name,
        "dtype": str(eng.model.dtype).replace("torch.", ""),
        "precision": precision,
        **path,
        "linear_kernel": eng.info.get("linear_kernel"),
        "native_layers": native,
        # one thread or all for narrow passes, and what each cost by width class (engine/runtime/pass_threads.py)
        "narrow_threads": eng.runner.narrow_threads.mode,
        "narrow_threads_ms": eng.runner.narrow_threads.costs(),
        "threads": torch.get_num_threads(),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "reasoning_effort": "low" if "low" in by_effort else efforts[0],
        "decode_tok_s": head["decode_tok_s"],
        "ar_decode_tok_s": head["ar_decode_tok_s"],
        "speedup_vs_ar": head["speedup_vs_ar"],
        "tokens_per_forward": head["tokens_per_forward"],
        "ttfat_ms_p50": head["ttfat_ms_p50"],
        "ttfat_ms_p95": head["ttfat_ms_p95"],
        "prefill_ms": head["prefill_ms"],
        "bf16_ar_decode_tok_s": bf16_ar_tok_s,
        "speedup_vs_bf16_ar": head.get("speedup_vs_bf16_ar"),
        "base_ar_decode_tok_s": base_ar_tok_s,
        "hf_generate_tok_s": hf,
        **roof,
        "llamacpp_decode_tok_s": peer["Q4_1"] and peer["Q4_1"]["decode_tok_s"],
        "llamacpp_q8_0_decode_tok_s": peer["Q8_0"] and peer["Q8_0"]["decode_tok_s"],
        "llamacpp": peer if any(peer.values()) else None,
        "llamacpp_status": peer_status,
        "by_effort": by_effort,
        "prompts": n,
        "max_tokens": a.max_tokens,
    }
    if a.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    from engine.errors import run_tool

    raise SystemExit(run_tool(main, "python -m engine.tools.bench"))
