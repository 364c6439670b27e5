"""Content-addressed checkpoint store: objects, roots, manifests, HEAD protocol, fetch, gc, export."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from support.models import REPO
from support.store import commit, random_states, stage_commit

from kit.digest import canonical_json
from kit.inventory import inventory, parameter_digest, tensor_sha256
from kit.store.commits import (
    CommitError,
    HeadLocked,
    HeadMoved,
    RecordError,
    gc,
    list_commits,
    load_param_states,
    read_commit,
    read_head,
    save_param_states,
    validate_layout,
    validate_learned_state,
    verify_commit,
    write_commit,
)
from kit.store.export import ExportError, export_hf
from kit.store.objects import (
    ObjectCorrupt,
    ObjectMissing,
    ObjectStore,
    StoreError,
    fetch_objects,
    host_tag,
)


def dead_pid() -> int:
    """The pid of a process that has already exited."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    return int(done.stdout)


def raw(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


# -- objects -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tensor",
    [
        torch.tensor([[1.5, -0.0, float("inf")], [float("nan"), 1e-45, -3.25]], dtype=torch.float32),
        torch.tensor([1.5, -2.0, 3.0e38, 1e-40], dtype=torch.bfloat16),
        torch.tensor([[-(2**63), 2**63 - 1], [0, 7]], dtype=torch.int64),
        torch.tensor(2.5),  # 0-dim
        torch.zeros(0, 3),  # empty
        torch.arange(12, dtype=torch.float32).reshape(3, 4).t(),  # non-contiguous view
    ],
)
def test_tensor_round_trip_is_bit_exact(tmp_path, tensor):
    store = ObjectStore(tmp_path)
    digest = store.put_tensor(tensor)
    assert digest == hashlib.sha256(raw(tensor)).hexdigest()
    assert store.path(digest) == tmp_path / "objects" / digest[:2] / digest
    assert store.path(digest).read_bytes() == raw(tensor)
    back = store.get_tensor(digest, str(tensor.dtype).removeprefix("torch."), tensor.shape)
    assert back.dtype == tensor.dtype and back.shape == tensor.shape
    assert raw(back) == raw(tensor)
    assert store.bytes_read == len(raw(tensor))


def test_object_digest_equals_safetensors_tensor_digest(tmp_path):
    tensors = {
        "f32": torch.randn(3, 5),
        "bf16": torch.randn(7).to(torch.bfloat16),
        "i64": torch.arange(-4, 5, dtype=torch.int64),
    }
    save_file(tensors, str(tmp_path / "model.safetensors"))
    inv = inventory(tmp_path)
    store = ObjectStore(tmp_path / "store")
    for name, t in tensors.items():
        digest = store.put_tensor(t)
        assert digest == hashlib.sha256(raw(t)).hexdigest()
        assert digest == tensor_sha256(inv[name])


def test_put_is_idempotent_and_leaves_no_temporaries(tmp_path):
    store = ObjectStore(tmp_path)
    digest = store.put_bytes(b"config bytes")
    inode = store.path(digest).stat().st_ino
    assert store.put_bytes(bytearray(b"config bytes")) == digest
    assert store.path(digest).stat().st_ino == inode  # an intact copy is not rewritten
    assert list((tmp_path / "tmp").iterdir()) == []
    assert list(store.digests()) == [digest] and store.has(digest)
    store.path(digest).write_bytes(b"config bytez")  # a damaged copy is repaired by the next put
    assert store.put_bytes(b"config bytes") == digest
    assert store.get_bytes(digest) == b"config bytes"


def test_get_tensor_refuses_wrong_length(tmp_path):
    store = ObjectStore(tmp_path)
    digest = store.put_tensor(torch.zeros(2, 3))
    with pytest.raises(StoreError, match=re.escape(str(store.path(digest))) + r".*24 bytes.*\[4, 3\] needs 48"):
        store.get_tensor(digest, "float32", [4, 3])
    with pytest.raises(ValueError, match="dtype 'complex64'"):
        store.get_tensor(digest, "complex64", [6])


