"""Skyline Mobile's accounts, in SQLite: customers and their plans, roaming passes, the data checks a
caller made, and tickets. Every change is one transaction; a number is found however it was said."""

from __future__ import annotations

import datetime as dt
import sqlite3
from contextlib import AbstractContextManager
from pathlib import Path

from voice_agent.packs import Backend, ToolError
from voice_agent.packs.sqlite_store import transaction
from voice_agent.policy.calendar_words import Hours
from voice_agent.policy.kinds import KindContext, KindError, parse, spoken_digits

PLANS = {"basic": (10, 5), "plus": (25, 30), "unlimited": (40, None)}  # dollars a month, gigabytes (None: unlimited)
PASSES = {"europe": 15, "usa": 20, "world": 35}
CHECKS = ("airplane_mode", "data_switch", "apn", "restart")
DATA_FAULT = "mobile data not working after the checks"  # a ticket's issue when the caller gave none
SEED = [  # phone, name, plan, data used (GB), balance (dollars owed)
    ("5550142", "Priya Natarajan", "basic", 4.6, 0.0), ("5550199", "Marcus Webb", "plus", 12.3, 25.0),
    ("5550117", "Elena Sokolova", "unlimited", 61.0, 0.0), ("5550175", "Daniel Okafor", "basic", 1.2, 10.0),
    ("5550163", "Hannah Lindqvist", "plus", 29.1, 0.0), ("5550128", "Tariq Haddad", "basic", 5.0, 0.0),
]
SCHEMA = """
CREATE TABLE IF NOT EXISTS customers (phone TEXT PRIMARY KEY, name TEXT NOT NULL, plan TEXT NOT NULL,
  data_used_gb REAL NOT NULL DEFAULT 0, balance REAL NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS passes (id INTEGER PRIMARY KEY, phone TEXT NOT NULL REFERENCES customers(phone),
  region TEXT NOT NULL, starts TEXT NOT NULL, ends TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS checks (id INTEGER PRIMARY KEY, phone TEXT NOT NULL, name TEXT NOT NULL, fixed INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tickets (id INTEGER PRIMARY KEY, phone TEXT NOT NULL, issue TEXT NOT NULL, opened TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
"""


