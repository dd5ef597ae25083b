"""The LLM behind a call, one policy for every framework: `Brain.turn()` streams reasoning and
answer events, then a result; barge-in keeps the KV cache; one history-trimming rule; errors with
codes. `EngineBrain` runs the in-process engine, `RemoteBrain` an OpenAI-compatible server.

    brain = make_brain(options)              # options.llm_url set: remote, else in-process
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from voice_agent.brain.base import TURN_PARAMS, Brain
from voice_agent.brain.trim import HistoryTrimmer, drop_oldest_turn
from voice_agent.brain.types import BrainError, TurnEvent, TurnResult

if TYPE_CHECKING:
    from voice_agent.config import CallOptions

__all__ = ["Brain", "BrainError", "TurnEvent", "TurnResult", "HistoryTrimmer", "drop_oldest_turn", "TURN_PARAMS",
           "make_brain"]


def make_brain(options: CallOptions, *, engine: Any = None, session: Any = None) -> Brain:
    """A new call's brain: on `options.llm_url` if set (no engine is loaded), else on `engine` (or
    the process's shared engine for `options.model`), with `session` or a fresh one."""
    if options.llm_url:
        from voice_agent.brain.remote import RemoteBrain

        return RemoteBrain(options.llm_url, options.llm_model, api_key=options.llm_api_key,
                           timeout_s=options.llm_timeout_s)
    from voice_agent.brain.engine_bridge import EngineBrain

    if engine is None:
        from voice_agent.engine_host import call_engine

        engine = call_engine(options.model, options.scenario, precision=options.precision,
                             threads=options.engine_threads)
    return EngineBrain(engine, session)
