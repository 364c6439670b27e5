"""Commits of the checkpoint store: learned state, both roots, layout, manifests and HEAD.

    learned_state      = {"cursor": {str: int}, "params": [entry sorted by name]}
    entry              = {"name", "dtype": "float32", "shape", "group", "age", "param", "exp_avg", "exp_avg_sq"}
    learned_state_root = sha256(canonical_json(learned_state))
    layout             = {"blocks": [[start, stop] per worker rank], "embedding_owner": rank,
                          "model_config": digest of the config.json object}
    full_root          = sha256(canonical_json({"learned_state_root", "layout", "parent", "rng"}))
    manifest           = commits/<full_root>.json, canonical JSON of
                         {"format", "learned_state", "learned_state_root", "full_root", "layout", "parent", "rng"}

The learned-state root leaves out ownership and process RNG, so two runs that learned the same
thing with different worker counts share it; the full root adds what a bit-exact resume needs.

Write order (`write_commit`): every worker's objects -> fsync + re-hash of every object the commit
names -> manifest (atomic) -> HEAD (compare-and-swap under `HEAD.lock`, atomic rename). A crash at
any point leaves HEAD on the previous complete commit; leftovers under `tmp/` and a dead writer's
lock are removed by `gc`. docs/formats.md ("Checkpoint store") is the reference for all of it.
"""

from __future__ import annotations

import math
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any

import torch

from kit.digest import canonical_json, load_canonical_json, loads_strict, sha256_json
from kit.model_config import parse_config
from kit.store.objects import (
    ObjectCorrupt,
    ObjectMissing,
    ObjectStore,
    StoreError,
    check_digest,
    host_tag,
    install,
    new_temp_path,
    process_alive_here,
    remove_stale_temps,
    write_durably,
)

FORMAT = "kit-checkpoint/1"
LEARNED_DTYPE = "float32"  # master weights and both Adam moments are FP32
TENSOR_FIELDS = ("param", "exp_avg", "exp_avg_sq")
ENTRY_KEYS = frozenset({"name", "dtype", "shape", "group", "age", *TENSOR_FIELDS})
STATE_KEYS = frozenset({"group", "age", *TENSOR_FIELDS})
LAYOUT_KEYS = frozenset({"blocks", "embedding_owner", "model_config"})
MANIFEST_KEYS = frozenset(
    {"format", "learned_state", "learned_state_root", "full_root", "layout", "parent", "rng"}
)
HEAD_NAME = "HEAD"
LOCK_NAME = "HEAD.lock"
COMMITS_DIR_NAME = "commits"
HEAD_RE = re.compile(rb"[0-9a-f]{64}\n")
FAULT_ENV = "KIT_FAULT_POINT"
FAULT_POINTS = ("objects_verified", "manifest_written", "before_head")
UNREADABLE_LOCK_STALE_S = 60.0  # a lock file with no readable record older than this is a crashed writer's


class RecordError(StoreError):
    """A learned state, layout, RNG list or manifest record is malformed; the message names the field."""


class CommitError(StoreError):
    """A commit cannot be written or read; the message names the file."""


class HeadMoved(CommitError):
    """Compare-and-swap lost: HEAD no longer names the parent this commit was built on."""


class HeadLocked(CommitError):
    """Another live writer held HEAD.lock for longer than the timeout."""


def _fault_point(name: str) -> None:
    """Test hook: die as if SIGKILLed here when KIT_FAULT_POINT equals `name`; otherwise nothing."""
    assert name in FAULT_POINTS, name
    if os.environ.get(FAULT_ENV) == name:
        os._exit(137)


# -- validation ----------------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _exact_keys(obj: Any, keys: frozenset, source: str) -> None:
    if not isinstance(obj, dict):
        raise RecordError(f"{source}: expected a JSON object, got {type(obj).__name__}")
    if set(obj) != keys:
        raise RecordError(f"{source}: expected exactly the keys {sorted(keys)}, got {sorted(obj)}")