class MobileAccounts(Backend):
    def __init__(self, store: Path, today: dt.date | None = None, hours: Hours | None = None) -> None:
        super().__init__(store, today, hours)
        self.path = self.store / "accounts.sqlite"
        self._create(seed=True)

    # -- plumbing ---------------------------------------------------------------------------------
    def _db(self) -> AbstractContextManager[sqlite3.Connection]:
        return transaction(self.path)

    def _create(self, seed: bool) -> None:
        con = sqlite3.connect(self.path, isolation_level=None)
        try:
            con.executescript(SCHEMA)
        finally:
            con.close()
        with self._db() as con:
            if seed and not con.execute("SELECT 1 FROM meta WHERE key = 'seeded'").fetchone():
                con.executemany("INSERT OR IGNORE INTO customers VALUES (?, ?, ?, ?, ?)", SEED)
                con.execute("INSERT INTO meta VALUES ('seeded', ?)", (dt.datetime.now().isoformat(),))

    def _phone(self, words: object) -> str:
        try:
            return parse("phone_number", words, KindContext(today=self.today()))
        except KindError as e:
            raise ToolError(f"phone number: {e}") from None

    def _customer(self, con: sqlite3.Connection, words: object) -> sqlite3.Row:
        phone = self._phone(words)
        row = con.execute("SELECT * FROM customers WHERE phone = ?", (phone,)).fetchone()
        if row is None:
            raise ToolError(f"No account has the number {spoken_digits(phone)}. Could you check the number?")
        return row

    @staticmethod
    def _choice(value: object, allowed: dict | tuple, what: str) -> str:
        v = str(value or "").strip().lower().replace(" ", "_")
        if v not in allowed:
            raise ToolError(f"{what} must be one of {', '.join(allowed)}; got {value!r}")
        return v

    # -- the tools ----------------------------------------------------------------------------------
    def lookup_customer(self, phone_number: str) -> dict:
        with self._db() as con:
            c = self._customer(con, phone_number)
        return {"name": c["name"], "phone_number": c["phone"], "plan": c["plan"], "read_back": spoken_digits(c["phone"])}

    def check_usage(self, phone_number: str) -> dict:
        with self._db() as con:
            c = self._customer(con, phone_number)
            passes = [dict(r) for r in con.execute("SELECT region, ends FROM passes WHERE phone = ?", (c["phone"],))]
        price, allowance = PLANS[c["plan"]]
        left = "unlimited" if allowance is None else f"{max(0.0, allowance - c['data_used_gb']):.1f} GB"
        return {"name": c["name"], "plan": c["plan"], "data_used_gb": c["data_used_gb"], "data_left": left,
                "balance_due": f"{c['balance']:.2f} dollars", "roaming_passes": passes}

    def change_plan(self, phone_number: str, plan: str) -> dict:
        plan = self._choice(plan, PLANS, "plan")
        with self._db() as con:
            c = self._customer(con, phone_number)
            if c["plan"] == plan:
                raise ToolError(f"{c['name']} is already on the {plan} plan.")
            con.execute("UPDATE customers SET plan = ? WHERE phone = ?", (plan, c["phone"]))
        return {"changed": True, "name": c["name"], "old_plan": c["plan"], "new_plan": plan,
                "monthly_price": f"{PLANS[plan][0]} dollars"}

    def add_roaming_pass(self, phone_number: str, region: str) -> dict:
        region = self._choice(region, PASSES, "region")
        starts = self.today()
        ends = starts + dt.timedelta(days=7)
        with self._db() as con:
            c = self._customer(con, phone_number)
            con.execute("INSERT INTO passes(phone, region, starts, ends) VALUES (?, ?, ?, ?)",
                        (c["phone"], region, starts.isoformat(), ends.isoformat()))
        return {"added": True, "name": c["name"], "region": region, "price": f"{PASSES[region]} dollars",
                "valid_until": ends.isoformat()}

    def record_check(self, phone_number: str, check: str, fixed: bool | str = False) -> dict:
        check = self._choice(check, CHECKS, "check")
        fixed = fixed if isinstance(fixed, bool) else str(fixed).strip().lower() in ("true", "yes", "1")
        with self._db() as con:
            c = self._customer(con, phone_number)
            con.execute("INSERT INTO checks(phone, name, fixed) VALUES (?, ?, ?)", (c["phone"], check, int(fixed)))
            done = {r[0] for r in con.execute("SELECT name FROM checks WHERE phone = ?", (c["phone"],))}
        todo = [x for x in CHECKS if x not in done]
        return {"recorded": check, "fixed": fixed,
                "next_check": None if fixed or not todo else todo[0],
                "open_a_ticket": not fixed and not todo}

    def open_ticket(self, phone_number: str, issue: str = DATA_FAULT) -> dict:
        issue = str(issue or "").strip() or DATA_FAULT
        with self._db() as con:
            c = self._customer(con, phone_number)
            tid = con.execute("INSERT INTO tickets(phone, issue, opened) VALUES (?, ?, ?)",
                              (c["phone"], str(issue).strip(), self.today().isoformat())).lastrowid
        return {"ticket": f"T{1000 + tid}", "name": c["name"], "issue": str(issue).strip(),
                "promise": "The network team will call back within 24 hours."}

    # -- simulate and replay ----------------------------------------------------------------------
    def setup(self, block: dict) -> None:
        """{"customers": [{phone_number, name, plan, data_used_gb, balance}]}: these accounts only."""
        unknown = set(block) - {"customers"}
        if unknown:
            raise ToolError(f"setup: unknown key(s) {', '.join(sorted(unknown))} (allowed: customers)")
        for stale in (self.path, self.path.with_name(self.path.name + "-journal")):
            stale.unlink(missing_ok=True)
        self._create(seed="customers" not in block)
        with self._db() as con:
            for c in block.get("customers") or []:
                con.execute("INSERT INTO customers VALUES (?, ?, ?, ?, ?)", (
                    self._phone(str(c["phone_number"])), c["name"], self._choice(c.get("plan", "basic"), PLANS, "plan"),
                    float(c.get("data_used_gb", 0)), float(c.get("balance", 0))))

    def snapshot(self) -> dict:
        with self._db() as con:
            customers = {r["phone"]: {"name": r["name"], "plan": r["plan"]} for r in con.execute("SELECT * FROM customers")}
            for r in con.execute("SELECT phone, region, ends FROM passes ORDER BY id"):
                customers[r["phone"]].setdefault("passes", []).append({"region": r["region"], "ends": r["ends"]})
            for r in con.execute("SELECT phone, name, fixed FROM checks ORDER BY id"):
                customers[r["phone"]].setdefault("checks", []).append({"check": r["name"], "fixed": bool(r["fixed"])})
            tickets = [{"phone": r["phone"], "issue": r["issue"]} for r in con.execute("SELECT * FROM tickets ORDER BY id")]
        return {"customers": customers, "tickets": tickets}
