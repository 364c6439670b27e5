"""The blocks' elementwise work written for fusion: RMSNorm with its residual add, and SwiGLU.

Inside compiled blocks (CUDA) Inductor turns each function here into one kernel per direction; eager they
still save passes. The decision to know: the values are the unfused path's up to bf16 rounding (the
bounds are derived in tests/test_fused_paths.py): the norm's output is rounded once to the compute dtype
(the unfused path leaves it FP32 for autocast to round inside the next matmul: the same bits), and
SwiGLU's backward is written in closed form in FP32 and rounded once, where autograd rounds twice.
kit/engine/fast_paths.py puts them into a built model's blocks; the model file's path (the CPU default) is
untouched.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm in FP32 as Hugging Face does, output in x's dtype (the compute dtype inside the blocks),
    so no FP32 copy of the normed activations is written or saved for backward."""
    dtype = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (weight * h.to(dtype)).to(dtype)


def add_rms_norm(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float):
    """(x + delta, rms_norm(x + delta)): the residual add and the next norm read the stream once."""
    s = x + delta
    return s, rms_norm(s, weight, eps)


class _SwiGLU(torch.autograd.Function):
    """silu(gate) * up, saving only its two inputs (autograd's default also saves silu(gate))."""

    @staticmethod
    def forward(ctx, gate, up):
        ctx.save_for_backward(gate, up)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, dy):
        gate, up = ctx.saved_tensors
        g, u, d = gate.float(), up.float(), dy.float()
        sig = torch.sigmoid(g)
        d_up = d * g * sig
        d_gate = d * u * sig * (1 + g * (1 - sig))  # d silu(g) / dg = sigma(g) (1 + g (1 - sigma(g)))
        return d_gate.to(gate.dtype), d_up.to(up.dtype)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return _SwiGLU.apply(gate, up)
