"""The dental clinic's SQLite store: bookings persist, no double booking, no lost booking, and bad
arguments come back as clear error dicts (never exceptions)."""

from __future__ import annotations

import datetime as dt
import sqlite3
import threading

import pytest

from tests.dental_pack import ClinicDB
from voice_agent.policy.calendar_words import parse_time, spoken_time


def free_hhmm(db: ClinicDB, day: str) -> list[str]:
    """The day's free times as HH:MM (the tool itself gives them spoken: "9:30 am")."""
    return [parse_time(t) for t in db.find_free_slots({"date": day})["free_times"]]

MONDAY = dt.date(2026, 11, 30)  # a fixed "today" keeps the diary deterministic


@pytest.fixture
def db(tmp_path):
    return ClinicDB(tmp_path / "clinic.sqlite", today=MONDAY)


def next_weekday(days_ahead: int) -> str:
    d = MONDAY + dt.timedelta(days=days_ahead)
    while d.weekday() >= 5:
        d += dt.timedelta(days=1)
    return d.isoformat()


def test_database_file_is_created_and_seeded(tmp_path):
    path = tmp_path / "clinic.sqlite"
    ClinicDB(path, today=MONDAY)
    con = sqlite3.connect(path)
    assert con.execute("SELECT COUNT(*) FROM patients").fetchone()[0] >= 8
    days = {r[0] for r in con.execute("SELECT DISTINCT date FROM slots")}
    assert all(dt.date.fromisoformat(d).weekday() < 5 for d in days)
    assert len(days) == 4 * 5 + 1  # four weeks of weekdays from Monday, plus the Monday after
    times = [r[0] for r in con.execute("SELECT time FROM slots WHERE date = ? ORDER BY time", (MONDAY.isoformat(),))]
    assert times[0] == "09:00" and times[-1] == "16:30" and len(times) == 16
    assert con.execute("SELECT COUNT(*) FROM appointments").fetchone()[0] > 20  # some already booked


def test_reopening_keeps_bookings_and_does_not_reseed(tmp_path):
    path = tmp_path / "clinic.sqlite"
    a = ClinicDB(path, today=MONDAY)
    day = next_weekday(3)
    t = free_hhmm(a, day)[0]
    assert a.book_appointment({"patient_name": "Wei Chen", "date": day, "time": t})["booked"]
    before = a.appointments()
    b = ClinicDB(path, today=MONDAY)
    assert b.appointments() == before


def test_book_then_lookup_move_and_cancel(db):
    day = next_weekday(2)
    free = db.find_free_slots({"date": day, "service": "cleaning"})
    assert free["date"] == day and free["free_times"]
    t = parse_time(free["free_times"][0])  # the tool reads times as the agent says them ("9:30 am")
    r = db.book_appointment({"patient_name": "  maria   garcia ", "date": day, "time": t, "service": "cleaning"})
    assert r["booked"] and r["patient_name"] == "Maria Garcia" and not r["new_patient"]
    assert t not in free_hhmm(db, day)
    assert {"patient_name": "Maria Garcia", "date": day, "time": t, "service": "cleaning"} in db.appointments()

    look = db.lookup_patient({"patient_name": "Maria Garcia"})
    assert look["next_appointment"]["date"] <= day

    # Moving and cancelling act on her next appointment (which may be a seeded earlier one).
    first = look["next_appointment"]
    day2 = next_weekday(9)
    t2 = free_hhmm(db, day2)[-1]
    mv = db.move_appointment({"patient_name": "Maria Garcia", "new_date": day2, "new_time": t2})
    assert mv["moved"] and mv["old"] == first["when"] and mv["when"].endswith(spoken_time(t2))
    assert mv["date"] == day2 and mv["time"] == t2
    assert t2 not in free_hhmm(db, day2)
    assert first["time"] in free_hhmm(db, first["date"])

    n = len(db.appointments("Maria Garcia"))
    c = db.cancel_appointment({"patient_name": "Maria Garcia"})
    assert c["cancelled"]
    assert len(db.appointments("Maria Garcia")) == n - 1
    log = sqlite3.connect(db.path).execute("SELECT action FROM appointment_log ORDER BY id").fetchall()
    assert [a for (a,) in log] == ["booked", "moved", "cancelled"]


