"""The telephony media-stream websocket: a FastAPI app serving Twilio Media Streams (or Telnyx) at /ws.

One websocket connection is one phone call:
1. read the provider's `connected` / `start` events (stream id, call id, encoding);
2. build the shared pipeline (`build_pipeline`) on Pipecat's FastAPIWebsocketTransport with the
   provider's serializer (8 kHz mu-law in and out), with its own engine Session;
3. run it until the caller hangs up (`stop` or the socket closing).

The engine is loaded once per process and shared by every call. A bad message (not JSON, not an
object, corrupt base64) is dropped with a warning; a call that fails ends alone, and the server
and the other calls go on. Auto hang-up through the provider's REST API is off: this process
makes no outbound network calls (the provider ends the call when the websocket closes).
"""

from __future__ import annotations

import asyncio
import audioop
import base64
import binascii
import contextlib
import json
import time
from dataclasses import dataclass, field, replace
from typing import Any

from fastapi import FastAPI, WebSocket, WebSocketDisconnect
from loguru import logger
from pipecat.frames.frames import Frame
from pipecat.serializers.telnyx import TelnyxFrameSerializer
from pipecat.serializers.twilio import TwilioFrameSerializer
from pipecat.transports.websocket.fastapi import FastAPIWebsocketParams
from pipecat.workers.runner import WorkerRunner

from voice_agent.config import BUSY_MARK, CALL_CAPACITY, CallOptions
from voice_agent.pipeline import build_pipeline, phone_options
from voice_agent.scenarios import EFFORT_NAMES, Scenario
from voice_agent.transports.phone_output import PhoneWebsocketTransport

PROVIDERS = ("twilio", "telnyx")
REASONING_EFFORTS = EFFORT_NAMES
HANDSHAKE_TIMEOUT_S = 10.0
MAX_HANDSHAKE_MESSAGES = 50


class _Tolerant:
    """Serializer mixin: any message the provider's serializer cannot read is dropped, not raised
    (Pipecat's receive loop stops the whole call on the first exception)."""

    bad_messages: int = 0
    on_stop: Any = None

    async def deserialize(self, data: str | bytes) -> Frame | None:
        try:
            text = data.decode("utf-8") if isinstance(data, bytes) else data
            msg = json.loads(text)
            if not isinstance(msg, dict):
                raise ValueError(f"expected a JSON object, got {type(msg).__name__}")
            event = msg.get("event")
            if event == "stop" and self.on_stop is not None:
                self.on_stop()
                return None
            if event == "media":
                media = msg.get("media")
                payload = media.get("payload") if isinstance(media, dict) else None
                if not isinstance(payload, str):
                    raise ValueError("media event without a string payload")
                base64.b64decode(payload, validate=True)  # corrupt base64 -> binascii.Error
            return await super().deserialize(text)  # type: ignore[misc]
        except (ValueError, UnicodeDecodeError, binascii.Error, TypeError, AttributeError) as e:
            self.bad_messages += 1
            if self.bad_messages <= 5 or self.bad_messages % 100 == 0:
                logger.warning(f"phone: dropped a bad message #{self.bad_messages} ({type(e).__name__}: {e}): "
                               f"{str(data)[:80]!r}")
            return None


class TolerantTwilioSerializer(_Tolerant, TwilioFrameSerializer):
    pass


class TolerantTelnyxSerializer(_Tolerant, TelnyxFrameSerializer):
    pass


@dataclass
class CallStart:
    provider: str
    stream_id: str
    call_id: str | None = None
    encoding: str = "PCMU"
    raw: dict = field(default_factory=dict)
    custom: dict = field(default_factory=dict)  # Twilio <Parameter>s: customParameters


