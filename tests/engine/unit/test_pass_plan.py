"""The verify pass planner: pass-cost curves, the layout it picks, and that a planned decode still
writes exactly what AR decoding writes (only the pass count and widths move)."""

from __future__ import annotations

import pytest
import torch

from engine import Engine
from engine.runtime.pass_cost import CURVES, PassCost, curve_for
from engine.runtime.pass_plan import expected_tokens, hold_odds, plan
from tests.engine.unit.test_engine_decode import CALL, _generated, _verified
from tests.tiny_models import save_tiny


def test_a_cost_curve_interpolates_between_its_widths_and_extrapolates_past_the_last():
    c = PassCost("fp32")
    assert c(1) == 1.0 and c(0) == 1.0 and c(8) == 1.26
    assert c(10) == pytest.approx((1.26 + 1.38) / 2)
    assert c(64) == pytest.approx(2.74 + (2.74 - 2.03) / 16 * 16)
    for name, pts in CURVES.items():
        widths = [w for w, _ in pts]
        assert widths[0] == 1 and pts[0][1] == 1.0 and widths == sorted(set(widths)), name
        assert all(PassCost(name)(w + 1) >= PassCost(name)(w) for w in range(1, 80)), name
    with pytest.raises(ValueError, match="no pass-cost curve"):
        PassCost("int4")
    # a batched pass pads every row to the widest: 8 rows of 2 tokens cost what one row of 16 does
    assert PassCost("fp32", rows=8)(2) == c(16)


def test_each_runner_gets_the_curve_of_its_kernels():
    assert curve_for("cpu", "int8", native_bf16=False) == "int8-fp32"
    assert curve_for("cpu", "int8", native_bf16=True) == "int8-bf16"
    assert curve_for("cpu", "w8a8", native_bf16=True) == "w8a8-bf16"
    assert curve_for("cpu", "w8a8", native_bf16=False) == "w8a8-fp32"
    assert curve_for("cpu", "bf16", native_bf16=True) == "bf16"
    assert curve_for("cpu", "fp32", native_bf16=True) == "fp32"
    assert curve_for("cpu", None, native_bf16=False) == "fp32"
    assert curve_for("cuda", "bf16", native_bf16=False) == "flat"


def test_expected_tokens_counts_a_draft_only_where_every_draft_before_it_held():
    assert expected_tokens([0.5, 0.5], 0) == 1.0
    assert expected_tokens([0.5, 0.5], 2) == pytest.approx(1 + 0.5 + 0.25)
    assert hold_odds("pool", 3) == [0.5, 0.85, 0.85] and hold_odds("guide", 0) == []


def test_a_steep_curve_gets_a_narrow_pass_and_a_flat_one_gets_everything():
    steep, flat = PassCost("int8-fp32"), PassCost("flat")
    unsure = [0.45, 0.36, 0.54]  # block drafts of middling confidence
    narrow = plan(1, unsure, 4, 0.5, steep)
    assert narrow.drafts < 3 and narrow.block < 4 and not narrow.branch
    assert steep(1 + narrow.drafts + narrow.block) < steep(1 + 3 + 4 + 4) * 0.7
    wide = plan(1, unsure, 4, 0.5, flat)
    assert (wide.drafts, wide.block, wide.branch) == (3, 4, True)
    # drafts that almost always hold (a tool call's skeleton from its guide) all go in
    assert plan(1, hold_odds("guide", 12), 4, 0.5, steep).drafts == 12
    # a turn's first pass carries its new prompt: the block's masks cost next to nothing there
    assert plan(60, [], 4, 0.5, steep).block == 4
    # a block whose drafts have held so far is worth its width
    assert plan(1, [], 4, 0.9, steep).block > plan(1, [], 4, 0.3, steep).block


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("tiny") / "qwen2", "qwen2", seed=1)


