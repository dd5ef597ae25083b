"""Text to speech on Pipecat's TTSService.

- `HibariTTSService` (default): hibari-tts, an 8 MB int8 ONNX voice (24 kHz float32) that runs
  ~100x real time on one core. Pipecat hands it one sentence at a time; hibari's own `stream()`
  yields per sentence too, so the first audio of a reply leaves after its first sentence only.
- `PiperTTSService`: only when `piper-tts` is importable (not installed by default: GPL-3.0), with
  a local voice .onnx.
- `CoquiTTSService`: optional, for users who bring their own Coqui model folder; `TTS` is imported
  lazily and its absence is a clear error.

Audio is resampled to the pipeline's output rate (8 kHz on phone lines, for example).
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import threading
from collections.abc import AsyncGenerator, Callable, Iterator
from pathlib import Path

import numpy as np
from loguru import logger
from pipecat.audio.utils import create_stream_resampler
from pipecat.frames.frames import ErrorFrame, Frame, TTSAudioRawFrame
from pipecat.services.settings import TTSSettings
from pipecat.services.tts_service import TextAggregationMode, TTSService
from pipecat.transcriptions.language import Language

from voice_agent.services.clause import MAX_WORDS, FirstClauseAggregator

TTS_BACKENDS = ("hibari", "piper", "coqui")
_END = object()


def load_hibari(threads: int = 1):
    """One hibari model per process, warmed up: the first synthesis pays ONNX session setup."""
    return _load_hibari(int(threads))  # one cache key however it is called


@functools.lru_cache(maxsize=2)
def _load_hibari(threads: int):
    from hibari import Hibari

    tts = Hibari(threads=threads)  # only the bundled default voice works offline
    tts("Hello.")
    return tts


def trim_silence(audio: np.ndarray, rate: int, lead_keep_s: float = 0.01, trail_keep_s: float = 0.25,
                 threshold: float = 0.01) -> np.ndarray:
    """Cut a synthesized sentence's padding. Hibari pads each sentence with ~0.3 s of silence in
    front and ~0.47 s behind: untrimmed, that is 0.3 s added to every reply's first audio and a
    0.77 s gap between sentences. Nothing louder than `threshold` (-40 dBFS) is cut; 10 ms before
    the first such sample is kept (40 ms was: Pipecat's TTFA counted 38-51 ms of leading silence
    before each reply's first word)."""
    loud = np.flatnonzero(np.abs(audio) > threshold)
    if loud.size == 0:
        return audio
    start = max(0, int(loud[0]) - int(lead_keep_s * rate))
    end = min(len(audio), int(loud[-1]) + 1 + int(trail_keep_s * rate))
    return audio[start:end]


def float_to_int16(audio: np.ndarray) -> bytes:
    return (np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0) * 32767).astype(np.int16).tobytes()


class _LocalTTSService(TTSService):
    """Shared plumbing: run a blocking per-sentence synthesizer in a worker thread and yield
    resampled TTSAudioRawFrames as each chunk is ready. One synthesis at a time per process."""

    native_rate: int = 24000
    _lock = threading.Lock()

    def __init__(self, *, model: str, voice: str, trim: bool = True, first_clause_words: int = MAX_WORDS,
                 **kwargs) -> None:
        kwargs.setdefault("push_start_frame", True)
        kwargs.setdefault("push_stop_frames", True)
        # A local model that returns no audio for a "sentence" like "..." is not broken; never
        # write the service off for it (the default would after three such contexts).
        kwargs.setdefault("max_consecutive_zero_audio_contexts", 0)
        super().__init__(settings=TTSSettings(model=model, voice=voice, language=Language.EN, extra={}), **kwargs)
        if self._text_aggregation_mode == TextAggregationMode.SENTENCE:
            # Pipecat builds its SimpleTextAggregator here with no way to pass another: swap it for the
            # first-clause one (voice_agent/services/clause.py) with the same settings.
            self._text_aggregator = FirstClauseAggregator(aggregation_type=self._text_aggregation_mode,
                                                          language=self._text_aggregator.language,
                                                          max_words=first_clause_words)
        self.trim = trim
        self._resampler = create_stream_resampler()

    def can_generate_metrics(self) -> bool:
        return True

    def _chunks(self, text: str) -> Iterator[np.ndarray]:  # float32 at native_rate
        raise NotImplementedError

    def _next_chunk(self, it: Iterator[np.ndarray]):
        with self._lock:
            return next(it, _END)

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        if not text.strip():
            return
        await self.start_tts_usage_metrics(text)
        try:
            it = self._chunks(text)
            while True:
                chunk = await asyncio.to_thread(self._next_chunk, it)
                if chunk is _END:
                    break
                await self.stop_ttfb_metrics()
                pcm = float_to_int16(trim_silence(chunk, self.native_rate) if self.trim else chunk)
                if self.sample_rate != self.native_rate:
                    pcm = await self._resampler.resample(pcm, self.native_rate, self.sample_rate)
                if pcm:
                    yield TTSAudioRawFrame(audio=pcm, sample_rate=self.sample_rate, num_channels=1,
                                           context_id=context_id)
        except Exception as e:  # one bad sentence is skipped; the call goes on
            logger.exception(f"{self}: synthesis failed for {text!r}")
            yield ErrorFrame(error=f"TTS failed: {e}")
        finally:
            await self.stop_ttfb_metrics()


