"""In-process diffusion LLM engine. Knows nothing about audio.

    from engine import Engine
    eng = Engine.load("default")
    r = eng.chat([{"role": "user", "content": "Hi!"}], reasoning_effort="instant")
"""

import os

# OpenMP's busy-wait collapses throughput 10x when cores are shared (measured: prefill 7.3 s vs
# 0.37 s on 2 busy cores); passive waiting costs nothing measurable on an idle machine.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


from engine.api import ChatResult, Engine, EngineInputError, Session, StreamEvent
from engine.effort import EFFORTS

__all__ = ["Engine", "Session", "ChatResult", "StreamEvent", "EngineInputError", "EFFORTS"]
