"""Real dLLM checkpoints decode as their references do: golden fixtures made from each family's
reference code (tests/fixtures/make_dllm_fixtures.py), checked without that code or a network.

Each fixture is a tiny random checkpoint in the family's native format (config keys, weight names,
tokenizer and chat template); expected.json holds the reference's rendered prompt, its logits at a
few prompt positions and the greedy token ids of its sampler, for a prompt whose length is a
multiple of the block size ("aligned") and one whose length is not ("unaligned").
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine import Engine
from engine.model.loading import CheckpointKeyError, config_from_hf, load_hf_folder
from engine.runtime.decode import prefill_mask

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "dllm"
LOGIT_TOL = 1e-4
MIN_TOKENS = 32


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # The fixtures are tiny: one thread is fastest, and more only contend on a shared box.
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _expected(family: str) -> dict:
    return json.loads((FIXTURES / family / "expected.json").read_text())


def _case(family: str, name: str) -> dict:
    return next(c for c in _expected(family)["cases"] if c["name"] == name)


def _engine(family: str) -> Engine:
    return Engine.load(FIXTURES / family / "ckpt", precision="fp32", decoding="reference")


def _max_new(family: str) -> int:
    s = _expected(family)["settings"]
    return int(s.get("gen_length") or s.get("max_new_tokens"))


def check_logits(family: str, name: str) -> float:
    """The engine's prefill pass over the prompt (its own attention layout for the family) gives
    the reference's logits."""
    case = _case(family, name)
    ckpt = load_hf_folder(FIXTURES / family / "ckpt", dtype=torch.float32)
    ids = case["prompt_ids"]
    n = len(ids)
    fam = ckpt.family
    mask = prefill_mask(n, fam.cache_attention, fam.block_size, 0)
    with torch.no_grad():
        logits = ckpt.model(torch.tensor([ids]), torch.arange(n)[None], mask[None, None])[0]
    diff = max(float((logits[int(p)] - torch.tensor(row)).abs().max()) for p, row in case["logits"].items())
    assert diff <= LOGIT_TOL, f"{family} {name}: logits differ from the reference by {diff}"
    return diff


def check_greedy(family: str, name: str) -> int:
    """The rendered prompt is the reference's, and reference decoding gives its tokens."""
    case = _case(family, name)
    eng = _engine(family)
    text = eng.chat_format.render(case["messages"])
    assert text == case["prompt_text"]
    assert eng.tokenizer.encode(text, add_special_tokens=False).ids == case["prompt_ids"]
    expected = list(case["generated"])
    # The raw sampler, and the same through the engine's chat path (which stops at max_tokens).
    raw = eng.reference.generate(case["prompt_ids"], _max_new(family)).tokens
    assert raw == expected[: len(raw)]
    assert all(t == eng.mask_id for t in expected[len(raw):])  # SDAR: blocks it never reached stay masks
    req = eng.prepare(case["messages"], reasoning_effort="instant", max_tokens=_max_new(family))
    assert req.tokens == case["prompt_ids"]
    for _ in req.run_alone():
        pass
    got = req.state.generated
    assert got == expected[: len(got)]
    stopped = bool(got) and got[-1] in eng.reference.stop_ids
    assert len(got) >= MIN_TOKENS or stopped, f"only {len(got)} tokens compared"
    return len(got)


# --- SDAR -----------------------------------------------------------------------------------------

def test_parity_sdar_logits_aligned():
    check_logits("sdar", "aligned")


def test_parity_sdar_logits_unaligned():
    check_logits("sdar", "unaligned")


def test_parity_sdar_greedy_aligned():
    assert len(_case("sdar", "aligned")["prompt_ids"]) % 4 == 0
    check_greedy("sdar", "aligned")


def test_parity_sdar_greedy_unaligned():
    assert len(_case("sdar", "unaligned")["prompt_ids"]) % 4 != 0
    check_greedy("sdar", "unaligned")


@pytest.mark.parametrize("name", ["aligned", "unaligned"])
def test_parity_sdar_engine_decoder_aligns_blocks(name):
    """The engine's own block decoder (fused cache writes, effort options) lays SDAR's blocks at
    absolute multiples of 4 too: with the reference's greedy setting (commit every masked
    position at once, no duplicate guard) it gives the reference's tokens in fewer passes."""
    case = _case("sdar", name)
    eng = Engine.load(FIXTURES / "sdar" / "ckpt", precision="fp32")
    assert eng.decoding == "engine" and eng.family.align_blocks
    req = eng.prepare(case["messages"], reasoning_effort="instant", max_tokens=48, threshold=0.0, guided_tools=False)
    req.params.dedup_guard = False
    assert req.tokens == case["prompt_ids"]
    for _ in req.run_alone():
        pass
    got = req.state.generated
    assert len(got) >= MIN_TOKENS and got == case["generated"][: len(got)]
    ref = _engine("sdar").reference.generate(case["prompt_ids"], 48)
    assert req.state.forward_passes < ref.forward_passes  # writing a block is fused into the next pass