def validate_param_entries(entries: Any, source: str = "params") -> None:
    if not isinstance(entries, list):
        raise RecordError(f"{source}: expected a list of parameter entries, got {type(entries).__name__}")
    previous = None
    for i, entry in enumerate(entries):
        where = f"{source}[{i}]"
        _exact_keys(entry, ENTRY_KEYS, where)
        name = entry["name"]
        if not isinstance(name, str) or not name:
            raise RecordError(f"{where}.name: expected a non-empty string, got {name!r}")
        where = f"{source}[{i}] ({name!r})"
        if previous is not None and name == previous:
            raise RecordError(f"{where}.name: duplicate parameter name")
        if previous is not None and name < previous:
            raise RecordError(f"{where}.name: entries must be sorted by name; it follows {previous!r}")
        previous = name
        if entry["dtype"] != LEARNED_DTYPE:
            raise RecordError(f"{where}.dtype: expected {LEARNED_DTYPE!r}, got {entry['dtype']!r}")
        shape = entry["shape"]
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            raise RecordError(f"{where}.shape: expected a list of non-negative integers, got {shape!r}")
        if not isinstance(entry["group"], str) or not entry["group"]:
            raise RecordError(f"{where}.group: expected a non-empty string, got {entry['group']!r}")
        if not _is_int(entry["age"]) or entry["age"] < 0:
            raise RecordError(f"{where}.age: expected a non-negative integer, got {entry['age']!r}")
        for field in TENSOR_FIELDS:
            check_digest(entry[field], f"{where}.{field}")


def validate_learned_state(learned_state: Any, source: str = "learned_state") -> None:
    """Refuse anything but {"cursor": {str: non-negative int}, "params": [sorted entries]}."""
    _exact_keys(learned_state, frozenset({"cursor", "params"}), source)
    cursor = learned_state["cursor"]
    if not isinstance(cursor, dict):
        raise RecordError(f"{source}.cursor: expected a JSON object, got {type(cursor).__name__}")
    for key, value in cursor.items():
        if not _is_int(value) or value < 0:
            raise RecordError(f"{source}.cursor[{key!r}]: expected a non-negative integer, got {value!r}")
    validate_param_entries(learned_state["params"], f"{source}.params")


def validate_layout(layout: Any, source: str = "layout", num_layers: int | None = None) -> None:
    """Refuse ranges that do not tile 0..num_layers in rank order, or an out-of-range embedding owner.

    blocks[r] = [start, stop] is worker rank r's half-open block range; ranges are contiguous in
    rank order (blocks[r][0] == blocks[r-1][1]); an empty range (start == stop) is allowed.
    `num_layers` (from the config object) is checked when given.
    """
    _exact_keys(layout, LAYOUT_KEYS, source)
    blocks = layout["blocks"]
    if not isinstance(blocks, list) or not blocks:
        raise RecordError(f"{source}.blocks: expected a non-empty list of [start, stop] ranges, got {blocks!r}")
    expected_start = 0
    for rank, block in enumerate(blocks):
        where = f"{source}.blocks[{rank}]"
        if not (isinstance(block, list) and len(block) == 2 and all(_is_int(b) for b in block)):
            raise RecordError(f"{where}: expected [start, stop] integers, got {block!r}")
        start, stop = block
        if start > stop:
            raise RecordError(f"{where}: start {start} is after stop {stop}")
        if start > expected_start:
            raise RecordError(f"{where}: misses blocks {expected_start}..{start - 1} (ranges must be contiguous)")
        if start < expected_start:
            raise RecordError(f"{where}: repeats blocks {start}..{expected_start - 1} already owned by a lower rank")
        expected_start = stop
    if num_layers is not None and expected_start != num_layers:
        raise RecordError(f"{source}.blocks: cover blocks 0..{expected_start - 1} but the model has {num_layers}")
    owner = layout["embedding_owner"]
    if not _is_int(owner) or not 0 <= owner < len(blocks):
        raise RecordError(f"{source}.embedding_owner: expected a rank in 0..{len(blocks) - 1}, got {owner!r}")
    check_digest(layout["model_config"], f"{source}.model_config")


def validate_rng(rng: Any, world_size: int, source: str = "rng") -> None:
    if not isinstance(rng, list) or len(rng) != world_size:
        raise RecordError(f"{source}: expected a list of {world_size} object digests (one per rank), got {rng!r}")
    for rank, digest in enumerate(rng):
        check_digest(digest, f"{source}[{rank}]")


