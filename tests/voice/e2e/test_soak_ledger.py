"""The soak's booking ledger (voice_agent/callload/soak.py): the store's change log against what the
calls were told, on hand-made call records."""

from __future__ import annotations

from voice_agent.callload.caller import CallerFaults
from voice_agent.callload.soak import FAULT_PLAN, booking_ledger, faults_for
from voice_agent.latency.truth import Segment


def _turn(result: dict | None, said: str = "You're booked.", interrupted: bool = False) -> dict:
    calls = [{"name": "book_appointment", "arguments": {}, "result": result}] if result is not None else []
    return {"tool_calls": calls, "bot_text": said, "interrupted": interrupted}


def _booked(name: str, d: str, t: str) -> dict:
    return {"booked": True, "patient_name": name, "date": d, "time": t}


def _log(*rows: tuple[str, str, str]) -> dict:
    return {"changes": [{"action": "booked", "patient_name": n, "date": d, "time": t, "detail": "cleaning"}
                        for n, d, t in rows]}


def test_one_booking_per_slot_confirmed_and_stored_is_clean():
    calls = [{"turns": [_turn(_booked("Jordan Lee", "2026-12-08", "10:00"))]},
             {"turns": [_turn({"error": "10:00 is taken"}, "That time is taken.")]}]
    got = booking_ledger(calls, _log(("Jordan Lee", "2026-12-08", "10:00")))
    assert got == {"confirmed": 1, "unconfirmed": 0, "stored": 1, "lost": 0, "doubled": 0, "phantom": 0}


def test_a_confirmed_booking_missing_from_the_store_is_lost_and_a_slot_stored_twice_is_doubled():
    calls = [{"turns": [_turn(_booked("A", "2026-12-08", "10:00"))]}, {"turns": [_turn(_booked("B", "2026-12-08", "11:00"))]}]
    got = booking_ledger(calls, _log(("A", "2026-12-08", "10:00"), ("C", "2026-12-08", "10:00")))
    assert (got["lost"], got["doubled"], got["phantom"]) == (1, 1, 1)


def test_a_booking_the_caller_left_before_hearing_is_unconfirmed_not_lost():
    calls = [{"turns": [_turn(_booked("A", "2026-12-08", "10:00"), said="", interrupted=True)]}]
    got = booking_ledger(calls, _log(("A", "2026-12-08", "10:00")))
    assert (got["confirmed"], got["unconfirmed"], got["lost"], got["phantom"]) == (0, 1, 0, 0)


def test_a_pack_without_a_change_log_is_not_checked():
    assert booking_ledger([], {"appointments": {}}) is None


def test_every_planned_fault_is_timed_on_the_recordings_own_turns():
    from types import SimpleNamespace

    rec = SimpleNamespace(segments=[Segment(4.5, 8.6), Segment(15.0, 17.2), Segment(23.2, 26.8), Segment(33.8, 36.1)])
    kinds = {k: faults_for(k, rec) for k in FAULT_PLAN}
    assert kinds["clean"] == CallerFaults()
    assert kinds["hang_up_mid_turn"].hang_up_at_s == 8.6 + 0.4
    assert kinds["hang_up_mid_tool_call"].hang_up_at_s == 26.8 + 0.5  # the booking turn
    assert kinds["engine_failure"].names() == ["engine_failure"]
    assert set(kinds["junk_and_out_of_order_frames"].names()) == {"junk_frames", "out_of_order_frames"}
