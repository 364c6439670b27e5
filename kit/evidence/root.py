"""The evidence root: one sha256 over every file of the evidence, so that a reviewer can hold all of it to one
short string (docs/formats/verify-evidence.md, "The evidence root and its anchors").

The evidence is every file under the runs directory (each run folder with its run.json, campaign and
superseded folders with their notes, `archive/` with the archives and their index, `MANIFESTS.json`,
`GPU_MODES.json`, `RECORD_PINS.json`) and every file under the ledger directory (the exposure ledger, whose
head `MANIFESTS.json` pins), but the files git ignores there (IGNORED_NAMES: `kernel.log`, run-id locks,
caches). Each is a leaf keyed by its path, `runs/...` or `ledger/...` whatever the folders are called, and
the root is the Merkle tree hash of RFC 6962 over the leaves in sorted path order, so any added, deleted,
moved, linked or edited file changes it. A symbolic link is a leaf (its target, never followed); a FIFO or a
device is refused. `commit_leaves` reads the same leaves from a git commit, so `kit verify-evidence --at
COMMIT` compares the working tree with that commit file by file.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kit.digest import BoundedReadError, canonical_json, sha256_regular

RUNS_KEY, LEDGER_KEY = "runs", "ledger"
# what git ignores under runs/ and ledger/ (.gitignore): never evidence, so never in the root
IGNORED_NAMES = ("kernel.log", ".*.run-lock", "__pycache__", ".ipynb_checkpoints")
MAX_FILE_BYTES = 1 << 30  # an evidence file larger than this is refused, not read (kit-evidence files are KB to MB)
_CHUNK = 1 << 20


class EvidenceRootError(ValueError):
    """A file of the evidence cannot be a leaf (not a regular file or a link, too large, unreadable)."""


def _ignored(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in IGNORED_NAMES)


@dataclass(frozen=True, slots=True)
class Leaf:
    """One leaf (in memory): `path` (runs/... or ledger/...), `kind` ("file" or "link"), `size` (bytes, a link's
    target's length) and `sha256` (of the bytes, or of a link's target)."""
    path: str
    kind: str
    size: int
    sha256: str


def leaf(path: str, kind: str, size: int, sha256: str) -> Leaf:
    return Leaf(path, kind, size, sha256)


def leaf_hash(item: Leaf) -> bytes:
    return hashlib.sha256(b"\x00" + canonical_json([item.path, item.kind, item.size, item.sha256])).digest()


def merkle_root(hashes: list[bytes]) -> bytes:
    """RFC 6962 Merkle tree hash of already-hashed leaves (the empty tree: sha256 of no bytes)."""
    if not hashes:
        return hashlib.sha256(b"").digest()
    level = list(hashes)

    def mth(lo: int, hi: int) -> bytes:
        if hi - lo == 1:
            return level[lo]
        k = 1
        while k * 2 < hi - lo:
            k *= 2
        return hashlib.sha256(b"\x01" + mth(lo, lo + k) + mth(lo + k, hi)).digest()

    return mth(0, len(level))


def root_of(leaves: dict[str, Leaf]) -> str:
    """The root (64 hex) of leaves keyed by path."""
    return merkle_root([leaf_hash(leaves[p]) for p in sorted(leaves)]).hex()


def hash_regular(path: Path, cap: int = MAX_FILE_BYTES) -> tuple[int, str]:
    """(size, sha256) of the regular file `path`, opened without following a link and read at most `cap` bytes."""
    try:
        return sha256_regular(path, cap, follow_links=False)
    except (BoundedReadError, OSError) as e:
        raise EvidenceRootError(f"{e}; expected a file of the evidence") from None


def _walk(top: Path, key: str, out: dict[str, Leaf]) -> None:
    try:
        entries = sorted(os.scandir(top), key=lambda e: e.name)
    except FileNotFoundError:
        return
    for e in entries:
        if _ignored(e.name):
            continue
        path, name = Path(e.path), f"{key}/{e.name}"
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            target = os.fsencode(os.readlink(path))
            out[name] = leaf(name, "link", len(target), hashlib.sha256(target).hexdigest())
        elif stat.S_ISDIR(mode):
            _walk(path, name, out)
        elif stat.S_ISREG(mode):
            size, sha = hash_regular(path)
            out[name] = leaf(name, "file", size, sha)
        else:
            raise EvidenceRootError(f"{path}: neither a regular file, a folder nor a link; expected evidence files")


def default_ledger_dir(runs_dir: str | os.PathLike) -> Path:
    """The ledger folder beside a runs folder: RUNS/../ledger."""
    return Path(os.path.abspath(runs_dir)).parent / LEDGER_KEY


def evidence_leaves(runs_dir: str | os.PathLike, ledger_dir: str | os.PathLike | None = None) -> dict[str, Leaf]:
    """{key: leaf} of the evidence in the working tree (see the module docstring); links are leaves, never
    followed, and the runs folder itself must not be a link."""
    runs_dir = Path(runs_dir)
    ledger_dir = Path(ledger_dir) if ledger_dir is not None else default_ledger_dir(runs_dir)
    out: dict[str, Leaf] = {}
    for top, key in ((runs_dir, RUNS_KEY), (ledger_dir, LEDGER_KEY)):
        if top.is_symlink():
            raise EvidenceRootError(f"{top}: a symbolic link; expected the {key} folder itself")
        if key == RUNS_KEY and not top.is_dir():
            raise EvidenceRootError(f"{top}: runs directory not found")
        _walk(top, key, out)
    return out


def evidence_root(runs_dir: str | os.PathLike, ledger_dir: str | os.PathLike | None = None) -> str:
    """The evidence root of a runs folder and its ledger folder: 64 lowercase hex characters.

    `runs_dir`: the runs folder (the repository's `runs`); `ledger_dir`: the exposure ledger's folder (default
    `ledger` beside `runs_dir`; absent counts as empty). Every regular file and every symbolic link under both
    (not followed) but IGNORED_NAMES is a leaf sha256(0x00 || canonical JSON [key, kind, size, sha256]), keyed
    `runs/<relative path>` or `ledger/<relative path>`; the root is the RFC 6962 Merkle tree hash (node: sha256(0x01
    || left || right)) of the leaves in sorted key order. Raises EvidenceRootError (one line naming the file)
    for a file that is not regular, larger than MAX_FILE_BYTES, or unreadable. Pure function of the files: the same
    bytes give the same root on any machine, and `kit verify-evidence --at COMMIT` computes the commit's from git.
    To show it with its commit (a report's first screen): `evidence_root(runs)` and `git rev-parse HEAD` (with
    `git status --porcelain runs ledger` empty, else the root is of uncommitted evidence)."""
    return root_of(evidence_leaves(runs_dir, ledger_dir))


def _git(base: Path, *args: str, data: bytes | None = None) -> bytes:
    done = subprocess.run(["git", "-C", str(base), *args], input=data, capture_output=True, check=False)
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip().splitlines()
        raise EvidenceRootError(f"{base}: git {' '.join(args[:3])} failed: {why[0] if why else done.returncode}")
    return done.stdout


def commit_leaves(base: str | os.PathLike, commit: str, runs_rel: str = "runs", ledger_rel: str = "ledger") -> dict[str, Leaf]:
    """{key: leaf} of the evidence as commit `commit` of the repository at `base` holds it (runs_rel and ledger_rel:
    the folders' paths in the repository), read from git's objects: the same leaves evidence_leaves gives
    for a checkout of that commit."""
    base = Path(base)
    listing = _git(base, "ls-tree", "-r", "-z", "--full-tree", commit, "--", runs_rel, ledger_rel)
    items = []
    for entry in listing.split(b"\0"):
        if not entry:
            continue
        meta, path = entry.split(b"\t", 1)
        mode, kind, obj = meta.split(b" ")
        path_s = path.decode()
        prefix, key = (runs_rel, RUNS_KEY) if path_s.startswith(runs_rel + "/") else (ledger_rel, LEDGER_KEY)
        rel = path_s[len(prefix) + 1:]
        if any(_ignored(part) for part in rel.split("/")):
            continue
        if kind != b"blob":
            raise EvidenceRootError(f"{base}: {path_s} at {commit} is a {kind.decode()}; expected files of the evidence")
        items.append((f"{key}/{rel}", "link" if mode == b"120000" else "file", obj.decode()))
    out: dict[str, Leaf] = {}
    if not items:
        return out
    blobs = _git(base, "cat-file", "--batch", data=b"".join(o.encode() + b"\n" for _, _, o in items))
    pos = 0
    for key, leaf_kind, _ in items:
        nl = blobs.index(b"\n", pos)
        size = int(blobs[pos:nl].split(b" ")[2])
        body = blobs[nl + 1:nl + 1 + size]
        pos = nl + 1 + size + 1
        out[key] = leaf(key, leaf_kind, size, hashlib.sha256(body).hexdigest())
    return out


def compare_leaves(have: dict[str, Leaf], want: dict[str, Leaf], source: str) -> list[str]:
    """One line per file added, removed, edited or turned into (or from) a link in `have` against `want`."""
    problems = []
    for key in sorted(set(have) | set(want)):
        if key not in have:
            problems.append(f"{key}: removed (present at {source})")
        elif key not in want:
            problems.append(f"{key}: added (absent at {source})")
        elif have[key] != want[key]:
            h, w = have[key], want[key]
            problems.append(f"{key}: {h.kind} sha256 {h.sha256[:12]}, size {h.size}; at {source} "
                            f"{w.kind} sha256 {w.sha256[:12]}, size {w.size}")
    return problems


def root_and_commit(runs_dir: str | os.PathLike) -> tuple[str, str | None]:
    """(the evidence root of `runs_dir` and its ledger, the commit whose evidence has that root): the commit is
    the repository's HEAD when HEAD's runs and ledger folders give the same leaves (commit_leaves), else None
    (the evidence is not HEAD's: uncommitted, or the runs folder is outside a repository, as a demo's is). A
    report shows both, so a reviewer can recompute the root with `kit verify-evidence --at COMMIT --root ROOT`."""
    runs_dir = Path(os.path.abspath(runs_dir))
    have = evidence_leaves(runs_dir)
    try:
        base = Path(_git(runs_dir, "rev-parse", "--show-toplevel").decode().strip())
        head = _git(base, "rev-parse", "HEAD").decode().strip()
        rel = runs_dir.relative_to(base).as_posix()
        ledger_rel = default_ledger_dir(runs_dir).relative_to(base).as_posix()
        same = commit_leaves(base, head, rel, ledger_rel) == have
    except (EvidenceRootError, ValueError, OSError):
        return root_of(have), None
    return root_of(have), head if same else None

