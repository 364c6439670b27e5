"""PowerSGD compressor: exactness at full rank, error feedback, torch's hook, zeros, warm-up, traffic, resume."""

from __future__ import annotations

import hashlib
import math
import threading

import numpy as np
import pytest
import torch

from kit.train.powersgd import PowerSGDCompressor, PowerSGDConfig, draw_q, orthonormalize_

# orthonormalize_ of test_orthonormalize_is_exactly_scale_free_and_pinned's input, under the numeric profile
PINNED_ORTHONORMALIZE_SHA256 = "1cad1c267ed392f551f8c5914e11766ad194f8a3007475a41040b183fa2812b3"
SHAPES = {"a.weight": (12, 20), "b.weight": (9, 4, 5), "a.bias": (12,), "small": (3, 3)}


def identity(tensors):
    """The all-reduce of a world of one."""


def grads_for(shapes, gen, scale=1.0):
    return {n: torch.randn(*s, generator=gen) * scale for n, s in shapes.items()}


def run_ranks(per_rank_fns):
    """Run one callable per simulated rank in threads; each gets that rank's allreduce_mean.

    The all-reduce stashes clones, waits for every rank, then writes the mean summed in rank order,
    so every rank gets bitwise-identical values, as a ring all-reduce gives.
    """
    world = len(per_rank_fns)
    barrier = threading.Barrier(world, timeout=20)
    slots: list = [None] * world
    results: list = [None] * world
    errors: list = []

    def allreduce_for(rank):
        def allreduce_mean(tensors):
            slots[rank] = [t.clone() for t in tensors]
            barrier.wait()
            for i, t in enumerate(tensors):
                total = slots[0][i].clone()
                for other in range(1, world):
                    total += slots[other][i]
                t.copy_(total / world)
            barrier.wait()  # nobody restashes before every rank has read
        return allreduce_mean

    def worker(rank):
        try:
            results[rank] = per_rank_fns[rank](allreduce_for(rank))
        except Exception as e:  # noqa: BLE001 - re-raised in the main thread below
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def test_config_refuses_bad_fields():
    with pytest.raises(ValueError, match=r"PowerSGDConfig\.rank: expected an integer >= 1"):
        PowerSGDConfig(rank=0)
    with pytest.raises(ValueError, match=r"PowerSGDConfig\.orthogonalization_epsilon"):
        PowerSGDConfig(orthogonalization_epsilon=0.0)
    with pytest.raises(ValueError, match=r"unknown PowerSGDConfig fields \['bogus'\]"):
        PowerSGDConfig.from_dict({"rank": 4, "bogus": 1})
    assert PowerSGDConfig.from_dict(PowerSGDConfig(rank=3).to_dict()) == PowerSGDConfig(rank=3)


def test_plan_sends_vectors_small_and_unprofitable_tensors_dense():
    comp = PowerSGDCompressor(PowerSGDConfig(rank=2, min_compression_numel=20), SHAPES)
    assert sorted(comp.matrices) == ["a.weight", "b.weight"]
    assert comp.matrices["b.weight"].n == 9 and comp.matrices["b.weight"].m == 20
    assert sorted(comp.dense_names) == ["a.bias", "small"]
    # rank * (n + m) >= n * m: (8, 8) at rank 4 is not worth compressing
    assert PowerSGDCompressor(PowerSGDConfig(rank=4, min_compression_numel=0), {"w": (8, 8)}).dense_names == ["w"]


def test_reduce_refuses_wrong_names_and_shapes():
    comp = PowerSGDCompressor(PowerSGDConfig(rank=2, min_compression_numel=0), SHAPES)
    g = grads_for(SHAPES, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"missing \['small'\]"):
        comp.reduce({k: v for k, v in g.items() if k != "small"}, identity)
    g["a.weight"] = torch.zeros(20, 12)
    with pytest.raises(ValueError, match=r"'a.weight' expected floating shape \(12, 20\)"):
        comp.reduce(g, identity)


def full_rank_config(**kw):
    # rate 0 forces compression even where P and Q are no smaller than M, as in torch's hook
    return PowerSGDConfig(rank=64, warmup_updates=1, min_compression_numel=0, min_compression_rate=0.0, **kw)


