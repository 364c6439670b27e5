"""Migration without a shared filesystem (kit/engine/fetch.py): two processes with separate store
directories; only rank 0's host has the committed store. Rank 1 receives exactly its assigned
objects over the process group, verifies each by hash, and the bytes are counted on both sides; a
corrupted object is refused by name and host, and no HEAD moves."""

from __future__ import annotations

import os
import shutil

import pytest
import torch
from support.checkpoint import run_sessions, session_args
from support.engine_workers import launch_env
from support.models import write_hf_llama

from kit.distributed.launch import WorkerFailure, launch
from kit.engine.migration import assigned_objects
from kit.model.config import parse_config
from kit.model.shard import build_stage, even_layout
from kit.store import commits
from kit.store.objects import ObjectStore

LAYERS = 4


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("fetch")
    seeds = (write_hf_llama(root / "student", layers=LAYERS, seed=0),
             write_hf_llama(root / "reference", layers=LAYERS, seed=1))
    out = run_sessions(root, "src", session_args(seeds, root / "src", 1, 1), 1)
    return root / "src", out[0]["commits"][-1]["full_root"]


def _migrate(tmp_path, src, root, name, env=None):
    homes = [str(tmp_path / f"{name}-host{r}") for r in range(2)]
    args = {"source_home": str(src), "holders": [0], "homes": homes, "root": root,
            "layout": even_layout(LAYERS, 2).to_json(), "timeout_s": 60}
    return homes, launch("support.fetch_workers:migrate_worker", args, 2, tmp_path / f"run-{name}", timeout_s=120,
                         env=launch_env(env))


def test_new_owner_fetches_only_its_assigned_objects_over_the_group(tmp_path, source):
    src, root = source
    homes, out = _migrate(tmp_path, src, root, "ok")
    manifest = commits.read_commit(src, root)
    cfg = parse_config(__import__("json").loads(ObjectStore(src).get_bytes(manifest["layout"]["model_config"])), "cfg")
    with torch.device("meta"):
        names1 = {n for n, _ in build_stage(cfg, even_layout(LAYERS, 2), 1).named_parameters()}
    want1 = list(dict.fromkeys([manifest["layout"]["model_config"], *assigned_objects(manifest, names1, 1)]))
    store1 = ObjectStore(homes[1])
    held = set(store1.digests())
    assert held == set(want1)  # only its assigned objects (and the config every shard opens)
    assert len(held) < len(set(commits.object_digests(manifest))) / 2 + 1
    src_store = ObjectStore(src)
    expected = sum(os.path.getsize(src_store.path(d)) for d in want1)
    assert out[1]["received"] == expected and out[0]["sent"] == expected  # counted on both sides
    for h in homes:
        assert commits.read_head(h) == root  # each host's HEAD names the commit; its store holds its shard
    assert out[0]["received"] > 0 and out[1]["sent"] == 0


def test_corrupted_object_is_refused_by_name_and_host_and_head_unchanged(tmp_path, source):
    src0, root = source
    src = tmp_path / "src-copy"
    shutil.copytree(src0, src)
    manifest = commits.read_commit(src, root)
    cfg = parse_config(__import__("json").loads(ObjectStore(src).get_bytes(manifest["layout"]["model_config"])), "cfg")
    with torch.device("meta"):
        names1 = {n for n, _ in build_stage(cfg, even_layout(LAYERS, 2), 1).named_parameters()}
    victim = assigned_objects(manifest, names1, 1)[-1]
    path = ObjectStore(src).path(victim)
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(WorkerFailure) as e:
        _migrate(tmp_path, src, root, "bad", env={"KIT_HOST_NAME": "zone-a-host"})
    msg = str(e.value)
    assert victim in msg and "zone-a-host" in msg and "HEAD unchanged" in msg, msg
    for r in range(2):
        assert commits.read_head(tmp_path / f"bad-host{r}") is None
        assert not ObjectStore(tmp_path / f"bad-host{r}").has(victim)


def test_migration_across_two_namespaces_fetches_only_assigned_objects_over_the_veth(tmp_path, source):
    """The same migration with the two ranks in two network namespaces (kit/distributed/netns.py): rank 1's
    host has no source store and only its own home; its veth counts at least the bytes it fetched."""
    import json
    import subprocess
    import sys

    from support.models import REPO

    sys.path.insert(0, str(REPO))
    from kit.distributed.netns import Link, available

    why = available()
    if why:
        pytest.skip(f"two network namespaces cannot be made here: {why} (needs root and iproute2 `ip netns`)")
    src, root = source
    homes = [str(tmp_path / f"ns-host{r}") for r in range(2)]
    args_path = tmp_path / "args.json"
    args_path.write_text(json.dumps({"source_home": str(src), "holders": [0], "homes": homes, "root": root,
                                     "layout": even_layout(LAYERS, 2).to_json(), "timeout_s": 60}))
    link = Link(tag="kxf", net=234).create()
    try:
        link.shape(100_000_000)
        before = link.counters()
        procs = []
        for r in range(2):
            run_dir = tmp_path / f"run{r}"
            run_dir.mkdir()
            env = {**os.environ, **launch_env(), "RANK": str(r), "WORLD_SIZE": "2", "MASTER_ADDR": link.addr[0],
                   "MASTER_PORT": "29751", "GLOO_SOCKET_IFNAME": link.dev[r], "KIT_RUN_DIR": str(run_dir),
                   "KIT_THREADS": "1", "OMP_NUM_THREADS": "1", "KIT_HOST_NAME": f"ns-{link.ns[r]}"}
            procs.append(subprocess.Popen(link.exec_argv(r, [sys.executable, "-m", "kit.distributed.launch",
                                                             "support.fetch_workers:migrate_worker", str(args_path)]),
                                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        logs = [p.communicate(timeout=120)[0] for p in procs]
        after = link.counters()
    finally:
        link.delete()
    assert all(p.returncode == 0 for p in procs), [log[-2000:] for log in logs]
    out = [json.loads((tmp_path / f"run{r}" / f"result-{r}.json").read_text()) for r in range(2)]
    store1 = ObjectStore(homes[1])
    assert set(store1.digests()) == set(out[1]["wanted"]) and out[1]["objects"] == out[1]["wanted"]
    expected = sum(os.path.getsize(ObjectStore(src).path(d)) for d in out[1]["wanted"])
    assert out[1]["received"] == expected == out[0]["sent"]
    ns_b, dev_b = link.ns[1], link.dev[1]
    assert after[ns_b][dev_b]["rx_bytes"] - before[ns_b][dev_b]["rx_bytes"] >= expected
    assert commits.read_head(homes[1]) == root


def test_fetch_order_holds_under_nccl_rules(tmp_path, source):
    """The same migration, 3 ranks, under NCCL's point-to-point rules (rendezvous sends, FIFO per
    pair, no tags; tests/support/nccl_semantics.py): the holder's send order and the receivers' receive order
    cannot deadlock on NCCL, and the result equals what the gloo processes got."""
    from support.nccl_semantics import run_ranks

    from kit.engine.migration import migrate_over_group

    src, root = source
    layout = even_layout(LAYERS, 3)
    homes = [str(tmp_path / f"nccl-host{r}") for r in range(3)]
    out = run_ranks(3, lambda g: migrate_over_group(g, str(src) if g.rank == 0 else None, homes[g.rank], root,
                                                    layout), timeout_s=30)
    assert out[0]["sent"] == out[1]["received"] + out[2]["received"] > 0
    for h in homes:
        assert commits.read_head(h) == root
