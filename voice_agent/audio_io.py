"""Reading recorded calls with soundfile (libsndfile), and writing the replayed call back out.

libsndfile decodes the audio: WAV (PCM 8-32 bit, float, mu-law, A-law, GSM 6.10, IMA and MS
ADPCM), FLAC, OGG (Opus, Vorbis) and MP3. What is left here is what it does not do: a clear
`AudioFormatError` per file (a batch replay reports it and goes on), the check that a WAV is not
cut short (libsndfile silently reads what is there), the caller-channel choice, and resampling
to the pipeline's 16 kHz with soxr (the resampler Pipecat itself uses).
"""

from __future__ import annotations

import io
import struct
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

TARGET_RATE = 16000
MIN_RATE, MAX_RATE = 8000, 48000
# libsndfile subtype -> our encoding name (WAV names as before the move to soundfile).
_ENCODINGS = {
    "PCM_U8": "pcm8", "PCM_S8": "pcm8", "PCM_16": "pcm16", "PCM_24": "pcm24", "PCM_32": "pcm32",
    "FLOAT": "float32", "DOUBLE": "float64", "ULAW": "mulaw", "ALAW": "alaw", "GSM610": "gsm610",
    "IMA_ADPCM": "ima_adpcm", "MS_ADPCM": "ms_adpcm", "OPUS": "opus", "VORBIS": "vorbis",
    "MPEG_LAYER_III": "mp3",
}
_KINDS = {".wav": "WAV", ".flac": "FLAC", ".mp3": "MP3", ".ogg": "OGG", ".opus": "Opus"}
AUDIO_SUFFIXES = tuple(_KINDS)
_UNKNOWN_SIZES = (0, 0xFFFFFFFF)  # a streaming writer that could not seek back leaves these


class AudioFormatError(ValueError):
    """A file this project cannot read as a call, with the file and the reason in the message."""


@dataclass(frozen=True)
class WavInfo:
    """What an audio file holds, before conversion."""

    encoding: str  # "pcm16" | "mulaw" | "alaw" | "gsm610" | "ms_adpcm" | "flac" | "mp3" | "opus" | ...
    sample_rate: int
    channels: int
    frames: int
    container: str = "wav"  # "wav" | "flac" | "ogg" | "mp3" | ...

    @property
    def duration_s(self) -> float:
        return self.frames / self.sample_rate


@dataclass(frozen=True)
class CallerAudio:
    """The caller's side of a recorded call: 16 kHz mono int16 samples."""

    samples: np.ndarray
    info: WavInfo
    channel: int  # which channel of the file was the caller (0 for mono)
    sample_rate: int = TARGET_RATE

    @property
    def duration_s(self) -> float:
        return len(self.samples) / self.sample_rate


def _kind(name: str, data: bytes) -> str:
    if data[:4] in (b"RIFF", b"RF64") and data[8:12] == b"WAVE":
        return "WAV"
    return _KINDS.get(Path(name).suffix.lower(), "audio")


def _check_riff(data: bytes, name: str) -> int | None:
    """A RIFF WAV's structure, which libsndfile does not enforce: the data chunk must be there and
    whole. Returns the format tag (None when the fmt chunk is missing)."""
    pos, tag = 12, None
    while pos + 8 <= len(data):
        cid, size = struct.unpack_from("<4sI", data, pos)
        if cid == b"fmt " and pos + 10 <= len(data):
            tag = struct.unpack_from("<H", data, pos + 8)[0]
        if cid == b"data":
            available = len(data) - pos - 8
            if size not in _UNKNOWN_SIZES and size > available:
                raise AudioFormatError(
                    f"{name}: truncated WAV (data chunk declares {size} bytes, only {available} present)")
            return tag
        pos += 8 + size + (size & 1)  # chunks are word aligned
    raise AudioFormatError(f"{name}: truncated WAV (no data chunk)")


def _open_error(e: sf.LibsndfileError, data: bytes, name: str, kind: str, tag: int | None) -> AudioFormatError:
    reason = str(getattr(e, "error_string", e)).strip().rstrip(".")
    if kind == "WAV" and data[:4] in (b"RIFF", b"RF64"):
        what = f"format tag {tag:#06x}" if tag is not None else "no fmt chunk"
        return AudioFormatError(f"{name}: unsupported WAV encoding: {what} (libsndfile: {reason})")
    if "not recognised" in reason:
        article = "an" if kind[0] in "AEIMO" else "a"  # a WAV, a FLAC, an MP3, an OGG, an Opus
        return AudioFormatError(f"{name}: not {article} {kind} file (libsndfile: format not recognised; "
                                f"starts with {data[:12]!r})")
    return AudioFormatError(f"{name}: truncated or corrupt {kind} (libsndfile: {reason})")


