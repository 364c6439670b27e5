"""Commit, resume, 2 -> 3 -> 2 migration and growth, on real worker processes (gloo, CPU)."""

from __future__ import annotations

import os

import pytest
import torch
from support.checkpoint import LAYERS, run_sessions, session_args
from support.models import write_hf_llama

from kit.distributed.launch import WorkerFailure
from kit.model.shard import even_layout
from kit.store import commits
from kit.store.objects import ObjectStore


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    return (write_hf_llama(root / "student", layers=LAYERS, seed=0),
            write_hf_llama(root / "reference", layers=LAYERS, seed=1))


def test_resume_and_migration_match_uninterrupted(tmp_path, seeds):
    # uninterrupted 2-worker run to step 6 (with a commit at 3)
    ref = run_sessions(tmp_path, "ref", session_args(seeds, tmp_path / "ref", 2, 6, commit_at=[3]), 2)
    ref_commits = ref[0]["commits"]
    assert [c["step"] for c in ref_commits] == [3, 6]
    # resume in a new process group from the step-3 commit, same layout
    res = run_sessions(tmp_path, "resume", session_args(seeds, tmp_path / "ref", 2, 6, start={"root": ref_commits[0]["full_root"]}), 2)
    assert res[0]["commits"][-1]["learned_state_root"] == ref_commits[-1]["learned_state_root"]
    assert res[0]["commits"][-1]["full_root"] == ref_commits[-1]["full_root"]
    # 2 -> 3 at step 3 into a fresh store, fetching only assigned objects; then 3 -> 2 at step 5
    src = tmp_path / "ref"
    m3 = run_sessions(tmp_path, "to3", session_args(seeds, tmp_path / "three", 3, 5, start={"root": ref_commits[0]["full_root"]},
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
    back = run_sessions(tmp_path, "to2", session_args(seeds, tmp_path / "two", 2, 6, start={"root": m3[0]["commits"][-1]["full_root"]},
                                        source_home=tmp_path / "three"), 2)
    assert back[0]["commits"][-1]["learned_state_root"] == ref_commits[-1]["learned_state_root"]
    for home in ("ref", "three", "two"):
        for root in commits.list_commits(tmp_path / home):
            commits.verify_commit(tmp_path / home, root)


def test_killed_worker_during_preparation_leaves_head_unchanged(tmp_path, seeds):
    ref = run_sessions(tmp_path, "base", session_args(seeds, tmp_path / "base", 2, 2), 2)
    root = ref[0]["commits"][-1]["full_root"]
    args = session_args(seeds, tmp_path / "new", 3, 3, start={"root": root}, source_home=tmp_path / "base")
    args["die_in_migration_rank"] = 2
    with pytest.raises(WorkerFailure, match=r"rank 2 failed at step None \(migrate\)"):
        run_sessions(tmp_path, "dies", args, 3, env={"KIT_TEST_DIE_RANK": "2"}, grace_s=20)
    assert commits.read_head(tmp_path / "new") is None
    ok = run_sessions(tmp_path, "rerun", session_args(seeds, tmp_path / "new", 3, 3, start={"root": root},
                                       source_home=tmp_path / "base"), 3)
    assert commits.read_head(tmp_path / "new") == ok[0]["commits"][-1]["full_root"]