def test_full_rank_single_process_equals_dense():
    comp = PowerSGDCompressor(full_rank_config(), SHAPES)
    gen = torch.Generator().manual_seed(1)
    for _ in range(4):
        g = grads_for(SHAPES, gen)
        out = comp.reduce(g, identity)
        for name in SHAPES:
            torch.testing.assert_close(out[name], g[name], atol=1e-5, rtol=0)
    assert comp.stats()["calls"] == 4 and comp.last_call.warmup is False
    assert sorted(comp.matrices) == ["a.weight", "b.weight", "small"]


def test_full_rank_two_ranks_equals_mean_and_q_agrees():
    gen = torch.Generator().manual_seed(2)
    steps = [[grads_for(SHAPES, gen) for _ in range(2)] for _ in range(4)]
    comps = [PowerSGDCompressor(full_rank_config(), SHAPES) for _ in range(2)]

    def rank_fn(r):
        return lambda allreduce: [comps[r].reduce(step[r], allreduce) for step in steps]

    outs = run_ranks([rank_fn(0), rank_fn(1)])
    for t, step in enumerate(steps):
        for name in SHAPES:
            mean = (step[0][name] + step[1][name]) / 2
            torch.testing.assert_close(outs[0][t][name], mean, atol=1e-5, rtol=0)
            assert torch.equal(outs[0][t][name], outs[1][t][name])
    q0, q1 = comps[0].state_tensors(), comps[1].state_tensors()
    assert any(k.startswith("q/") for k in q0)
    for key in q0:
        if key.startswith("q/"):
            assert torch.equal(q0[key], q1[key])


def test_error_feedback_running_sums_differ_by_the_error_buffer():
    n, m = 24, 16
    gen = torch.Generator().manual_seed(3)
    low_rank = torch.randn(n, 3, generator=gen) @ torch.randn(3, m, generator=gen)
    comp = PowerSGDCompressor(PowerSGDConfig(rank=2, warmup_updates=0, min_compression_numel=0), {"w": (n, m)})
    sent_sum, true_sum = torch.zeros(n, m, dtype=torch.float64), torch.zeros(n, m, dtype=torch.float64)
    norms = []
    for _ in range(50):
        g = low_rank + 0.5 * torch.randn(n, m, generator=gen)
        sent_sum += comp.reduce({"w": g}, identity)["w"].double()
        true_sum += g.double()
        error = comp.state_tensors()["error/w"]
        gap = torch.linalg.norm(sent_sum - true_sum)
        assert math.isclose(gap.item(), torch.linalg.norm(error.double()).item(), rel_tol=1e-4)
        # the identity itself: sum(sent) = sum(true) - e
        torch.testing.assert_close(sent_sum - true_sum, -error.double(), atol=1e-4, rtol=0)
        norms.append(gap.item())
    grad_norm = torch.linalg.norm(low_rank).item()
    assert norms[-1] < 3 * grad_norm  # bounded; without feedback the dropped mass adds up every step
    assert max(norms[25:]) < 1.5 * max(norms[:25])  # no linear growth


