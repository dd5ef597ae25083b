"""The narrow-pass int8 kernels (engine/csrc/int8_gemv.cpp, `Int8Matrix`): the numbers of PyTorch's
dynamic int8 linear (the same 7-bit activation quantisation, exact int32 sums), on each instruction set
this CPU has, and W8A8Linear's choice between the two."""

from __future__ import annotations

import pytest
import torch

from engine.cpu_isa import describe, int8_kernel_isa
from engine.model import native
from engine.model.quant import W8A8Linear


@pytest.fixture(scope="module")
def ext():
    mod = native.load_extension()
    assert mod is not None, f"the native extension did not build: {native.build_error()}"
    return mod


def cpu_has(flag: str) -> bool:
    from engine.cpu_isa import cpu_flags

    return flag in cpu_flags()


def linear(n: int, k: int, bias: bool, seed: int = 0) -> W8A8Linear:
    g = torch.Generator().manual_seed(seed)
    return W8A8Linear(torch.randn(n, k, generator=g) * 0.05, torch.randn(n, generator=g) * 0.1 if bias else None)


def matrix(ext, lin: W8A8Linear, isa: str):
    q = torch.ops.quantized.linear_unpack(lin._packed)[0]
    return ext.Int8Matrix(q.int_repr(), q.q_per_channel_scales().float(), lin.bias, isa)


def test_the_kernels_pick_the_instruction_set_the_engine_reports(ext):
    """engine.cpu_isa (what doctor, the bench and `auto` say) and int8_gemv.cpp (what runs) choose alike,
    under VOICE_AGENT_CPU_ISA as without it."""
    assert ext.Int8Matrix.isa() == (int8_kernel_isa() or "none")


@pytest.mark.parametrize("isa", ["avx512_vnni", "avx_vnni", "avx2"])
@pytest.mark.parametrize("shape", [(832, 576), (576, 1536), (100, 96), (40, 64), (7, 200)])
@pytest.mark.parametrize("bias", [False, True])
def test_int8_matrix_gives_the_dynamic_int8_linear_numbers(ext, isa, shape, bias):
    """Every kernel this CPU (as capped) runs; the others skip, saying which flag is missing."""
    if isa == "avx_vnni" and int8_kernel_isa() != "avx_vnni":
        # the AVX-VNNI kernel runs only where the CPU's best int8 instructions are AVX-VNNI (not with AVX512)
        pytest.skip(f"AVX-VNNI is not this CPU's int8 kernel (it runs {int8_kernel_isa()}; flags: {describe()})")
    if not cpu_has(isa):
        pytest.skip(f"this CPU has no {isa} (flags: {describe()})")
    n, k = shape
    lin = linear(n, k, bias)
    if isa in ("avx2", "avx_vnni") and k % 32:
        with pytest.raises(RuntimeError, match=f"no {isa} int8 kernel"):
            matrix(ext, lin, isa)
        return
    mat = matrix(ext, lin, isa)
    g = torch.Generator().manual_seed(3)
    for rows in range(1, ext.Int8Matrix.max_rows + 1):
        x = torch.randn(rows, k, generator=g) * 2
        x[0, 0] = 9.0  # an outlier sets the activation scale, as SmolLM2's do
        ref = torch.ops.quantized.linear_dynamic(x, lin._packed, True)
        got = mat.forward(x)
        assert got.shape == ref.shape and got.dtype == torch.float32
        # exact int32 sums; only the last float multiply may round the other way
        torch.testing.assert_close(got, ref, rtol=0, atol=4 * torch.finfo(torch.float32).eps * float(ref.abs().max()))


def test_int8_matrix_refuses_what_it_cannot_do(ext):
    lin = linear(16, 64, bias=False)
    with pytest.raises(RuntimeError, match="no sse int8 kernel"):
        matrix(ext, lin, "sse")
    mat = matrix(ext, lin, "auto")
    with pytest.raises(RuntimeError, match=f"1 to {ext.Int8Matrix.max_rows} rows, got"):
        mat.forward(torch.randn(ext.Int8Matrix.max_rows + 1, 64))


def test_w8a8_linear_takes_the_kernel_for_its_narrowest_passes(ext):
    lin = linear(96, 128, bias=True)
    if int8_kernel_isa() is None:  # before AVX2 (or capped so): PyTorch's kernel
        assert lin._gemv is None
        return
    assert lin._gemv is not None
    up_to = ext.Int8Matrix.alone_rows
    assert 1 <= up_to <= ext.Int8Matrix.max_rows
    x = torch.randn(up_to + 1, 128)
    with torch.inference_mode():
        assert torch.equal(lin(x[:up_to]), lin._gemv.forward(x[:up_to]))
        wider = x[: min(up_to + 1, lin.dense_above)]
        if wider.shape[0] > up_to:  # still narrow, but past the kernel: PyTorch's
            assert torch.equal(lin(wider), torch.ops.quantized.linear_dynamic(wider, lin._packed, True))


def test_without_the_native_layers_w8a8_runs_pytorchs_kernel(monkeypatch):
    monkeypatch.setenv(native.NATIVE_ENV, "0")
    lin = linear(32, 64, bias=False)
    assert lin._gemv is None
    x = torch.randn(1, 64)
    with torch.inference_mode():
        assert torch.equal(lin(x), torch.ops.quantized.linear_dynamic(x, lin._packed, True))
