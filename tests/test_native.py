"""Native layers (engine/native.py): every layer of a w8a8 pass over a KV cache in one C++ call, with
the same hidden states and the same cache writes, bit for bit, as the Python layers."""

from __future__ import annotations

import pytest
import torch

from engine import native
from engine.kv_cache import KVCache
from engine.model import ModelConfig, Transformer, init_random
from engine.quant import quantize_w8a8


def w8a8_model(n_heads: int = 4, n_kv_heads: int = 2, qkv_bias: bool = False, qk_norm: bool = False) -> Transformer:
    cfg = ModelConfig(vocab_size=96, dim=64, n_layers=3, n_heads=n_heads, n_kv_heads=n_kv_heads,
                      intermediate_size=128, qkv_bias=qkv_bias, qk_norm=qk_norm, max_seq_len=64)
    model = Transformer(cfg)
    init_random(model, seed=5)
    g = torch.Generator().manual_seed(1)
    for name, p in model.named_parameters():  # init_random leaves norms at one and biases at zero: make them count
        if "norm" in name or name.endswith("bias"):
            p.data.add_(torch.randn(p.shape, generator=g) * 0.1)
    model = model.to(torch.bfloat16)
    quantize_w8a8(model)
    return model


def filled_cache(model: Transformer, batch: int, lengths: list[int]) -> KVCache:
    cfg = model.cfg
    cache = KVCache(cfg.n_layers, batch, cfg.n_kv_heads, cfg.head_dim, capacity=48, dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(7)
    cache.k.copy_(torch.randn(cache.k.shape, generator=g))
    cache.v.copy_(torch.randn(cache.v.shape, generator=g))
    for row, n in enumerate(lengths):
        cache.advance(row, n)
    return cache


def pass_over(model: Transformer, cache: KVCache, tokens: torch.Tensor, causal: bool) -> torch.Tensor:
    t = tokens.shape[1]
    intra = torch.ones(t, t, dtype=torch.bool)
    with torch.inference_mode():
        mask, _ = cache.mask(intra.tril() if causal else intra, t)
        slots = cache.slots_for(t)
        return model.hidden(tokens, slots, mask, cache, slots)


@pytest.fixture(scope="module")
def extension():
    ext = native.load_extension()
    # setup.sh builds it; a machine that cannot is a broken setup, not a pass
    assert ext is not None, f"the native extension did not build: {native.build_error()}"
    return ext


@pytest.mark.parametrize("heads", [(4, 2), (4, 4)], ids=["gqa", "mha"])
@pytest.mark.parametrize("qkv_bias", [False, True])
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("causal", [True, False])
def test_native_passes_are_bit_identical_to_the_python_layers(extension, heads, qkv_bias, batch, causal):
    """Narrow passes (an fp32 stream into int8 x int8, query groups folded) and wide ones (the model's
    dtype into the packed de-quantised weights), one row (written by its start) or two (by slots)."""
    model = w8a8_model(*heads, qkv_bias=qkv_bias)
    layers, why = native.native_layers_for(model)
    assert why == "on"
    lengths = [20, 13][:batch]
    up_to = model.fp32_stream_up_to
    for t in sorted({1, up_to // batch, up_to // batch + 1, 12}):
        tokens = torch.randint(0, 96, (batch, t), generator=torch.Generator().manual_seed(t))
        model.native_layers = None
        py_cache = filled_cache(model, batch, lengths)
        h_py = pass_over(model, py_cache, tokens, causal)
        model.native_layers = layers
        nat_cache = filled_cache(model, batch, lengths)
        h_nat = pass_over(model, nat_cache, tokens, causal)
        assert h_nat.dtype == h_py.dtype == (torch.float32 if batch * t <= up_to else torch.bfloat16)
        assert torch.equal(h_nat, h_py), f"t={t}: {float((h_nat - h_py).abs().max())}"
        assert torch.equal(nat_cache.k, py_cache.k) and torch.equal(nat_cache.v, py_cache.v)
        assert not torch.equal(nat_cache.k, filled_cache(model, batch, lengths).k)  # it did write


def test_passes_without_a_cache_run_the_python_layers(extension):
    model = w8a8_model()

    class Refuse:
        def forward(self, *args):
            raise AssertionError("the native layers ran a pass they do not serve")

    model.native_layers = Refuse()
    with torch.inference_mode():  # the trainer's way: no KV cache
        model.hidden(torch.randint(0, 96, (1, 2)), torch.arange(2)[None], torch.ones(1, 1, 2, 2, dtype=torch.bool))
    with pytest.raises(AssertionError, match="do not serve"):  # while a pass over a cache does reach it
        pass_over(model, filled_cache(model, 1, [10]), torch.randint(0, 96, (1, 1)), causal=True)


def test_native_layers_say_why_they_do_not_serve_a_model(monkeypatch, extension):
    qk_norm = w8a8_model(qk_norm=True)
    assert native.native_layers_for(qk_norm) == (None, "needs fused w8a8 q/k/v and gate/up and no q/k norm")
    fp32 = Transformer(w8a8_model().cfg)
    quantize_w8a8(fp32)  # an fp32 model carries no fp32 stream to hand over
    assert native.native_layers_for(fp32) == (None, "not a w8a8 model with an fp32 stream")
    monkeypatch.setenv(native.NATIVE_ENV, "0")
    assert native.native_layers_for(w8a8_model()) == (None, f"off ({native.NATIVE_ENV}=0)")


def test_the_default_engine_runs_native_layers_where_it_is_w8a8(extension):
    from engine import Engine

    eng = Engine.load("default", precision="w8a8")
    assert eng.runner.info["native_layers"] == "on"
    native_layers = eng.model.native_layers
    assert native_layers is not None
    chooser = eng.runner.narrow_threads
    with eng.runner.python_layers():  # the bench's same-run comparison, timed apart from the native passes
        assert eng.model.native_layers is None
        assert eng.runner.narrow_threads is not chooser and eng.runner.narrow_threads.mode == chooser.mode
    assert eng.model.native_layers is native_layers and eng.runner.narrow_threads is chooser
    bf16 = Engine.load("default", precision="bf16")
    assert "native_layers" not in bf16.runner.info and bf16.model.native_layers is None
