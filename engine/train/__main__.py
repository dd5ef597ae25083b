"""python -m engine.train: build the distillation corpus, train the default dLLM adapter, export it.

  python -m engine.train data  --out runs/data            # prompts + teacher answers (resumable)
  python -m engine.train fit   --data runs/data --run runs/r1   # LoRA block-diffusion training (resumable)
  python -m engine.train export --run runs/r1 --out engine/weights/default_adapter.safetensors
  python -m engine.train probe --data runs/dialogues --adapter runs/adapter.safetensors  # decoding policies vs the script
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("data", help="generate prompts and teacher answers", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    d.add_argument("--out", type=Path, default=Path("runs/data"))
    d.add_argument("--n-train", type=int, default=3000)
    d.add_argument("--n-heldout", type=int, default=240)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--max-new", type=int, default=40, help="teacher answer length cap (tokens)")
    d.add_argument("--batch", type=int, default=16)
    f = sub.add_parser("fit", help="train the LoRA adapter", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    from engine.train.trainer import TrainConfig

    TrainConfig.add_arguments(f)
    e = sub.add_parser("export", help="write the adapter safetensors (+ model card fields)")
    e.add_argument("--run", type=Path, required=True)
    e.add_argument("--block-size", type=int, default=4, help="the block size the engine decodes with (choose by engine.tools.eval)")
    e.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "weights" / "default_adapter.safetensors")
    pr = sub.add_parser("probe", help="exact-match rate of scripted turns under each decoding policy",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    pr.add_argument("--data", type=Path, default=Path("runs/dialogues"), help="scripted corpus folder (train.jsonl)")
    pr.add_argument("--adapter", type=Path, default=None, help="adapter to probe (default: the shipped one)")
    pr.add_argument("--n", type=int, default=12, help="records to decode (answer-only ones)")
    pr.add_argument("--seed", type=int, default=1, help="which records (shuffle seed)")
    pr.add_argument("--policies", default="0.3:2,0.9:4,0.9:3,ar",
                    help="THRESHOLD:STEP_CAP[:ORDER] per diffusion policy, 'ar' for block 1; ORDER (engine.runtime.sampler.ORDERS) "
                         "is what commits beside the positions above the threshold: confidence (the most "
                         "confident, default), leftmost, prefix (only the left-contiguous run)")
    pr.add_argument("--threads", type=int, default=None)
    pr.add_argument("--json", action="store_true", help="end with one JSON line of the rows")
    args = p.parse_args(argv)
    if args.cmd == "data":
        from engine.train.teacher import build_corpus

        build_corpus(args.out, args.n_train, args.n_heldout, args.seed, args.max_new, args.batch)
    elif args.cmd == "fit":
        from engine.train.trainer import fit

        fit(TrainConfig.from_args(args))
    elif args.cmd == "probe":
        return _probe(args)
    else:
        from engine.train.trainer import export

        export(args.run, args.out, block_size=args.block_size)
    return 0


def _probe(args: argparse.Namespace) -> int:
    import json

    from engine.api import Engine
    from engine.train.probe import parse_policies, pick_records, probe

    try:
        records = pick_records(args.data / "train.jsonl", args.n, args.seed)
        engine = Engine.load("default", threads=args.threads, adapter=args.adapter)
        policies = parse_policies(args.policies, engine.family.block_size)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = probe(engine, records, policies)
    print(f"{'policy':<10} {'exact':>9} {'tok/fwd':>8} {'wall s':>7}")
    for r in rows:
        print(f"{r['policy']:<10} {r['exact']:>4}/{r['n']:<4} {r['tokens_per_forward']:>8} {r['wall_s']:>7}")
    if args.json:
        print(json.dumps({"records": len(records), "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
