"""The AdamW step that writes the weight cache's copies (kit/train/adam_cache.py, EngineConfig.adam_writes_cache) on
CPU: its copies are exactly the masters rounded to bf16 after every update (what `WeightCache.refresh` would write),
the pass compiled by inductor and eager (the engine runs it eagerly on a CPU, compiled on CUDA),
its AdamW is the foreach path's within FP32 rounding, and a skipped step (found_inf) leaves masters, moments and
copies untouched bit for bit. The lever is on by default on CUDA only (runs/bench-update-adam-cache-2026-12-06).

Why a tolerance and not bit identity for the AdamW itself: the compiled pass is inductor's code, not the foreach
kernels (the design says a GPU run's bits differ with the lever on). Each value passes through at most eight FP32
roundings (scale, decay, lerp, the second moment, sqrt, the bias division, + eps, the division and the step), each
within 2^-24 relative, so two correct evaluations differ by at most 16 x 2^-24 = 2^-20 relative of the terms: the
parameter (|p|) and the step (lr).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from support.engine import OPT, make_batches
from support.engine_workers import build_engine, engine_config, records_from_json

from kit.distributed.group import Group
from kit.distributed.pipeline import EngineConfig
from kit.model.shard import even_layout
from kit.train.adam_cache import adamw_and_cast
from kit.train.optim import GroupConfig

pytestmark = pytest.mark.usefixtures("one_thread")
CPU = torch.device("cpu")
BF = torch.bfloat16
REL = 2.0**-20  # sixteen FP32 roundings (the module docstring)


def _state(seed: int):
    gen = torch.Generator().manual_seed(seed)
    shapes = [(8, 16), (16,), (4, 4, 3)]
    ps = [torch.randn(s, generator=gen) * 0.1 for s in shapes]
    return (ps, [torch.randn(s, generator=gen) * 1e-2 for s in shapes],
            [torch.randn(s, generator=gen) * 1e-3 for s in shapes], [torch.rand(s, generator=gen) * 1e-4 for s in shapes],
            [torch.empty(s, dtype=BF) for s in shapes])


def _clone(state):
    return tuple([t.clone() for t in part] for part in state)


def _foreach_adamw(ps, grads, ms, vs, *, age, lr, beta1, beta2, eps, weight_decay, factor):
    """The foreach path's AdamW (kit/train/optim.py), with torch's sqrt."""
    grads = [g * factor for g in grads]
    torch._foreach_mul_(ps, 1 - lr * weight_decay)
    torch._foreach_lerp_(ms, grads, 1 - beta1)
    torch._foreach_mul_(vs, beta2)
    torch._foreach_addcmul_(vs, grads, grads, value=1 - beta2)
    denom = torch._foreach_sqrt(vs)
    torch._foreach_div_(denom, (1 - beta2**age) ** 0.5)
    torch._foreach_add_(denom, eps)
    torch._foreach_addcdiv_(ps, ms, denom, value=-lr / (1 - beta1**age))


RATES = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1}


@pytest.mark.parametrize("compiled", [False, True])
def test_the_pass_is_adamw_and_its_copies_are_the_masters_rounded(compiled):
    ref = _state(3)
    got = _clone(ref)
    for age in (1, 2, 3):
        _foreach_adamw(*ref[:4], age=age, factor=0.75, **RATES)
        adamw_and_cast(*got, age=age, factor=torch.tensor(0.75), compiled=compiled, **RATES)
        for name, a, b in zip(("param", "exp_avg", "exp_avg_sq"), ref[:3], got[:3]):
            for x, y in zip(a, b):
                scale = x.abs().max().item() + (RATES["lr"] if name == "param" else 0.0)
                torch.testing.assert_close(y, x, rtol=0, atol=REL * scale, msg=lambda m, n=name: f"{n}: {m}")
        assert all(torch.equal(low, p.to(BF)) for p, low in zip(got[0], got[4]))


def test_a_skipped_step_changes_nothing():
    state = _state(5)
    for p, low in zip(state[0], state[4]):
        low.copy_(p)  # as the cache holds them: the masters rounded
    before = _clone(state)
    adamw_and_cast(*state, age=1, factor=1.0, found_inf=torch.ones(()), compiled=False, **RATES)
    for a, b in zip(before[:4], state[:4]):
        assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert all(torch.equal(x.view(torch.int16), y.view(torch.int16)) for x, y in zip(before[4], state[4]))


def _engines(dirs):
    cfg = replace(engine_config({"microbatch_size": 2, "max_grad_norm": 1.0}), compute_dtype="bfloat16",
                  weight_cache="on")
    make = lambda c: build_engine(Group(0, 1, CPU), str(dirs[0]), str(dirs[1]), even_layout(3, 1), c,
                                  {"default": GroupConfig(**OPT)})
    return make(cfg), make(replace(cfg, adam_writes_cache="on"))


def test_engine_lever_writes_every_copy_and_keeps_the_update(student_reference):
    # runs/bench-update-adam-cache-2026-12-06: +2.6% tokens/s on one H100, so on by default on CUDA only: the CPU
    # keeps the foreach AdamW and every digest
    cfg = EngineConfig(2, 1.0)
    assert cfg.adam_writes_cache == "auto" and cfg.enabled("adam_writes_cache", torch.device("cuda"))
    assert not cfg.enabled("adam_writes_cache", CPU)
    with pytest.raises(ValueError, match="engine adam_writes_cache 'yes'; expected 'auto', 'on' or 'off'"):
        EngineConfig(2, 1.0, adam_writes_cache="yes")
    plain, lever = _engines(student_reference)
    assert not plain.adam_writes_cache and lever.adam_writes_cache
    cache = lever.weight_cache
    assert set(lever.optimizer.copies) and len(lever.optimizer.copies) == len(cache._pairs)
    batches = [records_from_json(rows) for rows in make_batches(n_updates=3)]
    real_refresh, calls = cache.refresh, []

    def counted_refresh():
        calls.append("refresh")
        real_refresh()
    cache.refresh = counted_refresh
    for records in batches:
        a, b = plain.update(records), lever.update(records)
        # the same masters going in (first update), the same forward: then the AdamW within FP32 rounding
        for n, p in plain.optimizer.params.items():
            q = lever.optimizer.params[n]
            torch.testing.assert_close(q, p, rtol=0, atol=REL * (p.abs().max().item() + OPT["lr"]) * 4)
        assert all(torch.equal(c, m.detach().to(BF)) for m, c in cache._pairs)
        assert abs(a.parts.objective - b.parts.objective) <= 1e-3 * abs(a.parts.objective)
        plain.optimizer.load_param_states(lever.optimizer.param_states())  # the same masters for the next update
    # the one refresh fills the copies before the first update; after it the steps write them (and the state loaded
    # into the plain engine leaves the lever's masters, so their version counters, as they were)
    assert calls == ["refresh"]