async def read_start(websocket: WebSocket, provider: str, timeout: float = HANDSHAKE_TIMEOUT_S) -> CallStart | None:
    """Read messages until the provider's `start` event. Junk before it is skipped; a socket that
    closes, stays silent past `timeout`, or never starts gives None."""
    deadline = time.monotonic() + timeout
    for _ in range(MAX_HANDSHAKE_MESSAGES):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        try:
            message = await asyncio.wait_for(websocket.receive(), timeout=remaining)
        except (TimeoutError, WebSocketDisconnect, RuntimeError):
            return None
        if message.get("type") == "websocket.disconnect":
            return None
        text = message.get("text") or (message.get("bytes") or b"").decode("utf-8", "replace")
        try:
            msg = json.loads(text)
        except json.JSONDecodeError:
            logger.warning(f"phone: skipped a non-JSON message before start: {text[:80]!r}")
            continue
        if not isinstance(msg, dict) or msg.get("event") != "start":
            continue  # "connected", or anything else before the stream starts
        start = msg.get("start") if isinstance(msg.get("start"), dict) else {}
        if provider == "telnyx":
            fmt = start.get("media_format") if isinstance(start.get("media_format"), dict) else {}
            stream_id = msg.get("stream_id") or start.get("stream_id")
            return CallStart(provider, str(stream_id or "telnyx-stream"), start.get("call_control_id"),
                             str(fmt.get("encoding") or "PCMU").upper(), msg)
        stream_id = start.get("streamSid") or msg.get("streamSid")
        custom = start.get("customParameters") if isinstance(start.get("customParameters"), dict) else {}
        return CallStart(provider, str(stream_id or "twilio-stream"), start.get("callSid"), "PCMU", msg, custom)
    return None


def make_serializer(start: CallStart) -> _Tolerant:
    if start.provider == "telnyx":
        enc = start.encoding if start.encoding in ("PCMU", "PCMA") else "PCMU"
        return TolerantTelnyxSerializer(start.stream_id, enc, enc, call_control_id=start.call_id,
                                        params=TelnyxFrameSerializer.InputParams(auto_hang_up=False))
    return TolerantTwilioSerializer(start.stream_id, call_sid=start.call_id,
                                    params=TwilioFrameSerializer.InputParams(auto_hang_up=False))


@dataclass
class PhoneServer:
    """State shared by the calls of one process."""

    engine: Any
    scenario: Scenario
    options: CallOptions
    provider: str = "twilio"
    # Calls taken at once; past it a new caller hears the pack's busy message and is hung up on,
    # so the calls already connected keep their budget. None: no limit.
    max_calls: int | None = CALL_CAPACITY
    observers_factory: Any = None  # (CallStart) -> list of observers for a new call (load runs, tests)
    backend_factory: Any = None    # (CallStart) -> the call's backend; None: the scenario's on options.store
    active_calls: int = 0
    calls_total: int = 0
    calls_failed: int = 0
    calls_busy: int = 0   # callers who heard the busy message
    last_call: Any = None  # the CallPipeline of the latest call (for tests and diagnostics)
    _busy_audio: bytes | None = None

    @property
    def lines_free(self) -> bool:
        return self.max_calls is None or self.active_calls < self.max_calls

    async def busy_audio(self) -> bytes:
        """The busy message as 8 kHz 16-bit PCM, synthesized once per process."""
        if self._busy_audio is None:
            self._busy_audio = await asyncio.to_thread(_synthesize_8k, self.scenario.busy_message)
        return self._busy_audio

    @property
    def model_name(self) -> str:
        if self.engine is not None:
            return self.engine.model_name
        return self.options.llm_model or self.options.llm_url or "?"  # turns go to an LLM server


def create_app(server: PhoneServer) -> FastAPI:
    if server.provider not in PROVIDERS:
        raise ValueError(f"provider must be one of {', '.join(PROVIDERS)}; got {server.provider!r}")
    app = FastAPI(title="voice-agent phone")
    app.state.server = server

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "provider": server.provider, "scenario": server.scenario.name,
                "model": server.model_name, "active_calls": server.active_calls, "max_calls": server.max_calls,
                "calls_total": server.calls_total, "calls_failed": server.calls_failed,
                "calls_busy": server.calls_busy}

    @app.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        server.calls_total += 1
        n = server.calls_total
        if not server.lines_free:
            server.calls_busy += 1
            try:
                await refuse_call(websocket, server, n)
            except Exception:  # a caller gone before the message: nothing else to do
                logger.debug(f"phone call #{n}: busy message not delivered", exc_info=True)
            finally:
                with contextlib.suppress(Exception):
                    await websocket.close()
            return
        server.active_calls += 1
        try:
            await run_call(websocket, server, n)
        except Exception:  # one call's failure must not reach the server or the other calls
            server.calls_failed += 1
            logger.exception(f"phone call #{n} failed")
        finally:
            server.active_calls -= 1
            try:
                await websocket.close()
            except Exception:
                pass

    return app


