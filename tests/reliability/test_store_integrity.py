"""Issue 9, cases 4 (store files), 5 and 10: damaged store files, tampered manifests, a new owner's fetch.

Case 4 (store side). A flipped bit, a truncation and a deletion of each file kind of a checkpoint
store (tensor object, RNG object, manifest, HEAD): every reader refuses, naming the file (and, for an
object, its expected digest), including the paths a resume takes (load_param_states, a Session
restoring its RNG) and a new owner's fetch path; nothing is installed or loaded. The prepared-job
file kinds (role file, prepared.json, contract, selection record) are in test_prepared_job_guards.py.

Case 5. Manifest tampering beyond tests/test_store.py: duplicates nested anywhere (even with the same
value), NaN / Infinity anywhere, trailing or leading bytes of every sort, other spellings of the same
values (1.0 for 1, escaped key characters, upper-case hex), an edited digest. Each is refused by the
reader; each that only changed the byte form re-serialises to the identical bytes with the same root.

Case 10. A new owner fetching its assigned objects through `kit.engine.migration.migrate` (simulated per rank
in this process: a one-process group per rank, fetching into one destination store): an object it
does not need being corrupt does not matter; it fetches exactly its assigned objects, and besides them
opens only the model's config object (every rank reads it for the model's shape; a few hundred bytes);
an object it needs being corrupt fails the migration naming that object, and HEAD does not move.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from support.engine import OPT
from support.engine_workers import engine_config
from support.reliability import corrupt, model_commit, write_seed

from kit.digest import canonical_json, loads_strict, sha256_json
from kit.distributed.group import Group
from kit.engine.migration import MigrationError, migrate
from kit.engine.session import Session
from kit.model.shard import even_layout
from kit.store.commits import (
    CommitError,
    HeadMoved,
    load_param_states,
    read_commit,
    read_head,
    verify_commit,
    write_commit,
)
from kit.store.objects import ObjectCorrupt, ObjectMissing, ObjectStore, StoreError, fetch_objects
from kit.store.start import start_from_commit
from kit.train.optim import GroupConfig

DAMAGES = ("bit_flip", "truncate", "delete")
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    return write_seed(tmp_path_factory.mktemp("integrity") / "seed", layers=2)


@pytest.fixture
def store(tmp_path, seed):
    home = tmp_path / "home"
    root = model_commit(home, seed, workers=2, seed=1)
    return home, root, read_commit(home, root)


def names_object(path: Path, digest: str) -> str:
    """The message names the file and the object's expected digest (corrupt or missing alike)."""
    return re.escape(str(path)) + r".*" + digest


# -- case 4: store files ----------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_tensor_object_is_never_loaded(store, damage, tmp_path):
    home, _, manifest = store
    entry = manifest["learned_state"]["params"][3]
    digest = entry["exp_avg"]
    path = ObjectStore(home).path(digest)
    corrupt(path, damage)
    with pytest.raises(CommitError, match=r"1 problem\(s\):\n" + names_object(path, digest)):
        verify_commit(home)
    error = ObjectMissing if damage == "delete" else ObjectCorrupt
    with pytest.raises(error, match=names_object(path, digest)):  # the resume path
        load_param_states(ObjectStore(home), manifest["learned_state"]["params"], {entry["name"]})
    dest = ObjectStore(tmp_path / "new-owner")  # the new owner's fetch path
    with pytest.raises(error, match=names_object(path, digest)):
        fetch_objects(ObjectStore(home), dest, [entry["param"], digest])
    assert dest.has(entry["param"]) and not dest.has(digest)
    assert list((tmp_path / "new-owner" / "tmp").iterdir()) == []


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_copy_in_the_new_owners_store_is_replaced_not_used(store, damage, tmp_path):
    home, _, manifest = store
    digest = manifest["learned_state"]["params"][0]["param"]
    dest = ObjectStore(tmp_path / "new-owner")
    fetch_objects(ObjectStore(home), dest, [digest])
    corrupt(dest.path(digest), damage)
    source = ObjectStore(home)
    assert fetch_objects(source, dest, [digest]) == source.path(digest).stat().st_size  # fetched again
    assert dest.get_bytes(digest) == source.get_bytes(digest)


