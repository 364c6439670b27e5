"""Commits of the checkpoint store: writing, adopting, reading, verifying and collecting them.

The decision to know: the learned-state root leaves out ownership and process RNG, so two runs that
learned the same thing with different worker counts share it; the full root adds what a bit-exact
resume needs. `write_commit` writes objects, re-hashes them, writes the manifest and moves HEAD by
compare-and-swap, so a crash leaves HEAD on the previous complete commit (docs/formats/checkpoint-store.md,
"Checkpoint store"). Records and roots are in `kit.store.manifest`, HEAD in `kit.store.head`,
parameter I/O in `kit.store.params` (re-exported here, so `commits.read_head` keeps working).
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from kit.digest import canonical_json, loads_strict
from kit.model.config import check_params_match_config, parse_config
from kit.store.head import _acquire_lock, _lock_is_stale, _read_lock, _release_lock, read_head
from kit.store.in_use import exclusive
from kit.store.manifest import (  # noqa: F401  - re-exported: the commit record API in one place
    COMMITS_DIR_NAME,
    ENTRY_KEYS,
    FORMAT,
    HEAD_NAME,
    HEAD_RE,
    LAYOUT_KEYS,
    LEARNED_DTYPE,
    LOCK_NAME,
    MANIFEST_KEYS,
    STATE_KEYS,
    TENSOR_FIELDS,
    CommitError,
    CommitLayout,
    HeadLocked,
    HeadMoved,
    Manifest,
    ParamEntry,
    RecordError,
    _validate_parent,
    as_manifest,
    build_manifest,
    commits_dir,
    full_root,
    learned_state_root,
    manifest_objects,
    object_digests,
    param_digests,
    validate_layout,
    validate_learned_state,
    validate_manifest,
    validate_param_entries,
    validate_rng,
)
from kit.store.objects import (  # noqa: F401
    ObjectCorrupt,
    ObjectMissing,
    ObjectStore,
    StoreError,
    check_digest,
    check_real_dir,
    install,
    new_temp_path,
    read_regular,
    remove_stale_temps,
    write_durably,
)
from kit.store.params import IO_THREADS, _parallel, load_param_states, save_param_states  # noqa: F401

MAX_MANIFEST_BYTES = 64 * 1024 * 1024  # a 1.7B model's manifest is about 100 KB
FAULT_ENV = "KIT_FAULT_POINT"
FAULT_POINTS = ("objects_verified", "manifest_written", "before_head")


def _fault_point(name: str) -> None:
    """Test hook: die as if SIGKILLed here when KIT_FAULT_POINT equals `name`; otherwise nothing."""
    assert name in FAULT_POINTS, name
    if os.environ.get(FAULT_ENV) == name:
        os._exit(137)


# -- checking a commit's objects -----------------------------------------------------------------


def _check_objects(
    store: ObjectStore, manifest: Manifest, fsync: bool, source: str, only: set[str] | None = None,
    check_model: bool = False,
) -> tuple[list[str], int, int | None]:
    """Re-hash every named object (or those in `only`); returns (problems, bytes, num_layers from the
    config object). `check_model`: the parameter entries must also be exactly the config's, by name
    and shape (a store records any parameter set; readers that pair it with the config check this)."""
    problems: list[str] = []
    sizes: dict[str, int] = {}
    expected_size: dict[str, int | None] = {}  # reads are bounded by the bytes the manifest implies
    for entry in manifest.learned_state.params:
        for digest in entry.tensor_digests():
            size = math.prod(entry.shape) * 4
            expected_size[digest] = size if expected_size.get(digest, size) == size else None

    def check(digest):
        try:
            return digest, store.verify(digest, fsync=fsync, size=expected_size.get(digest)), None
        except (StoreError, ObjectCorrupt) as e:
            return digest, None, str(e)

    named = manifest_objects(manifest)
    if only is not None:
        named = [d for d in named if d in only]
    for digest, size, problem in _parallel(check, named):
        if problem is None:
            sizes[digest] = size
        else:
            problems.append(problem)
    for entry in manifest.learned_state.params:
        numel = math.prod(entry.shape)
        for field, digest in zip(TENSOR_FIELDS, entry.tensor_digests()):
            held = sizes.get(digest)
            if held is not None and held != numel * 4:
                problems.append(
                    f"{store.path(digest)}: {entry.name}.{field} holds {held} bytes but "
                    f"float32{list(entry.shape)} needs {numel * 4}"
                )
    num_layers = None
    config_digest = manifest.layout.model_config
    if config_digest in sizes:
        config_path = store.path(config_digest)
        try:
            config = loads_strict(store.get_bytes(config_digest), f"{config_path} (model config)")
            shape = parse_config(config, str(config_path))
            num_layers = shape.num_hidden_layers
            validate_layout(manifest.layout.to_json(), f"{source}layout", num_layers)
            if check_model:
                check_params_match_config({e.name: e.shape for e in manifest.learned_state.params}, shape,
                                          f"{source}learned_state.params", str(config_path))
        except ValueError as e:
            problems.append(str(e))
    return problems, sum(sizes.values()), num_layers


# -- writing a commit ----------------------------------------------------------------------------


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
    workers = len(CommitLayout.from_json(layout, "layout").blocks)
    _validate_parent(parent, "parent")
    validate_rng(rng, workers, "rng")
    manifest = as_manifest(build_manifest(learned_state, layout, parent, rng))  # of the parts validated above
    problems, _, _ = _check_objects(ObjectStore(home), manifest, fsync=True, source="")
    if problems:
        raise CommitError(f"{home}: cannot commit, {len(problems)} problem(s):\n" + "\n".join(problems))
    _fault_point("objects_verified")
    return _install(home, manifest, parent, lock_timeout_s)


def save_commit_objects(store: ObjectStore, states: dict[str, dict], rng: bytes, config_bytes: bytes,
                        save_params=save_param_states) -> dict:
    """Write one rank's objects of a commit (its parameters' tensors, its RNG bytes and the model config);
    returns {"entries": learned-state entries, "rng": digest, "config": digest}, what `write_commit` names."""
    entries = save_params(store, states)
    return {"entries": entries, "rng": store.put_bytes(rng), "config": store.put_bytes(config_bytes)}


def adopt_commit(home: str | os.PathLike, manifest: Manifest | dict, expected_head: str | None = None,
                 shard: set[str] | None = None) -> str:
    """Install another store's manifest verbatim (migration: after every new owner fetched and
    verified its objects) and move HEAD to it from `expected_head`. Refused when the manifest's roots
    do not recompute or any object it names is missing or corrupt here.

    `shard`: this host's store holds only these objects of the commit (hosts without a shared
    filesystem each hold their owner's shard, kit/engine/fetch.py); only they are checked, and they
    must include the model config."""
    home = Path(home)
    # never trusted: a record built by code is checked as the JSON it would write
    manifest = Manifest.from_json(manifest.to_json() if isinstance(manifest, Manifest) else manifest,
                                  "adopted manifest")
    if shard is not None and manifest.layout.model_config not in shard:
        raise CommitError(f"{home}: a shard adoption of {manifest.full_root} must hold the model config object")
    problems, _, _ = _check_objects(ObjectStore(home), manifest, fsync=True, source="adopted ", only=shard)
    if problems:
        raise CommitError(f"{home}: cannot adopt {manifest.full_root}, {len(problems)} problem(s):\n"
                          + "\n".join(problems))
    return _install(home, manifest, expected_head)


def _install(home: Path, manifest: Manifest, expected_head: str | None, lock_timeout_s: float = 30.0) -> str:
    """Write the manifest (atomic), then compare-and-swap HEAD from `expected_head` to its root."""
    parent = expected_head
    root = manifest.full_root
    manifest_path = commits_dir(home) / f"{root}.json"
    data = canonical_json(manifest.to_json())
    try:
        same = read_regular(manifest_path, "a commit manifest", MAX_MANIFEST_BYTES) == data
    except (FileNotFoundError, StoreError):
        same = False  # absent, or something else under its name: replaced by the atomic rename below
    if not same:
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


def read_commit(home: str | os.PathLike, root: str) -> dict:
    """The JSON of `read_manifest` (what `kit checkpoint show` prints); code reads the declared record."""
    return read_manifest(home, root).to_json()


def read_manifest(home: str | os.PathLike, root: str) -> Manifest:
    """Load `commits/<root>.json`: canonical bytes, valid structure, both roots and the file name agree."""
    commits = commits_dir(Path(home))
    check_digest(root, f"{commits}: commit root")
    path = commits / f"{root}.json"
    try:
        data = read_regular(path, "a commit manifest", MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        raise CommitError(f"{path}: no manifest for commit {root}") from None
    manifest = loads_strict(data, str(path))
    if canonical_json(manifest) != data:
        raise CommitError(f"{path}: not in canonical JSON form (key order, spacing or trailing bytes differ)")
    record = Manifest.from_json(manifest, str(path))
    if record.full_root != root:
        raise CommitError(f"{path}: full_root {record.full_root} differs from the file name")
    return record


def verify_commit(home: str | os.PathLike, root: str | None = None, check_model: bool = False) -> dict:
    """Re-hash every object a commit (HEAD by default) names and recompute both roots; a report.
    `check_model` (`kit checkpoint verify`): its parameters must also be the ones its config implies."""
    home = Path(home)
    if root is None:
        root = read_head(home)
        if root is None:
            raise CommitError(f"{home / HEAD_NAME}: no HEAD, so no commit to verify; name a root")
    manifest = read_manifest(home, root)
    path = commits_dir(home) / f"{root}.json"
    problems, total, num_layers = _check_objects(ObjectStore(home), manifest, fsync=False, source=f"{path}: ",
                                                 check_model=check_model)
    if problems:
        raise CommitError(f"{path}: commit fails verification, {len(problems)} problem(s):\n" + "\n".join(problems))
    return {
        "manifest": str(path),
        "full_root": root,
        "learned_state_root": manifest.learned_state_root,
        "parent": manifest.parent,
        "params": len(manifest.learned_state.params),
        "objects": len(manifest_objects(manifest)),
        "bytes": total,
        "num_layers": num_layers,
        "workers": len(manifest.layout.blocks),
    }


def list_commits(home: str | os.PathLike) -> list[str]:
    """Full roots of every manifest file present (sorted; not validated, not only HEAD's ancestors)."""
    commits = commits_dir(Path(home))
    if not check_real_dir(commits, "the commits folder"):  # a linked commits/ is refused, as objects/ and tmp/
        return []
    return sorted(p.stem for p in commits.glob("*.json") if re.fullmatch(r"[0-9a-f]{64}", p.stem))


MIN_PREFIX = 8  # hex characters of a short root, as git's short hashes (2^32 roots before a likely clash)


def resolve_root(home: str | os.PathLike, ref: str, flag: str = "root") -> str:
    """The full root a command line names: `HEAD`, a full 64-hex root (returned as given, the store is not
    read: it may be another host's), or a prefix of at least 8 hex characters that exactly one manifest of
    the store starts with. Anything else, or an ambiguous or unknown prefix, is one CommitError line."""
    if ref == "HEAD":
        head = read_head(home)
        if head is None:
            raise CommitError(f"{flag} HEAD: {home} has no HEAD (no commit yet); start without {flag}")
        return head
    if re.fullmatch(r"[0-9a-f]{64}", ref):
        return ref
    if not re.fullmatch(rf"[0-9a-f]{{{MIN_PREFIX},63}}", ref):
        raise CommitError(f"{flag} {ref}: expected HEAD, a full 64-hex root or a unique prefix of at least "
                          f"{MIN_PREFIX} lowercase hex characters")
    found = [r for r in list_commits(home) if r.startswith(ref)]
    if len(found) != 1:
        what = "no commit" if not found else f"{len(found)} commits ({', '.join(r[:16] for r in found[:3])}...)"
        raise CommitError(f"{flag} {ref}: {what} of {home} start(s) with it; give more characters or the full "
                          "root (kit checkpoint list --home " + f"{home})")
    return found[0]


def gc(home: str | os.PathLike, unreferenced_objects: bool = False, all_temporaries: bool = False) -> list[str]:
    """Remove what no loader reads: temporaries of dead writers (of any writer with
    `all_temporaries`, e.g. ones from another host of a shared filesystem), a dead writer's
    HEAD.lock and, with `unreferenced_objects`, objects named by no manifest. Returns the removed paths.

    Objects referenced by HEAD's commit or any manifest are never removed; if a manifest cannot be read,
    if HEAD names a manifest that is missing, or if objects exist but no manifest does (commits/*.json
    deleted), no object is removed (`referenced_objects`). A linked `commits/`, `objects/` or `tmp/` is
    refused. Object collection is refused while a run holds the store (kit/store/in_use.py): a
    worker's objects exist before the manifest that names them.
    """
    home = Path(home)
    check_real_dir(commits_dir(home), "the commits folder")  # before anything is removed
    removed = remove_stale_temps(home, force=all_temporaries)
    lock = home / LOCK_NAME
    if os.path.lexists(lock) and _lock_is_stale(lock, _read_lock(lock)):  # unlink removes a link, never its target
        lock.unlink(missing_ok=True)
        removed.append(str(lock))
    if unreferenced_objects:
        with exclusive(home, "kit checkpoint gc --objects"):  # a live run's next commit needs its objects
            store = ObjectStore(home)
            present = list(store.digests())
            referenced = referenced_objects(home, len(present))
            for digest in present:
                if digest not in referenced:
                    store.path(digest).unlink()
                    removed.append(str(store.path(digest)))
    return removed


def referenced_objects(home: Path, present: int) -> set[str]:
    """Every object HEAD's commit and every manifest of `home` name; CommitError (nothing may be collected)
    when HEAD is unreadable or names a missing manifest, when any manifest is unreadable, or when `present`
    objects exist but no manifest does: a store whose records are gone is damaged, not garbage."""
    refused = "; kit checkpoint gc --objects refused: it would delete objects of commits it cannot read"
    try:
        head = read_head(home)  # refuses HEAD naming a missing manifest, a linked or malformed HEAD
    except CommitError as e:
        raise CommitError(f"{e}{refused} (restore the manifest, e.g. from a copy of the store)") from None
    roots = list_commits(home)
    if present and not roots:
        raise CommitError(f"{commits_dir(home)}: holds no commit manifest but {present} object(s) are in "
                          f"{home / 'objects'}{refused} (a store whose manifests are gone is damaged; a home that "
                          "never committed can be deleted whole)")
    referenced: set[str] = set()
    for root in sorted({*roots, *([head] if head else [])}):
        try:
            referenced.update(manifest_objects(read_manifest(home, root)))
        except ValueError as e:
            raise CommitError("; ".join(x.strip() for x in str(e).splitlines() if x.strip()) + refused) from None
    return referenced
