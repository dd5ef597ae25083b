"""Concurrent phone calls on one process: Twilio-shaped callers (voice_agent/callload/caller.py)
stream speech made by the real TTS, in real time, into the real phone app (FastAPI under uvicorn,
Silero VAD, faster-whisper, the default dLLM, hibari), and every turn is measured as replay
measures it. Each level is a few short calls, bounded in time."""

from __future__ import annotations

from pathlib import Path

import pytest

from voice_agent.callload.caller import CallerFaults
from voice_agent.callload.faults import FaultyEngine
from voice_agent.callload.run import LoadOptions, PhoneApp, load_recordings, run_level
from voice_agent.config import CallOptions
from voice_agent.engine_host import call_scheduler
from voice_agent.scenarios import load_scenario
from voice_agent.transports.phone import PhoneServer

pytestmark = pytest.mark.slow
APOLOGY = "Sorry, I had a problem there"
# The greeting plays first (the caller waits for it), then one booking request: a tool call and an answer.
BOOKING = [("Hi, I'd like to book a cleaning for next Tuesday, please.", 1.0)]


@pytest.fixture(scope="module")
def caller_wav(tmp_path_factory) -> Path:
    from voice_agent.audio_io import write_wav
    from voice_agent.make_sample import RATE, synthesize

    audio, _ = synthesize(BOOKING, lead_in_s=4.5)
    path = tmp_path_factory.mktemp("callers") / "booking.wav"
    write_wav(path, audio, RATE)
    return path


def _app(engine, tmp_path: Path) -> PhoneApp:
    scenario = load_scenario("dental_clinic")
    options = CallOptions(reasoning_effort="instant", max_tokens=48, store=str(tmp_path / "shared_store"))
    return PhoneApp(PhoneServer(engine=engine, scenario=scenario, options=options, max_calls=None))


def _level(app: PhoneApp, n: int, caller_wav: Path, out: Path, **kw) -> dict:
    opts = LoadOptions(counts=(n,), callers=(str(caller_wav),), stagger_s=kw.pop("stagger_s", 0.2), tail_s=6.0,
                       progress=False, **kw)
    recordings = load_recordings(opts.callers, out)
    return run_level(n, app, recordings, opts, out, app.server.scenario, "default")


def _answered(call: dict) -> bool:
    return bool(call["turns"]) and all(t["e2e_ms"] is not None for t in call["turns"])


def _llm_windows(call: dict) -> list[tuple[float, float]]:
    """When each turn's LLM work ran, on the shared clock: from the request to the first bot audio."""
    zero = call["client"]["origin_monotonic"]
    return [(zero + t["timeline_s"]["llm_request"], zero + t["timeline_s"]["first_bot_audio"])
            for t in call["turns"] if t["timeline_s"].get("llm_request") is not None
            and t["timeline_s"].get("first_bot_audio") is not None]


def test_two_calls_whose_turns_overlap_are_both_answered(default_engine, caller_wav, tmp_path):
    pool = call_scheduler(default_engine)
    before = pool.snapshot()["completed"]
    with _app(default_engine, tmp_path) as app:  # the two callers speak at the same moment
        report = _level(app, 2, caller_wav, tmp_path / "out", stagger_s=0.0)
    calls = report["calls"]
    assert [c["error"] for c in calls] == [None, None]
    assert all(_answered(c) for c in calls), [[t["e2e_ms"] for t in c["turns"]] for c in calls]
    a, b = (_llm_windows(c) for c in calls)
    assert any(x0 < y1 and y0 < x1 for x0, x1 in a for y0, y1 in b), (a, b)  # both were being answered at once
    assert pool.snapshot()["completed"] - before >= 2  # through the process's one scheduler
    assert report["summary"]["silent_calls"] == 0 and report["summary"]["answered_turns"] >= 2
    assert (tmp_path / "out" / "report.html").exists()


def test_past_the_limit_a_caller_hears_the_busy_message_and_the_admitted_call_is_answered(
        default_engine, caller_wav, tmp_path):
    with _app(default_engine, tmp_path) as app:
        report = _level(app, 2, caller_wav, tmp_path / "out", max_calls=1, stagger_s=0.5)
        assert app.server.calls_busy == 1
    admitted, refused = report["calls"]
    assert _answered(admitted) and not admitted["client"]["busy"]
    assert refused["client"]["busy"] and refused["client"]["bot_audio_s"] > 1.5  # the message, not silence
    assert refused["turns"] == [] and report["summary"]["busy_calls"] == 1
    assert report["summary"]["silent_calls"] == 0


