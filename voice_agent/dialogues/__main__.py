"""python -m voice_agent.dialogues: write the dialogue corpus (train.jsonl) and held-out simulate calls."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m voice_agent.dialogues", description=__doc__,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("runs/dialogues"), help="folder for train.jsonl, heldout_calls.json and heldout/train.jsonl (the held-out calls' scripted turns)")
    p.add_argument("--calls", type=int, default=3000, help="training calls to play")
    p.add_argument("--heldout-calls", type=int, default=60, help="held-out calls (unseen names and phrasings)")
    p.add_argument("--seed", type=int, default=0,
                   help="random seed: the same seed gives the same corpus and held-out calls; another seed "
                        "draws another set of calls from the same held-out names and phrasings")
    p.add_argument("--think-share", type=float, default=0.5, help="share of records with the reasoning note")
    p.add_argument("--simulate-file", type=Path, default=None,
                   help="also write the held-out calls as a `voice-agent simulate` file here")
    p.add_argument("--handwritten", type=Path, default=None, help="hand-written simulate calls to append to it")
    p.add_argument("--scenario", default="dental_clinic", metavar="NAME|PATH",
                   help="the scenario pack whose calls to script (this generator scripts dental_clinic's)")
    a = p.parse_args(argv)
    from voice_agent.scenarios import ScenarioError, load_scenario

    try:
        name = load_scenario(a.scenario).name
    except ScenarioError as e:
        p.error(str(e))
    if name != "dental_clinic":
        p.error(f"this generator scripts the dental_clinic pack's calls only, not {name}'s; a pack's own "
                "simulate callers come from its make_callers.py (scenarios/<name>/)")
    from voice_agent.dialogues.generate import generate, write_simulate_file

    stats = generate(a.out, a.calls, a.heldout_calls, a.seed, a.think_share)
    if a.simulate_file:
        held = json.loads((a.out / "heldout_calls.json").read_text())
        stats["simulate_file_calls"] = write_simulate_file(held, a.simulate_file, a.handwritten)
    print(json.dumps(stats))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
