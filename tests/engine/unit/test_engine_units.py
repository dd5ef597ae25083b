"""The decode machinery's parts, without a checkpoint: the KV cache's row operations, the commit
rule, a sequence's own state changes, the one prefix-reuse rule, the runner's layout reuse, and
the boundaries (who may change a sequence, who may touch the cache's tensors)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from engine.model.families import FAMILIES
from engine.model.kv_cache import KVCache
from engine.model.transformer import ModelConfig, Transformer, init_random
from engine.runtime import sampler
from engine.runtime.runner import ModelRunner
from engine.runtime.sequence import DecodeParams, Sequence
from engine.runtime.session import reuse_plan

ENGINE = Path(__file__).resolve().parents[3] / "engine"
DLLM = replace(FAMILIES["smollm2-dllm"], block_size=4)
MASK, EOS = 0, 99


def _filled(batch=3, cap=8) -> KVCache:
    c = KVCache(2, batch, 2, 4, capacity=cap)
    for r in range(batch):
        c.k[:, r] = float(r + 1)
        c.v[:, r] = -float(r + 1)
        c.lengths[r] = r + 2
    return c


# -- the KV cache's row operations -------------------------------------------------------------------

def test_move_row_copies_the_committed_part_and_empties_the_source():
    c = _filled()
    c.move_row(2, 0)
    assert c.length(0) == 4 and c.length(2) == 0
    assert torch.all(c.k[:, 0, :, :4] == 3.0) and torch.all(c.v[:, 0, :, :4] == -3.0)


def test_load_row_takes_only_the_reused_prefix_and_extract_returns_the_row():
    src = _filled(batch=1)
    src.k[:, 0, :, 1] = 7.0
    dst = KVCache(2, 2, 2, 4, capacity=4)
    dst.load_row(1, src, length=1)
    assert dst.length(1) == 1 and torch.all(dst.k[:, 1, :, 0] == 1.0) and torch.all(dst.k[:, 1, :, 1] == 0.0)
    back = KVCache(2, 1, 2, 4, capacity=2)
    dst.advance(1, 1)
    dst.extract_row(1, back)
    assert back.length(0) == 2 and back.capacity >= 2


def test_copy_prefix_is_a_new_single_row_cache_and_row_views_write_through():
    c = _filled()
    p = c.copy_prefix(1, 2)
    assert p.batch == 1 and p.length(0) == 2 and torch.all(p.k == 2.0)
    p.k.zero_()
    assert torch.all(c.k[:, 1, :, :2] == 2.0)  # a copy, not a view
    view = c.rows(1, 3)
    assert c.rows(0, 3) is c and view.batch == 2
    view.k[:, 0] = 5.0
    view.lengths[1] = 6
    assert torch.all(c.k[:, 1] == 5.0) and c.length(2) == 6
    with pytest.raises(RuntimeError):
        view.ensure(c.capacity + 1)


# -- the commit rule -------------------------------------------------------------------------------

def test_thresholds_compare_in_float32_as_a_tensor_compares_with_a_python_float():
    logits = torch.randn(1, 50, generator=torch.Generator().manual_seed(1)) * 3
    conf = float(torch.softmax(logits, -1).max())
    thr = conf + 1e-10  # above the confidence in float64, the same number in float32
    _, got, above = sampler.greedy(logits.clone(), [thr], [])
    assert got == [conf] and conf < thr
    assert above == [bool(torch.softmax(logits, -1).max() >= thr)] == [True]  # as the 0-d comparison says


def test_greedy_rows_batched_equal_each_row_alone():
    g = torch.Generator().manual_seed(0)
    parts = [torch.randn(n, 50, generator=g) * 4 for n in (3, 1, 4)]
    alone = [sampler.greedy(p.clone(), [0.4] * len(p), [(0, len(p), [2, 7])]) for p in parts]
    both = sampler.greedy(torch.cat(parts), [0.4] * 8, [(0, 3, [2, 7]), (3, 4, [2, 7]), (4, 8, [2, 7])])
    assert [sum((a[i] for a in alone), []) for i in range(3)] == list(both)


def test_choose_commits_at_least_one_everything_on_the_last_step_and_guards_duplicates():
    pos, tok = [0, 1, 2, 3], [5, 5, 6, 7]
    conf = [0.2, 0.95, 0.1, 0.3]
    assert sampler.choose(pos, tok, conf, [False] * 4, first_only=False, last_step=False, dedup=True) == [1]
    assert sampler.choose(pos, tok, conf, [False] * 4, first_only=False, last_step=True, dedup=True) == [0, 1, 2, 3]
    both = [True, True, False, False]
    assert sampler.choose(pos, tok, conf, both, first_only=False, last_step=False, dedup=True) == [1]
    assert sampler.choose(pos, tok, conf, both, first_only=False, last_step=False, dedup=False) == [0, 1]
    assert sampler.choose(pos, tok, conf, both, first_only=True, last_step=False, dedup=True) == [0]


def test_commit_orders_differ_only_in_what_commits_beside_the_confident_run():
    pos, tok, conf = [4, 5, 6, 7], [1, 2, 3, 4], [0.3, 0.95, 0.4, 0.97]
    none, gap = [False] * 4, [False, True, False, True]
    kw = {"first_only": False, "last_step": False, "dedup": True}
    assert sampler.choose(pos, tok, conf, none, order="confidence", **kw) == [3]
    assert sampler.choose(pos, tok, conf, none, order="leftmost", **kw) == [0]
    assert sampler.choose(pos, tok, conf, gap, order="leftmost", **kw) == [1, 3]  # above the threshold: all
    assert sampler.choose(pos, tok, conf, gap, order="prefix", **kw) == [0]  # position 4 is open: wait
    run = [True, True, False, True]
    assert sampler.choose(pos, tok, [0.95, 0.95, 0.4, 0.97], run, order="prefix", **kw) == [0, 1]
    assert sampler.choose(pos, tok, conf, none, order="prefix", last_step=True, first_only=False,
                          dedup=True) == [0, 1, 2, 3]


# -- a sequence changes itself ----------------------------------------------------------------------

def _seq(max_tokens=6, family=DLLM, **kw) -> Sequence:
    params = DecodeParams(block_size=4, threshold=0.5, max_steps_per_block=2, max_tokens=max_tokens)
    return Sequence.start(params, family, MASK, {EOS}, next_logits=torch.zeros(10), **kw)


def test_a_full_block_becomes_final_and_the_next_block_fits_the_budget():
    s = _seq()
    assert s.block == [MASK] * 4 and s.step_input().tokens == [MASK] * 4
    s.commit([0, 2], [11, 13])
    assert s.committed == [True, False, True, False] and not s.generated
    assert s.last_step()
    s.commit([1, 3], [12, 14])
    assert s.generated == [11, 12, 13, 14] == s.new_final == s.pending
    assert s.block == [MASK, MASK] and not s.done  # 2 tokens of budget left
    assert s.step_input().tokens == [11, 12, 13, 14, MASK, MASK]
    s.begin_step()
    s.after_forward(torch.ones(10))
    assert s.pending == [] and s.forward_passes == 1 and float(s.next_logits[0]) == 1.0
    s.commit([0, 1], [EOS, 3])
    assert s.done and s.finish_reason == "stop" and s.generated[-1] == EOS and s.new_final == [EOS]


def test_narrowed_blocks_apply_from_the_next_block_and_never_to_aligned_families():
    s = _seq(max_tokens=12)
    s.narrow_blocks(1)
    assert s.block == [MASK] * 4  # the open block keeps its size
    s.commit([0, 1, 2, 3], [1, 2, 3, 4])
    assert s.block == [MASK]
    aligned = dataclasses.replace(DLLM, align_blocks=True)
    a = _seq(max_tokens=12, family=aligned)
    a.narrow_blocks(1)
    a.commit([0, 1, 2, 3], [1, 2, 3, 4])
    assert len(a.block) == 4


def test_forced_text_and_rewrites_go_through_the_sequence():
    s = _seq(max_tokens=12)
    s.force([40, 41])
    assert s.generated == [40, 41] == s.pending and s.infilled == 2 and s.block == [MASK] * 4
    s.commit([0, 1, 2, 3], [1, 2, 3, 4])
    s.rewrite_tail(4, [7, 8], 1, stop=False, reopen=True)
    assert s.generated == [40, 41, 7, 8] and s.pending == [7, 8] and s.infilled == 3 and not s.done
    s.rewrite_tail(2, [9], 0, stop=True, reopen=False)
    assert s.done and s.finish_reason == "stop" and s.block == [] and s.generated == [40, 41, 9]


def _verifying(max_tokens=12, **kw) -> Sequence:
    params = DecodeParams(block_size=4, threshold=0.9, max_steps_per_block=3, max_tokens=max_tokens, order="verify")
    return Sequence.start(params, DLLM, MASK, {EOS}, next_logits=torch.zeros(10), **kw)


def test_verify_commits_the_drafts_that_hold_and_the_next_token_after_them():
    s = _verifying(pending=[5, 6])
    assert s.verifying and s.step_input() == s.step_input()
    inp = s.step_input()
    assert inp.tokens == [5, 6, MASK, MASK, MASK, MASK] and (inp.n_draft, inp.n_branch) == (0, 0)
    assert s.reads(inp) == 4  # after the last pending token, then after block positions 0..2
    s.begin_step()
    s.after_forward(torch.zeros(10))
    s.accept([11, 12, 13, 14], [0.9, 0.8, 0.7, 0.6], 0.0)
    assert s.generated == [11] == s.new_final == s.pending and s.drafts == [12, 13, 14]
    # With drafts, the pass also carries a branch: masks that see only the pending tokens.
    inp = s.step_input()
    assert inp.tokens == [11, 12, 13, 14] + [MASK] * 8 and (inp.n_draft, inp.n_block, inp.n_branch) == (3, 4, 4)
    assert s.reads(inp) == 3 + 4 + 4
    s.begin_step()
    s.after_forward(torch.zeros(10))
    # Drafts 12 and 13 hold, 14 does not (the pass says 30): 12, 13, 30 are final, and the next
    # drafts are the branch's predictions for the positions after 30 (the last one of four).
    tok = [12, 13, 30, 31, 32, 33, 34, 35, 40, 41, 42]
    s.accept(tok, [1.0] * len(tok), 0.0)
    assert s.generated == [11, 12, 13, 30] and s.new_final == [12, 13, 30] and s.drafts == [42]
    assert (s.drafts_proposed, s.drafts_accepted) == (3, 2)


def test_a_batched_verify_pass_drafts_a_block_at_most_and_carries_no_branch():
    s = _verifying(pending=[5])
    s.drafts = [1, 2, 3, 4, 6, 7]
    alone = s.step_input()
    assert (alone.n_draft, alone.n_branch) == (6, 4)
    lean = s.step_input(lean=True)
    assert (lean.n_draft, lean.n_branch) == (3, 0) and s.drafts == [1, 2, 3]
    assert lean.tokens == [5, 1, 2, 3] + [MASK] * 4 and s.reads(lean) == 3 + 4


def test_verify_keeps_the_block_drafts_when_all_held_and_stops_at_the_end_of_turn_or_budget():
    s = _verifying(pending=[5])
    s.drafts = [12, 13, 14]
    s.begin_step()
    s.after_forward(torch.zeros(10))
    tok = [12, 13, 14, 20, 21, 22, 23, 90, 91, 92, 93]  # all hold; block after them says 21, 22, 23
    s.accept(tok, [1.0, 1.0, 1.0, 1.0, 0.9, 0.1, 0.9, 1, 1, 1, 1], 0.5)
    assert s.new_final == [12, 13, 14, 20] and s.drafts == [21]  # cut at the first draft under 0.5
    s.begin_step()
    s.after_forward(torch.zeros(10))
    s.accept([21, EOS, 7, 7, 7, 7, 7, 7], [1.0] * 8, 0.0)
    assert s.done and s.finish_reason == "stop" and s.generated[-2:] == [21, EOS] and s.drafts == []
    short = _verifying(max_tokens=3, pending=[5])
    short.begin_step()
    short.after_forward(torch.zeros(10))
    short.accept([1, 2, 3], [1.0] * 3, 0.0)
    assert short.drafts == [2]  # two tokens of budget left: the next pass's own token and one draft
    short.begin_step()
    short.after_forward(torch.zeros(10))
    short.accept([2, 8, 8, 8, 8, 8], [1.0] * 6, 0.0)
    assert short.done and short.finish_reason == "length" and short.generated == [1, 2, 8]


def test_verify_takes_drafts_from_the_pool_and_text_edits_drop_them():
    from engine.runtime.drafts import NgramDrafts

    pool = NgramDrafts()
    pool.observe([1, 2, 3, 4, 5, 6])
    s = _verifying(pending=[1, 2], pool=pool, context=[7, 1, 2])
    assert s.drafts == []  # none in the pass that carries the prompt
    s.begin_step()
    s.after_forward(torch.zeros(10))
    s.accept([3, 9, 9, 9], [1.0, 0.2, 0.2, 0.2], 0.0)
    assert s.generated == [3] and s.drafts == [4, 5, 6]  # 1 2 3 was followed by 4 5 6 before
    s.force([40])
    assert s.drafts == []
    s.drafts = [1]
    s.rewrite_tail(1, [41], 1, stop=False, reopen=False)
    assert s.drafts == []
    # The other orders, and sampling, never draft.
    for order, temperature in (("prefix", 0.0), ("verify", 0.7)):
        params = DecodeParams(block_size=4, threshold=0.9, max_steps_per_block=3, max_tokens=8, order=order,
                              temperature=temperature)
        other = Sequence.start(params, DLLM, MASK, {EOS}, pending=[2, 3], pool=pool, context=[1, 2, 3])
        assert not other.verifying and other.drafts == []


def test_proposed_drafts_replace_the_next_passes_and_keep_to_the_budget():
    s = _verifying(max_tokens=4, pending=[5])
    s.drafts = [1, 2]
    s.propose([7, 8, 9, 10, 11])
    assert s.drafts == [7, 8, 9]  # four tokens of budget: the pass's own token and three drafts
    s.propose([])
    assert s.drafts == [7, 8, 9]  # nothing proposed leaves the drafts as they were
    params = DecodeParams(block_size=4, threshold=0.9, max_steps_per_block=3, max_tokens=8, order="prefix")
    other = Sequence.start(params, DLLM, MASK, {EOS}, pending=[2, 3])
    other.propose([7, 8])
    assert other.drafts == []  # only "verify" checks drafts


def test_the_pool_keeps_the_longest_recent_continuation():
    from engine.runtime.drafts import NgramDrafts

    pool = NgramDrafts(max_entries=50)
    pool.observe([1, 2, 3, 4, 5, 6, 7])
    assert pool.propose([9, 1, 2, 3]) == ([4, 5, 6, 7], 3)
    assert pool.propose([9, 2, 3]) == ([4, 5, 6, 7], 2)
    pool.observe([1, 2, 3, 4])  # a prompt that ends there cuts nothing short
    assert pool.propose([1, 2, 3])[0] == [4, 5, 6, 7]
    pool.observe([1, 2, 3, 8, 9])  # what followed most recently wins
    assert pool.propose([1, 2, 3])[0] == [8, 9]
    assert pool.propose([42, 43]) == ([], 0)
    pool.observe(list(range(100, 200)))
    assert len(pool) <= 50


def test_aligned_blocks_carry_the_prompt_leftover_into_the_first_block():
    sdar = FAMILIES["sdar"]
    s = _seq(family=sdar, carry=[21, 22, 23], prompt_len=7)
    assert s.block == [21, 22, 23, MASK] and s.committed == [True, True, True, False]
    s.commit([3], [30])
    assert s.generated == [30] and s.pending == [21, 22, 23, 30]


# -- the one prefix-reuse rule ------------------------------------------------------------------------

def test_reuse_keeps_one_token_to_prefill_and_shared_prefixes_only_in_whole_blocks():
    toks = list(range(20))
    assert reuse_plan(DLLM, toks, toks, shared=False) == (19, 20)
    assert reuse_plan(DLLM, toks[:10] + [99], toks, shared=False) == (10, 20)
    block = replace(FAMILIES["sdar"], align_blocks=False)
    assert reuse_plan(block, toks[:10], toks, shared=True) == (8, 20)
    assert reuse_plan(FAMILIES["sdar"], toks[:10], toks[:19], shared=False) == (8, 16)  # 3 tokens carried


# -- the runner builds a pass's layout once --------------------------------------------------------------

def test_the_runner_reuses_a_layout_until_it_changes():
    cfg = ModelConfig(vocab_size=64, dim=16, n_layers=1, n_heads=2, n_kv_heads=1, intermediate_size=32,
                      max_seq_len=64)
    model = Transformer(cfg)
    init_random(model)
    runner = ModelRunner(model, device="cpu")
    cache = runner.new_cache(batch=2, capacity=8)
    cache.advance(0, 3)
    a, b = _seq(), _seq()
    b.move(1)
    rows = [(0, a.step_input()), (1, b.step_input())]
    plan = runner.plan(cache, rows, DLLM)
    assert runner.plan(cache, rows, DLLM, reuse=plan) is plan
    logits = runner.forward(plan, rows)
    assert logits.shape == (2 * 3, 64)  # token shift: block positions 1..3 of each row are read
    cache.advance(1, 1)
    assert runner.plan(cache, rows, DLLM, reuse=plan) is not plan
    cache.ensure(cache.capacity * 2)
    fresh = runner.plan(cache, rows, DLLM)
    assert runner.plan(cache, rows, DLLM, reuse=fresh) is fresh and fresh.base is cache.k


def test_a_branch_predicts_what_a_block_right_after_the_pending_tokens_would():
    """masks.with_branch: the branch sees only the pending tokens (not the drafts nor the block
    before it) at the drafts' positions, so it predicts as a pass without drafts would."""
    from engine.runtime.sequence import StepInput

    cfg = ModelConfig(vocab_size=64, dim=16, n_layers=2, n_heads=2, n_kv_heads=1, intermediate_size=32,
                      max_seq_len=64)
    model = Transformer(cfg)
    init_random(model)
    runner = ModelRunner(model, device="cpu")
    outs = []
    for inp in (StepInput([5, 6] + [MASK] * 4, 2, 4, 0),
                StepInput([5, 6, 7, 8] + [MASK] * 8, 2, 4, 0, n_draft=2, n_branch=4)):
        cache = runner.new_cache(batch=1, capacity=16)
        prompt = [(0, [3, 4, 9])]
        runner.prefill(cache, prompt, DLLM)
        plan = runner.plan(cache, [(0, inp)], DLLM)
        outs.append(runner.forward(plan, [(0, inp)]))
    plain, branched = outs
    assert plain.shape[0] == 4 and branched.shape[0] == 2 + 1 + 4 + 3  # pending, drafts, block, branch
    assert torch.allclose(branched[-3:], plain[1:], atol=1e-5)  # the block's reads after position 0
    assert torch.allclose(branched[0], plain[0], atol=1e-5)  # both read after the last pending token
    assert not torch.allclose(branched[3:6], plain[1:], atol=1e-3)  # the block after the drafts differs


