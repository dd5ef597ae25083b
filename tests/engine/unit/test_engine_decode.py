"""Block-diffusion decoding: exactness of the cache, sessions, streaming, and bad input.

Exactness (session == scratch, block size 1 == AR, one commit per step == the sequential reference)
is a property of fp32, so those tests pin fp32. The mechanics tests run under fp32 and bf16 (tiny
models make bf16 cheap even where the CPU emulates it); what bf16 promises against fp32 is
engine.model.precision.BF16_TOLERANCE, tested at the end on tiny and real weights."""

from __future__ import annotations

import pytest
import torch

from engine import Engine, EngineInputError
from engine.model.kv_cache import KVCache
from engine.model.precision import BF16_TOLERANCE
from engine.model.transformer import causal_mask
from tests.tiny_models import save_tiny

CALL = [
    {"role": "system", "content": "You are a receptionist at a dental clinic."},
    {"role": "user", "content": "Hi, I need a cleaning next week."},
]
TOOLS = [{"type": "function", "function": {"name": "find_free_slots", "description": "free times",
          "parameters": {"type": "object", "properties": {"date": {"type": "string"}}, "required": ["date"]}}}]


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("tiny") / "qwen2", "qwen2", seed=1)


@pytest.fixture(scope="module")
def tiny_dllm(tiny_folder):
    return Engine.load(tiny_folder, precision="fp32", family="smollm2-dllm", block_size=4)


@pytest.fixture(scope="module", params=["fp32", "bf16"])
def tiny_any(request, tiny_folder):
    """The tiny dLLM at each precision the engine runs on some CPU (for mechanics, not exactness)."""
    return Engine.load(tiny_folder, precision=request.param, family="smollm2-dllm", block_size=4)


def _generated(eng, messages, **kw):
    req = eng.prepare(messages, **kw)
    for _ in req.run_alone():
        pass
    return req


def test_block_size_1_equals_ar(tiny_folder):
    ar = Engine.load(tiny_folder, dtype=torch.float32, family="ar")
    b1 = Engine.load(tiny_folder, dtype=torch.float32, family="smollm2-dllm", block_size=1)
    a = _generated(ar, CALL, reasoning_effort="instant", max_tokens=20)
    b = _generated(b1, CALL, reasoning_effort="instant", max_tokens=20)
    assert a.state.generated == b.state.generated
    assert len(a.state.generated) == 20


def _verified(eng, messages, max_tokens=24):
    req = eng.prepare(messages, reasoning_effort="instant", max_tokens=max_tokens)
    req.params.order = "verify"
    for _ in req.run_alone():
        pass
    return req.state


@pytest.mark.parametrize("block", [2, 4, 8])
def test_verify_writes_exactly_what_ar_writes_whatever_its_drafts(tiny_folder, block):
    """Order "verify" (engine/runtime/sampler.py) commits only what an AR pass confirms: the same tokens
    as AR decoding when no draft holds (random weights), when every draft holds (the pool saw the
    reply before), and when drafts fail part-way (the pool saw it with one token changed)."""
    ar = _generated(Engine.load(tiny_folder, dtype=torch.float32, family="ar"), CALL, reasoning_effort="instant",
                    max_tokens=24).state.generated
    eng = Engine.load(tiny_folder, precision="fp32", family="smollm2-dllm", block_size=block)
    cold = _verified(eng, CALL)
    assert cold.generated == ar and cold.drafts_accepted == 0
    warm = _verified(eng, CALL)  # the pool now holds the prompt and the first reply
    assert warm.generated == ar
    assert warm.drafts_accepted > 12 and warm.forward_passes < len(ar) / 2
    eng.drafts = type(eng.drafts)()
    wrong = list(ar)
    for i in range(3, len(wrong), 5):  # a wrong token every five: each draft run fails part-way
        wrong[i] = (wrong[i] + 1) % 50
    prompt = eng.prepare(CALL, reasoning_effort="instant").tokens
    eng.drafts.observe(prompt + wrong)
    partial = _verified(eng, CALL)
    assert partial.generated == ar
    assert 0 < partial.drafts_accepted < partial.drafts_proposed and partial.forward_passes < len(ar)


