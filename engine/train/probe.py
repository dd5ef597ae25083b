"""Decoding-policy probe: how often each commit policy reproduces a scripted corpus's turns exactly.

A scripted corpus (`python -m voice_agent.dialogues`) gives the one right answer for every prompt,
so decoding its prompts and comparing with the script separates what decoding breaks from what
training has not learnt: the same weights under AR (block 1) and under each (threshold, step cap).
This is how the `reasoning_effort` presets were chosen (docs/model_history.md).

  python -m engine.train probe --data runs/dialogues --n 12 --seed 1 --policies 0.3:2,0.9:4,0.9:3,ar
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

from engine.runtime.sampler import ORDERS
from engine.runtime.sequence import DecodeParams

END_TEXTS = ("<|im_end|>", "<|endoftext|>")


@dataclass(frozen=True)
class Policy:
    threshold: float
    steps: int  # step cap per block; at the cap the rest of the block commits at once
    block: int  # 1 = AR
    order: str = "confidence"  # engine.runtime.sampler.ORDERS

    @property
    def name(self) -> str:
        return "ar" if self.block == 1 else f"{self.threshold:g}:{self.steps}" + (
            "" if self.order == "confidence" else f":{self.order}")


def parse_policies(text: str, block: int) -> list[Policy]:
    """'0.3:2,0.9:4,0.9:4:prefix,ar' -> policies (THRESHOLD:STEP_CAP[:ORDER]); `block` is the block
    size of the diffusion ones."""
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part == "ar":
            out.append(Policy(1.0, 1, 1))
            continue
        try:
            th, steps, *order = part.split(":")
            if len(order) > 1 or (order and order[0] not in ORDERS):
                raise ValueError(order)
            pol = Policy(float(th), int(steps), block, order=order[0] if order else "confidence")
        except ValueError:
            raise ValueError(f"policy {part!r}: expected THRESHOLD:STEP_CAP[:ORDER] (e.g. 0.9:4 or 0.9:4:prefix; "
                             f"ORDER one of {', '.join(ORDERS)}) or 'ar'") from None
        if not 0 <= pol.threshold <= 1 or not 1 <= pol.steps <= block:
            raise ValueError(f"policy {part!r}: threshold in 0..1 and step cap in 1..{block}")
        out.append(pol)
    if not out:
        raise ValueError("no policies given")
    return out


def normalise(text: str) -> str:
    """The comparison ignores the end marker, outer whitespace and case (names come in the caller's case)."""
    for end in END_TEXTS:
        text = text.replace(end, "")
    return text.strip().lower()


def pick_records(path: Path, n: int, seed: int) -> list[dict]:
    """`n` answer-only records (no thinking note), shuffled by `seed`."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no corpus there (make one with python -m voice_agent.dialogues --out ...)")
    recs = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            raise ValueError(f"{path}:{i}: not a JSON line") from None
        if not isinstance(r, dict) or not {"prompt", "target"} <= set(r):
            raise ValueError(f"{path}:{i}: a record needs 'prompt' and 'target'")
        if not r.get("think"):
            recs.append(r)
    random.Random(seed).shuffle(recs)
    return recs[:n]


def probe(engine, records: list[dict], policies: list[Policy], max_tokens: int = 80) -> list[dict]:
    rows = []
    for pol in policies:
        exact = passes = decoded = 0
        t0 = time.perf_counter()
        for r in records:
            tokens = engine.tokenizer.encode(r["prompt"], add_special_tokens=False).ids
            params = DecodeParams(block_size=pol.block, threshold=pol.threshold,
                                  max_steps_per_block=pol.steps, max_tokens=max_tokens, order=pol.order)
            res = next(ev.result for ev in engine.run(engine.request_for_tokens(tokens, params)) if ev.type == "done")
            exact += normalise(res.raw_text or res.text) == normalise(r["target"])
            passes += res.metrics["forward_passes"]
            decoded += res.metrics["completion_tokens"]
        rows.append({"policy": pol.name, "exact": exact, "n": len(records),
                     "exact_rate": round(exact / max(len(records), 1), 3),
                     "tokens_per_forward": round(decoded / max(passes, 1), 3),
                     "wall_s": round(time.perf_counter() - t0, 1)})
    return rows
