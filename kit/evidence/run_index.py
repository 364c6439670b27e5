"""The runs directory as rows: every run directory's record (a notebook run's `run.json`, or a
benchmark's `kit-bench/1` record), read once for the report (kit/evidence/report/) and for the
evidence checks, which both need it."""

from __future__ import annotations

import dataclasses
import fnmatch
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.digest import load_json_strict
from kit.evidence import archive, run_record
from kit.record import MapOf, Opt, Record, build, spec_field


@dataclass(frozen=True, slots=True, kw_only=True)
class ListedRow(Record):
    """The row `load_runs` lists for a run directory without a run record of the kit-run format (in memory, as JSON
    beside the run records' rows): a benchmark's record (`kit-bench/1`: its command as the reason) or a folder whose
    run.json is missing or broken (status "unrecorded", the error as the reason)."""

    run_id: str = spec_field(str, doc="the benchmark's run id, or the folder's name")
    status: str = spec_field(str, doc="the benchmark's status, or `unrecorded`")
    reason: str | None = spec_field(Opt(str), doc="`benchmark: COMMAND`, or why the record does not read")
    notebook: str = spec_field(str, doc="`(benchmark script)`, or empty")
    started_at: str = spec_field(str, doc="ISO 8601 UTC, or empty")
    duration_s: float | None = spec_field(Opt(float), doc="wall-clock seconds, null when not recorded")
    error: run_record.RunError | None = spec_field(Opt(run_record.RunError), doc="always null")
    metrics: Mapping[str, str] = spec_field(MapOf(str), doc="always empty")
    git: dict = spec_field(dict, doc="the benchmark's git object as recorded; commit and dirty null otherwise")
    device: dict = spec_field(dict, doc="the benchmark's GPU by name, or empty")
    checkpoint_roots: run_record.CheckpointRoots = spec_field(run_record.CheckpointRoots, doc="always empty")


@dataclass(frozen=True, slots=True, kw_only=True)
class IndexedRun:
    """One run directory's row (in memory, not a file): the fields of its record that the report and the evidence
    checks read, with its folder. A benchmark's record or a folder without a readable run.json has no parameters,
    contract or inputs (their defaults); `record` keeps the row as JSON (a run record's JSON with its `dir`: what
    `load_runs` returns) for readers that take that JSON (kit.evidence.replicates.replicate_of,
    kit.evidence.results.split_of)."""
    dir: Path
    run_id: str
    status: str
    reason: str | None
    notebook: str
    started_at: str
    duration_s: float | None
    error: run_record.RunError | None
    metrics: Mapping[str, str]  # sidecar name -> sha256 of its bytes
    git: Mapping[str, Any]  # a run's commit and dirty flag; a benchmark's git object as it recorded it
    device: Mapping[str, Any]  # free-form, as recorded (host, CPU and GPUs)
    roots: run_record.CheckpointRoots  # the checkpoint roots it produced and used
    parameters: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    contract_digest: str | None = None
    input_digests: Mapping[str, str] = dataclasses.field(default_factory=dict)
    record: dict = dataclasses.field(default_factory=dict, repr=False)

    @classmethod
    def of_record(cls, run_dir: Path, rec: run_record.RunRecord) -> IndexedRun:
        """The row of a run's record, read and validated."""
        return cls(dir=run_dir, run_id=rec.run_id, status=rec.status, reason=rec.reason, notebook=rec.notebook,
                   started_at=rec.started_at, duration_s=rec.duration_s, error=rec.error, metrics=rec.metrics,
                   git=rec.git.to_json(), device=rec.device, roots=rec.checkpoint_roots, parameters=rec.parameters,
                   contract_digest=rec.contract_digest, input_digests=rec.input_digests,
                   record={"dir": run_dir, **rec.to_json()})

    @classmethod
    def of_listed(cls, run_dir: Path, rec: ListedRow) -> IndexedRun:
        """The row of a benchmark's record or of a folder without a readable run record."""
        return cls(dir=run_dir, run_id=rec.run_id, status=rec.status, reason=rec.reason, notebook=rec.notebook,
                   started_at=rec.started_at, duration_s=rec.duration_s, error=rec.error, metrics=rec.metrics,
                   git=rec.git, device=rec.device, roots=rec.checkpoint_roots, record={"dir": run_dir, **rec.to_json()})

    @classmethod
    def of(cls, row: dict) -> IndexedRun:
        """The row of a run as JSON (`load_runs`' rows, as kit.evidence.results passes them), converted here, at
        the boundary: a run record's JSON, or a listed row's (ListedRow)."""
        run_dir = Path(row["dir"])
        rec = {k: v for k, v in row.items() if k != "dir"}
        if set(rec) == set(ListedRow.json_fields()):
            return dataclasses.replace(cls.of_listed(run_dir, build(rec, ListedRow)), record=row)
        return dataclasses.replace(cls.of_record(run_dir, build(rec, run_record.RunRecord)), record=row)

    @property
    def checkpoint_roots(self) -> dict:
        """The roots as JSON ({"produced": [{"root", "home"}], "used": [...]}), for kit.evidence.results, which reads
        that form; the report reads `roots`."""
        return self.roots.to_json()

    @property
    def commit(self) -> str | None:
        """The commit the run recorded (None for a folder without a readable record)."""
        return self.git.get("commit")

    @property
    def dirty(self) -> bool | None:
        """Whether the run's working tree differed from that commit (None when not recorded)."""
        return self.git.get("dirty")


