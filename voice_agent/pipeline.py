"""`build_pipeline(transport, scenario, options)`: THE pipeline, shared by every entry point
(mic, phone, room, replay).

    transport.input() -> STT -> user context aggregator (Silero VAD + turn strategy)
        -> EngineLLMService -> TTS -> transport.output() -> assistant context aggregator

- Turn end: Silero VAD plus a short speech timeout (default, for latency), or Smart Turn v3
  (`smart_turn=True`, the bundled ONNX model) for fewer cut-offs at some extra delay.
- Barge-in: caller speech during bot speech interrupts it (`allow_interruptions`).
- Metrics on (TTFB, processing, usage), the engine's per-turn metrics as EngineMetricsFrame, and
  any observers the caller passes (the replay helper passes its latency observer).
- The LLM is the call's brain (voice_agent/brain): the in-process engine, loaded once per process
  and shared, with a Session (KV cache) per call; or, with `options.llm_url`, an OpenAI-compatible
  server (no engine is loaded).
- Every knob is a `CallOptions` field (voice_agent/config.py); `PipelineOptions` is its old name.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from typing import Any

from loguru import logger
from pipecat.audio.vad.vad_analyzer import VADParams
from pipecat.frames.frames import TTSSpeakFrame
from pipecat.observers.base_observer import BaseObserver
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.services.tts_service import TTSService
from pipecat.transports.base_transport import BaseTransport
from pipecat.turns.user_start import TranscriptionUserTurnStartStrategy, VADUserTurnStartStrategy
from pipecat.turns.user_stop import SpeechTimeoutUserTurnStopStrategy, TurnAnalyzerUserTurnStopStrategy
from pipecat.turns.user_turn_strategies import UserTurnStrategies

from voice_agent.brain import make_brain
from voice_agent.config import CallOptions
from voice_agent.scenarios import Scenario, load_scenario
from voice_agent.services.llm import EngineLLMService, tools_schema
from voice_agent.services.speculative_prefill import SpeculativePrefill
from voice_agent.services.stt import LocalWhisperSTTService
from voice_agent.services.tts import make_tts
from voice_agent.services.turn_stop import HoldOnSpeechStopStrategy
from voice_agent.services.vad import PauseAwareSileroVAD

PipelineOptions = CallOptions  # the name the entry points used before CallOptions


@dataclass
class CallPipeline:
    """What `build_pipeline` returns: the worker to run, and handles a caller may need."""

    task: PipelineWorker          # run it with WorkerRunner (or the deprecated PipelineRunner)
    pipeline: Pipeline
    llm: EngineLLMService
    context: LLMContext
    aggregators: LLMContextAggregatorPair
    stt: LocalWhisperSTTService
    tts: TTSService
    transport: BaseTransport
    scenario: Scenario
    options: PipelineOptions

    @property
    def worker(self) -> PipelineWorker:
        return self.task


def load_engine(model: str = "default", precision: str | None = None, threads: int | None = None,
                scenario: object = None):
    """One engine per process and model: calls share the weights, each has its own session. With
    `scenario`, the pack's own adapter when it has one."""
    from voice_agent.engine_host import call_engine

    return call_engine(model, scenario, precision=precision, threads=threads)


