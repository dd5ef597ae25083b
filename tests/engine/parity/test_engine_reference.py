"""The engine's transformer matches transformers' reference implementation."""

from __future__ import annotations

import pytest
import torch

from engine import Engine
from engine.model.loading import load_hf_folder, smollm2_folder
from engine.model.transformer import causal_mask
from tests.tiny_models import save_tiny

PROMPT = [{"role": "user", "content": "Hi, can I book a cleaning for next Tuesday morning?"}]


def _our_logits(model, ids):
    x = torch.tensor([ids])
    pos = torch.arange(len(ids))[None]
    with torch.no_grad():
        return model(x, pos, causal_mask(len(ids))[None, None])[0]


def _hf_logits(folder, ids, **kw):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, **kw).eval()
    with torch.no_grad():
        return hf, hf(torch.tensor([ids])).logits[0]


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])
def test_tiny_random_configs_match_transformers(tmp_path, kind):
    folder = save_tiny(tmp_path / kind, kind)
    ckpt = load_hf_folder(folder, dtype=torch.float32)
    ids = ckpt.tokenizer.encode("The quick brown fox jumps over the lazy dog again and again").ids
    ours = _our_logits(ckpt.model, ids)
    hf, ref = _hf_logits(folder, ids)
    assert torch.allclose(ours, ref, atol=1e-4, rtol=1e-4), (ours - ref).abs().max()
    eng = Engine.load(folder, dtype=torch.float32)
    text = eng.chat_format.render(PROMPT)
    pids = eng.tokenizer.encode(text, add_special_tokens=False).ids
    out = hf.generate(torch.tensor([pids]), max_new_tokens=12, do_sample=False, eos_token_id=None,
                      pad_token_id=0)[0, len(pids):].tolist()
    r = eng.chat(PROMPT, reasoning_effort="instant", max_tokens=12)
    ours_ids = eng.tokenizer.encode(r.raw_text, add_special_tokens=False).ids
    assert eng.tokenizer.decode(out, skip_special_tokens=True).startswith(r.raw_text) or ours_ids == out


@pytest.mark.slow
def test_smollm2_logits_and_greedy_match_transformers():
    folder = smollm2_folder()
    ckpt = load_hf_folder(folder, dtype=torch.float32)
    eng = Engine.load("smollm2-base", dtype=torch.float32)
    text = eng.chat_format.render(PROMPT)
    ids = eng.tokenizer.encode(text, add_special_tokens=False).ids
    ours = _our_logits(ckpt.model, ids)
    hf, ref = _hf_logits(folder, ids)
    assert (ours - ref).abs().max() < 2e-3
    assert torch.equal(ours.argmax(-1), ref.argmax(-1))
    out = hf.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False)[0, len(ids):].tolist()
    r = eng.chat(PROMPT, reasoning_effort="instant", max_tokens=24)
    assert r.raw_text == eng.tokenizer.decode(out, skip_special_tokens=True)
    assert r.metrics["tokens_per_forward"] <= 1.05  # AR: one token per forward (the first from prefill)
