"""`kit archive-evidence`: turn folders of a runs directory that are no longer current into a deterministic
archive (the reader, and why: kit/evidence/archive.py; the format: docs/formats/archived-evidence.md, "Archived evidence").

The tar holds regular files only, in sorted order, PAX format, mtime 0, owner and group 0 with no names,
mode 0644, so that the same folders give the same tar bytes on any machine; it is compressed with xz at
preset 9e and named by the sha256 of the compressed file. A file whose bytes equal a file that stays
tracked under the runs directory is stored once: the index lists it as a reference (member, path, sha256,
size) and the reader materialises it. The index entry lists, per archived run, its id, status, roots, the
member path and what superseded it, and `index.md` renders the same as a table a reader can browse. The
folders are removed only after the archive has been written and read back equal.
"""

from __future__ import annotations

import hashlib
import io
import lzma
import os
import shutil
import stat
import tarfile
from collections.abc import Mapping
from pathlib import Path

from kit.digest import load_json_strict, write_canonical_json
from kit.evidence import archive, run_record
from kit.evidence.archive import ArchivedRun, ArchiveEntry, ArchiveIndex, ArchiveReference
from kit.evidence.verify import _run_dirs_under, superseded_note

XZ_PRESET = 9 | lzma.PRESET_EXTREME