@pytest.fixture(scope="module")
def faulted(default_engine, caller_wav, tmp_path_factory) -> tuple[dict, dict, FaultyEngine]:
    """Four calls at once, three with a fault each, then one clean call on the same server."""
    tmp = tmp_path_factory.mktemp("faults")
    speech_end = load_recordings((str(caller_wav),), tmp)[0].segments[-1].end_s
    faults = {
        0: CallerFaults(junk_every_s=0.5, out_of_order=True),
        1: CallerFaults(hang_up_at_s=speech_end + 0.4),          # while its turn is being answered
        2: CallerFaults(stall_at_s=speech_end + 0.1, stall_s=1.5),  # a network that stops both ways
        3: CallerFaults(engine_fails=True),
    }
    engine = FaultyEngine(default_engine)
    with _app(engine, tmp) as app:
        report = _level(app, 4, caller_wav, tmp / "faults", faults=faults)
        clean = _level(app, 1, caller_wav, tmp / "after")
        assert app.server.active_calls == 0 and app.server.calls_failed == 0  # every call ended, none crashed
    return report, clean, engine


def test_junk_and_out_of_order_frames_are_dropped_and_the_call_is_answered(faulted):
    report, _, _ = faulted
    call = report["calls"][0]
    assert call["faults"] == ["junk_frames", "out_of_order_frames"] and call["client"]["junk_sent"] >= 10
    assert _answered(call)


def test_a_caller_who_hangs_up_mid_turn_ends_alone(faulted):
    report, _, _ = faulted
    gone = report["calls"][1]
    assert gone["faults"] == ["hang_up"] and gone["client"]["hung_up"]
    others = [c for i, c in enumerate(report["calls"]) if i in (0, 2)]
    assert all(_answered(c) for c in others)


def test_a_stalled_socket_delays_its_own_call_only(faulted):
    report, _, _ = faulted
    stalled = report["calls"][2]
    assert stalled["faults"] == ["stalled_socket"] and stalled["client"]["bot_audio_s"] > 1.0
    assert _answered(report["calls"][0])


def test_an_engine_failure_in_one_call_costs_that_call_an_apology_and_no_other_call_anything(faulted):
    report, _, engine = faulted
    failed = report["calls"][3]
    assert failed["faults"] == ["engine_failure"] and engine.injected >= 1
    assert any(APOLOGY in t["bot_text"] for t in failed["turns"])  # heard, not silence
    assert _answered(report["calls"][0]) and _answered(report["calls"][2])


def test_the_report_names_every_fault_and_the_server_serves_the_next_call(faulted):
    report, clean, _ = faulted
    assert report["summary"]["faults"] == {"junk_frames": 1, "out_of_order_frames": 1, "hang_up": 1,
                                           "stalled_socket": 1, "engine_failure": 1}
    assert report["summary"]["silent_calls"] == 0
    assert _answered(clean["calls"][0])


def test_two_callers_racing_for_one_slot_get_one_booking_and_each_the_truth(default_engine, tmp_path):
    # both play the sample call at the same moment on one store: "ten in the morning" next Tuesday, twice
    from voice_agent.callload.soak import booking_ledger

    with _app(default_engine, tmp_path) as app:
        scenario = app.server.scenario
        scenario.open_backend(app.server.options.store).close()
        opts = LoadOptions(counts=(2,), callers=("sample",), stagger_s=0.0, tail_s=6.0, progress=False,
                           shared_store=True)
        report = run_level(2, app, load_recordings(opts.callers, tmp_path), opts, tmp_path / "race", scenario, "default")
        backend = scenario.open_backend(app.server.options.store)
        state = backend.snapshot()
        backend.close()
    assert all(_answered(c) for c in report["calls"])
    ledger = booking_ledger(report["calls"], state)
    assert ledger["lost"] == 0 and ledger["doubled"] == 0 and ledger["phantom"] == 0, ledger
    assert ledger["stored"] == ledger["confirmed"] + ledger["unconfirmed"] <= 2
    slots = [(a["date"], a["time"]) for rows in state["appointments"].values() for a in rows]
    assert len(slots) == len(set(slots))  # never two bookings in one slot