def test_agrees_with_torch_powersgd_hook(tmp_path):
    """torch's powerSGD_hook through a world-of-one gloo DDP on CPU, against this compressor.

    Settings that coincide: matrix_approximation_rank = rank = 2 (torch's Gram-Schmidt against this
    kit's Householder, equal up to rounding on full-rank gradients); start_powerSGD_iter = warmup_updates (both send the first that many
    calls dense); min_compression_rate equal (biases are sent dense by both); use_error_feedback and
    warm_start on; Q's first draw copied from torch's RNG with set_q. In a world of one torch's
    error feedback on dense tensors is zero, as here (this kit keeps none for dense tensors).
    """
    dist = pytest.importorskip("torch.distributed")
    try:
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps
    except ImportError as e:  # pragma: no cover - depends on the torch build
        pytest.skip(f"installed torch lacks the PowerSGD hook: {e}")
    if not dist.is_available():
        pytest.skip("installed torch has no torch.distributed")
    s = {"rank": 2, "warmup": 2, "rate": 2, "eps": 1e-8, "seed": 0}
    own_group = not dist.is_initialized()
    if own_group:
        dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(10, 12), torch.nn.Tanh(), torch.nn.Linear(12, 8))
        names = {id(p): n for n, p in model.named_parameters()}
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        state = ps.PowerSGDState(
            process_group=None, matrix_approximation_rank=s["rank"], start_powerSGD_iter=s["warmup"],
            min_compression_rate=s["rate"], use_error_feedback=True, warm_start=True,
            orthogonalization_epsilon=s["eps"], random_seed=s["seed"])
        calls = []

        def recording_hook(st, bucket):
            assert bucket.index() == 0 and bucket.is_last(), "the test model must fit one bucket"
            order = [names[id(p)] for p in bucket.parameters()]
            calls.append((order, {n: g.detach().clone() for n, g in zip(order, bucket.gradients())}))
            return ps.powerSGD_hook(st, bucket)

        ddp.register_comm_hook(state, recording_hook)
        gen = torch.Generator().manual_seed(5)
        reference = []
        for _ in range(7):
            ddp.zero_grad()
            ddp(torch.randn(6, 10, generator=gen)).pow(2).sum().backward()
            reference.append({n: p.grad.detach().clone() for n, p in model.named_parameters()})
    finally:
        if own_group:
            dist.destroy_process_group()

    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    comp = PowerSGDCompressor(PowerSGDConfig(
        rank=s["rank"], warmup_updates=s["warmup"], min_compression_numel=0, min_compression_rate=s["rate"],
        orthogonalization_epsilon=s["eps"], warm_start=True, seed=s["seed"]), shapes)
    assert sorted(comp.matrices) == ["0.weight", "2.weight"]
    # torch draws the first Qs at its first compressed call: one seed from numpy's RandomState, then
    # randn per compressed tensor in bucket order (grouped by shape; the shapes here are distinct).
    order = [n for n in calls[s["warmup"]][0] if n in comp.matrices]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(np.random.RandomState(s["seed"]).randint(1_000_000_000))
        for name in order:
            mat = comp.matrices[name]
            comp.set_q(name, torch.randn(1, mat.m, mat.r)[0])
    for step, ((_, grads), expected) in enumerate(zip(calls, reference)):
        out = comp.reduce(grads, identity)
        for name in shapes:
            if step < s["warmup"]:
                assert torch.equal(out[name], grads[name])
            torch.testing.assert_close(out[name], expected[name], atol=1e-5, rtol=1e-4)
        if step >= s["warmup"]:
            # compression really happened: the sent weights are rank 2, not the 12x10 gradient
            assert torch.linalg.matrix_rank(out["0.weight"]).item() == 2
            assert not torch.allclose(out["0.weight"], grads["0.weight"], atol=1e-3)


def test_orthonormalize_keeps_a_zero_column_zero_and_finite():
    gen = torch.Generator().manual_seed(6)
    mat = torch.randn(1, 7, 3, generator=gen)
    mat[:, :, 1] = 0
    dead = orthonormalize_(mat)
    assert dead.tolist() == [[False, True, False]]
    assert torch.isfinite(mat).all()
    assert torch.equal(mat[0, :, 1], torch.zeros(7))
    kept = mat[0][:, [0, 2]]
    torch.testing.assert_close(kept.T @ kept, torch.eye(2), atol=1e-5, rtol=0)


