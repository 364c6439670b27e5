"""One compute-dtype (bf16) copy of a stage's matmul weights per update, instead of a cast in every matmul.

Under autocast every block of every microbatch casts its FP32 master weights to bf16 in forward (and
again in backward, or keeps the copy alive until then). `WeightCache` writes that copy once, right after
the optimizer step, and `cached_linear` multiplies by it. The decision to know: the masters stay the
only learned state; the copy is a bf16 leaf-less tensor, and `cached_linear`'s backward returns the
weight gradient in FP32 to the master's `.grad`, exactly where autocast's cast would have put it, so the
gradients, the clip and the optimizer are unchanged. Details: docs/performance.md ("Fast paths").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class _CachedLinear(torch.autograd.Function):
    """y = x W^T with W's bf16 copy `low`; d/dx by the copy, d/dW accumulated into the FP32 master.

    Why a custom function and not bf16 parameters with FP32 gradient accumulation: the parameters (and so
    names, checkpoints, the optimizer and the canonical clip) stay FP32 masters untouched, and the weight
    gradient reaches the master's `.grad` in the same place and dtype as autocast's cast backward puts it
    (a bf16 product rounded once, then widened), so nothing downstream of the blocks changes."""

    @staticmethod
    def forward(ctx, x, weight, low):
        xl = x.to(low.dtype)  # autocast's cast of the input, the same rounding
        ctx.save_for_backward(xl, low)  # `low` is the cache itself: no per-microbatch copy is saved
        ctx.x_dtype = x.dtype
        return F.linear(xl, low)

    @staticmethod
    def backward(ctx, g):
        xl, low = ctx.saved_tensors
        gx = gw = None
        if ctx.needs_input_grad[0]:
            gx = (g @ low).to(ctx.x_dtype)
        if ctx.needs_input_grad[1]:
            gw = (g.reshape(-1, g.shape[-1]).t() @ xl.reshape(-1, xl.shape[-1])).float()
        return gx, gw, None


def cached_linear(x: torch.Tensor, layer: nn.Linear, low: torch.Tensor | None) -> torch.Tensor:
    """`layer(x)`, or with `low` (layer.weight's compute-dtype copy) the cached product; bias-free only."""
    if low is None:
        return layer(x)
    return _CachedLinear.apply(x, layer.weight, low)


def _linears(module: nn.Module) -> dict[str, nn.Linear]:
    return {n: m for n, m in module.named_children() if isinstance(m, nn.Linear) if m.bias is None}


class WeightCache:
    """The compute-dtype copies of a stage's bias-free block linears and of its output head.

    `blocks[block_id]` is `{"self_attn": {"q_proj": copy, ...}, "mlp": {...}}`, the copies
    kit/engine/fast_paths.py hands to the blocks' linears; `head` is the head weight's copy (None without the
    embedding). `refresh()` rewrites every copy from its master; `ensure_fresh()` does so only when a
    master was changed in place since (its version counter moved: a loaded checkpoint, a migration)."""

    def __init__(self, model, dtype: torch.dtype):
        if dtype == torch.float32:
            raise ValueError("WeightCache needs a lower compute dtype than the FP32 masters (e.g. torch.bfloat16)")
        self.dtype = dtype
        self.blocks: dict[str, dict[str, dict[str, torch.Tensor]]] = {}
        self._pairs: list[tuple[torch.Tensor, torch.Tensor]] = []  # (master, copy)
        for bid, block in model.model.layers.items():
            entry = {}
            for part in ("self_attn", "mlp"):
                entry[part] = {n: self._copy_of(lin.weight) for n, lin in _linears(getattr(block, part)).items()}
            self.blocks[bid] = entry
        self.head = self._copy_of(model.head_weight()) if model.with_embedding else None
        self._versions: list[int] | None = None

    def _copy_of(self, master: torch.Tensor) -> torch.Tensor:
        low = torch.empty_like(master, dtype=self.dtype, memory_format=torch.contiguous_format)
        self._pairs.append((master, low))
        return low

    @torch.no_grad()
    def refresh(self) -> None:
        masters = [m for m, _ in self._pairs]
        torch._foreach_copy_([c for _, c in self._pairs], masters)  # one multi-tensor cast, in place
        self._versions = [m._version for m in masters]

    def copies_of(self, params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """name -> compute-dtype copy, for the named parameters that are cached masters (by identity)."""
        by_master = {id(m): c for m, c in self._pairs}
        return {n: by_master[id(p)] for n, p in params.items() if id(p) in by_master}

    def mark_fresh(self) -> None:
        """Every copy was just written from its master by another pass (the optimizer's, `adam_writes_cache`):
        record the masters' version counters without copying."""
        self._versions = [m._version for m, _ in self._pairs]

    def ensure_fresh(self) -> None:
        if self._versions is None or any(m._version != v for (m, _), v in zip(self._pairs, self._versions)):
            self.refresh()

    def nbytes(self) -> int:
        return sum(c.numel() * c.element_size() for _, c in self._pairs)
