"""Run scripted callers (text, no audio) through the live call's turn logic - the same engine
service, tool loop, filler rule and speakable filter - each on a fresh backend of the scenario pack,
and grade every call by the state its backend is left in (`snapshot()`), the tools it used, what it
said and whether every reply can be spoken.

CALLS.yaml holds `scenario`, `today` and `calls` (each: id, optional setup, caller lines, expect
{state, tool_calls, no_tool_calls, must_say, must_not_say}); see voice_agent/simulate/callfile.py.
Prints a pass/fail table per call, writes DIR/simulate.json and, for each failed call, a readable
DIR/failed/<id>.txt. With --json the last stdout line is one JSON object: calls, task_success_rate,
answered_rate, clean_reply_rate, tool_error_rate, tool_errors, policy_share, model_share,
ttfat_ms_p50, ttfat_ms_p95, tokens_per_forward (decoded_tokens over forward_passes, both given),
first_answer_ms_p50/p95, per_call.

Exit status: 0 when every call succeeds, 1 when some fail, 2 for a call file that cannot be read
or parsed (or names an unknown scenario or tool).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from voice_agent.config import add_flags
from voice_agent.logs import add_log_arguments, setup_logs

DEFAULT_OUT = "simulate_out"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("calls", metavar="CALLS.yaml", help="the call file")
    add_flags(parser, ("reasoning_effort",))
    parser.add_argument("--scenario", default=None, metavar="NAME|PATH",
                        help="scenario pack (a name in scenarios/, a pack folder or its scenario.yaml); "
                             "overrides the call file's")
    parser.add_argument("--out", default=DEFAULT_OUT, metavar="DIR",
                        help="folder for simulate.json and failed/<id>.txt (a readable transcript per failed call)")
    parser.add_argument("--json", action="store_true", help="end stdout with the summary as one JSON line")
    # engine threads keep this command's older flag name, --threads
    add_flags(parser, ("model", "precision", "engine_threads"), flags={"engine_threads": "--threads"})
    parser.add_argument("--adapter", default=None, metavar="FILE",
                        help="a LoRA adapter (.safetensors from `engine.train export`) instead of the shipped one")
    add_flags(parser, ("max_tokens", "temperature", "warm_prefill"))
    parser.add_argument("--turn-timeout", type=float, default=300.0, help="seconds one caller turn may take")
    parser.add_argument("--hear-early-s", type=float, default=0.0, metavar="S",
                        help="hear each caller turn S seconds before it ends, as the live pipeline's early STT pass "
                             "does: the turn decodes ahead and its read-only tools run meanwhile (0: off)")
    add_log_arguments(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    setup_logs(args)

    from voice_agent.scenarios import ScenarioError
    from voice_agent.simulate.batch import scenario_for
    from voice_agent.simulate.callfile import CallFileError, load_callfile

    try:
        calls = load_callfile(args.calls)
        scenario = scenario_for(calls, args.scenario)
    except (CallFileError, ScenarioError) as e:
        print(f"voice-agent simulate: {e}", file=sys.stderr)
        return 2

    from engine import Engine
    from voice_agent.simulate.batch import simulate
    from voice_agent.simulate.runner import RunOptions
    from voice_agent.simulate.summary import table_text

    if args.hear_early_s < 0:
        print("voice-agent simulate: --hear-early-s must be 0 or more", file=sys.stderr)
        return 2
    opts = RunOptions.from_args(args, turn_timeout_s=args.turn_timeout, scenario=scenario.name,
                                hear_early_s=args.hear_early_s)
    from voice_agent.packs.adapter import pack_adapter

    adapter = args.adapter or pack_adapter(scenario, opts.model)  # --adapter, else the pack's own
    load_kw = ({"threads": opts.engine_threads} | ({"precision": opts.precision} if opts.precision else {})
               | ({"adapter": str(adapter)} if adapter else {}))
    try:
        engine = Engine.load(opts.model, **load_kw)
    except FileNotFoundError as e:  # a mistyped --adapter or model folder
        print(f"voice-agent simulate: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    summary = simulate(calls, scenario, engine, opts, out_dir=out, progress=not args.no_progress)
    print(table_text(summary))
    print(f"wrote {out / 'simulate.json'}")
    if args.json:
        print(json.dumps(summary, ensure_ascii=False))
    return 0 if summary["task_success_rate"] == 1.0 else 1
