"""The runs directory as rows: every run directory's record (a notebook run's `run.json`, or a
benchmark's `kit-bench/1` record), read once for the report (kit/evidence/report/) and for the
evidence checks, which both need it."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

from kit.evidence import archive, run_record


def _bench_row(run_dir: Path) -> dict | None:
    """A benchmark's record (`kit-bench/1`, bench/*.py on a GPU host): listed with its command."""
    try:
        rec = run_record.read_record_json(run_dir)
    except (FileNotFoundError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("format") != "kit-bench/1":
        return None
    dev = rec.get("device") or {}
    listed = [g["name"] for g in dev.get("gpus") or [] if isinstance(g, dict) and g.get("name")]  # nvidia-smi's
    name = dev.get("name") or dev.get("gpu") or (f"GPU sm_{dev['capability']}" if "capability" in dev else "") \
        or (listed[0] if listed else "")
    return {"dir": run_dir, "run_id": rec.get("run_id", run_dir.name), "status": rec.get("status", "unrecorded"),
            "reason": "benchmark: " + str(rec.get("command", "")), "notebook": "(benchmark script)",
            "started_at": str(rec.get("started_at", "")), "duration_s": rec.get("duration_s"), "error": None,
            "metrics": {}, "git": rec.get("git") or {"commit": None, "dirty": None},
            "device": {"gpu_count": 1, "gpus": [{"name": name}]} if name else {},
            "checkpoint_roots": {"produced": [], "used": []}}


def split_selection(runs: str | os.PathLike) -> tuple[Path, str | None]:
    """A runs directory, or a selection `DIR/GLOB` of its run ids (`runs/medium-*`: `kit report --select`):
    (directory, glob or None)."""
    p = Path(runs)
    if any(ch in p.name for ch in "*?["):
        return p.parent, p.name
    return p, None


def load_runs(runs_dir: str | os.PathLike) -> list[dict]:
    """One row per run directory (of a selection `DIR/GLOB`, only the run ids the glob matches): its
    record as JSON, or status "unrecorded" with the reason."""
    runs_dir, pattern = split_selection(runs_dir)
    rows = []
    archived = [p for p in archive.folder_paths(runs_dir) if run_record.is_run_dir(p)]  # archived pilots, probes
    for run_dir in run_record.list_run_dirs(runs_dir) + archived:
        if pattern is not None and not fnmatch.fnmatchcase(run_dir.name, pattern):
            continue
        bench = _bench_row(run_dir)
        if bench is not None:
            rows.append(bench)
            continue
        try:
            rows.append({"dir": run_dir, **run_record.read_run_record(run_dir).to_json()})
        except (FileNotFoundError, ValueError) as e:
            rows.append({"dir": run_dir, "run_id": run_dir.name, "status": "unrecorded", "reason": str(e),
                         "notebook": "", "started_at": "", "duration_s": None, "error": None, "metrics": {},
                         "git": {"commit": None, "dirty": None}, "device": {},
                         "checkpoint_roots": {"produced": [], "used": []}})
    return sorted(rows, key=lambda r: (r["started_at"] == "", r["started_at"], r["run_id"]))


def evidence_folders(runs_dir) -> list[Path]:
    """Folders beside the run directories that the selection covers and that are not runs: campaign
    folders (runs/medium-campaign-DATE) and superseded folders, archived ones unpacked (kit/evidence/archive.py),
    by name; never the archive folder itself."""
    folder, pattern = split_selection(runs_dir)
    tracked = [p for p in folder.iterdir() if p.name != archive.ARCHIVE_DIR_NAME]
    return sorted((p for p in tracked + archive.folder_paths(folder)
                   if p.is_dir() and not p.is_symlink() and not run_record.is_run_dir(p)
                   and (pattern is None or fnmatch.fnmatchcase(p.name, pattern))), key=lambda p: p.name)


def logical_path(path: Path, runs_dir: Path) -> str:
    """`path` relative to `runs_dir`, for a path in `runs_dir` or in its archives' unpacked tree."""
    stands_for = archive.origin(path)
    if stands_for is not None:
        return stands_for.relative_to(Path(runs_dir).resolve()).as_posix()
    return path.relative_to(runs_dir).as_posix()


def kept_runs(runs_dir) -> list[dict]:
    """Run rows kept under the selection's evidence folders (superseded attempts, rebuilt seeds), each with
    `kept_in`: the folder, relative to the runs directory."""
    folder, _ = split_selection(runs_dir)
    out: list[dict] = []

    def walk(d: Path):
        subs = [c for c in sorted(d.iterdir()) if c.is_dir() and not c.is_symlink()]
        if any(run_record.is_run_dir(c) for c in subs):
            out.extend({**r, "kept_in": logical_path(d, folder)} for r in load_runs(d))
        for c in subs:
            if not run_record.is_run_dir(c):
                walk(c)

    for d in evidence_folders(runs_dir):
        walk(d)
    return out
