"""python -m engine.train: build the distillation corpus, train the default dLLM adapter, export it.

  python -m engine.train data  --out runs/data            # prompts + teacher answers (resumable)
  python -m engine.train fit   --data runs/data --run runs/r1   # LoRA block-diffusion training (resumable)
  python -m engine.train export --run runs/r1 --out engine/weights/default_adapter.safetensors
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
    e.add_argument("--block-size", type=int, default=4, help="the block size the engine decodes with (choose by engine.eval)")
    e.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "weights" / "default_adapter.safetensors")
    args = p.parse_args(argv)
    if args.cmd == "data":
        from engine.train.teacher import build_corpus

        build_corpus(args.out, args.n_train, args.n_heldout, args.seed, args.max_new, args.batch)
    elif args.cmd == "fit":
        from engine.train.trainer import fit

        fit(TrainConfig.from_args(args))
    else:
        from engine.train.trainer import export

        export(args.run, args.out, block_size=args.block_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
