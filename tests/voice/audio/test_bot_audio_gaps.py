"""The replay report says what the ear gets of each answer: silence before the voice, and the
longest pause inside it (voice_agent/replay.py `_bot_audio_gaps`)."""

from __future__ import annotations

import numpy as np

from voice_agent.replay import _bot_audio_gaps

RATE = 16000


class _Capture:
    def __init__(self, track: np.ndarray) -> None:
        self.track = track

    def bot_track(self, channel: int, rate: int) -> np.ndarray:
        assert rate == RATE
        return self.track


def _tone(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (8000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)


def _silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * RATE), dtype=np.int16)


def test_a_reply_in_two_pieces_reports_the_pause_between_them():
    # turn 0: 0.1 s padding, 0.8 s voice, a 0.6 s wait for the next words, 0.5 s voice
    # turn 1: one piece of voice, no pause inside
    track = np.concatenate([_silence(1.0), _silence(0.1), _tone(0.8), _silence(0.6), _tone(0.5),
                            _silence(1.0), _tone(1.0), _silence(0.5)])
    turns = [{"timeline_s": {"first_bot_audio": 1.0, "bot_stopped": 3.0}},
             {"timeline_s": {"first_bot_audio": 4.0, "bot_stopped": 5.2}},
             {"timeline_s": {"first_bot_audio": None}}]
    _bot_audio_gaps(turns, _Capture(track))
    assert abs(turns[0]["bot_leading_silence_ms"] - 100) < 25
    assert abs(turns[0]["bot_longest_pause_ms"] - 600) <= 40
    assert turns[1]["bot_longest_pause_ms"] <= 20
    assert turns[2]["bot_leading_silence_ms"] is None and turns[2]["bot_longest_pause_ms"] is None
