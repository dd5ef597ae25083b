"""`build_pipeline(transport, scenario, options)`: THE pipeline, shared by every entry point
(mic, phone, room, replay).

    transport.input() -> STT -> user context aggregator (Silero VAD + turn strategy)
        -> EngineLLMService -> TTS -> transport.output() -> assistant context aggregator

- Turn end: Silero VAD plus a short speech timeout (default, for latency), or Smart Turn v3
  (`smart_turn=True`, the bundled ONNX model) for fewer cut-offs at some extra delay.
- Barge-in: caller speech during bot speech interrupts it (`allow_interruptions`).
- Metrics on (TTFB, processing, usage), the engine's per-turn metrics as EngineMetricsFrame, and
  any observers the caller passes (the replay helper passes its latency observer).
- The engine is loaded once per process and shared; each call gets its own Session (KV cache).
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass, field, replace
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

from voice_agent.clinic_db import ClinicDB
from voice_agent.scenarios import Scenario, load_scenario
from voice_agent.services.llm import EngineLLMService, tools_schema
from voice_agent.services.stt import LocalWhisperSTTService
from voice_agent.services.tts import make_tts
from voice_agent.services.turn_stop import HoldOnSpeechStopStrategy
from voice_agent.services.vad import PauseAwareSileroVAD


@dataclass
class PipelineOptions:
    model: str = "default"                 # "default", "smollm2-base", or a local checkpoint folder
    stt_model: str = "tiny.en"             # "tiny.en", "base", or a CTranslate2 Whisper folder
    stt_window: str = "short"              # Whisper's encoder window: "short" (sized to the segment) or "30s"
    early_stt: bool = True                 # transcribe from the first silent frame, during the VAD's stop wait
    reasoning_effort: str | None = None    # None: the scenario's
    smart_turn: bool = False               # Smart Turn v3 end-of-turn model (adds ~100-300 ms)
    vad_stop_secs: float = 0.2             # silence that ends a VAD speech segment
    vad_start_secs: float = 0.2            # speech that starts one (also the barge-in delay)
    vad_confidence: float = 0.7
    # Loudness gate (0..1). Pipecat's 0.6 is measured over a 400 ms window and delayed barge-in to
    # ~650 ms after the caller's speech onset on the phone test; 0.4 brought it to ~280 ms.
    vad_min_volume: float = 0.4
    user_speech_timeout: float = 0.2       # after VAD stop, wait this long for more speech
    hold_on_speech: bool = True            # ... and longer while the VAD hears speech not yet confirmed
    allow_interruptions: bool = True       # barge-in
    greeting: bool = True                  # speak the scenario's greeting when the call starts
    tts: str = "hibari"                    # hibari | piper | coqui
    tts_voice_path: str | None = None      # piper voice .onnx
    tts_model_dir: str | None = None       # Coqui model folder
    max_tokens: int = 256
    filler_after_s: float = 0.4            # speak the scenario's filler if a tool runs longer
    stt_threads: int = 2
    audio_in_sample_rate: int = 16000      # what VAD and Whisper get (transports resample)
    audio_out_sample_rate: int = 24000     # hibari's native rate; phone lines use 8000
    db_path: str | None = None             # the clinic database (default ~/.cache/voice-agent)
    idle_timeout_secs: float | None = 300  # end a call nobody has spoken on for this long
    extra_processors: list[Any] = field(default_factory=list)  # inserted after the TTS


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


@functools.lru_cache(maxsize=2)
def load_engine(model: str = "default"):
    """One engine per process and model: calls share the weights, each has its own session."""
    from engine import Engine

    return Engine.load(model)


@functools.lru_cache(maxsize=4)
def clinic_db(path: str | None = None) -> ClinicDB:
    return ClinicDB(path)


def build_pipeline(transport: BaseTransport, scenario: Scenario | str, options: PipelineOptions | None = None,
                   *, engine: Any = None, session: Any = None, observers: list[BaseObserver] | None = None,
                   tool_backends: list[Any] | None = None, today: dt.date | None = None) -> CallPipeline:
    options = options or PipelineOptions()
    if isinstance(scenario, str):
        scenario = load_scenario(scenario)
    engine = engine if engine is not None else load_engine(options.model)
    effort = options.reasoning_effort or scenario.reasoning_effort
    backends = tool_backends if tool_backends is not None else [clinic_db(options.db_path)]

    stt = LocalWhisperSTTService(stt_model=options.stt_model, cpu_threads=options.stt_threads,
                                 window=options.stt_window, early=options.early_stt)
    llm = EngineLLMService(
        engine, session=session, system_instruction=scenario.system_prompt_for(today),
        reasoning_effort=effort, max_tokens=options.max_tokens, tools=scenario.bind_handlers(*backends),
        filler=scenario.filler, filler_after_s=options.filler_after_s)
    tts = make_tts(options.tts, voice_path=options.tts_voice_path, model_dir=options.tts_model_dir)

    context = LLMContext(messages=[], tools=tools_schema(scenario.tools)) if scenario.tools else LLMContext()
    vad = PauseAwareSileroVAD(params=VADParams(confidence=options.vad_confidence, start_secs=options.vad_start_secs,
                                               stop_secs=options.vad_stop_secs, min_volume=options.vad_min_volume))
    vad.add_listener(stt)  # pauses and resumptions: the STT starts on the first silent frame
    aggregators = LLMContextAggregatorPair(context, user_params=LLMUserAggregatorParams(
        vad_analyzer=vad, user_turn_strategies=_turn_strategies(options, vad)))

    pipeline = Pipeline([
        transport.input(), stt, aggregators.user(), llm, tts, *options.extra_processors,
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
    if options.greeting and scenario.greeting:
        @task.event_handler("on_pipeline_started")
        async def _greet(worker: PipelineWorker, _frame: Any) -> None:
            await worker.queue_frame(TTSSpeakFrame(scenario.greeting))

    logger.info(f"pipeline: scenario={scenario.name} model={engine.model_name} reasoning_effort={effort} "
                f"stt={options.stt_model} ({options.stt_window} window, early={options.early_stt}) tts={options.tts} smart_turn={options.smart_turn} "
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
                                         user_speech_timeout=options.user_speech_timeout)]
    else:
        stop = [SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=options.user_speech_timeout)]
    return UserTurnStrategies(start=start, stop=stop)


def phone_options(options: PipelineOptions) -> PipelineOptions:
    """Phone lines carry 8 kHz audio: synthesize at 8 kHz directly instead of resampling twice."""
    return replace(options, audio_out_sample_rate=8000)
