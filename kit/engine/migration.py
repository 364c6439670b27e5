"""Migration: an operated membership change, restarting at a committed step.

Each new owner fetches **only** its assigned objects from the source store into the run's store and
verifies them; rank 0 is also assigned the commit-level objects (the model config and the old RNG
states). Only when every worker reports ready does rank 0 adopt the source manifest (HEAD moves to
it); an incomplete preparation therefore cannot advance HEAD, and a rerun fetches what is missing
and continues. `open_start` is where a worker's state comes from, after an optional migration.
"""

from __future__ import annotations

import os

import torch

from kit.digest import canonical_json, loads_strict
from kit.distributed.group import Group
from kit.model.config import parse_config
from kit.model.shard import Layout, build_stage
from kit.store import commits
from kit.store.objects import ObjectStore, fetch_objects
from kit.store.start import Start, start_from_commit, start_from_seed


class MigrationError(RuntimeError):
    pass


def assigned_objects(manifest: dict, names: set[str], rank: int) -> list[str]:
    """What a new owner must fetch: its parameters' objects, plus the commit-level ones on rank 0."""
    own = commits.param_digests(manifest["learned_state"]["params"], names)
    if rank == 0:
        own = [manifest["layout"]["model_config"], *manifest["rng"], *own]
    return list(dict.fromkeys(own))


def migrate(group: Group, source_home: str, home: str, root: str, layout: Layout) -> int:
    """Fetch this worker's assigned objects of commit `root` from `source_home`; adopt it when all are
    ready. Returns the bytes this worker read from the source."""
    manifest = commits.read_commit(source_home, root)
    shape = parse_config(loads_strict(ObjectStore(source_home).get_bytes(manifest["layout"]["model_config"]),
                                      "model config"), "model config")
    layout.validate(shape.num_hidden_layers)
    with torch.device("meta"):
        names = {n for n, _ in build_stage(shape, layout, group.rank).named_parameters()}
    status = {"rank": group.rank, "ok": True, "bytes": 0, "error": None}
    try:
        status["bytes"] = fetch_objects(ObjectStore(source_home), ObjectStore(home),
                                        assigned_objects(manifest, names, group.rank))
    except (ValueError, OSError) as e:
        status.update(ok=False, error=f"{type(e).__name__}: {e}")
    if os.environ.get("KIT_TEST_DIE_RANK") == str(group.rank):
        os._exit(137)  # test hook: a worker killed after fetching, before it reports ready
    reports = [loads_strict(b, "migration report") for b in group.allgather_bytes(canonical_json(status))]
    failed = [r for r in reports if not r["ok"]]
    if failed:
        raise MigrationError("migration preparation incomplete, HEAD unchanged: "
                             + "; ".join(f"rank {r['rank']}: {r['error']}" for r in failed))
    adopted = {"ok": True, "error": None}
    if group.rank == 0 and commits.read_head(home) != root:
        try:
            commits.adopt_commit(home, manifest, expected_head=commits.read_head(home))
        except ValueError as e:
            adopted = {"ok": False, "error": str(e)}
    result = loads_strict(group.allgather_bytes(canonical_json(adopted))[0], "adoption")
    if not result["ok"]:
        raise MigrationError(f"rank 0 could not adopt {root}: {result['error']}")
    return status["bytes"]


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