def test_new_caller_is_registered_when_booking(db):
    day = next_weekday(1)
    t = free_hhmm(db, day)[0]
    r = db.book_appointment({"patient_name": "Grace Hopper", "date": day, "time": t})
    assert r["booked"] and r["new_patient"]
    assert db.lookup_patient({"patient_name": "grace hopper"})["next_appointment"]["time"] == t


def test_a_lower_case_name_from_speech_is_registered_with_capitals_and_others_as_written(db):
    day = next_weekday(1)
    free = free_hhmm(db, day)
    r = db.book_appointment({"patient_name": "adebayo  dang", "date": day, "time": free[0]})
    assert r["patient_name"] == "Adebayo Dang" and r["new_patient"]
    r = db.book_appointment({"patient_name": "Aoife McDonald-ward", "date": day, "time": free[1]})
    assert r["patient_name"] == "Aoife McDonald-ward"
    assert [a["patient_name"] for a in db.appointments("ADEBAYO DANG")] == ["Adebayo Dang"]


def test_double_booking_is_refused_by_the_unique_constraint(db):
    day = next_weekday(4)
    t = free_hhmm(db, day)[0]
    assert db.book_appointment({"patient_name": "Tom Baker", "date": day, "time": t})["booked"]
    r = db.book_appointment({"patient_name": "Emma Wilson", "date": day, "time": t})
    assert "error" in r and "already taken" in r["error"]
    assert [a["patient_name"] for a in db.appointments() if (a["date"], a["time"]) == (day, t)] == ["Tom Baker"]
    # The constraint itself, not only the handler's check, holds: a raw insert fails.
    con = sqlite3.connect(db.path, isolation_level=None)  # autocommit: no lock is left behind
    with pytest.raises(sqlite3.IntegrityError):
        con.execute("INSERT INTO appointments(patient_id, date, time) VALUES (1, ?, ?)", (day, t))
    con.close()
    # Moving onto a taken slot is refused too, and the old appointment stays.
    other = free_hhmm(db, day)[0]
    assert db.book_appointment({"patient_name": "Emma Wilson", "date": day, "time": other})["booked"]
    before = db.lookup_patient({"patient_name": "Emma Wilson"})["next_appointment"]
    r = db.move_appointment({"patient_name": "Emma Wilson", "new_date": day, "new_time": t})
    assert "already taken" in r["error"]
    assert db.lookup_patient({"patient_name": "Emma Wilson"})["next_appointment"] == before


@pytest.mark.parametrize(
    ("tool", "args", "expect"),
    [
        ("find_free_slots", {"date": "30/11/2026"}, "didn't catch the day"),
        ("find_free_slots", {"date": "2026-02-30"}, "not a real calendar date"),
        ("find_free_slots", {"date": "2026-12-05"}, "closed on weekends"),
        ("find_free_slots", {"date": "2026-11-27"}, "in the past"),
        ("find_free_slots", {"date": "2027-06-01"}, "too far ahead"),
        ("find_free_slots", {}, "the day is missing"),
        ("find_free_slots", {"date": "2026-12-01", "service": "surgery"}, "we offer checkup, cleaning"),
        ("book_appointment", {"patient_name": "John Smith", "date": "2026-12-01", "time": "teatime"}, "didn't catch the time"),
        ("book_appointment", {"patient_name": "John Smith", "date": "2026-12-01", "time": "18:00"}, "not an appointment time"),
        ("book_appointment", {"patient_name": "John Smith", "date": "2026-12-01", "time": "10:15"}, "not an appointment time"),
        ("book_appointment", {"patient_name": "", "date": "2026-12-01", "time": "10:00"}, "patient_name"),
        ("book_appointment", {"patient_name": 42, "date": "2026-12-01", "time": "10:00"}, "patient_name"),
        ("move_appointment", {"patient_name": "Nobody Here", "new_date": "2026-12-01", "new_time": "10:00"}, "No patient named"),
        ("cancel_appointment", {"patient_name": "Jon Smith"}, "Did you mean John Smith"),
        ("lookup_patient", {"patient_name": "Unknown Person"}, "No patient named"),
    ],
)
def test_invalid_arguments_return_a_clear_error_dict(db, tool, args, expect):
    r = getattr(db, tool)(args)
    assert set(r) == {"error"} and expect in r["error"], r