def test_folding_query_groups_gives_the_same_attention(monkeypatch):
    """A narrow pass folds each KV group's query heads into one query run (engine/model/transformer.py); a
    masked and an unmasked pass, one and two rows, must equal SDPA's enable_gqa. Not bit for bit
    in fp32: SDPA's lone-query path (t=1, unfolded) sums in another order (measured 1e-7)."""
    import engine.model.transformer as model_mod

    cfg = ModelConfig(vocab_size=64, dim=48, n_layers=2, n_heads=6, n_kv_heads=2, intermediate_size=32,
                      max_seq_len=64)
    model = Transformer(cfg)
    init_random(model)
    torch.manual_seed(0)
    for batch, t in ((1, 1), (1, 3), (2, 2), (2, 4), (1, 8), (2, 6)):
        tokens = torch.randint(0, 64, (batch, 5 + t))
        outs = {}
        for fold_max in (0, model_mod.FOLD_GROUPS_MAX_TOKENS):
            monkeypatch.setattr(model_mod, "FOLD_GROUPS_MAX_TOKENS", fold_max)
            cache = KVCache(cfg.n_layers, batch, cfg.n_kv_heads, cfg.head_dim, capacity=16)
            pre = torch.ones(5, 5, dtype=torch.bool).tril()
            mask, _ = cache.mask(pre, 5)
            slots = cache.slots_for(5)
            with torch.inference_mode():
                model.hidden(tokens[:, :5], slots, mask, cache, slots)
                cache.commit(5)
                intra = torch.ones(t, t, dtype=torch.bool).tril()  # masked: causal among the new
                mask, _ = cache.mask(intra, t)
                slots = cache.slots_for(t)
                masked = model.hidden(tokens[:, 5:], slots, mask, cache, slots)
                mask, _ = cache.mask(torch.ones(t, t, dtype=torch.bool), t)  # every key visible
                full = model.hidden(tokens[:, 5:], slots, mask, cache, slots)
            outs[fold_max] = (masked, full)
        for a, b in zip(outs[0], outs[model_mod.FOLD_GROUPS_MAX_TOKENS], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=f"rows {batch}, new tokens {t}")
        assert not torch.equal(outs[0][0], outs[0][1]) or t == 1  # the mask did change the pass


# -- boundaries ------------------------------------------------------------------------------------------

_SEQ_WRITE = re.compile(r"\b(?:st|s|seq|state)\.(?:pending|block|committed|generated|done|finish_reason|banned|"
                        r"forced|new_final|infilled|row|next_logits|steps_in_block|offset|carry)\s*(?:=(?!=)|\+=|"
                        r"\.append\(|\.extend\()|del (?:st|s|seq)\.")
_CACHE_REACH = re.compile(r"\.(?:k|v)\[|\.lengths\[[^\]]*\]\s*(?:=(?!=)|\+=)|\.lengths\.zero_")


@pytest.mark.parametrize("path", sorted(p for p in ENGINE.rglob("*.py")), ids=lambda p: p.name)
def test_only_the_sequence_changes_its_state_and_only_the_cache_touches_its_tensors(path):
    text = path.read_text()
    if path.name != "sequence.py":
        assert not _SEQ_WRITE.search(text), f"{path.name} changes a Sequence's state from outside"
    if path.name != "kv_cache.py":
        assert not _CACHE_REACH.search(text), f"{path.name} reaches into the KV cache's layout"
