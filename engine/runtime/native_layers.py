"""Assembling a w8a8 model's native layers (engine/model/native.py loads the extension): the one caller is
the model runner (engine/runtime/runner.py), which asks once per model."""

from __future__ import annotations

from engine.model.native import NATIVE_ENV, build_error, enabled, load_extension
from engine.model.quant import W8A8Linear
from engine.model.transformer import signed_sin


def native_layers_for(model) -> tuple[object | None, str]:
    """The native layers of a w8a8 `model` (engine.model.transformer.Transformer), and why not where None."""
    if not enabled():
        return None, f"off ({NATIVE_ENV}=0)"
    up_to = model.fp32_stream_up_to
    if up_to <= 0:
        return None, "not a w8a8 model with an fp32 stream"
    layers = list(model.layers)
    linears = []
    for layer in layers:
        attn, mlp = layer.self_attn, layer.mlp
        lins = (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)
        if attn.q_norm is not None or not all(isinstance(lin, W8A8Linear) for lin in lins):
            return None, "needs fused w8a8 q/k/v and gate/up and no q/k norm"
        parts = [lin.native_parts(up_to) for lin in lins]
        if any(p is None for p in parts):
            return None, "needs oneDNN-packed weights and one narrow-pass cutoff"
        if any(norm.weight_fp32 is None for norm in (layer.input_layernorm, layer.post_attention_layernorm)):
            return None, "not a w8a8 model with an fp32 stream"
        linears += parts
    if model.embed_tokens.weight.device.type != "cpu":
        return None, "CPU only (PyTorch's quantized kernels)"
    ext = load_extension()
    if ext is None:
        return None, f"not built: {build_error()}"
    norms = [n for layer in layers for n in (layer.input_layernorm, layer.post_attention_layernorm)]
    cfg = model.cfg
    native = ext.NativeLayers([n.weight.detach() for n in norms], [n.weight_fp32 for n in norms], linears,
                              float(cfg.rms_eps), cfg.n_heads, cfg.n_kv_heads, cfg.head_dim)
    head = model.lm_head
    if isinstance(head, W8A8Linear) and head.narrow_kernel is not None and model.norm.weight_fp32 is not None:
        # narrow passes in one region run from the token ids to the logits (Transformer.logits)
        # (the RoPE tables in the model's dtype, as its Python layers take them, then fp32 as the C++ layers do)
        native.set_ends(model.embed_tokens.weight.detach(), model.rope_cos.float().contiguous(),
                        signed_sin(model.rope_sin).float().contiguous(), model.norm.weight_fp32, head.narrow_kernel)
    return native, "on"
