"""LiveKit Agents plugins backed by this project's in-process parts, and the worker that uses them.

Import them the way LiveKit users import `livekit.plugins.openai.LLM`:

    from livekit.agents import AgentSession
    from livekit.plugins import silero
    from voice_agent.livekit import EngineLLM, HibariTTS, WhisperSTT

    session = AgentSession(
        llm=EngineLLM("default", reasoning_effort="low"),  # the diffusion engine, in process
        stt=WhisperSTT(),                                   # faster-whisper tiny.en, offline
        tts=HibariTTS(),                                    # hibari, 24 kHz, offline
        vad=silero.VAD.load(),
    )

- `EngineLLM` (llm.py): streaming answer text, tool calls as FunctionToolCall, usage and
  metrics; reasoning is never spoken. See llm.py for the details.
- `WhisperSTT` (stt.py) and `HibariTTS` (tts.py): non-streaming STT/TTS adapters; AgentSession
  wraps them with its VAD / sentence StreamAdapters.
- `ScenarioAgent` (agent.py): an Agent whose tools are a scenario's YAML tool schemas bound to
  the handlers of the pack's backend.
- worker.py: `voice-agent livekit-worker`, an AgentServer whose rooms (SIP calls) get an
  AgentSession on the pieces above.

Names resolve lazily so that importing EngineLLM does not load Whisper or Hibari.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from voice_agent.livekit.agent import ScenarioAgent
    from voice_agent.livekit.llm import EngineLLM, EngineLLMStream, EngineTurnMetrics
    from voice_agent.livekit.stt import WhisperSTT
    from voice_agent.livekit.tts import HibariTTS

_WHERE = {
    "EngineLLM": "llm",
    "EngineLLMStream": "llm",
    "EngineTurnMetrics": "llm",
    "WhisperSTT": "stt",
    "HibariTTS": "tts",
    "ScenarioAgent": "agent",
}

__all__ = ["EngineLLM", "EngineLLMStream", "EngineTurnMetrics", "WhisperSTT", "HibariTTS", "ScenarioAgent"]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"voice_agent.livekit.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