def test_a_planned_decode_writes_what_ar_writes_in_narrower_passes(tiny_folder):
    ar = _generated(Engine.load(tiny_folder, dtype=torch.float32, family="ar"), CALL, reasoning_effort="instant",
                    max_tokens=24).state.generated
    widths: dict[str, list[int]] = {}
    for curve in ("flat", "int8-fp32"):
        eng = Engine.load(tiny_folder, precision="fp32", family="smollm2-dllm", block_size=4)
        eng.runner.pass_cost = PassCost(curve)
        seen: list[int] = []
        forward = eng.runner.forward
        eng.runner.forward = lambda plan, rows, seen=seen, forward=forward: (seen.append(plan.t), forward(plan, rows))[1]
        cold = _verified(eng, CALL)
        warm = _verified(eng, CALL)  # the pool now holds the reply: its drafts hold
        assert cold.generated == ar == warm.generated, curve
        assert warm.forward_passes < len(ar) / 2, curve
        widths[curve] = seen
    # random weights: the block's drafts never hold, so the steep curve drops the branch and narrows
    # the block; the first pass carries the prompt under both
    assert widths["int8-fp32"][0] > 30 and widths["flat"][0] > 30
    assert sum(widths["int8-fp32"][1:]) < sum(widths["flat"][1:]) * 0.8


def test_a_hold_rate_starts_at_its_prior_and_follows_what_held():
    from engine.runtime.pass_plan import HoldRate

    rate = HoldRate(0.5, 0.85, weight=8)
    assert rate.odds(3) == [0.5, 0.85, 0.85] and rate.odds(0) == []
    for _ in range(40):
        rate.record(8, 8)  # runs of templates that hold whole
    first, rest = rate.odds(2)
    assert first > 0.9 and rest > 0.95
    for _ in range(200):
        rate.record(8, 0)  # chit-chat: the first draft fails
    assert rate.odds(1)[0] < 0.2
    assert rate.odds(2)[1] == rest  # no draft after the first was reached: the rest's odds stay


def test_the_pool_learns_how_often_its_drafts_hold_from_the_sequences_that_check_them():
    from engine.runtime.drafts import NgramDrafts
    from tests.engine.unit.test_engine_units import MASK, _verifying

    pool = NgramDrafts()
    pool.observe([1, 2, 3, 4, 5, 6, 7, 8])
    before = pool.held.odds(1)[0]
    s = _verifying(pending=[1, 2], pool=pool, context=[9, 1, 2])
    s.begin_step()
    s.after_forward(torch.zeros(10))
    s.accept([3, MASK, MASK, MASK], [1.0, 0.1, 0.1, 0.1], 0.0)
    assert s.drafts == [4, 5, 6, 7, 8] and s.draft_source == "pool"
    assert s.draft_odds == pool.held.odds(5)
    s.begin_step()
    s.after_forward(torch.zeros(10))
    s.accept([4, 5, 6, 7, 8, 9] + [0] * 8, [1.0] * 14, 0.0)  # every pool draft held
    assert s.generated == [3, 4, 5, 6, 7, 8, 9]
    assert pool.held.odds(1)[0] > before


def test_in_a_batch_each_row_is_planned_for_the_whole_pass_and_carries_no_branch():
    from tests.engine.unit.test_engine_units import _verifying

    s = _verifying(pending=[5])
    s.drafts = [1, 2, 3]
    s.draft_odds = [0.45, 0.36, 0.54]
    alone = s.step_input(cost=PassCost("flat"))
    assert (alone.n_draft, alone.n_block, alone.n_branch) == (3, 4, 4)
    batched = s.step_input(lean=True, cost=PassCost("int8-fp32", rows=8))
    # 8 rows: every extra token a row costs 8 in the pass, so these unsure drafts are not worth it
    assert batched.n_branch == 0 and batched.n_draft + batched.n_block < 3
    assert s.pass_block == batched.n_block and s.reads(batched) == batched.n_draft + max(batched.n_block, 1)


def test_a_hold_rate_counts_every_checked_draft_in_its_overall_rate():
    from engine.runtime.pass_plan import HoldRate

    rate = HoldRate(0.5, 0.5, weight=2)  # a prior of 0.5 worth 4 drafts, split between first and rest
    assert rate.rate() == 0.5
    rate.record(3, 1)  # 3 drafts: the first held, the second did not (the third was never reached)
    assert rate.rate() == (2 + 1) / (4 + 2)
    rate.record(2, 2)
    assert rate.rate() == (3 + 2) / (6 + 2)