@pytest.mark.parametrize("damage", ["bit_flip", "truncated", "missing"])
def test_damaged_object_is_detected_and_names_the_file(tmp_path, damage):
    root = commit(tmp_path, seed=1, parent=None)
    manifest = read_commit(tmp_path, root)
    digest = manifest["learned_state"]["params"][0]["exp_avg"]
    store = ObjectStore(tmp_path)
    path = store.path(digest)
    data = path.read_bytes()
    if damage == "bit_flip":
        path.write_bytes(data[:5] + bytes([data[5] ^ 0x01]) + data[6:])
    elif damage == "truncated":
        path.write_bytes(data[:-1])
    else:
        path.unlink()
    error = ObjectMissing if damage == "missing" else ObjectCorrupt
    expected = "is missing" if damage == "missing" else f"expected sha256 {digest}.*actual sha256 [0-9a-f]{{64}}"
    with pytest.raises(error, match=re.escape(str(path)) + ".*" + expected):
        store.get_bytes(digest)
    with pytest.raises(error, match=re.escape(str(path))):
        load_param_states(store, manifest["learned_state"]["params"], {manifest["learned_state"]["params"][0]["name"]})
    with pytest.raises(CommitError, match=r"1 problem\(s\):\n" + re.escape(str(path))):
        verify_commit(tmp_path)


# -- roots, manifests, HEAD ----------------------------------------------------------------------


def test_commit_roots_recompute_independently(tmp_path):
    parent = commit(tmp_path, seed=1, parent=None)
    root = commit(tmp_path, seed=2, parent=parent)

    def canon(obj) -> bytes:
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()

    data = (tmp_path / "commits" / f"{root}.json").read_bytes()
    m = json.loads(data)
    assert canon(m) == data
    assert m["format"] == "kit-checkpoint/1" and m["parent"] == parent and m["full_root"] == root
    ls_root = hashlib.sha256(canon(m["learned_state"])).hexdigest()
    assert m["learned_state_root"] == ls_root
    full = {"learned_state_root": ls_root, "layout": m["layout"], "parent": m["parent"], "rng": m["rng"]}
    assert hashlib.sha256(canon(full)).hexdigest() == root
    assert (tmp_path / "HEAD").read_bytes() == root.encode() + b"\n"
    assert [e["name"] for e in m["learned_state"]["params"]] == ["a.weight", "b.weight", "c.bias"]
    report = verify_commit(tmp_path)
    assert report["full_root"] == root and report["learned_state_root"] == ls_root
    assert report["objects"] == 1 + 2 + 9 and report["num_layers"] == 2 and report["parent"] == parent
    assert report["bytes"] == sum(os.path.getsize(ObjectStore(tmp_path).path(d)) for d in
                                  [m["layout"]["model_config"], *m["rng"]] +
                                  [e[f] for e in m["learned_state"]["params"] for f in ("param", "exp_avg", "exp_avg_sq")])
    assert verify_commit(tmp_path, parent)["full_root"] == parent
    assert list_commits(tmp_path) == sorted([parent, root])


def test_learned_state_root_ignores_layout_and_rng(tmp_path):
    ls, layout, rng = stage_commit(tmp_path, seed=3, world=2)
    first = write_commit(tmp_path, ls, layout, None, rng)
    one_worker = {**layout, "blocks": [[0, 2]]}
    second = write_commit(tmp_path, ls, one_worker, first, [ObjectStore(tmp_path).put_bytes(b"another rng")])
    a, b = read_commit(tmp_path, first), read_commit(tmp_path, second)
    assert first != second and a["learned_state_root"] == b["learned_state_root"]


def _rewrite(path: Path, manifest: dict) -> None:
    path.write_bytes(canonical_json(manifest))


def test_edited_manifest_is_refused(tmp_path):
    root = commit(tmp_path, seed=1, parent=None)
    path = tmp_path / "commits" / f"{root}.json"
    original = json.loads(path.read_bytes())
    edited = json.loads(path.read_bytes())
    edited["learned_state"]["params"][1]["param"] = edited["learned_state"]["params"][0]["param"]
    _rewrite(path, edited)
    with pytest.raises(CommitError, match=re.escape(str(path)) + ": learned_state_root .* does not match"):
        read_commit(tmp_path, root)
    edited["learned_state_root"] = hashlib.sha256(canonical_json(edited["learned_state"])).hexdigest()
    _rewrite(path, edited)
    with pytest.raises(CommitError, match=re.escape(str(path)) + ": full_root .* does not match the recomputed"):
        read_commit(tmp_path, root)
    _rewrite(path, {**original, "rng": original["rng"][::-1]})
    with pytest.raises(CommitError, match="full_root"):
        read_commit(tmp_path, root)
    _rewrite(path, original)
    other = "f" * 64
    (tmp_path / "commits" / f"{other}.json").write_bytes(path.read_bytes())
    with pytest.raises(CommitError, match="differs from the file name"):
        read_commit(tmp_path, other)
    assert read_commit(tmp_path, root) == original


