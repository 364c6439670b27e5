"""`kit adaptive train` under torchrun across two emulated hosts (two network namespaces joined by a veth,
kit/distributed/netns.py), one process per host, each host with its own copy of the prepared job and the seed and
its own store directories: nothing of a store is shared on disk, the ranks talk only over the veth.
(The prepared job's input commitments name absolute input files, e.g. the conversations prepare read;
both emulated hosts re-hash them at the same path, as two real hosts would hold their own copies there.)

One scenario, in order (root only; CI runs as root):
  1. 2 workers train cohort A to its step-4 commit: rank 0's store holds the commit whole (rank 1's objects
     arrived over the group, counted), rank 1's store holds its shard and the same HEAD;
  2. a restart of 2 workers on a replacement host B (empty store) from the step-4 commit, with one of rank 1's
     assigned objects corrupted in the committed store: refused naming the object and the host, no HEAD moves;
  3. the same restart with the object intact trains to the cohort's endpoint: rank 1 fetched exactly its
     assigned objects (by digest list), the bytes counted equal their sizes, and the learned-state root equals
     the single-host run's (bit-identity across worker counts and hosts is a CPU promise);
  4. growth under torchrun: cohort B's append transition on rank 0's host, then one update, each rank
     fetching its share of the grown commit and of the reference: the root equals the single-host growth's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from support.models import REPO

from kit.adaptive.train import CohortRequest, train
from kit.engine.migration import assigned_objects
from kit.model.config import parse_config
from kit.model.shard import Layout, build_stage
from kit.store import commits
from kit.store.objects import ObjectStore

sys.path.insert(0, str(REPO))
from kit.distributed.netns import Link, available

WHY = available()
HOSTS = ("hostA", "hostB")


def _torchrun(link: Link, hosts, port: int, per_host: list[list[str]], common: list[str]) -> list[dict]:
    """One torchrun per namespace (node rank = side), `kit adaptive train` with each host's own paths."""
    procs = []
    for side in (0, 1):
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "KIT_RUN_DIR", "LOCAL_RANK")}
        env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", KIT_PROGRESS="0", GLOO_SOCKET_IFNAME=link.dev[side],
                   PYTHONFAULTHANDLER="1",
                   KIT_HOST_NAME=HOSTS[side])
        argv = link.exec_argv(side, [
            sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(side),
            "--nproc-per-node", "1", "--master-addr", link.addr[0], "--master-port", str(port), "--max-restarts",
            "0", "-m", "kit", "adaptive", "train", "--prepared", str(hosts[side] / "prepared"), "--seed",
            str(hosts[side] / "seed"), "--workers", "2", *common, *per_host[side]])
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out = []
    for p in procs:
        try:
            so, se = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
        out.append({"returncode": p.returncode, "stdout": so, "stderr": se[-20000:]})
    return out


def _attempt(home) -> dict:
    (path,) = list((home / "attempts").glob("*/attempt.json"))
    return json.loads(path.read_text())


def _assigned(store: str, root: str, rank: int) -> list[str]:
    """What rank `rank` of the commit's own layout must fetch: the config every shard opens, its objects, its RNG."""
    manifest = commits.read_commit(store, root)
    cfg = parse_config(json.loads(ObjectStore(store).get_bytes(manifest["layout"]["model_config"])), "config")
    with torch.device("meta"):
        names = {n for n, _ in build_stage(cfg, Layout.from_json(manifest["layout"]), rank).named_parameters()}
    # the same layout trains on: the rank's own RNG state is restored, so it is assigned too
    return list(dict.fromkeys([manifest["layout"]["model_config"], *assigned_objects(manifest, names, rank),
                               manifest["rng"][rank]]))


def _ok(run):
    assert all(p["returncode"] == 0 for p in run), [(p["returncode"], p["stderr"][-1500:]) for p in run]


@pytest.mark.skipif(WHY is not None, reason=f"two network namespaces cannot be made here: {WHY} "
                                            "(needs root and iproute2 `ip netns`)")
