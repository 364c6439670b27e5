"""A commit without a shared filesystem: rank 0's store is the committed store, every other host's store
holds its own shard.

`Session.commit` (kit/engine/session.py) has every worker write its objects into its own `--home`.
On one host (the local launcher) every home is the same directory and nothing here moves a byte. On
hosts without a shared mount, rank 0's store lacks the other workers' objects, so before rank 0
writes the commit:

  1. every rank announces the objects it wrote for this commit (`allgather_bytes`, digests only);
  2. rank 0 answers, per rank, which of them its store lacks (each digest asked once, from the
     lowest rank that announced it);
  3. each rank sends what it was asked for, in order, point to point (`send_object`: size, then the
     bytes as they are on its disk); rank 0 receives rank by rank, installs an object only when its
     sha256 is its name (written and fsynced before the rename), and counts the bytes. A missing or
     wrong object is recorded naming the object and the sending rank and host; the remaining messages
     are still drained so both sides stay in step.

Then rank 0 writes the commit as always (`write_commit` re-hashes every object the commit names in
its store, writes the manifest, moves HEAD by compare-and-swap): HEAD moves only after every object
is durable in the committing store, and a failed transfer means no commit (HEAD unchanged, the error
names the object and the host). Finally every other rank whose HEAD is not yet the new root adopts the
manifest in its own home as a shard (`adopt_commit(..., shard=its objects)`: they are re-hashed, then
the manifest is installed and its HEAD compare-and-swapped from the parent), which is what resume and
the next migration read there.

Order under NCCL's point-to-point rules (rendezvous sends, FIFO per pair, no tags): rank 0 posts its
receives in rank order and, per rank, in that rank's announced order; each sender sends in the same
order to rank 0 only, so the k-th send of a pair always meets the k-th receive. Why the process group
rather than an object server: docs/engine.md, "Across hosts without a shared filesystem".
"""

from __future__ import annotations

import time

from kit.digest import canonical_json, loads_strict
from kit.distributed.group import Group
from kit.engine.fetch import host_name, receive_object, send_object
from kit.store import commits
from kit.store.objects import ObjectStore


def gather_objects(group: Group, store: ObjectStore, written: list[str]) -> dict:
    """Bring every object the ranks wrote for this commit into rank 0's store (only those it lacks).

    Returns this rank's transfer: {"rank", "host", "sent_bytes", "sent_objects", "received_bytes",
    "received_objects", "seconds", "errors"} (errors only on rank 0; they name the object and the
    sending host). Every rank calls it together."""
    t0 = time.time()
    out = {"rank": group.rank, "host": host_name(), "sent_bytes": 0, "sent_objects": 0, "received_bytes": 0,
           "received_objects": 0, "seconds": 0.0, "errors": []}
    if not group.distributed:
        return out
    me = {"rank": group.rank, "host": out["host"], "written": list(dict.fromkeys(written))}
    peers = [loads_strict(b, "commit objects announcement") for b in group.allgather_bytes(canonical_json(me))]
    asks: dict[str, list[str]] = {}
    if group.rank == 0:
        asked: set[str] = set()
        for p in peers[1:]:
            need = [d for d in p["written"] if d not in asked and not store.has(d)]
            asked.update(need)
            asks[str(p["rank"])] = need
    asks = loads_strict(group.allgather_bytes(canonical_json(asks) if group.rank == 0 else b"")[0], "commit asks")
    if group.rank == 0:
        for p in peers[1:]:
            for d in asks[str(p["rank"])]:
                size, error = receive_object(group, store, d, p["rank"], p["host"])
                out["received_bytes"] += max(size, 0)
                if error:
                    out["errors"].append(error)
                else:
                    out["received_objects"] += 1
    else:
        for d in asks[str(group.rank)]:
            out["sent_bytes"] += send_object(group, store, d, 0)
            out["sent_objects"] += 1
    group.wait_sends()
    out["seconds"] = time.time() - t0
    return out


def adopt_shard(group: Group, home: str, manifest: dict | None, parent: str | None, written: list[str]) -> None:
    """After rank 0 committed `manifest`: every rank whose home's HEAD is not its root (its store is not
    rank 0's) adopts it as a shard of its own objects, from `parent`. Every rank learns every outcome;
    one failure raises CommitError on all of them, naming the rank and host (rank 0's HEAD has moved:
    the commit exists and is whole there; the failed host holds the previous HEAD)."""
    status = {"rank": group.rank, "host": host_name(), "ok": True, "error": None}
    if manifest is not None and commits.read_head(home) != manifest["full_root"]:
        shard = set(written) | {manifest["layout"]["model_config"]}
        try:
            commits.adopt_commit(home, manifest, expected_head=parent, shard=shard)
        except (ValueError, OSError) as e:  # OSError too (this host's disk): every rank must reach the report
            status.update(ok=False, error=f"{type(e).__name__}: {e}")
    reports = [loads_strict(b, "shard adoption") for b in group.allgather_bytes(canonical_json(status))]
    bad = [r for r in reports if not r["ok"]]
    if bad:
        root = manifest["full_root"] if manifest else "the commit"
        raise commits.CommitError(f"commit {root} is whole in rank 0's store, but "
                                  + "; ".join(f"rank {r['rank']} ({r['host']}) could not adopt its shard: {r['error']}"
                                              for r in bad))
