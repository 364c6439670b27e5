"""Migration without a shared filesystem (kit/engine/fetch.py): two processes with separate store
directories; only rank 0's host has the committed store. Rank 1 receives exactly its assigned
objects over the process group, verifies each by hash, and the bytes are counted on both sides; a
corrupted object is refused by name and host, and no HEAD moves."""

from __future__ import annotations

import os
import shutil

import pytest
import torch
from conftest import write_hf_llama
from engine_workers import launch_env
from test_checkpoint_training import _args, _run

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
    out = _run(root, "src", _args(seeds, root / "src", 1, 1), 1)
    return root / "src", out[0]["commits"][-1]["full_root"]


def _migrate(tmp_path, src, root, name, env=None):
    homes = [str(tmp_path / f"{name}-host{r}") for r in range(2)]
    args = {"source_home": str(src), "holders": [0], "homes": homes, "root": root,
            "layout": even_layout(LAYERS, 2).to_json(), "timeout_s": 60}
    return homes, launch("fetch_workers:migrate_worker", args, 2, tmp_path / f"run-{name}", timeout_s=120,
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
