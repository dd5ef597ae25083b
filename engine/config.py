"""`EngineConfig`: every engine setting, its default and its environment variable, in one place.

The environment is read here and nowhere else in the engine (`engine_config()`); each module checks its
own setting's value and raises its own coded error (engine/errors.py). `doctor` and `voice-agent --help`
show `EngineConfig.rows()`. This module imports nothing of ours and no torch: `engine/__init__` and
`voice-agent --help` read it before torch loads.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

DEFAULT_MAX_TOKENS = 256   # most tokens a reply (reasoning included) may take, unless a request says
DEFAULT_MAX_CONTEXT = 4096
PRECISIONS = ("auto", "fp32", "bf16", "int8", "w8a8")  # (+ the aliases float32, bfloat16)
PRECISION_ALIASES = {"float32": "fp32", "bfloat16": "bf16"}


@dataclass(frozen=True)
class EngineConfig:
    """The engine's settings as the environment sets them (`from_env`), each with its default."""

    precision: str = "auto"          # VOICE_AGENT_PRECISION: weights and activations (engine/model/precision.py)
    cpu_isa: str = "auto"            # VOICE_AGENT_CPU_ISA: act as a slower CPU kind (engine/cpu_isa.py)
    native: str = "1"                # VOICE_AGENT_NATIVE: 0 turns the native layers off (engine/model/native.py)
    native_dir: str = ""             # VOICE_AGENT_NATIVE_DIR: where the extension is built (default: cache/native)
    cache_dir: str = ""              # VOICE_AGENT_CACHE: de-quantised weights, native build, pass costs
    narrow_threads: str = "auto"     # VOICE_AGENT_NARROW_THREADS: auto | one | all (engine/runtime/pass_threads.py)
    pass_costs: str = "measured"     # VOICE_AGENT_PASS_COSTS: measured | table (engine/runtime/pass_calibration.py)
    pass_costs_dir: str = ""         # VOICE_AGENT_PASS_COSTS_DIR: kept pass-cost curves (default: cache/pass_costs)
    fp32_linears: str = "packed"     # VOICE_AGENT_FP32_LINEARS: packed (oneDNN) | dense (MKL)
    api_key: str = ""                # VOICE_AGENT_API_KEY: the server's bearer key (empty: no key)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> EngineConfig:
        env = os.environ if env is None else env
        values = {}
        for f in fields(cls):
            raw = env.get(ENV[f.name])
            if raw is not None and raw.strip():
                values[f.name] = raw.strip() if f.name in _KEEP_CASE else raw.strip().lower()
        return cls(**values)

    @property
    def cache_root(self) -> Path:
        return Path(self.cache_dir) if self.cache_dir else Path.home() / ".cache" / "voice-agent"

    @property
    def native_on(self) -> bool:
        return self.native not in ("0", "off", "false", "no")

    @property
    def native_path(self) -> Path:
        return Path(self.native_dir) if self.native_dir else self.cache_root / "native"

    @property
    def pass_costs_path(self) -> Path:
        return Path(self.pass_costs_dir) if self.pass_costs_dir else self.cache_root / "pass_costs"

    def is_set(self, name: str) -> bool:
        return getattr(self, name) != getattr(DEFAULTS, name)

    def rows(self) -> list[tuple[str, str, str, str]]:
        """(environment variable, value in force, default, what it sets), for doctor and --help."""
        out = []
        for f in fields(self):
            value = getattr(self, f.name)
            shown = "(set)" if f.name == "api_key" and value else (value or "-")
            out.append((ENV[f.name], shown, getattr(DEFAULTS, f.name) or "-", HELP[f.name]))
        return out


ENV = {f.name: "VOICE_AGENT_" + ("CACHE" if f.name == "cache_dir" else f.name.upper()) for f in fields(EngineConfig)}
_KEEP_CASE = {"native_dir", "cache_dir", "pass_costs_dir", "api_key"}
HELP = {
    "precision": "weights and activations: auto, fp32, bf16, int8, w8a8",
    "cpu_isa": "act as a slower CPU kind: auto, avx512, avx2, baseline",
    "native": "0 turns the native C++ layers off",
    "native_dir": "where the native extension is built (default: <cache>/native)",
    "cache_dir": "the engine's cache folder (default: ~/.cache/voice-agent)",
    "narrow_threads": "narrow passes on auto (measured), one or all threads",
    "pass_costs": "pass widths from measured costs or the shipped table",
    "pass_costs_dir": "where measured pass costs are kept (default: <cache>/pass_costs)",
    "fp32_linears": "fp32 linears: packed (oneDNN) or dense (MKL)",
    "api_key": "the HTTP server's bearer key",
}
DEFAULTS = EngineConfig()


def engine_config() -> EngineConfig:
    """The settings in force: the environment as it is now. Parsed once per distinct environment, so a
    process that sets a variable before loading (a test, a CLI flag) is seen."""
    key = tuple(os.environ.get(v) for v in ENV.values())
    if _cache.get("key") != key:
        _cache["key"], _cache["config"] = key, EngineConfig.from_env()
    return _cache["config"]


_cache: dict = {}


def settings_text(config: EngineConfig | None = None) -> str:
    """The settings as lines for `--help` and doctor."""
    rows = (config or engine_config()).rows()
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"  {env:<{width}}  {value:<10} {what}" + (f" (default {default})" if default != "-" else "")
                     for env, value, default, what in rows)
