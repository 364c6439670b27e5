"""Hosts without a shared filesystem, under NCCL's point-to-point rules (tests/support/nccl_semantics.py:
rendezvous sends, FIFO per ordered pair, no tags), on CPU threads: a whole `Session.commit` with one
store per rank (kit/engine/commit_transfer.py: rank 0 receives what it lacks, every other rank adopts
its shard), and the frozen reference fetched over the group (`reference_over_group`: each rank gets
only its stage's `param` objects from the lowest rank that holds the commit). Both paths ran across
network namespaces over gloo, whose buffered sends would hide an order that NCCL deadlocks on."""

from __future__ import annotations

import pytest
import torch
from support.engine import OPT, make_batches
from support.engine_workers import engine_config, records_from_json
from support.nccl_semantics import run_ranks

from kit.distributed.group import Group
from kit.engine.migration import reference_over_group
from kit.engine.session import Session
from kit.model.shard import even_layout
from kit.store import commits
from kit.store.objects import ObjectStore
from kit.store.start import start_from_seed
from kit.train.optim import GroupConfig

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: one thread, as the launcher's workers
LAYERS, WORLD = 3, 3


def _session(dirs, group, home):
    return Session(group, str(home), even_layout(LAYERS, group.world), start_from_seed(str(dirs[0])),
                   engine_config({"microbatch_size": 2, "max_grad_norm": 0.05}), {"default": GroupConfig(**OPT)},
                   reference={"seed_dir": str(dirs[1])})


def _train_and_commit(dirs, home_of, background=False):
    """Two updates with a commit after each, every rank in the home `home_of(rank)`; per rank: the roots
    of both commits and what its commits sent to / received by rank 0's store. With `background`, each
    commit's objects are written behind training and the polls of the next update advance it; the first
    completes at the latest when the second commit waits for it, the second at `wait_commit`."""
    def worker(g):
        s = _session(dirs, g, home_of(g.rank))
        roots = []
        for rows in make_batches(n_updates=2):
            s.update(records_from_json(rows))
            if not background:
                roots.append(s.commit())
                continue
            s.commit(background=True)
            if s.committer.last:
                roots.append((s.committer.last["full_root"], s.committer.last["learned_state_root"]))
        if background:
            roots.append(s.wait_commit())
        return {"roots": roots, "transfers": s.transfers}
    return run_ranks(WORLD, worker, timeout_s=20.0)


def test_a_commit_with_one_store_per_rank_runs_under_nccl_rules_and_equals_the_shared_store(student_reference,
                                                                                          tmp_path):
    separate = _train_and_commit(student_reference, lambda r: tmp_path / f"host{r}")
    shared = _train_and_commit(student_reference, lambda r: tmp_path / "shared")
    for out in (separate, shared):
        assert all(r["roots"] == out[0]["roots"] for r in out)  # every rank learned the same commits
    # the learned state is the same whether the shards crossed the group or were written into one store
    # (full roots also hold each rank's RNG bytes, which threads of one process share: not compared)
    assert [lr for _, lr in separate[0]["roots"]] == [lr for _, lr in shared[0]["roots"]]
    assert all(t["sent_objects"] == 0 and t["received_objects"] == 0 for r in shared for t in r["transfers"])

    final = separate[0]["roots"][-1][0]
    manifests = [commits.read_commit(tmp_path / "host0", full) for full, _ in separate[0]["roots"]]
    rank0 = ObjectStore(tmp_path / "host0")
    for d in commits.object_digests(manifests[-1]):  # the commit is whole in rank 0's store
        rank0.verify(d)
    for r in range(WORLD):
        assert commits.read_head(tmp_path / f"host{r}") == final  # every host's HEAD names it
    every = set().union(*(commits.object_digests(m) for m in manifests))
    for r in (1, 2):  # another rank's store holds its own shard only, and each commit sent rank 0 some of it
        assert set(ObjectStore(tmp_path / f"host{r}").digests()) < every
        assert all(t["sent_objects"] > 0 for t in separate[r]["transfers"])
    received = [t["received_objects"] for t in separate[0]["transfers"]]
    assert received == [separate[1]["transfers"][i]["sent_objects"] + separate[2]["transfers"][i]["sent_objects"]
                        for i in range(2)]


