"""One transformer for the Llama / Qwen2 / Qwen3 family (gpt-fast style).

RMSNorm, RoPE, GQA, SwiGLU, optional q/k norm (Qwen3) and qkv bias (Qwen2). The attention
pattern is not baked in: callers pass an `intra` mask over the new tokens of a pass, which is how
causal, block-causal and bidirectional decoding all share one forward.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from engine.model.kv_cache import KVCache


@dataclass
class ModelConfig:
    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    intermediate_size: int
    head_dim: int = 0
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    qk_norm: bool = False
    qkv_bias: bool = False
    tie_embeddings: bool = False
    max_seq_len: int = 8192
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.head_dim:
            self.head_dim = self.dim // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        # An fp32 copy of a low-precision weight, set where passes may carry an fp32 stream
        # (`Transformer.fp32_stream_up_to`); None elsewhere.
        self.register_buffer("weight_fp32", None, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight_fp32 is not None and x.dtype == torch.float32:
            # An fp32 stream feeds linears that quantise their input anyway: one op, not four.
            return F.rms_norm(x, (x.shape[-1],), self.weight_fp32, self.eps)
        # Normalise in fp32 like the reference implementations, so bf16 matches them closely.
        # F.rms_norm is x * rsqrt(mean(x^2) + eps) bit for bit, in fewer dispatched ops.
        return self.weight * F.rms_norm(x.float(), (x.shape[-1],), None, self.eps).to(x.dtype)


def rope_tables(head_dim: int, max_len: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    ang = torch.outer(torch.arange(max_len, dtype=torch.float64), inv)
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().float(), ang.sin().float()


def signed_sin(sin: torch.Tensor) -> torch.Tensor:
    """`sin` with its first half negated, for `apply_rope`."""
    half = sin.shape[-1] // 2
    return torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, ssin: torch.Tensor,
               dtype: torch.dtype | None = None) -> torch.Tensor:
    """RoPE in HF's "rotate_half" convention: x * cos + rotate_half(x) * sin, where
    rotate_half(x) * sin == x.roll(D/2) * signed_sin(sin) exactly (only a sign moves), in 6 ops
    instead of 10. x: [B, T, H, D]; cos / ssin: [B, T, 1, D]. The result is in `dtype` (default x's)."""
    xf = x.float()
    return (xf * cos + xf.roll(x.shape[-1] // 2, -1) * ssin).to(dtype or x.dtype)


# A pass of at most this many new tokens folds each KV group's query heads into one run of queries
# ([B, H, T, D] -> [B, KV, rep*T, D]) instead of SDPA's enable_gqa. The same dot products, softmaxes
# and sums per query (bit for bit in bf16; in fp32 SDPA's lone-query path sums in another order, 1e-7
# apart), but PyTorch's CPU flash kernel runs a short query run slowly: torch 2.13, 480-token cache,
# SmolLM2 shapes (9 heads, 3 KV), AMD EPYC with AVX512-BF16, us per layer folded / enable_gqa, causal
# mask among the new tokens (2026-12-06):
#   bf16, 1 thread (narrow passes run on one, engine/runtime/pass_threads.py), 4 / 5 / 6 / 8 / 12 / 16 / 32
#   tokens: 79/122, 102/150, 110/159, 130/171, 205/221, 254/270, 477/465;
#   bf16, 2 threads: 57/73, 72/90, 78/94, 93/101, 131/129, 149/158, 271/269; fp32 alike.
# (Earlier, 2 threads, bf16: 1 token 279 -> 63 us, 2: 97 -> 65.) So up to 8 tokens; wide passes keep enable_gqa.
FOLD_GROUPS_MAX_TOKENS = 8


@dataclass(frozen=True)
class PassMask:
    """A pass's attention mask, prepared once for every layer."""

    span: int  # key slots the pass reads (the cache's first `span`, or the T new tokens)
    sdpa: torch.Tensor | None  # [B, 1, T or rep*T, S] for SDPA; None when every query sees every key
    fold: int  # query heads folded per KV head (1: not folded)

    @classmethod
    def build(cls, mask: torch.Tensor, cfg: ModelConfig) -> PassMask:
        b, _, t, s = mask.shape
        rep = cfg.n_heads // cfg.n_kv_heads
        fold = rep if rep > 1 and t <= FOLD_GROUPS_MAX_TOKENS else 1
        if mask.dtype == torch.bool and bool(mask.all()):
            return cls(s, None, fold)  # SDPA without a mask skips the masking work
        if fold > 1:
            mask = mask.unsqueeze(2).expand(b, 1, fold, t, s).reshape(b, 1, fold * t, s)
        return cls(s, mask, fold)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.q_proj = nn.Linear(cfg.dim, cfg.n_heads * hd, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(cfg.n_heads * hd, cfg.dim, bias=False)
        self.q_norm = RMSNorm(hd, cfg.rms_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(hd, cfg.rms_eps) if cfg.qk_norm else None
        # engine/model/quant.py may replace q/k/v by one fused int8 linear (one kernel call, one input cast).
        self.qkv_proj: nn.Module | None = None

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: PassMask,
        layer: int,
        cache: KVCache | None,
        slots: torch.Tensor | None,
    ) -> torch.Tensor:
        b, t, _ = x.shape
        hd, nh, nkv = self.cfg.head_dim, self.cfg.n_heads, self.cfg.n_kv_heads
        # An fp32 stream still attends in the cache's dtype (a training prefix cache has none: x's).
        kv_dtype = getattr(cache, "dtype", x.dtype)
        if self.qkv_proj is not None:
            qkv = self.qkv_proj(x).view(b, t, nh + 2 * nkv, hd)
            q, k, v = qkv.split([nh, nkv, nkv], dim=2)
        else:
            q = self.q_proj(x).view(b, t, nh, hd)
            k = self.k_proj(x).view(b, t, nkv, hd)
            v = self.v_proj(x).view(b, t, nkv, hd)
        if self.q_norm is not None:
            q, k = apply_rope(self.q_norm(q), cos, sin, kv_dtype), apply_rope(self.k_norm(k), cos, sin, kv_dtype)
        elif self.qkv_proj is not None:
            qk = apply_rope(qkv[:, :, : nh + nkv], cos, sin, kv_dtype)  # q and k side by side: one rotation
            q, k = qk[:, :, :nh], qk[:, :, nh:]
        else:
            q, k = apply_rope(q, cos, sin, kv_dtype), apply_rope(k, cos, sin, kv_dtype)
        if v.dtype != kv_dtype:
            v = v.to(kv_dtype)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if cache is not None:
            # Write the new K/V into their slots; `cache.lengths` only moves on commit, so a
            # denoising pass over a block is overwritten by the next one.
            k, v = cache.write(layer, slots, k, v, span=mask.span)
        if mask.fold > 1:
            # query head h reads KV head h // rep, so a group's heads are consecutive
            q = q.reshape(b, nkv, mask.fold * t, hd)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.sdpa).view(b, nh, t, hd)
        else:
            # SDPA's native GQA reads each K/V head for its group of query heads instead of copying
            # the cache `rep` times (repeat_interleave): bit-identical, 2-10x less attention time.
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.sdpa, enable_gqa=nh != nkv)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.dim, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.dim, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.dim, bias=False)
        self.gate_up_proj: nn.Module | None = None  # fused gate+up (engine/model/quant.py), else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate_up_proj is not None:
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
            return self.down_proj(F.silu(gate) * up)
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.dim, cfg.rms_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.dim, cfg.rms_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, mask, layer, cache, slots):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, layer, cache, slots)
        return x + self.mlp(self.post_attention_layernorm(x))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.rms_eps)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        cos, sin = rope_tables(cfg.head_dim, cfg.max_seq_len, cfg.rope_theta)
        # Passes of at most this many tokens (rows x width) carry the residual stream in fp32; 0: none
        # do. engine/model/quant.py sets it for w8a8, whose narrow passes quantise each linear's input.
        self.fp32_stream_up_to = 0
        # Every layer of a w8a8 pass over a KV cache in one C++ call, bit-identical (engine/model/native.py); set by the runner.
        self.native_layers = None
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.weight.dtype

    def hidden(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
        cache: KVCache | None = None,
        slots: torch.Tensor | None = None,
        embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Final hidden states for `tokens` [B, T] at `positions` [B, T].

        `mask` is a boolean [B, 1, T, S] (True = may attend) over the S key slots: the cache's
        slots when `cache` is given (new K/V land in `slots` [B, T]), else the T new tokens.
        """
        x = self.embed_tokens(tokens) if embeds is None else embeds
        fp32_stream = x.shape[0] * x.shape[1] <= self.fp32_stream_up_to
        if fp32_stream:
            x = x.float()
        cos = self.rope_cos[positions].unsqueeze(2)
        sin = signed_sin(self.rope_sin[positions]).unsqueeze(2)
        pass_mask = PassMask.build(mask, self.cfg)
        if self.native_layers is not None and isinstance(cache, KVCache):
            x = self.native_layers.forward(x, cos, sin, pass_mask.sdpa, cache.k, cache.v, cache.write_start(),
                                           slots, pass_mask.span, pass_mask.fold, fp32_stream)
        else:
            for i, layer in enumerate(self.layers):
                x = layer(x, cos, sin, pass_mask, i, cache, slots)
        return self.norm(x)

    def logits(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: KVCache,
               slots: torch.Tensor, read: torch.Tensor) -> torch.Tensor:
        """fp32 logits [N, V] of a pass over a cache (as `hidden`) at its rows `read` [N] (indices into
        its B * T tokens). A narrow pass that the native layers run in one region goes from the token ids
        to the logits in one call (engine/model/native.py)."""
        if self.native_layers is not None and isinstance(cache, KVCache):
            out = self.native_layers.narrow_logits(tokens, positions, mask, cache.k, cache.v, cache.write_start(),
                                                   slots, read, self.fp32_stream_up_to)
            if out is not None:
                return out
        h = self.hidden(tokens, positions, mask, cache, slots)
        if read.numel() == 0:  # a pass that only writes K/V (a row's committed block): the int8 head takes no empty input
            return torch.zeros((0, self.cfg.vocab_size), dtype=torch.float32, device=h.device)
        return self.lm_head(h.reshape(-1, h.shape[-1])[read]).float()

    def forward(self, tokens, positions, mask, cache=None, slots=None, embeds=None) -> torch.Tensor:
        return self.lm_head(self.hidden(tokens, positions, mask, cache, slots, embeds)).float()


def causal_mask(t: int, device=None) -> torch.Tensor:
    return torch.ones(t, t, dtype=torch.bool, device=device).tril()


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def init_random(model: Transformer, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if name.endswith("norm.weight") or "layernorm" in name:
            continue
        with torch.no_grad():
            p.copy_(torch.randn(p.shape, generator=g) * (0.02 if p.dim() > 1 else 0.0))
