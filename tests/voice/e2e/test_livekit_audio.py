"""LiveKit rtc's local audio objects carry our TTS audio: HibariTTS (through livekit's own
ChunkedStream machinery) -> AudioSource -> LocalAudioTrack -> AudioStream, and AudioResampler
24 kHz -> 48 kHz. No LiveKit server: these objects work locally. The received audio must have the
speech's duration and energy, and Whisper must still hear the sentence in it."""

from __future__ import annotations

import asyncio
import re

import numpy as np
import pytest
from livekit import rtc

from voice_agent.livekit.stt import WhisperSTT, frames_to_16k_float
from voice_agent.livekit.tts import SAMPLE_RATE, HibariTTS

SENTENCE = "Hello, I would like to book a cleaning on Monday morning."
FRAME_MS = 10


def pcm_of(frames: list[rtc.AudioFrame] | rtc.AudioFrame) -> np.ndarray:
    frame = rtc.combine_audio_frames(frames) if isinstance(frames, list) else frames
    return np.frombuffer(frame.data, dtype=np.int16).astype(np.float32)


def voiced(pcm: np.ndarray, rate: int, threshold: float = 300.0) -> np.ndarray:
    """The span from the first to the last sample louder than `threshold` (trims edge silence)."""
    loud = np.flatnonzero(np.abs(pcm) > threshold)
    assert loud.size, "no audible sample at all"
    return pcm[loud[0]: loud[-1] + 1]


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x))))


@pytest.fixture(scope="module")
def tts_frame() -> rtc.AudioFrame:
    async def make() -> rtc.AudioFrame:
        return await HibariTTS().synthesize(SENTENCE).collect()

    return asyncio.run(make())


def test_hibari_tts_adapter_produces_24k_speech(tts_frame: rtc.AudioFrame) -> None:
    assert tts_frame.sample_rate == SAMPLE_RATE and tts_frame.num_channels == 1
    assert 2.0 < tts_frame.duration < 6.0  # a 12-word sentence
    assert rms(pcm_of(tts_frame)) > 500  # speech, not silence


async def send_and_receive(frame: rtc.AudioFrame, out_rate: int) -> list[rtc.AudioFrame]:
    """Publish `frame` through an AudioSource/LocalAudioTrack in 10 ms frames, read it back from an
    AudioStream on the same track (which resamples to `out_rate`)."""
    source = rtc.AudioSource(frame.sample_rate, 1)
    track = rtc.LocalAudioTrack.create_audio_track("agent-voice", source)
    stream = rtc.AudioStream.from_track(track=track, sample_rate=out_rate, num_channels=1)
    received: list[rtc.AudioFrame] = []

    async def read() -> None:
        async for ev in stream:
            received.append(ev.frame)

    reader = asyncio.create_task(read())
    pcm = np.frombuffer(frame.data, dtype=np.int16)
    n = frame.sample_rate * FRAME_MS // 1000
    pcm = np.pad(pcm, (0, -len(pcm) % n))
    for i in range(0, len(pcm), n):
        await source.capture_frame(rtc.AudioFrame(pcm[i:i + n].tobytes(), frame.sample_rate, 1, n))
    await source.wait_for_playout()
    await asyncio.sleep(0.3)  # let the last frames through the stream
    await stream.aclose()
    reader.cancel()
    await source.aclose()
    return received


@pytest.mark.parametrize("out_rate", [24000, 48000])
async def test_audio_source_to_audio_stream_keeps_duration_and_energy(tts_frame: rtc.AudioFrame, out_rate: int) -> None:
    received = await send_and_receive(tts_frame, out_rate)
    assert received and all(f.sample_rate == out_rate for f in received)
    sent_v = voiced(pcm_of(tts_frame), SAMPLE_RATE)
    got_v = voiced(pcm_of(received), out_rate)
    assert abs(len(got_v) / out_rate - len(sent_v) / SAMPLE_RATE) < 0.05  # same speech length (s)
    assert rms(got_v) == pytest.approx(rms(sent_v), rel=0.15)  # same loudness


async def test_received_audio_is_still_the_sentence_for_whisper(tts_frame: rtc.AudioFrame) -> None:
    received = await send_and_receive(tts_frame, 48000)
    event = await WhisperSTT().recognize(received)
    words = re.findall(r"[a-z]+", event.alternatives[0].text.lower())
    assert {"book", "cleaning", "monday"} <= set(words), event.alternatives[0].text


def test_audio_resampler_24k_to_48k_doubles_samples_and_keeps_energy(tts_frame: rtc.AudioFrame) -> None:
    resampler = rtc.AudioResampler(SAMPLE_RATE, 48000, num_channels=1)
    out: list[rtc.AudioFrame] = []
    pcm = np.frombuffer(tts_frame.data, dtype=np.int16)
    n = SAMPLE_RATE * FRAME_MS // 1000
    for i in range(0, len(pcm), n):  # pushed in 10 ms pieces, as a live stream would be
        piece = pcm[i:i + n]
        out += resampler.push(rtc.AudioFrame(piece.tobytes(), SAMPLE_RATE, 1, len(piece)))
    out += resampler.flush()
    assert all(f.sample_rate == 48000 for f in out)
    got = pcm_of(out)
    assert abs(len(got) - 2 * len(pcm)) <= 2 * n  # within one 10 ms frame
    assert rms(got) == pytest.approx(rms(pcm.astype(np.float32)), rel=0.05)


def test_whisper_input_conversion_handles_empty_and_stereo_48k() -> None:
    assert frames_to_16k_float([]).size == 0
    tone = (np.sin(np.arange(4800) * 2 * np.pi * 440 / 48000) * 8000).astype(np.int16)
    stereo = np.repeat(tone, 2)  # interleaved L/R
    audio = frames_to_16k_float(rtc.AudioFrame(stereo.tobytes(), 48000, 2, len(tone)))
    assert abs(audio.size - 1600) <= 32 and audio.dtype == np.float32  # 100 ms at 16 kHz
    assert 0.15 < float(np.abs(audio).max()) < 0.3  # 8000 / 32768, not doubled by the channels