def test_sdar_engine_decoder_batched_is_token_identical_to_alone():
    """Aligned blocks in the scheduler too: both fixture prompts (one aligned, one not) batched
    decode exactly as each alone."""
    from engine.serve.scheduler import Scheduler

    eng = Engine.load(FIXTURES / "sdar" / "ckpt", precision="fp32")
    msgs = [_case("sdar", n)["messages"] for n in ("aligned", "unaligned")]
    alone = []
    for m in msgs:
        req = eng.prepare(m, reasoning_effort="low", max_tokens=40)
        for _ in req.run_alone():
            pass
        alone.append(req.state.generated)
    with Scheduler(eng, max_batch=2) as sch:
        tickets = [sch.submit(eng.prepare(m, reasoning_effort="low", max_tokens=40)) for m in msgs]
        for t in tickets:
            t.result_sync(timeout=120)
    assert [t.req.state.generated for t in tickets] == alone


def test_reference_decoding_through_the_scheduler_matches_the_reference():
    """The server's path (Scheduler) in reference mode gives the same tokens as the sampler."""
    from engine.serve.scheduler import Scheduler

    eng = _engine("fast_dllm_v2")
    cases = [_case("fast_dllm_v2", n) for n in ("aligned", "unaligned")]
    with Scheduler(eng, max_batch=2) as sch:
        tickets = [sch.submit(eng.prepare(c["messages"], max_tokens=64)) for c in cases]
        results = [t.result_sync(timeout=120) for t in tickets]
    for t, r, c in zip(tickets, results, cases, strict=True):
        got = t.req.state.generated
        assert got == c["generated"][: len(got)] and len(got) >= MIN_TOKENS
        assert r.metrics["completion_tokens"] == len(got)


# --- Fast_dLLM_v2 ---------------------------------------------------------------------------------

def test_parity_fast_dllm_v2_logits_aligned():
    check_logits("fast_dllm_v2", "aligned")


def test_parity_fast_dllm_v2_logits_unaligned():
    check_logits("fast_dllm_v2", "unaligned")


def test_parity_fast_dllm_v2_greedy_aligned():
    assert len(_case("fast_dllm_v2", "aligned")["prompt_ids"]) % 32 == 0
    check_greedy("fast_dllm_v2", "aligned")


def test_parity_fast_dllm_v2_greedy_unaligned():
    assert len(_case("fast_dllm_v2", "unaligned")["prompt_ids"]) % 32 != 0
    check_greedy("fast_dllm_v2", "unaligned")


@pytest.mark.parametrize("name", ["aligned", "unaligned"])
def test_parity_fast_dllm_v2_engine_decoder_matches_the_reference(name):
    """The engine's own decoder on Fast_dLLM_v2: aligned blocks, sub-blocks of 8 in order, the first
    token of a block from the pass that wrote the previous one. With the reference's setting
    (commit above 0.9, at least the best; no step cap, no duplicate guard) it gives its tokens."""
    case = _case("fast_dllm_v2", name)
    eng = Engine.load(FIXTURES / "fast_dllm_v2" / "ckpt", precision="fp32")
    assert eng.decoding == "engine" and eng.family.sub_block == 8 and eng.family.first_token_at_once
    # The reference commits p > 0.9; the engine commits p >= threshold.
    req = eng.prepare(case["messages"], reasoning_effort="high", max_tokens=64, threshold=0.9 + 1e-7,
                      guided_tools=False)
    req.params.dedup_guard = False
    req.params.order = "confidence"  # the reference's rule; the efforts' default is "prefix"
    req.params.max_steps_per_block = 10_000
    for _ in req.run_alone():
        pass
    got = req.state.generated
    stopped = req.state.finish_reason == "stop"
    assert got == case["generated"][: len(got)] and (len(got) >= MIN_TOKENS or stopped)


# --- LLaDA ----------------------------------------------------------------------------------------

def test_parity_llada_logits_aligned():
    check_logits("llada", "aligned")


def test_parity_llada_logits_unaligned():
    check_logits("llada", "unaligned")


def test_parity_llada_greedy_aligned():
    assert len(_case("llada", "aligned")["prompt_ids"]) % 32 == 0
    check_greedy("llada", "aligned")


