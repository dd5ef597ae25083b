"""End-to-end replay: a 2-turn call made with the real TTS goes through the live pipeline (real
VAD, STT, the default engine model, TTS) next to four broken inputs. The good call is measured
turn by turn, the broken ones are reported and skipped, and the exit status says some failed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from voice_agent.audio_io import parse_wav, write_wav_g711
from voice_agent.cli import main as cli_main
from voice_agent.latency.report import validate
from voice_agent.latency.wer import wer

pytestmark = pytest.mark.slow  # end to end on the real models (pytest -m 'not slow' skips it)

TIMING_TOLERANCE_S = 0.15  # where make_sample puts a line, across CPUs (TTS durations vary by frames)

SCRIPT = [
    # The pause leaves room for a slow first answer on a busy CPU (the first turn prefills the
    # whole system prompt and tool schemas), so the caller does not talk over it.
    ("Hi, I'd like to book a teeth cleaning for next Tuesday, please.", 20.0),
    ("Do you have anything in the morning?", 1.0),
]
TURN_FIELDS = ("e2e_ms", "ttft_ms", "ttfat_ms", "stt_ms", "tts_ttfb_ms", "vad_stop_ms", "reasoning_tokens")
DECODE_FIELDS = ("prefill_ms", "tokens_per_forward", "decode_tok_s")  # a turn the policy decided decodes nothing


@pytest.fixture(scope="module")
def replayed(tmp_path_factory) -> tuple[int, dict, Path, Path]:
    from voice_agent.audio_io import resample
    from voice_agent.make_sample import synthesize

    calls = tmp_path_factory.mktemp("calls")
    out = tmp_path_factory.mktemp("replay")
    caller, lines = synthesize(SCRIPT, lead_in_s=4.5)  # 8 kHz: room for the greeting, then 2 lines
    # A phone-system recording: stereo 8 kHz mu-law, agent (here: a quiet hum) left, caller right.
    hum = (200 * np.sin(2 * np.pi * 60 * np.arange(len(caller)) / 8000)).astype(np.int16)
    write_wav_g711(calls / "a_booking.wav", np.stack([hum, caller], axis=1), 8000)
    (calls / "a_booking.json").write_text(json.dumps({"script": [t for t, _ in SCRIPT]}))
    # Broken inputs, each of a kind the issue names.
    good = (calls / "a_booking.wav").read_bytes()
    (calls / "b_truncated.wav").write_bytes(good[: len(good) // 3])
    (calls / "c_empty.wav").write_bytes(b"")
    (calls / "d_notes.wav").write_text("caller asked about Tuesday\n")
    three = calls / "e_three_channels.wav"
    pcm = calls / "tmp_mono.wav"
    from voice_agent.audio_io import write_wav

    write_wav(pcm, resample(caller[:8000], 8000, 16000), 16000)
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", str(pcm), "-ac", "3", str(three)], check=True)
    pcm.unlink()

    code = cli_main(["replay", str(calls), "--out", str(out), "--caller-channel", "right", "--no-progress",
                     "--model", "default", "--tail-s", "15"])
    report = json.loads((out / "report.json").read_text())
    return code, report, out, calls


def test_exit_status_says_some_inputs_failed(replayed):
    code, report, _, _ = replayed
    assert code == 1
    validate(report)
    assert report["summary"]["calls"] == 5 and report["summary"]["calls_failed"] == 4


def test_bad_inputs_are_reported_and_skipped(replayed):
    _, report, _, _ = replayed
    errors = {Path(c["file"]).name: c["error"] for c in report["calls"]}
    assert errors["a_booking.wav"] is None
    assert "truncated WAV" in errors["b_truncated.wav"]
    assert "empty file" in errors["c_empty.wav"]
    assert "not a WAV file" in errors["d_notes.wav"]
    assert "3-channel WAV is not supported" in errors["e_three_channels.wav"]
    for c in report["calls"][1:]:
        assert c["turns"] == []


def test_every_turn_has_every_field(replayed):
    _, report, _, _ = replayed
    call = report["calls"][0]
    assert call["input"] == {"encoding": "mulaw", "sample_rate": 8000, "channels": 2, "caller_channel": 1}
    # Every 20 ms chunk of the recording reached the VAD, and how late it got there is measured.
    assert call["input_lag_ms"]["n"] >= call["duration_s"] / 0.02 - 1
    answered = [t for t in call["turns"] if t["llm_calls"] and t["answered"]]
    assert len(answered) >= 2, json.dumps(call["turns"], indent=1)[:3000]
    for t in answered:
        for field in TURN_FIELDS:
            assert t[field] is not None, (field, t)
        decoded = any(m.get("forward_passes") != 0 for m in t["engine"] or [])
        for field in DECODE_FIELDS:
            assert (t[field] is not None) is decoded, (field, t)
        assert isinstance(t["within_budget"], bool)
        assert t["within_budget"] == (t["e2e_ms"] <= report["summary"]["budget_ms"])
        assert t["e2e_from"] == "recording"
        assert t["vad_stop_ms"] >= 0 and t["e2e_ms"] > t["vad_stop_ms"]
        assert t["bot_text"]  # something was said
    assert any(t["tokens_per_forward"] for t in call["turns"]), "no turn of the call ran the model"
    s = report["summary"]
    for metric in ("e2e_ms", "ttfat_ms"):
        assert s[metric]["p50"] is not None and s[metric]["p95"] >= s[metric]["p50"]
    assert s["model"] and s["reasoning_effort"] == "instant" and s["machine"]["cpu_count"]


def test_stages_add_up_to_e2e_within_ten_percent(replayed):
    _, report, _, _ = replayed
    for t in report["calls"][0]["turns"]:
        if t["e2e_ms"] is None:
            continue
        named = sum(v for k, v in t["breakdown"].items() if k != "other_ms" and v is not None)
        assert abs(named - t["e2e_ms"]) <= 0.10 * t["e2e_ms"], t["breakdown"]
        assert sum(v or 0 for v in t["breakdown"].values()) == pytest.approx(t["e2e_ms"], abs=1.0)


def test_caller_transcripts_from_the_real_stt_match_the_script(replayed):
    _, report, _, _ = replayed
    call = report["calls"][0]
    heard = " ".join(t["user_text"] for t in call["turns"])
    assert wer(" ".join(text for text, _ in SCRIPT), heard) <= 0.15, heard
    assert call["caller_wer"] <= 0.15


def test_call_wav_has_caller_left_and_bot_right_time_aligned(replayed):
    _, report, out, _ = replayed
    call = report["calls"][0]
    info, pcm = parse_wav((out / call["outputs"]["call_wav"]).read_bytes())
    assert info.channels == 2 and info.sample_rate == 16000
    assert info.duration_s >= call["duration_s"] - 0.05
    bot = np.abs(pcm[:, 1].astype(np.int32))
    for t in (t for t in call["turns"] if t["answered"]):
        # The bot's channel is silent until its first audio for the turn, then speaks.
        start = t["timeline_s"]["first_bot_audio"]
        before = bot[int((start - 0.3) * 16000): int((start - 0.02) * 16000)]
        after = bot[int(start * 16000): int((start + 0.5) * 16000)]
        assert after.max() > 1000 and (before.size == 0 or before.mean() < after.mean() / 5), start
    # The caller's channel is the recording (right channel of the input), not the hum.
    caller = pcm[:, 0].astype(np.float64)
    first_line = caller[int(4.6 * 16000): int(6.0 * 16000)]
    assert np.sqrt(np.mean(first_line ** 2)) > 500


def test_transcript_json_has_both_sides_and_hidden_reasoning(replayed):
    _, report, out, _ = replayed
    transcript = json.loads((out / report["calls"][0]["outputs"]["transcript"]).read_text())
    speakers = {e["speaker"] for e in transcript["events"]}
    assert {"caller", "bot"} <= speakers
    for e in transcript["events"]:
        if e["speaker"] == "bot-reasoning":
            assert e["spoken"] is False
    assert transcript["script"] == [text for text, _ in SCRIPT]


def test_report_html_is_written(replayed):
    _, _, out, _ = replayed
    html = (out / "report.html").read_text()
    assert 'id="plot-waterfall"' in html and "data:audio/ogg;base64," in html
    assert "b_truncated.wav: truncated WAV" in html


def test_fast_mode_only_skips_idle_silence_away_from_speech():
    """The rule that makes --fast safe: no skip near speech or while anything is in flight."""
    from pipecat.transports.base_transport import TransportParams

    from voice_agent.latency.truth import Segment
    from voice_agent.replay_transport import CallClock, FileInputTransport

    idle = {"s": 5.0}
    feeder = FileInputTransport(np.zeros(16000 * 20, dtype=np.int16), CallClock(),
                                TransportParams(audio_in_enabled=True), fast=True,
                                segments=[Segment(2.0, 4.0), Segment(12.0, 14.0)], idle_for=lambda: idle["s"])
    assert feeder._may_skip(7.0)          # idle, in silence, far from the next speech
    assert not feeder._may_skip(3.0)      # inside speech
    assert not feeder._may_skip(11.2)     # within the margin before the caller speaks again
    idle["s"] = 0.3
    assert not feeder._may_skip(7.0)      # something happened recently: a turn may be in flight
    clock = CallClock()
    clock.start()
    clock.skip_to(5.0)
    assert 5.0 <= clock.now() < 5.1 and clock.skipped_s > 4.9


def test_observer_builds_one_turn_from_a_slow_transcript_and_attributes_engine_metrics():
    """Frames in the order Pipecat pushes them when the STT answers after the turn strategy gave
    up waiting: the late transcript opens a "turn" with no new speech, which is the same caller
    turn. The engine's metrics arrive when its call ends and belong to the turn it started in."""
    import asyncio

    from pipecat.frames.frames import (
        BotStartedSpeakingFrame,
        BotStoppedSpeakingFrame,
        LLMContextFrame,
        LLMTextFrame,
        MetricsFrame,
        OutputAudioRawFrame,
        TranscriptionFrame,
        TTSAudioRawFrame,
        UserStartedSpeakingFrame,
        UserStoppedSpeakingFrame,
        VADUserStartedSpeakingFrame,
        VADUserStoppedSpeakingFrame,
    )
    from pipecat.metrics.metrics import TTFBMetricsData
    from pipecat.observers.base_observer import FramePushed
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.frame_processor import FrameDirection
    from pipecat.services.llm_service import LLMService
    from pipecat.transports.base_output import BaseOutputTransport

    from voice_agent.latency.observer import TurnLatencyObserver
    from voice_agent.services.llm import EngineMetricsFrame
    from voice_agent.services.tts import HibariTTSService

    # Only their types matter to the observer: which processor pushed a frame.
    llm, tts, out, other = (LLMService.__new__(LLMService), HibariTTSService.__new__(HibariTTSService),
                            BaseOutputTransport.__new__(BaseOutputTransport), object())
    now = {"t": 0.0}
    obs = TurnLatencyObserver(clock=lambda: now["t"])
    events = [
        (1.00, VADUserStartedSpeakingFrame(), other), (1.01, UserStartedSpeakingFrame(), other),
        (3.00, VADUserStoppedSpeakingFrame(stop_secs=0.2), other), (8.00, UserStoppedSpeakingFrame(), other),
        (8.20, TranscriptionFrame("hello there", "", "now"), other),
        (8.21, UserStartedSpeakingFrame(), other), (8.22, UserStoppedSpeakingFrame(), other),
        (8.23, LLMContextFrame(LLMContext()), other), (9.00, LLMTextFrame("Hi!"), llm),
        (9.10, EngineMetricsFrame(metrics={"total_ms": 800.0, "ttft_ms": 100.0, "prefill_ms": 40.0}), llm),
        (9.20, TTSAudioRawFrame(b"\1\0" * 160, 16000, 1), tts),
        (9.20, MetricsFrame(data=[TTFBMetricsData(processor="tts", value=0.05)]), tts),
        (9.21, BotStartedSpeakingFrame(), out), (9.22, OutputAudioRawFrame(b"\1\0" * 160, 16000, 1), out),
        (11.0, BotStoppedSpeakingFrame(), out),
        # The rest of what the caller said, transcribed after the answer: Pipecat opens a turn for it.
        (11.5, TranscriptionFrame("and my name is Jo", "", "now"), other),
        (11.6, UserStartedSpeakingFrame(), other), (11.61, UserStoppedSpeakingFrame(), other),
        (11.62, LLMContextFrame(LLMContext()), other),
        (12.0, VADUserStartedSpeakingFrame(), other), (12.01, UserStartedSpeakingFrame(), other),
    ]

    async def push_all():
        for t, frame, src in events:
            now["t"] = t
            dest = llm if isinstance(frame, LLMContextFrame) else other
            await obs.on_push_frame(FramePushed(source=src, destination=dest, frame=frame,
                                                direction=FrameDirection.DOWNSTREAM, timestamp=0))
            # A hop further on: not the frame's first push, so it adds nothing.
            await obs.on_push_frame(FramePushed(source=other, destination=other, frame=frame,
                                                direction=FrameDirection.DOWNSTREAM, timestamp=0,
                                                first_push=False))

    asyncio.run(push_all())
    first, late, second = obs.turns
    assert (first.user_text, first.vad_stopped, first.llm_request) == ("hello there", 3.0, 8.23)
    assert first.first_answer_token == 9.0 and first.first_bot_audio == 9.22 and first.answered
    assert first.tts_request == pytest.approx(9.15) and first.tts_ttfb_ms == pytest.approx(50.0)
    assert first.engine == [{"total_ms": 800.0, "ttft_ms": 100.0, "prefill_ms": 40.0}]
    assert first.first_token == pytest.approx(8.4)  # the engine call started at 9.1 - 0.8
    assert second.index == 2 and second.user_started == 12.0 and not first.interrupted
    assert first.llm_calls == 1 and not first.late_transcript
    assert (late.user_text, late.transcript_final, late.llm_request) == ("and my name is Jo", 11.5, 11.62)
    assert late.vad_stopped == 3.0 and late.vad_started is None  # no new speech: the last VAD stop
    assert late.interrupted  # the caller spoke again before it was answered


