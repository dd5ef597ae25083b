"""The process-wide engine: one per model (and precision, threads) per process. Every call and
room shares its weights; each call has its own session (KV cache)."""

from __future__ import annotations

import threading
from typing import Any

_engines: dict[tuple, Any] = {}
_lock = threading.Lock()


def call_engine(model: str, scenario: Any, **load_kwargs: Any) -> Any:
    """The shared engine for a call of `scenario`: with the pack's own adapter when it has one
    (`voice-agent train --scenario`), else the shipped one."""
    from voice_agent.packs.adapter import pack_adapter

    adapter = pack_adapter(scenario, model)
    return shared_engine(model, **load_kwargs, **({"adapter": str(adapter)} if adapter else {}))


def shared_engine(model: str = "default", **load_kwargs: Any) -> Any:
    """`Engine.load(model, **load_kwargs)`, once per process for the same arguments (None values
    mean the engine's defaults and are left out)."""
    kwargs = {k: v for k, v in load_kwargs.items() if v is not None}
    key = (str(model), tuple(sorted(kwargs.items())))
    with _lock:
        if key not in _engines:
            from engine import Engine

            _engines[key] = Engine.load(model, **kwargs)
        return _engines[key]
