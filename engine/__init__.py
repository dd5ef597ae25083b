"""In-process diffusion LLM engine. Knows nothing about audio.

    from engine import Engine
    eng = Engine.load("default")
    r = eng.chat([{"role": "user", "content": "Hi!"}], reasoning_effort="instant")

Code outside engine/ imports only the names in `_PUBLIC` below, as `from engine import X`
(tests/project/test_import_cycles.py checks voice_agent/); the folders inside are in layers (docs/engine.md).
"""

import os

# OpenMP's busy-wait collapses throughput 10x when cores are shared (measured: prefill 7.3 s vs
# 0.37 s on 2 busy cores). Passive waiting costs a wake-up per parallel op instead (a 1-token pass
# on 2 idle threads: 17 ms against 10 ms spinning), so a narrow pass runs on one thread or all,
# whichever measures cheaper on the machine (engine/runtime/pass_threads.py).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _cap_libraries() -> None:
    # VOICE_AGENT_CPU_ISA (engine/cpu_isa.py) makes the machine act as a slower CPU kind; PyTorch's
    # kernels read their own variables once, at first use, so they are set here, before torch loads.
    from engine.cpu_isa import CpuIsaError, library_env  # torch-free, as `voice-agent --help` needs

    try:
        for name, value in library_env().items():
            os.environ.setdefault(name, value)
    except CpuIsaError:
        pass  # said, with its code, where the engine loads (engine.model.precision)


_cap_libraries()

# The public surface: what callers outside engine/ (voice_agent, tests of the whole) import, as
# `from engine import X`. name -> (module, attribute; None: the module itself).
_PUBLIC: dict[str, tuple[str, str | None]] = {
    # the engine and its results
    "Engine": ("engine.api", "Engine"), "DEFAULT_ADAPTER": ("engine.api", "DEFAULT_ADAPTER"),
    "Session": ("engine.runtime.session", "Session"), "ChatResult": ("engine.runtime.results", "ChatResult"),
    "StreamEvent": ("engine.runtime.results", "StreamEvent"), "EFFORTS": ("engine.runtime.effort", "EFFORTS"),
    "EngineError": ("engine.errors", "EngineError"), "EngineInputError": ("engine.errors", "EngineInputError"),
    "SettingError": ("engine.errors", "SettingError"),
    # settings
    "EngineConfig": ("engine.config", "EngineConfig"), "engine_config": ("engine.config", "engine_config"),
    "settings_text": ("engine.config", "settings_text"), "DEFAULT_MAX_TOKENS": ("engine.config", "DEFAULT_MAX_TOKENS"),
    # text: the chat format and the words a call's arguments copy
    "ChatFormat": ("engine.text.chat_format", "ChatFormat"), "tool_call_text": ("engine.text.chat_format", "tool_call_text"),
    **{n: ("engine.text.grounding", n) for n in (
        "GROUNDED_BY_KIND", "GROUNDED_KEY", "KIND_KEY", "WORD_RE", "ground_calls", "grounded_arguments",
        "grounded_kinds", "grounding_mark", "nearest_span", "source_texts")},
    # serving and its tools
    "Rejected": ("engine.serve.scheduler", "Rejected"), "SchedulerPool": ("engine.serve.scheduler_pool", "SchedulerPool"),
    "ServerThread": ("engine.serve.server", "ServerThread"), "run_server": ("engine.serve.server", "run_from_args"),
    "serve_arguments": ("engine.serve.tool_args", "serve_arguments"),
    "loadtest_arguments": ("engine.serve.tool_args", "loadtest_arguments"),
    "soak_arguments": ("engine.serve.tool_args", "soak_arguments"),
    "run_loadtest": ("engine.tools.loadtest", "run"), "run_soak": ("engine.tools.soak", "run"),
    # the machine, as doctor reports it
    "CpuIsaError": ("engine.cpu_isa", "CpuIsaError"), "cpu_flags": ("engine.cpu_isa", "cpu_flags"),
    "describe_cpu": ("engine.cpu_isa", "describe"), "int8_kernel_isa": ("engine.cpu_isa", "int8_kernel_isa"),
    "native": ("engine.model.native", None), "native_bf16_flags": ("engine.model.precision", "native_bf16_flags"),
    "resolve_precision": ("engine.model.precision", "resolve_precision"),
    "narrow_threads_mode": ("engine.runtime.pass_threads", "narrow_threads_mode"),
    "NARROW_THREADS_ENV": ("engine.runtime.pass_threads", "NARROW_THREADS_ENV"),
    "SMOLLM2_GGUF": ("engine.model.loading", "SMOLLM2_GGUF"), "cache_root": ("engine.model.loading", "cache_root"),
    "llamacpp_available": ("engine.tools.peer_llamacpp", "llamacpp_available"),
    "llamacpp_system_info": ("engine.tools.peer_llamacpp", "llamacpp_system_info"),
    # training the adapter
    "TrainConfig": ("engine.train.trainer", "TrainConfig"), "fit_adapter": ("engine.train.trainer", "fit"),
    "export_adapter": ("engine.train.trainer", "export"),
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    # Imported on first use (PEP 562), so that `voice-agent --help` and the torch-free tool modules
    # (engine.serve.tool_args, engine.config) load without torch.
    if name in _PUBLIC:
        import importlib

        module, attr = _PUBLIC[name]
        value = importlib.import_module(module)
        value = value if attr is None else getattr(value, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
