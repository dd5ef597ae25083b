"""The Harbour View Hotel's room diary, in SQLite: a number of rooms of each type, and bookings that
each hold one room of a type from the arrival date for a number of nights. A room type is free for a
stay when, on every night of it, fewer of its rooms are booked than the hotel has. Bookings are found
by the phone number they were made with, however it was said."""

from __future__ import annotations

import datetime as dt
import re
import sqlite3
from contextlib import AbstractContextManager
from pathlib import Path

from voice_agent.packs import Backend, ToolError
from voice_agent.packs.sqlite_store import transaction
from voice_agent.policy.calendar_words import Hours, spoken_day
from voice_agent.policy.kinds import KindContext, KindError, parse, spoken_digits

ROOMS = {"single": 4, "double": 6, "family": 2}       # rooms of each type
PRICES = {"single": 75, "double": 110, "family": 150}  # pounds a night, breakfast included
NAMES = {"single": "a single room", "double": "a double room", "family": "a family room"}
MAX_NIGHTS = 21
DAYS_AHEAD = 365
# Counts the shared integer parser does not read, as hotel callers say them.
NIGHT_WORDS = {"a week": 7, "one week": 7, "a fortnight": 14, "two weeks": 14, "a weekend": 2, "the weekend": 2}
SCHEMA = """
CREATE TABLE IF NOT EXISTS rooms (room_type TEXT PRIMARY KEY, count INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS bookings (id INTEGER PRIMARY KEY, phone TEXT NOT NULL, guest TEXT NOT NULL,
  room_type TEXT NOT NULL, check_in TEXT NOT NULL, check_out TEXT NOT NULL);
"""


def read_back(phone: str) -> str:
    """A number read back digit by digit, a UK mobile as people group it: "0 7 7 0 0, 9 0 0 4 6 1"."""
    if len(phone) == 11 and phone.startswith("07"):
        return f"{' '.join(phone[:5])}, {' '.join(phone[5:])}"
    return spoken_digits(phone)