def _reorder(data: bytes) -> bytes:
    return json.dumps(dict(reversed(list(json.loads(data).items()))), separators=(",", ":")).encode()


@pytest.mark.parametrize(
    "mangle, message",
    [
        (_reorder, "not in canonical JSON form"),
        (lambda b: b + b"\n", "not in canonical JSON form"),
        (lambda b: json.dumps(json.loads(b), sort_keys=True, indent=1).encode(), "not in canonical JSON form"),
        (lambda b: b'{"format":"kit-checkpoint/0",' + b[1:], "duplicate key 'format'"),
        (lambda b: b.replace(b'"age":1,', b'"age":NaN,', 1), "non-finite number NaN"),
    ],
)
def test_non_canonical_manifest_is_refused(tmp_path, mangle, message):
    root = commit(tmp_path, seed=1, parent=None)
    path = tmp_path / "commits" / f"{root}.json"
    original = path.read_bytes()
    mangled = mangle(original)
    assert mangled != original
    path.write_bytes(mangled)
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*" + message):
        read_commit(tmp_path, root)
    with pytest.raises(ValueError, match=re.escape(str(path))):
        verify_commit(tmp_path)


def test_head_that_names_no_commit_is_refused(tmp_path):
    root = commit(tmp_path, seed=1, parent=None)
    head = tmp_path / "HEAD"
    assert read_head(tmp_path) == root
    head.write_bytes(b"ab" * 32 + b"\n")
    with pytest.raises(CommitError, match=re.escape(str(head)) + ": names commit (ab){32} but its manifest"):
        read_head(tmp_path)
    with pytest.raises(CommitError, match=re.escape(str(head))):
        verify_commit(tmp_path)
    for bad in (root.encode(), root.upper().encode() + b"\n", root.encode() + b"\n\n", b""):
        head.write_bytes(bad)
        with pytest.raises(CommitError, match=re.escape(str(head)) + ": expected 64 lowercase hex"):
            read_head(tmp_path)
    head.unlink()
    assert read_head(tmp_path) is None
    with pytest.raises(CommitError, match="no HEAD"):
        verify_commit(tmp_path)


# -- write_commit: validation, crash safety, compare-and-swap ------------------------------------


def test_validation_names_the_field(tmp_path):
    ls, layout, rng = stage_commit(tmp_path, seed=1)
    p = ls["params"]
    cases = [
        ({**ls, "params": [p[1], p[0], p[2]]}, r"params\[1\] \('a.weight'\).name: entries must be sorted"),
        ({**ls, "params": [p[0], p[0], p[2]]}, r"params\[1\] \('a.weight'\).name: duplicate"),
        ({**ls, "params": [{**p[0], "dtype": "bfloat16"}, *p[1:]]}, r"params\[0\] \('a.weight'\).dtype"),
        ({**ls, "params": [{**p[0], "age": -1}, *p[1:]]}, r"\.age: expected a non-negative integer, got -1"),
        ({**ls, "params": [{**p[0], "age": 1.0}, *p[1:]]}, r"\.age: expected a non-negative integer, got 1.0"),
        ({**ls, "params": [{**p[0], "param": "XY"}, *p[1:]]}, r"\.param: expected a sha256 digest"),
        ({**ls, "params": [{**p[0], "extra": 1}, *p[1:]]}, r"params\[0\]: expected exactly the keys"),
        ({**ls, "cursor": {"step": 1.5}}, r"cursor\['step'\]: expected a non-negative integer, got 1.5"),
        ({**ls, "cursor": {"step": True}}, r"cursor\['step'\]: expected a non-negative integer, got True"),
    ]
    for bad, message in cases:
        with pytest.raises(StoreError, match=message):
            validate_learned_state(bad, "learned_state")
    layout_cases = [
        ([[0, 1], [2, 2]], None, r"blocks\[1\]: misses blocks 1..1"),
        ([[0, 2], [1, 2]], None, r"blocks\[1\]: repeats blocks 1..1"),
        ([[1, 2]], None, r"blocks\[0\]: misses blocks 0..0"),
        ([[0, 1], [1, 2]], 3, r"blocks: cover blocks 0..1 but the model has 3"),
        ([[0, 3], [2, 1]], None, r"blocks\[1\]: start 2 is after stop 1"),
    ]
    for blocks, num_layers, message in layout_cases:
        with pytest.raises(RecordError, match=message):
            validate_layout({**layout, "blocks": blocks}, "layout", num_layers)
    with pytest.raises(RecordError, match=r"embedding_owner: expected a rank in 0..1, got 2"):
        validate_layout({**layout, "embedding_owner": 2})
    validate_layout({**layout, "blocks": [[0, 0], [0, 2]]}, "layout", 2)  # a rank may own no block
    # write_commit checks coverage against the config object and the rng count against the ranks
    with pytest.raises(CommitError, match=r"layout.blocks: cover blocks 0..2 but the model has 2"):
        write_commit(tmp_path, ls, {**layout, "blocks": [[0, 1], [1, 3]]}, None, rng)
    with pytest.raises(RecordError, match=r"rng: expected a list of 2 object digests"):
        write_commit(tmp_path, ls, layout, None, rng[:1])
    assert read_head(tmp_path) is None and list_commits(tmp_path) == []


