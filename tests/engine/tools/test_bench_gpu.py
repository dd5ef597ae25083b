"""engine.tools.bench_gpu: the prepared accelerator run, exercised on the CPU with a small random model
(the same code path; the GPU figures come from running engine/tools/bench_gpu.sh on a GPU box)."""

from __future__ import annotations

import json

import pytest
import torch

from engine.tools import bench_gpu


def test_a_small_cpu_run_prints_batch_1_and_batch_8_figures(capsys):
    assert bench_gpu.main(["--device", "cpu", "--precision", "fp32", "--shape", "128x2", "--models", "random",
                           "--turns", "2", "--max-tokens", "8"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    row = out["models"]["random"]
    assert out["device"] == "cpu" and set(row) == {"batch1_decode_tok_s", "ttfat_ms_p50", "ttfat_ms_p95",
                                                  "batch8_tok_s", "batch8_over_batch1"}
    assert row["batch8_tok_s"] > 0 and 0 < row["ttfat_ms_p50"] <= row["ttfat_ms_p95"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this checks the message a CPU-only torch gives")
def test_asking_for_cuda_without_it_is_a_clear_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        bench_gpu.main(["--device", "cuda"])
    assert e.value.code == 2 and "no CUDA device" in capsys.readouterr().err
