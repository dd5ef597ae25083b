"""`HibariTTS`: the hibari neural TTS as a LiveKit Agents `tts.TTS`, offline, 24 kHz mono.

Non-streaming at the LiveKit level (AgentSession feeds it sentence by sentence through its
`tts.StreamAdapter`), but each request still streams: hibari yields one chunk per sentence and
each chunk is pushed as soon as it exists.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import numpy as np
from livekit.agents import APIConnectOptions, APIError, tts, utils
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS

SAMPLE_RATE = 24000  # hibari's output rate
_voices: dict[str, Any] = {}
_voices_lock = threading.Lock()


def shared_hibari(voice: str = "heart") -> Any:
    """One warmed-up Hibari per voice per process, shared by every room. Only the default voice
    ships offline; another voice name fails here with hibari's own error."""
    with _voices_lock:
        if voice not in _voices:
            from hibari import Hibari

            engine = Hibari(voice=voice)
            engine("Hello.")  # the first call pays for graph setup; not a caller's first sentence
            _voices[voice] = engine
        return _voices[voice]


def float_to_pcm16(audio: np.ndarray) -> bytes:
    return (np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0) * 32767.0).astype(np.int16).tobytes()


class HibariTTS(tts.TTS):
    def __init__(self, *, voice: str = "heart", speed: float = 1.0) -> None:
        super().__init__(capabilities=tts.TTSCapabilities(streaming=False), sample_rate=SAMPLE_RATE,
                         num_channels=1)
        self._voice = voice
        self._speed = speed
        self._hibari = shared_hibari(voice)

    @property
    def model(self) -> str:
        return f"hibari-{self._voice}"

    @property
    def provider(self) -> str:
        return "hibari"

    def synthesize(self, text: str, *,
                   conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS) -> HibariChunkedStream:
        return HibariChunkedStream(tts=self, input_text=text, conn_options=conn_options)


class HibariChunkedStream(tts.ChunkedStream):
    def __init__(self, *, tts: HibariTTS, input_text: str, conn_options: APIConnectOptions) -> None:
        super().__init__(tts=tts, input_text=input_text, conn_options=conn_options)
        self._hibari_tts = tts

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        output_emitter.initialize(request_id=utils.shortuuid("tts_"), sample_rate=SAMPLE_RATE,
                                  num_channels=1, mime_type="audio/pcm")
        text = self._input_text.strip()
        if not text:
            return
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()
        stop = threading.Event()
        engine, speed = self._hibari_tts._hibari, self._hibari_tts._speed

        def put(item: bytes | BaseException | None) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop closed (job shutdown): nobody is listening
                pass

        def work() -> None:
            try:
                for chunk in engine.stream(text, speed=speed):
                    if stop.is_set():
                        break
                    put(float_to_pcm16(chunk))
            except Exception as e:  # noqa: BLE001 - re-raised on the event loop
                put(e)
            finally:
                put(None)

        threading.Thread(target=work, name="hibari-tts", daemon=True).start()
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise APIError(f"hibari could not synthesize {text[:40]!r}: {item}", retryable=False) from item
                output_emitter.push(item)
        finally:
            stop.set()  # barge-in: stop synthesizing the sentences nobody will hear
        output_emitter.flush()
