"""STT window benchmark: the same caller utterances through the 30 s and the short encoder window,
back to back, with each path's WER against the script and its time.

    python -m voice_agent.latency.stt_bench [--windows 30s short] [--limit N] [--json FILE]

The utterances are every caller line the project's calls carry, spoken by the real TTS:
- the shipped sample call (samples/dental_booking_call.wav, cut at its metadata's line times);
- the lines the tests speak (tests/voice/e2e/test_replay.py, test_phone.py, test_livekit_audio.py), through
  the same phone codec (8 kHz mu-law) where the test uses one;
- the hand-written callers of scenarios/dental_clinic/callers/handwritten.yaml, phone band.
Each is framed as the pipeline frames a segment: pre-roll silence before it, the VAD's wait and
Pipecat's trailing pad after it.
"""

from __future__ import annotations

import argparse
import io
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SAMPLES = Path(__file__).resolve().parent.parent.parent / "samples"
PRE_ROLL_S = 0.8   # the segment buffer keeps ~1 s before the VAD's start, which fires 0.2 s in
TRAIL_S = 0.7      # VAD stop_secs 0.2 + SegmentedSTTService's 0.5 s trailing silence
# (text, phone codec?) spoken in tests/: the replay test's two lines are the sample call's first two.
TEST_LINES: tuple[tuple[str, bool], ...] = (
    ("Hi, I'd like to book a teeth cleaning for next Tuesday, please.", True),   # test_replay
    ("Do you have anything in the morning?", True),                               # test_replay
    ("Hi, are you open on Friday afternoon?", True),                              # test_phone
    ("Hello, I would like to book a cleaning on Monday morning.", False),         # test_livekit_audio
)


@dataclass(frozen=True)
class Utterance:
    source: str
    text: str
    audio: np.ndarray  # float32, 16 kHz, framed like a pipeline segment


def _frame(x: np.ndarray) -> np.ndarray:
    z = np.zeros
    return np.concatenate([z(int(PRE_ROLL_S * 16000), np.float32), x.astype(np.float32),
                           z(int(TRAIL_S * 16000), np.float32)])


def _tts_16k(tts, text: str, seed: int, phone: bool) -> np.ndarray:
    import soundfile as sf
    import soxr

    speech = np.asarray(tts(text, seed=seed), dtype=np.float32)
    if not phone:
        return soxr.resample(speech, 24000, 16000).astype(np.float32)
    buf = io.BytesIO()  # through the phone codec: 8 kHz mu-law, as the tests send it
    sf.write(buf, np.clip(soxr.resample(speech, 24000, 8000), -1, 1), 8000, subtype="ULAW", format="WAV")
    buf.seek(0)
    line, _ = sf.read(buf, dtype="float32")
    return soxr.resample(line, 8000, 16000).astype(np.float32)


def corpus() -> list[Utterance]:
    import yaml

    from voice_agent.audio_io import read_caller_audio
    from voice_agent.services.tts import load_hibari

    out: list[Utterance] = []
    meta = json.loads((SAMPLES / "dental_booking_call.json").read_text(encoding="utf-8"))
    call = read_caller_audio(SAMPLES / "dental_booking_call.wav", "left").samples.astype(np.float32) / 32768
    for line in meta["lines"]:
        out.append(Utterance("sample_call", line["text"],
                             _frame(call[int(line["start_s"] * 16000):int(line["end_s"] * 16000)])))
    tts = load_hibari()
    for i, (text, phone) in enumerate(TEST_LINES):
        out.append(Utterance("tests", text, _frame(_tts_16k(tts, text, 1000 + i, phone))))
    calls = yaml.safe_load((SAMPLES.parent / "scenarios" / "dental_clinic" / "callers" / "handwritten.yaml").read_text(encoding="utf-8"))["calls"]
    lines = [t for c in calls for t in c["caller"]]
    for i, text in enumerate(lines):
        out.append(Utterance("handwritten", text, _frame(_tts_16k(tts, text, i, True))))
    return out


def run(windows: list[str], limit: int | None = None) -> dict:
    from voice_agent.latency.wer import word_errors
    from voice_agent.services.stt import load_whisper, transcribe_detailed, whisper_model_path

    model = load_whisper(whisper_model_path("tiny.en"), 2)
    items = corpus()[:limit]
    transcribe_detailed(model, items[0].audio, window=windows[0])  # warm-up, not timed
    totals = {w: {"errors": 0, "words": 0, "seconds": 0.0, "fallbacks": 0} for w in windows}
    rows = []
    for u in items:
        row = {"source": u.source, "text": u.text, "audio_s": round(len(u.audio) / 16000, 2)}
        for w in windows:  # back to back on the same audio: the machine's load hits both alike
            t0 = time.perf_counter()
            got = transcribe_detailed(model, u.audio, window=w)
            dt = time.perf_counter() - t0
            errors, words = word_errors(u.text, got.text)
            tot = totals[w]
            tot["errors"] += errors
            tot["words"] += words
            tot["seconds"] += dt
            tot["fallbacks"] += got.fallback is not None
            row[w] = {"text": got.text, "errors": errors, "ms": round(dt * 1000, 1), "fallback": got.fallback}
        rows.append(row)
    summary = {w: {"wer": round(t["errors"] / max(1, t["words"]), 4), "errors": t["errors"], "words": t["words"],
                   "mean_ms": round(t["seconds"] * 1000 / len(items), 1), "fallbacks": t["fallbacks"]}
               for w, t in totals.items()}
    return {"utterances": len(items), "summary": summary, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--windows", nargs="+", default=["30s", "short"], choices=["30s", "short"])
    p.add_argument("--limit", type=int, default=None, help="only the first N utterances")
    p.add_argument("--json", type=Path, default=None, help="write every transcript and time here")
    args = p.parse_args(argv)
    result = run(args.windows, args.limit)
    for row in result["rows"]:
        if len({row[w]["errors"] for w in args.windows}) > 1 or any(row[w]["fallback"] for w in args.windows):
            print(f"{row['text']!r}: " + " | ".join(f"{w} {row[w]['text']!r} ({row[w]['errors']} err"
                                                    f"{', fallback ' + row[w]['fallback'] if row[w]['fallback'] else ''})"
                                                    for w in args.windows))
    print(f"\n{result['utterances']} utterances")
    for w, s in result["summary"].items():
        print(f"{w:>5}: WER {s['wer']:.4f} ({s['errors']}/{s['words']}), mean {s['mean_ms']:.0f} ms, "
              f"fallbacks to the 30 s window {s['fallbacks']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
