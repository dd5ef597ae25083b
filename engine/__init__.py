"""In-process diffusion LLM engine. Knows nothing about audio.

    from engine import Engine
    eng = Engine.load("default")
    r = eng.chat([{"role": "user", "content": "Hi!"}], reasoning_effort="instant")
"""

import os

# OpenMP's busy-wait collapses throughput 10x when cores are shared (measured: prefill 7.3 s vs
# 0.37 s on 2 busy cores). Passive waiting costs a wake-up per parallel op instead (a 1-token pass
# on 2 idle threads: 17 ms against 10 ms spinning), so a narrow pass runs on one thread or all,
# whichever measures cheaper on the machine (engine/pass_threads.py).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _cap_libraries() -> None:
    # VOICE_AGENT_CPU_ISA (engine/cpu_isa.py) makes the machine act as a slower CPU kind; PyTorch's
    # kernels read their own variables once, at first use, so they are set here, before torch loads.
    from engine.cpu_isa import CpuIsaError, library_env  # torch-free, as `voice-agent --help` needs

    try:
        for name, value in library_env().items():
            os.environ.setdefault(name, value)
    except CpuIsaError:
        pass  # said, with its code, where the engine loads (engine.precision)


_cap_libraries()

__all__ = ["Engine", "Session", "ChatResult", "StreamEvent", "EngineError", "EngineInputError", "EFFORTS"]

_PUBLIC = {"Engine": "engine.api", "Session": "engine.session", "ChatResult": "engine.results",
           "StreamEvent": "engine.results", "EngineError": "engine.errors", "EngineInputError": "engine.errors",
           "EFFORTS": "engine.effort"}


def __getattr__(name: str):
    # Imported on first use (PEP 562), so that the torch-free tool modules (engine.tool_args) can be
    # imported by `voice-agent --help` without loading torch.
    if name in _PUBLIC:
        import importlib

        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
