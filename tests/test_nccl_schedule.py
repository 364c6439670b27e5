"""The stage schedule under NCCL's point-to-point rules (tests/support/nccl_semantics.py), on CPU threads.

The old GPipe order deadlocks there, as it did on two H200s; the tick schedule passes at 2 and 3
stages, and its learned state is bit-identical to the old order's, to one worker's, and to gloo's."""

from __future__ import annotations

import re
import time

import pytest
import torch
from safetensors import safe_open
from support.engine import OPT, make_batches
from support.engine_workers import build_engine, engine_config, launch_env, records_from_json
from support.nccl_semantics import NcclDeadlock, legacy_update, run_ranks

from kit.distributed.group import Group
from kit.distributed.launch import launch
from kit.distributed.pipeline import in_flight, n_ticks, tick_receives
from kit.model.shard import even_layout
from kit.train.optim import GroupConfig

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: one thread, as the launcher's workers


@pytest.fixture(scope="module")
def dirs(student_reference):
    return student_reference


def _train(dirs, group, batches, legacy=False, max_norm=0.05):
    cfg = engine_config({"microbatch_size": 2, "max_grad_norm": max_norm})
    eng = build_engine(group, str(dirs[0]), str(dirs[1]), even_layout(3, group.world), cfg,
                       {"default": GroupConfig(**OPT)})
    losses = []
    for rows in batches:
        res = (legacy_update(eng, records_from_json(rows)) if legacy else eng.update(records_from_json(rows)))
        losses.append({k: v for k, v in res.to_json().items() if k != "seconds"})
    state = {}
    for n, st in eng.optimizer.param_states().items():
        for k in ("param", "exp_avg", "exp_avg_sq"):
            state[f"{k}/{n}"] = st[k].detach().clone()
        state[f"age/{n}"] = torch.tensor(st["age"])
    return {"losses": losses, "state": state, "bytes_sent": group.bytes_sent}


def _threaded(dirs, world, batches, legacy=False, rendezvous=True, timeout_s=10.0):
    results = run_ranks(world, lambda g: _train(dirs, g, batches, legacy), timeout_s, rendezvous)
    assert all(r["losses"] == results[0]["losses"] for r in results)
    return {"losses": results[0]["losses"], "state": {k: v for r in results for k, v in r["state"].items()}}


def _assert_same_state(a, b):
    assert set(a) == set(b) and a
    bad = [k for k in a if not torch.equal(a[k], b[k])]
    assert not bad, bad[:5]


def test_old_order_deadlocks_under_nccl_rules_with_a_bounded_error_naming_the_ranks(dirs):
    t0 = time.monotonic()
    with pytest.raises(NcclDeadlock) as info:
        _threaded(dirs, 2, make_batches(n_updates=1), legacy=True, timeout_s=2.0)
    msg = str(info.value)
    print(msg)
    assert time.monotonic() - t0 < 20
    # rank 0 is stuck sending its next microbatch forward while rank 1 is stuck sending its first one
    # back; whichever wait began first times out first and reports the other
    zero = r"send #3 to rank 1 \(896 elements\)"  # mb 0: activations, reference rows; mb 1's activations
    one = r"send #1 to rank 0 \(832 elements\)"  # mb 0's activations after rank 1's blocks
    assert (re.fullmatch(rf"rank 0 {zero} waited 2 s; rank 1 is blocked in {one}", msg)
            or re.fullmatch(rf"rank 1 {one} waited 2 s; rank 0 is blocked in {zero}", msg)), msg


def test_old_order_with_buffered_sends_still_runs(dirs):
    # the same order with gloo's buffered sends: what every gloo test saw (and why they passed)
    out = _threaded(dirs, 2, make_batches(n_updates=1), legacy=True, rendezvous=False)
    assert out["losses"][0]["tokens"] > 0


@pytest.mark.parametrize("world", [2, 3])
def test_new_order_passes_under_nccl_rules_bit_identical_to_old_order_and_one_worker(dirs, world):
    batches = make_batches()
    new = _threaded(dirs, world, batches)
    old = _threaded(dirs, world, batches, legacy=True, rendezvous=False)
    one_new = _train(dirs, Group(0, 1, torch.device("cpu")), batches)
    one_old = _train(dirs, Group(0, 1, torch.device("cpu")), batches, legacy=True)
    assert new["losses"] == old["losses"] == one_new["losses"] == one_old["losses"]
    _assert_same_state(new["state"], old["state"])
    _assert_same_state(new["state"], one_new["state"])
    _assert_same_state(one_new["state"], one_old["state"])