def test_verify_in_a_batch_equals_each_alone(tiny_folder):
    """The scheduler's batch carries rows of different widths (drafts, branch) in one pass."""
    from engine.runtime.decode import DecodeLoop

    eng = Engine.load(tiny_folder, precision="fp32", family="smollm2-dllm", block_size=4)
    calls = [CALL, CALL[:1] + [{"role": "user", "content": "Can I move my filling to Friday?"}]]
    alone = [_verified(eng, c).generated for c in calls]  # the pool now knows both replies
    eng.drafts.observe(eng.prepare(calls[1], reasoning_effort="instant").tokens + alone[1][:5])
    reqs = []
    for c in calls:
        r = eng.prepare(c, reasoning_effort="instant", max_tokens=24)
        r.params.order = "verify"
        reqs.append(r)
    loop = DecodeLoop(eng, eng.new_cache(batch=2))
    results = loop.run_batch(reqs)
    assert [r.state.generated for r in reqs] == alone
    assert sum(r.state.drafts_accepted for r in reqs) > 0 and all(res.text is not None for res in results)


def _reference_decode(eng, prompt: list[int], n_blocks: int, block: int, order: str = "confidence") -> list[int]:
    """No cache, one commit per step: re-run the whole sequence every step (token shift); the step
    commits the most confident open position, or with another `order` the leftmost."""
    model, mask_id = eng.model, eng.mask_id
    out: list[int] = []
    for _ in range(n_blocks):
        clean = prompt + out
        blk = [mask_id] * block
        while mask_id in blk:
            seq = clean + blk
            n, t = len(clean), len(seq)
            m = torch.zeros(t, t, dtype=torch.bool)
            m[:n, :n] = causal_mask(n)
            m[n:, :] = True
            with torch.no_grad():
                logits = model(torch.tensor([seq]), torch.arange(t)[None], m[None, None])[0]
            probs = torch.softmax(logits[n - 1 : n - 1 + block], -1)  # token shift
            conf, tok = probs.max(-1)
            open_pos = [j for j in range(block) if blk[j] == mask_id]
            j = max(open_pos, key=lambda q: float(conf[q])) if order == "confidence" else open_pos[0]
            blk[j] = int(tok[j])
        out += blk
    return out


@pytest.mark.parametrize("order", ["confidence", "prefix"])
def test_one_commit_per_step_equals_sequential_greedy_reference(tiny_dllm, order):
    req = tiny_dllm.prepare(CALL, reasoning_effort="high", max_tokens=12, threshold=1.01)
    req.params.order = order
    for _ in req.run_alone():
        pass
    ref = _reference_decode(tiny_dllm, req.tokens, n_blocks=3, block=4, order=order)
    got = req.state.generated
    assert got == ref[: len(got)]
    assert len(got) == 12 or got[-1] in tiny_dllm.eos_ids
    if order == "confidence":  # the two rules really differ on these weights
        assert got != _reference_decode(tiny_dllm, req.tokens, n_blocks=3, block=4, order="prefix")[: len(got)]


def test_parallel_commits_use_fewer_forwards_than_tokens(tiny_any):
    r = tiny_any.chat(CALL, reasoning_effort="instant", max_tokens=16, threshold=0.0, order="prefix")
    assert r.metrics["completion_tokens"] == 16
    assert r.metrics["tokens_per_forward"] > 1.5


def test_session_turns_equal_decoding_from_scratch(tiny_dllm):
    sess = tiny_dllm.session()
    history = list(CALL)
    for turn, user in enumerate(["Thursday works.", "Morning please.", "Thanks, bye."]):
        if turn:
            history.append({"role": "user", "content": user})
        cached = tiny_dllm.chat(history, reasoning_effort="instant", max_tokens=10, session=sess)
        scratch = tiny_dllm.chat(history, reasoning_effort="instant", max_tokens=10)
        assert cached.raw_text == scratch.raw_text
        if turn:
            assert cached.metrics["cached_tokens"] > 0
            assert cached.metrics["prompt_tokens"] - cached.metrics["cached_tokens"] < scratch.metrics["prompt_tokens"]
        history.append(cached.message())