def build_pipeline(transport: BaseTransport, scenario: Scenario | str, options: PipelineOptions | None = None,
                   *, engine: Any = None, session: Any = None, observers: list[BaseObserver] | None = None,
                   backend: Any = None, today: dt.date | None = None) -> CallPipeline:
    options = options or PipelineOptions()
    if isinstance(scenario, str):
        scenario = load_scenario(scenario)
    brain = make_brain(options, engine=engine, session=session)
    effort = options.reasoning_effort or scenario.reasoning_effort
    # The call's tools: the scenario's backend on the live store, unless the caller brings one (replay's own).
    backend = backend if backend is not None else scenario.open_backend(options.store, today)

    stt = LocalWhisperSTTService(stt_model=options.stt_model, cpu_threads=options.stt_threads,
                                 window=options.stt_window, early=options.early_stt)
    llm = EngineLLMService(
        brain, system_instruction=scenario.system_prompt_for(today), reasoning_effort=effort,
        max_tokens=options.max_tokens, temperature=options.temperature, tools=scenario.bind_handlers(backend),
        filler=scenario.filler, filler_after_s=options.filler_after_s, policy=scenario.policy,
        decode_ahead=options.decodes_ahead, read_only_tools=scenario.read_only)
    tts = make_tts(options.tts, voice_path=options.tts_voice_path, model_dir=options.tts_model_dir,
                   first_clause_words=options.first_clause_words)

    context = LLMContext(messages=[], tools=tools_schema(scenario.tools)) if scenario.tools else LLMContext()
    vad = PauseAwareSileroVAD(params=VADParams(confidence=options.vad_confidence, start_secs=options.vad_start_secs,
                                               stop_secs=options.vad_stop_secs, min_volume=options.vad_min_volume))
    vad.add_listener(stt)  # pauses and resumptions: the STT starts on the first silent frame
    aggregators = LLMContextAggregatorPair(context, user_params=LLMUserAggregatorParams(
        vad_analyzer=vad, user_turn_strategies=_turn_strategies(options, vad)))

    # The caller's words are prefilled while the end of the turn is decided (the remote brain has no cache to fill).
    ahead = [SpeculativePrefill(llm, context)] if options.speculative_prefill and not options.remote else []
    pipeline = Pipeline([
        transport.input(), stt, *ahead, aggregators.user(), llm, tts, *options.extra_processors,
        transport.output(), aggregators.assistant(),
    ])
    task = PipelineWorker(
        pipeline,
        params=PipelineParams(enable_metrics=True, enable_usage_metrics=True,
                              audio_in_sample_rate=options.audio_in_sample_rate,
                              audio_out_sample_rate=options.audio_out_sample_rate),
        observers=list(observers or []),
        idle_timeout_secs=options.idle_timeout_secs,
    )
    @task.event_handler("on_pipeline_started")
    async def _started(worker: PipelineWorker, _frame: Any) -> None:
        if options.warm_prefill:
            await llm.warm(context)  # in the background, while the greeting plays
        if options.greeting and scenario.greeting:
            await worker.queue_frame(TTSSpeakFrame(scenario.greeting))

    logger.info(f"pipeline: scenario={scenario.name} model={brain.model_name}"
                f"{f' at {options.llm_url}' if options.llm_url else ''} reasoning_effort={effort} "
                f"stt={options.stt_model} ({options.stt_window} window, early={options.early_stt}) "
                f"warm_prefill={options.warm_prefill} speculative_prefill={bool(ahead)} decode_ahead={llm.decode_ahead} "
                f"tts={options.tts} smart_turn={options.smart_turn} "
                f"vad_stop_secs={options.vad_stop_secs}")
    return CallPipeline(task=task, pipeline=pipeline, llm=llm, context=context, aggregators=aggregators,
                        stt=stt, tts=tts, transport=transport, scenario=scenario, options=options)


def _turn_strategies(options: PipelineOptions, vad: PauseAwareSileroVAD | None = None) -> UserTurnStrategies:
    """The turn strategies of a call; `vad` (the call's analyzer) lets the stop hold for speech."""
    start = [VADUserTurnStartStrategy(enable_interruptions=options.allow_interruptions),
             TranscriptionUserTurnStartStrategy(enable_interruptions=options.allow_interruptions)]
    if options.smart_turn:
        from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3

        stop = [TurnAnalyzerUserTurnStopStrategy(turn_analyzer=LocalSmartTurnAnalyzerV3())]
    elif options.hold_on_speech and vad is not None:
        # A caller going on after a pause is confirmed start_secs late: let the VAD decide first.
        stop = [HoldOnSpeechStopStrategy(vad=vad, max_hold_s=options.vad_start_secs + 0.05,
                                         user_speech_timeout=options.user_speech_timeout,
                                         complete_s=options.turn_end_complete_s,
                                         incomplete_s=options.turn_end_incomplete_s)]
    else:
        stop = [SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=options.user_speech_timeout)]
    return UserTurnStrategies(start=start, stop=stop)


def phone_options(options: PipelineOptions) -> PipelineOptions:
    """Phone lines carry 8 kHz audio: synthesize at 8 kHz directly instead of resampling twice."""
    return replace(options, audio_out_sample_rate=8000)