def test_zero_gradients_give_zeros_then_recover():
    shapes = {"w": (16, 12), "v": (10, 8)}
    comp = PowerSGDCompressor(PowerSGDConfig(rank=2, warmup_updates=1, min_compression_numel=0), shapes)
    zeros = {n: torch.zeros(s) for n, s in shapes.items()}
    comp.reduce(zeros, identity)  # warm-up
    for _ in range(2):  # twice: the second starts from the Q the zero gradient left (all zero)
        out = comp.reduce(zeros, identity)
        for name, shape in shapes.items():
            assert torch.equal(out[name], torch.zeros(shape))
    assert all(torch.isfinite(t).all() for t in comp.state_tensors().values())
    # a zero column and a zero row inside a gradient stay finite and zero in the approximation
    gen = torch.Generator().manual_seed(7)
    g = {n: torch.randn(s, generator=gen) for n, s in shapes.items()}
    g["w"][:, 3] = 0
    g["w"][5, :] = 0
    out = comp.reduce(g, identity)
    assert all(torch.isfinite(t).all() for t in out.values())
    assert out["w"][:, 3].abs().max().item() < 1e-6 and out["w"][5, :].abs().max().item() < 1e-6
    # after zero gradients warm start must not stay stuck at zero: a rank-1 gradient comes back exact
    fresh = PowerSGDCompressor(PowerSGDConfig(rank=2, warmup_updates=0, min_compression_numel=0), shapes)
    fresh.reduce(zeros, identity)
    rank_one = {n: torch.randn(s[0], 1, generator=gen) @ torch.randn(1, s[1], generator=gen) for n, s in shapes.items()}
    out = fresh.reduce(rank_one, identity)
    for name in shapes:
        torch.testing.assert_close(out[name], rank_one[name], atol=1e-5, rtol=1e-5)


def test_warmup_sends_exact_dense_means_and_records_warmup_traffic():
    config = PowerSGDConfig(rank=2, warmup_updates=3, min_compression_numel=0)
    gen = torch.Generator().manual_seed(8)
    steps = [[grads_for(SHAPES, gen) for _ in range(2)] for _ in range(4)]
    comps = [PowerSGDCompressor(config, SHAPES) for _ in range(2)]

    def rank_fn(r):
        return lambda allreduce: [comps[r].reduce(step[r], allreduce) for step in steps]

    outs = run_ranks([rank_fn(0), rank_fn(1)])
    for t in range(3):
        for name in SHAPES:
            assert torch.equal(outs[0][t][name], (steps[t][0][name] + steps[t][1][name]) / 2)
    assert not torch.allclose(outs[0][3]["a.weight"], (steps[3][0]["a.weight"] + steps[3][1]["a.weight"]) / 2)
    stats = comps[0].stats()
    dense = sum(math.prod(s) for s in SHAPES.values()) * 4
    assert stats["calls"] == 4 and stats["warmup_calls"] == 3
    assert stats["dense_equivalent_bytes"] == 4 * dense
    assert stats["dense_equivalent_bytes_after_warmup"] == dense
    assert stats["compressed_bytes"] == 3 * dense + stats["compressed_bytes_after_warmup"]
    assert stats["compressed_bytes_after_warmup"] == ((12 + 20) * 2 + (9 + 20) * 2 + 12 + 9) * 4


def test_traffic_for_a_1024_square_matrix_at_rank_4_and_call_count():
    shapes = {"w": (1024, 1024), "bias": (1024,)}
    comp = PowerSGDCompressor(PowerSGDConfig(rank=4, warmup_updates=1), shapes)
    gen = torch.Generator().manual_seed(9)
    g = grads_for(shapes, gen)
    lists = []

    def counting(tensors):
        lists.append([t.numel() for t in tensors])

    comp.reduce(g, counting)
    assert lists == [[1024 * 1024 + 1024]] and comp.last_call.warmup is True
    assert comp.last_call.compressed_bytes == (1024 * 1024 + 1024) * 4
    lists.clear()
    comp.reduce(g, counting)
    record = comp.last_call.to_json()
    assert lists == [[1024], [1024 * 4], [1024 * 4]]  # dense, then P, then Q
    assert record["allreduce_calls"] == 3 and record["warmup"] is False
    assert record["p_bytes"] + record["q_bytes"] == (1024 * 4 + 1024 * 4) * 4
    assert record["compressed_bytes"] == (1024 * 4 + 1024 * 4) * 4 + 1024 * 4
    assert record["dense_equivalent_bytes"] == (1024 * 1024 + 1024) * 4
    assert comp.stats()["compression_ratio_after_warmup"] == pytest.approx((1024 * 1025) / (8192 + 1024))