def test_parity_llada_greedy_unaligned():
    assert len(_case("llada", "unaligned")["prompt_ids"]) % 32 != 0
    check_greedy("llada", "unaligned")


def test_parity_llada_prompt_starts_with_its_bos():
    case = _case("llada", "aligned")
    assert case["prompt_text"].startswith("<|startoftext|><|start_header_id|>user")
    assert _engine("llada").chat_format.render(case["messages"]) == case["prompt_text"]


def test_parity_llada_config_has_mlp_ratio_only():
    cfg = json.loads((FIXTURES / "llada" / "ckpt" / "config.json").read_text())
    assert "mlp_hidden_size" not in cfg and cfg["mlp_ratio"] == 2
    assert load_hf_folder(FIXTURES / "llada" / "ckpt", dtype=torch.float32).model.cfg.intermediate_size == 128


# --- Dream ----------------------------------------------------------------------------------------

def test_parity_dream_logits_aligned():
    check_logits("dream", "aligned")


def test_parity_dream_logits_unaligned():
    check_logits("dream", "unaligned")


def test_parity_dream_greedy_aligned():
    assert len(_case("dream", "aligned")["prompt_ids"]) % 32 == 0
    check_greedy("dream", "aligned")


def test_parity_dream_greedy_unaligned():
    assert len(_case("dream", "unaligned")["prompt_ids"]) % 32 != 0
    check_greedy("dream", "unaligned")


# --- loading: strict keys, biases from the weights, config-driven ids ------------------------------

def test_fast_dllm_v2_biases_are_read_from_the_weights():
    cfg = json.loads((FIXTURES / "fast_dllm_v2" / "ckpt" / "config.json").read_text())
    assert "attention_bias" not in cfg  # as in the real checkpoint: its modeling file hard-codes them
    ckpt = load_hf_folder(FIXTURES / "fast_dllm_v2" / "ckpt", dtype=torch.float32)
    assert ckpt.model.cfg.qkv_bias
    assert ckpt.model.layers[0].self_attn.q_proj.bias.abs().sum() > 0


def _copy_ckpt(tmp_path: Path, family: str) -> Path:
    dst = tmp_path / family
    shutil.copytree(FIXTURES / family / "ckpt", dst)
    return dst


def test_unexpected_weight_raises_naming_it(tmp_path):
    folder = _copy_ckpt(tmp_path, "sdar")
    state = load_file(str(folder / "model.safetensors"))
    state["model.layers.0.self_attn.o_proj.bias"] = torch.zeros(64)
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointKeyError, match=r"unexpected weights: model\.layers\.0\.self_attn\.o_proj\.bias"):
        load_hf_folder(folder, dtype=torch.float32)


def test_missing_weight_raises_naming_it(tmp_path):
    folder = _copy_ckpt(tmp_path, "fast_dllm_v2")
    state = load_file(str(folder / "model.safetensors"))
    del state["model.layers.1.mlp.up_proj.weight"]
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointKeyError, match=r"missing weights: layers\.1\.mlp\.up_proj\.weight"):
        load_hf_folder(folder, dtype=torch.float32)


def test_one_bias_missing_raises(tmp_path):
    folder = _copy_ckpt(tmp_path, "fast_dllm_v2")
    state = load_file(str(folder / "model.safetensors"))
    del state["model.layers.1.self_attn.v_proj.bias"]
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointKeyError, match=r"layers\.1\.self_attn\.v_proj\.bias"):
        load_hf_folder(folder, dtype=torch.float32)


def test_llada_config_with_mlp_ratio_only_loads():
    cfg = {"d_model": 64, "n_layers": 2, "n_heads": 4, "mlp_ratio": 4, "vocab_size": 300,
           "embedding_size": 320, "activation_type": "silu", "max_sequence_length": 512}
    mc = config_from_hf(cfg)
    assert mc.intermediate_size == 256 and mc.vocab_size == 320
    cfg["mlp_hidden_size"] = 96
    assert config_from_hf(cfg).intermediate_size == 96


def test_mask_id_and_block_size_come_from_the_config(tmp_path):
    folder = _copy_ckpt(tmp_path, "sdar")
    cfg = json.loads((folder / "config.json").read_text())
    assert Engine.load(folder, precision="fp32").mask_id == cfg["mask_token_id"]
    # The config's id wins over any token string (SDAR's tokenizer files disagree on the string).
    cfg["mask_token_id"] = cfg["mask_token_id"] - 1
    cfg["block_size"] = 8
    (folder / "config.json").write_text(json.dumps(cfg))
    eng = Engine.load(folder, precision="fp32")
    assert eng.mask_id == cfg["mask_token_id"]
    assert eng.family.block_size == 8
    v2 = Engine.load(FIXTURES / "fast_dllm_v2" / "ckpt", precision="fp32")
    assert v2.family.block_size == 32  # bd_size
    assert v2.mask_id == v2.tokenizer.token_to_id("|<MASK>|")  # no id in its config: its tokenizer's token


