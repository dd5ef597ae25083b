"""Native layers (engine/model/native.py): every layer of a w8a8 pass over a KV cache in one C++ call. Through
ATen's ops they give the same hidden states and cache writes, bit for bit, as the Python layers; through
the hand loops of a narrow pass (engine/csrc/narrow_kernels.cpp) the same up to fp32 rounding."""

from __future__ import annotations

import pytest
import torch

from engine.model import native
from engine.model.kv_cache import KVCache
from engine.model.quant import W8A8_DENSE_ABOVE_ROWS, quantize_w8a8
from engine.model.transformer import ModelConfig, Transformer, init_random
from engine.runtime.native_layers import native_layers_for


def w8a8_model(n_heads: int = 4, n_kv_heads: int = 2, qkv_bias: bool = False, qk_norm: bool = False,
               head_dim: int = 16, dtype: torch.dtype = torch.bfloat16) -> Transformer:
    """bf16 as on a native-bf16 CPU, or fp32 as `auto` builds it elsewhere. Narrow passes go up to
    W8A8_DENSE_ABOVE_ROWS tokens whatever this CPU's own cutoff, so every CPU tests the same passes."""
    model = bf16_model(n_heads, n_kv_heads, qkv_bias, qk_norm, head_dim).to(dtype)
    quantize_w8a8(model, dense_above=W8A8_DENSE_ABOVE_ROWS)
    return model


def bf16_model(n_heads: int, n_kv_heads: int, qkv_bias: bool, qk_norm: bool, head_dim: int) -> Transformer:
    """A tiny random model in bf16 (the same weights for the same arguments)."""
    cfg = ModelConfig(vocab_size=96, dim=head_dim * n_heads, n_layers=3, n_heads=n_heads, n_kv_heads=n_kv_heads,
                      intermediate_size=128, qkv_bias=qkv_bias, qk_norm=qk_norm, max_seq_len=64)
    model = Transformer(cfg)
    init_random(model, seed=5)
    g = torch.Generator().manual_seed(1)
    for name, p in model.named_parameters():  # init_random leaves norms at one and biases at zero: make them count
        if "norm" in name or name.endswith("bias"):
            p.data.add_(torch.randn(p.shape, generator=g) * 0.1)
    return model.to(torch.bfloat16)


