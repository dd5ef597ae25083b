"""python -m voice_agent.corpus: write a training corpus from scenario packs and synthetic scenarios.

    python -m voice_agent.corpus --out runs/corpus                       # the generalist's corpus
    python -m voice_agent.corpus --out runs/hotel --packs hotel_front_desk --synthetic 40   # one pack's
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from voice_agent.corpus.build import TRAINING_PACKS, build_corpus

    p = argparse.ArgumentParser(prog="python -m voice_agent.corpus", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("runs/corpus"), help="folder for train.jsonl, heldout/ and stats.json")
    p.add_argument("--packs", default=",".join(TRAINING_PACKS),
                   help="comma-separated pack names or folders to script calls for (default: the shipped packs)")
    p.add_argument("--calls-per-pack", type=int, default=1500, help="training calls per pack")
    p.add_argument("--synthetic", type=int, default=300, help="procedural scenarios to add (0: none)")
    p.add_argument("--calls-per-synthetic", type=int, default=10, help="calls per synthetic scenario")
    p.add_argument("--heldout-calls", type=int, default=20, help="held-out calls per pack (unseen names and phrasings)")
    p.add_argument("--think-share", type=float, default=0.5, help="share of records with the reasoning note")
    p.add_argument("--policy-share", type=float, default=0.15,
                   help="share of the turns the runtime policy decides to keep (the model never writes them)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--allow-unseen", action="store_true", help="allow the unseen pack (a specialisation corpus)")
    a = p.parse_args(argv)
    packs = [x.strip() for x in a.packs.split(",") if x.strip()]
    try:
        stats = build_corpus(a.out, packs, a.calls_per_pack, a.synthetic, a.calls_per_synthetic, a.seed,
                             a.think_share, a.policy_share, a.heldout_calls, a.allow_unseen)
    except ValueError as e:  # ScenarioError, the unseen pack
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(stats))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
