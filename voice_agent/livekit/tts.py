"""`HibariTTS`: the hibari neural TTS as a LiveKit Agents `tts.TTS`, offline, 24 kHz mono.

The model is voice_agent.services.tts.load_hibari(), the same warmed-up instance the Pipecat
pipeline uses. Non-streaming at the LiveKit level (AgentSession feeds it sentence by sentence through its
`tts.StreamAdapter`), but each request still streams: hibari yields one chunk per sentence and
each chunk is pushed as soon as it exists.
"""

from __future__ import annotations

import asyncio
import threading

from livekit.agents import APIConnectOptions, APIError, tts, utils
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS

from voice_agent.services.tts import float_to_int16, load_hibari

SAMPLE_RATE = 24000  # hibari's output rate


class HibariTTS(tts.TTS):
    def __init__(self, *, speed: float = 1.0) -> None:
        super().__init__(capabilities=tts.TTSCapabilities(streaming=False), sample_rate=SAMPLE_RATE,
                         num_channels=1)
        self._speed = speed
        self._hibari = load_hibari()  # one warmed-up model per process, shared with the Pipecat side

    @property
    def model(self) -> str:
        return "hibari-heart"  # the one voice bundled offline

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
                    put(float_to_int16(chunk))
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