@dataclass(frozen=True, slots=True)
class KeptRun:
    """A run and where its record is kept: None for a run of the selection itself, else the evidence folder beside
    it that keeps it (a superseded attempt, a GPU replay or repeat, an earlier seed's runs: `kept_rows`)."""
    run: IndexedRun
    kept_in: str | None


BENCH_NOTEBOOK = "(benchmark script)"  # the `notebook` of a benchmark's row
_NO_ROOTS = run_record.CheckpointRoots(produced=(), used=())


def _bench_row(run_dir: Path) -> IndexedRun | None:
    """A benchmark's record (`kit-bench/1`, bench/*.py on a GPU host): listed with its command."""
    try:
        rec = run_record.read_record_json(run_dir)
    except (FileNotFoundError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("format") != "kit-bench/1":
        return None
    dev = rec.get("device") or {}
    gpus = [g["name"] for g in dev.get("gpus") or [] if isinstance(g, dict) and g.get("name")]  # nvidia-smi's
    name = dev.get("name") or dev.get("gpu") or (f"GPU sm_{dev['capability']}" if "capability" in dev else "") \
        or (gpus[0] if gpus else "")
    listed = ListedRow(run_id=rec.get("run_id", run_dir.name), status=rec.get("status", "unrecorded"),
                       reason="benchmark: " + str(rec.get("command", "")), notebook=BENCH_NOTEBOOK,
                       started_at=str(rec.get("started_at", "")), duration_s=rec.get("duration_s"), error=None,
                       metrics={}, git=rec.get("git") or {"commit": None, "dirty": None},
                       device={"gpu_count": 1, "gpus": [{"name": name}]} if name else {}, checkpoint_roots=_NO_ROOTS)
    return IndexedRun.of_listed(run_dir, listed)


def _unrecorded_row(run_dir: Path, reason: str) -> IndexedRun:
    """A folder without a readable run record: listed as "unrecorded", with why."""
    return IndexedRun.of_listed(run_dir, ListedRow(
        run_id=run_dir.name, status="unrecorded", reason=reason, notebook="", started_at="", duration_s=None,
        error=None, metrics={}, git={"commit": None, "dirty": None}, device={}, checkpoint_roots=_NO_ROOTS))


def metric(row: IndexedRun | dict, name: str) -> Any:
    """The sidecar `name` of a row (or of a row as JSON, as kit.evidence.results passes it) as JSON, or None when it
    is not recorded or does not parse."""
    run = row if isinstance(row, IndexedRun) else IndexedRun.of(row)
    if name not in run.metrics:
        return None
    try:
        return load_json_strict(run_record.metric_path(run.dir, name))
    except (FileNotFoundError, ValueError):
        return None


def split_selection(runs: str | os.PathLike) -> tuple[Path, str | None]:
    """A runs directory, or a selection `DIR/GLOB` of its run ids (`runs/medium-*`: `kit report --select`):
    (directory, glob or None)."""
    p = Path(runs)
    if any(ch in p.name for ch in "*?["):
        return p.parent, p.name
    return p, None


def load_runs(runs_dir: str | os.PathLike) -> list[dict]:
    """One row per run directory (of a selection `DIR/GLOB`, only the run ids the glob matches): its
    record as JSON, or status "unrecorded" with the reason (`load_rows`' rows as JSON)."""
    return [r.record for r in load_rows(runs_dir)]


def load_rows(runs_dir: str | os.PathLike) -> list[IndexedRun]:
    """One row per run directory (of a selection `DIR/GLOB`, only the run ids the glob matches), in order of start
    (rows without a start last): its record read, or status "unrecorded" with the reason."""
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
            rows.append(IndexedRun.of_record(run_dir, run_record.read_run_record(run_dir)))
        except (FileNotFoundError, ValueError) as e:
            rows.append(_unrecorded_row(run_dir, str(e)))
    return sorted(rows, key=lambda r: (r.started_at == "", r.started_at, r.run_id))


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
    `kept_in`: the folder, relative to the runs directory (`kept_rows` as JSON)."""
    return [{**k.run.record, "kept_in": k.kept_in} for k in kept_rows(runs_dir)]


def kept_rows(runs_dir) -> list[KeptRun]:
    """The runs kept under the selection's evidence folders (superseded attempts, rebuilt seeds), each with the
    folder that keeps it, relative to the runs directory."""
    folder, _ = split_selection(runs_dir)
    out: list[KeptRun] = []

    def walk(d: Path):
        subs = [c for c in sorted(d.iterdir()) if c.is_dir() and not c.is_symlink()]
        if any(run_record.is_run_dir(c) for c in subs):
            out.extend(KeptRun(r, logical_path(d, folder)) for r in load_rows(d))
        for c in subs:
            if not run_record.is_run_dir(c):
                walk(c)

    for d in evidence_folders(runs_dir):
        walk(d)
    return out
