"""Specialise the shipped generalist on one scenario pack and write the pack's own adapter.

Scripts thousands of calls of the pack (its tools, argument kinds, intents, facts and phrases, with
results from its real backend), trains the shipped adapter on them for --budget-min training
minutes on this CPU and measures it on the pack's held-out callers: first the adapter it starts from,
then the adapter so far every --eval-every minutes (the curve of success against minutes is printed
and kept in RUN/curve.json). The best measured adapter is installed as the pack's
`adapter.safetensors` (loaded whenever the pack is used with the default model); when none beats the
start, nothing is installed.

Resumable: stop it (Ctrl-C checkpoints first) and run the same command again. A 2-core laptop
gets a useful adapter within two hours (one core trains; the other is left for the measurements).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", required=True, metavar="NAME|PATH",
                        help="the pack to specialise on (a name in scenarios/, a pack folder or its scenario.yaml)")
    parser.add_argument("--budget-min", type=float, default=120.0, help="training minutes (across resumes)")
    parser.add_argument("--run", type=Path, default=None, metavar="DIR",
                        help="run folder: corpus, checkpoints, adapters, curve.json (default: runs/train/<pack>)")
    parser.add_argument("--calls", type=int, default=2000, help="scripted calls of the pack in the corpus")
    parser.add_argument("--from-adapter", default="", metavar="FILE",
                        help="the adapter to start from (default: the shipped generalist)")
    parser.add_argument("--eval-every", type=float, default=30.0, metavar="MIN",
                        help="measure the adapter so far every MIN training minutes (0: only at the end)")
    parser.add_argument("--callers", type=Path, default=None, metavar="CALLS.yaml",
                        help="held-out callers to measure on (default: the pack's callers/heldout.yaml)")
    parser.add_argument("--no-install", action="store_true",
                        help="leave the adapter in the run folder; do not copy it into the pack")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for training and measuring")
    parser.add_argument("--lr", type=float, default=2e-4, help="learning rate")
    parser.add_argument("--json", action="store_true", help="end stdout with the result as one JSON line")


def run(args: argparse.Namespace) -> int:
    from loguru import logger

    from voice_agent.scenarios import ScenarioError, load_scenario

    logger.remove()  # the measurements run whole calls: their pipeline logs are not this command's output
    logger.add(sys.stderr, level="WARNING")

    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as e:
        print(f"voice-agent train: {e}", file=sys.stderr)
        return 2
    if args.budget_min <= 0:
        print("voice-agent train: --budget-min must be positive", file=sys.stderr)
        return 2
    if args.from_adapter and not Path(args.from_adapter).is_file():
        print(f"voice-agent train: --from-adapter {args.from_adapter} not found", file=sys.stderr)
        return 2
    if scenario.webhook:
        print("voice-agent train: this pack's tools are a webhook; scripted calls need a Python backend to give "
              "real results (write backend.py, or train on a copy of the pack with one)", file=sys.stderr)
        return 2
    from voice_agent.corpus.specialise import SpecialiseConfig, specialise

    cfg = SpecialiseConfig(run=args.run or Path("runs") / "train" / scenario.name, budget_min=args.budget_min,
                           calls=args.calls, start_adapter=args.from_adapter, eval_every_min=args.eval_every,
                           curve=args.eval_every > 0, callers=args.callers, install=not args.no_install,
                           threads=args.threads, lr=args.lr,
                           log=lambda line: print(f"voice-agent train: {line}", file=sys.stderr, flush=True))
    result = specialise(scenario, cfg)
    if result.get("stopped"):
        return 130
    for p in result["curve"]:
        print(f"{p['minutes']:>6.1f} min  task_success {p['task_success_rate']:.3f}  "
              f"policy_share {p.get('policy_share')}  calls {p['calls']}")
    final = result.get("final") or {}
    print(f"trained {result['trained_min']} min (wall {result['wall_min']} min); adapter {result['adapter']}"
          + (f", installed as {result['installed']}" if result["installed"] else "")
          + (f"; held-out task_success {final.get('task_success_rate')}" if final else ""))
    if args.json:
        print(json.dumps(result))
    return 0
