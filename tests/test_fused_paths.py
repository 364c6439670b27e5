"""The engine's GPU fast paths on CPU, each against the unfused path within a bound derived from bf16 and
FP32 rounding: the bf16 weight copy (kit/model/weight_cache.py), the fused norms and SwiGLU
(kit/model/fused.py) and the multi-tensor gradient norms (kit/train/grad_norms.py); that the CPU default
takes none of them; and that the benchmark runs every before/after variant (a tiny CPU smoke).

Notation: u = 2^-8, the unit roundoff of bf16 (8 significand bits); v = 2^-24, that of FP32.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from support.engine import OPT, make_batches
from support.engine_workers import build_engine, engine_config, records_from_json
from support.nccl_semantics import run_ranks

from kit.distributed.group import Group
from kit.distributed.pipeline import EngineConfig
from kit.model import fused
from kit.model.config import toy_shape
from kit.model.llama import LlamaCausalLM, RMSNorm, init_weights
from kit.model.shard import even_layout
from kit.model.weight_cache import WeightCache, cached_linear
from kit.train.grad_norms import squared_norms
from kit.train.optim import GroupConfig

pytestmark = pytest.mark.usefixtures("one_thread")

U, V = 2.0**-8, 2.0**-24
BF = torch.bfloat16
CPU = torch.device("cpu")


def _bf16(*shape, gen):
    return torch.randn(*shape, generator=gen).to(BF)


def _abs_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a| |b| as an FP64 matrix product: the scale of a dot product's rounding error."""
    return a.double().abs().reshape(-1, a.shape[-1]) @ b.double().abs()


def test_cpu_default_takes_none_of_the_fast_paths_and_bad_switches_are_refused(student_reference):
    cfg = replace(engine_config({"microbatch_size": 2, "max_grad_norm": 1.0}), compute_dtype="bfloat16")
    eng = build_engine(Group(0, 1, CPU), str(student_reference[0]), None, even_layout(3, 1), cfg,
                       {"default": GroupConfig(**OPT)})
    assert (eng.weight_cache, eng.fused, eng.foreach_norm) == (None, False, False)
    assert cfg.enabled("weight_cache", torch.device("cuda")) and not cfg.enabled("weight_cache", CPU)
    with pytest.raises(ValueError, match="engine fused_elementwise 'yes'; expected 'auto', 'on' or 'off'"):
        EngineConfig(2, 1.0, fused_elementwise="yes")


def test_cached_linear_matches_autocast_linear_within_bf16_rounding():
    """Forward: both paths run F.linear on the same bf16 operands (the copy is the cast's bits, and the
    input is cast by the same rounding), so the outputs are equal bit for bit.

    Backward: each gradient entry is a dot product of K bf16 terms (K = out features for d/dx, N = B*T
    rows for d/dW), accumulated in FP32 (error <= K v sum|a_i b_i| for any order, to first order) and
    rounded once to bf16 (<= u |value|). Two such results, in possibly different accumulation orders,
    differ by at most 2 (u + K v) (|a| |b|), elementwise, since |value| <= (|a| |b|)."""
    gen = torch.Generator().manual_seed(0)
    layer = torch.nn.Linear(48, 40, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(40, 48, generator=gen) * 0.1)
    x = torch.randn(3, 7, 48, generator=gen).requires_grad_()
    gy = _bf16(3, 7, 40, gen=gen)
    with torch.autocast("cpu", dtype=BF):
        ref = layer(x)
    ref.backward(gy)
    ref_gx, ref_gw = x.grad.clone(), layer.weight.grad.clone()
    x.grad = layer.weight.grad = None
    low = layer.weight.detach().to(BF)
    with torch.autocast("cpu", dtype=BF):
        out = cached_linear(x, layer, low)
    out.backward(gy)
    assert out.dtype == BF and torch.equal(out, ref)
    assert layer.weight.grad.dtype == torch.float32 and not low.requires_grad
    bound_x = 2 * (U + 40 * V) * _abs_product(gy, low.float()).reshape(x.shape)
    bound_w = 2 * (U + 21 * V) * _abs_product(gy.reshape(-1, 40).t(), x.detach().to(BF).reshape(-1, 48))
    assert ((x.grad - ref_gx).double().abs() <= bound_x).all()
    assert ((layer.weight.grad - ref_gw).double().abs() <= bound_w).all()
    # the bound is not vacuous: a copy one bf16 step stale breaks the forward's equality
    with torch.autocast("cpu", dtype=BF):
        stale = cached_linear(x, layer, (layer.weight.detach() * (1 + 4 * U)).to(BF))
    assert not torch.equal(stale, ref)