def _validate_parent(parent: Any, source: str) -> None:
    if parent is not None:
        check_digest(parent, source)


# -- roots ---------------------------------------------------------------------------------------


def learned_state_root(learned_state: dict) -> str:
    return sha256_json(learned_state)


def full_root(learned_state_root: str, layout: dict, parent: str | None, rng: list[str]) -> str:
    return sha256_json(
        {"learned_state_root": learned_state_root, "layout": layout, "parent": parent, "rng": rng}
    )


def build_manifest(learned_state: dict, layout: dict, parent: str | None, rng: list[str]) -> dict:
    ls_root = learned_state_root(learned_state)
    return {
        "format": FORMAT,
        "learned_state": learned_state,
        "learned_state_root": ls_root,
        "full_root": full_root(ls_root, layout, parent, rng),
        "layout": layout,
        "parent": parent,
        "rng": rng,
    }


def param_digests(entries: list[dict], names: set[str] | None = None) -> list[str]:
    """The param / exp_avg / exp_avg_sq objects of the named entries (all when `names` is None)."""
    return [e[f] for e in entries if names is None or e["name"] in names for f in TENSOR_FIELDS]


def object_digests(manifest: dict) -> list[str]:
    """Every object a commit names, each once: model config, RNG states, then parameter tensors."""
    named = [manifest["layout"]["model_config"], *manifest["rng"], *param_digests(manifest["learned_state"]["params"])]
    return list(dict.fromkeys(named))


# -- parameter states ----------------------------------------------------------------------------


IO_THREADS = max(1, min(8, os.cpu_count() or 1))  # sha256, file I/O and device copies release the GIL


