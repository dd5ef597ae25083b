"""Reports: per-turn fields and the e2e breakdown, the summary's percentiles and pass rates, the
documented JSON schema, `report diff` exit codes, expectations, and the HTML page rendered in
headless Chromium (no script errors, every plot loaded, an audio player per call)."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from voice_agent.cli import main as cli_main
from voice_agent.latency.budget import budget_lines
from voice_agent.latency.expectations import apply, check_call, load_expectations
from voice_agent.latency.metrics import STAGE_NAMES, TTFAT_STEPS, distribution, summarize, turn_record
from voice_agent.latency.report import build_report, validate, write_report
from voice_agent.latency.timeline import TurnTimeline

CHROMIUM = "/usr/bin/chromium"


def _timeline(index: int, t0: float, *, llm_s: float = 0.6, tts_request: bool = True) -> TurnTimeline:
    """A turn whose caller stopped speaking at t0 (the truth) with realistic stage durations."""
    tl = TurnTimeline(index=index, user_started=t0 - 2.0)
    tl.vad_stopped = t0 + 0.30
    tl.vad_stop_secs = 0.2
    tl.turn_stopped = t0 + 0.31
    tl.transcript_final = t0 + 0.75
    tl.llm_request = t0 + 0.78
    tl.first_answer_token = tl.first_speakable = tl.llm_request + llm_s
    tl.first_token = tl.llm_request + 0.1
    tl.tts_first_audio = tl.first_answer_token + 0.20
    if tts_request:
        tl.tts_request = tl.tts_first_audio - 0.05
        tl.tts_ttfb_ms = 50.0
    tl.bot_started = tl.tts_first_audio + 0.004
    tl.first_bot_audio = tl.first_answer_audio = tl.tts_first_audio + 0.005
    tl.bot_stopped = tl.first_bot_audio + 2.0
    tl.user_text = "I'd like to book a cleaning on Tuesday."
    tl.bot_text = "Sure, I have Tuesday at 10 am free."
    tl.reasoning = "The caller wants a cleaning; check slots first."
    tl.tool_calls = [{"name": "find_free_slots", "arguments": {"date": "2026-12-01", "service": "cleaning"},
                      "tool_call_id": "call_1", "result": {"slots": ["10:00"]}, "duration_ms": 3.0}]
    tl.engine = [{"ttft_ms": 100.0, "ttfat_ms": 550.0, "prefill_ms": 40.0, "tokens_per_forward": 2.5,
                  "reasoning_tokens": 12, "completion_tokens": 30, "decode_tok_s": 80.0}]
    tl.llm_calls = 2
    return tl


def test_turn_record_has_every_field_and_the_stages_tile_e2e():
    rec = turn_record(_timeline(0, 10.0), true_end=10.0, budget_ms=500)
    assert rec["e2e_ms"] == pytest.approx(300 + 450 + 30 + 600 + 150 + 50 + 5, abs=0.2)
    assert rec["vad_stop_ms"] == pytest.approx(300, abs=0.1)
    assert rec["stt_ms"] == pytest.approx(450, abs=0.1)
    assert rec["ttfat_ms"] == pytest.approx(600, abs=0.1)
    assert rec["tts_ttfb_ms"] == 50.0
    assert rec["ttft_ms"] == 100.0 and rec["prefill_ms"] == 40.0 and rec["tokens_per_forward"] == 2.5
    assert rec["reasoning_tokens"] == 12
    assert rec["within_budget"] is False and rec["ttfat_within_budget"] is False
    b = rec["breakdown"]
    assert set(b) == set(STAGE_NAMES)
    assert b["llm_ms"] == pytest.approx(600, abs=0.1) and b["text_aggregation_ms"] == pytest.approx(150, abs=0.1)
    assert b["other_ms"] == pytest.approx(0, abs=0.2)
    assert sum(v for v in b.values() if v is not None) == pytest.approx(rec["e2e_ms"], abs=0.5)


def test_a_filler_is_not_the_answer_and_the_ttfat_steps_add_up():
    tl = _timeline(0, 10.0)
    tl.filler_text = "One moment."
    tl.first_answer_audio = tl.first_bot_audio + 1.2  # the answer played after the filler
    tl.engine = [{"ttft_ms": 90.0, "total_ms": 150.0, "tool_calls": ["find_free_slots"], "prefill_ms": 30.0},
                 {"ttft_ms": 60.0, "ttfat_ms": 300.0, "prefill_ms": 120.0, "tool_calls": []}]
    rec = turn_record(tl, true_end=10.0, budget_ms=1600)
    assert rec["answer_e2e_ms"] == pytest.approx(rec["e2e_ms"] + 1200, abs=0.2)
    assert rec["within_budget"] is True and rec["answer_within_budget"] is False
    assert rec["filler"] is True
    steps = rec["ttfat_breakdown"]
    assert set(steps) == set(TTFAT_STEPS)
    assert steps["call_decode_ms"] == 150.0 and steps["tool_ms"] == 3.0
    assert steps["prefill_ms"] == 120.0 and steps["first_answer_token_ms"] == 180.0
    assert sum(steps.values()) == pytest.approx(rec["ttfat_ms"], abs=0.5)

    calls = [{"file": "a.wav", "error": None, "turns": [rec, turn_record(_timeline(1, 20.0), true_end=20.0,
                                                                         budget_ms=1600)]}]
    s = summarize(calls, budget_ms=1600, model="default", reasoning_effort="low")
    assert s["budget_pass_rate"] == 1.0 and s["answer_budget_pass_rate"] == 0.5
    assert s["budget_verdict"]["passed"] is False and s["budget_verdict"]["failed"] == ["answer_e2e_ms"]
    assert s["filler_turn_share"] == 0.5
    text = "\n".join(budget_lines(s))
    assert "budget FAIL: answer_e2e_ms" in text and "answer_e2e_ms  p50" in text


def test_an_unobserved_moment_moves_its_time_to_other_not_to_a_neighbour():
    rec = turn_record(_timeline(0, 10.0, tts_request=False), true_end=10.0)
    b = rec["breakdown"]
    assert b["text_aggregation_ms"] is None and b["tts_ttfb_ms"] is None
    assert b["other_ms"] == pytest.approx(200, abs=0.2)  # first answer token -> first TTS audio
    assert sum(v for v in b.values() if v is not None) == pytest.approx(rec["e2e_ms"], abs=0.5)


def test_live_calls_estimate_the_true_end_from_the_vad_wait():
    rec = turn_record(_timeline(0, 10.0), true_end=None)
    assert rec["e2e_from"] == "vad_estimate"
    assert rec["vad_stop_ms"] == pytest.approx(200, abs=0.1)  # the VAD's configured stop_secs


def test_percentiles_match_numpy_linear_interpolation():
    xs = [120.0, 480.0, 510.0, 730.0, 900.0, 1500.0, 260.0]
    d = distribution(xs + [None])
    assert d["n"] == 7
    for p in (50, 95, 99):
        assert d[f"p{p}"] == pytest.approx(np.percentile(xs, p), abs=0.05)
    assert d["min"] == 120.0 and d["max"] == 1500.0
    assert distribution([None])["p50"] is None


def _call(name: str, t0s: list[float], llm_s: list[float], wav: str | None = None) -> dict:
    turns = [turn_record(_timeline(i, t0, llm_s=ls), true_end=t0, budget_ms=1500)
             for i, (t0, ls) in enumerate(zip(t0s, llm_s, strict=True))]
    return {"file": name, "error": None, "duration_s": 30.0, "turns": turns,
            "greeting": {"bot_text": "Bright Smile Dental, this is Maya."},
            "outputs": {"call_wav": wav} if wav else {}}


def _report(llm_s: list[float], wav: str | None = None) -> dict:
    calls = [_call("calls/booking.wav", [3.0, 9.0, 15.0, 21.0][: len(llm_s)], llm_s, wav),
             {"file": "calls/broken.wav", "error": "calls/broken.wav: truncated WAV (...)", "turns": []}]
    summary = summarize(calls, budget_ms=1500, model="default", reasoning_effort="low",
                        extra={"mode": "realtime", "command": "voice-agent replay", "created": "now"})
    return build_report(calls, summary)


def test_summary_pass_rate_percentiles_and_schema():
    report = _report([0.1, 0.3, 0.9, 2.0])
    validate(report)  # the documented schema (SCHEMA.md / report.schema.json)
    s = report["summary"]
    e2e = [t["e2e_ms"] for t in report["calls"][0]["turns"]]
    assert s["e2e_ms"]["p95"] == pytest.approx(np.percentile(e2e, 95), abs=0.1)
    assert s["calls"] == 2 and s["calls_failed"] == 1 and s["turns"] == 4
    assert s["budget_pass_rate"] == pytest.approx(np.mean([e <= 1500 for e in e2e]))
    assert s["dominant_stage"] == "llm_ms"
    assert s["machine"]["cpu_count"] >= 1


def test_an_answer_that_never_played_counts_against_the_pass_rate():
    report = _report([0.1, 0.1])
    turn = report["calls"][0]["turns"][1]
    turn.update(e2e_ms=None, within_budget=False, answered=False)
    s = summarize(report["calls"], budget_ms=1500, model="default", reasoning_effort="low")
    assert s["budget_pass_rate"] == 0.5 and s["answered_turns"] == 1


def test_schema_rejects_a_turn_without_its_latency_fields():
    import jsonschema

    report = _report([0.1])
    del report["calls"][0]["turns"][0]["ttfat_ms"]
    with pytest.raises(jsonschema.ValidationError, match="ttfat_ms"):
        validate(report)


# --- diff ------------------------------------------------------------------------------------

def _write(tmp: Path, name: str, report: dict) -> str:
    path = tmp / name
    path.write_text(json.dumps(report))
    return str(path)


def test_report_diff_exit_codes(tmp_path, capsys):
    base = _report([0.3, 0.4, 0.5, 0.6])
    old = _write(tmp_path, "old.json", base)
    assert cli_main(["report", "diff", old, old]) == 0
    assert "e2e_ms.p95" in capsys.readouterr().out

    slower = _write(tmp_path, "slower.json", _report([0.3, 0.4, 0.5, 1.2]))  # p95 +~500 ms
    assert cli_main(["report", "diff", old, slower]) == 1
    out = capsys.readouterr().out
    assert re.search(r"e2e_ms\.p95 .*REGRESSION", out) and re.search(r"ttfat_ms\.p95 .*REGRESSION", out)
    # A looser threshold lets the same change through.
    assert cli_main(["report", "diff", old, slower, "--max-p95-regression-ms", "1000"]) == 0

    noise = _write(tmp_path, "noise.json", _report([0.3, 0.4, 0.5, 0.63]))  # p95 +~25 ms
    assert cli_main(["report", "diff", old, noise]) == 0

    dropped = copy.deepcopy(base)
    dropped["summary"]["budget_pass_rate"] = base["summary"]["budget_pass_rate"] - 0.25
    assert cli_main(["report", "diff", old, _write(tmp_path, "dropped.json", dropped)]) == 1
    assert "budget_pass_rate" in capsys.readouterr().out.split("FAIL")[-1]

    (tmp_path / "garbage.json").write_text("{not json")
    assert cli_main(["report", "diff", old, str(tmp_path / "garbage.json")]) == 2


# --- expectations ----------------------------------------------------------------------------

def test_expectations_make_a_pass_fail_table(tmp_path):
    exp_file = tmp_path / "expect.yaml"
    exp_file.write_text(
        "calls:\n"
        "  booking.wav:\n"
        "    tool_calls: [find_free_slots, {name: find_free_slots, arguments: {service: cleaning}}, book_appointment]\n"
        "    no_tool_calls: [cancel_appointment]\n"
        "    must_say: ['tuesday at 10']\n"
        "    must_not_say: ['as an AI', 'check slots first']\n")
    table = load_expectations(exp_file)
    report = _report([0.2, 0.2])
    result = apply(report["calls"], table)
    checks = {(c["check"], str(c["expected"])): c["passed"] for c in report["calls"][0]["expectations"]["checks"]}
    assert checks[("tool called", "find_free_slots")]
    assert checks[("tool called", 'find_free_slots({"service": "cleaning"})')]
    assert not checks[("tool called", "book_appointment")]
    assert checks[("tool not called", "cancel_appointment")]
    assert checks[("bot says", "tuesday at 10")]
    # Reasoning is never spoken, so a phrase from it is "not said".
    assert checks[("bot never says", "check slots first")]
    assert result == {"calls_checked": 1, "calls_passed": 0, "passed": False}
    assert check_call(report["calls"][0], {"must_say": ["Tuesday"]})["passed"]


# --- HTML in a real browser ------------------------------------------------------------------

@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    """A report with a real call WAV (TTS speech on both sides) written to disk."""
    from hibari import Hibari

    from voice_agent.audio_io import resample, write_wav

    out = tmp_path_factory.mktemp("report")
    tts = Hibari()
    caller = resample((tts("I need a cleaning on Tuesday.", seed=0) * 32767).astype(np.int16), 24000, 16000)
    bot = resample((tts("Sure, Tuesday at ten works.", seed=0) * 32767).astype(np.int16), 24000, 16000)
    stereo = np.zeros((len(caller) + len(bot) + 16000, 2), dtype=np.int16)
    stereo[: len(caller), 0] = caller
    stereo[len(caller) + 8000: len(caller) + 8000 + len(bot), 1] = bot
    (out / "calls").mkdir()
    write_wav(out / "calls" / "booking.wav", stereo, 16000)
    write_report(_report([0.2, 0.5, 0.9, 1.4], wav="calls/booking.wav"), out)
    return out


def _chromium(*args: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--virtual-time-budget=5000", *args],
            capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium is installed by setup.sh")
def test_html_renders_in_headless_chromium_with_plots_and_audio(rendered):
    page = rendered / "report.html"
    text = page.read_text()
    assert "http://" not in text and "https://" not in text  # self-contained: nothing to fetch
    dom = _chromium("--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    check = re.search(r'<div id="render-check"[^>]*>', dom.stdout)
    assert check, dom.stdout[:2000]
    attrs = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', check.group(0)))
    assert attrs == {"plots": "3", "plots-loaded": "3", "js-errors": "0"}, check.group(0)
    for plot in ("waterfall", "cdf", "breakdown"):
        assert f'id="plot-{plot}"' in dom.stdout
    assert 'src="data:audio/ogg;base64,' in dom.stdout  # the call, embedded
    assert "calls/broken.wav: truncated WAV" in dom.stdout  # the failed input is reported
    assert "The caller wants a cleaning" in dom.stdout  # reasoning shown (collapsed), never as speech

    shot = rendered / "shot.png"
    res = _chromium("--window-size=1200,2400", f"--screenshot={shot}", page.as_uri())
    assert res.returncode == 0 and shot.stat().st_size > 20000
    from matplotlib.image import imread

    pixels = imread(str(shot))
    # Not a blank page: the plots put a good share of coloured pixels on it.
    colored = np.mean(np.ptp(pixels[..., :3], axis=-1) > 0.15)
    assert colored > 0.02


def test_embedded_audio_decodes_to_the_call(rendered):
    """The Opus in the page is the call itself: same length, caller left and bot right."""
    import base64
    import io

    import av

    data = re.search(r'src="data:audio/ogg;base64,([^"]+)"', (rendered / "report.html").read_text()).group(1)
    with av.open(io.BytesIO(base64.b64decode(data))) as container:
        frames = [f.to_ndarray() for f in container.decode(audio=0)]
        rate = container.streams.audio[0].rate
    pcm = np.concatenate(frames, axis=1)
    assert pcm.shape[0] == 2
    from voice_agent.audio_io import read_caller_audio

    call = read_caller_audio(rendered / "calls" / "booking.wav")
    assert abs(pcm.shape[1] / rate - call.duration_s) < 0.1
    half = pcm.shape[1] * 2 // 5
    left, right = np.abs(pcm[0]).astype(float), np.abs(pcm[1]).astype(float)
    assert left[:half].mean() > 5 * right[:half].mean()  # the caller speaks first, on the left


def test_report_html_command_rerenders(rendered, tmp_path):
    shutil.copytree(rendered, tmp_path / "r")
    (tmp_path / "r" / "report.html").unlink()
    assert cli_main(["report", "html", str(tmp_path / "r" / "report.json")]) == 0
    assert "plot-waterfall" in (tmp_path / "r" / "report.html").read_text()


def test_appointments_expectation_checks_what_the_call_left_in_the_diary():
    from voice_agent.latency.expectations import check_call

    call = {"turns": [], "state": {"appointments": {"Jordan Lee": [{"date": "2026-12-08", "time": "10:00",
                                                                    "service": "cleaning"}]}}}
    want = {"Jordan Lee": [{"date": "2026-12-08", "time": "10:00", "service": "cleaning"}], "Ana Ruiz": []}
    assert check_call(call, {"appointments": want})["passed"]
    wrong_time = {"Jordan Lee": [{"date": "2026-12-08", "time": "10:30"}]}
    res = check_call(call, {"appointments": wrong_time})
    assert not res["passed"] and "10:30" in res["checks"][0]["actual"] and "10:00" in res["checks"][0]["actual"]
    empty = {"turns": [], "state": {"appointments": {}}}
    assert not check_call(empty, {"appointments": {"Jordan Lee": want["Jordan Lee"]}})["passed"]
    assert not check_call({"turns": []}, {"state": {"plan": "plus"}})["passed"]  # no state read back