def test_adaptive_train_across_two_namespaces_with_no_shared_store(prepared, tmp_path):
    p = tmp_path / "prepared"
    shutil.copytree(prepared["out"], p)
    seed = str(prepared["seed"])
    # the single-host control: one worker, the local launcher
    local = train(CohortRequest(str(p), seed, str(tmp_path / "local"), "A", 1))
    hosts = []
    for name in HOSTS:
        shutil.copytree(prepared["out"], tmp_path / name / "prepared")
        shutil.copytree(prepared["seed"], tmp_path / name / "seed")
        hosts.append(tmp_path / name)
    A, B = hosts
    link = Link(tag="kxa", net=235).create()
    try:
        link.shape(1_000_000_000)
        # 1. cohort A to its first commit point: rank 0's store is the committed store
        _ok(_torchrun(link, hosts, 29761, [["--home", str(A / "h1")], ["--home", str(B / "h1")]],
                      ["--cohort", "A", "--until", "4"]))
        rec1 = _attempt(A / "h1")
        (c4,) = rec1["commits"]
        root4 = c4["full_root"]
        assert c4["learned_state_root"] == local[0]["learned_state_root"]
        assert commits.verify_commit(A / "h1", root4)["full_root"] == root4  # whole on rank 0's host
        assert commits.read_head(B / "h1") == root4 and not (B / "h1" / "attempts" / rec1["attempt"] /
                                                             "attempt.json").exists()
        manifest = commits.read_commit(A / "h1", root4)
        shard1 = set(ObjectStore(B / "h1").digests())
        assert shard1 < set(commits.object_digests(manifest))  # host B holds only rank 1's shard
        (t0,), (t1,) = (h["commit_transfers"] for h in rec1["hosts"])
        sent = [d for d in shard1 if d != manifest["layout"]["model_config"]]  # rank 0 had the config
        size = sum(os.path.getsize(ObjectStore(A / "h1").path(d)) for d in sent)
        assert t1["sent_bytes"] == t0["received_bytes"] == size and t1["sent_objects"] == len(sent)

        # 2. a corrupted assigned object: refused by name and host, no HEAD moves
        want1 = _assigned(str(A / "h1"), root4, 1)
        victim = [d for d in want1 if d not in manifest["rng"]][-1]  # a tensor only rank 1 is assigned
        path = ObjectStore(A / "h1").path(victim)
        good = path.read_bytes()
        os.chmod(path, 0o644)
        path.write_bytes(bytes([good[0] ^ 0xFF]) + good[1:])
        bad = _torchrun(link, hosts, 29762, [["--home", str(A / "bad"), "--source-home", str(A / "h1")],
                                             ["--home", str(B / "bad")]],
                        ["--cohort", "A", "--resume", root4])
        assert all(r["returncode"] != 0 for r in bad)
        assert list((A / "bad" / "attempts").glob("*/attempt.json")), [r["stderr"][-3000:] for r in bad]
        err = _attempt(A / "bad")["error"]
        assert victim in err and "from rank 0 (hostA): wrong bytes" in err and "HEAD unchanged" in err, err
        assert commits.read_head(A / "bad") is None and commits.read_head(B / "bad") is None
        assert not ObjectStore(B / "bad").has(victim)
        path.write_bytes(good)

        # 3. the restart on an empty host B: exactly its assigned objects, counted, and the single-host root
        before = link.counters()
        _ok(_torchrun(link, hosts, 29763, [["--home", str(A / "h2"), "--source-home", str(A / "h1")],
                                           ["--home", str(B / "h2")]],
                      ["--cohort", "A", "--resume", root4]))
        after = link.counters()
        rec2 = _attempt(A / "h2")
        assert rec2["status"] == "completed" and rec2["holder"] == 0
        f0, f1 = (h["fetch"] for h in rec2["hosts"])
        assert f1["wanted"] == f1["objects"] == want1 and f1["holder_host"] == "hostA"
        size1 = sum(len(ObjectStore(A / "h1").get_bytes(d)) for d in want1)
        assert f1["received"] == f0["sent"] == size1
        assert after[link.ns[1]][link.dev[1]]["rx_bytes"] - before[link.ns[1]][link.dev[1]]["rx_bytes"] >= size1
        assert rec2["commits"][-1]["learned_state_root"] == local[-1]["learned_state_root"]
        root8 = rec2["commits"][-1]["full_root"]
        # h1 is on rank 0's host: its logs are referenced by path and sha256, not copied (kit/adaptive/lineage.py)
        inherited = json.loads((A / "h2" / "attempts" / rec2["attempt"] / "inherited.json").read_text())["logs"]
        assert inherited and all(e["home"] == "../h1" for e in inherited)
        assert not any(n.startswith("inherited-") for n in os.listdir(A / "h2" / "attempts" / rec2["attempt"]))

        # 4. growth under torchrun (cohort B, +blocks on rank 0's host), one update, against the local growth
        local_b = train(CohortRequest(str(p), seed, str(tmp_path / "local-b"), "B", 1, resume=local[-1]["full_root"],
                        reference=local[-1]["full_root"], source_home=str(tmp_path / "local"), grow=True, until=1))
        _ok(_torchrun(link, hosts, 29764, [["--home", str(A / "h3"), "--source-home", str(A / "h2")],
                                           ["--home", str(B / "h3")]],
                      ["--cohort", "B", "--resume", root8, "--reference", root8, "--grow", "--until", "1"]))
        rec3 = _attempt(A / "h3")
        assert rec3["commits"][-1]["learned_state_root"] == local_b[-1]["learned_state_root"]
        r1 = rec3["hosts"][1]
        assert r1["fetch"]["objects"] == r1["fetch"]["wanted"] and r1["fetch"]["received"] > 0
        ref = r1["reference_fetch"]  # its reference stage's params: those not already in its grown shard
        assert set(ref["objects"]) <= set(ref["wanted"]) and all(ObjectStore(B / "h3").has(d) for d in ref["wanted"])
    finally:
        link.delete()
