"""The test plays the phone against the media-stream websocket on 127.0.0.1.

The server is the real FastAPI app (`voice_agent.transports.phone.create_app`) under uvicorn, with
the real pipeline: Silero VAD, faster-whisper tiny.en, the engine, hibari TTS, Twilio serializer.
The caller's words are made with the real TTS, resampled to 8 kHz, mu-law encoded and sent as
20 ms `media` messages at real-time pace (silence in between, as a phone line does). The bot's
media is decoded and transcribed with the project's STT.
"""

from __future__ import annotations

import asyncio
import audioop
import base64
import json
import socket
import threading
import time
import types
import uuid

import httpx
import numpy as np
import pytest
import soxr
import uvicorn
from pipecat.frames.frames import (
    BotStoppedSpeakingFrame,
    InterruptionFrame,
    UserStartedSpeakingFrame,
    VADUserStartedSpeakingFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from websockets.asyncio.client import connect

from voice_agent.pipeline import PipelineOptions
from voice_agent.scenarios import load_scenario
from voice_agent.transports.phone import PhoneServer, create_app

pytestmark = pytest.mark.slow
CHUNK = 160  # 20 ms of 8 kHz mu-law
SILENCE = b"\xff" * CHUNK  # mu-law zero


def mulaw_8k(audio_24k: np.ndarray) -> bytes:
    pcm = (np.clip(soxr.resample(audio_24k, 24000, 8000), -1, 1) * 32767).astype(np.int16).tobytes()
    return audioop.lin2ulaw(pcm, 2)


def speech_onset_s(ulaw: bytes) -> float:
    """Where the utterance's speech starts (first 20 ms chunk clearly above the noise floor)."""
    pcm = np.frombuffer(audioop.ulaw2lin(ulaw, 2), dtype=np.int16).astype(np.float32)
    for i in range(0, len(pcm) - CHUNK, CHUNK):
        if np.sqrt(np.mean(pcm[i:i + CHUNK] ** 2)) > 500:
            return i / 8000
    return 0.0


def speech_offset_s(ulaw: bytes) -> float:
    """Where the utterance's speech ends (end of the last 20 ms chunk clearly above the noise floor):
    the TTS pads its audio with silence, and a reply may rightly start inside that silence."""
    pcm = np.frombuffer(audioop.ulaw2lin(ulaw, 2), dtype=np.int16).astype(np.float32)
    end = 0.0
    for i in range(0, len(pcm) - CHUNK, CHUNK):
        if np.sqrt(np.mean(pcm[i:i + CHUNK] ** 2)) > 500:
            end = (i + CHUNK) / 8000
    return end or len(pcm) / 8000


class Phone:
    """A Twilio-like caller: sends media every 20 ms (speech when given, else silence) and
    records every media/clear message the bot sends back, with its arrival time."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.stream_sid = "MZ" + uuid.uuid4().hex
        self.received: list[tuple[float, bytes]] = []
        self.clears: list[float] = []
        self._outbox: list[bytes] = []
        self.speech_sent: list[tuple[float, float]] = []  # (first chunk sent, last chunk sent) per utterance
        self._tasks: list[asyncio.Task] = []

    async def __aenter__(self) -> Phone:
        self.ws = await connect(self.url, max_size=None)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.ws.close()

    async def send_json(self, msg: object) -> None:
        await self.ws.send(json.dumps(msg))

    async def start_call(self, **custom: str) -> None:
        await self.send_json({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        await self.send_json({"event": "start", "sequenceNumber": "1", "streamSid": self.stream_sid, "start": {
            "streamSid": self.stream_sid, "accountSid": "AC" + "0" * 32, "callSid": "CA" + uuid.uuid4().hex,
            "tracks": ["inbound"], "customParameters": custom, "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}})
        self.t_started = time.monotonic()
        self._tasks += [asyncio.create_task(self._send_loop()), asyncio.create_task(self._recv_loop())]

    def say(self, ulaw: bytes) -> None:
        self._outbox.append(ulaw)

    async def _send_loop(self) -> None:
        loop = asyncio.get_running_loop()
        t_next, seq = loop.time(), 2
        while True:
            if self._outbox:
                utt = self._outbox.pop(0)
                chunks = [utt[i:i + CHUNK].ljust(CHUNK, b"\xff") for i in range(0, len(utt), CHUNK)]
                first = last = 0.0
            else:
                chunks, utt = [SILENCE], None
            for c in chunks:
                await asyncio.sleep(max(0.0, t_next - loop.time()))
                t_next += 0.02
                await self.send_json({"event": "media", "sequenceNumber": str(seq), "streamSid": self.stream_sid,
                                      "media": {"track": "inbound", "payload": base64.b64encode(c).decode()}})
                seq += 1
                if utt is not None:
                    last = time.monotonic()
                    first = first or last
            if utt is not None:
                self.speech_sent.append((first, last))

    async def _recv_loop(self) -> None:
        async for raw in self.ws:
            msg = json.loads(raw)
            if msg.get("event") == "media":
                assert msg["streamSid"] == self.stream_sid
                self.received.append((time.monotonic(), base64.b64decode(msg["media"]["payload"])))
            elif msg.get("event") == "clear":
                self.clears.append(time.monotonic())

    def audio_between(self, t0: float, t1: float = float("inf")) -> np.ndarray:
        data = b"".join(p for t, p in self.received if t0 <= t < t1)
        return np.frombuffer(audioop.ulaw2lin(data, 2), dtype=np.int16)

    async def wait_for_audio(self, after: float, seconds: float, timeout: float) -> float:
        """Wait until `seconds` of bot audio arrived after time `after`; return when the first came."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = [(t, len(p)) for t, p in self.received if t >= after]
            if sum(n for _, n in got) / 8000 >= seconds:  # mu-law: one byte per sample
                return got[0][0]
            await asyncio.sleep(0.05)
        raise AssertionError(f"no {seconds}s of bot audio within {timeout}s (got {len(self.received)} chunks)")

    async def wait_quiet(self, quiet_s: float, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.received and time.monotonic() - self.received[-1][0] > quiet_s:
                return
            await asyncio.sleep(0.05)


class FrameClock(BaseObserver):
    """Server-side: when the pipeline first saw each kind of frame (for the barge-in breakdown)."""

    KINDS = (VADUserStartedSpeakingFrame, UserStartedSpeakingFrame, InterruptionFrame, BotStoppedSpeakingFrame)

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, list[float]] = {}

    async def on_push_frame(self, data: FramePushed) -> None:
        if isinstance(data.frame, self.KINDS):
            times = self.seen.setdefault(type(data.frame).__name__, [])
            if not times or time.monotonic() - times[-1] > 0.05:  # one per event, not per hop
                times.append(time.monotonic())

    def first_after(self, kind: str, t: float) -> float | None:
        return next((x for x in self.seen.get(kind, []) if x >= t), None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def phone_server(base_engine, tmp_path_factory):
    store = str(tmp_path_factory.mktemp("store"))
    load_scenario("dental_clinic").open_backend(store).close()  # made and seeded first, as `voice-agent phone` does
    options = PipelineOptions(reasoning_effort="instant", max_tokens=20, store=store)
    clocks: list[FrameClock] = []
    server = PhoneServer(engine=base_engine, scenario=load_scenario("dental_clinic"), options=options,
                         observers_factory=lambda _start: [clocks.append(FrameClock()) or clocks[-1]])
    server.clocks = clocks
    port = free_port()
    uv = uvicorn.Server(uvicorn.Config(create_app(server), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not uv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert uv.started, "uvicorn did not start"
    yield server, f"ws://127.0.0.1:{port}/ws", f"http://127.0.0.1:{port}"
    uv.should_exit = True
    thread.join(timeout=20)


@pytest.fixture(scope="module")
def caller_utterance(say) -> bytes:
    # Not a greeting or a question about the clinic's facts: those are answered without the engine
    # (voice_agent/policy/greeting.py, facts.py), and these calls are about the engine's turn on a phone line.
    return mulaw_8k(say("Hi, I'd like to come in for a checkup."))


@pytest.mark.slow
async def test_a_call_greets_barges_in_and_answers_with_speech(phone_server, caller_utterance, transcribe):
    server, url, http = phone_server
    async with Phone(url) as phone:
        # Junk before the stream starts is skipped by the handshake.
        await phone.ws.send("not json at all")
        await phone.send_json(["a", "list"])
        await phone.start_call()
        # ...and junk during the call is dropped by the serializer: bad JSON, a JSON string, a
        # binary frame, corrupt base64, a media event without payload, an unknown event.
        for junk in ["{broken", '"just a string"', json.dumps({"event": "media", "media": {"payload": "%%%not-base64%%%"}}),
                     json.dumps({"event": "media", "media": "nope"}), json.dumps({"event": "mark", "mark": {}})]:
            await phone.ws.send(junk)
        await phone.ws.send(b"\x00\x01binary")

        # The greeting arrives as speech.
        t_greet = await phone.wait_for_audio(0, 1.0, timeout=30)
        print(f"\ngreeting: first bot audio {(t_greet - phone.t_started) * 1000:.0f} ms after the start event")
        # Barge in one second into the greeting: the bot must fall silent.
        await asyncio.sleep(max(0.0, t_greet + 1.0 - time.monotonic()))
        phone.say(caller_utterance)
        deadline = time.monotonic() + 15
        while not phone.speech_sent and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        first_sent, _ = phone.speech_sent[0]
        onset = first_sent + speech_onset_s(caller_utterance)
        speech_end = first_sent + speech_offset_s(caller_utterance)  # the caller's true end of speech
        greeting = transcribe(phone.audio_between(0, onset), 8000)
        assert any(w in greeting.lower() for w in ("smile", "dental", "maya", "help")), greeting

        assert phone.clears, "the bot was not interrupted (no 'clear' event)"
        t_clear = phone.clears[0]
        barge_in_ms = (t_clear - onset) * 1000
        still_sent_ms = sum(len(p) for t, p in phone.received if onset <= t <= t_clear) / 8
        after_clear = [t for t, _ in phone.received if t_clear < t < speech_end]
        print(f"\nbarge-in: bot told to fall silent (clear) {barge_in_ms:.0f} ms after caller speech onset; "
              f"{still_sent_ms:.0f} ms of bot audio was sent meanwhile")
        clock = server.clocks[-1]
        parts = {k: clock.first_after(k, onset) for k in ("VADUserStartedSpeakingFrame", "InterruptionFrame",
                                                           "BotStoppedSpeakingFrame")}
        print("  breakdown after onset: " + ", ".join(
            f"{k} +{(v - onset) * 1000:.0f} ms" for k, v in parts.items() if v is not None))
        assert 0 < barge_in_ms < 1000
        assert not after_clear, (f"bot audio kept coming after the clear while the caller spoke: "
                                 f"{[(round((t - t_clear) * 1000), round((speech_end - t) * 1000)) for t in after_clear]} "
                                 f"(ms after the clear, ms before speech end); clears at "
                                 f"{[round((c - onset) * 1000) for c in phone.clears]} ms after onset")

        # The caller's question gets a spoken answer.
        t_reply = await phone.wait_for_audio(speech_end, 0.4, timeout=90)
        await phone.wait_quiet(1.5, timeout=30)
        reply = transcribe(phone.audio_between(speech_end), 8000)
        print(f"e2e (caller speech end -> first reply audio): {(t_reply - speech_end) * 1000:.0f} ms; "
              f"bot said: {reply!r}")
        assert len(reply.split()) >= 2, reply
        llm = server.last_call.llm
        for _ in range(600):  # the engine may still be decoding tokens that are not speech
            if llm.last_metrics is not None:
                break
            await asyncio.sleep(0.1)
        assert llm.last_metrics["ttft_ms"] > 0 and llm.last_metrics["reasoning_effort"] == "instant"
        messages = server.last_call.context.get_messages()
        print("context:", messages)
        assert any(m["role"] == "user" and m["content"].strip() for m in messages)  # the transcript

        await phone.send_json({"event": "stop", "streamSid": phone.stream_sid, "stop": {}})
    async with httpx.AsyncClient() as client:
        for _ in range(100):
            health = (await client.get(f"{http}/health")).json()
            if health["active_calls"] == 0:
                break
            await asyncio.sleep(0.1)
    assert health["active_calls"] == 0 and health["calls_failed"] == 0


@pytest.mark.slow
async def test_a_caller_vanishing_mid_turn_does_not_hurt_the_next_call(phone_server, caller_utterance, transcribe):
    server, url, http = phone_server
    before = server.calls_total
    async with Phone(url) as phone:
        await phone.start_call()
        await phone.wait_for_audio(0, 0.5, timeout=30)
        phone.say(caller_utterance)
        deadline = time.monotonic() + 15
        while not phone.speech_sent and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.6)  # the turn is now being transcribed / answered
    # The socket is gone without a "stop". A new call must work as usual (this one asks for its
    # own reasoning_effort through a Twilio <Parameter>).
    async with Phone(url) as phone:
        await phone.start_call(reasoning_effort="high")
        await phone.wait_for_audio(0, 2.0, timeout=30)
        assert server.last_call.llm.reasoning_effort == "high"
        greeting = transcribe(phone.audio_between(0), 8000)
        assert greeting.strip(), "second call got no speech"
    async with httpx.AsyncClient() as client:
        for _ in range(200):
            health = (await client.get(f"{http}/health")).json()
            if health["active_calls"] == 0:
                break
            await asyncio.sleep(0.1)
    assert health["calls_total"] == before + 2
    assert health["active_calls"] == 0 and health["calls_failed"] == 0
    # The abandoned turn's decoding thread stops too (it checks for cancellation every block).
    for _ in range(300):
        if not [t for t in threading.enumerate() if t.name.endswith("-engine")]:
            break
        await asyncio.sleep(0.1)
    assert not [t.name for t in threading.enumerate() if t.name.endswith("-engine")]


async def test_a_socket_that_never_starts_is_closed_and_counted(phone_server):
    server, url, http = phone_server
    async with connect(url) as ws:
        await ws.send(json.dumps({"event": "connected"}))
    async with httpx.AsyncClient() as client:
        for _ in range(50):
            health = (await client.get(f"{http}/health")).json()
            if health["active_calls"] == 0:
                break
            await asyncio.sleep(0.1)
    assert health["active_calls"] == 0 and health["calls_failed"] == 0


@pytest.mark.slow
def test_the_voice_agent_phone_command_serves_a_call(tmp_path, caller_utterance):
    """The real entry point, as a user starts it: `voice-agent phone` in its own process."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    exe = shutil.which("voice-agent") or str(Path(sys.executable).parent / "voice-agent")
    port = free_port()
    proc = subprocess.Popen([exe, "phone", "--port", str(port), "--model", "smollm2-base",
                             "--store", str(tmp_path / "store")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        health = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).json()
                break
            except httpx.HTTPError:
                time.sleep(0.3)
        assert health and health["status"] == "ok" and health["provider"] == "twilio", proc.poll()

        async def call() -> int:
            async with Phone(f"ws://127.0.0.1:{port}/ws") as phone:
                await phone.start_call()
                await phone.wait_for_audio(0, 1.0, timeout=60)
                return sum(len(p) for _, p in phone.received)

        assert asyncio.run(call()) >= 8000  # at least a second of speech
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert "ws://127.0.0.1:" in out and "Traceback" not in out, out[-3000:]


@pytest.mark.parametrize("provider", ["twilio", "telnyx"])
async def test_serializers_decode_media_and_drop_junk(provider):
    from pipecat.frames.frames import InputAudioRawFrame
    from pipecat.serializers.telnyx import TelnyxFrameSerializer
    from pipecat.serializers.twilio import TwilioFrameSerializer

    from voice_agent.transports.phone import TolerantTelnyxSerializer, TolerantTwilioSerializer

    if provider == "twilio":
        ser = TolerantTwilioSerializer("MZ1", params=TwilioFrameSerializer.InputParams(auto_hang_up=False, sample_rate=16000))
        media = {"event": "media", "streamSid": "MZ1", "media": {"payload": base64.b64encode(SILENCE * 5).decode()}}
    else:
        ser = TolerantTelnyxSerializer("st1", "PCMU", "PCMU", params=TelnyxFrameSerializer.InputParams(
            auto_hang_up=False, sample_rate=16000))
        media = {"event": "media", "stream_id": "st1", "media": {"track": "inbound", "payload": base64.b64encode(SILENCE * 5).decode()}}
    await ser.setup(types.SimpleNamespace(audio_in_sample_rate=16000))  # what the transport does at start
    await ser.deserialize(json.dumps(media))  # the stream resampler holds back its first ~100 ms
    frame = await ser.deserialize(json.dumps(media))
    assert isinstance(frame, InputAudioRawFrame) and frame.sample_rate == 16000 and len(frame.audio) > 0
    for junk in ["{", "[]", "null", json.dumps({"event": "media"}), json.dumps({"event": "media", "media": {"payload": 5}}),
                 json.dumps({"event": "media", "media": {"payload": "a$b"}}), b"\xff\xfe"]:
        assert await ser.deserialize(junk) is None
    assert ser.bad_messages == 7