@pytest.mark.parametrize("warm_start", [True, False])
def test_resumed_state_continues_bit_identically(warm_start):
    config = PowerSGDConfig(rank=2, warmup_updates=2, min_compression_numel=0, warm_start=warm_start)
    gen = torch.Generator().manual_seed(10)
    seq = [grads_for(SHAPES, gen) for _ in range(9)]
    seq[3] = {n: torch.zeros(s) for n, s in SHAPES.items()}  # exercises the dead-column re-draw
    first = PowerSGDCompressor(config, SHAPES)
    for g in seq[:5]:
        first.reduce(g, identity)
    tensors, meta = first.state_tensors(), first.state_meta()
    assert ("q/a.weight" in tensors) == warm_start and "error/a.weight" in tensors
    cont = [first.reduce(g, identity) for g in seq[5:]]
    resumed = PowerSGDCompressor(config, SHAPES)
    resumed.load_state(tensors, meta)
    again = [resumed.reduce(g, identity) for g in seq[5:]]
    for a, b in zip(cont, again):
        for name in SHAPES:
            assert torch.equal(a[name], b[name])
    for key, t in first.state_tensors().items():
        assert torch.equal(t, resumed.state_tensors()[key])
    assert first.stats() == resumed.stats()


def test_load_state_refuses_mismatches():
    config = PowerSGDConfig(rank=2, warmup_updates=1, min_compression_numel=0)
    comp = PowerSGDCompressor(config, SHAPES)
    gen = torch.Generator().manual_seed(11)
    for _ in range(3):
        comp.reduce(grads_for(SHAPES, gen), identity)
    tensors, meta = comp.state_tensors(), comp.state_meta()
    other = PowerSGDCompressor(PowerSGDConfig(rank=3, warmup_updates=1, min_compression_numel=0), SHAPES)
    with pytest.raises(ValueError, match=r"config field 'rank' is 2 in the checkpoint but 3 here"):
        other.load_state(tensors, meta)
    fresh = PowerSGDCompressor(config, SHAPES)
    with pytest.raises(ValueError, match=r"tensors expected keys .*error/a.weight"):
        fresh.load_state({k: v for k, v in tensors.items() if k != "error/a.weight"}, meta)
    with pytest.raises(ValueError, match=r"'q/a.weight' expected float32 \(20, 2\)"):
        fresh.load_state({**tensors, "q/a.weight": torch.zeros(20, 2, dtype=torch.float64)}, meta)
    with pytest.raises(ValueError, match=r"field 'format'"):
        fresh.load_state(tensors, {**meta, "format": "other"})


def test_error_buffers_are_cpu_float32_and_outputs_keep_the_grad_dtype():
    shapes = {"w": (16, 12)}
    comp = PowerSGDCompressor(PowerSGDConfig(rank=2, warmup_updates=0, min_compression_numel=0), shapes)
    assert comp.pin_memory is torch.cuda.is_available()
    g = torch.randn(16, 12, generator=torch.Generator().manual_seed(12)).to(torch.bfloat16)
    out = comp.reduce({"w": g}, identity)
    assert out["w"].dtype == torch.bfloat16
    error = comp._errors["w"]
    assert error.device.type == "cpu" and error.dtype == torch.float32
    # the error includes the rounding of what was sent, so the running-sum identity stays exact
    torch.testing.assert_close(out["w"].float() + error, g.float(), atol=1e-6, rtol=0)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"pin_memory: True needs"):
            PowerSGDCompressor(PowerSGDConfig(pin_memory=True), shapes)


def test_initial_q_is_the_same_for_every_instance_and_differs_by_name():
    a = PowerSGDCompressor(PowerSGDConfig(rank=2, min_compression_numel=0), SHAPES).state_tensors()
    b = PowerSGDCompressor(PowerSGDConfig(rank=2, min_compression_numel=0), SHAPES).state_tensors()
    assert torch.equal(a["q/a.weight"], b["q/a.weight"])
    assert torch.equal(a["q/a.weight"], draw_q(0, "a.weight", "init", 20, 2))
    assert not torch.equal(a["q/a.weight"], draw_q(0, "b.weight", "init", 20, 2))
    assert not torch.equal(a["q/a.weight"], draw_q(1, "a.weight", "init", 20, 2))


def _live_orthogonality(q: torch.Tensor, dead: torch.Tensor) -> float:
    live = q[:, ~dead].double()
    return (live.T @ live - torch.eye(live.shape[1], dtype=torch.float64)).abs().max().item()


