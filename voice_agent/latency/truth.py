"""Ground truth from the recording: where the caller actually spoke.

An offline Silero VAD pass over the whole file finds the voiced segments. Replay counts each
turn's `e2e_ms` from the end of the last voiced segment before the pipeline's own VAD fired, so
the live VAD's end-of-turn wait is part of the number rather than hidden before it starts.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from voice_agent.latency.timeline import TURN_PAUSE_MAX_S

SAMPLE_RATE = 16000


@dataclass(frozen=True)
class Segment:
    start_s: float
    end_s: float


@functools.lru_cache(maxsize=1)
def _model():
    from silero_vad import load_silero_vad

    return load_silero_vad(onnx=True)


def speech_segments(samples: np.ndarray, sample_rate: int = SAMPLE_RATE) -> list[Segment]:
    """Voiced segments of 16 kHz int16 mono audio. No padding: `end_s` is the end of the last
    voiced 32 ms window, the truth the latency is measured from."""
    import torch
    from silero_vad import get_speech_timestamps

    if sample_rate != SAMPLE_RATE:
        raise ValueError(f"speech_segments needs {SAMPLE_RATE} Hz audio, got {sample_rate}")
    if len(samples) == 0:
        return []
    audio = torch.from_numpy(samples.astype(np.float32) / 32768.0)
    stamps = get_speech_timestamps(audio, _model(), sampling_rate=SAMPLE_RATE, speech_pad_ms=0,
                                   min_silence_duration_ms=100, min_speech_duration_ms=150)
    _model().reset_states()
    return [Segment(s["start"] / SAMPLE_RATE, s["end"] / SAMPLE_RATE) for s in stamps]


def utterances(segments: list[Segment], max_gap_s: float = TURN_PAUSE_MAX_S) -> list[Segment]:
    """Segments joined across pauses shorter than `max_gap_s`: roughly one per caller turn."""
    out: list[Segment] = []
    for seg in segments:
        if out and seg.start_s - out[-1].end_s < max_gap_s:
            out[-1] = Segment(out[-1].start_s, seg.end_s)
        else:
            out.append(seg)
    return out


def true_speech_end(segments: list[Segment], vad_stop_s: float, not_before_s: float = float("-inf"),
                    tolerance_s: float = 0.05) -> float | None:
    """The end of the last voiced segment that ended before the pipeline's VAD said "stopped"
    (`tolerance_s` allows for the 32 ms window granularity), and after `not_before_s` (the previous
    turn's truth), or None if the pipeline stopped on something the offline pass did not hear."""
    ends = [s.end_s for s in segments if not_before_s < s.end_s <= vad_stop_s + tolerance_s]
    return min(max(ends), vad_stop_s) if ends else None


def next_speech_start(segments: list[Segment], t: float) -> float | None:
    """When the caller next starts speaking after file time `t` (None: never again)."""
    starts = [s.start_s for s in segments if s.start_s >= t]
    return min(starts) if starts else None


def in_speech(segments: list[Segment], t: float, pad_s: float = 0.0) -> bool:
    return any(s.start_s - pad_s <= t <= s.end_s + pad_s for s in segments)