class FrontDesk(Backend):
    def __init__(self, store: Path, today: dt.date | None = None, hours: Hours | None = None) -> None:
        super().__init__(store, today, hours or Hours(7 * 60, 23 * 60))
        self.path = self.store / "hotel.sqlite"
        self._create(ROOMS)

    # -- plumbing ---------------------------------------------------------------------------------
    def _db(self) -> AbstractContextManager[sqlite3.Connection]:
        return transaction(self.path)

    def _create(self, rooms: dict[str, int]) -> None:
        con = sqlite3.connect(self.path, isolation_level=None)
        try:
            con.executescript(SCHEMA)
            con.executemany("INSERT OR IGNORE INTO rooms VALUES (?, ?)", list(rooms.items()))
        finally:
            con.close()

    # -- arguments ----------------------------------------------------------------------------------
    def _ctx(self) -> KindContext:
        return KindContext(today=self.today(), hours=self.hours)

    def _date(self, words: object, what: str = "arrival date") -> dt.date:
        if isinstance(words, str) and re.fullmatch(r"\s*(tonight|this evening|later today)\s*\.?", words.lower()):
            return self.today()
        try:
            d = dt.date.fromisoformat(str(parse("date", words, self._ctx())))
        except KindError as e:
            raise ToolError(f"{what}: {e}") from None
        if d < self.today():
            raise ToolError(f"{spoken_day(d)} is in the past. Which date would you be arriving?")
        if d > self.today() + dt.timedelta(days=DAYS_AHEAD):
            raise ToolError("We only take bookings up to a year ahead.")
        return d

    def _nights(self, words: object) -> int:
        text = str(words or "").strip().lower()
        n = next((v for k, v in NIGHT_WORDS.items() if re.search(rf"\b{k}\b", text)), None)
        if n is None:
            try:
                n = int(parse("integer", words, self._ctx()))
            except KindError:
                raise ToolError("How many nights would you like to stay?") from None
        if not 1 <= n <= MAX_NIGHTS:
            raise ToolError(f"We can book from one to {MAX_NIGHTS} nights; you said {n}.")
        return n

    def _phone(self, words: object) -> str:
        try:
            phone = str(parse("phone_number", words, self._ctx()))
        except KindError as e:
            raise ToolError(f"phone number: {e}") from None
        if len(phone) < 7:
            raise ToolError(f"I only heard {read_back(phone)}. Could I have the whole number, digit by digit?")
        return phone

    def _name(self, words: object) -> str:
        try:
            return str(parse("person_name", words, self._ctx()))
        except KindError:
            raise ToolError("Can I have the name for the booking, please?") from None

    def _room_type(self, value: object) -> str:
        choices = {"single": ("single",), "double": ("double", "twin"), "family": ("family",)}
        try:
            return str(parse("enum", value, KindContext(choices=choices)))
        except KindError:
            raise ToolError(f"We have single, double and family rooms; which would you like? (got {value!r})") from None

    # -- the diary ----------------------------------------------------------------------------------
    def _free(self, con: sqlite3.Connection, room_type: str, check_in: dt.date, nights: int,
              ignore: int | None = None) -> int:
        """How many rooms of `room_type` are free on every night of the stay (`ignore`: a booking being moved)."""
        total = con.execute("SELECT count FROM rooms WHERE room_type = ?", (room_type,)).fetchone()
        total = total[0] if total else 0
        worst = 0
        for i in range(nights):
            night = (check_in + dt.timedelta(days=i)).isoformat()
            taken = con.execute("SELECT COUNT(*) FROM bookings WHERE room_type = ? AND check_in <= ? AND check_out > ?"
                                " AND id IS NOT ?", (room_type, night, night, ignore)).fetchone()[0]
            worst = max(worst, taken)
        return max(0, total - worst)

    def _next(self, con: sqlite3.Connection, phone: str) -> sqlite3.Row:
        row = con.execute("SELECT * FROM bookings WHERE phone = ? AND check_out > ? ORDER BY check_in LIMIT 1",
                          (phone, self.today().isoformat())).fetchone()
        if row is None:
            raise ToolError(f"I can't find a booking under {read_back(phone)}. Could you check the number?")
        return row

    @staticmethod
    def _stay(row: sqlite3.Row | dict) -> dict:
        d_in, d_out = dt.date.fromisoformat(row["check_in"]), dt.date.fromisoformat(row["check_out"])
        nights = (d_out - d_in).days
        return {"guest": row["guest"], "room": NAMES[row["room_type"]],
                "when": f"{nights} night{'s' if nights != 1 else ''} from {spoken_day(d_in)}",
                "check_out": spoken_day(d_out), "total": f"{nights * PRICES[row['room_type']]} pounds"}

    # -- the tools ----------------------------------------------------------------------------------
    def check_availability(self, check_in: str, nights: int | str, room_type: str = "") -> dict:
        d, n = self._date(check_in), self._nights(nights)
        wanted = [self._room_type(room_type)] if room_type else list(ROOMS)
        with self._db() as con:
            free = {t: self._free(con, t, d, n) for t in ROOMS}
        stay = {"arriving": spoken_day(d), "nights": n, "check_out": spoken_day(d + dt.timedelta(days=n))}
        open_ = [t for t in wanted if free[t]]
        if open_:
            return {**stay, "available": [f"{NAMES[t]} at {PRICES[t]} pounds a night" for t in open_]}
        others = [f"{NAMES[t]} at {PRICES[t]} pounds a night" for t in ROOMS if free[t] and t not in wanted]
        what = NAMES[wanted[0]].removeprefix("a ") if len(wanted) == 1 else "room"
        say = f"Sorry, we have no {what} free for those nights." + (
            f" We do have {' and '.join(others)}." if others else " We're fully booked then.")
        return {**stay, "available": [], "say": say}

    def book_room(self, guest_name: str, check_in: str, nights: int | str, room_type: str, phone_number: str) -> dict:
        name, d, n = self._name(guest_name), self._date(check_in), self._nights(nights)
        kind, phone = self._room_type(room_type), self._phone(phone_number)
        out = d + dt.timedelta(days=n)
        with self._db() as con:
            mine = con.execute("SELECT * FROM bookings WHERE phone = ? AND check_out > ? ORDER BY check_in LIMIT 1",
                               (phone, self.today().isoformat())).fetchone()
            if mine is not None:
                stay = self._stay(mine)
                raise ToolError(f"There's already a booking under that number: {stay['room']} for {stay['when']}. "
                                "Would you like to change it instead?")
            if not self._free(con, kind, d, n):
                others = [NAMES[t] for t in ROOMS if t != kind and self._free(con, t, d, n)]
                raise ToolError(f"Sorry, we have no {kind} room free for {n} night{'s' if n != 1 else ''} from "
                                f"{spoken_day(d)}." + (f" We do have {' or '.join(others)}." if others else ""))
            con.execute("INSERT INTO bookings(phone, guest, room_type, check_in, check_out) VALUES (?, ?, ?, ?, ?)",
                        (phone, name, kind, d.isoformat(), out.isoformat()))
        stay = self._stay({"guest": name, "room_type": kind, "check_in": d.isoformat(), "check_out": out.isoformat()})
        return {"booked": True, **stay, "phone_number": read_back(phone)}

    def lookup_booking(self, phone_number: str) -> dict:
        phone = self._phone(phone_number)
        with self._db() as con:
            row = self._next(con, phone)
        return {"found": True, **self._stay(row)}

    def change_booking(self, phone_number: str, new_check_in: str, nights: int | str | None = None) -> dict:
        phone, d = self._phone(phone_number), self._date(new_check_in, "new arrival date")
        with self._db() as con:
            row = self._next(con, phone)
            old = self._stay(row)
            n = self._nights(nights) if nights not in (None, "") else (
                dt.date.fromisoformat(row["check_out"]) - dt.date.fromisoformat(row["check_in"])).days
            if not self._free(con, row["room_type"], d, n, ignore=row["id"]):
                raise ToolError(f"Sorry, there's no {row['room_type']} room free for {n} night{'s' if n != 1 else ''} "
                                f"from {spoken_day(d)}. Your booking is unchanged: {old['when']}.")
            out = d + dt.timedelta(days=n)
            con.execute("UPDATE bookings SET check_in = ?, check_out = ? WHERE id = ?",
                        (d.isoformat(), out.isoformat(), row["id"]))
        new = self._stay({**dict(row), "check_in": d.isoformat(), "check_out": out.isoformat()})
        return {"changed": True, **new, "was": old["when"]}

    def cancel_booking(self, phone_number: str) -> dict:
        phone = self._phone(phone_number)
        with self._db() as con:
            row = self._next(con, phone)
            con.execute("DELETE FROM bookings WHERE id = ?", (row["id"],))
        stay = self._stay(row)
        return {"cancelled": True, "guest": stay["guest"], "was": f"{stay['room']} for {stay['when']}"}

    # -- simulate and replay ----------------------------------------------------------------------
    def setup(self, block: dict) -> None:
        """{"rooms": {type: count}, "bookings": [{phone_number, guest, check_in, nights, room_type}]}: the
        hotel before the call (rooms left out keep the hotel's own counts)."""
        unknown = set(block) - {"rooms", "bookings"}
        if unknown:
            raise ToolError(f"setup: unknown key(s) {', '.join(sorted(unknown))} (allowed: rooms, bookings)")
        rooms = {**ROOMS, **{self._room_type(k): int(v) for k, v in (block.get("rooms") or {}).items()}}
        for stale in (self.path, self.path.with_name(self.path.name + "-journal")):
            stale.unlink(missing_ok=True)
        self._create(rooms)
        with self._db() as con:
            for b in block.get("bookings") or []:
                d = dt.date.fromisoformat(str(b["check_in"]))
                n = int(b.get("nights", 1))
                con.execute("INSERT INTO bookings(phone, guest, room_type, check_in, check_out) VALUES (?, ?, ?, ?, ?)",
                            (self._phone(str(b["phone_number"])), str(b["guest"]), self._room_type(b["room_type"]),
                             d.isoformat(), (d + dt.timedelta(days=n)).isoformat()))

    def snapshot(self) -> dict:
        with self._db() as con:
            rows = [dict(r) for r in con.execute("SELECT * FROM bookings WHERE check_out > ? ORDER BY check_in, id",
                                                 (self.today().isoformat(),))]
        out: dict[str, list[dict]] = {}
        for r in rows:
            nights = (dt.date.fromisoformat(r["check_out"]) - dt.date.fromisoformat(r["check_in"])).days
            out.setdefault(r["phone"], []).append({"guest": r["guest"], "check_in": r["check_in"], "nights": nights,
                                                   "check_out": r["check_out"], "room_type": r["room_type"]})
        return {"bookings": out}
