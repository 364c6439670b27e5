"""The sharded engine against the one-process oracle, with 1, 2 and 3 workers in separate processes."""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open
from support.engine import OPT, make_batches, single_engine
from support.engine_oracle import run_oracle64
from support.engine_workers import engine_config, launch_env, records_from_json
from support.models import write_hf_llama

from kit.distributed.launch import launch
from kit.model.shard import LayoutError, even_layout


def _launch(tmp_path, dirs, workers, batches, max_norm, name):
    seed_dir, ref_dir = dirs
    dump = tmp_path / f"{name}-{workers}"
    dump.mkdir()
    args = {"seed_dir": str(seed_dir), "reference_dir": str(ref_dir),
            "layout": even_layout(3, workers).to_json(),
            "engine": {"microbatch_size": 2, "max_grad_norm": max_norm},
            "optimizer": {"default": OPT}, "batches": batches, "dump_dir": str(dump), "dump_grads_at": 1,
            "timeout_s": 60}
    results = launch("support.engine_workers:train_worker", args, workers, dump / "run", timeout_s=300, env=launch_env())
    grads, state, ages = {}, {}, {}
    for r in range(workers):
        with safe_open(str(dump / f"grads-{r}.safetensors"), "pt") as f:
            grads.update({k: f.get_tensor(k) for k in f.keys()})  # noqa: SIM118 (safe_open is no mapping)
        with safe_open(str(dump / f"state-{r}.safetensors"), "pt") as f:
            state.update({k: f.get_tensor(k) for k in f.keys()})  # noqa: SIM118 (safe_open is no mapping)
            for kv in f.metadata()["ages"].split(","):
                k, v = kv.split("=")
                ages[k] = int(v)
    return results, grads, state, ages


CLIPPING = [(0.05, True), (1e6, False)]


@pytest.fixture(scope="module")
def oracle_and_runs(tmp_path_factory, dirs):
    """(max_norm, workers) -> (the float64 oracle's history and state, the launched run), each computed once
    per module: the 1-worker run is the reference of both the 2- and the 3-worker test."""
    oracles, runs = {}, {}

    def get(max_norm: float, workers: int):
        batches = make_batches()
        if max_norm not in oracles:
            oracles[max_norm] = run_oracle64(*dirs, batches, OPT["lr"], (OPT["beta1"], OPT["beta2"]), OPT["eps"],
                                             OPT["weight_decay"], max_norm)
        if (max_norm, workers) not in runs:
            runs[max_norm, workers] = _launch(tmp_path_factory.mktemp("engine"), dirs, workers, batches, max_norm,
                                              f"norm{max_norm:g}")
        return oracles[max_norm], runs[max_norm, workers]

    return get


def _check_against_oracle_and_one_worker(oracle_and_runs, workers: int, max_norm: float, clipping: bool) -> None:
    """`workers` workers against the float64 oracle, within the float32 error bound derived in
    tests/support/engine_oracle.py (run_oracle64's argument), and bit-identical to 1 worker."""
    (history, oracle_state), (results, grads, state, ages) = oracle_and_runs(max_norm, workers)
    first = history[0]
    assert (first["grad_norm"] > max_norm) == clipping
    bounds = first["bounds"]
    # The bound means something: it is below the smallest single record's contribution, so a record
    # dropped, doubled or put on the wrong side of the replay split cannot hide inside it.
    for key in ("ce_sum", "kl_sum"):
        assert bounds[key] < min(first["per_record"][key]), (key, bounds[key], first["per_record"][key])
    upd = results[0]["updates"][0]
    for key in ("objective", "ce_sum", "kl_sum", "grad_norm"):
        assert abs(upd[key] - first[key]) <= bounds[key], (workers, key, upd[key], first[key], bounds[key])
    assert upd["kl_sum"] > 0 and upd["replay_tokens"] > 0 and upd["new_tokens"] > 0
    assert (upd["clip_factor"] < 1.0) == clipping
    assert set(grads) == set(first["grads"])
    for n, g in first["grads"].items():
        excess = (grads[n].double() - g).abs() - bounds["grads"][n]
        assert excess.max().item() <= 0, (workers, n, excess.max().item())

    # every rank reports the same global loss parts
    def _losses(res):
        return [{k: v for k, v in u.items() if k != "seconds"} for u in res["updates"]]

    assert all(_losses(r) == _losses(results[0]) for r in results)
    for n, st in oracle_state.items():
        assert ages[n] == st["age"] == len(make_batches())
        for key in ("param", "exp_avg", "exp_avg_sq"):
            excess = (state[f"{key}/{n}"].double() - st[key]).abs() - st["bounds"][key]
            assert excess.max().item() <= 0, (workers, n, key, excess.max().item())
    # bit-identical learned state across worker counts
    _, (_, _, base_state, base_ages) = oracle_and_runs(max_norm, 1)
    assert set(state) == set(base_state)
    for k, t in base_state.items():
        assert torch.equal(state[k], t), (workers, k)
    assert ages == base_ages


