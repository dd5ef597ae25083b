"""The mic demo's echo canceller (WebRTC's, via livekit) and its speaker buffer, offline: the
sample call's caller stands in for the bot's voice, a delayed quieter copy of it for the echo."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from voice_agent.audio_io import read_caller_audio, resample
from voice_agent.transports.echo_cancel import EchoCanceller

SAMPLE = Path(__file__).resolve().parents[3] / "samples" / "dental_booking_call.wav"
R = 16000


def residual_db(near: np.ndarray, cleaned: np.ndarray) -> float:
    """How far the cleaned signal's energy is below the near end's, in dB (echo return loss
    enhancement, when the near end holds only echo)."""
    e_in = float(np.mean(near.astype(np.float64) ** 2)) + 1e-9
    e_out = float(np.mean(cleaned.astype(np.float64) ** 2)) + 1e-9
    return 10.0 * float(np.log10(e_in / e_out))


@pytest.fixture(scope="module")
def voice() -> np.ndarray:
    return read_caller_audio(SAMPLE).samples[: 20 * R]


def _run(far16: np.ndarray, near: np.ndarray, far_rate: int = 24000, block_s: float = 0.02) -> np.ndarray:
    """Both sides in PortAudio-sized blocks, the far end at the speaker's rate."""
    far = resample(far16, R, far_rate)
    ec = EchoCanceller(delay_ms=40)
    n_near, n_far = int(R * block_s), int(far_rate * block_s)
    out = []
    for k in range(len(near) // n_near):
        ec.far_end(far[k * n_far:(k + 1) * n_far].tobytes(), far_rate)
        cleaned = ec.near_end(near[k * n_near:(k + 1) * n_near].tobytes(), R)
        assert len(cleaned) == 2 * n_near
        out.append(np.frombuffer(cleaned, dtype=np.int16))
    return np.concatenate(out)


def _echo(voice: np.ndarray, gain: float = 0.3, delay_s: float = 0.03) -> np.ndarray:
    d = int(delay_s * R)
    echo = np.zeros_like(voice)
    echo[d:] = (voice[:-d] * gain).astype(np.int16)
    return echo


def test_the_bots_own_voice_is_removed_from_the_microphone(voice):
    near = _echo(voice)
    cleaned = _run(voice, near)
    settled = slice(6 * R, len(cleaned))  # after the first words (the canceller adapts on them)
    assert residual_db(near[settled], cleaned[settled]) > 20


def test_the_caller_talking_over_the_bot_is_kept(voice):
    """Double talk: the bot speaks (echo) while the caller speaks too; the caller must survive."""
    caller = np.zeros_like(voice)
    caller[12 * R: 16 * R] = voice[4 * R: 8 * R]  # the caller's first line, moved under the bot's speech
    near = np.clip(_echo(voice).astype(np.int32) + caller, -32768, 32767).astype(np.int16)
    cleaned = _run(voice, near)
    talk = slice(12 * R, 16 * R)
    kept = residual_db(caller[talk], cleaned[talk])  # a few dB (noise suppression, high-pass), not the echo's >20
    assert abs(kept) < 6, kept


def test_without_a_far_end_the_microphone_passes_through(voice):
    ec = EchoCanceller()
    out = np.concatenate([np.frombuffer(ec.near_end(voice[i:i + 320].tobytes(), R), dtype=np.int16)
                          for i in range(0, 8 * R, 320)])
    assert abs(residual_db(voice[4 * R: 8 * R], out[4 * R: 8 * R])) < 6  # 3.5 dB measured: high-pass, noise suppression


def test_odd_sized_blocks_come_back_the_same_size(voice):
    ec = EchoCanceller()
    sizes = [100, 333, 160, 7, 480]
    got = [len(ec.near_end(voice[:n].tobytes(), R)) for n in sizes]
    assert got == [2 * n for n in sizes]