def test_a_turns_prompt_rides_in_its_first_pass_and_decodes_the_same(tiny_dllm, monkeypatch):
    """Engine.stream leaves a turn's new prompt tokens to its first decoding pass (DecodeLoop.
    merges_prefill): one forward less, and in fp32 the same reply as a separate prefill gives.
    (AR saves nothing: its first token comes from the prefill's logits without a pass of its own.)"""
    from engine.runtime.decode import DecodeLoop

    eng = tiny_dllm
    assert eng.model.dtype == torch.float32 and eng.family.block_size > 1
    calls = []
    for name in ("prefill", "forward"):
        real = getattr(eng.runner, name)
        monkeypatch.setattr(eng.runner, name, lambda *a, _real=real, _n=name, **k: calls.append(_n) or _real(*a, **k))

    def second_turn() -> tuple[object, list[str]]:
        eng.drafts = type(eng.drafts)()  # the same drafts each time: the pool learns every reply
        sess = eng.session()
        history = list(CALL)
        r1 = eng.chat(history, reasoning_effort="instant", max_tokens=8, session=sess)
        history += [r1.message(), {"role": "user", "content": "Is Thursday at ten free?"}]
        calls.clear()
        return eng.chat(history, reasoning_effort="instant", max_tokens=12, session=sess), list(calls)

    merged, merged_calls = second_turn()
    monkeypatch.setattr(DecodeLoop, "merges_prefill", lambda self, a: False)
    apart, apart_calls = second_turn()
    assert merged.raw_text == apart.raw_text
    assert apart_calls[0] == "prefill" and "prefill" not in merged_calls
    assert len(merged_calls) == len(apart_calls) - 1
    new_tokens = apart.metrics["prompt_tokens"] - apart.metrics["cached_tokens"]
    assert merged.metrics["prefill_in_first_pass"] == new_tokens > 1 and apart.metrics["prefill_in_first_pass"] == 0


def test_session_on_real_weights_equals_scratch(base_engine_fp32):
    eng = base_engine_fp32
    assert eng.model.dtype == torch.float32
    sess = eng.session()
    history = list(CALL)
    r1 = eng.chat(history, reasoning_effort="instant", max_tokens=12, session=sess)
    history += [r1.message(), {"role": "user", "content": "Is Thursday at ten free?"}]
    r2 = eng.chat(history, reasoning_effort="instant", max_tokens=12, session=sess)
    r2_scratch = eng.chat(history, reasoning_effort="instant", max_tokens=12)
    assert r2.raw_text == r2_scratch.raw_text
    assert r2.metrics["cached_tokens"] >= r1.metrics["prompt_tokens"]


def test_stream_concatenates_to_the_result(tiny_any):
    events = list(tiny_any.stream(CALL, reasoning_effort="low", max_tokens=24))
    done = events[-1]
    assert done.type == "done"
    answer = "".join(e.text for e in events if e.type == "answer")
    reasoning = "".join(e.text for e in events if e.type == "reasoning")
    assert answer.strip() == done.result.text
    assert reasoning.strip() == done.result.reasoning
    assert len([e for e in events if e.type != "done"]) >= 2  # more than one committed block


@pytest.mark.slow
def test_thinking_budget_closes_reasoning_and_never_mixes_it_into_the_answer(base_engine):
    r = base_engine.chat(CALL, reasoning_effort="low", max_tokens=120)
    assert r.metrics["reasoning_tokens"] <= 64 + 8
    assert "<think>" not in r.text and "</think>" not in r.text
    assert r.reasoning and r.reasoning not in r.text


def test_kv_cache_crop_and_fork():
    c = KVCache(2, 1, 2, 4, capacity=4)
    c.k[:, 0, :, :3] = 1.0
    c.commit(3)
    f = c.fork()
    f.k[:, 0, :, :3] = 2.0
    assert float(c.k[0, 0, 0, 0, 0]) == 1.0 and int(f.lengths[0]) == 3
    c.ensure(10)
    assert c.capacity >= 10 and float(c.k[0, 0, 0, 2, 0]) == 1.0
    c.crop(1)
    assert int(c.lengths[0]) == 1


