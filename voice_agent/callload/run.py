"""Place N concurrent phone calls against one `voice-agent phone` app and measure every turn.

For each N: N `TwilioCaller`s (caller.py) stream recorded callers over loopback, in real time, into
the phone app (the one `voice-agent phone` serves: transports/phone.py, under uvicorn in this
process). Each call gets a `TurnLatencyObserver` on a clock that starts when its caller's stream
starts, and its own fresh store, so every turn is measured as replay measures it: e2e from the
caller's true end of speech (an offline VAD pass over the recording, mapped onto the moment each
20 ms chunk was really sent) to the bot's first audio. Results per N: a replay-shaped report
(report.json, report.html) in DIR/N<n>/, and one row of the capacity table in DIR/capacity.json.

Bounded: each call ends with its recording (plus a tail for the last answer), and a run that
overstays `max_minutes` stops where it is.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import resource
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from voice_agent.callload.caller import CallerFaults, TwilioCaller, mulaw_8k
from voice_agent.config import CallOptions
from voice_agent.latency.metrics import call_turns, distribution, greeting_record, summarize
from voice_agent.latency.report import build_report, write_report
from voice_agent.latency.truth import Segment, speech_segments
from voice_agent.services.llm import DEFAULT_APOLOGY as APOLOGY

CAPACITY_E2E_P95_MS = 800.0     # a load level is within capacity when e2e p95 stays at or under this ...
CAPACITY_PASS_RATE = 0.9        # ... and at least this share of turns answered within the budget
# Service capacity: every turn answered by the agent itself (no apology for an overloaded engine, no
# silent or refused call) and its answer audio (not a filler) within this at p95.
SERVICE_ANSWER_P95_MS = 2500.0
HANGUP_WAIT_S = 30.0            # after the callers hang up: how long the server may take to end their calls


@dataclass(kw_only=True)
class LoadOptions(CallOptions):
    """The calls' knobs (CallOptions) and the load run's own."""

    counts: tuple[int, ...] = (1, 2, 4, 8, 16)
    callers: tuple[str, ...] = ("sample",)   # "sample", "two-turn" or recording paths; dealt round-robin
    stagger_s: float = 0.5                    # call i starts i * stagger_s after the first
    tail_s: float = 8.0                       # silence after each recording, for its last answer
    budget_ms: float = 500.0
    max_calls: int | None = None              # the server's admission limit (None: take every call)
    max_minutes: float = 30.0
    soak_minutes: float = 0.0                 # > 0: a soak with faults at the first N (soak.py) instead of the curve
    shared_store: bool = False                # every call on one store (a soak: races for one slot)
    faults: dict[int, CallerFaults] = field(default_factory=dict)  # call index -> what that caller does wrong
    progress: bool = True


@dataclass
class Recording:
    name: str
    path: Path
    samples: Any            # 16 kHz int16
    segments: list[Segment]
    mulaw: bytes
    meta: dict | None


@dataclass
class CallSlot:
    """One placed call: the caller's side and, once the server has started it, its observer."""

    index: int
    recording: Recording
    caller: TwilioCaller
    origin: float = 0.0                # time.monotonic() the call's clock counts from
    observer: Any = None
    backend: Any = None
    store: Path | None = None


def load_recordings(names: tuple[str, ...], work: Path) -> list[Recording]:
    from voice_agent.audio_io import read_caller_audio
    from voice_agent.replay import SAMPLE_CALL, _sidecar

    out = []
    for name in names:
        path = SAMPLE_CALL if name == "sample" else two_turn_call(work) if name == "two-turn" else Path(name)
        audio = read_caller_audio(path)  # AudioFormatError: a clear message from the caller of this
        segments = speech_segments(audio.samples)
        if not segments:
            raise ValueError(f"{path}: no caller speech found in the recording")
        out.append(Recording(path.stem, path, audio.samples, segments, mulaw_8k(audio.samples), _sidecar(path)))
    return out


def two_turn_call(work: Path) -> Path:
    """The replay test's two-line caller (made with the real TTS once, then kept in `work`)."""
    from voice_agent.audio_io import write_wav
    from voice_agent.make_sample import RATE, synthesize

    path = work / "two_turn.wav"
    if not path.exists():
        script = [("Hi, I'd like to book a teeth cleaning for next Tuesday, please.", 20.0),
                  ("Do you have anything in the morning?", 1.0)]
        audio, _ = synthesize(script, lead_in_s=4.5)
        work.mkdir(parents=True, exist_ok=True)
        write_wav(path, audio, RATE)
        path.with_suffix(".json").write_text(json.dumps({"script": [t for t, _ in script]}))
    return path