@pytest.mark.parametrize("max_norm, clipping", CLIPPING)
@pytest.mark.parametrize("workers", [1, 2])
def test_one_and_two_workers_match_oracle_and_each_other(oracle_and_runs, workers, max_norm, clipping):
    """In `make test-fast`: the engine against the oracle at 1 and 2 workers (tests/support/tiers.py)."""
    _check_against_oracle_and_one_worker(oracle_and_runs, workers, max_norm, clipping)


@pytest.mark.parametrize("max_norm, clipping", CLIPPING)
def test_three_workers_match_oracle_and_one_worker(oracle_and_runs, max_norm, clipping):
    """Marked slow (tests/support/tiers.py): a third process adds time, not a new kind of check."""
    _check_against_oracle_and_one_worker(oracle_and_runs, 3, max_norm, clipping)


def test_no_worker_holds_a_full_model(tmp_path, dirs):
    results, _, _, _ = _launch(tmp_path, dirs, 3, make_batches(n_updates=1), 1.0, "count")
    from kit.model.config import load_config
    from kit.model.llama import LlamaCausalLM

    shape = load_config(dirs[0])
    full = sum(p.numel() for p in LlamaCausalLM(shape).parameters())
    assert sum(r["student_params"] for r in results) == full
    for r in results:
        assert r["student_params"] < full and r["reference_params"] == r["student_params"]
        assert r["student_bytes"] == 4 * r["student_params"]
    assert [sorted({int(n.split(".")[2]) for n in r["owned"] if ".layers." in n}) for r in results] == [[0], [1], [2]]
    assert "model.embed_tokens.weight" in results[0]["owned"] and "model.norm.weight" in results[0]["owned"]
    assert not any("embed" in n or n == "model.norm.weight" for r in results[1:] for n in r["owned"])


def test_kl_is_zero_with_identical_reference_and_gradient_zero(dirs):
    eng = single_engine(dirs, ref_dir=dirs[0])
    rows = make_batches(1)[0]
    for r in rows:
        r["replay"] = True
    eng.capture_grads = True
    res = eng.update(records_from_json(rows))
    assert res.parts.kl_sum == pytest.approx(0.0, abs=1e-6)
    assert res.parts.ce_sum == 0.0 and res.parts.new_tokens == 0
    assert max(g.abs().max().item() for g in eng.last_grads.values()) <= 1e-6


def test_kl_applies_only_to_declared_replay_records(dirs):
    rows = make_batches(1)[0]
    a = single_engine(dirs).update(records_from_json([dict(r, replay=False) for r in rows]))
    b = single_engine(dirs).update(records_from_json(rows))
    assert a.parts.kl_sum == 0.0 and a.parts.replay_tokens == 0
    assert b.parts.kl_sum > 0 and b.parts.replay_tokens > 0
    assert a.parts.ce_sum > b.parts.ce_sum  # flipped records moved from CE to KL


def test_loss_does_not_depend_on_microbatch_split(dirs):
    rows = make_batches(1)[0]

    outs = []
    for mb in (1, 2, 5):
        eng = single_engine(dirs)
        eng.cfg = engine_config({"microbatch_size": mb, "max_grad_norm": 1.0})
        eng.capture_grads = True
        outs.append((eng.update(records_from_json(rows)), eng.last_grads))
    for res, grads in outs[1:]:
        assert res.parts.objective == pytest.approx(outs[0][0].parts.objective, rel=1e-6)
        assert grads and set(grads) == set(outs[0][1])
        for n, g in grads.items():
            assert (g - outs[0][1][n]).abs().max().item() <= 1e-6


def test_bad_inputs_are_refused_before_any_update(dirs, tmp_path):
    eng = single_engine(dirs)
    before = {n: p.detach().clone() for n, p in eng.student.named_parameters()}
    rows = make_batches(1)[0]
    no_targets = [dict(r, target_mask=[False] * len(r["input_ids"])) for r in rows]
    with pytest.raises(ValueError, match="no assistant target tokens"):
        eng.update(records_from_json(no_targets))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        eng.update(records_from_json([dict(rows[0], input_ids=[1, 2, 999, 3], target_mask=[False, False, True, True])] + rows[1:]))
    assert all(torch.equal(p, before[n]) for n, p in eng.student.named_parameters())
    with pytest.raises(LayoutError, match="misses block"):
        from kit.model.shard import Layout

        Layout(((0, 1), (2, 3))).validate(3)
    with pytest.raises(LayoutError, match="repeats block"):
        from kit.model.shard import Layout

        Layout(((0, 2), (1, 3))).validate(3)
    with pytest.raises(LayoutError, match="4 workers but only 3 blocks"):
        even_layout(3, 4)
    other = write_hf_llama(tmp_path / "wide", hidden=48, heads=4, kv_heads=2, seed=3)
    with pytest.raises(ValueError, match="shape differs from the student"):
        single_engine((dirs[0], other))
