"""Commits without a shared filesystem (kit/engine/commit_transfer.py), under NCCL's point-to-point rules
(tests/nccl_semantics.py: rendezvous sends, FIFO per ordered pair, no tags, one thread per rank): three
ranks, three separate store directories. Rank 0's store receives exactly the objects it lacks, each once,
verified and counted; an object that arrives with wrong bytes is refused naming the object and the sending
rank and host, and is not installed."""

from __future__ import annotations

import os

from nccl_semantics import run_ranks

from kit.engine.commit_transfer import gather_objects
from kit.store.objects import ObjectStore


def _stores(tmp_path):
    """Rank r's store holds blob(r, i) for i < 3, and ranks 1 and 2 both wrote `shared`; rank 0 already
    holds rank 2's first object. Returns (stores, written per rank, the shared digest)."""
    stores = [ObjectStore(tmp_path / f"host{r}") for r in range(3)]
    written = [[s.put_bytes(f"rank {r} object {i} ".encode() * (50 + i)) for i in range(3)]
               for r, s in enumerate(stores)]
    shared = stores[1].put_bytes(b"identical bytes on two ranks" * 20)
    stores[2].put_bytes(b"identical bytes on two ranks" * 20)
    written[1].append(shared)
    written[2].append(shared)
    stores[0].put_bytes(stores[2].get_bytes(written[2][0]))
    return stores, written, shared


def test_rank0_receives_exactly_what_it_lacks_under_nccl_rules(tmp_path):
    stores, written, shared = _stores(tmp_path)
    out = run_ranks(3, lambda g: gather_objects(g, stores[g.rank], written[g.rank]), timeout_s=20)
    lacked = written[1] + [d for d in written[2][1:] if d != shared]  # `shared` asked from rank 1 only
    assert set(stores[0].digests()) == set(written[0]) | set(lacked) | {written[2][0]}
    for d in lacked:
        stores[0].verify(d)
    size = {r: sum(os.path.getsize(stores[r].path(d)) for d in ds)
            for r, ds in ((1, written[1]), (2, [d for d in written[2][1:] if d != shared]))}
    assert out[1]["sent_bytes"] == size[1] and out[2]["sent_bytes"] == size[2]
    assert out[0]["received_bytes"] == size[1] + size[2] and out[0]["received_objects"] == len(lacked)
    assert out[1]["sent_objects"] == 4 and out[2]["sent_objects"] == 2 and out[0]["errors"] == []


def test_wrong_bytes_are_refused_naming_object_and_host(tmp_path):
    stores, written, _ = _stores(tmp_path)
    victim = written[2][2]
    path = stores[2].path(victim)
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[3] ^= 0xFF
    path.write_bytes(bytes(data))
    out = run_ranks(3, lambda g: gather_objects(g, stores[g.rank], written[g.rank]), timeout_s=20)
    (error,) = out[0]["errors"]
    assert error.startswith(f"object {victim} from rank 2 (") and "wrong bytes" in error, error
    assert not stores[0].has(victim)
    assert out[0]["received_objects"] == 5  # every other object still arrived: both sides stayed in step
