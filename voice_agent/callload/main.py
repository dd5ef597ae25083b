"""`voice-agent callload`: load the engine and the speech models once, then run the levels (N
concurrent calls each, voice_agent/callload/run.py) or the soak (voice_agent/callload/soak.py)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from voice_agent.callload.run import (
    CAPACITY_E2E_P95_MS,
    CAPACITY_PASS_RATE,
    SERVICE_ANSWER_P95_MS,
    LoadOptions,
    PhoneApp,
    capacity,
    capacity_row,
    cpu_flags,
    load_recordings,
    run_level,
    table_text,
)
from voice_agent.callload.soak import soak_main
from voice_agent.config import CallOptions
from voice_agent.latency.budget import budget_lines


def callload_main(opts: LoadOptions, out: Path) -> int:
    from voice_agent.pipeline import load_engine
    from voice_agent.scenarios import ScenarioError, load_scenario
    from voice_agent.services.stt import load_whisper, whisper_model_path
    from voice_agent.services.tts import load_hibari
    from voice_agent.transports.phone import PhoneServer

    try:
        scenario = load_scenario(opts.scenario)
        recordings = load_recordings(opts.callers, out / "callers")
    except (ScenarioError, ValueError, OSError) as e:
        print(f"voice-agent callload: {e}", file=sys.stderr)
        return 2
    engine = None if opts.remote else load_engine(opts.model, opts.precision, opts.engine_threads, scenario)
    load_whisper(str(whisper_model_path(opts.stt_model)), opts.stt_threads)
    if opts.tts == "hibari":
        load_hibari()
    options = CallOptions(**{k: getattr(opts, k) for k in CallOptions.__dataclass_fields__})
    if opts.soak_minutes > 0:
        from voice_agent.callload.faults import FaultyEngine

        engine = FaultyEngine(engine) if engine is not None else None  # one call's turns fail, by injection
    server = PhoneServer(engine=engine, scenario=scenario, options=options)
    model = engine.model_name if engine is not None else str(opts.llm_url)
    if opts.soak_minutes > 0:
        return soak_main(server, recordings, opts, out, scenario, model)
    rows = []
    t_end = time.monotonic() + opts.max_minutes * 60
    with PhoneApp(server) as app:
        for n in opts.counts:
            if time.monotonic() > t_end:
                print(f"stopped before N={n}: the run's {opts.max_minutes:g} min are spent", file=sys.stderr)
                break
            if opts.progress:
                print(f"N={n}: placing {n} call(s) ...", file=sys.stderr, flush=True)
            report = run_level(n, app, recordings, opts, out / f"N{n}", scenario, model)
            row = capacity_row(report)
            rows.append(row)
            if opts.progress:
                print(table_text([row]).splitlines()[1], file=sys.stderr, flush=True)
                for line in budget_lines(report["summary"]):
                    print(f"       {line}", file=sys.stderr)
    result = {"capacity": capacity(rows), "criteria": {"e2e_p95_ms_at_most": CAPACITY_E2E_P95_MS,
                                                       "budget_pass_rate_at_least": CAPACITY_PASS_RATE},
              "service_capacity": capacity(rows, "within_service_capacity"),
              "service_criteria": {"answer_e2e_p95_ms_at_most": SERVICE_ANSWER_P95_MS,
                                   "every_turn_answered_by_the_agent": True},
              "cpu_flags": cpu_flags(), "cores": os.cpu_count(), "rows": rows}
    out.mkdir(parents=True, exist_ok=True)
    (out / "capacity.json").write_text(json.dumps(result, indent=2) + "\n")
    print(table_text(rows))
    print(f"\ncapacity: {result['capacity']} concurrent call(s) (e2e p95 <= {CAPACITY_E2E_P95_MS:.0f} ms, "
          f"pass rate >= {CAPACITY_PASS_RATE:.0%}, every turn answered) on {os.cpu_count()} cores "
          f"[{result['cpu_flags']}]")
    print(f"service capacity: {result['service_capacity']} concurrent call(s) (every turn answered by the agent, "
          f"no apology, no silent or refused call, answer audio p95 <= {SERVICE_ANSWER_P95_MS:.0f} ms)")
    print(f"reports: {out}/N<n>/report.html   table: {out / 'capacity.json'}")
    return 0
