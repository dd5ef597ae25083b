"""Tiny random-weight checkpoints saved as real HF folders (for the engine's mechanics only)."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch


def save_tiny(folder: Path, kind: str = "qwen2", seed: int = 0) -> Path:
    """A 2-layer random model of `kind` (llama | qwen2 | qwen3) with the SmolLM2 tokenizer."""
    import transformers

    from engine.model.loading import smollm2_folder

    torch.manual_seed(seed)
    common = dict(vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                  rms_norm_eps=1e-6, tie_word_embeddings=False)
    if kind == "llama":
        cfg = transformers.LlamaConfig(**common)
        model = transformers.LlamaForCausalLM(cfg)
    elif kind == "qwen2":
        cfg = transformers.Qwen2Config(**common)
        model = transformers.Qwen2ForCausalLM(cfg)
    elif kind == "qwen3":
        cfg = transformers.Qwen3Config(**common, head_dim=16)
        model = transformers.Qwen3ForCausalLM(cfg)
    else:
        raise ValueError(kind)
    with torch.no_grad():  # larger weights than the default init, so the greedy path is not flat
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.2)
    model.save_pretrained(folder, safe_serialization=True)
    src = smollm2_folder()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(src / name, folder / name)
    return folder


def causal_logits(eng, tokens: list[int]) -> torch.Tensor:
    """The engine model's logits at every position of `tokens`, teacher-forced with a causal mask."""
    from engine.model.transformer import causal_mask

    t = len(tokens)
    with torch.inference_mode():
        return eng.model(torch.tensor([tokens]), torch.arange(t)[None], causal_mask(t)[None, None])[0].float()