def _session(home: Path, root: str) -> Session:
    opt = GroupConfig(**OPT)
    return Session(Group(0, 1, CPU), str(home), even_layout(2, 1), start_from_commit(str(home), root),
                   engine_config({"microbatch_size": 2, "max_grad_norm": 1.0}), {"default": opt})


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_rng_object_refuses_the_resume(tmp_path, seed, damage):
    home = tmp_path / "home"
    root = model_commit(home, seed, workers=1, seed=2)
    digest = read_commit(home, root)["rng"][0]
    stored = ObjectStore(home).get_bytes(digest)
    _session(home, root)
    assert torch.get_rng_state().numpy().tobytes() == stored  # intact: restored exactly
    path = ObjectStore(home).path(digest)
    corrupt(path, damage)
    with pytest.raises(CommitError, match=names_object(path, digest)):
        verify_commit(home)
    # a deleted RNG object used to be replaced by a fresh seed without a word; every damage is refused
    with pytest.raises(ObjectMissing if damage == "delete" else ObjectCorrupt, match=names_object(path, digest)):
        _session(home, root)


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_manifest_is_refused_everywhere(store, damage):
    home, root, _ = store
    path = home / "commits" / f"{root}.json"
    original = path.read_bytes()
    if damage == "bit_flip":  # ~150 positions across the file, a different bit each time
        positions = sorted(set(range(0, len(original), max(1, len(original) // 150))) | {len(original) - 1})
        for i in positions:
            path.write_bytes(original[:i] + bytes([original[i] ^ (1 << (i % 8))]) + original[i + 1:])
            with pytest.raises(ValueError, match=re.escape(str(path))):
                read_commit(home, root)
        path.write_bytes(original)
        return
    corrupt(path, damage)
    expected = re.escape(str(path)) + (r": no manifest for commit " + root if damage == "delete" else "")
    for reader in (lambda: read_commit(home, root), lambda: verify_commit(home, root),
                   lambda: start_from_commit(str(home), root)):
        with pytest.raises(ValueError, match=expected):
            reader()
    if damage == "delete":
        with pytest.raises(CommitError, match=re.escape(str(home / "HEAD")) + f": names commit {root} but its manifest"):
            read_head(home)


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_head_is_refused_or_moves_nothing(store, damage):
    home, root, manifest = store
    head = home / "HEAD"
    original = head.read_bytes()
    if damage == "bit_flip":  # every bit of the 65 bytes
        for i in range(len(original)):
            for bit in range(8):
                head.write_bytes(original[:i] + bytes([original[i] ^ (1 << bit)]) + original[i + 1:])
                with pytest.raises(CommitError, match=re.escape(str(head))):
                    read_head(home)
        head.write_bytes(original)
        assert read_head(home) == root
        return
    corrupt(head, damage)
    if damage == "truncate":
        with pytest.raises(CommitError, match=re.escape(str(head)) + ": expected 64 lowercase hex"):
            read_head(home)
        return
    assert read_head(home) is None  # no HEAD: nothing to load by default ...
    with pytest.raises(CommitError, match="no HEAD"):
        verify_commit(home)
    # ... and a writer continuing from the commit it started from is refused, naming HEAD
    ls, layout, rng = manifest["learned_state"], manifest["layout"], manifest["rng"]
    with pytest.raises(HeadMoved, match=re.escape(str(head)) + f": names no commit but this commit's parent is {root}"):
        write_commit(home, {**ls, "cursor": {"step": 2}}, layout, root, rng)
    assert read_head(home) is None


# -- case 5: manifest tampering ---------------------------------------------------------------------------


def _nested_duplicate(data: bytes) -> bytes:
    """Repeat `"age":N` inside the first parameter entry (same key, same value)."""
    m = re.search(rb'"age":\d+,', data)
    return data[:m.end()] + m.group(0) + data[m.end():]


def _layout_duplicate(data: bytes) -> bytes:
    m = re.search(rb'"embedding_owner":\d+,', data)
    return data[:m.end()] + m.group(0) + data[m.end():]


REFUSED = {
    "duplicate key in a parameter entry, same value": (_nested_duplicate, "duplicate key 'age'"),
    "duplicate key in the layout, same value": (_layout_duplicate, "duplicate key 'embedding_owner'"),
    "NaN in the cursor": (lambda b: re.sub(rb'"step":\d+', b'"step":NaN', b, count=1), "non-finite number NaN"),
    "Infinity as an age": (lambda b: re.sub(rb'"age":\d+', b'"age":Infinity', b, count=1), "non-finite number Infinity"),
    "-Infinity as an owner": (lambda b: re.sub(rb'"embedding_owner":\d+', b'"embedding_owner":-Infinity', b, count=1),
                              "non-finite number -Infinity"),
    "trailing NUL": (lambda b: b + b"\x00", "invalid JSON"),
    "trailing second document": (lambda b: b + b"{}", "invalid JSON"),
    "trailing garbage": (lambda b: b + b"xyz", "invalid JSON"),
    "UTF-8 BOM": (lambda b: b"\xef\xbb\xbf" + b, "invalid JSON|not in canonical JSON form"),
    "invalid UTF-8": (lambda b: b.replace(b'"format"', b'"f\xffrmat"', 1), "not UTF-8"),
    "empty file": (lambda b: b"", "invalid JSON"),
}
# Same values, another byte form: refused by the reader, and re-serialising gives the original bytes.
SAME_VALUES = {
    "leading space": lambda b: b" " + b,
    "trailing newline": lambda b: b + b"\n",
    "trailing spaces and tabs": lambda b: b + b" \t \r\n",
    "pretty-printed": lambda b: json.dumps(json.loads(b), indent=2, sort_keys=True).encode(),
    "keys reversed at every level": lambda b: json.dumps(_reverse(json.loads(b)), separators=(",", ":")).encode(),
    "escaped key characters": lambda b: b.replace(b'"format"', b'"\\u0066ormat"', 1),
    "escaped slash-free unicode in a value": lambda b: b.replace(b'"kit-checkpoint/1"', b'"kit\\u002dcheckpoint/1"', 1),
}


def _reverse(obj):
    if isinstance(obj, dict):
        return {k: _reverse(v) for k, v in reversed(list(obj.items()))}
    if isinstance(obj, list):
        return [_reverse(v) for v in obj]
    return obj


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_tampered_manifest_is_refused(store, name):
    home, root, _ = store
    mangle, message = REFUSED[name]
    path = home / "commits" / f"{root}.json"
    path.write_bytes(mangle(path.read_bytes()))
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*(" + message + ")"):
        read_commit(home, root)
    with pytest.raises(ValueError, match=re.escape(str(path))):
        start_from_commit(str(home), root)


@pytest.mark.parametrize("name", sorted(SAME_VALUES))
def test_reformatted_manifest_is_refused_but_reserialises_to_the_same_root(store, name):
    home, root, manifest = store
    path = home / "commits" / f"{root}.json"
    original = path.read_bytes()
    variant = SAME_VALUES[name](original)
    assert variant != original
    path.write_bytes(variant)
    with pytest.raises(ValueError, match=re.escape(str(path)) + ": not in canonical JSON form"):
        read_commit(home, root)
    parsed = loads_strict(variant, name)
    assert canonical_json(parsed) == original  # identical bytes ...
    assert sha256_json(parsed["learned_state"]) == manifest["learned_state_root"]  # ... the same roots
    assert parsed == manifest


@pytest.mark.parametrize("spelling", ["float age", "upper-case digest", "edited digest"])
def test_other_values_are_refused(store, spelling):
    home, root, manifest = store
    path = home / "commits" / f"{root}.json"
    data = path.read_bytes()
    digest = manifest["learned_state"]["params"][0]["param"]
    other = manifest["learned_state"]["params"][1]["param"]
    mangled = {"float age": re.sub(rb'"age":(\d+)', rb'"age":\1.0', data, count=1),
               "upper-case digest": data.replace(digest.encode(), digest.upper().encode(), 1),
               "edited digest": data.replace(digest.encode(), other.encode(), 1)}[spelling]
    path.write_bytes(mangled)
    message = {"float age": r"\.age: expected a non-negative integer, got 1\.0",
               "upper-case digest": r"\.param: expected a sha256 digest",
               "edited digest": r"learned_state_root .* does not match the learned state"}[spelling]
    with pytest.raises(StoreError, match=re.escape(str(path)) + ".*" + message):
        read_commit(home, root)


# -- case 10: a new owner's fetch ---------------------------------------------------------------------------


def _owned_names(manifest: dict, rank: int, layout) -> set[str]:
    """Independently of kit.engine: block tensors by index, everything else on the embedding owner."""
    out = set()
    for e in manifest["learned_state"]["params"]:
        m = re.match(r"model\.layers\.(\d+)\.", e["name"])
        if (m and int(m.group(1)) in layout.blocks_of(rank)) or (not m and rank == 0):
            out.add(e["name"])
    return out


def _assigned(manifest: dict, rank: int, layout) -> set[str]:
    names = _owned_names(manifest, rank, layout)
    own = {e[f] for e in manifest["learned_state"]["params"] if e["name"] in names
           for f in ("param", "exp_avg", "exp_avg_sq")}
    return own | ({manifest["layout"]["model_config"], *manifest["rng"]} if rank == 0 else set())


def test_new_owner_needs_only_its_objects_and_fails_naming_a_corrupt_one(tmp_path, seed, monkeypatch):
    source, dest = tmp_path / "source", tmp_path / "dest"
    root = model_commit(source, seed, workers=2, seed=3)
    manifest = read_commit(source, root)
    layout = even_layout(2, 2)
    assigned = {r: _assigned(manifest, r, layout) for r in (0, 1)}
    assert not assigned[0] & assigned[1]
    # corrupt an object only rank 0 needs (the embedding's second moment)
    embed = next(e for e in manifest["learned_state"]["params"] if e["name"] == "model.embed_tokens.weight")
    victim = ObjectStore(source).path(embed["exp_avg_sq"])
    good_bytes = victim.read_bytes()
    corrupt(victim, "bit_flip")

    opened: list[tuple[Path, str]] = []
    real_open = ObjectStore._open

    def recording_open(self, digest):
        opened.append((self.home, digest))
        return real_open(self, digest)

    monkeypatch.setattr(ObjectStore, "_open", recording_open)
    read = migrate(Group(1, 1, CPU), str(source), str(dest), root, layout)  # rank 1: succeeds
    from_source = [d for home, d in opened if home == source]
    config = manifest["layout"]["model_config"]  # every rank reads the config object for the model's shape
    assert sorted(from_source) == sorted([config, *assigned[1]])  # and opens exactly its own objects, once
    sizes = {d: ObjectStore(source).path(d).stat().st_size for d in assigned[1]}
    assert read == sum(sizes.values())
    assert set(ObjectStore(dest).digests()) == assigned[1]
    assert read_head(dest) is None  # only rank 0 adopts, once every rank is ready

    opened.clear()
    with pytest.raises(MigrationError, match=r"rank 0: ObjectCorrupt: " + re.escape(str(victim))
                       + f": refusing to fetch object {embed['exp_avg_sq']}"):
        migrate(Group(0, 1, CPU), str(source), str(dest), root, layout)
    assert {d for home, d in opened if home == source} <= assigned[0]  # the config object is rank 0's
    assert read_head(dest) is None and not ObjectStore(dest).has(embed["exp_avg_sq"])
    assert list((dest / "tmp").iterdir()) == []

    victim.write_bytes(good_bytes)  # the source is repaired: the rerun fetches what is missing and adopts
    migrate(Group(0, 1, CPU), str(source), str(dest), root, layout)
    assert read_head(dest) == root
    assert verify_commit(dest)["full_root"] == root
    assert set(ObjectStore(dest).digests()) == assigned[0] | assigned[1]