@pytest.mark.parametrize(
    "kwargs, code, param",
    [
        (dict(messages=[]), "invalid_messages", "messages"),
        (dict(messages=[{"role": "wizard", "content": "hi"}]), "invalid_messages", "messages"),
        (dict(messages=CALL, reasoning_effort="extreme"), "invalid_reasoning_effort", "reasoning_effort"),
        (dict(messages=CALL, tools=[{"type": "function", "function": {"name": "x", "parameters": {"type": 5}}}]),
         "invalid_tools", "tools"),
        (dict(messages=CALL, tools=[{"type": "function", "function": {"name": "bad name!"}}]), "invalid_tools", "tools"),
        (dict(messages=CALL, max_tokens=0), "invalid_max_tokens", "max_tokens"),
        (dict(messages=CALL, tool_choice="required"), "invalid_tool_choice", "tool_choice"),
        (dict(messages=[{"role": "user", "content": "word " * 5000}]), "context_length_exceeded", "messages"),
    ],
)
def test_bad_input_gives_a_clear_error(tiny_any, kwargs, code, param):
    """Callers decide on the error's code and param, never on its text; the text says what to fix."""
    with pytest.raises(EngineInputError) as e:
        tiny_any.chat(**kwargs)
    assert (e.value.code, e.value.param) == (code, param)
    assert len(str(e.value)) > 10


def test_invalid_tool_arguments_become_errors_not_exceptions(tiny_dllm):
    from engine.text.tool_calls import parse_tool_calls, validate_tools

    tools = validate_tools(TOOLS)
    bad = parse_tool_calls('<tool_call>\n{"name": "find_free_slots", "arguments": {"day": 3}}\n</tool_call>', tools)
    assert not bad.calls and "date" in bad.errors[0]
    junk = parse_tool_calls("<tool_call>\n{not json</tool_call>", tools)
    assert not junk.calls and "JSON" in junk.errors[0]
    ok = parse_tool_calls('<tool_call>\n{"name": "find_free_slots", "arguments": {"date": "2026-12-01"}}\n</tool_call>', tools)
    assert ok.calls[0]["function"]["name"] == "find_free_slots"


def test_warming_a_session_caches_the_system_prompt_before_the_first_turn(tiny_dllm):
    sess = tiny_dllm.session()
    held = tiny_dllm.warm(sess, CALL[:1], tools=TOOLS)
    assert held > 10
    first = tiny_dllm.chat(CALL, tools=TOOLS, reasoning_effort="instant", max_tokens=8, session=sess)
    scratch = tiny_dllm.chat(CALL, tools=TOOLS, reasoning_effort="instant", max_tokens=8)
    assert first.raw_text == scratch.raw_text
    assert first.metrics["cached_tokens"] == held


def test_a_complete_call_with_a_mangled_closing_tag_still_parses():
    from engine.text.tool_calls import parse_tool_calls, validate_tools

    text = '<tool_call>\n{"name": "find_free_slots", "arguments": {"date": "2026-12-01"}}\ntool_call>'
    parsed = parse_tool_calls(text, validate_tools(TOOLS))
    assert [c["function"]["name"] for c in parsed.calls] == ["find_free_slots"] and not parsed.errors


# -- what bf16 promises (engine.model.precision.BF16_TOLERANCE) ------------------------------------------

def _teacher_forced_logits(eng, tokens: list[int]) -> torch.Tensor:
    t = len(tokens)
    with torch.no_grad():
        return eng.model(torch.tensor([tokens]), torch.arange(t)[None], causal_mask(t)[None, None])[0].float()


