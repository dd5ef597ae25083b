"""The LoRA adapter format of the default model, and its merge onto base weights at load time."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

from engine.model.transformer import Transformer


def merge_adapter(model: Transformer, path: Path) -> dict:
    """W += scale * B @ A for every adapted Linear; also installs the trained mask embedding.

    Returns the adapter's metadata (block size, rank, model name, ...)."""
    with safe_open(str(path), framework="pt") as f:
        meta = dict(f.metadata() or {})
        keys = list(f.keys())
        scale = float(meta.get("lora_alpha", 1.0)) / float(meta.get("lora_rank", 1))
        mods = dict(model.named_modules())
        with torch.no_grad():
            for k in keys:
                if k.endswith(".lora_A"):
                    name = k[: -len(".lora_A")]
                    a = f.get_tensor(k).float()
                    b = f.get_tensor(name + ".lora_B").float()
                    lin = mods[name]
                    lin.weight.copy_((lin.weight.float() + scale * (b @ a)).to(lin.weight.dtype))
            if "mask_embedding" in keys:
                mask_id = int(meta["mask_token_id"])
                model.embed_tokens.weight[mask_id] = f.get_tensor("mask_embedding").to(model.dtype)
    if "extra" in meta:
        meta.update(json.loads(meta.pop("extra")))
    return meta
