"""Commits without a shared filesystem (kit/engine/commit_transfer.py), under NCCL's point-to-point rules
(tests/support/nccl_semantics.py: rendezvous sends, FIFO per ordered pair, no tags, one thread per rank): three
ranks, three separate store directories. Rank 0's store receives exactly the objects it lacks, each once,
verified and counted; an object that arrives with wrong bytes is refused naming the object and the sending
rank and host, and is not installed."""

from __future__ import annotations

import hashlib
import os

from support.nccl_semantics import run_ranks

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
    out = run_ranks(3, lambda g: gather_objects(g, stores[g.rank], written[g.rank]).to_json(), timeout_s=20)
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
    out = run_ranks(3, lambda g: gather_objects(g, stores[g.rank], written[g.rank]).to_json(), timeout_s=20)
    (error,) = out[0]["errors"]
    assert error.startswith(f"object {victim} from rank 2 (") and "wrong bytes" in error, error
    assert not stores[0].has(victim)
    assert out[0]["received_objects"] == 5  # every other object still arrived: both sides stayed in step


def test_a_disk_error_on_rank_0_is_reported_and_the_ranks_stay_in_step(tmp_path):
    """rank 0's disk refuses one object (full, read-only): recorded like wrong bytes, naming the object and
    the sender; the message was received whole, so the later objects still arrive in order and no rank is
    left waiting in a send (before, the OSError left the sending ranks blocked under NCCL's rules)."""
    stores, written, _ = _stores(tmp_path)
    victim = written[2][2]
    real_put = stores[0].put_bytes

    def put_bytes(data):
        if hashlib.sha256(data).hexdigest() == victim:
            raise OSError(28, "No space left on device")
        return real_put(data)

    stores[0].put_bytes = put_bytes
    out = run_ranks(3, lambda g: gather_objects(g, stores[g.rank], written[g.rank]).to_json(), timeout_s=20)
    (error,) = out[0]["errors"]
    assert error.startswith(f"object {victim} from rank 2 (") and "cannot be installed here: OSError" in error
    assert not stores[0].has(victim)
    assert out[0]["received_objects"] == 5 and out[2]["sent_objects"] == 2


def test_a_shard_adoption_that_fails_on_one_host_raises_on_every_rank(tmp_path, monkeypatch):
    """adopt_shard after a commit: an OSError on rank 1's disk is reported through the all-gather, so every
    rank raises CommitError naming rank 1 (an uncaught OSError there would leave rank 0 in the all-gather)."""
    from kit.engine import commit_transfer
    from kit.store import commits
    from kit.store.manifest import CommitLayout, LearnedState, Manifest

    manifest = Manifest(format="kit-checkpoint/1", learned_state=LearnedState(cursor={}, params=()),
                        learned_state_root="0" * 64, full_root="f" * 64,
                        layout=CommitLayout(blocks=((0, 1), (1, 2)), embedding_owner=0, model_config="c" * 64),
                        parent=None, rng=("1" * 64, "2" * 64))

    def adopt_commit(home, manifest, expected_head=None, shard=None):
        if home.endswith("host1"):
            raise OSError(30, "Read-only file system")

    monkeypatch.setattr(commits, "adopt_commit", adopt_commit)

    def rank(g):
        try:
            commit_transfer.adopt_shard(g, str(tmp_path / f"host{g.rank}"), manifest, None, ["a" * 64])
        except commits.CommitError as e:
            return str(e)
        return None

    messages = run_ranks(2, rank, timeout_s=20)
    assert messages[0] == messages[1] and "rank 1 (" in messages[0] and "OSError: [Errno 30]" in messages[0]
