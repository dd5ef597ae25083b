"""The LiveKit Agents worker behind `voice-agent livekit-worker`.

It registers with a LiveKit server as an `AgentServer`. Every room it is dispatched to (a SIP
trunk puts each phone call in a room) gets one `AgentSession`:

    AgentSession(stt=WhisperSTT(), llm=EngineLLM(engine), tts=HibariTTS(), vad=silero.VAD,
                 turn_handling={turn_detection: TurnDetector(version="v1-mini"), interruption: vad})
    agent = ScenarioAgent(scenario, handlers)   # scenarios/<name>/ + its backend's store

Choices that matter here:
- Jobs run as threads of this process (`JobExecutorType.THREAD`), not one process per call, so
  every call shares ONE in-process engine, Whisper and Hibari; each call keeps its own engine
  session (KV cache). On a small CPU box, N copies of the models would not fit the cores anyway.
- Everything is offline. The turn detector is pinned to the bundled "v1-mini" model (left unset,
  livekit would pick its cloud model), VAD is the bundled Silero, and interruptions use VAD (the
  adaptive interruption detector is a cloud service).
- Per call, the job's dispatch metadata may set `{"reasoning_effort": "instant|low|medium|high"}`.
- With `llm_url` (`--llm-url`), every call's turns go to that OpenAI-compatible server (a
  RemoteBrain per call) and no engine is loaded here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from dataclasses import dataclass
from typing import Any

from livekit.agents import AgentServer, AgentSession, JobContext, JobExecutorType, inference
from livekit.plugins import silero

from voice_agent.brain import make_brain
from voice_agent.config import EFFORT_NAMES, CallOptions
from voice_agent.engine_host import call_engine
from voice_agent.livekit.agent import ScenarioAgent
from voice_agent.livekit.connect import LiveKitUnreachable, check_reachable, require
from voice_agent.livekit.llm import EngineLLM, EngineTurnMetrics
from voice_agent.livekit.stt import WhisperSTT
from voice_agent.livekit.tts import HibariTTS
from voice_agent.scenarios import Scenario, load_scenario

logger = logging.getLogger("voice_agent.livekit.worker")

TURN_DETECTOR_VERSION = "v1-mini"  # the bundled, offline model
DRAIN_TIMEOUT_S = 60


class WorkerError(RuntimeError):
    """The worker cannot start or lost its server; the message says what to do."""


@dataclass(kw_only=True)
class WorkerConfig(CallOptions):
    """The calls' knobs (CallOptions) and the worker's own."""

    url: str
    api_key: str
    api_secret: str
    agent_name: str = ""  # set it for explicit dispatch (SIP dispatch rules name the agent)
    http_port: int = 8081  # health check; 0 picks a free port
    max_retry: int = 3  # connection attempts before giving up with an error
    max_calls: int = 4  # concurrent rooms this process takes; they share the CPU-bound engine


class CallFactory:
    """Builds one AgentSession + agent per room from components loaded once per process."""

    def __init__(self, cfg: WorkerConfig, engine: Any = None) -> None:
        self.cfg = cfg
        self.scenario: Scenario = load_scenario(cfg.scenario)
        self.effort = cfg.reasoning_effort or self.scenario.reasoning_effort
        self._engine = engine  # None: load cfg.model (once per process)
        self._loaded = False

    def load(self) -> None:
        """The heavy part: engine, Whisper, Hibari, Silero, the store. Idempotent."""
        if self._loaded:
            return
        self.engine = None  # with llm_url, every call's turns go to that server
        if not self.cfg.remote:
            self.engine = self._engine or call_engine(self.cfg.model, self.scenario, precision=self.cfg.precision,
                                                        threads=self.cfg.engine_threads)
        self.vad = silero.VAD.load()
        self.backend = self.scenario.open_backend(self.cfg.store)
        self.handlers = self.scenario.bind_handlers(self.backend)
        WhisperSTT(self.cfg.stt_model)
        HibariTTS()  # loads and warms the shared voice
        self._loaded = True

    def effort_for(self, metadata: str | None) -> str:
        try:
            wanted = json.loads(metadata).get("reasoning_effort") if metadata else None
        except (ValueError, AttributeError):
            wanted = None
            logger.warning("job metadata is not a JSON object; ignoring it: %r", metadata[:200])
        if wanted is not None and wanted not in EFFORT_NAMES:
            logger.warning("job metadata asks for reasoning_effort %r; using %s", wanted, self.effort)
            wanted = None
        return wanted or self.effort

    def session(self, reasoning_effort: str | None = None) -> tuple[AgentSession, ScenarioAgent]:
        self.load()
        brain = make_brain(self.cfg, engine=self.engine)
        brain.policy = self.scenario.policy  # the same turn policy as the Pipecat cascade
        llm = EngineLLM(brain, reasoning_effort=reasoning_effort or self.effort,
                        max_tokens=self.cfg.max_tokens, temperature=self.cfg.temperature)
        llm.on("engine_metrics", _log_turn)
        session = AgentSession(
            stt=WhisperSTT(self.cfg.stt_model),
            llm=llm,
            tts=HibariTTS(),
            vad=self.vad,
            turn_handling={
                "turn_detection": inference.TurnDetector(version=TURN_DETECTOR_VERSION),
                "interruption": {"mode": "vad"},
                # LiveKit's own way to get ahead of the turn: the LLM starts on the final transcript
                # before the end of the turn is confirmed (the engine keeps the prefix if it stands),
                # as the Pipecat pipelines' decode ahead does (voice_agent/brain/ahead.py).
                "preemptive_generation": {"enabled": self.cfg.decodes_ahead},
            },
        )
        return session, ScenarioAgent(self.scenario, self.handlers, warm=self.cfg.warm_prefill)


def _log_turn(m: EngineTurnMetrics) -> None:
    ms = m.metrics
    logger.info("llm turn: ttft_ms=%s ttfat_ms=%s prefill_ms=%s cached=%s/%s tokens=%s effort=%s%s",
                ms.get("ttft_ms"), ms.get("ttfat_ms"), ms.get("prefill_ms"), ms.get("cached_tokens"),
                ms.get("prompt_tokens"), ms.get("completion_tokens"), ms.get("reasoning_effort"),
                f" tool_errors={m.tool_errors}" if m.tool_errors else "")


def build_server(cfg: WorkerConfig, calls: CallFactory) -> AgentServer:
    server = AgentServer(
        ws_url=cfg.url, api_key=cfg.api_key, api_secret=cfg.api_secret,
        job_executor_type=JobExecutorType.THREAD, num_idle_processes=1,
        setup_fnc=lambda _proc: calls.load(), max_retry=cfg.max_retry, port=cfg.http_port,
        drain_timeout=DRAIN_TIMEOUT_S,
        # Load is our own calls over --max-calls, not machine-wide CPU: the engine is in this
        # process, and other work on the box (a training job) must not make the worker refuse calls.
        load_fnc=lambda srv: len(srv.active_jobs) / max(cfg.max_calls, 1), load_threshold=0.99,
    )

    async def entrypoint(ctx: JobContext) -> None:
        effort = calls.effort_for(ctx.job.metadata)
        session, agent = calls.session(effort)
        logger.info("room %s: scenario %s, reasoning_effort %s", ctx.room.name, calls.scenario.name, effort)
        await session.start(agent=agent, room=ctx.room)

    server.rtc_session(entrypoint, agent_name=cfg.agent_name)
    return server


async def serve(server: AgentServer) -> None:
    """Run until SIGINT/SIGTERM (then drain the calls in progress) or until the server is lost."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    run = asyncio.create_task(server.run(devmode=False))
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({run, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if run.done():
            run.result()  # a lost connection raises here
        else:
            logger.info("stopping: letting calls in progress finish (up to %ss)", DRAIN_TIMEOUT_S)
            try:
                await server.drain()
            except TimeoutError:
                logger.warning("drain timed out; closing anyway")
    except RuntimeError as e:
        raise WorkerError(f"lost the LiveKit server: {e}. Check --url, --api-key and --api-secret.") from None
    finally:
        stopped.cancel()
        await server.aclose()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


class _NoConnectionTraceback(logging.Filter):
    """livekit logs its final connection failure with a traceback; serve() reports it in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Error in _connection_task")


def run_worker(cfg: WorkerConfig) -> None:
    """Check, load, register, serve. Raises WorkerError with a message for the user."""
    logging.getLogger("livekit.agents").addFilter(_NoConnectionTraceback())
    try:
        require(url=cfg.url, api_key=cfg.api_key, api_secret=cfg.api_secret)
        check_reachable(cfg.url)
    except LiveKitUnreachable as e:
        raise WorkerError(str(e)) from None
    calls = CallFactory(cfg)
    llm = f"LLM server {cfg.llm_url}" if cfg.remote else f"engine {cfg.model}"
    logger.info("loading models (%s, whisper %s, hibari, silero)", llm, cfg.stt_model)
    calls.load()
    asyncio.run(serve(build_server(cfg, calls)))

