"""The AdamW step and the weight cache's compute-dtype copy in one compiled pass (`EngineConfig.adam_writes_cache`).

With the weight cache (kit/model/weight_cache.py) an update ends with two passes over every cached weight: the fused
AdamW kernel reads and writes the FP32 master, then `WeightCache.refresh` reads the master again to write its bf16
copy (the 3.8 ms `_foreach_copy_` of the one-GPU profile, docs/performance.md). Here one compiled
function per (group, bucket size) does both: each parameter's new value is computed once, stored into the master and,
rounded, into its copy, so the second read of 4 bytes a parameter goes.

The decision to know: this is not torch's fused kernel. It computes the same AdamW (the foreach path's formulas, in
the same order: decay, lerp of the first moment, the second moment, sqrt / bias correction + eps, addcdiv) but
inductor's generated code need not round like `_fused_adamw_`, so with the lever on a GPU run's bits differ from the
same run with it off: a GPU lever like `compiled_loss`, "auto" (CUDA only: +2.6% tokens/s on one H100,
docs/performance.md), never on the CPU by default ("on" runs it anywhere: eagerly on a CPU, where compiling buys nothing).
A skipped step (a non-finite clip: `found_inf`) leaves masters, moments and copies untouched.
"""

from __future__ import annotations

import torch

# (group's lr, beta1, beta2, eps, weight_decay, bucket size) -> the compiled step: the group's rates are constants of
# the graph (they do not change between updates), the step-dependent values are device scalars (no recompilation as
# the Adam clock advances, no host synchronisation).
_COMPILED: dict[tuple, object] = {}


def _adamw_and_cast(ps, grads, ms, vs, lows, step_size, bc2_sqrt, factor, skip, lr, beta1, beta2, eps, weight_decay):
    for p, g, m, v, low in zip(ps, grads, ms, vs, lows):
        g = g * factor  # the canonical clip factor (<= 1), as the foreach path scales gradients first
        p_new = p * (1 - lr * weight_decay) if weight_decay else p
        m_new = torch.lerp(m, g, 1 - beta1)
        v_new = v * beta2 + g * g * (1 - beta2)
        denom = torch.sqrt(v_new) / bc2_sqrt + eps
        p_new = p_new - step_size * (m_new / denom)
        p_new = torch.where(skip, p, p_new)
        p.copy_(p_new)
        m.copy_(torch.where(skip, m, m_new))
        v.copy_(torch.where(skip, v, v_new))
        low.copy_(p_new)


def compiled_step(lr: float, beta1: float, beta2: float, eps: float, weight_decay: float, size: int):
    key = (lr, beta1, beta2, eps, weight_decay, size)
    fn = _COMPILED.get(key)
    if fn is None:
        fn = torch.compile(_adamw_and_cast, fullgraph=True, dynamic=False)
        _COMPILED[key] = fn
    return fn


def adamw_and_cast(ps, grads, ms, vs, lows, *, age: int, lr: float, beta1: float, beta2: float, eps: float,
                   weight_decay: float, factor: torch.Tensor | float = 1.0, found_inf: torch.Tensor | None = None,
                   compiled: bool = True) -> None:
    """One AdamW step of the parameters `ps` (one group, one Adam age) that also writes each new value into its
    compute-dtype copy `lows[i]`. `factor`: the clip factor (a device scalar or a float); `found_inf`: a device
    flag that, when non-zero, skips the step. `compiled=False` runs the same function eagerly (the tests' oracle of
    the compiled one)."""
    device = ps[0].device
    scalar = lambda x: x.to(device=device, dtype=torch.float32) if torch.is_tensor(x) else \
        torch.full((), float(x), dtype=torch.float32, device=device)
    step_size = scalar(lr / (1 - beta1**age))
    bc2_sqrt = scalar((1 - beta2**age) ** 0.5)
    skip = (found_inf.to(device) != 0) if found_inf is not None else torch.zeros((), dtype=torch.bool, device=device)
    fn = compiled_step(lr, beta1, beta2, eps, weight_decay, len(ps)) if compiled else _adamw_and_cast
    with torch.no_grad():
        fn(ps, grads, ms, vs, lows, step_size, bc2_sqrt, scalar(factor), skip, lr, beta1, beta2, eps, weight_decay)