def test_shipped_sample_call_is_what_make_sample_describes(transcribe):
    """samples/ is what `make_sample` describes: its script, each line where the metadata puts it (the
    generator, rerun here, places them the same to within TIMING_TOLERANCE_S), silence between the lines,
    and the caller's words recognised by the real STT. Not byte identity: the TTS's ONNX kernels give
    other samples on another CPU."""
    import soundfile as sf

    from voice_agent.make_sample import NAME, RATE, SAMPLES_DIR, SCRIPT, synthesize

    shipped, rate = sf.read(SAMPLES_DIR / f"{NAME}.wav", dtype="int16")
    info = sf.info(SAMPLES_DIR / f"{NAME}.wav")
    assert (rate, info.channels, info.subtype) == (RATE, 1, "PCM_16") and shipped.ndim == 1
    meta = json.loads((SAMPLES_DIR / f"{NAME}.json").read_text())
    assert meta["script"] == [text for text, _ in SCRIPT] and [x["text"] for x in meta["lines"]] == meta["script"]
    assert abs(meta["duration_s"] - len(shipped) / RATE) < 0.01 and 20 <= meta["duration_s"] <= 40
    assert len((SAMPLES_DIR / f"{NAME}.json").read_bytes()) < 4096  # a few kB of metadata

    samples, lines = synthesize()
    assert abs(len(samples) - len(shipped)) / RATE <= TIMING_TOLERANCE_S
    for got, want in zip(lines, meta["lines"], strict=True):
        assert abs(got["start_s"] - want["start_s"]) <= TIMING_TOLERANCE_S
        assert abs(got["end_s"] - want["end_s"]) <= TIMING_TOLERANCE_S

    def rms(a: float, b: float) -> float:
        part = shipped[int(a * RATE):int(b * RATE)].astype(np.float64)
        return float(np.sqrt(np.mean(part ** 2))) if len(part) else 0.0

    edges = [0.0] + [t for x in meta["lines"] for t in (x["start_s"], x["end_s"])] + [len(shipped) / RATE]
    for k, line in enumerate(meta["lines"]):
        assert rms(line["start_s"], line["end_s"]) > 300  # speech where the caller speaks
        gap = (edges[2 * k], edges[2 * k + 1])
        assert rms(*gap) < 30  # and the agent's turn is silent on the caller's channel
        heard = transcribe(shipped[int(line["start_s"] * RATE):int(line["end_s"] * RATE)], RATE)
        assert wer(line["text"], heard) <= 0.2, (line["text"], heard)