def _parallel(fn, items: list) -> list:
    """`fn` over `items` on a few threads, results in input order (deterministic records)."""
    if len(items) < 2 or IO_THREADS == 1:
        return [fn(x) for x in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(IO_THREADS) as pool:
        return list(pool.map(fn, items))


def save_param_states(store: ObjectStore, states: dict[str, dict]) -> list[dict]:
    """Write each parameter's FP32 tensors as objects; returns the learned-state entries, by name.

    Objects are written on a few threads (hashing, writing and fsync of different tensors overlap);
    the entries do not depend on the order in which they finish."""
    shapes = {}
    for name in sorted(states):
        state, where = states[name], f"param state {name!r}"
        _exact_keys(state, STATE_KEYS, where)
        shape = None
        for field in TENSOR_FIELDS:
            tensor = state[field]
            if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.float32:
                raise RecordError(f"{where}.{field}: expected a float32 tensor, got {getattr(tensor, 'dtype', tensor)!r}")
            shape = list(tensor.shape) if shape is None else shape
            if list(tensor.shape) != shape:
                raise RecordError(f"{where}.{field}: shape {list(tensor.shape)} differs from param shape {shape}")
        shapes[name] = shape
    jobs = [(name, field) for name in sorted(states) for field in TENSOR_FIELDS]
    digests = dict(zip(jobs, _parallel(lambda j: store.put_tensor(states[j[0]][j[1]]), jobs)))
    entries = [
        {
            "name": name,
            "dtype": LEARNED_DTYPE,
            "shape": shapes[name],
            "group": states[name]["group"],
            "age": states[name]["age"],
            **{field: digests[(name, field)] for field in TENSOR_FIELDS},
        }
        for name in sorted(states)
    ]
    validate_param_entries(entries, "save_param_states")
    return entries


def load_param_states(store: ObjectStore, entries: list[dict], names: set[str] | None = None) -> dict[str, dict]:
    """Load the named parameters' tensors (all when `names` is None); no other object is read."""
    validate_param_entries(entries, "load_param_states")
    by_name = {e["name"]: e for e in entries}
    wanted = sorted(by_name) if names is None else sorted(names)
    missing = [n for n in wanted if n not in by_name]
    if missing:
        raise RecordError(f"load_param_states: no entry for parameters {missing[:5]} ({len(missing)} missing)")
    out = {}
    for name in wanted:
        e = by_name[name]
        out[name] = {"group": e["group"], "age": e["age"]}
        for field in TENSOR_FIELDS:
            out[name][field] = store.get_tensor(e[field], e["dtype"], e["shape"])
    return out


# -- checking a commit's objects -----------------------------------------------------------------


def _check_objects(
    store: ObjectStore, manifest: dict, fsync: bool, source: str
) -> tuple[list[str], int, int | None]:
    """Re-hash every named object; returns (problems, bytes, num_layers from the config object)."""
    problems: list[str] = []
    sizes: dict[str, int] = {}
    def check(digest):
        try:
            return digest, store.verify(digest, fsync=fsync), None
        except (ObjectMissing, ObjectCorrupt) as e:
            return digest, None, str(e)

    for digest, size, problem in _parallel(check, object_digests(manifest)):
        if problem is None:
            sizes[digest] = size
        else:
            problems.append(problem)
    for entry in manifest["learned_state"]["params"]:
        numel = math.prod(entry["shape"])
        for field in TENSOR_FIELDS:
            size = sizes.get(entry[field])
            if size is not None and size != numel * 4:
                problems.append(
                    f"{store.path(entry[field])}: {entry['name']}.{field} holds {size} bytes but "
                    f"float32{entry['shape']} needs {numel * 4}"
                )
    num_layers = None
    config_digest = manifest["layout"]["model_config"]
    if config_digest in sizes:
        config_path = store.path(config_digest)
        try:
            config = loads_strict(store.get_bytes(config_digest), f"{config_path} (model config)")
            num_layers = parse_config(config, str(config_path)).num_hidden_layers
            validate_layout(manifest["layout"], f"{source}layout", num_layers)
        except ValueError as e:
            problems.append(str(e))
    return problems, sum(sizes.values()), num_layers


# -- writing a commit ----------------------------------------------------------------------------


def _commits_dir(home: Path) -> Path:
    return home / COMMITS_DIR_NAME


def write_commit(
    home: str | os.PathLike,
    learned_state: dict,
    layout: dict,
    parent: str | None,
    rng: list[str],
    lock_timeout_s: float = 30.0,
) -> str:
    """Commit objects already in `home`'s store and advance HEAD from `parent`; returns the full root.

    Refuses (nothing written) if a record is malformed or a named object is missing or does not
    re-hash; refuses with HeadMoved if HEAD no longer names `parent` (absent for parent None),
    unless HEAD already names this very commit, which makes a rerun idempotent.
    """
    home = Path(home)
    validate_learned_state(learned_state, "learned_state")
    validate_layout(layout, "layout")
    _validate_parent(parent, "parent")
    validate_rng(rng, len(layout["blocks"]), "rng")
    manifest = build_manifest(learned_state, layout, parent, rng)
    problems, _, _ = _check_objects(ObjectStore(home), manifest, fsync=True, source="")
    if problems:
        raise CommitError(f"{home}: cannot commit, {len(problems)} problem(s):\n" + "\n".join(problems))
    _fault_point("objects_verified")
    return _install(home, manifest, parent, lock_timeout_s)


def adopt_commit(home: str | os.PathLike, manifest: dict, expected_head: str | None = None) -> str:
    """Install another store's manifest verbatim (migration: after every new owner fetched and
    verified its objects) and move HEAD to it from `expected_head`. Refused when the manifest's roots
    do not recompute or any object it names is missing or corrupt here."""
    home = Path(home)
    validate_manifest(manifest, "adopted manifest")
    problems, _, _ = _check_objects(ObjectStore(home), manifest, fsync=True, source="adopted ")
    if problems:
        raise CommitError(f"{home}: cannot adopt {manifest['full_root']}, {len(problems)} problem(s):\n"
                          + "\n".join(problems))
    return _install(home, manifest, expected_head)


def _install(home: Path, manifest: dict, expected_head: str | None, lock_timeout_s: float = 30.0) -> str:
    """Write the manifest (atomic), then compare-and-swap HEAD from `expected_head` to its root."""
    parent = expected_head
    root = manifest["full_root"]
    manifest_path = _commits_dir(home) / f"{root}.json"
    data = canonical_json(manifest)
    if not (manifest_path.is_file() and manifest_path.read_bytes() == data):
        temp = new_temp_path(home, "manifest")
        try:
            write_durably(temp, [data])
            install(temp, manifest_path)
        finally:
            temp.unlink(missing_ok=True)
    _fault_point("manifest_written")

    token = _acquire_lock(home, lock_timeout_s)
    try:
        current = read_head(home)
        if current == root:
            return root  # this very commit already advanced HEAD (a rerun after an unrecorded success)
        if current != parent:
            raise HeadMoved(
                f"{home / HEAD_NAME}: names {current or 'no commit'} but this commit's parent is "
                f"{parent or 'null'}: another writer advanced HEAD first (manifest {manifest_path} is kept)"
            )
        temp = new_temp_path(home, "head")
        try:
            write_durably(temp, [root.encode("ascii") + b"\n"])
            _fault_point("before_head")
            install(temp, home / HEAD_NAME)
        finally:
            temp.unlink(missing_ok=True)
    finally:
        _release_lock(home, token)
    return root


# -- HEAD.lock: O_CREAT|O_EXCL file holding {"host", "pid", "token"} -----------------------------


def _read_lock(lock: Path) -> dict | None:
    try:
        record = loads_strict(lock.read_bytes(), str(lock))
    except (FileNotFoundError, ValueError):
        return None
    if isinstance(record, dict) and isinstance(record.get("host"), str) and _is_int(record.get("pid")):
        return record
    return None


def _lock_is_stale(lock: Path, holder: dict | None) -> bool:
    if holder is not None:
        return not process_alive_here(holder["host"], holder["pid"])
    try:  # created but never written: the writer died between open and write
        return time.time() - lock.stat().st_mtime > UNREADABLE_LOCK_STALE_S
    except FileNotFoundError:
        return False


def _break_stale_lock(home: Path, lock: Path, holder: dict | None) -> None:
    # Rename, not unlink, so that of two processes breaking the same stale lock only one succeeds;
    # if what was renamed turns out to be a fresh lock taken meanwhile, put it back.
    aside = new_temp_path(home, "stale-lock")
    try:
        os.rename(lock, aside)
    except FileNotFoundError:
        return
    if _read_lock(aside) != holder:
        try:
            os.link(aside, lock)
        except FileExistsError:
            pass
    aside.unlink(missing_ok=True)


def _acquire_lock(home: Path, timeout_s: float) -> str:
    lock = home / LOCK_NAME
    token = uuid.uuid4().hex
    record = canonical_json({"host": host_tag(), "pid": os.getpid(), "token": token})
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while True:
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _read_lock(lock)
            if _lock_is_stale(lock, holder):
                _break_stale_lock(home, lock, holder)
                continue
            if time.monotonic() >= deadline:
                raise HeadLocked(
                    f"{lock}: held by {holder or 'an unreadable record'} for over {timeout_s} s; if that "
                    f"process is gone, delete the file or run `kit checkpoint gc`"
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
            continue
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(record)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            # The lock is ours (O_EXCL) but holds no record (e.g. disk full): left in place it would
            # block every writer until it aged into staleness, so remove it before reporting the error.
            lock.unlink(missing_ok=True)
            raise
        return token


def _release_lock(home: Path, token: str) -> None:
    lock = home / LOCK_NAME
    holder = _read_lock(lock)
    if holder is not None and holder.get("token") == token:
        lock.unlink(missing_ok=True)


# -- reading -------------------------------------------------------------------------------------


def read_head(home: str | os.PathLike) -> str | None:
    """The full root HEAD names (None when there is no HEAD yet); it must name an existing manifest."""
    head = Path(home) / HEAD_NAME
    try:
        data = head.read_bytes()
    except FileNotFoundError:
        return None
    if not HEAD_RE.fullmatch(data):
        raise CommitError(f"{head}: expected 64 lowercase hex characters and a newline, got {data[:80]!r}")
    root = data[:64].decode("ascii")
    manifest = _commits_dir(Path(home)) / f"{root}.json"
    if not manifest.is_file():
        raise CommitError(f"{head}: names commit {root} but its manifest {manifest} does not exist")
    return root


def validate_manifest(manifest: Any, source: str) -> None:
    """Structure, both roots recomputed and compared; objects are not read (see verify_commit)."""
    _exact_keys(manifest, MANIFEST_KEYS, source)
    if manifest["format"] != FORMAT:
        raise CommitError(f"{source}: format {manifest['format']!r}; expected {FORMAT!r}")
    validate_learned_state(manifest["learned_state"], f"{source}: learned_state")
    validate_layout(manifest["layout"], f"{source}: layout")
    _validate_parent(manifest["parent"], f"{source}: parent")
    validate_rng(manifest["rng"], len(manifest["layout"]["blocks"]), f"{source}: rng")
    ls_root = learned_state_root(manifest["learned_state"])
    if manifest["learned_state_root"] != ls_root:
        raise CommitError(
            f"{source}: learned_state_root {manifest['learned_state_root']!r} does not match the "
            f"learned state, which hashes to {ls_root}"
        )
    root = full_root(ls_root, manifest["layout"], manifest["parent"], manifest["rng"])
    if manifest["full_root"] != root:
        raise CommitError(f"{source}: full_root {manifest['full_root']!r} does not match the recomputed {root}")


def read_commit(home: str | os.PathLike, root: str) -> dict:
    """Load `commits/<root>.json`: canonical bytes, valid structure, both roots and the file name agree."""
    commits = _commits_dir(Path(home))
    check_digest(root, f"{commits}: commit root")
    path = commits / f"{root}.json"
    if not path.is_file():
        raise CommitError(f"{path}: no manifest for commit {root}")
    manifest = load_canonical_json(path)
    validate_manifest(manifest, str(path))
    if manifest["full_root"] != root:
        raise CommitError(f"{path}: full_root {manifest['full_root']} differs from the file name")
    return manifest


def verify_commit(home: str | os.PathLike, root: str | None = None) -> dict:
    """Re-hash every object a commit (HEAD by default) names and recompute both roots; a report."""
    home = Path(home)
    if root is None:
        root = read_head(home)
        if root is None:
            raise CommitError(f"{home / HEAD_NAME}: no HEAD, so no commit to verify; name a root")
    manifest = read_commit(home, root)
    path = _commits_dir(home) / f"{root}.json"
    problems, total, num_layers = _check_objects(ObjectStore(home), manifest, fsync=False, source=f"{path}: ")
    if problems:
        raise CommitError(f"{path}: commit fails verification, {len(problems)} problem(s):\n" + "\n".join(problems))
    return {
        "manifest": str(path),
        "full_root": root,
        "learned_state_root": manifest["learned_state_root"],
        "parent": manifest["parent"],
        "params": len(manifest["learned_state"]["params"]),
        "objects": len(object_digests(manifest)),
        "bytes": total,
        "num_layers": num_layers,
        "workers": len(manifest["layout"]["blocks"]),
    }


def list_commits(home: str | os.PathLike) -> list[str]:
    """Full roots of every manifest file present (sorted; not validated, not only HEAD's ancestors)."""
    commits = _commits_dir(Path(home))
    if not commits.is_dir():
        return []
    return sorted(p.stem for p in commits.glob("*.json") if re.fullmatch(r"[0-9a-f]{64}", p.stem))


def gc(home: str | os.PathLike, unreferenced_objects: bool = False, all_temporaries: bool = False) -> list[str]:
    """Remove what no loader reads: temporaries of dead writers (of any writer with
    `all_temporaries`, e.g. ones from another host of a shared filesystem), a dead writer's
    HEAD.lock and, with `unreferenced_objects`, objects named by no manifest. Returns the removed paths.

    Objects referenced by any manifest are never removed; if a manifest cannot be read, no object
    is removed. Run object collection only while no writer is active: a worker's objects exist
    before the manifest that names them.
    """
    home = Path(home)
    removed = remove_stale_temps(home, force=all_temporaries)
    lock = home / LOCK_NAME
    if lock.exists() and _lock_is_stale(lock, _read_lock(lock)):
        lock.unlink(missing_ok=True)
        removed.append(str(lock))
    if unreferenced_objects:
        referenced: set[str] = set()
        for root in list_commits(home):
            referenced.update(object_digests(read_commit(home, root)))
        store = ObjectStore(home)
        for digest in list(store.digests()):
            if digest not in referenced:
                store.path(digest).unlink()
                removed.append(str(store.path(digest)))
    return removed