def test_non_dict_arguments_are_an_error_not_an_exception(db):
    assert "error" in db.book_appointment(["not", "a", "dict"])
    assert "error" in db.lookup_patient(None)


def test_concurrent_bookings_never_lose_or_duplicate(db):
    """Twelve threads race for three free slots, each thread trying every slot: every slot ends
    with exactly one booking, and every success reported to a caller is in the database."""
    day = next_weekday(5)
    slots = free_hhmm(db, day)[:3]
    assert len(slots) == 3
    results: list[tuple[str, str, dict]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(12)

    def caller(i: int) -> None:
        name = f"Caller {i}"
        barrier.wait()
        for t in slots:
            r = db.book_appointment({"patient_name": name, "date": day, "time": t})
            with lock:
                results.append((name, t, r))

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(12)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()

    wins = [(n, t) for n, t, r in results if r.get("booked")]
    errors = [r["error"] for _, _, r in results if "error" in r]
    assert len(wins) == 3 and len({t for _, t in wins}) == 3
    assert len(errors) == 12 * 3 - 3 and all("already taken" in e for e in errors)
    stored = {(a["patient_name"], a["time"]) for a in db.appointments() if a["date"] == day and a["time"] in slots}
    assert stored == set(wins)


@pytest.mark.parametrize("words, day", [
    ("next tuesday", "2026-12-08"), ("tuesday", "2026-12-08"), ("thursday", "2026-12-03"), ("tomorrow", "2026-12-02"),
    ("the ninth", "2026-12-09"), ("the 9th of december", "2026-12-09"), ("december ninth", "2026-12-09"),
    ("um friday afternoon please", "2026-12-04"), ("monday the seventh", "2026-12-07"), ("2026-12-10", "2026-12-10"),
    ("day after tomorrow", "2026-12-03"), ("jan 5", "2027-01-05"), ("the thirty first", "2026-12-31"),
])
def test_days_in_the_callers_words(words, day):
    from voice_agent.policy.calendar_words import parse_day

    assert parse_day(words, dt.date(2026, 12, 1)).isoformat() == day  # a Tuesday


@pytest.mark.parametrize("words, hhmm", [
    ("ten", "10:00"), ("ten thirty", "10:30"), ("10:30", "10:30"), ("half past two", "14:30"), ("2 pm", "14:00"),
    ("two in the afternoon", "14:00"), ("noon", "12:00"), ("ten in the morning", "10:00"), ("10am", "10:00"),
    ("eleven", "11:00"), ("four thirty", "16:30"), ("three o'clock", "15:00"), ("9:30 am", "09:30"), ("1:30 pm", "13:30"),
])
def test_times_in_the_callers_words(words, hhmm):
    assert parse_time(words) == hhmm


@pytest.mark.parametrize("words", ["next week", "someday", "wednesday the eighth", "february thirtieth"])
def test_ambiguous_or_wrong_days_are_errors_the_agent_can_say(words):
    from voice_agent.policy.calendar_words import WordsError, parse_day

    with pytest.raises(WordsError):
        parse_day(words, dt.date(2026, 12, 1))


def test_tools_take_the_callers_words_and_give_back_what_to_read(tmp_path):
    db = ClinicDB(tmp_path / "c.sqlite", today=dt.date(2026, 12, 1), empty=True)
    r = db.book_appointment({"patient_name": "Jordan Lee", "date": "next tuesday", "time": "ten",
                             "service": "hygiene visit"})
    assert (r["date"], r["time"], r["service"]) == ("2026-12-08", "10:00", "cleaning")
    assert r["when"] == "Tuesday, December 8th at 10 am"
    free = db.find_free_slots({"date": "the eighth", "part_of_day": "morning"})
    assert free["day"] == "Tuesday, December 8th" and "10 am" not in free["free_times"]
    assert all(t.endswith("am") for t in free["free_times"])
    taken = db.book_appointment({"patient_name": "Ana Ruiz", "date": "tuesday", "time": "10 am"})
    assert taken["error"].startswith("Tuesday, December 8th at 10 am is already taken. Free times that day include")
    assert "closed on weekends" in db.find_free_slots({"date": "saturday"})["error"]
    assert "in the past" in db.find_free_slots({"date": "2026-11-30"})["error"]
