"""Native layers: every layer of a w8a8 pass over a KV cache in one C++ call (engine/csrc/).

A narrow pass (the verify passes of a decode: 1-8 tokens) is short on arithmetic, so on a CPU its time
goes to Python, per-op dispatch and the int8 kernel's set-up: ~25 ATen calls and 6 module calls a layer.
- native_layers.cpp runs the layer loop with the GIL released. A wide pass (a turn's first pass, which
  carries its new prompt, and prefills) makes the same ATen calls in the same order as engine/model/transformer.py,
  bit-identical to it (tests/engine/unit/test_native.py), through the packed de-quantised weights.
- narrow_kernels.cpp: in a narrow pass, hand loops replace the ops between the linears (RMSNorm, RoPE and
  the cache write, attention over the cache, SiLU * up): the same numbers up to fp32 rounding; on a
  bf16 cache they round the softmax weights to bf16 as SDPA's flash kernel does (tests/engine/unit/test_native.py).
- int8_gemv.cpp (`Int8Matrix`, also what W8A8Linear runs for 1-2 rows; 1-4 in narrow_pass.cpp): int8 products with
  AVX512-VNNI, AVX-VNNI or AVX2 that read each weight row once, with PyTorch's dynamic int8 numbers
  (tests/engine/unit/test_int8_gemv.py).
- narrow_pass.cpp: a pass of 1-4 rows on several threads runs every layer in one OpenMP region, and
  `narrow_logits` (what `Transformer.logits` calls first) takes such a pass from its token ids to its
  logits there: embedding, RoPE rows and mask read in C++, the final norm and the int8 LM head inside
  the region (after a pass has streamed the weights through the caches, each ATen op costs tens of
  microseconds; docs/benchmarks.md, the session-26 bench).
Measured on an AMD EPYC with AVX512-BF16 (2026-12-06, the default model, 480-token cache, 2 threads,
one process, passes interleaved), ms per pass at 1 / 2 / 3 / 4 / 8 tokens: ATen's ops 10.7 / 10.8 /
11.6 / 13.3 / 20.5, hand loops and Int8Matrix 7.5 / 8.2 / 9.2 / 11.1 / 16.4.

It serves w8a8 models only (the CPU default wherever the int8 kernels run: bf16 models where bf16 is
native, fp32 ones elsewhere) with fused q/k/v and gate/up, no q/k norm and oneDNN-packed weights, in passes
over a KV cache; any other pass runs the Python layers. The
hand loops need head size 64 or 128 and a bf16 or fp32 cache, else a narrow pass takes ATen's ops.

The extension is compiled once, with PyTorch's own `torch.utils.cpp_extension` (g++ and ninja; setup.sh
builds it), into `native_dir()`; each hot loop is compiled for AVX512, AVX2 and baseline x86-64 and
picked when it loads (VOICE_AGENT_CPU_ISA caps that: engine/cpu_isa.py). Where it cannot be built (no
compiler or ninja, found before trying; a failed compile; ARM, where the x86 kernels are left out) the
engine says why once, keeps the cause for `doctor`, and runs the Python layers and PyTorch's int8
kernel: the same model, slower. `VOICE_AGENT_NATIVE=0` turns it off (e.g. to measure the
difference).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
import time
from pathlib import Path
from types import ModuleType

import torch

from engine.config import ENV, engine_config

log = logging.getLogger(__name__)

NATIVE_ENV = ENV["native"]
NATIVE_DIR_ENV = ENV["native_dir"]
CSRC = Path(__file__).resolve().parents[1] / "csrc"
SOURCES = [CSRC / "native_layers.cpp", CSRC / "narrow_kernels.cpp", CSRC / "int8_gemv.cpp", CSRC / "narrow_pass.cpp"]
# -fopenmp: at::parallel_for is OpenMP in ATen's headers; without the flag its pragma is ignored and
# every loop runs on one thread. The process shares torch's libgomp (same soname, loaded first).
CFLAGS = ["-O3", "-fopenmp"]
# VOICE_AGENT_CPU_ISA=avx2 / baseline (engine/cpu_isa.py): the hand loops' clones stop at that level, in
# an extension of its own (the flags are part of its name), so a capped machine runs an AVX2 CPU's code.
_CLONES_UP_TO = {"avx2": ["-DVA_CLONES_UP_TO=3"], "baseline": ["-DVA_CLONES_UP_TO=1"]}


def _cflags() -> list[str]:
    from engine.cpu_isa import CpuIsaError, isa_cap

    try:
        return CFLAGS + _CLONES_UP_TO.get(isa_cap(), [])
    except CpuIsaError:
        return CFLAGS  # said with its code where the precision is resolved


def _extension_name(cflags: list[str]) -> str:
    # Keyed by the torch version (an extension built against another torch's headers must not load) and by
    # the sources, headers included, and flags (torch's own rebuild check reads only the .cpp files).
    digest = hashlib.sha1(b"".join(f.read_bytes() for f in sorted(CSRC.iterdir())) + " ".join(cflags).encode())
    return "voice_agent_layers_" + re.sub(r"\W", "_", torch.__version__) + "_" + digest.hexdigest()[:10]


# The build's flags and name, fixed at import: the name a load looks for is the one these flags build.
BUILD_CFLAGS = _cflags()
EXTENSION = _extension_name(BUILD_CFLAGS)

# torch's build takes a lock file in the build folder and waits, without end, while one exists; a build
# that was killed leaves it behind, and every later load would hang. A build takes ~30-60 s.
STALE_LOCK_S = 600

_lock = threading.Lock()
_state: dict[str, ModuleType | str] = {}  # "module" or "error", once tried


def native_dir() -> Path:
    return engine_config().native_path


def built_path() -> Path:
    """Where the compiled extension lies once built."""
    return native_dir() / f"{EXTENSION}.so"


def enabled() -> bool:
    return engine_config().native_on


def load_extension() -> ModuleType | None:
    """The compiled extension (built on first use, ~30 s on 2 cores), or None where it cannot be built;
    `build_error()` then says why."""
    with _lock:
        if not _state:
            missing = None if built_path().exists() else missing_prerequisite()
            if missing:
                _state["error"] = missing
                log.warning("native layers unavailable, running the Python layers (slower): %s", missing)
                _record_error(missing)
                return None
            try:
                from torch.utils.cpp_extension import load

                native_dir().mkdir(parents=True, exist_ok=True)
                _remove_stale_lock()
                if not built_path().exists():  # say why the first load pauses
                    log.warning("building the native layers once (~30 s) into %s", native_dir())
                _state["module"] = load(EXTENSION, [str(src) for src in SOURCES], extra_cflags=BUILD_CFLAGS,
                                        extra_ldflags=["-fopenmp"],
                                        build_directory=str(native_dir()), verbose=False)
                _record_error(None)
            except Exception as e:  # a failed compile, no OpenMP, a read-only home: the Python layers still run
                _state["error"] = _cause(e)
                log.warning("native layers unavailable, running the Python layers (slower): %s",
                            _state["error"])
                _record_error(_state["error"])
        mod = _state.get("module")
        return mod if isinstance(mod, ModuleType) else None


def missing_prerequisite() -> str | None:
    """What the build lacks on this machine, found without building (so a machine without a compiler
    fails at once, naming it), or None."""
    import shutil

    cxx = os.environ.get("CXX") or "c++"  # what torch.utils.cpp_extension compiles with
    if shutil.which(cxx) is None:
        return f"no C++ compiler ({cxx!r} not found; apt-get install g++, as setup.sh does)"
    from torch.utils.cpp_extension import is_ninja_available

    if not is_ninja_available():
        return "no ninja (apt-get install ninja-build, as setup.sh does)"
    return None


def _cause(error: Exception) -> str:
    """The line of a failed build that says why (the compiler's first error), else its last line."""
    text = str(error).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if re.search(r"\b(fatal error|error):", line):
            return f"{type(error).__name__}: {line[:300]}"
    return f"{type(error).__name__}: {lines[-1][:300] if lines else ''}"


def error_file() -> Path:
    """The last failed build's cause, kept for doctor (removed by a build that succeeds)."""
    return native_dir() / f"{EXTENSION}.error"


def _record_error(cause: str | None) -> None:
    try:
        if cause is None:
            error_file().unlink(missing_ok=True)
        else:
            native_dir().mkdir(parents=True, exist_ok=True)
            error_file().write_text(cause + "\n")
    except OSError:
        pass  # a read-only home: the warning above said it


def last_build_error() -> str | None:
    """Why the native layers failed to build here last time (this process's or an earlier one's)."""
    if build_error():
        return build_error()
    try:
        return error_file().read_text().strip() or None
    except OSError:
        return None


def _remove_stale_lock() -> None:
    lock = native_dir() / "lock"
    try:
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return
    if age > STALE_LOCK_S:
        log.warning("removing %s, left %.0f min ago by a build that did not finish", lock, age / 60)
        lock.unlink(missing_ok=True)


def build_error() -> str | None:
    err = _state.get("error")
    return err if isinstance(err, str) else None


def int8_isa() -> str:
    """The instruction set the native int8 kernels multiply with here ("avx512_vnni", "avx_vnni", "avx2"),
    or "none" where they do not run (off, not built, no AVX2)."""
    ext = load_extension() if enabled() else None
    return ext.Int8Matrix.isa() if ext is not None else "none"


def int8_matrix(q_weight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None):
    """The narrow-pass int8 kernel (engine/csrc/int8_gemv.cpp) for an int8 [N, K] weight, or None where
    it is off, not built, or this CPU has neither AVX512-VNNI nor AVX2 (PyTorch's kernel runs then)."""
    if not enabled():
        return None
    ext = load_extension()
    if ext is None or not ext.Int8Matrix.available(q_weight.shape[1]):
        return None
    return ext.Int8Matrix(q_weight, scales, bias)


__all__ = ["NATIVE_ENV", "build_error", "built_path", "enabled", "error_file", "last_build_error",
           "missing_prerequisite", "int8_isa", "int8_matrix", "load_extension",
           "native_dir"]
