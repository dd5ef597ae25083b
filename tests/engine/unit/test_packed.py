"""fp32 linears prepacked for oneDNN (engine/model/packed.py): what they replace, what they compute, and
the row stability that keeps batched == alone exact."""

from __future__ import annotations

import pytest
import torch

from engine import Engine
from engine.model.packed import PackedLinear
from engine.model.precision import PrecisionError, fp32_linears
from engine.model.quant import linear_bytes
from tests.tiny_models import causal_logits, save_tiny


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("tiny") / "llama", "llama", seed=3)



def test_cpu_fp32_packs_every_linear_and_matches_the_dense_model(tiny_folder, monkeypatch):
    monkeypatch.setenv("VOICE_AGENT_FP32_LINEARS", "dense")
    dense = Engine.load(tiny_folder, precision="fp32")
    monkeypatch.setenv("VOICE_AGENT_FP32_LINEARS", "packed")
    packed = Engine.load(tiny_folder, precision="fp32")
    n_linear = sum(isinstance(m, torch.nn.Linear) for m in dense.model.modules())
    assert dense.info["linear_kernel"] == "dense (nn.Linear)" and "packed_linears" not in dense.info
    assert packed.info["packed_linears"] == n_linear == 7 * 2 + 1
    assert packed.info["linear_kernel"] == "fp32 oneDNN-packed"
    assert not any(isinstance(m, torch.nn.Linear) for m in packed.model.modules())
    assert linear_bytes(packed.model) == linear_bytes(dense.model)  # the same fp32 bytes per pass
    tokens = list(range(3, 40))
    a, b = causal_logits(dense, tokens), causal_logits(packed, tokens)
    assert (a - b).abs().max().item() < 1e-3 * (a.max() - a.min()).item()
    assert torch.equal(a.argmax(-1), b.argmax(-1))


def test_a_rows_output_does_not_depend_on_the_rows_beside_it():
    torch.manual_seed(0)
    w, bias = torch.randn(96, 64), torch.randn(96)
    lin = PackedLinear(w, bias)
    x = torch.randn(40, 64)
    with torch.inference_mode():
        alone = torch.cat([lin(x[i:i + 1]) for i in range(len(x))])
        for rows in (2, 3, 8, 40):
            assert torch.equal(lin(x[:rows]), alone[:rows])
        assert lin(x.view(5, 8, 64)).shape == (5, 8, 96)
        assert torch.allclose(alone, torch.nn.functional.linear(x, w, bias), atol=1e-4)


def test_bf16_and_int8_engines_are_not_packed(tiny_folder):
    assert "packed_linears" not in Engine.load(tiny_folder, precision="bf16").info
    assert Engine.load(tiny_folder, precision="int8").info["linear_kernel"].startswith("int8 weights")


def test_a_bad_kernel_choice_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("VOICE_AGENT_FP32_LINEARS", "fast")
    with pytest.raises(PrecisionError, match="VOICE_AGENT_FP32_LINEARS must be one of packed, dense"):
        fp32_linears()
