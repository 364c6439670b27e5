"""Archived evidence: folders of a runs directory that are no longer current (superseded run sets, campaign
folders, pilots and probes no contract cites), kept as deterministic `tar.xz` files under `RUNS/archive/`,
named by their sha256 and listed in `RUNS/archive/index.json` (docs/formats/archived-evidence.md, "Archived evidence"; the
writer: kit/evidence/archiving.py).

Readers never unpack into the repository: `unpacked(runs_dir)` checks every archive against its name and
the index and unpacks the folders once per process into a temporary directory, under their old names, so
the run index, `kit verify-evidence`, `--replay` and the report read an archived run as the folder it was.
Only regular files inside the named folders are accepted, never more bytes than the index states; a
member stored as a reference (equal to a tracked file) is materialised after its sha256 is checked.
`origin(path)` maps an unpacked path back to its place in the runs directory.
"""

from __future__ import annotations

import atexit
import hashlib
import io
import lzma
import os
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from kit.digest import load_json_strict, read_bounded
from kit.evidence.root import hash_regular
from kit.record import ContractError, MapOf, Omittable, Opt, Record, Seq, spec_field

ARCHIVE_DIR_NAME = "archive"
INDEX_NAME = "index.json"
INDEX_FORMAT = "kit-evidence-archive/1"
_HEX = set("0123456789abcdef")
_TEMP_PREFIX = "kit-archived-"
ORIGIN_MARKER = "kit-archive-origin"  # beside the unpacked tree: the runs directory it stands for


# absolute caps on what an index may state, whatever it says: an archive of evidence is MB, not TB; a number past
# these (10^30) is refused in one line before anything is read or allocated
MAX_INDEX = {"size": 4 << 30, "unpacked_bytes": 16 << 30, "members": 1_000_000}


class ArchiveError(ValueError):
    """An archive or its index is not as the index says."""


# index.json, declared (docs/formats/archived-evidence.md): read_index checks what a reader's safety rests on with
# its own messages (names, sizes within MAX_INDEX, folders once), then the declared fields.
@dataclass(frozen=True, slots=True, kw_only=True)
class ArchiveReference(Record):
    """A member not in the tar: its bytes equal a file that stayed tracked when it was archived."""

    member: str = spec_field(str, doc="its name in the archive")
    path: str = spec_field(str, doc="where equal bytes were, relative to runs/")
    sha256: str = spec_field(str, doc="sha256 of the bytes")
    size: int = spec_field(int, doc="their size")


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchivedRun(Record):
    run_id: str = spec_field(str, doc="the run id (the folder name when unrecorded)")
    status: str = spec_field(str, doc="its run.json's status, or unrecorded")
    member: str = spec_field(str, doc="its path relative to runs/")
    folder: str = spec_field(str, doc="the archived folder holding it")
    produced_roots: tuple[str, ...] = spec_field(Seq(str), doc="its produced roots, sorted")
    superseded_in: str | None = spec_field(Opt(str), doc="the folder whose superseded.json supersedes it")
    superseded_by: str | None = spec_field(Opt(str), doc="the replacement's run id")


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchiveEntry(Record):
    file: str = spec_field(str, doc="<sha256>.tar.xz")
    sha256: str = spec_field(str, doc="sha256 of the file")
    size: int = spec_field(int, doc="bytes of the file")
    tar_sha256: str | None = spec_field(Omittable(str), doc="sha256 of the uncompressed tar")
    why: str = spec_field(str, doc="why the folders were archived")
    folders: tuple[str, ...] = spec_field(Seq(str), doc="plain folder names directly under runs/")
    members: int = spec_field(int, doc="files the folders held")
    unpacked_bytes: int = spec_field(int, doc="their bytes")
    references: tuple[ArchiveReference, ...] = spec_field(Seq(ArchiveReference), doc="members stored as references")
    runs: tuple[ArchivedRun, ...] = spec_field(Seq(ArchivedRun), doc="every run directory in the folders")
    superseded_reasons: Mapping[str, str] | None = spec_field(Omittable(MapOf(str)), doc="folder -> its superseded.json's reason")


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchiveIndex(Record):
    format: str = spec_field(str, doc=INDEX_FORMAT)
    archives: tuple[ArchiveEntry, ...] = spec_field(Seq(ArchiveEntry), doc="one entry per archive, by first folder")


# runs directory (resolved) -> (index sha256, temporary root holding the unpacked folders)
_UNPACKED: dict[Path, tuple[str, Path]] = {}
# temporary root -> the runs directory it stands for
_ORIGIN: dict[Path, Path] = {}


def index_path(runs_dir: str | os.PathLike) -> Path:
    return Path(runs_dir) / ARCHIVE_DIR_NAME / INDEX_NAME


