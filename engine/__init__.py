"""In-process diffusion LLM engine. Knows nothing about audio.

    from engine import Engine
    eng = Engine.load("default")
    r = eng.chat([{"role": "user", "content": "Hi!"}], reasoning_effort="instant")
"""

from engine.api import ChatResult, Engine, EngineInputError, Session, StreamEvent
from engine.effort import EFFORTS

__all__ = ["Engine", "Session", "ChatResult", "StreamEvent", "EngineInputError", "EFFORTS"]
