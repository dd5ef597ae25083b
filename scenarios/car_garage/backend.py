"""Northside Motors' workshop diary, in SQLite: one booking per bay and hour, Monday to Saturday,
8 am to 5 pm starts; bookings found by the car's registration (however it was spelled out)."""

from __future__ import annotations

import datetime as dt
import sqlite3
from contextlib import AbstractContextManager
from pathlib import Path

from voice_agent.packs import Backend, ToolError
from voice_agent.packs.sqlite_store import transaction
from voice_agent.policy.calendar_words import Hours, spoken_day, spoken_time
from voice_agent.policy.kinds import KindContext, KindError, parse

JOBS = {"service": "a full service", "mot": "an MOT", "tyres": "a tyre change"}
STARTS = [f"{h:02d}:00" for h in range(8, 17)] + ["08:30", "09:30", "10:30", "11:30", "13:30", "14:30", "15:30"]
WEEKS_AHEAD = 6
SCHEMA = """
CREATE TABLE IF NOT EXISTS bookings (id INTEGER PRIMARY KEY, plate TEXT NOT NULL, customer TEXT NOT NULL,
  date TEXT NOT NULL, time TEXT NOT NULL, job TEXT NOT NULL, UNIQUE(date, time));
"""


class Workshop(Backend):
    def __init__(self, store: Path, today: dt.date | None = None, hours: Hours | None = None) -> None:
        super().__init__(store, today, hours or Hours(8 * 60, 18 * 60))
        self.path = self.store / "workshop.sqlite"
        self._create()

    def _db(self) -> AbstractContextManager[sqlite3.Connection]:
        return transaction(self.path)

    def _create(self) -> None:
        con = sqlite3.connect(self.path, isolation_level=None)
        try:
            con.executescript(SCHEMA)
        finally:
            con.close()

    # -- arguments ----------------------------------------------------------------------------------
    def _ctx(self) -> KindContext:
        return KindContext(today=self.today(), hours=self.hours)

    def _plate(self, words: object) -> str:
        try:
            return parse("plate", words, self._ctx())
        except KindError as e:
            raise ToolError(str(e)) from None

    def _date(self, words: object) -> dt.date:
        try:
            d = dt.date.fromisoformat(parse("date", words, self._ctx()))
        except KindError as e:
            raise ToolError(f"date: {e}") from None
        if d < self.today():
            raise ToolError(f"{spoken_day(d)} is in the past.")
        if d.weekday() == 6:
            raise ToolError(f"We're closed on Sundays ({spoken_day(d)}). Monday or Saturday would work.")
        if d > self.today() + dt.timedelta(weeks=WEEKS_AHEAD):
            raise ToolError(f"The diary only goes {WEEKS_AHEAD} weeks ahead.")
        return d

    def _time(self, words: object) -> str:
        try:
            t = parse("time", words, self._ctx())
        except KindError as e:
            raise ToolError(f"time: {e}") from None
        if t not in STARTS:
            raise ToolError(f"{spoken_time(t)} is not a start time; we start jobs on the hour or half past, "
                            "8 am to 4 pm.")
        return t

    @staticmethod
    def _job(value: object) -> str:
        v = str(value or "").strip().lower()
        if v not in JOBS:
            raise ToolError(f"job must be service, mot or tyres; got {value!r}")
        return v

    def _free(self, con: sqlite3.Connection, d: dt.date) -> list[str]:
        taken = {r[0] for r in con.execute("SELECT time FROM bookings WHERE date = ?", (d.isoformat(),))}
        return [t for t in sorted(STARTS) if t not in taken]

    def _next(self, con: sqlite3.Connection, plate: str) -> sqlite3.Row:
        row = con.execute("SELECT * FROM bookings WHERE plate = ? AND date >= ? ORDER BY date, time LIMIT 1",
                          (plate, self.today().isoformat())).fetchone()
        if row is None:
            raise ToolError(f"There's no booking for {' '.join(plate)}.")
        return row

    # -- the tools ----------------------------------------------------------------------------------
    def find_free_slots(self, date: str, job: str = "") -> dict:
        d = self._date(date)
        if job:
            self._job(job)
        with self._db() as con:
            free = self._free(con, d)
        if not free:
            return {"date": d.isoformat(), "free_times": [], "say": f"{spoken_day(d)} is fully booked."}
        return {"date": d.isoformat(), "day": spoken_day(d), "free_times": [spoken_time(t) for t in free[:6]]}

    def book_job(self, customer_name: str, plate: str, date: str, time: str, job: str) -> dict:
        plate, d, t, job = self._plate(plate), self._date(date), self._time(time), self._job(job)
        name = " ".join(w[:1].upper() + w[1:] for w in str(customer_name).split())
        with self._db() as con:
            try:
                con.execute("INSERT INTO bookings(plate, customer, date, time, job) VALUES (?, ?, ?, ?, ?)",
                            (plate, name, d.isoformat(), t, job))
            except sqlite3.IntegrityError:
                near = self._free(con, d)[:3]
                raise ToolError(f"{spoken_time(t)} on {spoken_day(d)} is taken. Free that day: "
                                f"{', '.join(spoken_time(x) for x in near) or 'nothing'}.") from None
        return {"booked": True, "plate": plate, "job": job,
                "when": f"{spoken_day(d)} at {spoken_time(t)}", "say": f"{JOBS[job]} for {name}"}

    def move_job(self, plate: str, new_date: str, new_time: str) -> dict:
        plate, d, t = self._plate(plate), self._date(new_date), self._time(new_time)
        with self._db() as con:
            row = self._next(con, plate)
            try:
                con.execute("UPDATE bookings SET date = ?, time = ? WHERE id = ?", (d.isoformat(), t, row["id"]))
            except sqlite3.IntegrityError:
                raise ToolError(f"{spoken_time(t)} on {spoken_day(d)} is taken.") from None
        return {"moved": True, "plate": plate, "job": row["job"], "when": f"{spoken_day(d)} at {spoken_time(t)}"}

    def cancel_job(self, plate: str) -> dict:
        plate = self._plate(plate)
        with self._db() as con:
            row = self._next(con, plate)
            con.execute("DELETE FROM bookings WHERE id = ?", (row["id"],))
        when = f"{spoken_day(dt.date.fromisoformat(row['date']))} at {spoken_time(row['time'])}"
        return {"cancelled": True, "plate": plate, "job": row["job"], "was": when}

    def lookup_job(self, plate: str) -> dict:
        plate = self._plate(plate)
        with self._db() as con:
            row = self._next(con, plate)
        return {"plate": plate, "job": row["job"], "customer": row["customer"],
                "when": f"{spoken_day(dt.date.fromisoformat(row['date']))} at {spoken_time(row['time'])}"}

    # -- simulate and replay ----------------------------------------------------------------------
    def setup(self, block: dict) -> None:
        """{"bookings": [{plate, customer, date, time, job}]}: the diary before the call."""
        unknown = set(block) - {"bookings"}
        if unknown:
            raise ToolError(f"setup: unknown key(s) {', '.join(sorted(unknown))} (allowed: bookings)")
        self.path.unlink(missing_ok=True)
        self._create()
        with self._db() as con:
            for b in block.get("bookings") or []:
                con.execute("INSERT INTO bookings(plate, customer, date, time, job) VALUES (?, ?, ?, ?, ?)",
                            (self._plate(b["plate"]), b["customer"], b["date"], b["time"], self._job(b["job"])))

    def snapshot(self) -> dict:
        with self._db() as con:
            rows = [dict(r) for r in con.execute("SELECT * FROM bookings WHERE date >= ? ORDER BY date, time",
                                                 (self.today().isoformat(),))]
        out: dict[str, list[dict]] = {}
        for r in rows:
            out.setdefault(r["plate"], []).append({"date": r["date"], "time": r["time"], "job": r["job"],
                                                   "customer": r["customer"]})
        return {"bookings": out}
