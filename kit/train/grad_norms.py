"""Each parameter's squared gradient norm in FP64, the input of canonical clipping (kit/train/optim.py).

Two ways to the same numbers: one `vector_norm` per tensor (the CPU path, whose bits the CPU evidence
pins), or one multi-tensor `torch._foreach_norm` call (a few kernels for every tensor at once instead of
one per parameter, on CUDA). The decision to know: either way each tensor's norm depends on that tensor
alone, so the clip factor stays independent of the worker count; both accumulate in FP64 (CUDA's kernel in
its output dtype) but in different orders, so they may differ in the last bits (tests/test_fused_paths.py).
"""

from __future__ import annotations

import torch


def squared_norms(tensors: list[torch.Tensor], multi_tensor: bool) -> torch.Tensor:
    """(len(tensors),) FP64: ||t||_2^2 of each tensor, in the order given."""
    if multi_tensor:
        return torch.stack(torch._foreach_norm(tensors, 2, dtype=torch.float64)) ** 2
    return torch.stack([torch.linalg.vector_norm(t, dtype=torch.float64) ** 2 for t in tensors])
