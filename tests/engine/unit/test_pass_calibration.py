"""The planner's pass costs come from this machine (engine/runtime/pass_calibration.py): a real CPU model times its
own passes on its first load, keeps the curve, and reads it back on later loads, so pass layouts repeat
on the machine; test models, GPUs and `VOICE_AGENT_PASS_COSTS=fixed` keep the fixed curves."""

from __future__ import annotations

import pytest

from engine import Engine
from engine.runtime import pass_calibration
from engine.runtime.pass_calibration import PASS_COSTS_DIR_ENV, PASS_COSTS_ENV, PassCostsError, relative
from engine.runtime.pass_cost import CURVES, PassCost
from tests.tiny_models import save_tiny


def test_a_measured_curve_starts_at_one_never_falls_and_never_passes_its_width():
    ms = {1: 10.0, 2: 10.5, 3: 9.8, 4: 13.0, 8: 120.0, 16: 30.0, 32: 55.0}
    pts = relative(ms)
    assert pts[0] == (1, 1.0)
    costs = [c for _, c in pts]
    assert costs == sorted(costs)  # the 3-token pass timed cheaper than the 2-token one: held at 1.05
    assert dict(pts)[3] == 1.05 and dict(pts)[8] == 8.0  # a disturbed 8-token pass counts as 8 passes at most
    assert dict(pts)[16] == 8.0 and dict(pts)[32] == 8.0


def test_a_pass_cost_takes_measured_points_and_checks_them():
    cost = PassCost("measured:w8a8-fp32", points=((1, 1.0), (4, 1.3), (32, 3.0)))
    assert cost(1) == 1.0 and cost(4) == 1.3 and cost(2) == pytest.approx(1.1)
    assert cost(64) == pytest.approx(3.0 + (3.0 - 1.3) * 32 / 28)  # past the last width: the last two's slope
    assert PassCost(cost.kernel, rows=2, points=cost.points)(2) == 1.3  # a batched pass: rows x width
    with pytest.raises(ValueError, match="starts at"):
        PassCost("measured:x", points=((2, 1.0), (4, 2.0)))
    with pytest.raises(ValueError, match="no pass-cost curve"):
        PassCost("int4")


@pytest.fixture()
def tiny(tmp_path, monkeypatch):
    monkeypatch.setenv(PASS_COSTS_DIR_ENV, str(tmp_path / "curves"))
    return save_tiny(tmp_path / "qwen2", "qwen2", seed=1)


def test_a_real_model_measures_its_curve_once_and_reads_it_back(tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(pass_calibration, "MIN_DIM", 0)  # let the tiny model stand for a real one
    first = Engine.load(tiny, precision="fp32", family="smollm2-dllm", block_size=4)
    cost = first.runner.pass_cost
    assert cost.kernel == "measured:fp32" and cost.points is not None
    assert [w for w, _ in cost.points] == list(pass_calibration.WIDTHS)
    assert len(list((tmp_path / "curves").glob("*.json"))) == 1

    def no_measuring(*args, **kwargs):
        raise AssertionError("the kept curve should have been read back")

    monkeypatch.setattr(pass_calibration, "measure", no_measuring)
    again = Engine.load(tiny, precision="fp32", family="smollm2-dllm", block_size=4)
    assert again.runner.pass_cost == cost
    r = again.chat([{"role": "user", "content": "hi"}], reasoning_effort="instant", max_tokens=6)
    assert r.metrics["forward_passes"] > 0  # the planner runs on the measured curve


def test_test_models_and_the_fixed_setting_keep_the_fixed_curves(tiny, monkeypatch):
    eng = Engine.load(tiny, precision="fp32", family="smollm2-dllm", block_size=4)
    assert eng.runner.pass_cost == PassCost("fp32") and eng.runner.pass_cost.kernel in CURVES  # too small to measure
    monkeypatch.setattr(pass_calibration, "MIN_DIM", 0)
    monkeypatch.setenv(PASS_COSTS_ENV, "fixed")
    assert Engine.load(tiny, precision="fp32", family="smollm2-dllm", block_size=4).runner.pass_cost == PassCost("fp32")
    monkeypatch.setenv(PASS_COSTS_ENV, "guessed")
    with pytest.raises(PassCostsError, match="expected one of measured, fixed"):
        Engine.load(tiny, precision="fp32", family="smollm2-dllm", block_size=4)
