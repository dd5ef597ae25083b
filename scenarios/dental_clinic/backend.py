"""The dental clinic's tools, on its SQLite diary (clinic_db.py).

`setup` takes a call file's `setup:` (or the dental sugar `db:`): {"empty": true} clears the random
bookings of the seeded diary, and "appointments" puts bookings in before the call. `snapshot` is
every patient's upcoming bookings and what the call's tools wrote: what `expect: state:` matches.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from voice_agent.packs import Backend, ToolError
from voice_agent.policy.calendar_words import Hours

from .clinic_db import ClinicDB

SETUP_KEYS = ("empty", "appointments")


class DentalClinic(Backend):
    def __init__(self, store: Path, today: dt.date | None = None, hours: Hours | None = None) -> None:
        super().__init__(store, today, hours)
        self._db: ClinicDB | None = None

    @property
    def db(self) -> ClinicDB:
        if self._db is None:  # made on first use, so that `setup` can ask for an empty diary first
            self._db = ClinicDB(self.store / "clinic.sqlite", today=self._today)
        return self._db

    # -- the tools (the model's arguments as keywords; each returns a JSON-able dict) ---------------
    def find_free_slots(self, date: str = "", part_of_day: str = "", service: str = "") -> dict:
        return self.db.find_free_slots(_given(date=date, part_of_day=part_of_day, service=service))

    def book_appointment(self, patient_name: str = "", date: str = "", time: str = "", service: str = "") -> dict:
        return self.db.book_appointment(_given(patient_name=patient_name, date=date, time=time, service=service))

    def move_appointment(self, patient_name: str = "", new_date: str = "", new_time: str = "") -> dict:
        return self.db.move_appointment(_given(patient_name=patient_name, new_date=new_date, new_time=new_time))

    def cancel_appointment(self, patient_name: str = "") -> dict:
        return self.db.cancel_appointment(_given(patient_name=patient_name))

    def lookup_patient(self, patient_name: str = "") -> dict:
        return self.db.lookup_patient(_given(patient_name=patient_name))

    # -- simulate and replay ----------------------------------------------------------------------
    def setup(self, block: dict) -> None:
        unknown = set(block) - set(SETUP_KEYS)
        if unknown:
            raise ToolError(f"setup: unknown key(s) {', '.join(sorted(unknown))} (allowed: {', '.join(SETUP_KEYS)})")
        path = self.store / "clinic.sqlite"
        for stale in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            stale.unlink(missing_ok=True)  # a setup describes the whole diary: start from nothing
        self._db = ClinicDB(path, today=self._today, empty=bool(block.get("empty")))
        for b in block.get("appointments") or []:
            try:
                self._db.add_appointment(b["patient_name"], b["date"], b["time"], b.get("service") or "checkup",
                                         replace=True)
            except (KeyError, ValueError) as e:
                raise ToolError(f"setup: appointment {b!r}: {e}") from None

    def snapshot(self) -> dict:
        """{"appointments": {patient: [{date, time, service}, ...]}} (upcoming, today on; patients with
        none are left out) and {"changes": [...]} (what the call's tools wrote)."""
        today = self.db.today().isoformat()
        upcoming: dict[str, list[dict[str, Any]]] = {}
        for a in self.db.appointments():
            if a["date"] >= today:
                upcoming.setdefault(a["patient_name"], []).append(
                    {"date": a["date"], "time": a["time"], "service": a["service"]})
        with self.db.connect() as con:
            changes = [dict(r) for r in con.execute(
                "SELECT l.action, p.name AS patient_name, l.date, l.time, l.detail FROM appointment_log l "
                "JOIN patients p ON p.id = l.patient_id ORDER BY l.id")]
        return {"appointments": upcoming, "changes": changes}


def _given(**args: str) -> dict:
    """The arguments the model wrote (the diary treats a missing one and an empty one alike)."""
    return {k: v for k, v in args.items() if v not in (None, "")}
