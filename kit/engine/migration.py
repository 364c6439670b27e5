"""Migration: an operated membership change, restarting at a committed step.

Each new owner fetches **only** its assigned objects from the source store into the run's store and
verifies them; rank 0 is also assigned the commit-level objects (the model config and the old RNG
states). Only when every worker reports ready does rank 0 adopt the source manifest (HEAD moves to
it); an incomplete preparation therefore cannot advance HEAD, and a rerun fetches what is missing
and continues. `open_start` is where a worker's state comes from, after an optional migration.
"""

from __future__ import annotations

import hashlib
import os
import time

import torch

from kit.digest import canonical_json, loads_strict
from kit.distributed.group import Group
from kit.engine.fetch import fetch_over_group, holder_home, holds_commit, host_name, share_commit
from kit.engine.formats import FetchReport, Peer, RankStatus
from kit.model.config import parse_config
from kit.model.llama import LlamaCausalLM
from kit.model.shard import Layout, build_stage
from kit.store import commits
from kit.store.manifest import Manifest, as_manifest
from kit.store.objects import ObjectStore, fetch_objects
from kit.store.start import Start, start_from_commit, start_from_seed


class MigrationError(RuntimeError):
    pass


def assigned_objects(manifest: Manifest | dict, names: set[str], rank: int) -> list[str]:
    """What a new owner must fetch: its parameters' objects, plus the commit-level ones on rank 0."""
    manifest = as_manifest(manifest)
    own = commits.param_digests(manifest.learned_state.params, names)
    if rank == 0:
        own = [manifest.layout.model_config, *manifest.rng, *own]
    return list(dict.fromkeys(own))


def migrate(group: Group, source_home: str, home: str, root: str, layout: Layout) -> int:
    """Fetch this worker's assigned objects of commit `root` from `source_home`; adopt it when all are
    ready. Returns the bytes this worker read from the source.

    When some rank's host does not hold `source_home` (no shared filesystem), the objects travel over
    the process group instead (`migrate_over_group`)."""
    everywhere = all(group.allgather_bytes(b"1" if holds_commit(source_home, root) else b""))
    if not everywhere:
        return migrate_over_group(group, source_home, home, root, layout)["received"]
    manifest = commits.read_manifest(source_home, root)
    shape = parse_config(loads_strict(ObjectStore(source_home).get_bytes(manifest.layout.model_config),
                                      "model config"), "model config")
    layout.validate(shape.num_hidden_layers)
    with torch.device("meta"):
        names = {n for n, _ in build_stage(shape, layout, group.rank).named_parameters()}
    fetched, error = 0, None
    try:
        fetched = fetch_objects(ObjectStore(source_home), ObjectStore(home),
                                assigned_objects(manifest, names, group.rank))
    except (ValueError, OSError) as e:
        error = f"{type(e).__name__}: {e}"
    if os.environ.get("KIT_TEST_DIE_RANK") == str(group.rank):
        os._exit(137)  # test hook: a worker killed after fetching, before it reports ready
    status = {"rank": group.rank, "host": host_name(), "ok": error is None, "error": error}
    reports = [RankStatus.from_json(loads_strict(b, "migration report"), "migration report")
               for b in group.allgather_bytes(canonical_json(status))]
    failed = [r for r in reports if not r.ok]
    if failed:
        raise MigrationError("migration preparation incomplete, HEAD unchanged: "
                             + "; ".join(f"rank {r.rank}: {r.error}" for r in failed))
    adopted = {"rank": group.rank, "host": host_name(), "ok": True, "error": None}
    if group.rank == 0 and commits.read_head(home) != root:
        try:
            commits.adopt_commit(home, manifest, expected_head=commits.read_head(home))
        except (ValueError, OSError) as e:  # OSError too: the other ranks wait in the all-gather below
            adopted.update(ok=False, error=f"{type(e).__name__}: {e}")
    result = RankStatus.from_json(loads_strict(group.allgather_bytes(canonical_json(adopted))[0], "adoption"),
                                  "adoption")
    if not result.ok:
        raise MigrationError(f"rank 0 could not adopt {root}: {result.error}")
    return fetched