def read_index(runs_dir: str | os.PathLike) -> ArchiveIndex | None:
    """The checked index of `runs_dir`'s archives, or None when it has none."""
    path = index_path(runs_dir)
    if not path.exists() and not path.is_symlink():
        return None
    index = load_json_strict(path, follow_links=False)
    if not isinstance(index, dict) or index.get("format") != INDEX_FORMAT or not isinstance(index.get("archives"), list):
        raise ArchiveError(f"{path}: field 'format' must be {INDEX_FORMAT!r} with a list 'archives'")
    seen: set[str] = set()
    for i, a in enumerate(index["archives"]):
        where = f"{path}: archives[{i}]"
        if not isinstance(a, dict):
            raise ArchiveError(f"{where} must be an object")
        sha = a.get("sha256")
        if not (isinstance(sha, str) and len(sha) == 64 and set(sha) <= _HEX) or a.get("file") != f"{sha}.tar.xz":
            raise ArchiveError(f"{where}: field 'file' must be '<sha256>.tar.xz' with 'sha256' its 64-hex digest")
        for field in ("size", "unpacked_bytes", "members"):
            if not isinstance(a.get(field), int) or isinstance(a.get(field), bool) or not 0 <= a[field] <= MAX_INDEX[field]:
                raise ArchiveError(f"{where}: field {field!r} is {str(a.get(field))[:40]}; expected an integer from 0 "
                                   f"to {MAX_INDEX[field]}")
        folders = a.get("folders")
        if not isinstance(folders, list) or not folders or not all(_plain_name(f) for f in folders):
            raise ArchiveError(f"{where}: field 'folders' must be a non-empty list of plain folder names")
        if seen & set(folders):
            raise ArchiveError(f"{where}: folder(s) {sorted(seen & set(folders))} are in two archives")
        seen |= set(folders)
        for j, ref in enumerate(a.get("references") or []):
            if not (isinstance(ref, dict) and _member_ok(ref.get("member"), folders) and _relative_ok(ref.get("path"))
                    and isinstance(ref.get("sha256"), str) and isinstance(ref.get("size"), int)
                    and not isinstance(ref.get("size"), bool) and 0 <= ref["size"] <= MAX_INDEX["unpacked_bytes"]):
                raise ArchiveError(f"{where}: references[{j}] needs member (inside its folders), path (relative, "
                                   "inside the runs directory), sha256 and size")
        if not isinstance(a.get("runs"), list):
            raise ArchiveError(f"{where}: field 'runs' must be a list")
    try:
        return ArchiveIndex.from_json(index, str(path))
    except ContractError as e:
        raise ArchiveError(str(e)) from None


def _plain_name(name) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\\" not in name \
        and not name.startswith(".")


def _relative_ok(path) -> bool:
    if not isinstance(path, str) or not path or path.startswith("/") or "\\" in path:
        return False
    parts = PurePosixPath(path).parts
    return all(p not in ("..", ".", "") for p in parts)


def _member_ok(name, folders) -> bool:
    return _relative_ok(name) and PurePosixPath(name).parts[0] in folders and len(PurePosixPath(name).parts) > 1


def archived_folders(runs_dir: str | os.PathLike) -> list[str]:
    """Names of the folders `runs_dir`'s archives hold (empty without an index)."""
    index = read_index(runs_dir)
    return sorted(f for a in (index.archives if index is not None else ()) for f in a.folders)


class _BoundedXZ(io.RawIOBase):
    """The decompressed bytes of an xz file, read as a stream: at most `limit` of them, never the whole at once."""

    def __init__(self, f, limit: int, where: str):
        self._f, self._limit, self._where, self._out = f, limit, where, 0
        self._dec = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        want = min(len(buf), 1 << 20)
        data = b""
        while not data:
            if self._dec.eof:
                return 0
            if self._dec.needs_input:
                chunk = self._f.read(1 << 16)
                if not chunk:
                    raise ArchiveError(f"{self._where}: the xz stream ends early (truncated archive)")
            else:
                chunk = b""
            try:
                data = self._dec.decompress(chunk, max_length=want)
            except lzma.LZMAError as e:
                raise ArchiveError(f"{self._where}: not an xz stream ({e})") from None
        self._out += len(data)
        if self._out > self._limit:
            raise ArchiveError(f"{self._where}: decompresses past the {self._limit} bytes its index allows")
        buf[:len(data)] = data
        return len(data)

    @property
    def eof(self) -> bool:
        return self._dec.eof