def filled_cache(model: Transformer, batch: int, lengths: list[int], dtype: torch.dtype | None = None) -> KVCache:
    cfg = model.cfg
    cache = KVCache(cfg.n_layers, batch, cfg.n_kv_heads, cfg.head_dim, capacity=48, dtype=dtype or model.dtype)
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


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("heads", [(4, 2), (4, 4)], ids=["gqa", "mha"])
@pytest.mark.parametrize("qkv_bias", [False, True])
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("causal", [True, False])
def test_native_passes_are_bit_identical_to_the_python_layers(extension, heads, qkv_bias, batch, causal, dtype):
    """Narrow passes through ATen's ops (an fp32 stream into int8 x int8, query groups folded) and wide
    ones (the model's dtype into the packed de-quantised weights), one row (written by its start) or two
    (by slots); a bf16 model (native-bf16 CPUs) and an fp32 one (`auto` on AVX2)."""
    model = w8a8_model(*heads, qkv_bias=qkv_bias, dtype=dtype)
    layers, why = native_layers_for(model)
    assert why == "on"
    layers.fused_narrow = False
    lengths = [20, 13][:batch]
    up_to = model.fp32_stream_up_to
    for t in sorted({1, up_to // batch, up_to // batch + 1, 12}):
        tokens = torch.randint(0, 96, (batch, t), generator=torch.Generator().manual_seed(t))
        model.native_layers = None
        py_cache = filled_cache(model, batch, lengths, dtype)
        h_py = pass_over(model, py_cache, tokens, causal)
        model.native_layers = layers
        nat_cache = filled_cache(model, batch, lengths, dtype)
        h_nat = pass_over(model, nat_cache, tokens, causal)
        assert h_nat.dtype == h_py.dtype == (torch.float32 if batch * t <= up_to else dtype)
        assert torch.equal(h_nat, h_py), f"t={t}: {float((h_nat - h_py).abs().max())}"
        assert torch.equal(nat_cache.k, py_cache.k) and torch.equal(nat_cache.v, py_cache.v)
        assert not torch.equal(nat_cache.k, filled_cache(model, batch, lengths, dtype).k)  # it did write


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
    assert native_layers_for(qk_norm) == (None, "needs fused w8a8 q/k/v and gate/up and no q/k norm")
    unmarked = w8a8_model()
    unmarked.fp32_stream_up_to = 0  # no narrow passes marked: nothing for the int8 kernels
    assert native_layers_for(unmarked) == (None, "not a w8a8 model with an fp32 stream")
    monkeypatch.setenv(native.NATIVE_ENV, "0")
    assert native_layers_for(w8a8_model()) == (None, f"off ({native.NATIVE_ENV}=0)")


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


FUSED_SHAPES = (((4, 2), 64), ((3, 1), 64), ((2, 2), 128))  # GQA, one KV head, MHA; head sizes 64 and 128


def fused_cases():
    """(model, its unquantised fp32 twin, batch, tokens), 1 and 2 rows, every narrow width."""
    for heads, head_dim in FUSED_SHAPES:
        model = w8a8_model(*heads, qkv_bias=True, head_dim=head_dim)
        twin = bf16_model(*heads, qkv_bias=True, qk_norm=False, head_dim=head_dim).float()
        for batch in (1, 2):
            for t in range(1, model.fp32_stream_up_to // batch + 1):
                yield model, twin, batch, torch.randint(0, 96, (batch, t), generator=torch.Generator().manual_seed(t))


def test_fused_narrow_passes_match_the_python_layers_up_to_fp32_rounding(extension):
    """With an fp32 cache both attend in fp32, so only the order of the sums differs (RMSNorm, attention,
    exp): ~1e-6. The int8 activations are quantised per pass to 7 bits, so in a rare case such a last-bit
    difference moves one activation across a rounding step and the pass differs by that step; a wrong
    mask, slot or scale would move every case far more."""
    diffs, writes = [], []
    for model, _, batch, tokens in fused_cases():
        layers, why = native_layers_for(model)
        assert why == "on" and layers.fused_narrow
        model.native_layers = None
        py_cache = filled_cache(model, batch, [20, 13][:batch], torch.float32)
        h_py = pass_over(model, py_cache, tokens, causal=True)
        model.native_layers = layers
        nat_cache = filled_cache(model, batch, [20, 13][:batch], torch.float32)
        h_nat = pass_over(model, nat_cache, tokens, causal=True)
        assert h_nat.dtype == torch.float32
        diffs.append(float((h_nat - h_py).abs().max() / h_py.abs().max()))
        writes.append(float(max((nat_cache.k - py_cache.k).abs().max(), (nat_cache.v - py_cache.v).abs().max())))
        untouched = filled_cache(model, batch, [20, 13][:batch], torch.float32)
        for row, n in enumerate([20, 13][:batch]):  # only the pass's own slots were written
            t = tokens.shape[1]
            for cache_k, ref_k in ((nat_cache.k, untouched.k), (nat_cache.v, untouched.v)):
                assert torch.equal(cache_k[:, row, :, :n], ref_k[:, row, :, :n])
                assert torch.equal(cache_k[:, row, :, n + t:], ref_k[:, row, :, n + t:])
                assert not torch.equal(cache_k[:, row, :, n:n + t], ref_k[:, row, :, n:n + t])
    close = [d for d in diffs if d <= 1e-5]
    assert len(close) >= 0.8 * len(diffs), diffs
    assert max(diffs) < 0.05, diffs  # a rounding step, not a wrong attention
    assert sorted(writes)[len(writes) // 2] <= 1e-6, writes


def test_fused_narrow_passes_on_a_bf16_cache_are_as_close_to_the_unquantised_model(extension):
    """On the bf16 cache that engines use, both round their softmax weights to bf16 but sum in another
    order, and the 7-bit activations turn last-bit differences into rounding steps: the hand loops stay
    as close as the Python layers to the same weights unquantised, in fp32."""
    err_nat, err_py = [], []
    for model, twin, batch, tokens in fused_cases():
        layers, _ = native_layers_for(model)
        model.native_layers = None
        h_py = pass_over(model, filled_cache(model, batch, [20, 13][:batch]), tokens, causal=True)
        model.native_layers = layers
        h_nat = pass_over(model, filled_cache(model, batch, [20, 13][:batch]), tokens, causal=True)
        ref_cache = filled_cache(model, batch, [20, 13][:batch], torch.float32)
        bf16_cache = filled_cache(model, batch, [20, 13][:batch])
        ref_cache.k.copy_(bf16_cache.k)  # the same cached values, in fp32
        ref_cache.v.copy_(bf16_cache.v)
        h_ref = pass_over(twin, ref_cache, tokens, causal=True)
        err_nat.append(float((h_nat - h_ref).abs().max()))
        err_py.append(float((h_py - h_ref).abs().max()))
    assert sum(err_nat) <= 1.2 * sum(err_py), (err_nat, err_py)
    assert max(e / p for e, p in zip(err_nat, err_py, strict=True)) < 2.0, (err_nat, err_py)



def test_one_region_passes_equal_a_parallel_op_per_linear(extension):
    """Passes of up to 4 rows on several threads run every layer in one OpenMP region whose threads meet at
    spin barriers (engine/csrc/narrow_pass.cpp). Up to Int8Matrix.alone_rows rows a parallel op per linear
    runs the same kernels on the same rows, so the same bits; above, its linears are FBGEMM's, whose
    results are within an ulp or two of the int8 kernel's (tests/engine/unit/test_int8_gemv.py)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    alone = extension.Int8Matrix.alone_rows
    try:
        for heads, head_dim in FUSED_SHAPES:
            model = w8a8_model(*heads, qkv_bias=True, head_dim=head_dim)
            layers, _ = native_layers_for(model)
            model.native_layers = layers
            assert layers.one_region  # every linear has an Int8Matrix
            # 20 / 13 cached: the span splits into two parts; 3 / 9: a span of one 16-key block, the first part empty
            for lengths in ([20, 13], [3, 9]):
                for batch, t in ((1, 1), (1, 2), (2, 1), (1, 4), (2, 2)):
                    tokens = torch.randint(0, 96, (batch, t), generator=torch.Generator().manual_seed(t))
                    results = []
                    for one_region in (True, False):
                        layers.one_region = one_region
                        cache = filled_cache(model, batch, lengths[:batch])
                        results.append((pass_over(model, cache, tokens, causal=True), cache))
                    (h_one, c_one), (h_ops, c_ops) = results
                    case = (heads, lengths, batch, t)
                    if batch * t <= alone:
                        assert torch.equal(h_one, h_ops), case
                        assert torch.equal(c_one.k, c_ops.k) and torch.equal(c_one.v, c_ops.v), case
                    else:
                        torch.testing.assert_close(h_one, h_ops, rtol=0, atol=1e-2 * float(h_ops.abs().max()))
                        for a, b in ((c_one.k, c_ops.k), (c_one.v, c_ops.v)):  # bf16: at most a last-bit step
                            torch.testing.assert_close(a.float(), b.float(), rtol=1e-2, atol=1e-2)
    finally:
        layers.one_region = True
        torch.set_num_threads(threads)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_one_region_passes_go_from_token_ids_to_logits(extension, dtype):
    """A pass that runs in one region takes its embedding rows, RoPE rows and mask in C++ and reads its logits
    there too (engine/csrc/narrow_pass.cpp's Head): the same int8 LM head on the same rows as the Python
    norm and lm_head after the layers, up to the final RMSNorm's sum order (a last-bit difference the
    7-bit activations may turn into a rounding step)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        diffs = []
        for heads, head_dim in FUSED_SHAPES:
            model = w8a8_model(*heads, qkv_bias=True, head_dim=head_dim, dtype=dtype)
            model.native_layers, _ = native_layers_for(model)
            for batch, t, read in ((1, 1, [0]), (1, 3, [1, 2]), (1, 4, [3, 0, 2, 1]), (2, 2, [0, 3])):
                tokens = torch.randint(0, 96, (batch, t), generator=torch.Generator().manual_seed(t))
                rows = torch.tensor(read)
                cache = filled_cache(model, batch, [20, 13][:batch], dtype)
                h = pass_over(model, cache, tokens, causal=True)
                want = model.lm_head(h.reshape(-1, h.shape[-1])[rows]).float()
                cache = filled_cache(model, batch, [20, 13][:batch], dtype)
                got = logits_over(model, cache, tokens, rows)
                assert got.shape == want.shape == (len(read), 96) and got.dtype == torch.float32
                diffs.append(float((got - want).abs().max() / want.abs().max()))
                assert region_took_the_head(model, batch, tokens, rows)
        assert sorted(diffs)[len(diffs) // 2] <= 1e-5, diffs
        assert max(diffs) < 0.05, diffs
    finally:
        torch.set_num_threads(threads)


def test_passes_outside_one_region_leave_the_head_to_python(extension):
    """One thread, or more rows than one region takes: the native layers hand back hidden states, and the
    logits are the Python norm and lm_head's, bit for bit."""
    model = w8a8_model(4, 2, qkv_bias=True, head_dim=64)
    model.native_layers, _ = native_layers_for(model)
    threads = torch.get_num_threads()
    try:
        for n_threads, t in ((1, 2), (2, 6)):
            torch.set_num_threads(n_threads)
            tokens = torch.randint(0, 96, (1, t), generator=torch.Generator().manual_seed(t))
            rows = torch.arange(t)
            assert not region_took_the_head(model, 1, tokens, rows)
            h = pass_over(model, filled_cache(model, 1, [20]), tokens, causal=True)
            got = logits_over(model, filled_cache(model, 1, [20]), tokens, rows)
            assert torch.equal(got, model.lm_head(h[0]).float())
        torch.set_num_threads(2)
        with pytest.raises(RuntimeError, match="read row 5 is outside the pass"):
            logits_over(model, filled_cache(model, 1, [20]), torch.zeros(1, 2, dtype=torch.long), torch.tensor([0, 5]))
        with pytest.raises(RuntimeError, match="token 96 is outside the vocabulary"):
            logits_over(model, filled_cache(model, 1, [20]), torch.tensor([[3, 96]]), torch.tensor([1]))
    finally:
        torch.set_num_threads(threads)


def logits_over(model: Transformer, cache: KVCache, tokens: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    t = tokens.shape[1]
    with torch.inference_mode():
        mask, _ = cache.mask(torch.ones(t, t, dtype=torch.bool).tril(), t)
        slots = cache.slots_for(t)
        return model.logits(tokens, slots, mask, cache, slots, rows)


def region_took_the_head(model: Transformer, batch: int, tokens: torch.Tensor, rows: torch.Tensor) -> bool:
    """Whether the native layers went from the token ids to the logits for this pass."""
    seen = []
    layers = model.native_layers

    class Spy:
        def narrow_logits(self, *args):
            out = layers.narrow_logits(*args)
            seen.append(out is not None)
            return out

        def forward(self, *args):
            return layers.forward(*args)

    model.native_layers = Spy()
    try:
        logits_over(model, filled_cache(model, batch, [20, 13][:batch]), tokens, rows)
    finally:
        model.native_layers = layers
    return seen == [True]


def test_a_lock_left_by_a_killed_build_does_not_hang_the_next_load(extension):
    """torch's build waits without end while its lock file exists; a build killed mid-way leaves one. A lock
    older than any build is removed (with a warning), and the load goes on; a fresh one is left alone."""
    import os
    import subprocess
    import sys
    import time

    lock = native.native_dir() / "lock"
    assert not lock.exists()
    lock.touch()
    old = time.time() - native.STALE_LOCK_S - 60
    os.utime(lock, (old, old))
    try:
        done = subprocess.run([sys.executable, "-c", "from engine.model import native; assert native.load_extension()"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "left" in done.stderr and "did not finish" in done.stderr
        assert not lock.exists()
        lock.touch()  # a build under way: waited for, not removed
        waiting = subprocess.Popen([sys.executable, "-c", "from engine.model import native; assert native.load_extension()"],
                                   stderr=subprocess.PIPE, text=True)
        time.sleep(3)
        assert waiting.poll() is None and lock.exists()
        lock.unlink()
        assert waiting.wait(timeout=120) == 0
    finally:
        lock.unlink(missing_ok=True)
