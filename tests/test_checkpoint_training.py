"""Commit, resume, 2 -> 3 -> 2 migration and growth, on real worker processes (gloo, CPU)."""

from __future__ import annotations

import os

import pytest
import torch
from conftest import write_hf_llama
from engine_workers import launch_env
from test_engine import OPT, make_batches

from kit.distributed.launch import WorkerFailure, launch
from kit.model.shard import even_layout
from kit.store import commits
from kit.store.objects import ObjectStore

LAYERS = 4


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    return (write_hf_llama(root / "student", layers=LAYERS, seed=0),
            write_hf_llama(root / "reference", layers=LAYERS, seed=1))


def _args(seeds, home, workers, until, start=None, source_home=None, commit_at=(), batches=None):
    return {"home": str(home), "layout": even_layout(LAYERS, workers).to_json(),
            "start": start or {"seed_dir": str(seeds[0])}, "source_home": source_home and str(source_home),
            "reference": {"seed_dir": str(seeds[1])},
            "engine": {"microbatch_size": 2, "max_grad_norm": 0.5},
            "optimizer": {"default": OPT, "grown": OPT}, "batches": batches or make_batches(6, seed=7),
            "until": until, "commit_at": list(commit_at), "timeout_s": 60}


def _run(tmp_path, name, args, workers, env=None, **kw):
    kw["env"] = launch_env(env)
    return launch("engine_workers:session_worker", args, workers, tmp_path / f"run-{name}", timeout_s=300, **kw)


def test_resume_and_migration_match_uninterrupted(tmp_path, seeds):
    # uninterrupted 2-worker run to step 6 (with a commit at 3)
    ref = _run(tmp_path, "ref", _args(seeds, tmp_path / "ref", 2, 6, commit_at=[3]), 2)
    ref_commits = ref[0]["commits"]
    assert [c["step"] for c in ref_commits] == [3, 6]
    # resume in a new process group from the step-3 commit, same layout
    res = _run(tmp_path, "resume", _args(seeds, tmp_path / "ref", 2, 6, start={"root": ref_commits[0]["full_root"]}), 2)
    assert res[0]["commits"][-1]["learned_state_root"] == ref_commits[-1]["learned_state_root"]
    assert res[0]["commits"][-1]["full_root"] == ref_commits[-1]["full_root"]
    # 2 -> 3 at step 3 into a fresh store, fetching only assigned objects; then 3 -> 2 at step 5
    src = tmp_path / "ref"
    m3 = _run(tmp_path, "to3", _args(seeds, tmp_path / "three", 3, 5, start={"root": ref_commits[0]["full_root"]},
                                      source_home=src), 3)
    manifest = commits.read_commit(src, ref_commits[0]["full_root"])
    entries = manifest["learned_state"]["params"]
    sizes = {e["name"]: 3 * 4 * int(torch.tensor(e["shape"]).prod()) for e in entries}
    for r, out in enumerate(m3):
        owned = [n for n in sizes if (".layers." not in n and r == 0) or
                 (".layers." in n and int(n.split(".")[2]) in even_layout(LAYERS, 3).blocks_of(r))]
        extra = 0
        if r == 0:
            store = ObjectStore(src)
            extra = sum(os.path.getsize(store.path(d)) for d in [manifest["layout"]["model_config"], *manifest["rng"]])
        # identical tensors share one object (e.g. all-ones norms), so bytes can only be fewer, never more
        assert 0 < out["fetched_bytes"] <= sum(sizes[n] for n in owned) + extra, r
        assert out["fetched_bytes"] < sum(sizes.values()) / 2
    back = _run(tmp_path, "to2", _args(seeds, tmp_path / "two", 2, 6, start={"root": m3[0]["commits"][-1]["full_root"]},
                                        source_home=tmp_path / "three"), 2)
    assert back[0]["commits"][-1]["learned_state_root"] == ref_commits[-1]["learned_state_root"]
    for home in ("ref", "three", "two"):
        for root in commits.list_commits(tmp_path / home):
            commits.verify_commit(tmp_path / home, root)


def test_killed_worker_during_preparation_leaves_head_unchanged(tmp_path, seeds):
    ref = _run(tmp_path, "base", _args(seeds, tmp_path / "base", 2, 2), 2)
    root = ref[0]["commits"][-1]["full_root"]
    args = _args(seeds, tmp_path / "new", 3, 3, start={"root": root}, source_home=tmp_path / "base")
    args["die_in_migration_rank"] = 2
    with pytest.raises(WorkerFailure, match=r"rank 2 failed at step None \(migrate\)"):
        _run(tmp_path, "dies", args, 3, env={"KIT_TEST_DIE_RANK": "2"}, grace_s=20)
    assert commits.read_head(tmp_path / "new") is None
    ok = _run(tmp_path, "rerun", _args(seeds, tmp_path / "new", 3, 3, start={"root": root},
                                       source_home=tmp_path / "base"), 3)
    assert commits.read_head(tmp_path / "new") == ok[0]["commits"][-1]["full_root"]
