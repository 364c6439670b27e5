"""Archived evidence (kit/evidence/archive.py, archiving.py): archiving a folder keeps every run the report
and `kit verify-evidence` list, check for check; archives are deterministic; hostile archives and indexes
are refused before anything is unpacked past what the index states; the committed archives verify."""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from support.evidence import evidence_path
from support.models import REPO

from kit.digest import write_canonical_json
from kit.evidence import archive
from kit.evidence.archiving import archive_folders
from kit.evidence.report.runs import run_table
from kit.evidence.run_index import kept_runs, load_runs
from kit.evidence.verify import expand_run_dirs, verify_evidence

SUPERSEDED = "demo-superseded-2026-12-03-path-dependent-job-digest"


def _fresh_unpacked_cache():
    archive._UNPACKED.clear()


@pytest.fixture(scope="module")
def small_runs(tmp_path_factory) -> Path:
    """A runs folder: four current demo runs and one superseded demo set (unpacked from the committed archive)."""
    runs = tmp_path_factory.mktemp("archive") / "runs"
    for name in ("demo-seed", "demo-adaptive-prepare", "demo-adaptive-select", "demo-study-evaluate"):
        shutil.copytree(REPO / "runs" / name, runs / name)
    shutil.copytree(evidence_path(SUPERSEDED), runs / SUPERSEDED)
    return runs


def _listing(runs: Path) -> tuple:
    table = run_table(runs)  # the report's run table: every row, reason (with the kept folder) included
    return (table.to_dict("records"), sorted((r["run_id"], r["status"], r["kept_in"]) for r in kept_runs(runs)),
            sorted(r["run_id"] for r in load_runs(runs)))


def _checks(runs: Path) -> dict:
    out = {}
    for d in expand_run_dirs([str(runs)]):
        rel = (archive.origin(d) or d).relative_to(runs.resolve() if archive.origin(d) else runs).as_posix()
        out[rel] = [(c["check"], c["result"]) for c in verify_evidence(d)["checks"]]
    return out


