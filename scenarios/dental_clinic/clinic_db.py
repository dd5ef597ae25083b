"""The SQLite store behind the dental receptionist's tools.

A real database file: patients, the clinic's appointment slots (Mon-Fri, 09:00-17:00, every 30
minutes, for the next few weeks) and the booked appointments. `appointments` has UNIQUE(date, time),
so two calls racing for one slot cannot both win, and every write runs in one transaction
(BEGIN IMMEDIATE), so a booking is never half-written or lost. Every change is also appended to
`appointment_log`.

The tool handlers (find_free_slots, book_appointment, move_appointment, cancel_appointment,
lookup_patient) take the model's arguments dict and return a JSON-able dict. Bad arguments (a
malformed date, a weekend, an unknown patient, a taken slot) come back as {"error": "..."} that
the model can read to the caller; they never raise.
"""

from __future__ import annotations

import datetime as dt
import difflib
import random
import re
import sqlite3
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import yaml

from voice_agent.packs.sqlite_store import transaction
from voice_agent.policy.calendar_words import (
    Hours,
    WordsError,
    parse_day,
    parse_time,
    spoken_day,
    spoken_time,
)

DEFAULT_DB_PATH = Path.home() / ".cache" / "voice-agent" / "stores" / "dental_clinic" / "clinic.sqlite"
OPEN_HOUR, CLOSE_HOUR, SLOT_MINUTES = 9, 17, 30
HOURS = Hours(OPEN_HOUR * 60, CLOSE_HOUR * 60)


def _service_words() -> dict[str, tuple[str, ...]]:
    """The services and the caller's words for each: the `x-synonyms` of book_appointment's service in
    this pack's scenario.yaml (one home for the clinic's vocabulary)."""
    data = yaml.safe_load((Path(__file__).with_name("scenario.yaml")).read_text(encoding="utf-8"))
    spec = next(t for t in data["tools"] if t["name"] == "book_appointment")["parameters"]["properties"]["service"]
    return {v: (v, *spec.get("x-synonyms", {}).get(v, ())) for v in spec["enum"]}


SERVICE_WORDS = _service_words()
SERVICES = tuple(SERVICE_WORDS)


def parse_service(text: object) -> str:
    """A service by name or the caller's word for it ("hygiene visit" -> cleaning)."""
    t = " ".join(str(text).lower().replace("-", " ").split()) if isinstance(text, str) else ""
    for service, words in SERVICE_WORDS.items():
        if any(re.search(rf"\b{re.escape(w)}", t) for w in words):
            return service
    raise WordsError(f"we offer {', '.join(SERVICES[:-1])} and {SERVICES[-1]} visits; got {text!r}")
MAX_LISTED_TIMES = 8  # a phone answer reads a few times, not sixteen

SEED_PATIENTS = [
    ("John Smith", "555-0101"), ("Maria Garcia", "555-0102"), ("Wei Chen", "555-0103"),
    ("Aisha Khan", "555-0104"), ("Tom Baker", "555-0105"), ("Emma Wilson", "555-0106"),
    ("Lucas Martin", "555-0107"), ("Sofia Rossi", "555-0108"),
]

SCHEMA = """
CREATE TABLE IF NOT EXISTS patients (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE COLLATE NOCASE,
    phone TEXT,
    created_at TEXT NOT NULL DEFAULT (datetime('now'))
);
CREATE TABLE IF NOT EXISTS slots (
    date TEXT NOT NULL,          -- YYYY-MM-DD
    time TEXT NOT NULL,          -- HH:MM
    PRIMARY KEY (date, time)
);
CREATE TABLE IF NOT EXISTS appointments (
    id INTEGER PRIMARY KEY,
    patient_id INTEGER NOT NULL REFERENCES patients(id),
    date TEXT NOT NULL,
    time TEXT NOT NULL,
    service TEXT NOT NULL DEFAULT 'checkup',
    created_at TEXT NOT NULL DEFAULT (datetime('now')),
    UNIQUE (date, time),
    FOREIGN KEY (date, time) REFERENCES slots(date, time)
);
CREATE TABLE IF NOT EXISTS appointment_log (
    id INTEGER PRIMARY KEY,
    at TEXT NOT NULL DEFAULT (datetime('now')),
    action TEXT NOT NULL,        -- booked | moved | cancelled
    patient_id INTEGER NOT NULL,
    date TEXT NOT NULL,
    time TEXT NOT NULL,
    detail TEXT
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
"""


