"""Reading recorded calls: every common WAV form gives the caller's speech at 16 kHz; bad files
give clear errors.

The speech is made by the real TTS (hibari) and the WAV variants are written by ffmpeg, an
independent encoder, so the parser is checked against files it did not write itself.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from voice_agent.audio_io import (
    AudioFormatError,
    channel_index,
    mulaw_decode,
    mulaw_encode,
    parse_wav,
    read_caller_audio,
    resample,
    write_wav,
    write_wav_g711,
)

pytestmark = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg is installed by setup.sh")


@pytest.fixture(scope="module")
def speech_24k() -> np.ndarray:
    from hibari import Hibari

    audio = Hibari()("I would like to book a cleaning on Tuesday morning.", seed=0)
    return (np.clip(audio, -1, 1) * 32767).astype(np.int16)


@pytest.fixture(scope="module")
def reference_16k(speech_24k: np.ndarray) -> np.ndarray:
    return resample(speech_24k, 24000, 16000)


@pytest.fixture(scope="module")
def source_dir(tmp_path_factory, speech_24k: np.ndarray) -> Path:
    """A mono and a stereo master at 24 kHz; the stereo one has a 440 Hz tone on the left
    (the agent's side) and the caller's speech on the right."""
    d = tmp_path_factory.mktemp("wavs")
    write_wav(d / "mono.wav", speech_24k, 24000)
    t = np.arange(len(speech_24k)) / 24000
    tone = (0.3 * 32767 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    write_wav(d / "stereo.wav", np.stack([tone, speech_24k], axis=1), 24000)
    return d


def _ffmpeg(src: Path, dst: Path, *args: str) -> Path:
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", str(src), *args, str(dst)], check=True)
    return dst


RATES = [8000, 16000, 24000, 48000]
CODECS = [("pcm_s16le", "pcm16"), ("pcm_mulaw", "mulaw")]


@pytest.fixture(scope="module")
def variants(source_dir) -> Path:
    """Every (layout, rate, codec) form, written by one ffmpeg run per layout (ffmpeg start-up
    dominates on a busy machine)."""
    d = source_dir / "variants"
    d.mkdir()
    for layout in ("mono", "stereo"):
        outputs: list[str] = []
        for rate in RATES:
            for codec, _ in CODECS:
                outputs += ["-ar", str(rate), "-c:a", codec, str(d / f"{layout}_{rate}_{codec}.wav")]
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", str(source_dir / f"{layout}.wav"), *outputs], check=True)
    return d


def _similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Best normalised correlation within +-5 ms, to allow for resampler delay."""
    n = min(len(a), len(b)) - 200
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    best = 0.0
    for lag in range(-80, 81, 4):
        x = a[100 + lag: 100 + lag + n - 100]
        y = b[100: 100 + n - 100]
        best = max(best, float(np.dot(x, y) / (np.linalg.norm(x) * np.linalg.norm(y) + 1e-9)))
    return best


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("codec,encoding", CODECS)
@pytest.mark.parametrize("layout", ["mono", "stereo"])
def test_every_common_wav_form_reads_as_16k_mono_caller_speech(
        variants, reference_16k, rate, codec, encoding, layout):
    audio = read_caller_audio(variants / f"{layout}_{rate}_{codec}.wav", caller_channel="right")
    assert audio.info.encoding == encoding
    assert audio.info.sample_rate == rate
    assert audio.info.channels == (2 if layout == "stereo" else 1)
    assert audio.sample_rate == 16000 and audio.samples.dtype == np.int16 and audio.samples.ndim == 1
    assert abs(audio.duration_s - len(reference_16k) / 16000) < 0.01
    # 8 kHz keeps only the telephone band, so the bar is lower there; the tone channel
    # would score about 0.
    assert _similarity(audio.samples, reference_16k) > (0.75 if rate == 8000 else 0.9)


def test_caller_channel_selects_the_side(source_dir, reference_16k):
    left = read_caller_audio(source_dir / "stereo.wav", caller_channel="left")
    right = read_caller_audio(source_dir / "stereo.wav", caller_channel=1)
    assert (left.channel, right.channel) == (0, 1)
    assert _similarity(right.samples, reference_16k) > 0.95
    assert _similarity(left.samples, reference_16k) < 0.2
    # The left channel is the 440 Hz tone.
    spectrum = np.abs(np.fft.rfft(left.samples.astype(np.float64)))
    assert abs(np.argmax(spectrum) * 16000 / len(left.samples) - 440) < 5


def test_mono_file_ignores_the_caller_channel(source_dir):
    audio = read_caller_audio(source_dir / "mono.wav", caller_channel="right")
    assert audio.channel == 0 and audio.info.channels == 1


def test_float_and_24bit_and_alaw_forms_read(source_dir, reference_16k, tmp_path):
    forms = [("pcm_f32le", "float32"), ("pcm_s24le", "pcm24"), ("pcm_alaw", "alaw"), ("pcm_u8", "pcm8")]
    outputs = [a for codec, _ in forms for a in ("-c:a", codec, str(tmp_path / f"{codec}.wav"))]
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", str(source_dir / "mono.wav"), *outputs], check=True)
    for codec, encoding in forms:
        audio = read_caller_audio(tmp_path / f"{codec}.wav")
        assert audio.info.encoding == encoding
        assert _similarity(audio.samples, reference_16k) > 0.9, codec


def test_mulaw_codec_round_trip_matches_ffmpeg(source_dir, speech_24k, tmp_path):
    ours = tmp_path / "ours.wav"
    write_wav_g711(ours, speech_24k, 24000)
    theirs = _ffmpeg(source_dir / "mono.wav", tmp_path / "theirs.wav", "-c:a", "pcm_mulaw")
    info, ours_samples = parse_wav(ours.read_bytes())
    _, theirs_samples = parse_wav(theirs.read_bytes())
    assert info.encoding == "mulaw"
    # Same G.711 code book as ffmpeg; the encoders round differently (ffmpeg drops the two
    # low bits first), so a code may differ by one quantisation step, never more.
    levels = np.unique(mulaw_decode(bytes(range(256))))
    ours_rank = np.searchsorted(levels, ours_samples.ravel())
    theirs_rank = np.searchsorted(levels, theirs_samples.ravel())
    assert np.max(np.abs(ours_rank - theirs_rank)) <= 1
    assert np.mean(ours_rank == theirs_rank) > 0.8
    # And decoding the encoder's output is close to the original.
    back = mulaw_decode(mulaw_encode(speech_24k))
    err = np.abs(back.astype(np.int32) - speech_24k.astype(np.int32))
    assert np.max(err) <= 1024 and np.mean(err) < 40


def test_truncated_wav_is_a_clear_error(source_dir, tmp_path):
    data = (source_dir / "mono.wav").read_bytes()
    cut = tmp_path / "truncated.wav"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(AudioFormatError, match="truncated WAV"):
        read_caller_audio(cut)
    header_only = tmp_path / "header_only.wav"
    header_only.write_bytes(data[:30])
    with pytest.raises(AudioFormatError, match="truncated"):
        read_caller_audio(header_only)


def test_zero_length_file_is_a_clear_error(tmp_path):
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    with pytest.raises(AudioFormatError, match="empty file"):
        read_caller_audio(empty)


def test_non_wav_with_wav_name_is_a_clear_error(tmp_path):
    fake = tmp_path / "notes.wav"
    fake.write_text("Call notes: patient wants Tuesday.\n")
    with pytest.raises(AudioFormatError, match="not a WAV file"):
        read_caller_audio(fake)


def test_three_channel_file_is_a_clear_error(source_dir, tmp_path):
    path = _ffmpeg(source_dir / "mono.wav", tmp_path / "three.wav", "-ac", "3")
    with pytest.raises(AudioFormatError, match="3-channel WAV is not supported"):
        read_caller_audio(path)


def test_unsupported_encoding_is_a_clear_error(source_dir, tmp_path):
    path = _ffmpeg(source_dir / "mono.wav", tmp_path / "adpcm.wav", "-c:a", "adpcm_ms")
    with pytest.raises(AudioFormatError, match="unsupported WAV encoding: MS ADPCM"):
        read_caller_audio(path)


def test_wav_without_samples_is_a_clear_error(tmp_path):
    path = tmp_path / "silent.wav"
    write_wav(path, np.zeros(0, dtype=np.int16), 16000)
    with pytest.raises(AudioFormatError, match="no audio samples"):
        read_caller_audio(path)


def test_unsupported_rate_is_a_clear_error(tmp_path):
    path = tmp_path / "ultrasonic.wav"
    write_wav(path, np.zeros(960, dtype=np.int16), 96000)
    with pytest.raises(AudioFormatError, match="unsupported sample rate 96000"):
        read_caller_audio(path)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(AudioFormatError, match="cannot read file"):
        read_caller_audio(tmp_path / "nope.wav")


def test_streamed_wav_with_placeholder_size_reads_to_end(source_dir, tmp_path):
    """Writers that cannot seek (live recorders) leave 0xFFFFFFFF as the data size."""
    data = bytearray((source_dir / "mono.wav").read_bytes())
    pos = data.find(b"data")
    struct.pack_into("<I", data, pos + 4, 0xFFFFFFFF)
    path = tmp_path / "streamed.wav"
    path.write_bytes(bytes(data))
    assert read_caller_audio(path).duration_s > 1.0


def test_caller_channel_names():
    assert [channel_index(v) for v in ("left", "right", "0", "1", 0, 1)] == [0, 1, 0, 1, 0, 1]
    with pytest.raises(ValueError, match="left, right, 0 or 1"):
        channel_index("center")