def test_weight_cache_is_the_cast_and_follows_masters_changed_in_place():
    torch.manual_seed(0)
    model = LlamaCausalLM(toy_shape(num_hidden_layers=2))
    init_weights(model, 0)
    cache = WeightCache(model, BF)
    cache.ensure_fresh()  # the first call writes every copy
    pairs = [(model.model.layers[b].get_submodule(f"{part}.{n}").weight, c)
             for b, parts in cache.blocks.items() for part, lins in parts.items() for n, c in lins.items()]
    pairs.append((model.head_weight(), cache.head))
    assert len(pairs) == 2 * 7 + 1
    assert all(torch.equal(c, m.detach().to(BF)) for m, c in pairs)
    q = cache.blocks["1"]["self_attn"]["q_proj"]
    q.zero_()  # the copy alone changed: ensure_fresh trusts unchanged masters and leaves it
    cache.ensure_fresh()
    assert not q.any()
    with torch.no_grad():
        model.model.layers["0"].mlp.up_proj.weight.mul_(2.0)  # an in-place change of one master
    cache.ensure_fresh()
    assert all(torch.equal(c, m.detach().to(BF)) for m, c in pairs)
    with pytest.raises(ValueError, match="lower compute dtype"):
        WeightCache(model, torch.float32)


def _engines(dirs, **switches):
    cfg = replace(engine_config({"microbatch_size": 2, "max_grad_norm": 1.0}), compute_dtype="bfloat16")
    make = lambda c: build_engine(Group(0, 1, CPU), str(dirs[0]), str(dirs[1]), even_layout(3, 1), c,
                                  {"default": GroupConfig(**OPT)})
    return make(cfg), make(replace(cfg, **switches))


def test_engine_with_the_weight_cache_has_autocast_losses_even_after_a_checkpoint_load(student_reference):
    """With the copy the forward is the autocast forward bit for bit (same bf16 operands, the head's copy
    included), so every update's loss sums are equal as long as both engines hold the same masters:
    after loading the plain engine's state into the cached one, the copy must be rewritten (the masters'
    version counters moved) or the next losses differ."""
    plain, cached = _engines(student_reference, weight_cache="on")
    assert cached.weight_cache is not None and plain.weight_cache is None
    batches = [records_from_json(rows) for rows in make_batches(n_updates=4)]
    for i in range(3):
        a, b = plain.update(batches[i]), cached.update(batches[i])
        assert a.parts == b.parts
        plain.update(batches[3])  # moves the plain engine's masters away from the cached engine's
        cached.optimizer.load_param_states(plain.optimizer.param_states())


def test_fused_norm_is_the_unfused_norm_rounded_as_autocast_rounds_it():
    """rms_norm returns the unfused module's FP32 product rounded to bf16 (the rounding autocast applies
    when the next matmul reads it), so values and gradients are the same bits: derived bound 0."""
    gen = torch.Generator().manual_seed(1)
    x = _bf16(4, 9, 64, gen=gen).requires_grad_()
    delta = _bf16(4, 9, 64, gen=gen)
    w = (1 + 0.1 * torch.randn(64, generator=gen)).requires_grad_()
    gy = _bf16(4, 9, 64, gen=gen)
    norm = RMSNorm(64, 1e-5)
    with torch.no_grad():
        norm.weight.copy_(w)
    s = x + delta
    ref = norm(s)
    ref.to(BF).backward(gy)
    s2, out = fused.add_rms_norm(x.detach().requires_grad_(), delta, w, 1e-5)
    assert out.dtype == BF and torch.equal(out, ref.to(BF)) and torch.equal(s2, s)
    x2 = x.detach().requires_grad_()
    fused.rms_norm(x2 + delta, w, 1e-5).backward(gy)
    assert torch.equal(x2.grad, x.grad) and torch.equal(w.grad, norm.weight.grad)


def test_fused_swiglu_backward_is_within_three_bf16_roundings_of_autograds():
    """Forward: the same expression, equal bits. Backward, against the exact value e (FP64 from the same
    bf16 inputs): the fused path computes in FP32 and rounds once (|err| <= u |e| + c v s); autograd's
    rounds silu(g) to bf16 in forward and each product once (d_up: 2 roundings; d_gate: dy*up, then
    silu_backward: 2), so |err| <= (2u + u^2) |e| + c v s. Together
    |fused - autograd| <= (3u + u^2) |e| + 2 c v s, with s = |dy| |up| (1 + |g|) for d_gate and
    s = |dy| |g| for d_up the scale of the FP32 terms and c = 8 FP32 operations."""
    gen = torch.Generator().manual_seed(2)
    g, up, dy = (_bf16(6, 33, 128, gen=gen) * 3 for _ in range(3))
    ga, ua = g.clone().requires_grad_(), up.clone().requires_grad_()
    gb, ub = g.clone().requires_grad_(), up.clone().requires_grad_()
    ya, yb = F.silu(ga) * ua, fused.swiglu(gb, ub)
    assert torch.equal(ya, yb)
    ya.backward(dy)
    yb.backward(dy)
    gd, ud, dd = g.double(), up.double(), dy.double()
    sig = torch.sigmoid(gd)
    e_gate, e_up = dd * ud * sig * (1 + gd * (1 - sig)), dd * gd * sig
    s_gate, s_up = dd.abs() * ud.abs() * (1 + gd.abs()), dd.abs() * gd.abs()
    for a, b, e, s in ((ga.grad, gb.grad, e_gate, s_gate), (ua.grad, ub.grad, e_up, s_up)):
        assert a.dtype == b.dtype == BF
        bound = (3 * U + U * U) * e.abs() + 16 * V * s
        assert ((a.double() - b.double()).abs() <= bound).all()
    assert not torch.equal(ga.grad, gb.grad)  # one rounding fewer is visible: the check compares two paths