class ToolArgError(ValueError):
    """Raised inside a handler for a bad argument; the public handler turns it into {"error": ...}."""


def _tool(fn: Callable[..., dict]) -> Callable[..., dict]:
    """Make a handler total: any bad argument or database trouble becomes an error dict."""

    def wrapper(self: ClinicDB, args: dict | None = None) -> dict:
        if args is None:
            args = {}
        if not isinstance(args, dict):
            return {"error": "arguments must be a JSON object"}
        try:
            return fn(self, args)
        except ToolArgError as e:
            return {"error": str(e)}
        except sqlite3.Error as e:
            return {"error": f"The booking system had a problem ({type(e).__name__}); please try again."}

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


class ClinicDB:
    """One clinic database file. Safe to share between calls and threads: each operation opens its
    own connection, and writes are serialized by SQLite's write lock."""

    def __init__(self, path: str | Path | None = None, today: dt.date | None = None,
                 weeks: int = 4, seed: int = 7, empty: bool = False) -> None:
        """`empty=True` seeds a new file without the random bookings: the seed patients are
        registered, but the diary is free (`add_appointment` puts bookings in)."""
        self.path = Path(path) if path else DEFAULT_DB_PATH
        self._today = today
        self.weeks = weeks
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._init_lock = threading.Lock()
        with self._init_lock:
            self._create_and_seed(seed, empty)

    # -- plumbing -----------------------------------------------------------------------------
    def today(self) -> dt.date:
        return self._today or dt.date.today()

    def connect(self, write: bool = False) -> AbstractContextManager[sqlite3.Connection]:
        """A connection in a transaction; BEGIN IMMEDIATE for writes, so the check-then-insert of a
        booking cannot interleave with another writer."""
        return transaction(self.path, write=write, foreign_keys=True)

    def _create_and_seed(self, seed: int, empty: bool = False) -> None:
        con = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            con.execute("PRAGMA journal_mode = WAL")  # readers do not block the writer
            con.executescript(SCHEMA)
        finally:
            con.close()
        with self.connect(write=True) as con:
            self._extend_slots(con)
            if con.execute("SELECT value FROM meta WHERE key = 'seeded'").fetchone():
                return
            con.executemany("INSERT OR IGNORE INTO patients(name, phone) VALUES (?, ?)", SEED_PATIENTS)
            rng = random.Random(seed)
            ids = [r[0] for r in con.execute("SELECT id FROM patients ORDER BY id")]
            slots = con.execute("SELECT date, time FROM slots WHERE date > ? ORDER BY date, time",
                                (self.today().isoformat(),)).fetchall()
            for d, t in ([] if empty else slots):
                if rng.random() < 0.3:  # about a third of the diary is already taken
                    con.execute("INSERT OR IGNORE INTO appointments(patient_id, date, time, service) "
                                "VALUES (?, ?, ?, ?)", (rng.choice(ids), d, t, rng.choice(SERVICES[:4])))
            con.execute("INSERT INTO meta(key, value) VALUES ('seeded', ?)", (dt.datetime.now().isoformat(),))

    def _extend_slots(self, con: sqlite3.Connection) -> None:
        """Make sure the diary has slots for every weekday from today to `weeks` ahead (idempotent,
        so an old database file keeps working)."""
        start = self.today()
        rows = []
        for i in range(self.weeks * 7 + 1):
            d = start + dt.timedelta(days=i)
            if d.weekday() < 5:
                rows += [(d.isoformat(), t) for t in _day_times()]
        con.executemany("INSERT OR IGNORE INTO slots(date, time) VALUES (?, ?)", rows)

    # -- argument checks ----------------------------------------------------------------------
    def _date(self, value: object, field: str = "date") -> dt.date:
        """The caller's words for a day ("next tuesday", "the ninth") or YYYY-MM-DD, checked against the diary."""
        try:
            d = parse_day(value, self.today())
        except WordsError as e:
            raise ToolArgError(f"{field}: {e}") from None
        today = self.today()
        if d < today:
            raise ToolArgError(f"{spoken_day(d)} is in the past; today is {spoken_day(today)}.")
        if d.weekday() >= 5:
            nxt = d + dt.timedelta(days=7 - d.weekday())
            raise ToolArgError(f"The clinic is closed on weekends ({spoken_day(d)}). "
                               f"The next open day is {spoken_day(nxt)}.")
        last = today + dt.timedelta(days=self.weeks * 7)
        if d > last:
            raise ToolArgError(f"The diary is open only up to {spoken_day(last)}; {spoken_day(d)} is too far ahead.")
        return d

    @staticmethod
    def _time(value: object, field: str = "time") -> str:
        """The caller's words for a time ("ten thirty", "half past two", "2 pm") or HH:MM."""
        try:
            t = parse_time(value, HOURS)
        except WordsError as e:
            raise ToolArgError(f"{field}: {e}") from None
        if t not in _day_times():
            raise ToolArgError(f"{spoken_time(t)} is not an appointment time. Appointments start every "
                               f"{SLOT_MINUTES} minutes from {spoken_time(_day_times()[0])} to "
                               f"{spoken_time(_day_times()[-1])}.")
        return t

    @staticmethod
    def _name(value: object) -> str:
        if not isinstance(value, str) or not value.strip():
            raise ToolArgError("patient_name must be the patient's full name")
        words = value.split()
        if value == value.lower():  # ASR text is lower case; the diary and the read-back use capitals
            words = [w[:1].upper() + w[1:] for w in words]
        return " ".join(words)

    @staticmethod
    def _service(value: object) -> str:
        """A service by name or the caller's word for it ("hygiene visit" -> cleaning); none: checkup."""
        if value is None or value == "":
            return "checkup"
        try:
            return parse_service(value)
        except WordsError as e:
            raise ToolArgError(f"service: {e}") from None

    def _patient(self, con: sqlite3.Connection, name: str) -> sqlite3.Row:
        row = con.execute("SELECT id, name, phone FROM patients WHERE name = ?", (name,)).fetchone()
        if row:
            return row
        names = [r[0] for r in con.execute("SELECT name FROM patients")]
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
        hint = f" Did you mean {' or '.join(close)}?" if close else ""
        raise ToolArgError(f"No patient named {name} is registered.{hint}")

    def _next_appointment(self, con: sqlite3.Connection, patient_id: int) -> sqlite3.Row | None:
        return con.execute(
            "SELECT id, date, time, service FROM appointments WHERE patient_id = ? AND date >= ? "
            "ORDER BY date, time LIMIT 1", (patient_id, self.today().isoformat())).fetchone()

    def _ensure_slot(self, con: sqlite3.Connection, d: str, t: str) -> None:
        """A server running past midnight may be asked for a day its diary was not yet extended to."""
        if not con.execute("SELECT 1 FROM slots WHERE date = ? AND time = ?", (d, t)).fetchone():
            self._extend_slots(con)

    def _free_times(self, con: sqlite3.Connection, day: str) -> list[str]:
        return [r[0] for r in con.execute(
            "SELECT s.time FROM slots s LEFT JOIN appointments a ON a.date = s.date AND a.time = s.time "
            "WHERE s.date = ? AND a.id IS NULL ORDER BY s.time", (day,))]

    # -- tools --------------------------------------------------------------------------------
    @_tool
    def find_free_slots(self, args: dict) -> dict:
        """List free appointment times on a day, as the agent reads them ("9:30 am")."""
        d = self._date(args.get("date"))
        self._service(args.get("service"))
        part = args.get("part_of_day")
        if part not in (None, "", "morning", "afternoon"):
            raise ToolArgError(f"part_of_day must be morning or afternoon; got {part!r}")
        with self.connect() as con:
            free = self._free_times(con, d.isoformat())
            if part:
                free = [t for t in free if (t < "12:00") == (part == "morning")]
            out: dict = {"date": d.isoformat(), "day": spoken_day(d),
                         "free_times": [spoken_time(t) for t in free[:MAX_LISTED_TIMES]]}
            if len(free) > MAX_LISTED_TIMES:
                out["more_free_times"] = len(free) - MAX_LISTED_TIMES
            if not free:
                out["message"] = f"{spoken_day(d)} is fully booked{' in the ' + part if part else ''}."
                nxt = con.execute(
                    "SELECT s.date, s.time FROM slots s LEFT JOIN appointments a ON a.date = s.date AND a.time = s.time "
                    "WHERE s.date > ? AND a.id IS NULL ORDER BY s.date, s.time LIMIT 1", (d.isoformat(),)).fetchone()
                if nxt:
                    out["next_free"] = f"{spoken_day(dt.date.fromisoformat(nxt[0]))} at {spoken_time(nxt[1])}"
        return out

    @_tool
    def book_appointment(self, args: dict) -> dict:
        """Book a free slot. A caller who is not yet a patient is registered under the given name."""
        name = self._name(args.get("patient_name"))
        d, t = self._date(args.get("date")).isoformat(), self._time(args.get("time"))
        service = self._service(args.get("service"))
        with self.connect(write=True) as con:
            row = con.execute("SELECT id, name FROM patients WHERE name = ?", (name,)).fetchone()
            new_patient = row is None
            pid = row["id"] if row else con.execute("INSERT INTO patients(name) VALUES (?)", (name,)).lastrowid
            self._ensure_slot(con, d, t)
            try:
                con.execute("INSERT INTO appointments(patient_id, date, time, service) VALUES (?, ?, ?, ?)",
                            (pid, d, t, service))
            except sqlite3.IntegrityError:
                raise ToolArgError(self._taken_message(con, d, t)) from None
            con.execute("INSERT INTO appointment_log(action, patient_id, date, time, detail) VALUES "
                        "('booked', ?, ?, ?, ?)", (pid, d, t, service))
        return {"booked": True, "patient_name": row["name"] if row else name, "service": service,
                "date": d, "time": t, "when": _when(d, t), "new_patient": new_patient}

    @_tool
    def move_appointment(self, args: dict) -> dict:
        """Move the patient's next appointment to a new free slot, in one transaction."""
        name = self._name(args.get("patient_name"))
        d = self._date(args.get("new_date"), "new_date").isoformat()
        t = self._time(args.get("new_time"), "new_time")
        with self.connect(write=True) as con:
            p = self._patient(con, name)
            appt = self._next_appointment(con, p["id"])
            if appt is None:
                raise ToolArgError(f"{p['name']} has no upcoming appointment to move.")
            if (appt["date"], appt["time"]) == (d, t):
                return {"moved": False, "message": f"The appointment is already on {_when(d, t)}."}
            self._ensure_slot(con, d, t)
            try:
                con.execute("UPDATE appointments SET date = ?, time = ? WHERE id = ?", (d, t, appt["id"]))
            except sqlite3.IntegrityError:
                raise ToolArgError(self._taken_message(con, d, t)) from None
            con.execute("INSERT INTO appointment_log(action, patient_id, date, time, detail) VALUES "
                        "('moved', ?, ?, ?, ?)", (p["id"], d, t, f"from {appt['date']} {appt['time']}"))
        return {"moved": True, "patient_name": p["name"], "service": appt["service"],
                "old": _when(appt["date"], appt["time"]), "date": d, "time": t, "when": _when(d, t)}

    @_tool
    def cancel_appointment(self, args: dict) -> dict:
        """Cancel the patient's next appointment."""
        name = self._name(args.get("patient_name"))
        with self.connect(write=True) as con:
            p = self._patient(con, name)
            appt = self._next_appointment(con, p["id"])
            if appt is None:
                raise ToolArgError(f"{p['name']} has no upcoming appointment to cancel.")
            con.execute("DELETE FROM appointments WHERE id = ?", (appt["id"],))
            con.execute("INSERT INTO appointment_log(action, patient_id, date, time, detail) VALUES "
                        "('cancelled', ?, ?, ?, ?)", (p["id"], appt["date"], appt["time"], appt["service"]))
        return {"cancelled": True, "patient_name": p["name"], "service": appt["service"], "date": appt["date"],
                "time": appt["time"], "when": _when(appt["date"], appt["time"])}

    @_tool
    def lookup_patient(self, args: dict) -> dict:
        """Find a patient and their next appointment by name."""
        name = self._name(args.get("patient_name"))
        with self.connect() as con:
            p = self._patient(con, name)
            appt = self._next_appointment(con, p["id"])
        nxt = None if appt is None else {"service": appt["service"], "date": appt["date"], "time": appt["time"],
                                         "when": _when(appt["date"], appt["time"])}
        return {"patient_name": p["name"], "phone": p["phone"], "next_appointment": nxt}

    def _taken_message(self, con: sqlite3.Connection, d: str, t: str) -> str:
        free = self._free_times(con, d)
        if not free:
            return f"{_when(d, t)} is already taken, and that day is fully booked."
        near = [spoken_time(x) for x in sorted(sorted(free, key=lambda x: abs(_minutes(x) - _minutes(t)))[:3])]
        return f"{_when(d, t)} is already taken. Free times that day include {', '.join(near[:-1])} and {near[-1]}." \
            if len(near) > 1 else f"{_when(d, t)} is already taken. The only free time that day is {near[0]}."

    # -- for tests and reports ----------------------------------------------------------------
    def add_appointment(self, patient_name: str, date: str, time: str, service: str = "checkup",
                        replace: bool = False) -> dict:
        """Put a booking in the diary as it stands before a call (a simulation's or test's setup, not
        a tool: no date rules). The patient is registered if new. A taken slot raises ValueError,
        unless `replace`, which deletes whoever held it."""
        name = " ".join(patient_name.split())
        d, t = dt.date.fromisoformat(date).isoformat(), f"{_minutes(time) // 60:02d}:{_minutes(time) % 60:02d}"
        if service not in SERVICES:
            raise ValueError(f"service must be one of {', '.join(SERVICES)}; got {service!r}")
        with self.connect(write=True) as con:
            con.execute("INSERT OR IGNORE INTO slots(date, time) VALUES (?, ?)", (d, t))
            row = con.execute("SELECT id FROM patients WHERE name = ?", (name,)).fetchone()
            pid = row[0] if row else con.execute("INSERT INTO patients(name) VALUES (?)", (name,)).lastrowid
            if replace:
                con.execute("DELETE FROM appointments WHERE date = ? AND time = ?", (d, t))
            try:
                con.execute("INSERT INTO appointments(patient_id, date, time, service) VALUES (?, ?, ?, ?)",
                            (pid, d, t, service))
            except sqlite3.IntegrityError:
                raise ValueError(f"{d} at {t} is already booked") from None
        return {"patient_name": name, "date": d, "time": t, "service": service}

    def appointments(self, patient_name: str | None = None) -> list[dict]:
        sql = ("SELECT p.name AS patient_name, a.date, a.time, a.service FROM appointments a "
               "JOIN patients p ON p.id = a.patient_id")
        params: tuple = ()
        if patient_name:
            sql += " WHERE p.name = ?"
            params = (" ".join(patient_name.split()),)
        with self.connect() as con:
            return [dict(r) for r in con.execute(sql + " ORDER BY a.date, a.time", params)]

    def handlers(self) -> dict[str, Callable[[dict], dict]]:
        return {n: getattr(self, n) for n in TOOL_NAMES}


TOOL_NAMES = ("find_free_slots", "book_appointment", "move_appointment", "cancel_appointment", "lookup_patient")


def _day_times() -> list[str]:
    return [f"{m // 60:02d}:{m % 60:02d}" for m in range(OPEN_HOUR * 60, CLOSE_HOUR * 60, SLOT_MINUTES)]


def _when(date: str, hhmm: str) -> str:
    """"Tuesday, December 8th at 10 am": the words the agent reads back."""
    return f"{spoken_day(dt.date.fromisoformat(date))} at {spoken_time(hhmm)}"


def _minutes(hhmm: str) -> int:
    h, m = hhmm.split(":")
    return int(h) * 60 + int(m)
