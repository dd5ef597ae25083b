"""Reading recorded calls from WAV files, and writing the replayed call back out.

Python's `wave` module only reads integer PCM, and phone recordings are very often 8-bit
G.711 mu-law (WAVE_FORMAT_MULAW = 7), so the RIFF chunks are parsed here directly. Every
failure is an `AudioFormatError` whose message says what is wrong with which file, so a
batch replay can report it and go on with the next call.

Supported: mono or stereo; any rate from 8 to 48 kHz (8, 16, 24 and 48 kHz are the common
ones); PCM 8/16/24/32-bit, 32-bit float, mu-law and A-law, including WAVE_FORMAT_EXTENSIBLE.
Everything is returned as 16 kHz mono int16, the rate the pipeline's VAD and STT run at.
"""

from __future__ import annotations

import struct
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

TARGET_RATE = 16000
MIN_RATE, MAX_RATE = 8000, 48000

# WAVE format tags (mmreg.h)
FORMAT_PCM = 0x0001
FORMAT_FLOAT = 0x0003
FORMAT_ALAW = 0x0006
FORMAT_MULAW = 0x0007
FORMAT_EXTENSIBLE = 0xFFFE
_FORMAT_NAMES = {
    0x0001: "PCM", 0x0002: "MS ADPCM", 0x0003: "IEEE float", 0x0006: "A-law", 0x0007: "mu-law",
    0x0011: "IMA ADPCM", 0x0031: "GSM 6.10", 0x0050: "MPEG", 0x0055: "MP3", 0xFFFE: "extensible",
}
# A streaming writer that could not seek back leaves a placeholder size in the header.
_UNKNOWN_SIZES = (0, 0xFFFFFFFF)


class AudioFormatError(ValueError):
    """A file that is not a WAV this project can read, with the reason in the message."""


@dataclass(frozen=True)
class WavInfo:
    """What a WAV file holds, before conversion."""

    encoding: str  # "pcm8" | "pcm16" | "pcm24" | "pcm32" | "float32" | "mulaw" | "alaw"
    sample_rate: int
    channels: int
    frames: int

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


# --- G.711 ---------------------------------------------------------------------------------

def _mulaw_table() -> np.ndarray:
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    sign = u & 0x80
    exponent = (u >> 4) & 0x07
    mantissa = u & 0x0F
    magnitude = (((mantissa << 3) + 0x84) << exponent) - 0x84
    return np.where(sign != 0, -magnitude, magnitude).astype(np.int16)


def _alaw_table() -> np.ndarray:
    a = np.arange(256, dtype=np.int32) ^ 0x55
    sign = a & 0x80
    exponent = (a >> 4) & 0x07
    mantissa = a & 0x0F
    magnitude = np.where(exponent == 0, (mantissa << 4) + 8, ((mantissa << 4) + 0x108) << np.maximum(exponent - 1, 0))
    return np.where(sign != 0, magnitude, -magnitude).astype(np.int16)


_MULAW = _mulaw_table()
_ALAW = _alaw_table()


def mulaw_decode(data: bytes) -> np.ndarray:
    return _MULAW[np.frombuffer(data, dtype=np.uint8)]


def mulaw_encode(samples: np.ndarray) -> bytes:
    """G.711 mu-law encode int16 samples (the inverse of `mulaw_decode`, to within quantisation)."""
    x = samples.astype(np.int32)
    sign = np.where(x < 0, 0x80, 0)
    mag = np.minimum(np.abs(x), 32635) + 0x84
    exponent = np.floor(np.log2(mag)).astype(np.int32) - 7
    exponent = np.clip(exponent, 0, 7)
    mantissa = (mag >> (exponent + 3)) & 0x0F
    return (~(sign | (exponent << 4) | mantissa) & 0xFF).astype(np.uint8).tobytes()


# --- RIFF parsing ----------------------------------------------------------------------------

def _chunks(data: bytes, name: str):
    """Yield (id, offset, declared size) for each RIFF sub-chunk after the WAVE header."""
    pos = 12
    while pos + 8 <= len(data):
        cid, size = struct.unpack_from("<4sI", data, pos)
        yield cid, pos + 8, size
        if cid == b"data" and size in _UNKNOWN_SIZES:
            return
        pos += 8 + size + (size & 1)  # chunks are word aligned