@pytest.fixture(scope="module")
def reference_commit(student_reference, tmp_path_factory):
    """A commit of the 3-block model in one store (one worker, one update): the frozen reference."""
    home = tmp_path_factory.mktemp("reference") / "home"
    s = _session(student_reference, Group(0, 1, torch.device("cpu")), home)
    s.update(records_from_json(make_batches(n_updates=1)[0]))
    full_root, _ = s.commit()
    return home, full_root


@pytest.mark.parametrize("holder", [0, 2])
def test_the_reference_is_fetched_stage_by_stage_under_nccl_rules(reference_commit, tmp_path, holder):
    ref_home, root = reference_commit
    layout = even_layout(LAYERS, WORLD)

    def worker(g):
        spec, report = reference_over_group(g, str(ref_home) if g.rank == holder else None,
                                            str(tmp_path / f"host{g.rank}"), layout, root)
        return {"spec": spec, "report": report}

    out = run_ranks(WORLD, worker, timeout_s=20.0)
    manifest = commits.read_commit(ref_home, root)
    by_name = {e["name"]: e["param"] for e in manifest["learned_state"]["params"]}
    source = ObjectStore(ref_home)
    cfg = manifest["layout"]["model_config"]
    for r in range(WORLD):
        assert out[r]["spec"]["manifest"] == manifest and out[r]["spec"]["root"] == root
        assert out[r]["report"]["holder"] == holder
        want = out[r]["report"]["wanted"]
        assert want[0] == cfg and set(want[1:]) <= set(by_name.values())
        if r != holder:
            store = ObjectStore(tmp_path / f"host{r}")
            assert set(store.digests()) == set(want)  # its stage's parameters and the config, nothing else
            for d in want:
                store.verify(d)
            assert commits.read_head(tmp_path / f"host{r}") is None  # nothing adopted, no HEAD moved
            assert out[r]["report"]["received"] == sum(source.path(d).stat().st_size for d in want)
    # the stages' parameters are disjoint and together the whole reference
    stages = [set(out[r]["report"]["wanted"][1:]) for r in range(WORLD)]
    assert sum(len(s) for s in stages) == len(set().union(*stages)) == len(set(by_name.values()))
    assert out[holder]["report"]["sent"] == sum(out[r]["report"]["received"] for r in range(WORLD) if r != holder)


def test_background_commits_take_the_same_route_across_stores(student_reference, tmp_path):
    """Session.commit(background=True) with one store per rank: the objects written behind training reach
    rank 0's store (on the training thread, at a poll) before it installs, and the other stores adopt
    their shards; the roots are the synchronous commits' and every host's HEAD names the last one."""
    sync = _train_and_commit(student_reference, lambda r: tmp_path / f"sync{r}")
    background = _train_and_commit(student_reference, lambda r: tmp_path / f"bg{r}", background=True)
    assert all(r["roots"] == background[0]["roots"] for r in background) and len(background[0]["roots"]) == 2
    assert [lr for _, lr in background[0]["roots"]] == [lr for _, lr in sync[0]["roots"]]
    final = background[0]["roots"][-1][0]
    manifest = commits.read_commit(tmp_path / "bg0", final)
    for d in commits.object_digests(manifest):
        ObjectStore(tmp_path / "bg0").verify(d)
    for r in range(WORLD):
        assert commits.read_head(tmp_path / f"bg{r}") == final
        assert [t["full_root"] for t in background[r]["transfers"]] == [full for full, _ in background[0]["roots"]]
    assert [t["received_objects"] for t in background[0]["transfers"]] == [
        sum(background[r]["transfers"][i]["sent_objects"] for r in (1, 2)) for i in range(2)]
    assert all(t["received_objects"] > 0 for t in background[0]["transfers"])


def test_a_disk_error_in_rank_0s_commit_raises_on_every_rank(student_reference, tmp_path, monkeypatch):
    """rank 0's write_commit meets a full disk: its outcome carries the error through the all-gather, so every
    rank raises CommitError at the same commit (an uncaught OSError on rank 0 would leave the others there)."""
    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(commits, "write_commit", full_disk)

    def worker(g):
        s = _session(student_reference, g, tmp_path / f"host{g.rank}")
        s.update(records_from_json(make_batches(n_updates=1)[0]))
        try:
            s.commit()
        except commits.CommitError as e:
            return str(e)
        return None

    messages = run_ranks(WORLD, worker, timeout_s=20.0)
    assert len(set(messages)) == 1 and "rank 0 could not commit step 1: OSError: [Errno 28]" in messages[0]
    assert all(commits.read_head(tmp_path / f"host{r}") is None for r in range(WORLD))
