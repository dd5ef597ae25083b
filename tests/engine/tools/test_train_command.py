"""`voice-agent train --scenario`: corpus, a time-boxed resumable fit, exports measured along the
way, the pack's own adapter installed and then loaded whenever the pack is used (tiny model)."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.tiny_models import save_tiny
from voice_agent.corpus.specialise import SpecialiseConfig, specialise
from voice_agent.packs.adapter import ADAPTER_FILE, pack_adapter
from voice_agent.scenarios import SCENARIOS_DIR, load_scenario

pytestmark = pytest.mark.slow  # end to end on the real models (pytest -m 'not slow' skips it)


def test_train_writes_measures_and_installs_the_packs_adapter_and_resumes(tmp_path):
    pack = tmp_path / "garage"
    shutil.copytree(SCENARIOS_DIR / "car_garage", pack, ignore=shutil.ignore_patterns("__pycache__", ADAPTER_FILE))
    scenario = load_scenario(pack)
    assert pack_adapter(scenario) is None  # no adapter yet: the shipped one serves the pack
    measured = []

    def fake_measure(sc, adapter, callers, out, threads):
        measured.append(adapter.name)
        return {"calls": 2, "task_success_rate": 0.5 + 0.25 * len(measured), "policy_share": 0.5}

    tiny = save_tiny(tmp_path / "tiny", "llama", seed=1)
    cfg = SpecialiseConfig(run=tmp_path / "run", budget_min=0.3, calls=15, start_adapter=None, eval_every_min=0.15,
                           base=str(tiny), rank=4, max_len=900, measure=fake_measure, log=lambda _line: None)
    result = specialise(scenario, cfg)
    assert (tmp_path / "run" / "corpus" / "train.jsonl").stat().st_size > 0
    minutes = [p["minutes"] for p in result["curve"]]  # rounded to 0.1; the first is the start, untrained
    assert len(minutes) == 3 and minutes[0] == 0 and minutes[1] <= minutes[2] and minutes[2] >= 0.25
    assert len(measured) == 3 and result["final"]["minutes"] == minutes[2]  # the best measured one
    assert json.loads((tmp_path / "run" / "curve.json").read_text()) == result["curve"]
    assert result["installed"] == str(pack / ADAPTER_FILE) and pack_adapter(load_scenario(pack)) == pack / ADAPTER_FILE
    assert pack_adapter(load_scenario(pack), model="smollm2-base") is None  # another model: not this adapter
    steps = len((tmp_path / "run" / "fit" / "log.jsonl").read_text().splitlines())
    again = specialise(scenario, SpecialiseConfig(**{**cfg.__dict__, "curve_points": []}))  # the budget is spent
    assert len((tmp_path / "run" / "fit" / "log.jsonl").read_text().splitlines()) == steps
    assert again["trained_min"] == result["trained_min"] and len(measured) == 3


def test_nothing_is_installed_when_no_trained_adapter_beats_the_start(tmp_path):
    pack = tmp_path / "garage"
    shutil.copytree(SCENARIOS_DIR / "car_garage", pack, ignore=shutil.ignore_patterns("__pycache__", ADAPTER_FILE))
    scenario = load_scenario(pack)
    scores = iter([0.9, 0.8])  # the start, then the one trained export

    def fake_measure(sc, adapter, callers, out, threads):
        return {"calls": 2, "task_success_rate": next(scores), "policy_share": 0.5}

    tiny = save_tiny(tmp_path / "tiny", "llama", seed=1)
    cfg = SpecialiseConfig(run=tmp_path / "run", budget_min=0.1, calls=10, start_adapter=None, eval_every_min=0.1,
                           base=str(tiny), rank=4, max_len=900, measure=fake_measure, log=lambda _line: None)
    result = specialise(scenario, cfg)
    assert result["installed"] is None and result["final"]["minutes"] == 0 and pack_adapter(load_scenario(pack)) is None


def test_the_cli_refuses_bad_input_with_a_clear_error(capsys):
    from voice_agent.cli import main

    assert main(["train", "--scenario", "no_such_pack"]) == 2
    assert "no_such_pack" in capsys.readouterr().err
    assert main(["train", "--scenario", "car_garage", "--budget-min", "0"]) == 2
    assert main(["train", "--scenario", "car_garage", "--from-adapter", "/nope.safetensors"]) == 2