def test_write_commit_refuses_missing_or_corrupt_objects(tmp_path):
    ls, layout, rng = stage_commit(tmp_path, seed=1)
    store = ObjectStore(tmp_path)
    store.path(rng[1]).unlink()
    victim = store.path(ls["params"][2]["param"])
    victim.write_bytes(victim.read_bytes()[:-4])
    with pytest.raises(CommitError, match=r"2 problem\(s\)") as info:
        write_commit(tmp_path, ls, layout, None, rng)
    assert str(store.path(rng[1])) in str(info.value) and str(victim) in str(info.value)
    assert read_head(tmp_path) is None and list_commits(tmp_path) == []


FAULT_SCRIPT = (
    "import json, sys\n"
    "import kit.numerics\n"
    "kit.numerics.apply()\n"
    "from kit.store.commits import write_commit\n"
    "a = json.load(open(sys.argv[1]))\n"
    "print(write_commit(a['home'], a['ls'], a['layout'], a['parent'], a['rng']))\n"
)


@pytest.mark.parametrize("point", ["objects_verified", "manifest_written", "before_head"])
def test_crash_at_any_point_leaves_head_on_previous_commit(tmp_path, point):
    home = tmp_path / "store"
    first = commit(home, seed=1, parent=None)
    ls, layout, rng = stage_commit(home, seed=2)
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"home": str(home), "ls": ls, "layout": layout, "parent": first, "rng": rng}))
    env = {**os.environ, "KIT_FAULT_POINT": point, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-c", FAULT_SCRIPT, str(args)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 137, done.stderr
    assert read_head(home) == first
    assert verify_commit(home)["full_root"] == first
    leftovers = sorted(p.name.split(".")[0] for p in (home / "tmp").iterdir())
    if point == "before_head":
        assert leftovers == ["head"] and (home / "HEAD.lock").exists()
    removed = gc(home)
    assert len(removed) == len(leftovers) + (point == "before_head")
    assert list((home / "tmp").iterdir()) == [] and not (home / "HEAD.lock").exists()
    assert gc(home) == []
    # a rerun succeeds (the manifest the crashed attempt may have written is the same bytes)
    second = write_commit(home, ls, layout, first, rng)
    assert read_head(home) == second and read_commit(home, second)["parent"] == first
    assert verify_commit(home)["full_root"] == second


def test_stale_lock_of_dead_writer_is_broken_and_live_lock_times_out(tmp_path):
    first = commit(tmp_path, seed=1, parent=None)
    ls, layout, rng = stage_commit(tmp_path, seed=2)
    lock = tmp_path / "HEAD.lock"
    host = host_tag()
    lock.write_bytes(canonical_json({"host": host, "pid": os.getpid(), "token": "someone-else"}))
    with pytest.raises(HeadLocked, match=re.escape(str(lock)) + ": held by .*someone-else"):
        write_commit(tmp_path, ls, layout, first, rng, lock_timeout_s=0.05)
    assert read_head(tmp_path) == first and lock.exists()
    lock.write_bytes(canonical_json({"host": host, "pid": dead_pid(), "token": "crashed"}))
    second = write_commit(tmp_path, ls, layout, first, rng, lock_timeout_s=0.05)
    assert read_head(tmp_path) == second and not lock.exists()


def test_compare_and_swap_refuses_a_stale_parent(tmp_path):
    first = commit(tmp_path, seed=1, parent=None)
    second = commit(tmp_path, seed=2, parent=first)
    ls, layout, rng = stage_commit(tmp_path, seed=3)
    with pytest.raises(HeadMoved, match=f"HEAD: names {second} but this commit's parent is {first}: another writer"):
        write_commit(tmp_path, ls, layout, first, rng)
    with pytest.raises(HeadMoved, match="parent is null"):
        write_commit(tmp_path, ls, layout, None, rng)
    assert read_head(tmp_path) == second
    assert not (tmp_path / "HEAD.lock").exists()
    third = write_commit(tmp_path, ls, layout, second, rng)
    assert read_head(tmp_path) == third
    assert write_commit(tmp_path, ls, layout, second, rng) == third  # rerun of a done commit: no-op
    assert read_head(tmp_path) == third


# -- fetch and partial loads ---------------------------------------------------------------------


def test_fetch_copies_exactly_the_requested_objects(tmp_path):
    source, dest = ObjectStore(tmp_path / "src"), ObjectStore(tmp_path / "dst")
    blobs = [bytes([i]) * (10 + 7 * i) for i in range(6)]
    digests = [source.put_bytes(b) for b in blobs]
    wanted = [digests[1], digests[4], digests[5], digests[1]]
    unneeded = source.path(digests[0])
    unneeded.write_bytes(b"corrupted and never read")
    read = fetch_objects(source, dest, wanted)
    expected = len(blobs[1]) + len(blobs[4]) + len(blobs[5])
    assert read == expected and source.bytes_read == expected
    assert sorted(dest.digests()) == sorted({digests[1], digests[4], digests[5]})
    assert [dest.get_bytes(d) for d in (digests[1], digests[4], digests[5])] == [blobs[1], blobs[4], blobs[5]]
    assert fetch_objects(source, dest, wanted) == 0 and source.bytes_read == expected  # idempotent
    # a needed object that does not verify is refused, and nothing is installed for it
    needed = source.path(digests[2])
    needed.write_bytes(blobs[2][:-1] + b"\xff")
    with pytest.raises(ObjectCorrupt, match=re.escape(str(needed)) + f": refusing to fetch object {digests[2]}"):
        fetch_objects(source, dest, [digests[3], digests[2]])
    assert not dest.has(digests[2]) and dest.has(digests[3])
    assert list((tmp_path / "dst" / "tmp").iterdir()) == []
    with pytest.raises(ObjectMissing, match=re.escape(str(source.path("0" * 64)))):
        fetch_objects(source, dest, ["0" * 64])


def test_load_param_states_reads_only_the_named_subset(tmp_path):
    states = random_states(5)
    entries = save_param_states(ObjectStore(tmp_path), states)
    store = ObjectStore(tmp_path)
    loaded = load_param_states(store, entries, {"b.weight"})
    assert set(loaded) == {"b.weight"}
    assert store.bytes_read == 3 * 5 * 4
    for field in ("param", "exp_avg", "exp_avg_sq"):
        assert torch.equal(loaded["b.weight"][field], states["b.weight"][field])
    assert loaded["b.weight"]["group"] == "decay" and loaded["b.weight"]["age"] == 6
    everything = load_param_states(store, entries)
    assert set(everything) == set(states)
    with pytest.raises(RecordError, match=r"no entry for parameters \['z'\]"):
        load_param_states(store, entries, {"z"})
    with pytest.raises(RecordError, match=r"param state 'a.weight'.exp_avg: expected a float32 tensor"):
        save_param_states(store, {"a.weight": {**states["a.weight"], "exp_avg": torch.zeros(4, 3).double()}})


def test_gc_removes_temporaries_of_dead_writers_only(tmp_path):
    store = ObjectStore(tmp_path)
    store.put_bytes(b"x")
    orphan = tmp_path / "tmp" / f"object.{host_tag()}.{dead_pid()}.{'0' * 32}.tmp"
    live = tmp_path / "tmp" / f"object.{host_tag()}.{os.getpid()}.{'1' * 32}.tmp"
    junk = tmp_path / "tmp" / "unparseable-name"  # not the kit's: never deleted (issue #48)
    for path in (orphan, live, junk):
        path.write_bytes(b"half-written")
    assert sorted(gc(tmp_path)) == [str(orphan)]
    assert live.exists() and junk.exists()
    assert gc(tmp_path, all_temporaries=True) == [str(live)]


def test_gc_removes_only_unreferenced_objects(tmp_path):
    first = commit(tmp_path, seed=1, parent=None)
    store = ObjectStore(tmp_path)
    stray = store.put_bytes(b"an object no manifest names")
    before = set(store.digests())
    assert gc(tmp_path) == []  # objects are only collected on request
    assert gc(tmp_path, unreferenced_objects=True) == [str(store.path(stray))]
    assert set(store.digests()) == before - {stray}
    assert verify_commit(tmp_path)["full_root"] == first


# -- export --------------------------------------------------------------------------------------


def test_export_loads_in_transformers_bit_exact(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
        intermediate_size=32, max_position_embeddings=64, tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    reference = {k: v.detach().clone() for k, v in model.state_dict().items()}
    learned = {k: v for k, v in reference.items() if k != "lm_head.weight"}
    home = tmp_path / "store"
    store = ObjectStore(home)
    entries = save_param_states(
        store,
        {k: {"group": "all", "age": 0, "param": v, "exp_avg": torch.zeros_like(v), "exp_avg_sq": torch.zeros_like(v)}
         for k, v in learned.items()},
    )
    layout = {"blocks": [[0, 2]], "embedding_owner": 0, "model_config": store.put_bytes(config.to_json_string().encode())}
    root = write_commit(home, {"cursor": {"step": 0}, "params": entries}, layout, None, [store.put_bytes(b"rng")])
    extra = tmp_path / "tok"
    extra.mkdir()
    (extra / "tokenizer.json").write_text('{"version": "1.0"}')
    (extra / "special_tokens_map.json").write_text("{}")
    (extra / "notes.txt").write_text("not a tokenizer file")

    out = tmp_path / "hf"
    digest = export_hf(home, root, out, extra_files_dir=extra)
    assert digest == parameter_digest(out)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "special_tokens_map.json",
                                                      "tokenizer.json"]
    inv = inventory(out)
    assert set(inv) == set(learned)  # tied: no lm_head.weight written
    by_name = {e["name"]: e for e in entries}
    assert all(tensor_sha256(inv[name]) == by_name[name]["param"] for name in inv)

    loaded = LlamaForCausalLM.from_pretrained(out)
    state = loaded.state_dict()
    assert set(state) == set(reference)
    for name, tensor in reference.items():
        assert state[name].dtype == torch.float32 and torch.equal(state[name], tensor), name

    with pytest.raises(ExportError, match="must be a new or empty directory"):
        export_hf(home, root, out)
    partial = write_commit(home, {"cursor": {"step": 0}, "params": entries[1:]}, layout, root, [store.put_bytes(b"r")])
    with pytest.raises(ExportError, match=r"missing \['model.embed_tokens.weight'\] \(1\), unexpected \[\] \(0\)"):
        export_hf(home, partial, tmp_path / "hf2")


def test_docs_verifier_snippet_recomputes_the_roots(tmp_path):
    first = commit(tmp_path, seed=1, parent=None)
    commit(tmp_path, seed=2, parent=first)
    text = (REPO / "docs" / "formats" / "checkpoint-store.md").read_text()
    snippet = text.split("## Verifying a commit independently")[1].split("```python")[1].split("```")[0]
    exec(snippet, {"HOME": str(tmp_path)})  # noqa: S102 -- the documented verifier, run as written
    path = ObjectStore(tmp_path).path(read_commit(tmp_path, read_head(tmp_path))["rng"][0])
    path.write_bytes(path.read_bytes() + b"!")
    with pytest.raises(AssertionError):
        exec(snippet, {"HOME": str(tmp_path)})  # noqa: S102