class PhoneApp:
    """The phone app under uvicorn on a loopback port, in a thread of its own (engine.serve.server.ServerThread)."""

    def __init__(self, server: Any) -> None:
        from engine import ServerThread
        from voice_agent.transports.phone import create_app

        self.server = server
        self._thread = ServerThread(create_app(server), ws="websockets-sansio")

    @property
    def url(self) -> str:
        return f"ws://{self._thread.host}:{self._thread.port}/ws"

    def __enter__(self) -> PhoneApp:
        self._thread.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.__exit__(*exc)


def _observer_for(slots: dict[str, CallSlot], engine: Any) -> Any:
    from voice_agent.latency.observer import TurnLatencyObserver

    def make(start: Any) -> list[Any]:
        slot = slots.get(start.stream_id)
        if slot is None:
            return []  # a call this run did not place
        if slot.caller.faults.engine_fails:
            engine.fail_next_call()  # the app builds this call's brain next (faults.FaultyEngine)
        slot.observer = TurnLatencyObserver(clock=lambda: time.monotonic() - slot.origin)
        return [slot.observer]

    return make


def _backend_for(slots: dict[str, CallSlot], scenario: Any) -> Any:
    from voice_agent.replay import call_backend

    def make(start: Any) -> Any:
        slot = slots.get(start.stream_id)
        if slot is None or slot.store is None:
            return None  # the scenario's store (shared)
        backend, _today = call_backend(scenario, slot.store, slot.recording.meta)
        slot.backend = backend
        return backend

    return make


async def _place(slots: list[CallSlot], stagger_s: float) -> None:
    async def one(slot: CallSlot) -> None:
        await asyncio.sleep(slot.index * stagger_s)
        slot.origin = time.monotonic()
        await slot.caller.run()

    await asyncio.gather(*(one(s) for s in slots))


def _segments_on_call_clock(slot: CallSlot) -> list[Segment]:
    """The recording's voiced segments on the call's clock, where each 20 ms chunk was really sent."""
    out = []
    for seg in slot.recording.segments:
        start, end = slot.caller.chunk_time(seg.start_s), slot.caller.chunk_time(seg.end_s)
        if start is None or end is None:
            break  # never sent: the caller hung up first
        out.append(Segment(start - slot.origin, end - slot.origin))
    return out


def call_entry(slot: CallSlot, budget_ms: float) -> dict:
    """One call as replay reports it (turns measured from the true end of speech), plus the caller's side."""
    c = slot.caller
    entry: dict[str, Any] = {"file": str(slot.recording.path), "error": c.error, "turns": [],
                             "call_index": slot.index, "faults": c.faults.names()}
    entry["client"] = {"bot_audio_s": round(c.bot_audio_s(), 2), "busy": c.busy, "hung_up": c.hung_up,
                       "closed_by_server": c.closed_by_server, "junk_sent": c.junk_sent, "clears": len(c.clears),
                       "first_bot_audio_s": round(c.received[0][0] - slot.origin, 3) if c.received else None,
                       "origin_monotonic": round(slot.origin, 3)}  # the call clock's zero, to line calls up
    if c.busy:
        return entry
    obs = slot.observer
    if obs is None:
        entry["error"] = entry["error"] or "the server never started this call"
        return entry
    obs.finish()
    segments = _segments_on_call_clock(slot)
    entry["turns"] = call_turns(obs.turns, segments, budget_ms)
    entry["greeting"] = greeting_record(obs.greeting)
    if slot.backend is not None:
        entry["state"] = slot.backend.snapshot()
    return entry


def run_level(n: int, app: PhoneApp, recordings: list[Recording], opts: LoadOptions, out_dir: Path,
              scenario: Any, model: str) -> dict:
    """N calls at once; their report is written to out_dir; returns the report."""
    server = app.server
    slots: dict[str, CallSlot] = {}
    placed: list[CallSlot] = []
    for i in range(n):
        rec = recordings[i % len(recordings)]
        caller = TwilioCaller(app.url, rec.mulaw, tail_s=opts.tail_s, faults=opts.faults.get(i, CallerFaults()))
        slot = CallSlot(i, rec, caller)
        if not opts.shared_store:
            slot.store = out_dir / "calls" / f"{i:02d}" / "store"
            shutil.rmtree(slot.store, ignore_errors=True)
        slots[caller.stream_sid] = slot
        placed.append(slot)
    if any(f.engine_fails for f in opts.faults.values()) and not hasattr(server.engine, "fail_next_call"):
        raise ValueError("an engine failure needs the app's engine wrapped in callload.faults.FaultyEngine")
    server.observers_factory = _observer_for(slots, server.engine)
    server.backend_factory = _backend_for(slots, scenario)
    server.max_calls = opts.max_calls
    cpu0, t0 = _cpu_s(), time.monotonic()
    asyncio.run(_place(placed, opts.stagger_s))
    deadline = time.monotonic() + HANGUP_WAIT_S
    while server.active_calls and time.monotonic() < deadline:  # the server ends the calls it had
        time.sleep(0.1)
    wall = time.monotonic() - t0
    cpu = (_cpu_s() - cpu0) / wall / (os.cpu_count() or 1) * 100
    calls = [call_entry(s, opts.budget_ms) for s in placed]
    for s in placed:
        if s.backend is not None:
            s.backend.close()
    heard_nothing = sum(1 for c in calls if not c["client"]["bot_audio_s"])
    summary = summarize(calls, budget_ms=opts.budget_ms, model=model,
                        reasoning_effort=opts.reasoning_effort or scenario.reasoning_effort, extra={
                            "mode": "callload",
                            "scenario": scenario.name,
                            "concurrent_calls": n,
                            "stagger_s": opts.stagger_s,
                            "max_calls": opts.max_calls,
                            "busy_calls": sum(1 for c in calls if c["client"]["busy"]),
                            "faults": _fault_counts(calls),
                            "silent_calls": heard_nothing,  # no audio at all: not even the greeting or busy message
                            "cpu_percent": round(cpu, 1),
                            "wall_s": round(wall, 1),
                            "queue_wait_ms": distribution(m.get("queue_wait_ms") for c in calls for t in c["turns"]
                                                          for m in t.get("engine") or []),
                            "cpu_flags": cpu_flags(),
                            "command": " ".join(["voice-agent", *sys.argv[1:]]),
                            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                        })
    report = build_report(calls, summary)
    write_report(report, out_dir, embed_audio=False)
    return report


