"""Native layers: every layer of a w8a8 pass over a KV cache in one C++ call (engine/csrc/native_layers.cpp).

A narrow pass (the verify passes of a decode: 1-8 tokens) is short on arithmetic, so on a CPU its time
goes to Python and per-op dispatch: ~25 ATen calls and 6 module calls a layer. The C++ loop makes the
same ATen calls in the same order, so its hidden states and cache writes are bit-identical to
engine/model.py's (tests/test_native.py), with the GIL released. Wide passes (a turn's first pass, which
carries its new prompt, and prefills) go the same way through the packed de-quantised weights.
Measured on an AMD EPYC with AVX512-BF16 (2026-12-06, the default model, 480-token cache, threads as the
runner sets them, one process, `engine.bench.ms_per_pass` medians), ms at 1 / 4 / 8 / 16 / 32 tokens:
Python 21.3 / 23.2 / 29.3 / 45.8 / 62.0, native 12.5 / 14.1 / 18.6 / 29.7 / 47.8.

It serves w8a8 models only (the CPU default where bf16 is native) with fused q/k/v and gate/up, no q/k
norm and oneDNN-packed weights, in passes over a KV cache; any other pass runs the Python layers.

The extension is compiled once, with PyTorch's own `torch.utils.cpp_extension` (g++ and ninja; setup.sh
builds it), into `native_dir()`. Where it cannot be built the engine says so once and runs the Python
layers: the same numbers, slower. `VOICE_AGENT_NATIVE=0` turns it off (e.g. to measure the difference).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from pathlib import Path
from types import ModuleType

import torch

log = logging.getLogger(__name__)

NATIVE_ENV = "VOICE_AGENT_NATIVE"
NATIVE_DIR_ENV = "VOICE_AGENT_NATIVE_DIR"
SOURCE = Path(__file__).parent / "csrc" / "native_layers.cpp"
# Keyed by the torch version: an extension built against another torch's headers must not load.
EXTENSION = "voice_agent_layers_" + re.sub(r"\W", "_", torch.__version__)

_lock = threading.Lock()
_state: dict[str, ModuleType | str] = {}  # "module" or "error", once tried


def native_dir() -> Path:
    return Path(os.environ.get(NATIVE_DIR_ENV) or Path.home() / ".cache" / "voice-agent" / "native")


def built_path() -> Path:
    """Where the compiled extension lies once built."""
    return native_dir() / f"{EXTENSION}.so"


def enabled() -> bool:
    return (os.environ.get(NATIVE_ENV) or "1").strip().lower() not in ("0", "off", "false", "no")


def load_extension() -> ModuleType | None:
    """The compiled extension (built on first use, ~30 s on 2 cores), or None where it cannot be built;
    `build_error()` then says why."""
    with _lock:
        if not _state:
            try:
                from torch.utils.cpp_extension import load

                native_dir().mkdir(parents=True, exist_ok=True)
                if not built_path().exists():  # say why the first load pauses
                    log.warning("building the native layers once (~30 s) into %s", native_dir())
                _state["module"] = load(EXTENSION, [str(SOURCE)], extra_cflags=["-O2"],
                                        build_directory=str(native_dir()), verbose=False)
            except Exception as e:  # no compiler, no ninja, a read-only home: the Python layers still run
                _state["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
                log.warning("native layers unavailable, running the Python layers (slower): %s",
                            _state["error"])
        mod = _state.get("module")
        return mod if isinstance(mod, ModuleType) else None


def build_error() -> str | None:
    err = _state.get("error")
    return err if isinstance(err, str) else None


def native_layers_for(model) -> tuple[object | None, str]:
    """The native layers of a w8a8 `model` (engine.model.Transformer), and why not where None."""
    from engine.quant import W8A8Linear

    if not enabled():
        return None, f"off ({NATIVE_ENV}=0)"
    up_to = model.fp32_stream_up_to
    if up_to <= 0:
        return None, "not a w8a8 model with an fp32 stream"
    layers = list(model.layers)
    linears = []
    for layer in layers:
        attn, mlp = layer.self_attn, layer.mlp
        lins = (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)
        if attn.q_norm is not None or not all(isinstance(lin, W8A8Linear) for lin in lins):
            return None, "needs fused w8a8 q/k/v and gate/up and no q/k norm"
        if any(lin._dense_packed is None or lin.dense_above != up_to for lin in lins):
            return None, "needs oneDNN-packed weights and one narrow-pass cutoff"
        if any(norm.weight_fp32 is None for norm in (layer.input_layernorm, layer.post_attention_layernorm)):
            return None, "not a w8a8 model with an fp32 stream"
        linears += [(lin._packed, lin._dense_packed, lin.bias, str(lin.dense_dtype).replace("torch.", "")) for lin in lins]
    if model.embed_tokens.weight.device.type != "cpu":
        return None, "CPU only (PyTorch's quantized kernels)"
    ext = load_extension()
    if ext is None:
        return None, f"not built: {build_error()}"
    norms = [n for layer in layers for n in (layer.input_layernorm, layer.post_attention_layernorm)]
    cfg = model.cfg
    native = ext.NativeLayers([n.weight.detach() for n in norms], [n.weight_fp32 for n in norms], linears,
                              float(cfg.rms_eps), cfg.n_heads, cfg.n_kv_heads, cfg.head_dim)
    return native, "on"


__all__ = ["NATIVE_ENV", "build_error", "built_path", "enabled", "load_extension", "native_layers_for", "native_dir"]
