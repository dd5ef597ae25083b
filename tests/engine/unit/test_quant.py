"""Weight-only int8 (engine/model/quant.py): what it replaces, what it reads, and how far it is from fp32
(engine.model.quant.INT8_TOLERANCE); the roofline bench's JSON keys; the engine's import boundary."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from engine import Engine, cpu_isa
from engine.model import quant
from engine.model.quant import INT8_TOLERANCE, Int8Linear, W8A8Linear, linear_bytes, quantize_int8
from tests.tiny_models import causal_logits, save_tiny

CALL = [
    {"role": "system", "content": "You are a receptionist at a dental clinic."},
    {"role": "user", "content": "Hi, I need a cleaning next week."},
]


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("tiny") / "llama", "llama", seed=1)



def test_int8_replaces_every_linear_and_the_lm_head(tiny_folder, monkeypatch):
    monkeypatch.setenv("VOICE_AGENT_FP32_LINEARS", "dense")  # plain nn.Linear, to count them
    fp = Engine.load(tiny_folder, precision="fp32")
    q = Engine.load(tiny_folder, precision="int8")
    n_linear = sum(isinstance(m, torch.nn.Linear) for m in fp.model.modules())
    assert q.info["precision"] == "int8" and q.info["int8_linears"] == n_linear == 7 * 2 + 1
    assert not any(isinstance(m, torch.nn.Linear) for m in q.model.modules())
    assert isinstance(q.model.lm_head, Int8Linear) and q.model.lm_head.weight.dtype == torch.int8
    # int8 weights plus one scale per output channel: about a quarter of fp32's bytes
    assert linear_bytes(q.model) < 0.27 * linear_bytes(fp.model)


def test_int8_logits_within_tolerance_of_fp32_on_tiny_weights(tiny_folder):
    fp = Engine.load(tiny_folder, precision="fp32", family="smollm2-dllm", block_size=4)
    q = Engine.load(tiny_folder, precision="int8", family="smollm2-dllm", block_size=4)
    tokens = fp.prepare(CALL, reasoning_effort="instant").tokens
    f, b = causal_logits(fp, tokens), causal_logits(q, tokens)
    rel = float((f - b).abs().max() / (f.max() - f.min()))
    assert rel <= INT8_TOLERANCE.max_rel_logit_diff  # measured 0.02-0.03
    # and the engine decodes with it, a session's second turn included
    sess = q.session()
    r = q.chat(CALL, reasoning_effort="instant", max_tokens=8, session=sess)
    r2 = q.chat([*CALL, r.message(), {"role": "user", "content": "Tuesday."}], reasoning_effort="instant",
                max_tokens=8, session=sess)
    assert r2.metrics["completion_tokens"] > 0 and r2.finish_reason in ("stop", "length")


def test_int8_linear_matches_its_dequantised_weight_at_every_width():
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 96, bias=True).requires_grad_(False)
    q = Int8Linear(lin.weight, lin.bias, torch.float32, dense_above=4)
    w = q.dequantized().float()
    assert float((w - lin.weight).abs().max()) <= float(lin.weight.abs().max()) / 254 + 1e-7
    for rows in (1, 3, 4, 5, 32):  # <= 4 rows: the int8 kernel; wider: the dense fallback
        x = torch.randn(rows, 64)
        ref = x @ w.T + lin.bias
        got = q(x)
        assert got.shape == (rows, 96) and got.dtype == torch.float32
        assert float((got - ref).abs().max()) < 0.05 * float(ref.abs().max())
    assert q(torch.randn(64)).shape == (96,)  # a 1-D input (the LM head at one position)



@pytest.mark.parametrize(("flags", "rows"), [(["avx512_bf16"], 3), ([], 8)])
def test_int8_passes_go_packed_above_the_rows_this_cpu_multiplies_faster_in_int8(monkeypatch, flags, rows):
    """The packed copy is bf16 where the CPU multiplies bf16 natively, fp32 elsewhere (twice the
    bytes), so the int8 kernel keeps more rows there (engine/model/quant.py, measured per CPU)."""
    monkeypatch.setattr(quant, "native_bf16_flags", lambda: flags)
    assert quant.int8_dense_above() == rows
    model = torch.nn.Sequential(torch.nn.Linear(8, 8))
    quantize_int8(model, torch.float32, fuse=False)
    assert model[0].dense_above == rows

@pytest.mark.parametrize("packs_bf16", [True, False], ids=["bf16-packs", "bf16-cannot-pack"])
@pytest.mark.parametrize("act", [torch.float32, torch.bfloat16])
def test_int8_linear_wide_passes_use_the_packed_dequantised_weight(monkeypatch, act, packs_bf16):
    """Above `dense_above` rows the int8 kernel's cost grows per row, so a CPU Int8Linear keeps its
    de-quantised weight packed for oneDNN: that path must equal a plain matmul by that weight. oneDNN
    cannot pack bf16 without AVX512BW (an AVX2-only CPU): there a bf16 copy stays a plain tensor."""
    if packs_bf16 and act == torch.bfloat16 and not cpu_isa.packs_bf16():
        pytest.skip(f"oneDNN cannot pack bf16 on this CPU (flags: {cpu_isa.describe()})")
    if not packs_bf16:
        monkeypatch.setattr(cpu_isa, "packs_bf16", lambda: False)
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 96, bias=True).requires_grad_(False)
    q = Int8Linear(lin.weight, lin.bias, act, dense_above=3)
    packed = act == torch.float32 or packs_bf16
    assert (q._packed is not None) == packed and (q.dense_weight is None) == packed  # one wide copy
    w = q.dequantized(act)
    x = torch.randn(8, 64).to(act)
    ref = (x.float() @ w.float().T + lin.bias).to(act)
    got = q(x)
    assert got.dtype == act and got.shape == (8, 96)
    tol = 1e-5 if act == torch.float32 else 0.02 * float(ref.float().abs().max())
    assert float((got.float() - ref.float()).abs().max()) <= tol
    narrow = q(x[:3])  # the int8 kernel: the same weights, rounded differently
    assert float((narrow.float() - ref[:3].float()).abs().max()) < 0.05 * float(ref.float().abs().max())


def test_w8a8_replaces_every_linear_and_decodes_a_session(tiny_folder):
    fp = Engine.load(tiny_folder, precision="fp32")
    q = Engine.load(tiny_folder, precision="w8a8", family="smollm2-dllm", block_size=4)
    assert q.info["precision"] == "w8a8" and q.info["int8_linears"] == 7 * 2 + 1
    assert not any(isinstance(m, torch.nn.Linear) for m in q.model.modules())
    assert isinstance(q.model.lm_head, W8A8Linear)
    assert linear_bytes(q.model) < 0.27 * linear_bytes(fp.model)  # what a narrow pass reads
    sess = q.session()
    r = q.chat(CALL, reasoning_effort="instant", max_tokens=8, session=sess)
    r2 = q.chat([*CALL, r.message(), {"role": "user", "content": "Tuesday."}], reasoning_effort="instant",
                max_tokens=8, session=sess)
    assert r2.metrics["completion_tokens"] > 0 and r2.metrics["cached_tokens"] > 0


@pytest.mark.parametrize("packs_bf16", [True, False], ids=["bf16-packs", "bf16-cannot-pack"])
@pytest.mark.parametrize("dense_dtype", [torch.float32, torch.bfloat16])
def test_w8a8_quantises_narrow_inputs_and_multiplies_wide_ones_by_the_dense_weight(monkeypatch, dense_dtype,
                                                                                 packs_bf16):
    if packs_bf16 and dense_dtype == torch.bfloat16 and not cpu_isa.packs_bf16():
        pytest.skip(f"oneDNN cannot pack bf16 on this CPU (flags: {cpu_isa.describe()})")
    if not packs_bf16:
        monkeypatch.setattr(cpu_isa, "packs_bf16", lambda: False)
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 96, bias=True).requires_grad_(False)
    q = W8A8Linear(lin.weight, lin.bias, dense_above=4, dense_dtype=dense_dtype)
    packed = dense_dtype == torch.float32 or packs_bf16
    assert (q._dense_packed is not None) == packed and (q.dense_weight is None) == packed
    w = q.dequantized()
    assert float((w - lin.weight).abs().max()) <= float(lin.weight.abs().max()) / 254 + 1e-7
    for rows in (1, 3, 4):  # the int8 x int8 kernel: the input is rounded to 7 bits per call
        x = torch.randn(rows, 64)
        ref = x @ w.T + lin.bias
        err = float((q(x) - ref).abs().max())
        assert 0 < err < 0.05 * float(ref.abs().max())
    for rows in (5, 32):  # a prefill: the de-quantised weight, unrounded inputs (bf16: rounded to 8 bits)
        x = torch.randn(rows, 64)
        ref = x @ w.T + lin.bias
        tol = 1e-5 if dense_dtype == torch.float32 else 0.02 * float(ref.abs().max())
        assert float((q(x) - ref).abs().max()) <= tol
        assert q(x).dtype == torch.float32
    assert q(torch.randn(64)).shape == (96,)


def test_quantize_int8_unties_the_lm_head_from_the_embedding():
    from engine.model.transformer import ModelConfig, Transformer, init_random

    m = Transformer(ModelConfig(vocab_size=100, dim=32, n_layers=1, n_heads=4, n_kv_heads=2,
                                intermediate_size=64, tie_embeddings=True, max_seq_len=64))
    init_random(m)
    emb = m.embed_tokens.weight.detach().clone()
    assert quantize_int8(m) == 8
    assert torch.equal(m.embed_tokens.weight, emb) and m.embed_tokens.weight.dtype == torch.float32


def test_int8_agrees_with_fp32_on_real_weights(base_engine_fp32):
    """The AR base at int8 vs fp32 on a prompt and fp32's own greedy reply (measured: largest
    difference ~1.6 logits; argmax agreement 0.93-0.98 over all positions)."""
    q = Engine.load("smollm2-base", precision="int8", threads=torch.get_num_threads())
    fp = base_engine_fp32
    for user in ["Hi, I need a cleaning next week.", "What are your opening hours?"]:
        msgs = [CALL[0], {"role": "user", "content": user}]
        tokens = fp.prepare(msgs, reasoning_effort="instant").tokens
        r = fp.chat(msgs, reasoning_effort="instant", max_tokens=24)
        reply = fp.tokenizer.encode(r.raw_text or r.text, add_special_tokens=False).ids[:24]
        f, b = causal_logits(fp, tokens + reply), causal_logits(q, tokens + reply)
        assert float((f - b).abs().max()) <= INT8_TOLERANCE.max_abs_logit_diff
        assert float((f.argmax(-1) == b.argmax(-1)).float().mean()) >= INT8_TOLERANCE.min_top1_agreement


def test_bench_json_keeps_its_keys_and_adds_the_roofline(tiny_folder, capsys):
    from engine.tools.bench import main

    main(["--model", str(tiny_folder), "--prompts", "1", "--max-tokens", "4", "--efforts", "instant",
          "--no-hf", "--no-llamacpp", "--precision", "fp32", "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("model", "dtype", "threads", "decode_tok_s", "ar_decode_tok_s", "speedup_vs_ar", "tokens_per_forward",
                "ttfat_ms_p50", "ttfat_ms_p95", "prefill_ms", "base_ar_decode_tok_s", "hf_generate_tok_s", "by_effort",
                "precision", "bandwidth_gbps", "weight_bytes_per_pass", "floor_ms_per_pass", "ms_per_pass",
                "llamacpp_decode_tok_s", "llamacpp_q8_0_decode_tok_s"):
        assert key in out, key
    assert out["precision"] == "fp32" and out["bandwidth_gbps"] > 0
    assert set(out["ms_per_pass"]) == set(out["ms_per_pass_min"]) == {"1", "2", "4", "8", "16", "32"}
    assert all(out["ms_per_pass_min"][t] <= out["ms_per_pass"][t] for t in out["ms_per_pass"])
    assert out["ms_per_pass_python_layers"] is None  # fp32: no native layers to compare with
    assert out["floor_ms_per_pass"] == pytest.approx(out["weight_bytes_per_pass"] / out["bandwidth_gbps"] / 1e6, rel=0.02)
    assert out["llamacpp_decode_tok_s"] is None and out["llamacpp_q8_0_decode_tok_s"] is None  # skipped: null
    row = out["by_effort"]["instant"]
    assert row["whole_block_ttfat_ms_p50"] is None or row["whole_block_ttfat_ms_p50"] > 0
    # the fixed baseline: AR on the same weights in bf16, and diffusion's speedup over it
    assert out["bf16_ar_decode_tok_s"] > 0
    assert row["speedup_vs_bf16_ar"] == pytest.approx(row["decode_tok_s"] / out["bf16_ar_decode_tok_s"], rel=0.01)


def test_the_engine_never_imports_voice_agent():
    code = ("import sys, engine; assert not any(m.startswith('voice_agent') for m in sys.modules); "
            "assert 'torch' not in sys.modules; import engine.serve.tool_args; assert 'torch' not in sys.modules; "
            "import engine.serve.server, engine.tools.loadtest, engine.tools.soak, engine.tools.bench; "
            "assert not any(m.startswith('voice_agent') for m in sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_tool_flags_match_the_engine_tables():
    from engine.model.precision import PRECISIONS
    from engine.runtime.effort import EFFORTS
    from engine.serve.tool_args import EFFORT_CHOICES, PRECISION_CHOICES

    assert EFFORT_CHOICES == list(EFFORTS)
    assert set(PRECISIONS) <= set(PRECISION_CHOICES)


@pytest.mark.parametrize("qk_norm", [False, True])
def test_w8a8_narrow_passes_carry_an_fp32_stream_and_keep_the_bf16_cache(qk_norm):
    """A bf16 model under w8a8 runs passes of at most `fp32_stream_up_to` tokens with an fp32
    residual stream (engine/model/quant.py `fp32_stream`): the linears quantise their inputs from fp32
    anyway. The cache and attention stay bf16; the logits stay within int8's tolerance of the same
    pass in bf16; wider passes are untouched; an fp32 model only has its narrow passes marked."""
    from engine.model.kv_cache import KVCache
    from engine.model.quant import quantize_w8a8, w8a8_dense_above
    from engine.model.transformer import ModelConfig, Transformer, init_random

    cfg = ModelConfig(vocab_size=96, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, intermediate_size=128,
                      qk_norm=qk_norm, max_seq_len=64)
    model = Transformer(cfg)
    init_random(model, seed=3)
    fp32_model = Transformer(cfg)
    fp32_model.load_state_dict(model.state_dict())
    quantize_w8a8(fp32_model)
    # an fp32 model's narrow passes are marked too (for the native layers: `auto` on an AVX2 CPU), and
    # the mark changes its arithmetic by rounding at most (the norm's weight inside F.rms_norm)
    assert fp32_model.fp32_stream_up_to == w8a8_dense_above() > 0
    probe = torch.randint(0, 96, (1, 3), generator=torch.Generator().manual_seed(1))
    full = torch.ones(1, 1, 3, 3, dtype=torch.bool).tril()
    with torch.inference_mode():
        marked = fp32_model.hidden(probe, torch.arange(3)[None], full)
        fp32_model.fp32_stream_up_to = 0
        unmarked = fp32_model.hidden(probe, torch.arange(3)[None], full)
    assert marked.dtype == unmarked.dtype == torch.float32
    torch.testing.assert_close(marked, unmarked, rtol=1e-4, atol=1e-4 * float(unmarked.abs().max()))

    model = model.to(torch.bfloat16)
    quantize_w8a8(model)
    assert model.fp32_stream_up_to == w8a8_dense_above() > 0
    torch.manual_seed(0)
    tokens = torch.randint(0, 96, (1, 20))

    def pass_over(t: int, stream: int) -> tuple[torch.Tensor, KVCache]:
        model.fp32_stream_up_to = stream
        cache = KVCache(cfg.n_layers, 1, cfg.n_kv_heads, cfg.head_dim, capacity=32, dtype=torch.bfloat16)
        with torch.inference_mode():
            mask, _ = cache.mask(torch.ones(8, 8, dtype=torch.bool).tril(), 8)
            slots = cache.slots_for(8)
            model.hidden(tokens[:, :8], slots, mask, cache, slots)
            cache.commit(8)
            mask, _ = cache.mask(torch.ones(t, t, dtype=torch.bool).tril(), t)
            slots = cache.slots_for(t)
            h = model.hidden(tokens[:, 8:8 + t], slots, mask, cache, slots)
        return h, cache

    up_to = w8a8_dense_above()
    t = min(3, up_to)
    h32, cache32 = pass_over(t, up_to)
    h16, cache16 = pass_over(t, 0)
    assert h32.dtype == torch.float32 and h16.dtype == torch.bfloat16
    assert cache32.k.dtype == torch.bfloat16
    with torch.inference_mode():
        l32, l16 = model.lm_head(h32).float(), model.lm_head(h16).float()
    span = float(l16.max() - l16.min())
    assert not torch.equal(l32, l16)  # the stream did change the arithmetic
    assert float((l32 - l16).abs().max()) <= INT8_TOLERANCE.max_rel_logit_diff * span
    # the new tokens' K/V went into the bf16 cache at the same slots, close to the bf16 pass's
    k32, k16 = cache32.k[:, :, :, 8:8 + t].float(), cache16.k[:, :, :, 8:8 + t].float()
    assert float(k32.abs().sum()) > 0 and float((k32 - k16).abs().max()) <= 0.1 * float(k16.abs().max())
    wide, _ = pass_over(up_to + 1, up_to)  # one token wider than the stream's limit: bf16 as before
    assert wide.dtype == torch.bfloat16
