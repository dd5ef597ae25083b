"""fp32 linears prepacked for oneDNN: the CPU kernel that keeps a block of tokens as cheap as one.

    pack_fp32(model)        # every nn.Linear of the layers and the LM head, in place (CPU, fp32)

`nn.Linear` on CPU calls MKL's sgemm, whose cost grows with the rows of a narrow pass: streaming
SmolLM2-135M's 210 layer linears (425 MB, more than the cache holds) took, in ms by rows
1 / 2 / 4 / 8, MKL 53.7 / 95.8 / 106.1 / 114.6 against 48.9 / 46.4 / 61.5 / 70.0 for the same
weights reordered once into oneDNN's blocked layout (`torch.ops.mkldnn._reorder_linear_weight`,
called through `_linear_pointwise`, the kernel inductor's CPU freezing uses). Measured on a 2-core
EPYC without AVX512, 2 threads. A 300-token prefill was faster too (LM head 150 vs 243 ms).

Block diffusion lives on passes of 2-8 new tokens, so this is the kernel that lets it pay on
CPUs where bf16 is not native. The blocked kernel is also row-stable: a row's output is
bit-identical whether it is multiplied alone or with other rows (MKL's is not for 1-2 rows), so
batched == alone holds exactly. It differs from MKL's sums in the last bits (about 1e-4 on
unit-scale inputs), as any other kernel would.

With `fuse`, q/k/v and gate/up are stacked into one weight each (4 kernel calls per layer instead
of 7). A tied LM head gets its own packed copy; the embedding table keeps its weights.
"""

from __future__ import annotations

import torch
from torch import nn

from engine.model.quant import replace_linears


def onednn_available() -> bool:
    return bool(torch.backends.mkldnn.is_available())


class PackedLinear(nn.Module):
    """y = x @ W.T + b with W held in oneDNN's blocked layout (fp32, CPU)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        w = weight.detach().float().contiguous()
        self.out_features, self.in_features = w.shape
        self.weight_bytes = w.numel() * 4 + (0 if bias is None else bias.numel() * 4)
        # An opaque MKLDNN tensor: not a buffer (state_dict and .to() cannot handle it), and the
        # model is placed before packing, so it never needs to move.
        self._packed = torch.ops.mkldnn._reorder_linear_weight(w, None)
        self.register_buffer("bias", None if bias is None else bias.detach().float().contiguous(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, self.in_features)
        if x2.dtype != torch.float32 or not x2.is_contiguous():
            x2 = x2.float().contiguous()
        y = torch.ops.mkldnn._linear_pointwise(x2, self._packed, self.bias, "none", [], "")
        return y.view(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, fp32 oneDNN-packed"


def pack_fp32(model: nn.Module, fuse: bool = True) -> int:
    """Replace every nn.Linear of a CPU fp32 `model` by a PackedLinear; returns how many linears
    were packed."""
    if not onednn_available():
        raise RuntimeError("this PyTorch build has no oneDNN (torch.backends.mkldnn)")
    return replace_linears(model, PackedLinear, fuse)


__all__ = ["PackedLinear", "onednn_available", "pack_fp32"]