def test_precision_switch_picks_the_dtype(tiny_folder, monkeypatch):
    from engine.model.precision import PrecisionError, resolve_precision

    monkeypatch.setenv("VOICE_AGENT_PRECISION", "bf16")
    assert Engine.load(tiny_folder).model.dtype == torch.bfloat16
    assert Engine.load(tiny_folder, precision="fp32").model.dtype == torch.float32  # the argument wins
    monkeypatch.setenv("VOICE_AGENT_PRECISION", "fp32")
    assert Engine.load(tiny_folder).info["precision_reason"] == "VOICE_AGENT_PRECISION=fp32"
    monkeypatch.setenv("VOICE_AGENT_PRECISION", "int3")
    with pytest.raises(PrecisionError, match="fp32, bf16"):
        resolve_precision()


def test_bf16_logits_within_tolerance_of_fp32_on_tiny_weights(tiny_folder, tiny_dllm):
    bf = Engine.load(tiny_folder, precision="bf16", family="smollm2-dllm", block_size=4)
    tokens = tiny_dllm.prepare(CALL, reasoning_effort="instant").tokens
    f, b = _teacher_forced_logits(tiny_dllm, tokens), _teacher_forced_logits(bf, tokens)
    assert float((f - b).abs().max()) <= BF16_TOLERANCE.max_abs_logit_diff


def test_bf16_agrees_with_fp32_on_real_weights(base_engine_fp32):
    """The AR base in bf16 vs fp32, on the prompt and on fp32's own greedy reply: logits within the
    bound and the same next-token choice at (nearly) every step. Whole greedy sequences are not
    promised: they part at the first near tie (measured after 3-15 tokens)."""
    bf = Engine.load("smollm2-base", precision="bf16", threads=torch.get_num_threads())
    fp = base_engine_fp32
    for user in ["Hi, I need a cleaning next week.", "What are your opening hours?"]:
        msgs = [CALL[0], {"role": "user", "content": user}]
        tokens = fp.prepare(msgs, reasoning_effort="instant").tokens
        reply = _generated(fp, msgs, reasoning_effort="instant", max_tokens=24).state.generated
        assert len(reply) == 24
        f, b = _teacher_forced_logits(fp, tokens + reply), _teacher_forced_logits(bf, tokens + reply)
        assert float((f - b).abs().max()) <= BF16_TOLERANCE.max_abs_logit_diff
        steps = slice(len(tokens) - 1, None)  # the positions greedy decoding reads
        agree = (f[steps].argmax(-1) == b[steps].argmax(-1)).float().mean()
        assert float(agree) >= BF16_TOLERANCE.min_top1_agreement
        assert float((f.argmax(-1) == b.argmax(-1)).float().mean()) >= BF16_TOLERANCE.min_top1_agreement


@pytest.mark.parametrize("chunks", [["I need a day. </think", "\n\nWhat day suits you?"],
                                    ["I need a day. </think\n", "What day suits you?"],
                                    ["I need a day.</think What day suits you?"]])
def test_a_think_closer_without_its_bracket_still_ends_the_reasoning(chunks):
    """Measured on an AVX512-BF16 machine: the model wrote `</think` without `>`, and every word after
    it was taken as reasoning (empty content for 8 of 8 server requests). The parser must not lose it."""
    from engine.text.chat_format import OutputParser

    p = OutputParser(in_reasoning=True)
    for i, c in enumerate(chunks):
        p.feed(c, final=i == len(chunks) - 1)
    assert p.answer.strip() == "What day suits you?" and p.reasoning.strip() == "I need a day."


def test_text_after_a_forced_call_is_never_an_answer():
    """tool_choice named a function: the output is that call, and what the model writes after its
    close (here a mangled second opener) is dropped, not spoken; without one_call it is the answer."""
    from engine.text.chat_format import OutputParser

    tail = '{"patient_name": "Ana Ruiz"}}\n</tool_call>\ntool__call>\n{"}}'
    forced, free = OutputParser(one_call=True), OutputParser()
    forced.mode = free.mode = "tool"
    events = forced.feed(tail, final=True)
    assert forced.answer == "" and not [e for e in events if e[0] == "answer"]
    assert forced.tool_text.endswith("</tool_call>")
    free.feed(tail, final=True)
    assert free.answer.startswith("tool__call>")