def test_orthonormalize_is_rank_robust_and_keeps_the_signal():
    """Issue 49's matrices: Gram-Schmidt gave columns parallel to 1.0 on rank 10 and 0.19 at condition 1e8."""
    gen = torch.Generator().manual_seed(13)
    rank10 = torch.randn(512, 10, generator=gen) @ torch.randn(10, 32, generator=gen)
    u = torch.linalg.qr(torch.randn(512, 32, generator=gen, dtype=torch.float64))[0]
    v = torch.linalg.qr(torch.randn(32, 32, generator=gen, dtype=torch.float64))[0]
    conditioned = {c: ((u * torch.logspace(0, -c, 32, dtype=torch.float64)) @ v.T).float() for c in (4, 6, 8)}
    dead_first = torch.randn(512, 32, generator=gen)
    dead_first[:, :5] = 0  # dead columns before live ones: the live ones keep all of their signal
    for a in (rank10, *conditioned.values(), dead_first):
        q = a.clone().unsqueeze(0)
        dead = orthonormalize_(q)[0]
        assert _live_orthogonality(q[0], dead) <= 1e-6
        assert torch.equal(q[0][:, dead], torch.zeros(512, int(dead.sum())))
        assert (torch.linalg.norm((q[0] @ (q[0].T @ a) - a).double()) / torch.linalg.norm(a.double())).item() <= 1e-5
    assert 19 <= int(orthonormalize_(rank10.clone().unsqueeze(0)).sum()) <= 22
    assert orthonormalize_(dead_first.clone().unsqueeze(0))[0].nonzero().flatten().tolist() == [0, 1, 2, 3, 4]


def test_orthonormalize_is_exactly_scale_free_and_pinned():
    """A power of two changes no bit (the matrix is scaled by an exact power of two first, and no
    epsilon is absolute); plain torch ops of fixed order give the same bytes on any x86 CPU under the
    numeric profile, pinned here."""
    base = torch.randn(3, 64, 16, generator=torch.Generator().manual_seed(14))
    base[1, :, 4] = base[1, :, 2] * 0.5  # one exactly dependent column
    ref = base.clone()
    dead = orthonormalize_(ref)
    for k in (-100, -30, 7, 40):
        x = base * 2.0**k
        assert torch.equal(orthonormalize_(x), dead) and torch.equal(x, ref)
    zero = torch.zeros(1, 8, 3)
    assert orthonormalize_(zero).all() and torch.equal(zero, torch.zeros(1, 8, 3))
    assert hashlib.sha256(ref.numpy().tobytes()).hexdigest() == PINNED_ORTHONORMALIZE_SHA256


def test_column_counters_record_dead_and_redrawn_columns_and_survive_resume():
    shapes = {"w": (64, 48)}
    config = PowerSGDConfig(rank=8, warmup_updates=0, min_compression_numel=0)
    comp = PowerSGDCompressor(config, shapes)
    gen = torch.Generator().manual_seed(15)
    rank3 = torch.randn(64, 3, generator=gen) @ torch.randn(3, 48, generator=gen)
    comp.reduce({"w": rank3}, identity)
    first = comp.last_call.to_json()["columns"]
    assert first["p_dead"] >= 3 and first["q_dead"] == first["q_redrawn"] == 0  # P = M Q has rank 3 of 8
    comp.reduce({"w": rank3}, identity)  # warm start: Q = M^T P kept the dead columns, which are re-drawn
    assert comp.last_call.columns.q_redrawn == comp.last_call.columns.q_dead >= 3
    stats = comp.stats()["columns"]
    assert stats["calls_with_dead_p"] == 2 and stats["p_dead"] >= 6
    meta = comp.state_meta()
    assert meta["format"] == "kit.powersgd/2" and meta["columns"] == stats
    with pytest.raises(ValueError, match=r"field 'columns' expected integer counters"):
        PowerSGDCompressor(config, shapes).load_state(comp.state_tensors(), {**meta, "columns": {}})
    with pytest.raises(ValueError, match=r"field 'format' expected 'kit.powersgd/2', got 'kit.powersgd/1'"):
        PowerSGDCompressor(config, shapes).load_state(comp.state_tensors(), {**meta, "format": "kit.powersgd/1"})
