"""`ScriptedBrain`: a Brain over a stand-in model whose `stream(messages, **kw)` yields engine
StreamEvents, for tests of the turn logic that need no model. (An `EngineBrain` needs a real
engine: its turns go through the engine's scheduler.)"""

from __future__ import annotations

from typing import Any

from voice_agent.brain.base import Brain
from voice_agent.brain.engine_bridge import SpeculationStats, _event


class ScriptedBrain(Brain):
    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model
        self.speculation = SpeculationStats()  # what the service ran ahead, counted as for the engine
        self.session = model.session()  # a local model: the service may decode ahead on it

    @property
    def model_name(self) -> str:
        return self.model.model_name

    async def _attempt(self, messages: list[dict], params: dict):
        for ev in self.model.stream(messages, **params):
            yield _event(ev)
