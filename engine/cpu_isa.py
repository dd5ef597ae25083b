"""What this CPU runs: its flags, one cap on them for forcing a slower kind, and the paths that follow.

    VOICE_AGENT_CPU_ISA=auto|avx512|avx2|baseline

The engine's code paths differ by CPU kind (AVX512 with BF16, AVX512 without it, AVX2 only), and a
developer rarely has all three. The cap makes a machine act as the named kind *everywhere the engine
chooses*: the flags every chooser reads (`cpu_flags`), the int8 kernels' instruction set
(engine/csrc/int8_gemv.cpp reads the same variable), the hand loops' clones (engine/model/native.py builds a
separate extension for a capped level) and, set before torch is imported (engine/__init__.py does so
where it can), PyTorch's own kernels: ATen (`ATEN_CPU_CAPABILITY`), oneDNN (`ONEDNN_MAX_CPU_ISA`) and
FBGEMM (`FBGEMM_ENABLE_INSTRUCTIONS`). What it cannot change is the memory system, so speed figures from
a capped machine are the instruction set's, at that machine's bandwidth.

- `avx512`: AVX512 without BF16 or AMX (an Intel Xeon of the Skylake/Cascade Lake kind);
- `avx2`: AVX2 and FMA only, no AVX512, no AVX-VNNI (many laptops, older AMD EPYCs);
- `baseline`: x86-64 without AVX2 (the native int8 kernels stand down; PyTorch's run).
"""

from __future__ import annotations

import platform
from pathlib import Path

from engine.config import ENV, engine_config
from engine.errors import SettingError

CPU_ISA_ENV = ENV["cpu_isa"]
CPU_ISA_LEVELS = ("auto", "avx512", "avx2", "baseline")

# Flags each cap removes (a prefix ends with "*")
_DROPPED = {
    "auto": (),
    "avx512": ("avx512_bf16", "amx*", "avx_ne_convert", "avx512_fp16", "avx_vnni"),
    "avx2": ("avx512*", "amx*", "avx_vnni", "avx_ne_convert", "avx_vnni_int8"),
    "baseline": ("avx512*", "amx*", "avx_vnni", "avx_ne_convert", "avx_vnni_int8", "avx2", "fma", "f16c", "bmi2"),
}
# The names PyTorch's libraries take for each cap (each reads its variable once, at first use)
_LIBRARY_ENV = {
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI",
               "FBGEMM_ENABLE_INSTRUCTIONS": "AVX512"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2"},
    "baseline": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41"},
}


class CpuIsaError(SettingError):
    code = "invalid_cpu_isa"
    param = "cpu_isa"


def isa_cap() -> str:
    """The cap in force: $VOICE_AGENT_CPU_ISA, else "auto" (the CPU as it is)."""
    raw = engine_config().cpu_isa
    if raw not in CPU_ISA_LEVELS:
        raise CpuIsaError(f"{CPU_ISA_ENV} must be one of {', '.join(CPU_ISA_LEVELS)}; got {raw!r}")
    return raw


def _dropped(flag: str, cap: str) -> bool:
    return any(flag.startswith(d[:-1]) if d.endswith("*") else flag == d for d in _DROPPED[cap])


def raw_cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The CPU's own flags (and the rest of /proc/cpuinfo's words); empty where it cannot be read."""
    try:
        return set(cpuinfo.read_text().split())
    except OSError:
        return set()


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """This CPU's flags as the engine chooses by them: the CPU's own, less those the cap removes."""
    cap = isa_cap()
    return {f for f in raw_cpu_flags(cpuinfo) if not _dropped(f, cap)}


def is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


def int8_kernel_isa(flags: set[str] | None = None) -> str | None:
    """The instruction set the native int8 kernels multiply with here (what engine/csrc/int8_gemv.cpp
    picks for the same flags and cap), or None (PyTorch's kernels run)."""
    flags = cpu_flags() if flags is None else flags
    if not is_x86():
        return None
    if {"avx512_vnni", "avx512bw"} <= flags:
        return "avx512_vnni"
    if {"avx_vnni", "avx2"} <= flags:
        return "avx_vnni"
    if "avx2" in flags:
        return "avx2"
    return None


def packs_bf16(flags: set[str] | None = None) -> bool:
    """Whether oneDNN can reorder a bf16 weight into its blocked layout here: PyTorch refuses without
    AVX512BW/VL/DQ or AVX-NE-CONVERT ("mkldnn_reorder_linear_weight: bf16 path needs ..."), as on an
    AVX2-only CPU; a bf16 weight then stays a plain tensor."""
    flags = cpu_flags() if flags is None else flags
    return {"avx512bw", "avx512vl", "avx512dq"} <= flags or "avx_ne_convert" in flags or "amx_bf16" in flags


def library_env() -> dict[str, str]:
    """The environment PyTorch's kernels need to act as the capped kind (empty without a cap)."""
    return dict(_LIBRARY_ENV.get(isa_cap(), {}))


def describe(flags: set[str] | None = None) -> str:
    """One line for doctor and the bench: the SIMD flags that matter, and the cap if one is set."""
    flags = cpu_flags() if flags is None else flags
    shown = [f for f in ("avx2", "avx_vnni", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16") if f in flags]
    text = ", ".join(shown) if shown else f"none of AVX2/AVX512 ({platform.machine()})"
    cap = isa_cap()
    return text + (f" (capped: {CPU_ISA_ENV}={cap})" if cap != "auto" else "")


__all__ = ["CPU_ISA_ENV", "CPU_ISA_LEVELS", "CpuIsaError", "cpu_flags", "describe", "int8_kernel_isa", "is_x86",
           "isa_cap", "library_env", "packs_bf16", "raw_cpu_flags"]