def test_reference_mode_never_thinks_and_renders_the_checkpoint_template():
    eng = _engine("fast_dllm_v2")
    req = eng.prepare([{"role": "user", "content": "hello"}], reasoning_effort="high", max_tokens=4)
    assert not req.thinking
    text = eng.tokenizer.decode(req.tokens, skip_special_tokens=False)
    assert text.startswith("<|im_start|>system\nYou are a helpful assistant.")  # the template's default


def test_tool_results_are_rendered_as_the_checkpoint_template_writes_them():
    eng = Engine.load(FIXTURES / "sdar" / "ckpt", precision="fp32")
    call = {"id": "c1", "type": "function", "function": {"name": "find_free_slots", "arguments": '{"day": "tuesday"}'}}
    msgs = [{"role": "user", "content": "Any time on Tuesday?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": '["10:00"]'}]
    text = eng.chat_format.render(msgs)
    # SDAR's template: a tool result is a user turn wrapping <tool_response>, and no <think> is added.
    assert '<|im_start|>user\n<tool_response>\n["10:00"]\n</tool_response><|im_end|>\n' in text
    assert '<tool_call>\n{"name": "find_free_slots", "arguments": {"day": "tuesday"}}\n</tool_call>' in text
    assert text.endswith("<|im_start|>assistant\n") and "<think>" not in text


def test_serve_takes_decoding_reference(monkeypatch):
    import argparse

    import engine.serve.server as server
    from engine.serve.tool_args import serve_arguments

    parser = argparse.ArgumentParser()
    serve_arguments(parser)
    assert parser.parse_args([]).decoding == "engine"
    args = parser.parse_args(["--model", str(FIXTURES / "sdar" / "ckpt"), "--decoding", "reference"])
    seen = {}

    def fake_load(model, precision=None, threads=None, decoding="engine"):
        seen["decoding"] = decoding
        raise SystemExit(0)

    monkeypatch.setattr(server, "load_engine", fake_load)
    with pytest.raises(SystemExit):
        server.run_from_args(args)
    assert seen["decoding"] == "reference"
    eng = server.Engine.load(args.model, precision="fp32", decoding=args.decoding)
    assert eng.decoding == "reference" and eng.reference is not None


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_engine_decoder_shows_full_diffusion_models_the_masked_window(family, monkeypatch):
    """LLaDA and Dream see the rest of the generation window as masks in every pass over a block
    (as their samplers lay it out), in the engine's own decoder too."""
    eng = Engine.load(FIXTURES / family / "ckpt", precision="fp32")
    assert eng.family.masked_window
    lengths = []
    hidden = eng.model.hidden

    def spy(tokens, *a, **k):
        lengths.append(tokens.shape[1])
        return hidden(tokens, *a, **k)

    monkeypatch.setattr(eng.model, "hidden", spy)
    case = _case(family, "aligned")
    req = eng.prepare(case["messages"], reasoning_effort="instant", max_tokens=64)
    for _ in req.run_alone():
        pass
    assert lengths[0] == len(case["prompt_ids"])  # the prefill
    assert lengths[1] == 64  # the first block and the 32 masks after it
    assert len(req.state.generated) == 64 or req.state.finish_reason == "stop"


@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2"])
def test_aligned_families_session_turn_equals_scratch(family):
    """With blocks at absolute multiples of B and a block-causal cache, a call's second turn reuses
    whole cached blocks and decodes exactly what the same turn from scratch decodes."""
    eng = Engine.load(FIXTURES / family / "ckpt", precision="fp32")
    b = eng.family.block_size
    sess = eng.session()
    m1 = [{"role": "user", "content": "Hi, can I book a cleaning for next Tuesday?"}]
    r1 = eng.chat(m1, reasoning_effort="low", max_tokens=20, session=sess)
    m2 = m1 + [r1.message(), {"role": "user", "content": "And on Wednesday morning, anything?"}]
    turn = eng.prepare(m2, reasoning_effort="low", max_tokens=20, session=sess)
    with sess.lock:
        for _ in turn.run_alone():
            pass
    scratch = eng.prepare(m2, reasoning_effort="low", max_tokens=20)
    for _ in scratch.run_alone():
        pass
    assert turn.cached_tokens > 0 and turn.cached_tokens % b == 0
    assert turn.state.generated == scratch.state.generated