def test_archiving_keeps_every_listed_attempt_and_every_check(small_runs, tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(small_runs, runs)
    before, checks_before = _listing(runs), _checks(runs)
    assert len(before[1]) == 27 and {k for _, _, k in before[1]} == {SUPERSEDED}
    entry = archive_folders(runs, [SUPERSEDED], "test")
    assert not (runs / SUPERSEDED).exists() and (runs / "archive" / entry.file).is_file()
    assert len(entry.runs) == 27 and entry.references, "files equal to current runs are stored once"
    assert _listing(runs) == before  # the report's run table and kept attempts: the same rows
    assert _checks(runs) == checks_before
    # a path inside the archived folder names it, unpacked
    seed = archive.resolve(runs / SUPERSEDED / "demo-seed")
    assert (seed / "run.json").is_file() and archive.origin(seed) == (runs / SUPERSEDED / "demo-seed").resolve()


def test_archives_are_deterministic(small_runs, tmp_path):
    """The same folders give the same bytes, whatever their mtimes, owners or modes on disk."""
    names = []
    for i in range(2):
        runs = tmp_path / f"copy{i}" / "runs"
        shutil.copytree(small_runs, runs)
        for p in (runs / SUPERSEDED).rglob("*"):
            if p.is_file():
                os.utime(p, (1_000_000 * (i + 1), 1_000_000 * (i + 1)))
                p.chmod(0o600 if i else 0o664)
        names.append(archive_folders(runs, [SUPERSEDED], "why").file)
    assert names[0] == names[1]


# --- hostile archives: each refused with the file and what was expected --------------------------------------
def _write_archive(runs: Path, members: dict[str, bytes], folders: list[str], *, links=(), unpacked=None,
                   references=(), name=None, index_extra=None) -> dict:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member, data in members.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for member, target in links:
            info = tarfile.TarInfo(member)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    data = lzma.compress(buf.getvalue())
    sha = hashlib.sha256(data).hexdigest()
    (runs / "archive").mkdir(parents=True, exist_ok=True)
    (runs / "archive" / f"{name or sha}.tar.xz").write_bytes(data)
    refs = list(references)
    total = sum(map(len, members.values())) + sum(r["size"] for r in refs)
    entry = {"file": f"{sha}.tar.xz", "sha256": sha, "size": len(data), "why": "test", "folders": folders,
             "members": len(members) + len(refs) + len(links), "unpacked_bytes": total if unpacked is None else unpacked,
             "references": refs, "runs": [], **(index_extra or {})}
    write_canonical_json(runs / "archive" / "index.json", {"format": archive.INDEX_FORMAT, "archives": [entry]})
    _fresh_unpacked_cache()
    return entry


def test_a_sound_handmade_archive_unpacks(tmp_path):
    runs = tmp_path / "runs"
    (runs / "kept").mkdir(parents=True)
    (runs / "kept" / "same.txt").write_bytes(b"shared bytes")
    _write_archive(runs, {"old/a.txt": b"alpha"}, ["old"], references=[
        {"member": "old/b.txt", "path": "kept/same.txt", "sha256": hashlib.sha256(b"shared bytes").hexdigest(),
         "size": 12}])
    root = archive.unpacked(runs)
    assert (root / "old" / "a.txt").read_bytes() == b"alpha" and (root / "old" / "b.txt").read_bytes() == b"shared bytes"
    assert not (runs / "old").exists()  # never unpacked into the runs folder


@pytest.mark.parametrize("case, message", [
    ("renamed", "do not hash to its name"),
    ("outside", "outside the folders the index names"),
    ("traversal", "outside the folders the index names"),
    ("symlink", "is not a regular file"),
    ("bomb", "decompresses past"),
    ("missing reference", "no tracked file or archived member has them"),
    ("folder twice", "are in two archives"),
])
def test_hostile_archives_are_refused(tmp_path, case, message):
    runs = tmp_path / "runs"
    runs.mkdir()
    if case == "renamed":
        entry = _write_archive(runs, {"old/a.txt": b"alpha"}, ["old"])
        (runs / "archive" / entry["file"]).write_bytes(lzma.compress(b"x" * 10))
        index = json.loads((runs / "archive" / "index.json").read_text())
        index["archives"][0]["size"] = (runs / "archive" / entry["file"]).stat().st_size
        write_canonical_json(runs / "archive" / "index.json", index)
    elif case == "outside":
        _write_archive(runs, {"other/a.txt": b"alpha"}, ["old"])
    elif case == "traversal":
        _write_archive(runs, {"old/../../escaped.txt": b"alpha"}, ["old"])
    elif case == "symlink":
        _write_archive(runs, {}, ["old"], links=[("old/link", "/etc/passwd")])
    elif case == "bomb":
        _write_archive(runs, {"old/zeros": b"\0" * 2_000_000}, ["old"], unpacked=10)
    elif case == "missing reference":
        _write_archive(runs, {"old/a.txt": b"alpha"}, ["old"], references=[
            {"member": "old/b.txt", "path": "kept/gone.txt", "sha256": "0" * 64, "size": 3}])
    elif case == "folder twice":
        entry = _write_archive(runs, {"old/a.txt": b"alpha"}, ["old"])
        index = json.loads((runs / "archive" / "index.json").read_text())
        index["archives"].append(dict(entry))
        write_canonical_json(runs / "archive" / "index.json", index)
    with pytest.raises(archive.ArchiveError, match=message) as e:
        archive.unpacked(runs)
    assert str(runs / "archive") in str(e.value)
    assert not (tmp_path / "escaped.txt").exists() and not (runs / "old").exists()


def test_the_committed_archives_verify_in_place():
    """Every run in the committed archives is listed by `kit verify-evidence runs` and passes, and the
    index's run list is what the archives hold."""
    index = archive.read_index(REPO / "runs")
    assert index is not None
    listed = {r.member for a in index.archives for r in a.runs}
    runs = REPO / "runs"
    archived = [d for d in expand_run_dirs([str(runs)]) if archive.origin(d) is not None]
    assert {archive.origin(d).relative_to(runs.resolve()).as_posix() for d in archived} == listed
    failed = [(str(d), [c for c in r["checks"] if c["result"] == "fail"])
              for d in archived if not (r := verify_evidence(d))["ok"]]
    assert not failed, failed[:3]
