"""The clip factor computed on the device (kit/train/device_clip.py), run on CPU with
`clip_on_device="on"`: it keeps the worker-count independence of canonical clipping (1, 2 and 3
stages under NCCL's point-to-point rules give bit-identical learned state), it is the documented
formula of the all-reduced squared norms, and a non-finite norm skips the step and is raised when the
update's numbers are read."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from support.engine import OPT, make_batches
from support.engine_workers import build_engine, engine_config, records_from_json
from support.nccl_semantics import run_ranks

from kit.distributed.group import Group
from kit.distributed.pipeline import PendingUpdateResult
from kit.model.shard import even_layout
from kit.train.device_clip import clip_on_device
from kit.train.optim import GroupConfig

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: one thread, as the launcher's workers


@pytest.fixture(scope="module")
def dirs(student_reference):
    return student_reference


def _engine(dirs, group, max_norm=0.05):
    cfg = replace(engine_config({"microbatch_size": 2, "max_grad_norm": max_norm}), clip_on_device="on")
    return build_engine(group, str(dirs[0]), str(dirs[1]), even_layout(3, group.world), cfg,
                        {"default": GroupConfig(**OPT)})


def _train(dirs, group, batches):
    eng = _engine(dirs, group)
    results = [eng.update(records_from_json(rows)) for rows in batches]
    assert all(isinstance(r, PendingUpdateResult) for r in results)
    losses = [{k: v for k, v in r.to_json().items() if k != "seconds"} for r in results]
    state = {f"{k}/{n}": st[k].detach().clone() for n, st in eng.optimizer.param_states().items()
             for k in ("param", "exp_avg", "exp_avg_sq")}
    return {"losses": losses, "state": state}


def test_device_clip_is_bit_identical_across_worker_counts_under_nccl_rules(dirs):
    batches = make_batches()
    one = _train(dirs, Group(0, 1, torch.device("cpu")), batches)
    assert any(u["clip_factor"] < 1.0 for u in one["losses"])  # the clip really acts
    for world in (2, 3):
        ranks = run_ranks(world, lambda g: _train(dirs, g, batches), 10.0)
        assert all(r["losses"] == one["losses"] for r in ranks)
        state = {k: v for r in ranks for k, v in r["state"].items()}
        assert set(state) == set(one["state"])
        assert [k for k in state if not torch.equal(state[k], one["state"][k])] == []


def test_factor_is_the_documented_formula_of_the_all_reduced_buffer():
    sq = torch.tensor([0.5, 2.25, 0.0, 1.0, 7.0, 3.5], dtype=torch.float64)  # squared norms + 2 loss sums
    for max_norm in (0.5, 100.0, 0.0):
        factor, found_inf, pending = clip_on_device(sq, 4, max_norm, None, 0.0)
        norm = math.sqrt(float(sq[:4].sum()))
        expect = min(1.0, max_norm / (norm + 1e-6)) if max_norm > 0 else 1.0
        assert pending.values() == (norm, expect, 7.0, 3.5)
        assert float(factor) == expect and float(found_inf) == 0.0


def test_non_finite_norm_skips_the_step_and_raises_when_read(dirs):
    eng = _engine(dirs, Group(0, 1, torch.device("cpu")))
    before = {n: p.detach().clone() for n, p in eng.params.items()}
    name = next(iter(eng.params))
    eng.params[name].register_hook(lambda g: torch.full_like(g, float("nan")))
    res = eng.update(records_from_json(make_batches(n_updates=1)[0]))
    with pytest.raises(FloatingPointError, match="not finite"):
        _ = res.grad_norm  # reading the number is what raises
    assert all(torch.equal(before[n], p) for n, p in eng.params.items())


def test_a_non_finite_norm_on_one_rank_stops_every_rank_at_that_update(dirs, tmp_path):
    """Session.update reads the numbers on every rank, so the rank whose gradient became NaN and the rank
    that only sees it through the all-reduced norm both raise at the same update; under NCCL's rules a rank
    that went on into the next update would deadlock (nccl_semantics.NcclDeadlock) instead."""
    from kit.engine.session import Session
    from kit.store.start import start_from_seed

    def worker(g):
        cfg = replace(engine_config({"microbatch_size": 2, "max_grad_norm": 0.05}), clip_on_device="on")
        s = Session(g, str(tmp_path / f"home{g.rank}"), even_layout(3, g.world), start_from_seed(str(dirs[0])),
                    cfg, {"default": GroupConfig(**OPT)}, reference={"seed_dir": str(dirs[1])})
        if g.rank == 1:
            name = next(iter(s.engine.params))
            s.engine.params[name].register_hook(lambda x: torch.full_like(x, float("nan")))
        raised = []
        for rows in make_batches(n_updates=2):
            try:
                s.update(records_from_json(rows))
            except FloatingPointError as e:
                raised.append(str(e))
                break
        return {"rank": g.rank, "raised": raised, "step": s.step}

    ranks = run_ranks(2, worker, 10.0)
    assert [r["step"] for r in ranks] == [1, 1]
    assert all(len(r["raised"]) == 1 and "not finite" in r["raised"][0] for r in ranks)