class HibariTTSService(_LocalTTSService):
    native_rate = 24000

    def __init__(self, *, speed: float = 1.0, threads: int = 1, **kwargs) -> None:
        super().__init__(model="hibari-tts", voice="heart", **kwargs)
        self._tts = load_hibari(threads)
        self._speed = speed
        self.native_rate = int(getattr(self._tts, "sample_rate", 24000) or 24000)

    def _chunks(self, text: str) -> Iterator[np.ndarray]:
        return iter(self._tts.stream(text, speed=self._speed))


def piper_available() -> bool:
    return importlib.util.find_spec("piper") is not None


class PiperTTSService(_LocalTTSService):
    """Piper with a local voice file (e.g. en_US-joe-medium.onnx); never downloads."""

    def __init__(self, *, voice_path: str | Path, **kwargs) -> None:
        if not piper_available():
            raise RuntimeError("the piper TTS backend needs `pip install piper-tts` (GPL-3.0; not installed by default)")
        from piper import PiperVoice

        path = Path(voice_path).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"piper voice file {path} does not exist")
        super().__init__(model="piper", voice=path.stem, **kwargs)
        self._voice = PiperVoice.load(str(path))
        self.native_rate = int(self._voice.config.sample_rate)

    def _chunks(self, text: str) -> Iterator[np.ndarray]:
        for chunk in self._voice.synthesize(text):
            yield np.frombuffer(chunk.audio_int16_bytes, dtype=np.int16).astype(np.float32) / 32768.0


class CoquiTTSService(_LocalTTSService):
    """Coqui TTS (`coqui-tts`) from a model folder the user brings (model .pth + config.json).
    Optional: it has no offline weights, and its torchaudio needs the STACK.md workaround."""

    def __init__(self, *, model_dir: str | Path | None, **kwargs) -> None:
        if not model_dir:
            raise RuntimeError("the coqui TTS backend needs --tts-model-dir pointing at a Coqui model folder "
                               "(model .pth and config.json); no weights are downloaded")
        folder = Path(model_dir).expanduser()
        config = folder / "config.json"
        models = sorted(folder.glob("*.pth"))
        if not config.is_file() or not models:
            raise FileNotFoundError(f"{folder} must hold config.json and a model .pth file")
        try:
            from TTS.api import TTS
        except ImportError as e:
            raise RuntimeError(f"the coqui TTS backend needs `pip install coqui-tts` ({e})") from None
        super().__init__(model="coqui", voice=folder.name, **kwargs)
        self._tts = TTS(model_path=str(models[0]), config_path=str(config), progress_bar=False)
        self.native_rate = int(self._tts.synthesizer.output_sample_rate)

    def _chunks(self, text: str) -> Iterator[np.ndarray]:
        yield np.asarray(self._tts.tts(text), dtype=np.float32)


def make_tts(backend: str = "hibari", *, voice_path: str | None = None, model_dir: str | None = None,
             **kwargs) -> TTSService:
    makers: dict[str, Callable[[], TTSService]] = {
        "hibari": lambda: HibariTTSService(**kwargs),
        "piper": lambda: PiperTTSService(voice_path=voice_path or "", **kwargs),
        "coqui": lambda: CoquiTTSService(model_dir=model_dir, **kwargs),
    }
    if backend not in makers:
        raise ValueError(f"unknown TTS backend {backend!r}; choose one of {', '.join(TTS_BACKENDS)}")
    return makers[backend]()
