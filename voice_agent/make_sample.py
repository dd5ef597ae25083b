"""Regenerate the shipped sample call: `python -m voice_agent.make_sample [--out samples]`.

A dental-booking caller, spoken by the real TTS (hibari, fixed seeds, so the output is the same
bytes on every run of the same stack), written as an 8 kHz mono PCM16 WAV: the caller's side of
a phone call. The silence between the caller's lines is where the agent answers: long enough for
the greeting and for a reply to start and be heard, like a caller who waits for the answer, and
deliberately not so long that a slow reply goes unnoticed (a reply that has not started when the
caller speaks again is a turn without an answer in the report).

Beside the WAV, a small JSON holds the caller's script (for transcript WER), where each line sits
in the recording, and QA expectations for `voice-agent replay --expect`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from voice_agent.audio_io import resample, write_wav

NAME = "dental_booking_call"
RATE = 8000  # phone-band, like a real call recording; replay resamples to 16 kHz
SAMPLES_DIR = Path(__file__).resolve().parent.parent / "samples"
# Silence before the first line: the agent's greeting plays here.
LEAD_IN_S = 4.5
TAIL_S = 1.0
# (what the caller says, silence after it in seconds: the agent's turn, then a natural pause)
SCRIPT: list[tuple[str, float]] = [
    ("Hi, I'd like to book a teeth cleaning for next Tuesday, please.", 6.5),
    ("Do you have anything in the morning?", 6.0),
    ("Ten in the morning works, and my name is Jordan Lee.", 7.0),
    ("Great, thank you so much, bye!", TAIL_S),
]
# The call is replayed against the day it was recorded and an empty diary, so that the booking it
# ends with is the same on every day the replay runs (voice_agent/replay.py call_clinic).
TODAY = "2026-12-01"
DB = {"empty": True}
EXPECT = {
    "appointments": {"Jordan Lee": [{"date": "2026-12-08", "time": "10:00", "service": "cleaning"}]},
    "tool_calls": ["find_free_slots", "book_appointment"],
    "no_tool_calls": ["cancel_appointment"],
    "must_say": ["Tuesday"],
    "must_not_say": ["as an AI language model"],
}


def synthesize(script: list[tuple[str, float]] = SCRIPT, lead_in_s: float = LEAD_IN_S) -> tuple[np.ndarray, list[dict]]:
    """The caller's audio (int16 at RATE) and where each line sits in it."""
    from hibari import Hibari

    tts = Hibari(threads=1)  # one thread: the ONNX run is then bit-for-bit repeatable
    parts = [np.zeros(int(lead_in_s * RATE), dtype=np.int16)]
    lines = []
    cursor = lead_in_s
    for i, (text, gap_s) in enumerate(script):
        audio = tts(text, speed=1.0, seed=1000 + i)
        speech = resample((np.clip(audio, -1.0, 1.0) * 32767).astype(np.int16), int(tts.sample_rate), RATE)
        parts += [speech, np.zeros(int(gap_s * RATE), dtype=np.int16)]
        lines.append({"text": text, "start_s": round(cursor, 3), "end_s": round(cursor + len(speech) / RATE, 3)})
        cursor += len(speech) / RATE + gap_s
    return np.concatenate(parts), lines


def make_sample(out_dir: Path = SAMPLES_DIR, name: str = NAME) -> tuple[Path, Path]:
    samples, lines = synthesize()
    out_dir.mkdir(parents=True, exist_ok=True)
    wav = out_dir / f"{name}.wav"
    write_wav(wav, samples, RATE)
    meta = {
        "description": "Sample call for `voice-agent replay`: a caller booking a dental cleaning. "
                       "Caller side only (the agent's side is produced by the replay). Made with "
                       "`python -m voice_agent.make_sample`.",
        "scenario": "dental_clinic",
        "tts": f"hibari-tts (voice heart), seeds 1000+i, resampled to {RATE} Hz",
        "sample_rate": RATE,
        "today": TODAY,
        "db": DB,
        "duration_s": round(len(samples) / RATE, 3),
        "script": [line["text"] for line in lines],
        "lines": lines,
        "expect": EXPECT,
    }
    meta_path = out_dir / f"{name}.json"
    meta_path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return wav, meta_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=SAMPLES_DIR, help="folder for the WAV and its JSON")
    args = parser.parse_args(argv)
    wav, meta = make_sample(args.out)
    print(f"wrote {wav} ({wav.stat().st_size // 1024} kB) and {meta}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