def test_multi_tensor_squared_norms_match_per_tensor_fp64_within_fp32_accumulation():
    """The per-tensor path accumulates in FP64 (error ~ n 2^-53, negligible). The multi-tensor kernel
    accumulates in its output dtype (FP64 here, CUDA included); the bound asserted is the weaker one that
    would hold even for FP32 accumulation: for n non-negative squares each rounded (v) and summed in any
    order, |s_hat - s| <= (n + 1) v s; the norm's sqrt and the final square add 2v: relative (n + 3) v."""
    gen = torch.Generator().manual_seed(3)
    tensors = [torch.randn(*shape, generator=gen) * scale
               for shape, scale in (((70_001,), 1.0), ((64, 48), 1e-3), ((5,), 30.0), ((1,), 0.0), ((300, 7), 1.0))]
    per = squared_norms(tensors, multi_tensor=False)
    multi = squared_norms(tensors, multi_tensor=True)
    assert per.dtype == multi.dtype == torch.float64 and per.shape == (5,)
    exact = torch.stack([t.double().pow(2).sum() for t in tensors])
    for i, t in enumerate(tensors):
        assert abs(multi[i] - exact[i]) <= (t.numel() + 3) * V * exact[i]
        assert abs(per[i] - exact[i]) <= 1e-12 * exact[i]


def _train_foreach(dirs, group, batches):
    cfg = replace(engine_config({"microbatch_size": 2, "max_grad_norm": 0.05}), foreach_norm="on")
    eng = build_engine(group, str(dirs[0]), str(dirs[1]), even_layout(3, group.world), cfg,
                       {"default": GroupConfig(**OPT)})
    assert eng.foreach_norm
    losses = [{k: v for k, v in eng.update(records_from_json(rows)).to_json().items() if k != "seconds"}
              for rows in batches]
    state = {f"{k}/{n}": st[k].detach().clone() for n, st in eng.optimizer.param_states().items()
             for k in ("param", "exp_avg", "exp_avg_sq")}
    return {"losses": losses, "state": state}


def test_multi_tensor_norms_keep_the_clip_bit_identical_across_worker_counts(student_reference):
    """Each tensor's norm depends on that tensor alone, and the canonical sum is unchanged, so 1 and 2
    stages give the same learned state bit for bit with foreach_norm on (the clip acts: factor < 1)."""
    batches = make_batches(n_updates=2)
    one = _train_foreach(student_reference, Group(0, 1, CPU), batches)
    assert any(u["clip_factor"] < 1.0 for u in one["losses"])
    ranks = run_ranks(2, lambda g: _train_foreach(student_reference, g, batches), 10.0)
    assert all(r["losses"] == one["losses"] for r in ranks)
    state = {k: v for r in ranks for k, v in r["state"].items()}
    assert set(state) == set(one["state"])
    assert [k for k in state if not torch.equal(state[k], one["state"][k])] == []


def test_bench_runs_every_before_after_variant_on_a_tiny_cpu_shape(tmp_path):
    path = Path(__file__).resolve().parents[1] / "bench" / "update_throughput.py"
    spec = importlib.util.spec_from_file_location("update_throughput_smoke", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    sections = "kit,norm_check,kit_before,kit_no_weight_cache,kit_unfused,kit_per_tensor_norm,kit_sdpa"
    rc = bench.main(["--tiny", "--fast-paths", "on", "--sections", sections, "--sdpa-backends", "math",
                     "--warmup", "1", "--steps", "1", "--seq", "16", "--out", str(tmp_path)])
    rows = {r["row"]: r for r in map(json.loads, (tmp_path / "update_throughput.jsonl").read_text().splitlines())}
    assert rc == 0, rows
    switches = lambda r: (r["weight_cache"], r["fused_elementwise"], r["foreach_norm"])
    assert switches(rows["kit_equal_work"]) == (True, True, True)
    assert switches(rows["kit_equal_work_before"]) == (False, False, False)
    assert switches(rows["kit_equal_work_no_weight_cache"]) == (False, True, True)
    assert switches(rows["kit_equal_work_unfused"]) == (True, False, True)
    assert switches(rows["kit_equal_work_per_tensor_norm"]) == (True, True, False)
    assert rows["kit_equal_work_sdpa_math"]["sdpa_backend"] == "math"
    check = rows["grad_norm_check"]
    assert check["params"] == len(list(LlamaCausalLM(toy_shape()).parameters()))
    assert 0 <= check["rel_diff_grad_norm"] <= 1e-6 and check["grad_norm_per_tensor"] > 0