def _unpack_one(runs_dir: Path, entry: ArchiveEntry, root: Path) -> int:
    """Check one archive and unpack its members (not its references) under `root`; returns their bytes. The
    file is hashed, then decompressed as a stream and unpacked member by member: no more than the index's
    sizes (and the absolute caps read_index enforces) is ever read or held."""
    path = runs_dir / ARCHIVE_DIR_NAME / entry.file
    where = f"{runs_dir / ARCHIVE_DIR_NAME / INDEX_NAME}: archive {entry.file}"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise ArchiveError(f"{where}: file {path} missing") from None
    if not stat.S_ISREG(st.st_mode) or st.st_size != entry.size:
        raise ArchiveError(f"{where}: {path} must be a regular file of {entry.size} bytes")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        h, n = hashlib.sha256(), 0
        while chunk := f.read(1 << 20):
            n += len(chunk)
            if n > entry.size:
                raise ArchiveError(f"{where}: {path} grew past the index's {entry.size} bytes while read")
            h.update(chunk)
        if h.hexdigest() != entry.sha256:
            raise ArchiveError(f"{where}: the bytes of {path} do not hash to its name")
        f.seek(0)
        budget, members = entry.unpacked_bytes, 0
        references = {r.member: r for r in entry.references}
        # a tar of the stated files is their bytes plus at most three 512-byte blocks each (header, PAX header,
        # padding) and the end blocks: an archive that decompresses past that is refused, not unpacked
        limit = entry.unpacked_bytes + 3 * 512 * (entry.members + 1) + 20 * 512
        stream = _BoundedXZ(f, limit, where)
        try:
            with tarfile.open(fileobj=io.BufferedReader(stream, 1 << 16), mode="r|") as tar:
                for m in tar:
                    if not m.isreg():
                        raise ArchiveError(f"{where}: member {m.name!r} is not a regular file")
                    if not _member_ok(m.name, entry.folders) or m.name in references:
                        raise ArchiveError(f"{where}: member {m.name!r} is outside the folders the index names")
                    budget -= m.size
                    members += 1
                    if budget < 0 or members > entry.members:
                        raise ArchiveError(f"{where}: members hold more than the index's unpacked_bytes or members")
                    _write_member(tar, m, root, where)
        except tarfile.TarError as e:
            raise ArchiveError(f"{where}: not a tar archive ({e})") from None
    if members + len(references) != entry.members:
        raise ArchiveError(f"{where}: {members} member(s) and {len(references)} reference(s); the index states "
                           f"{entry.members} files")
    return entry.unpacked_bytes - budget


def _write_member(tar, m, root: Path, where: str) -> None:
    """Write one member under `root`; a duplicate member or a failed write (a full TMPDIR) is one line naming the
    member and the cause, not the temporary tree."""
    target = root / m.name
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        src = tar.extractfile(m)
        with open(target, "xb") as out:
            shutil.copyfileobj(src, out)
    except FileExistsError:
        raise ArchiveError(f"{where}: member {m.name!r} appears twice in the archive; expected each file once") from None
    except OSError as e:
        raise ArchiveError(f"{where}: member {m.name!r} could not be unpacked into the temporary folder "
                           f"({tempfile.gettempdir()}, TMPDIR): {e.strerror or e}; nothing was verified") from None


def _content_map(runs_dir: Path, root: Path) -> dict[str, Path]:
    """sha256 -> a file holding those bytes: the regular files that stay tracked under runs_dir (not archive/)
    and the members unpacked so far."""
    out: dict[str, Path] = {}
    for top in (runs_dir, root):
        for dirpath, dirnames, filenames in os.walk(top):
            if Path(dirpath) == runs_dir:
                dirnames[:] = [d for d in dirnames if d != ARCHIVE_DIR_NAME]
            for name in filenames:
                p = Path(dirpath) / name
                if stat.S_ISREG(os.lstat(p).st_mode):
                    out.setdefault(hash_regular(p)[1], p)  # streamed, links not followed, capped
    return out


def _materialise_references(runs_dir: Path, index: ArchiveIndex, root: Path, member_bytes: dict[str, int]) -> None:
    """Write every reference from a file with its bytes: first where the index says it was (a tracked file),
    else any tracked file or unpacked member with that sha256 (the file may itself have been archived or
    re-made since), until every reference is written or none more can be."""
    pending = [(a, r) for a in index.archives for r in a.references]
    found = _content_map(runs_dir, root)
    while pending:
        left = []
        for a, ref in pending:
            src = runs_dir / ref.path
            blob = None
            for cand in (src, found.get(ref.sha256)):
                try:
                    if cand is not None and stat.S_ISREG(os.lstat(cand).st_mode):
                        data = cand.read_bytes()
                        if hashlib.sha256(data).hexdigest() == ref.sha256 and len(data) == ref.size:
                            blob = data
                            break
                except OSError:
                    continue
            if blob is None:
                left.append((a, ref))
                continue
            target = root / ref.member
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(blob)
            except OSError as e:
                raise ArchiveError(f"{runs_dir / ARCHIVE_DIR_NAME / INDEX_NAME}: archive {a.file}: reference "
                                   f"{ref.member!r} could not be written into the temporary folder "
                                   f"({tempfile.gettempdir()}, TMPDIR): {e.strerror or e}") from None
            found.setdefault(ref.sha256, target)
            member_bytes[a.file] += len(blob)
        if len(left) == len(pending):
            a, ref = left[0]
            raise ArchiveError(f"{runs_dir / ARCHIVE_DIR_NAME / INDEX_NAME}: archive {a.file}: reference "
                               f"{ref.member!r} needs a file with sha256 {ref.sha256[:12]}... and {ref.size} "
                               f"bytes (last at {src}); no tracked file or archived member has them")
        pending = left
    for a in index.archives:
        if member_bytes[a.file] != a.unpacked_bytes:
            raise ArchiveError(f"{runs_dir / ARCHIVE_DIR_NAME / INDEX_NAME}: archive {a.file} unpacked to "
                               f"{member_bytes[a.file]} bytes; the index states {a.unpacked_bytes}")