def _files(folder: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            mode = os.lstat(p).st_mode
            if not stat.S_ISREG(mode):
                raise ValueError(f"{p}: not a regular file; an archive holds regular files only")
            out.append(p)
    return out


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tracked_elsewhere(runs_dir: Path, excluded: set[str]) -> dict[tuple[str, int], str]:
    """(sha256, size) -> path relative to runs_dir, of every file that stays under runs_dir outside the
    folders being archived and outside archive/ (the first by name when several are equal)."""
    out: dict[tuple[str, int], str] = {}
    for top in sorted(runs_dir.iterdir()):
        if top.name in excluded or top.name == archive.ARCHIVE_DIR_NAME or top.is_symlink():
            continue
        for p in (_files(top) if top.is_dir() else [top] if top.is_file() else []):
            key = (_sha(p), p.stat().st_size)
            out.setdefault(key, p.relative_to(runs_dir).as_posix())
    return out


def tar_bytes(runs_dir: Path, folders: list[str], references: Mapping[str, ArchiveReference]) -> tuple[bytes, int, int]:
    """The deterministic tar of `folders` (without the referenced members): (bytes, members, member bytes)."""
    buf = io.BytesIO()
    members = size = 0
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for folder in sorted(folders):
            for p in _files(runs_dir / folder):
                name = p.relative_to(runs_dir).as_posix()
                if name in references:
                    continue
                data = p.read_bytes()
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = len(data), 0, 0o644
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                tar.addfile(info, io.BytesIO(data))
                members += 1
                size += len(data)
    return buf.getvalue(), members, size


def _run_entries(runs_dir: Path, folders: list[str]) -> list[ArchivedRun]:
    out = []
    for folder in sorted(folders):
        base = runs_dir / folder
        dirs = [base] if run_record.is_run_dir(base) else _run_dirs_under(base)
        for d in dirs:
            try:
                rec = load_json_strict(d / run_record.RUN_RECORD_NAME)
            except (FileNotFoundError, ValueError):
                rec = {}
            rec = rec if isinstance(rec, dict) else {}
            roots = found if isinstance(found := rec.get("checkpoint_roots"), dict) else {}
            try:
                note = superseded_note(d)
            except ValueError:
                note = None
            out.append(ArchivedRun(
                run_id=rec.get("run_id", d.name), status=rec.get("status", "unrecorded"),
                member=d.relative_to(runs_dir).as_posix(), folder=folder,
                produced_roots=tuple(sorted({root for e in roots.get("produced") or []
                                             if isinstance(e, dict) and isinstance(root := e.get("root"), str) and root})),
                superseded_in=d.parent.relative_to(runs_dir).as_posix() if note else None,
                superseded_by=note.replaced_by.get(d.name) if note else None))
    return out


def superseded_reasons(runs_dir: Path, runs: list[ArchivedRun]) -> dict[str, str]:
    """{folder: its superseded.json's reason} for the folders the runs name in `superseded_in` (stated once,
    not per run)."""
    out = {}
    for folder in sorted({r.superseded_in for r in runs if r.superseded_in}):
        some_run = next(r for r in runs if r.superseded_in == folder)
        note = superseded_note(runs_dir / some_run.member)
        if note is not None:  # the run named its folder because the note is there
            out[folder] = note.reason
    return out


def archive_folders(runs_dir: str | os.PathLike, folders: list[str], why: str) -> ArchiveEntry:
    """Archive `folders` (names directly under `runs_dir`) into one tar.xz, add it to the index, re-read it
    and remove the folders. Returns the index entry."""
    runs_dir = Path(runs_dir)
    folders = sorted(set(folders))
    if not folders:
        raise ValueError("kit archive-evidence: name at least one folder of the runs directory")
    already = set(archive.archived_folders(runs_dir))
    for f in folders:
        p = runs_dir / f
        if not archive._plain_name(f) or f == archive.ARCHIVE_DIR_NAME or not p.is_dir() or p.is_symlink():
            raise ValueError(f"{p}: expected a folder directly under {runs_dir} (not a link, not archive/)")
        if f in already:
            raise ValueError(f"{p}: a folder of that name is already archived ({archive.index_path(runs_dir)})")
    elsewhere = _tracked_elsewhere(runs_dir, set(folders))
    references: dict[str, ArchiveReference] = {}
    total = count = 0
    for folder in folders:
        for p in _files(runs_dir / folder):
            name, size = p.relative_to(runs_dir).as_posix(), p.stat().st_size
            total += size
            count += 1
            key = (_sha(p), size)
            if key in elsewhere and size > 0:
                references[name] = ArchiveReference(member=name, path=elsewhere[key], sha256=key[0], size=size)
    raw, members, member_bytes = tar_bytes(runs_dir, folders, references)
    assert members + len(references) == count and member_bytes + sum(r.size for r in references.values()) == total
    data = lzma.compress(raw, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=XZ_PRESET)
    sha = hashlib.sha256(data).hexdigest()
    runs = _run_entries(runs_dir, folders)
    entry = ArchiveEntry(file=f"{sha}.tar.xz", sha256=sha, size=len(data), tar_sha256=hashlib.sha256(raw).hexdigest(),
                         why=why, folders=tuple(folders), members=count, unpacked_bytes=total,
                         references=tuple(references[k] for k in sorted(references)), runs=tuple(runs),
                         superseded_reasons=superseded_reasons(runs_dir, runs))
    adir = runs_dir / archive.ARCHIVE_DIR_NAME
    adir.mkdir(exist_ok=True)
    (adir / entry.file).write_bytes(data)
    before = archive.read_index(runs_dir)
    index = ArchiveIndex(format=archive.INDEX_FORMAT, archives=tuple(sorted(
        [*(before.archives if before is not None else ()), entry], key=lambda a: a.folders[0])))
    write_canonical_json(archive.index_path(runs_dir), index.to_json())
    (adir / "index.md").write_text(index_markdown(index))
    # read back before removing anything: every file must come out with its bytes
    root = archive.unpacked(runs_dir)
    assert root is not None, "the index was just written"
    for folder in folders:
        for p in _files(runs_dir / folder):
            if (root / p.relative_to(runs_dir)).read_bytes() != p.read_bytes():
                raise RuntimeError(f"{p}: the archive gave different bytes; nothing was removed")
    for folder in folders:
        shutil.rmtree(runs_dir / folder)
    return entry


def index_markdown(index: ArchiveIndex) -> str:
    """index.md: per archive, its folders and why, then one row per archived run."""
    lines = ["# Archived evidence", "",
             "Folders of `runs/` that are no longer current, kept as deterministic `tar.xz` archives named by",
             "their sha256 (docs/formats/archived-evidence.md, \"Archived evidence\"). `kit verify-evidence runs` checks the runs in",
             "them; `kit verify-evidence --replay runs/<folder>/<run>` replays one. This page is generated from",
             "`index.json` by `kit archive-evidence`.", ""]
    for a in index.archives:
        lines += [f"## `{a.file}`", "", f"{a.why}", "",
                  (f"{a.members} files, {a.unpacked_bytes:,} bytes unpacked, {a.size:,} bytes archived; "
                  f"{len(a.references)} stored once as references to tracked files."), "",
                  "Folders: " + ", ".join(f"`{f}`" for f in a.folders), "",
                  *[f"Superseded in `{f}`: {why}" + "\n" for f, why in (a.superseded_reasons or {}).items()],
                  "| run | status | member | produced roots | superseded by |", "|---|---|---|---|---|"]
        for r in a.runs:
            roots = ", ".join(x[:12] for x in r.produced_roots) or "-"
            lines.append(f"| {r.run_id} | {r.status} | `{r.member}` | {roots} | {r.superseded_by or '-'} |")
        lines.append("")
    return "\n".join(lines)