def call_options(options: CallOptions, start: CallStart) -> CallOptions:
    """This call's options: 8 kHz output, and a per-call reasoning_effort when the stream carries
    one (Twilio: <Parameter name="reasoning_effort" value="high"/>)."""
    options = phone_options(options)
    effort = start.custom.get("reasoning_effort")
    if effort in REASONING_EFFORTS:
        options = replace(options, reasoning_effort=effort)
    elif effort is not None:
        logger.warning(f"phone: ignored reasoning_effort {effort!r} (use one of {', '.join(REASONING_EFFORTS)})")
    return options


async def refuse_call(websocket: WebSocket, server: PhoneServer, n: int) -> None:
    """Every line is taken: play the busy message, mark its end (the `lines-busy` mark) and let the
    socket close, as a phone system's "all lines are busy" does. No pipeline is built."""
    start = await read_start(websocket, server.provider)
    if start is None:
        return
    logger.warning(f"phone call #{n}: all {server.max_calls} lines busy; the caller hears the busy message")
    pcm = await server.busy_audio()
    law = audioop.lin2alaw if start.encoding == "PCMA" else audioop.lin2ulaw
    payload = law(pcm, 2)
    sid = {"streamSid": start.stream_id} if start.provider == "twilio" else {"stream_id": start.stream_id}
    for i in range(0, len(payload), 160):  # 20 ms media messages; the provider buffers and plays them
        chunk = base64.b64encode(payload[i:i + 160]).decode()
        await websocket.send_text(json.dumps({"event": "media", **sid, "media": {"payload": chunk}}))
    await websocket.send_text(json.dumps({"event": "mark", **sid, "mark": {"name": BUSY_MARK}}))
    await asyncio.sleep(len(payload) / 8000)  # hang up once it has played


def _synthesize_8k(text: str) -> bytes:
    import numpy as np

    from voice_agent.audio_io import resample
    from voice_agent.services.tts import float_to_int16, load_hibari, trim_silence

    tts = load_hibari()
    audio = trim_silence(np.asarray(tts(text), dtype=np.float32), int(tts.sample_rate))
    pcm = np.frombuffer(float_to_int16(audio), dtype=np.int16)
    return resample(pcm, int(tts.sample_rate), 8000).astype(np.int16).tobytes()


async def run_call(websocket: WebSocket, server: PhoneServer, n: int) -> None:
    start = await read_start(websocket, server.provider)
    if start is None:
        logger.info(f"phone call #{n}: closed before a start event")
        return
    logger.info(f"phone call #{n}: {start.provider} stream {start.stream_id} call {start.call_id}")
    serializer = make_serializer(start)
    transport = PhoneWebsocketTransport(websocket=websocket, params=FastAPIWebsocketParams(
        audio_in_enabled=True, audio_out_enabled=True, add_wav_header=False, serializer=serializer,
        audio_in_sample_rate=server.options.audio_in_sample_rate, audio_out_sample_rate=8000))
    observers = server.observers_factory(start) if server.observers_factory else []
    backend = server.backend_factory(start) if server.backend_factory else None
    call = build_pipeline(transport, server.scenario, call_options(server.options, start), engine=server.engine,
                          observers=observers, backend=backend)
    server.last_call = call

    async def hang_up() -> None:
        await call.task.cancel(reason="caller hung up")

    serializer.on_stop = lambda: asyncio.ensure_future(hang_up())

    @transport.event_handler("on_client_disconnected")
    async def _gone(_transport: Any, _ws: Any) -> None:
        await hang_up()

    @call.llm.event_handler("on_engine_metrics")
    async def _metrics(_llm: Any, m: dict) -> None:
        logger.info(f"phone call #{n}: ttft {m.get('ttft_ms')} ms, ttfat {m.get('ttfat_ms')} ms, "
                    f"prefill {m.get('prefill_ms')} ms, tokens/forward {m.get('tokens_per_forward')}")

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(call.task)
    await runner.run()
    logger.info(f"phone call #{n}: ended ({serializer.bad_messages} bad messages dropped, "
                f"{transport.output().dropped_after_barge_in} stale audio chunks held back after barge-ins)")
