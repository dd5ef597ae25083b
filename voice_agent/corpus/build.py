"""Write a training corpus from scenario packs and synthetic scenarios.

    stats = build_corpus(out, packs=["dental_clinic", ...], calls_per_pack=1500, synthetic=300,
                         calls_per_synthetic=10, seed=0)

`out/train.jsonl` holds the records `python -m engine.train fit` reads; `out/heldout/train.jsonl`
holds records held out three ways, for `engine.train probe`:
- by scenario: every tenth synthetic scenario is never trained on;
- by template: held-out calls use the held-out fifth of each phrase bank (caller.py);
- by entity: held-out calls draw names from the held-out fifth of first and last names (values.py).

Turns the runtime's policy decides (`decided_by`) are never the model's to write at run time, so
only a share of them (`policy_share`) is kept: the model's turns get the training time.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import tempfile
from collections import Counter
from pathlib import Path

from voice_agent.corpus.desk import Source, pack_source, synthetic_source
from voice_agent.corpus.play import play
from voice_agent.corpus.synthetic import synthetic_scenario
from voice_agent.corpus.values import ValueBank
from voice_agent.scenarios import load_scenario

# Packs whose callers measure the generalist on a scenario it never saw: never in a generalist corpus.
UNSEEN_PACKS = ("hotel_front_desk",)
TRAINING_PACKS = ("dental_clinic", "telecom_support", "car_garage")
HELDOUT_SYNTHETIC_EVERY = 10
# Read-backs are half of the model's turns and the most alike: half of them teach as much.
KEEP_SHARE = {"read_back": 0.5}
TODAYS = [dt.date(2026, 12, 1), dt.date(2026, 11, 30), dt.date(2026, 12, 3), dt.date(2027, 1, 12),
          dt.date(2026, 10, 7), dt.date(2027, 3, 19), dt.date(2026, 12, 9), dt.date(2027, 2, 2)]


def build_corpus(out: Path, packs: list[str], calls_per_pack: int, synthetic: int, calls_per_synthetic: int,
                 seed: int = 0, think_share: float = 0.5, policy_share: float = 0.15, heldout_calls: int = 20,
                 allow_unseen: bool = False, progress: bool = True) -> dict:
    from tqdm import tqdm

    for p in packs:
        if load_scenario(p).name in UNSEEN_PACKS and not allow_unseen:
            raise ValueError(f"{p} is the unseen pack: it measures zero-shot calls and is kept out of every "
                             "generalist corpus (voice-agent train --scenario specialises on it on purpose)")
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    (out / "heldout").mkdir(exist_ok=True)
    stats: dict = {"train_records": 0, "heldout_records": 0, "calls": 0, "by_scenario": Counter(), "by_why": Counter(),
                   "records_dropped": 0, "synthetic_scenarios": synthetic}
    banks = {"train": ValueBank("train"), "heldout": ValueBank("heldout")}
    jobs: list[tuple[str, int, str]] = []  # (source key, calls, split)
    with tempfile.TemporaryDirectory(prefix="corpus-") as work:
        sources: dict[str, Source] = {}
        for p in packs:
            sc = load_scenario(p)
            sources[sc.name] = pack_source(sc, Path(work))
            jobs += [(sc.name, calls_per_pack, "train"), (sc.name, heldout_calls, "heldout")]
        for i in range(synthetic):
            syn = synthetic_scenario(random.Random(seed * 100_003 + i), i)
            sources[syn.scenario.name] = synthetic_source(syn)
            held = i % HELDOUT_SYNTHETIC_EVERY == HELDOUT_SYNTHETIC_EVERY - 1
            jobs.append((syn.scenario.name, calls_per_synthetic if not held else max(1, calls_per_synthetic // 3),
                         "heldout" if held else "train"))
        total = sum(n for _, n, _ in jobs)
        bar = tqdm(total=total, desc="corpus calls", unit="call", disable=not progress)
        with (out / "train.jsonl").open("w") as train, (out / "heldout" / "train.jsonl").open("w") as held_fh:
            for key, n, split in jobs:
                for _ in range(n):
                    call = play(sources[key], banks[split], rng, rng.choice(TODAYS), split, think_share)
                    stats["calls"] += 1
                    for r in call.records:
                        keep = policy_share if r["decided_by"] else KEEP_SHARE.get(r["why"], 1.0)
                        if rng.random() >= keep:
                            stats["records_dropped"] += 1
                            continue
                        (held_fh if split == "heldout" else train).write(json.dumps(r) + "\n")
                        stats["heldout_records" if split == "heldout" else "train_records"] += 1
                        stats["by_scenario"][key if not key.startswith("synthetic_") else "synthetic"] += 1
                        stats["by_why"][r["why"].split(":")[0]] += 1
                    bar.update(1)
        bar.close()
    stats["by_scenario"], stats["by_why"] = dict(stats["by_scenario"]), dict(stats["by_why"])
    (out / "stats.json").write_text(json.dumps(stats, indent=1))
    return stats


__all__ = ["TRAINING_PACKS", "UNSEEN_PACKS", "build_corpus"]
