"""The training pipeline runs end to end on a tiny config, and its loss goes down."""

from __future__ import annotations

import json

import torch

from engine.train.trainer import TrainConfig, build_example, export, fit, record_sampler
from tests.tiny_models import save_tiny


def test_training_reduces_loss_and_exports_an_adapter(tmp_path):
    folder = save_tiny(tmp_path / "tiny", "llama", seed=3)
    data = tmp_path / "data"
    data.mkdir()
    recs = []
    for i in range(4):
        prompt = f"<|im_start|>user\nbook slot {i}<|im_end|>\n<|im_start|>assistant\n"
        answer = f"Sure, slot {i} is booked for you."
        recs.append({"prompt": prompt, "target": answer + "<|im_end|>", "teacher_answer": answer})
    (data / "train.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    run = tmp_path / "run"
    cfg = TrainConfig(data=data, run=run, rank=4, alpha=8, lr=1e-2, warmup=1, accum=2, max_steps=30,
                      max_minutes=5, block_sizes="4", base=str(folder), threads=1)
    out = fit(cfg)
    assert out["step"] == 30
    log = [json.loads(x) for x in (run / "log.jsonl").read_text().splitlines()]
    first = sum(r["loss_diffusion"] for r in log[:5]) / 5
    last = sum(r["loss_diffusion"] for r in log[-5:]) / 5
    assert last < 0.7 * first, (first, last)
    # resume: a second fit continues from the checkpoint instead of starting over
    cfg.max_steps = 32
    assert fit(cfg)["step"] == 32
    adapter = export(run, tmp_path / "adapter.safetensors", block_size=4)
    from engine import Engine

    eng = Engine.load(folder, dtype=torch.float32, family="smollm2-dllm", adapter=adapter)
    assert eng.info["adapter"]["lora_rank"] == "4"


def test_complementary_masks_cover_every_answer_token():
    import random

    ex = build_example(list(range(10, 20)), list(range(100, 113)), 4, mask_id=7, rng=random.Random(0))
    assert sorted(ex["tgt"].tolist()) == sorted(list(range(100, 113)))  # each answer token once
    n = 23  # 10 prompt + 13 answer tokens
    att = ex["att"]
    assert not att[:n, n:].any()  # clean tokens never see noisy ones
    assert att[n, : 10].all() and not att[n, 10:n].any()  # first noisy block sees only the prompt


def test_a_resumed_run_draws_other_records_than_its_start():
    start = [record_sampler(0, 0).randrange(10_000) for _ in range(8)]
    assert start == [record_sampler(0, 0).randrange(10_000) for _ in range(8)]  # a run is reproducible
    resumed = record_sampler(0, 209)
    assert [resumed.randrange(10_000) for _ in range(8)] != start