def migrate_over_group(group: Group, source_home: str | None, home: str, root: str, layout: Layout) -> dict:
    """Migration without a shared filesystem: the lowest rank whose host holds the committed store
    (`source_home` there) sends every other rank its assigned objects over the process group
    (kit/engine/fetch.py); each rank verifies every object by hash before installing it in its own
    `home`, which then holds this rank's shard of the commit. Only when every rank reports success does
    each rank adopt the manifest in its own home (HEAD moves there, atomically, shard-checked); a
    missing or wrong object leaves every HEAD unchanged and the error names the object and the host.
    Returns {"received", "sent", "objects"} for this rank."""
    t0 = time.time()
    manifest, holder, peers = share_commit(group, source_home, root)
    shape = _shared_config(group, source_home, manifest, holder, peers)
    layout.validate(shape.num_hidden_layers)
    with torch.device("meta"):
        names = {n for n, _ in build_stage(shape, layout, group.rank).named_parameters()}
    wanted = assigned_objects(manifest, names, group.rank)
    own_rng = []
    if group.rank < len(manifest.rng) and manifest.layout.blocks == layout.ranges:
        own_rng = [manifest.rng[group.rank]]  # the session restores its own RNG state on an unchanged layout
    # every shard opens the config; rank 0's assignment already holds every RNG state
    wanted = list(dict.fromkeys([manifest.layout.model_config, *wanted, *own_rng]))
    got = fetch_over_group(group, source_home, home, holder, peers, wanted)
    _all_fetched(group, got, "migration preparation incomplete, HEAD unchanged")
    adopted = {"rank": group.rank, "host": host_name(), "ok": True, "error": None}
    if commits.read_head(home) != root:
        try:
            commits.adopt_commit(home, manifest, expected_head=commits.read_head(home), shard=set(wanted))
        except (ValueError, OSError) as e:  # OSError too: the other ranks wait in the all-gather below
            adopted.update(ok=False, error=f"{type(e).__name__}: {e}")
    results = [RankStatus.from_json(loads_strict(b, "adoption"), "adoption")
               for b in group.allgather_bytes(canonical_json(adopted))]
    bad = [r for r in results if not r.ok]
    if bad:
        raise MigrationError("; ".join(f"rank {r.rank} could not adopt {root}: {r.error}" for r in bad))
    return {**got.fetched_json(), "wanted": wanted, "holder": holder, "holder_host": peers[holder].host,
            "seconds": time.time() - t0}


def _shared_config(group: Group, source_home: str | None, manifest: Manifest, holder: int, peers: list[Peer]):
    """The commit's model config on every rank, sent by the holder and checked against its digest."""
    digest = manifest.layout.model_config
    config = ObjectStore(holder_home(source_home)).get_bytes(digest) if group.rank == holder else b""
    config = group.allgather_bytes(config)[holder]
    if hashlib.sha256(config).hexdigest() != digest:
        raise MigrationError(f"model config object {digest} from rank {holder} ({peers[holder].host}): wrong "
                             "bytes; HEAD unchanged")
    return parse_config(loads_strict(config, "model config"), "model config")


def _all_fetched(group: Group, got: FetchReport, what: str) -> None:
    """Every rank learns every rank's fetch outcome; one failure raises on all, naming rank, host, object."""
    status = {"rank": group.rank, "host": host_name(), "ok": not got.errors, "error": "; ".join(got.errors)}
    reports = [RankStatus.from_json(loads_strict(b, "fetch report"), "fetch report")
               for b in group.allgather_bytes(canonical_json(status))]
    failed = [r for r in reports if not r.ok]
    if failed:
        raise MigrationError(f"{what}: " + "; ".join(f"rank {r.rank} ({r.host}): {r.error}" for r in failed))


def reference_over_group(group: Group, ref_home: str | None, home: str, layout: Layout, root: str) -> tuple[dict, dict]:
    """The frozen reference `root` on hosts that do not hold it: each rank fetches, from the lowest rank
    whose `ref_home` holds the commit, only the `param` objects of its reference stage (the blocks it
    owns that the reference has; the embedding and norm on the embedding owner) and the model config,
    verified by hash, into its own store. Nothing is adopted and no HEAD moves: the reference is read
    from the manifest sent over the group. Returns (reference spec for `load_reference`, this rank's
    fetch report)."""
    t0 = time.time()
    manifest, holder, peers = share_commit(group, ref_home, root)
    shape = _shared_config(group, ref_home, manifest, holder, peers)
    ids = [i for i in layout.blocks_of(group.rank) if i < shape.num_hidden_layers]
    with torch.device("meta"):
        stage = LlamaCausalLM(shape, ids, with_embedding=group.rank == layout.embedding_owner)
        names = {n for n, _ in stage.named_parameters()}
    wanted = [manifest.layout.model_config, *(e.param for e in manifest.learned_state.params if e.name in names)]
    wanted = list(dict.fromkeys(wanted))
    got = fetch_over_group(group, ref_home, home, holder, peers, wanted)
    _all_fetched(group, got, f"reference {root} not fetched")
    report = {**got.fetched_json(), "wanted": wanted, "holder": holder, "holder_host": peers[holder].host,
              "seconds": time.time() - t0}
    return {"home": home, "root": root, "manifest": manifest.to_json()}, report


def open_start(group: Group, home: str, layout: Layout, start: dict, source_home: str | None, ctx) -> tuple[Start, int]:
    """Where a worker's state comes from, after an optional migration: `start` is {"seed_dir": DIR} or
    {"root": FULL_ROOT} (in `home`, fetched from `source_home` first when given). Returns the start and
    the bytes this worker fetched."""
    fetched = 0
    if source_home:
        ctx.progress(phase="migrate")
        fetched = migrate(group, source_home, home, start["root"], layout)
    ctx.progress(phase="load")
    if "seed_dir" in start:
        return start_from_seed(start["seed_dir"]), fetched
    return start_from_commit(home, start["root"]), fetched


def open_start_over_group(group: Group, home: str, layout: Layout, root: str, source_home: str | None,
                          ctx) -> tuple[Start, dict]:
    """`open_start` for hosts without a shared filesystem (every rank calls it): the lowest rank whose
    `source_home` holds commit `root` sends each rank its assigned objects (`migrate_over_group`), then
    each rank starts from the commit in its own `home`. Returns the start and this rank's fetch report."""
    ctx.progress(phase="migrate")
    report = migrate_over_group(group, source_home, home, root, layout)
    ctx.progress(phase="load")
    return start_from_commit(home, root), report