def _fault_counts(calls: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in calls:
        for name in c.get("faults") or []:
            out[name] = out.get(name, 0) + 1
    return out


def capacity_row(report: dict) -> dict:
    s = report["summary"]
    e2e, ttfat = s.get("e2e_ms") or {}, s.get("ttfat_ms") or {}
    row = {"n": s["concurrent_calls"], "answered_turns": s["answered_turns"], "scored_turns": s["scored_turns"],
           "e2e_p50_ms": e2e.get("p50"), "e2e_p95_ms": e2e.get("p95"),
           "answer_e2e_p50_ms": (s.get("answer_e2e_ms") or {}).get("p50"),
           "ttfat_p50_ms": ttfat.get("p50"), "ttfat_p95_ms": ttfat.get("p95"),
           "budget_pass_rate": s.get("budget_pass_rate"), "cpu_percent": s["cpu_percent"],
           "busy_calls": s["busy_calls"], "silent_calls": s["silent_calls"], "calls_failed": s["calls_failed"],
           "queue_wait_p95_ms": (s.get("queue_wait_ms") or {}).get("p95")}
    row["answer_e2e_p95_ms"] = (s.get("answer_e2e_ms") or {}).get("p95")
    row["apologies"] = sum(1 for c in report["calls"] for t in c.get("turns") or [] if APOLOGY in (t.get("bot_text") or ""))
    p95, rate = row["e2e_p95_ms"], row["budget_pass_rate"]
    served = (row["answered_turns"] == row["scored_turns"] and not row["silent_calls"] and not row["calls_failed"]
              and not row["busy_calls"] and not row["apologies"])
    row["within_capacity"] = bool(served and p95 is not None and p95 <= CAPACITY_E2E_P95_MS
                                  and rate is not None and rate >= CAPACITY_PASS_RATE)
    answer = row["answer_e2e_p95_ms"]
    row["within_service_capacity"] = bool(served and answer is not None and answer <= SERVICE_ANSWER_P95_MS)
    return row


def capacity(rows: list[dict], key: str = "within_capacity") -> int:
    """The largest N within capacity (0 if none was)."""
    return max((r["n"] for r in rows if r[key]), default=0)


def table_text(rows: list[dict]) -> str:
    head = "    N  answered  e2e p50/p95 ms   TTFAT p50/p95 ms  answer p95  pass rate  CPU %  busy  silent  budget  service"
    lines = [head]
    for r in rows:
        def ms(a: Any, b: Any) -> str:
            return f"{_n(a)}/{_n(b)}"
        lines.append(f"{r['n']:5d}  {r['answered_turns']:4d}/{r['scored_turns']:<4d} {ms(r['e2e_p50_ms'], r['e2e_p95_ms']):>15} "
                     f"{ms(r['ttfat_p50_ms'], r['ttfat_p95_ms']):>17}  {_n(r['answer_e2e_p95_ms']):>10}  "
                     f"{_rate(r['budget_pass_rate']):>9}  {r['cpu_percent']:5.0f}  {r['busy_calls']:4d}  "
                     f"{r['silent_calls']:6d}  {'yes' if r['within_capacity'] else 'no':>6}  "
                     f"{'yes' if r['within_service_capacity'] else 'no':>7}")
    return "\n".join(lines)


def _n(x: Any) -> str:
    return "-" if x is None else f"{x:.0f}"


def _rate(x: Any) -> str:
    return "-" if x is None else f"{x:.2f}"


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def cpu_flags() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    return " ".join(f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f" {f}" in text)