def parse_audio(data: bytes, name: str = "<bytes>") -> tuple[WavInfo, np.ndarray]:
    """Decode a whole audio file. Returns its description and float32 samples shaped
    (frames, channels), in [-1, 1]."""
    if len(data) == 0:
        raise AudioFormatError(f"{name}: empty file (0 bytes)")
    kind = _kind(name, data)
    tag = _check_riff(data, name) if data[:4] == b"RIFF" and data[8:12] == b"WAVE" else None
    try:
        with sf.SoundFile(io.BytesIO(data)) as f:
            declared, log = f.frames, f.extra_info
            info = WavInfo(_ENCODINGS.get(f.subtype, f.subtype.lower()) if f.format != "FLAC" else "flac",
                           f.samplerate, f.channels, declared, f.format.lower().replace("wavex", "wav"))
            kind = {"wav": "WAV", "flac": "FLAC", "ogg": "OGG", "mp3": "MP3"}.get(info.container, kind)
            _check_layout(info, name, kind)
            samples = _read_all(f)
    except sf.LibsndfileError as e:
        raise _open_error(e, data, name, kind, tag) from None
    if info.container == "ogg" and "lacks an end-of-stream" in log:
        raise AudioFormatError(f"{name}: truncated OGG (the last page has no end-of-stream flag)")
    if info.container != "wav" and len(samples) < 0.98 * declared:
        raise AudioFormatError(f"{name}: truncated {kind} (the header says {declared} frames, "
                               f"only {len(samples)} decode)")
    if len(samples) == 0:
        raise AudioFormatError(f"{name}: {kind} has no audio samples")
    samples = np.clip(np.nan_to_num(samples), -1.0, 1.0)
    return WavInfo(info.encoding, info.sample_rate, info.channels, len(samples), info.container), samples


def _read_all(f: sf.SoundFile) -> np.ndarray:
    """Every frame, in blocks: some WAV codecs (GSM 6.10) are not seekable, so the length is not
    asked for."""
    blocks = []
    while len(block := f.read(1 << 16, dtype="float32", always_2d=True)):
        blocks.append(block)
    return np.concatenate(blocks) if blocks else np.zeros((0, f.channels), dtype=np.float32)


def _check_layout(info: WavInfo, name: str, kind: str) -> None:
    if info.channels not in (1, 2):
        raise AudioFormatError(f"{name}: {info.channels}-channel {kind} is not supported: a call is mono, "
                               "or stereo with the caller on one channel")
    if not MIN_RATE <= info.sample_rate <= MAX_RATE:
        raise AudioFormatError(
            f"{name}: unsupported sample rate {info.sample_rate} Hz (supported: {MIN_RATE}-{MAX_RATE} Hz)")


def to_int16(samples: np.ndarray) -> np.ndarray:
    """float in [-1, 1] -> int16 (the inverse of libsndfile's int16 -> float)."""
    return np.clip(np.round(samples * 32768.0), -32768, 32767).astype(np.int16)


def parse_wav(data: bytes, name: str = "<bytes>") -> tuple[WavInfo, np.ndarray]:
    """`parse_audio` with int16 samples shaped (frames, channels)."""
    info, samples = parse_audio(data, name)
    return info, to_int16(samples)


def _resample_float(x: np.ndarray, from_rate: int, to_rate: int) -> np.ndarray:
    if from_rate == to_rate or len(x) == 0:
        return x
    import soxr

    return soxr.resample(x.astype(np.float32), from_rate, to_rate, quality="HQ")


def resample(samples: np.ndarray, from_rate: int, to_rate: int = TARGET_RATE) -> np.ndarray:
    """Resample mono int16 with soxr."""
    if from_rate == to_rate or len(samples) == 0:
        return samples.astype(np.int16, copy=False)
    return to_int16(np.clip(_resample_float(samples.astype(np.float32) / 32768.0, from_rate, to_rate), -1, 1))


def channel_index(caller_channel: str | int) -> int:
    """'left'|'right'|'0'|'1' -> 0|1."""
    value = str(caller_channel).strip().lower()
    if value in ("left", "l", "0"):
        return 0
    if value in ("right", "r", "1"):
        return 1
    raise ValueError(f"caller channel must be left, right, 0 or 1, not {caller_channel!r}")


def read_caller_audio(path: str | Path, caller_channel: str | int = "left") -> CallerAudio:
    """Read a recorded call and return the caller's channel as 16 kHz mono int16."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise AudioFormatError(f"{path}: cannot read file ({e.strerror or e})") from e
    info, frames = parse_audio(data, str(path))
    channel = channel_index(caller_channel) if info.channels == 2 else 0
    mono = _resample_float(np.ascontiguousarray(frames[:, channel]), info.sample_rate, TARGET_RATE)
    return CallerAudio(to_int16(np.clip(mono, -1.0, 1.0)), info, channel)


def write_wav(path: str | Path, samples: np.ndarray, sample_rate: int) -> None:
    """Write int16 samples shaped (frames,) or (frames, channels) as a PCM16 WAV."""
    samples = np.asarray(samples, dtype=np.int16)
    channels = 1 if samples.ndim == 1 else samples.shape[1]
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(np.ascontiguousarray(samples).astype("<i2").tobytes())


def write_wav_g711(path: str | Path, samples: np.ndarray, sample_rate: int) -> None:
    """Write int16 samples as an 8-bit mu-law WAV, the way phone systems record."""
    sf.write(str(path), np.asarray(samples, dtype=np.int16), sample_rate, subtype="ULAW", format="WAV")
