"""A call file, end to end: check it against the scenario, run every call, grade, summarize, write
DIR/simulate.json and DIR/failed/<id>.txt (a readable transcript of each failed call)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from voice_agent.scenarios import DEFAULT_SCENARIO, PACK_FILE, Scenario, load_scenario
from voice_agent.simulate.callfile import CallFile, CallFileError
from voice_agent.simulate.grade import grade
from voice_agent.simulate.readable import write_failed
from voice_agent.simulate.runner import RunOptions, run_call
from voice_agent.simulate.summary import summarize
from voice_agent.simulate.transcript import CallRecord, TurnRecord


def scenario_for(calls: CallFile, override: str | None = None) -> Scenario:
    """The scenario to run: --scenario, else the file's `scenario:` (a name, or a pack folder relative
    to the file), else the pack whose callers/ folder holds the file, else the default. The file's tool
    names are checked against it: an expectation on a tool the scenario does not have is a mistake."""
    scenario = load_scenario(override or _file_scenario(calls))
    known = set(scenario.tool_names)
    for call in calls.calls:
        named = [t["name"] for t in call.expect.tool_calls] + list(call.expect.no_tool_calls)
        for name in named:
            if name not in known:
                raise CallFileError(f"{calls.source or 'call file'}: call {call.id!r}: unknown tool {name!r} "
                                    f"(scenario {scenario.name} has {', '.join(sorted(known))})")
    return scenario


def _file_scenario(calls: CallFile) -> str:
    here = calls.source.resolve().parent if calls.source else None
    if calls.scenario:
        beside = here / calls.scenario if here is not None else None
        return str(beside) if beside is not None and (beside / PACK_FILE).is_file() else calls.scenario
    if here is not None and here.name == "callers" and (here.parent / PACK_FILE).is_file():
        return str(here.parent)
    return DEFAULT_SCENARIO


def simulate(calls: CallFile, scenario: Scenario, engine: Any, opts: RunOptions, out_dir: Path | None = None,
             progress: bool = True) -> dict:
    """Run and grade every call; returns the summary (and writes DIR/simulate.json when out_dir)."""
    return asyncio.run(_simulate(calls, scenario, engine, opts, out_dir, progress))


async def _simulate(calls: CallFile, scenario: Scenario, engine: Any, opts: RunOptions, out_dir: Path | None,
                    progress: bool) -> dict:
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=sum(len(c.caller) for c in calls.calls), desc="caller turns", unit="turn", file=sys.stderr,
                   disable=None)  # no bar when stderr is not a terminal: the per-call lines stay

    def on_turn(_turn: TurnRecord) -> None:
        if bar is not None:
            bar.update(1)

    records: list[CallRecord] = []
    reasons: list[list[str]] = []
    t0 = time.perf_counter()
    try:
        for i, call in enumerate(calls.calls, 1):
            record = await run_call(call, scenario, engine, calls.today, opts, on_turn=on_turn)
            why = grade(call, record)
            records.append(record)
            reasons.append(why)
            line = (f"[{i}/{len(calls.calls)}] {'PASS' if not why else 'FAIL'} {call.id} "
                    f"({sum(t.answered for t in record.turns)}/{len(call.caller)} answered, {record.wall_s:.1f} s)")
            if bar is not None:
                bar.update(len(call.caller) - len(record.turns))  # turns a failed call never ran
                bar.write(line, file=sys.stderr)
            else:
                print(line, file=sys.stderr)
    finally:
        if bar is not None:
            bar.close()
    effort = opts.reasoning_effort or scenario.reasoning_effort
    summary = summarize(records, reasons, scenario=scenario.name, today=calls.today.isoformat(),
                        reasoning_effort=effort, model=getattr(engine, "model_name", None),
                        adapter=(getattr(engine, "info", None) or {}).get("adapter_path"),
                        wall_s=round(time.perf_counter() - t0, 1))
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        full = {"source": str(calls.source) if calls.source else None, "options": asdict(opts), "summary": summary,
                "calls": [{"id": r.id, "success": not why, "reasons": why, "caller": list(c.caller),
                           "expect": asdict(c.expect), **r.to_dict()}
                          for r, why, c in zip(records, reasons, calls.calls, strict=True)]}
        (out_dir / "simulate.json").write_text(json.dumps(full, indent=2, ensure_ascii=False, default=str) + "\n",
                                               encoding="utf-8")
        write_failed(out_dir, list(zip(records, reasons, strict=True)), scenario.name)
    return summary
