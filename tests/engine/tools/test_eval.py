"""`python -m engine.tools.eval` runs end to end and its precision agreement means what it says
(tiny random weights: mechanics only; the real numbers are in the model card)."""

from __future__ import annotations

import json

import pytest

from engine.tools.eval import main, rouge_l
from tests.tiny_models import save_tiny


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("tiny_eval") / "qwen2", "qwen2", seed=3)


def _run(capsys, folder, *extra: str) -> dict:
    main(["--model", str(folder), "--limit", "6", "--table-efforts", "instant", "--effort", "instant",
          "--speed-prompts", "1", "--max-tokens", "8", "--batch", "3", "--threads", "1", "--json", *extra])
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_a_precision_agrees_with_itself_exactly(tiny_folder, capsys):
    out = _run(capsys, tiny_folder, "--precision", "fp32", "--against-precision", "fp32")
    [versus] = out["against_precision"]
    assert out["precision"] == "fp32" and versus["precision"] == "fp32"
    assert versus["n_chat"] + versus["n_tool"] == 6
    # the same weights, the same decode: the same answers, the same tool calls
    assert versus["rouge_l"] == 1.0
    assert versus["n_tool"] == 0 or versus["same_tool_behaviour_rate"] == 1.0


def test_int8_against_fp32_is_reported_between_zero_and_one(tiny_folder, capsys):
    out = _run(capsys, tiny_folder, "--precision", "int8", "--against-precision", "fp32,bf16")
    assert [v["precision"] for v in out["against_precision"]] == ["fp32", "bf16"]
    assert out["precision"] == "int8"
    assert all(0.0 <= v["rouge_l"] <= 1.0 for v in out["against_precision"])


def test_an_unknown_precision_is_a_clear_error(tiny_folder, capsys):
    with pytest.raises(SystemExit):
        _run(capsys, tiny_folder, "--against-precision", "fp8")
    assert "not one of" in capsys.readouterr().err


def test_rouge_l():
    assert rouge_l("book a cleaning on tuesday", "book a cleaning on tuesday") == 1.0
    assert rouge_l("book a cleaning", "cancel my visit") == 0.0
    assert 0 < rouge_l("book a cleaning on tuesday", "book it on tuesday") < 1