def parse_wav(data: bytes, name: str = "<bytes>") -> tuple[WavInfo, np.ndarray]:
    """Parse a whole WAV file. Returns its description and int16 samples shaped (frames, channels)."""
    if len(data) == 0:
        raise AudioFormatError(f"{name}: empty file (0 bytes)")
    if len(data) < 12 or data[:4] not in (b"RIFF", b"RIFX", b"RF64") or data[8:12] != b"WAVE":
        raise AudioFormatError(f"{name}: not a WAV file (no RIFF/WAVE header; starts with {data[:12]!r})")
    if data[:4] != b"RIFF":
        raise AudioFormatError(f"{name}: {data[:4].decode()} WAV files are not supported; use a plain RIFF WAV")

    fmt: tuple[int, int, int, int, int] | None = None
    pcm: bytes | None = None
    for cid, off, size in _chunks(data, name):
        if cid == b"fmt ":
            if size < 16 or off + 16 > len(data):
                raise AudioFormatError(f"{name}: truncated WAV (fmt chunk is cut short)")
            tag, channels, rate, _byte_rate, block_align, bits = struct.unpack_from("<HHIIHH", data, off)
            if tag == FORMAT_EXTENSIBLE:
                if size < 40 or off + 40 > len(data):
                    raise AudioFormatError(f"{name}: truncated WAV (extensible fmt chunk is cut short)")
                # The real format tag is the first two bytes of the sub-format GUID.
                tag = struct.unpack_from("<H", data, off + 24)[0]
            fmt = (tag, channels, rate, block_align, bits)
        elif cid == b"data":
            if fmt is None:
                raise AudioFormatError(f"{name}: malformed WAV (data chunk before the fmt chunk)")
            available = len(data) - off
            if size in _UNKNOWN_SIZES:
                size = available
            elif size > available:
                raise AudioFormatError(
                    f"{name}: truncated WAV (data chunk declares {size} bytes, only {available} present)")
            pcm = data[off:off + size]
            break
    if fmt is None:
        raise AudioFormatError(f"{name}: malformed WAV (no fmt chunk; truncated or not a WAV)")
    if pcm is None:
        raise AudioFormatError(f"{name}: truncated WAV (no data chunk)")

    tag, channels, rate, block_align, bits = fmt
    encoding = _encoding(tag, bits, name)
    if channels not in (1, 2):
        raise AudioFormatError(
            f"{name}: {channels}-channel WAV is not supported: a call is mono, or stereo with the caller on one channel")
    if not MIN_RATE <= rate <= MAX_RATE:
        raise AudioFormatError(f"{name}: unsupported sample rate {rate} Hz (supported: {MIN_RATE}-{MAX_RATE} Hz)")
    width = bits // 8
    if block_align != width * channels:
        raise AudioFormatError(f"{name}: malformed WAV (block align {block_align} does not match {channels} x {bits}-bit)")
    if len(pcm) == 0:
        raise AudioFormatError(f"{name}: WAV has no audio samples (data chunk is empty)")
    if len(pcm) % block_align:
        pcm = pcm[: len(pcm) - len(pcm) % block_align]  # a cut-off last frame is noise, not an error
    samples = _decode(pcm, encoding).reshape(-1, channels)
    return WavInfo(encoding, rate, channels, samples.shape[0]), samples


def _encoding(tag: int, bits: int, name: str) -> str:
    if tag == FORMAT_PCM and bits in (8, 16, 24, 32):
        return f"pcm{bits}"
    if tag == FORMAT_FLOAT and bits == 32:
        return "float32"
    if tag == FORMAT_MULAW and bits == 8:
        return "mulaw"
    if tag == FORMAT_ALAW and bits == 8:
        return "alaw"
    kind = _FORMAT_NAMES.get(tag, f"format tag {tag:#06x}")
    raise AudioFormatError(
        f"{name}: unsupported WAV encoding: {kind}, {bits}-bit "
        "(supported: PCM 8/16/24/32-bit, 32-bit float, 8-bit mu-law or A-law)")


def _decode(pcm: bytes, encoding: str) -> np.ndarray:
    """Raw sample bytes -> int16."""
    if encoding == "pcm16":
        return np.frombuffer(pcm, dtype="<i2").astype(np.int16)
    if encoding == "mulaw":
        return mulaw_decode(pcm)
    if encoding == "alaw":
        return _ALAW[np.frombuffer(pcm, dtype=np.uint8)]
    if encoding == "pcm8":  # 8-bit WAV PCM is unsigned
        return ((np.frombuffer(pcm, dtype=np.uint8).astype(np.int16) - 128) << 8).astype(np.int16)
    if encoding == "pcm24":
        b = np.frombuffer(pcm, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        v = np.where(v & 0x800000, v - (1 << 24), v)
        return (v >> 8).astype(np.int16)
    if encoding == "pcm32":
        return (np.frombuffer(pcm, dtype="<i4") >> 16).astype(np.int16)
    f = np.nan_to_num(np.frombuffer(pcm, dtype="<f4"))  # float32
    return (np.clip(f, -1.0, 1.0) * 32767).astype(np.int16)


# --- conversion ------------------------------------------------------------------------------

def resample(samples: np.ndarray, from_rate: int, to_rate: int = TARGET_RATE) -> np.ndarray:
    """Resample mono int16 with soxr (the resampler Pipecat itself uses)."""
    if from_rate == to_rate or len(samples) == 0:
        return samples.astype(np.int16, copy=False)
    import soxr

    out = soxr.resample(samples.astype(np.float32) / 32768.0, from_rate, to_rate, quality="HQ")
    return (np.clip(out, -1.0, 32767 / 32768) * 32768).astype(np.int16)


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
    info, frames = parse_wav(data, str(path))
    channel = channel_index(caller_channel) if info.channels == 2 else 0
    mono = np.ascontiguousarray(frames[:, channel])
    return CallerAudio(resample(mono, info.sample_rate), info, channel)


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
    """Write int16 samples as an 8-bit mu-law WAV (format tag 7), the way phone systems record."""
    samples = np.asarray(samples, dtype=np.int16)
    channels = 1 if samples.ndim == 1 else samples.shape[1]
    payload = mulaw_encode(np.ascontiguousarray(samples).reshape(-1))
    # Non-PCM formats carry cbSize and a fact chunk with the frame count.
    fmt = struct.pack("<HHIIHHH", FORMAT_MULAW, channels, sample_rate, sample_rate * channels,
                      channels, 8, 0)
    fact = struct.pack("<I", len(payload) // channels)
    body = (b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
            + b"fact" + struct.pack("<I", 4) + fact
            + b"data" + struct.pack("<I", len(payload)) + payload + (b"\0" if len(payload) & 1 else b""))
    Path(path).write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)
