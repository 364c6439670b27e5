"""A commit without a shared filesystem: rank 0's store is the committed store, every other host's store
holds its own shard.

Before rank 0 writes a commit, every rank announces the objects it wrote, rank 0 asks for the ones
its store lacks and installs each only when its sha256 is its name; then rank 0 writes the commit as
always and every other rank adopts the manifest as a shard. The decision to know: HEAD moves only
after every object is durable in the committing store, so a failed transfer means no commit.
Protocol and message order: the notes below; why the process
group: docs/engine.md, "Across hosts without a shared filesystem".

Notes: the message order.

Under NCCL's point-to-point rules (rendezvous sends, FIFO per pair, no tags) rank 0 posts its receives in rank order
and, per rank, in that rank's announced order; each sender sends in the same order to rank 0 only, so the k-th send
of a pair always meets the k-th receive.
"""

from __future__ import annotations

import time

from kit.digest import canonical_json, loads_strict
from kit.distributed.group import Group
from kit.engine.fetch import host_name, receive_object, send_object
from kit.engine.formats import CommitTransfer, RankStatus, WrittenObjects
from kit.store import commits
from kit.store.manifest import Manifest
from kit.store.objects import ObjectStore


def gather_objects(group: Group, store: ObjectStore, written: list[str]) -> CommitTransfer:
    """Bring every object the ranks wrote for this commit into rank 0's store (only those it lacks).

    Returns this rank's transfer (errors only on rank 0; they name the object and the sending host).
    Every rank calls it together."""
    t0 = time.time()
    host = host_name()
    sent_bytes = sent_objects = received_bytes = received_objects = 0
    errors: list[str] = []
    if group.distributed:
        me = {"rank": group.rank, "host": host, "written": list(dict.fromkeys(written))}
        peers = [WrittenObjects.from_json(loads_strict(b, "commit objects announcement"), "commit objects announcement")
                 for b in group.allgather_bytes(canonical_json(me))]
        asks: dict[str, list[str]] = {}
        if group.rank == 0:
            asked: set[str] = set()
            for p in peers[1:]:
                need = [d for d in p.written if d not in asked and not store.has(d)]
                asked.update(need)
                asks[str(p.rank)] = need
        asks = loads_strict(group.allgather_bytes(canonical_json(asks) if group.rank == 0 else b"")[0], "commit asks")
        if group.rank == 0:
            for p in peers[1:]:
                for d in asks[str(p.rank)]:
                    size, error = receive_object(group, store, d, p.rank, p.host)
                    received_bytes += max(size, 0)
                    if error:
                        errors.append(error)
                    else:
                        received_objects += 1
        else:
            for d in asks[str(group.rank)]:
                sent_bytes += send_object(group, store, d, 0)
                sent_objects += 1
        group.wait_sends()
    return CommitTransfer(rank=group.rank, host=host, sent_bytes=sent_bytes, sent_objects=sent_objects,
                          received_bytes=received_bytes, received_objects=received_objects,
                          seconds=time.time() - t0 if group.distributed else 0.0, errors=tuple(errors))


def adopt_shard(group: Group, home: str, manifest: Manifest | None, parent: str | None, written: list[str]) -> None:
    """After rank 0 committed `manifest`: every rank whose home's HEAD is not its root (its store is not
    rank 0's) adopts it as a shard of its own objects, from `parent`. Every rank learns every outcome;
    one failure raises CommitError on all of them, naming the rank and host (rank 0's HEAD has moved:
    the commit exists and is whole there; the failed host holds the previous HEAD)."""
    status = {"rank": group.rank, "host": host_name(), "ok": True, "error": None}
    if manifest is not None and commits.read_head(home) != manifest.full_root:
        shard = set(written) | {manifest.layout.model_config}
        try:
            commits.adopt_commit(home, manifest, expected_head=parent, shard=shard)
        except (ValueError, OSError) as e:  # OSError too (this host's disk): every rank must reach the report
            status.update(ok=False, error=f"{type(e).__name__}: {e}")
    reports = [RankStatus.from_json(loads_strict(b, "shard adoption"), "shard adoption")
               for b in group.allgather_bytes(canonical_json(status))]
    bad = [r for r in reports if not r.ok]
    if bad:
        root = manifest.full_root if manifest else "the commit"
        raise commits.CommitError(f"commit {root} is whole in rank 0's store, but "
                                  + "; ".join(f"rank {r.rank} ({r.host}) could not adopt its shard: {r.error}"
                                              for r in bad))