def unpacked(runs_dir: str | os.PathLike) -> Path | None:
    """The temporary directory holding `runs_dir`'s archived folders unpacked (checked; once per process and
    index), or None when `runs_dir` has no archives."""
    runs_dir = Path(runs_dir).resolve()
    path = index_path(runs_dir)
    if not path.exists() and not path.is_symlink():
        return None
    digest = hashlib.sha256(read_bounded(path, follow_links=False)).hexdigest()
    cached = _UNPACKED.get(runs_dir)
    if cached is not None and cached[0] == digest and cached[1].is_dir():
        return cached[1]
    index = read_index(runs_dir)
    if index is None:  # removed since the check above
        return None
    try:
        root = Path(tempfile.mkdtemp(prefix=_TEMP_PREFIX)) / runs_dir.name
        root.mkdir()
    except OSError as e:
        raise ArchiveError(f"{path}: no temporary folder to unpack the archives into ({tempfile.gettempdir()}, "
                           f"TMPDIR): {e.strerror or e}") from None
    atexit.register(shutil.rmtree, root.parent, True)
    try:
        member_bytes = {entry.file: _unpack_one(runs_dir, entry, root) for entry in index.archives}
        _materialise_references(runs_dir, index, root, member_bytes)
    except BaseException:
        shutil.rmtree(root.parent, ignore_errors=True)
        raise
    _UNPACKED[runs_dir] = (digest, root)
    _ORIGIN[root] = runs_dir
    # another process given a path in this tree (a tool run by a test, a kernel) maps it back the same way
    try:
        (root.parent / ORIGIN_MARKER).write_text(str(runs_dir))
    except OSError as e:
        shutil.rmtree(root.parent, ignore_errors=True)
        _UNPACKED.pop(runs_dir, None)
        raise ArchiveError(f"{path}: the unpacked archives' origin could not be written into the temporary folder "
                           f"({tempfile.gettempdir()}, TMPDIR): {e.strerror or e}") from None
    return root


def folder_paths(runs_dir: str | os.PathLike) -> list[Path]:
    """The archived folders of `runs_dir`, unpacked (see unpacked), in name order."""
    root = unpacked(runs_dir)
    if root is None:
        return []
    return [root / name for name in archived_folders(runs_dir)]


def origin(path: str | os.PathLike) -> Path | None:
    """For a path inside an unpacked archive tree: the same path under the runs directory it stands for
    (which need not exist); None for any other path."""
    path = Path(path)
    resolved = path.resolve() if path.exists() else path.absolute()
    for root, runs_dir in _ORIGIN.items():
        try:
            rel = resolved.relative_to(root.resolve())
        except ValueError:
            continue
        return runs_dir / rel
    for top in resolved.parents:  # unpacked by another process of this machine
        if top.name.startswith(_TEMP_PREFIX) and (top / ORIGIN_MARKER).is_file():
            runs_dir = Path((top / ORIGIN_MARKER).read_text())
            rel = resolved.relative_to(top)
            if rel.parts and rel.parts[0] == runs_dir.name:
                return runs_dir.joinpath(*rel.parts[1:])
    return None


def resolve(path: str | os.PathLike) -> Path:
    """`path` itself when it exists; else, when it names something inside an archived folder of the runs
    directory above it (`runs/demo-superseded-X/demo-seed`), that thing in the unpacked tree; else `path`."""
    path = Path(path)
    if path.exists():
        return path
    absolute = path.absolute()
    for runs_dir in absolute.parents:
        if index_path(runs_dir).is_file():
            rel = absolute.relative_to(runs_dir)
            if rel.parts and rel.parts[0] in archived_folders(runs_dir):
                folder = unpacked(runs_dir)
                assert folder is not None, "archived folders come from an index, so there are archives"
                return folder / rel
            return path
    return path
