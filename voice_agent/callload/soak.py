"""A bounded soak with faults: waves of N concurrent calls on ONE shared store for a few minutes,
each wave's callers bringing the faults of `FAULT_PLAN` in turn, then a check of what must hold:
no call crashed the server, every turn of the calls that stayed on the line was answered, and no
booking was lost or doubled (the store's final state against what the calls confirmed aloud).

All callers play the same recording, so every wave's calls race for the same slot: the store must
take one booking per slot, and each call must be told the truth about its own.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from voice_agent.callload.caller import CallerFaults
from voice_agent.callload.run import LoadOptions, PhoneApp, Recording, cpu_flags, run_level
from voice_agent.latency.truth import utterances

# What each caller of a wave brings, in turn (the plan rotates by one call per wave).
FAULT_PLAN = ("clean", "junk_and_out_of_order_frames", "hang_up_mid_turn", "stalled_socket", "engine_failure",
              "hang_up_mid_tool_call")


def faults_for(kind: str, rec: Recording) -> CallerFaults:
    """The caller faults of one plan entry, timed on the recording's own utterances."""
    ends = [u.end_s for u in utterances(rec.segments)]  # the caller's turns
    if kind == "junk_and_out_of_order_frames":
        return CallerFaults(junk_every_s=0.5, out_of_order=True)
    if kind == "hang_up_mid_turn":
        return CallerFaults(hang_up_at_s=ends[0] + 0.4)  # while the first answer is being made
    if kind == "hang_up_mid_tool_call":
        return CallerFaults(hang_up_at_s=ends[max(0, len(ends) - 2)] + 0.5)  # the booking turn's tool round
    if kind == "stalled_socket":
        return CallerFaults(stall_at_s=ends[0] + 0.1, stall_s=2.0)
    if kind == "engine_failure":
        return CallerFaults(engine_fails=True)
    return CallerFaults()


@dataclass
class SoakResult:
    waves: int = 0
    calls: list[dict] = field(default_factory=list)
    faults: dict[str, int] = field(default_factory=dict)
    crashes: int = 0
    ledger: dict | None = None

    def as_dict(self) -> dict:
        stayed = [c for c in self.calls if "hang_up" not in (c.get("faults") or []) and not c["client"]["busy"]]
        scored = [t for c in stayed for t in c["turns"] if t.get("llm_calls")]
        return {"waves": self.waves, "calls_placed": len(self.calls),
                "turns_answered": sum(1 for t in scored if t["e2e_ms"] is not None), "turns_expected": len(scored),
                "silent_calls": sum(1 for c in self.calls if not c["client"]["bot_audio_s"]),
                "faults_injected": dict(sorted(self.faults.items())), "crashes": self.crashes,
                "bookings": self.ledger}


def run_soak(app: PhoneApp, recordings: list[Recording], opts: LoadOptions, out: Path, scenario: Any,
             model: str, minutes: float) -> SoakResult:
    result = SoakResult()
    deadline = time.monotonic() + minutes * 60
    n = opts.counts[0]
    server = app.server
    failed_before = server.calls_failed
    while time.monotonic() < deadline:
        plan = {i: FAULT_PLAN[(i + result.waves) % len(FAULT_PLAN)] for i in range(n)}
        faults = {i: faults_for(kind, recordings[i % len(recordings)]) for i, kind in plan.items()}
        wave_opts = replace(opts, faults=faults, shared_store=True)
        report = run_level(n, app, recordings, wave_opts, out / f"wave{result.waves:02d}", scenario, model)
        for c in report["calls"]:
            kind = c["plan"] = plan[c["call_index"]]
            if kind != "clean":
                result.faults[kind] = result.faults.get(kind, 0) + 1
        result.calls += report["calls"]
        result.waves += 1
    result.crashes = server.calls_failed - failed_before
    backend = scenario.open_backend(server.options.store)
    try:
        result.ledger = booking_ledger(result.calls, backend.snapshot())
    finally:
        backend.close()
    return result


def booking_ledger(calls: list[dict], state: dict) -> dict | None:
    """The store's bookings against the calls': `confirmed` (a booking tool answered `booked` and the
    call heard the turn's answer), `unconfirmed` (booked, but the caller left or spoke over it
    first), `stored` (the store's change log), `lost` (confirmed, not stored), `doubled` (a slot, or
    one booking, stored twice) and `phantom` (stored, no call was told). None where the pack's
    snapshot keeps no change log."""
    changes = state.get("changes")
    if not isinstance(changes, list):
        return None
    confirmed, unconfirmed = [], []
    for c in calls:
        for t in c.get("turns") or []:
            for call in t.get("tool_calls") or []:
                r = call.get("result")
                if isinstance(r, dict) and r.get("booked") is True:
                    key = (r.get("patient_name"), r.get("date"), r.get("time"))
                    heard = bool(t.get("bot_text")) and not t.get("interrupted")
                    (confirmed if heard else unconfirmed).append(key)
    stored = [(ch.get("patient_name"), ch.get("date"), ch.get("time")) for ch in changes if ch.get("action") == "booked"]
    slots = [(d, tm) for _, d, tm in stored]
    return {"confirmed": len(confirmed), "unconfirmed": len(unconfirmed), "stored": len(stored),
            "lost": sum(1 for k in confirmed if k not in stored),
            "doubled": (len(slots) - len(set(slots))) + (len(stored) - len(set(stored))),
            "phantom": sum(1 for k in stored if k not in confirmed and k not in unconfirmed)}


def soak_main(server: Any, recordings: list[Recording], opts: LoadOptions, out: Path, scenario: Any, model: str) -> int:
    """`callload --soak-minutes`: the waves on one shared store, their summary printed and saved."""
    store = Path(server.options.store or out / "soak_store")
    shutil.rmtree(store, ignore_errors=True)
    server.options.store = str(store)
    scenario.open_backend(str(store)).close()  # made and seeded before the first caller, as `phone` does
    n = opts.counts[0]
    if opts.progress:
        print(f"soak: waves of {n} calls with faults for {opts.soak_minutes:g} min, one shared store", file=sys.stderr)
    with PhoneApp(server) as app:
        result = run_soak(app, recordings, opts, out, scenario, model, opts.soak_minutes)
        alive = app.server.active_calls == 0
    summary = {**result.as_dict(), "concurrent_calls": n, "server_idle_after": alive, "cpu_flags": cpu_flags(),
               "store": str(store)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(summary, indent=2) + "\n")
    b = summary["bookings"] or {}
    print(f"soak: {summary['waves']} waves, {summary['calls_placed']} calls placed, turns answered "
          f"{summary['turns_answered']}/{summary['turns_expected']} (calls that stayed on the line), "
          f"silent calls {summary['silent_calls']}, crashes {summary['crashes']}")
    print("faults injected: " + ", ".join(f"{k} {v}" for k, v in summary["faults_injected"].items()))
    if b:
        print(f"bookings: {b['confirmed']} confirmed aloud, {b['unconfirmed']} made for callers who left first, "
              f"{b['stored']} stored; lost {b['lost']}, doubled {b['doubled']}, phantom {b['phantom']}")
    print(f"details: {out / 'soak.json'} and {out}/wave*/report.html")
    ok = (summary["crashes"] == 0 and summary["turns_answered"] == summary["turns_expected"]
          and not summary["silent_calls"] and (not b or (b["lost"] == 0 and b["doubled"] == 0)))
    return 0 if ok else 1