def test_new_order_under_nccl_rules_equals_the_gloo_processes(dirs, tmp_path):
    batches = make_batches()
    dump = tmp_path / "gloo"
    dump.mkdir()
    args = {"seed_dir": str(dirs[0]), "reference_dir": str(dirs[1]), "layout": even_layout(3, 2).to_json(),
            "engine": {"microbatch_size": 2, "max_grad_norm": 0.05}, "optimizer": {"default": OPT},
            "batches": batches, "dump_dir": str(dump), "timeout_s": 60}
    results = launch("support.engine_workers:train_worker", args, 2, dump / "run", timeout_s=300, env=launch_env())
    gloo = {}
    for r in range(2):
        with safe_open(str(dump / f"state-{r}.safetensors"), "pt") as f:
            gloo.update({k: f.get_tensor(k) for k in f.keys()})  # noqa: SIM118 (safe_open is no mapping)
    threaded = _threaded(dirs, 2, batches)
    for w in (2, 3):
        state = threaded["state"] if w == 2 else _threaded(dirs, 3, batches)["state"]
        _assert_same_state({k: v for k, v in state.items() if not k.startswith("age/")}, gloo)
    assert [{k: v for k, v in u.items() if k != "seconds"} for u in results[0]["updates"]] == threaded["losses"]


def _simulate(world, m, replay):
    """Replay the tick plan symbolically: per tick, what each rank sends (from the engine's rules) must
    be what its peers receive, in order, per ordered pair; and the saved activations never exceed
    `in_flight`."""
    from kit.distributed.pipeline import bwd_offset

    alive = {r: set() for r in range(world)}
    peak = {r: 0 for r in range(world)}
    for t in range(n_ticks(world, m)):
        sent = {}
        for r in range(world):
            out = []
            i = t - bwd_offset(world, r)
            if 0 <= i < m:
                alive[r].discard(i)
            head = t - world
            fwd = t - r
            if 0 <= fwd < m:
                alive[r].add(fwd)
                peak[r] = max(peak[r], len(alive[r]))
                out += [((r + 1) % world, ("act", fwd))] + ([((r + 1) % world, ("ref", fwd))] if replay[fwd] else [])
            if r == 0 and 0 <= head < m:
                out.append((world - 1, ("grad", head)))
            if r != 0 and 0 <= i < m:
                out.append((r - 1, ("grad", i)))
            for dst, msg in out:
                sent.setdefault((r, dst), []).append(msg)
        got = {}
        for r in range(world):
            for kind, i, src in tick_receives(world, m, r, t, replay):
                kind = {"fwd": "act", "head": "act", "href": "ref"}.get(kind, kind)
                got.setdefault((src, r), []).append((kind, i))
        assert sent == got, (world, m, t)
    assert all(not a for a in alive.values())
    return peak


@pytest.mark.parametrize("world", [1, 2, 3, 4, 5])
def test_tick_plan_matches_sends_and_receives_and_counts_in_flight(world):
    for m in range(1, 10):
        replay = [i % 3 == 1 for i in range(m)]
        peak = _simulate(world, m, replay)
        assert peak == {r: in_flight(world, m, r) for r in range(world)}
    assert [in_flight(2, 8, r) for r in range(2)] == [4, 2]
    assert [in_flight(3, 8, r) for r in range(3)] == [6, 4, 2]


def test_transport_rules_fifo_no_tags_rendezvous_and_bounded_wait():
    # FIFO per ordered pair, shapes free (NCCL matches bytes in order): the k-th send fills the k-th receive
    def swap(g):
        peer = 1 - g.rank
        mine = [torch.full((3,), float(10 * g.rank + k)) for k in range(2)]
        return g.exchange([(t, peer) for t in mine], [((3,), torch.float32, peer)] * 2)

    a, b = run_ranks(2, swap, timeout_s=2.0)
    assert [x.tolist() for x in a] == [[10.0] * 3, [11.0] * 3] and [x.tolist() for x in b] == [[0.0] * 3, [1.0] * 3]

    # both ranks send first (blocking, as NCCL's queued sends block their stream): a bounded deadlock
    def send_first(g):
        g.isend(torch.zeros(5), 1 - g.rank)
        return g.recv((5,), torch.float32, 1 - g.rank)

    with pytest.raises(NcclDeadlock, match=r"rank \d send #1 to rank \d \(5 elements\) waited 1 s; "
                                           r"rank \d is blocked in send #1 to rank \d \(5 elements\)"):
        run_ranks(2, send_first, timeout_s=1.0)
    # the same program with buffered sends (gloo) completes
    assert all(x.shape == (5,) for x in run_ranks(2, send_first, timeout_s=1.0, rendezvous=False))

    # a size mismatch between the k-th send and the k-th receive is named, not silently reshaped
    def mismatch(g):
        if g.rank == 0:
            g.exchange([(torch.zeros(4), 1)], [])
        else:
            g.exchange([], [((5,), torch.float32, 0)])

    with pytest.raises(NcclDeadlock, match="sizes differ"):
        run_ranks(2, mismatch, timeout_s=1.0)
