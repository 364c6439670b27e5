"""The run record, `runs/<run-id>/run.json`: its schema, validation, reading and writing, and the layout
of a runs folder (metric sidecars, superseded attempts).

A run record says what ran (notebook and its digest, parameters), where (git commit and dirty
flag, package versions, device), on what (contract and input digests, checkpoint roots used),
what it produced (checkpoint roots, metric sidecars pinned by sha256) and how it ended (status,
times, the failing cell). It is canonical JSON (kit.digest), so it has one byte form and can be
pinned and compared. docs/formats/run-records.md ("Run records") is the reference.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from kit.digest import load_canonical_json, load_json_strict, write_canonical_json
from kit.evidence.environment import declared_numeric_profile

RUN_FORMAT = "kit-run/3"  # /2 added numeric_profile; /3 the manifest, materials and ledger events
READ_FORMATS = ("kit-run/2", RUN_FORMAT)
CHAIN_FIELDS = ("manifest", "materials", "ledger_events")  # what /3 added (docs/formats/run-records.md, "Run records")
STATUSES = ("completed", "failed", "aborted", "unavailable")
RUN_RECORD_NAME = "run.json"
METRICS_DIR_NAME = "metrics"
RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
METRIC_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
ROOT_RE = re.compile(r"[0-9a-f]{64}")
SHA256_RE = re.compile(r"[0-9a-f]{64}")


class RunRecordError(ValueError):
    """A run record or sidecar is malformed; the message names the file and the field."""


def check_root(root: Any, source: str) -> str:
    if not isinstance(root, str) or not ROOT_RE.fullmatch(root):
        raise RunRecordError(f"{source}: checkpoint root {root!r} is not 64 lowercase hex characters")
    return root


@dataclass
class RunRecord:
    run_id: str
    notebook: str  # source notebook, relative to the repository root when inside it
    notebook_sha256: str
    executed_notebook: str  # file name inside the run directory
    executed_notebook_sha256: str | None
    parameters: dict
    status: str
    reason: str | None
    error: dict | None  # {"cell_index", "execution_count", "ename", "evalue"} unless completed
    started_at: str
    ended_at: str
    duration_s: float
    git: dict
    versions: dict
    device: dict
    contract_digest: str | None = None
    input_digests: dict = field(default_factory=dict)
    checkpoint_roots: dict = field(default_factory=lambda: {"produced": [], "used": []})
    metrics: dict = field(default_factory=dict)  # sidecar name -> sha256 of its bytes
    notes: dict = field(default_factory=dict)  # free-form annotations from the caller
    # the numeric profile the kernel ran under (kit/numerics.py): name and the environment it set
    numeric_profile: dict = field(default_factory=declared_numeric_profile)
    # every file of the run folder but run.json (and the ignored kernel.log): relative path -> {sha256, size}
    manifest: dict = field(default_factory=dict)
    materials: list = field(default_factory=list)  # what the run consumed: [{"role", "kind", "digest"}]
    ledger_events: list = field(default_factory=list)  # ledger events it appended: [{"event", "digest", "head"}]
    format: str = RUN_FORMAT

    def to_json(self) -> dict:
        obj = asdict(self)
        if self.format != RUN_FORMAT:  # an older record keeps its own keys
            for name in CHAIN_FIELDS:
                del obj[name]
        return obj

    @classmethod
    def from_json(cls, obj: Any, source: str) -> RunRecord:
        validate_run_record(obj, source)
        return cls(**obj)


def _fail(source: str, what: str) -> NoReturn:
    raise RunRecordError(f"{source}: {what}")


def _is_str_or_none(v: Any) -> bool:
    return v is None or isinstance(v, str)


def _check_sha(v: Any, source: str, name: str, nullable: bool = False) -> None:
    if v is None and nullable:
        return
    if not isinstance(v, str) or not SHA256_RE.fullmatch(v):
        _fail(source, f"field {name!r} = {v!r} is not a sha256 hex digest")


def validate_run_record(obj: Any, source: str) -> None:
    """Exact keys and types of a run record; errors name `source` and the field."""
    expected = {f for f in RunRecord.__dataclass_fields__}
    if isinstance(obj, dict) and obj.get("format") != RUN_FORMAT:
        expected -= set(CHAIN_FIELDS)
    if not isinstance(obj, dict) or set(obj) != expected:
        got = set(obj) if isinstance(obj, dict) else type(obj).__name__
        _fail(source, f"expected a run record object with keys {sorted(expected)}, got {got}")
    if obj["format"] not in READ_FORMATS:
        _fail(source, f"field 'format' = {obj['format']!r}, expected one of {list(READ_FORMATS)}")
    if obj["format"] == RUN_FORMAT:
        _validate_chain_fields(obj, source)
    if not isinstance(obj["run_id"], str) or not RUN_ID_RE.fullmatch(obj["run_id"]):
        _fail(source, f"field 'run_id' = {obj['run_id']!r} must match {RUN_ID_RE.pattern}")
    for name in ("notebook", "executed_notebook", "started_at", "ended_at"):
        if not isinstance(obj[name], str) or not obj[name]:
            _fail(source, f"field {name!r} must be a non-empty string")
    _check_sha(obj["notebook_sha256"], source, "notebook_sha256")
    _check_sha(obj["executed_notebook_sha256"], source, "executed_notebook_sha256", nullable=True)
    _check_sha(obj["contract_digest"], source, "contract_digest", nullable=True)
    if obj["status"] not in STATUSES:
        _fail(source, f"field 'status' = {obj['status']!r}, expected one of {list(STATUSES)}")
    if not _is_str_or_none(obj["reason"]):
        _fail(source, "field 'reason' must be a string or null")
    error = obj["error"]
    if (error is None) != (obj["status"] == "completed"):
        _fail(source, "field 'error' must be null exactly when status is 'completed'")
    if error is not None:
        if not isinstance(error, dict) or set(error) != {"cell_index", "execution_count", "ename", "evalue"}:
            _fail(source, "field 'error' must have keys cell_index, execution_count, ename, evalue")
        if not all(v is None or (isinstance(v, int) and not isinstance(v, bool))
                   for v in (error["cell_index"], error["execution_count"])):
            _fail(source, "error.cell_index and error.execution_count must be integers or null")
        if not isinstance(error["ename"], str) or not isinstance(error["evalue"], str):
            _fail(source, "error.ename and error.evalue must be strings")
    if not isinstance(obj["duration_s"], (int, float)) or isinstance(obj["duration_s"], bool) or obj["duration_s"] < 0:
        _fail(source, f"field 'duration_s' = {obj['duration_s']!r} must be a non-negative number")
    profile = obj["numeric_profile"]
    if not isinstance(profile, dict) or not isinstance(profile.get("name"), str) \
            or not isinstance(profile.get("environment"), dict):
        _fail(source, "field 'numeric_profile' must be an object with a string 'name' and an 'environment' object")
    for name in ("parameters", "git", "versions", "device", "input_digests", "metrics", "notes", "checkpoint_roots"):
        if not isinstance(obj[name], dict):
            _fail(source, f"field {name!r} must be an object")
    if set(obj["git"]) != {"commit", "dirty"}:
        _fail(source, "field 'git' must have keys commit, dirty")
    for name, digest in list(obj["input_digests"].items()) + list(obj["metrics"].items()):
        _check_sha(digest, source, f"input_digests/metrics[{name!r}]")
    for name in obj["metrics"]:
        if not METRIC_NAME_RE.fullmatch(name):
            _fail(source, f"metric name {name!r} must match {METRIC_NAME_RE.pattern}")
    roots = obj["checkpoint_roots"]
    if set(roots) != {"produced", "used"}:
        _fail(source, "field 'checkpoint_roots' must have keys produced, used")
    for role, entries in roots.items():
        for entry in entries if isinstance(entries, list) else [None]:
            if not isinstance(entry, dict) or set(entry) != {"root", "home"} or not _is_str_or_none(entry["home"]):
                _fail(source, f"checkpoint_roots.{role} entries must be {{'root', 'home'}} objects")
            check_root(entry["root"], f"{source}: checkpoint_roots.{role}")


def _validate_chain_fields(obj: dict, source: str) -> None:
    if not isinstance(obj["manifest"], dict):
        _fail(source, "field 'manifest' must be an object of relative path -> {'sha256', 'size'}")
    for name, entry in obj["manifest"].items():
        if not isinstance(entry, dict) or set(entry) != {"sha256", "size"} or not isinstance(entry["size"], int):
            _fail(source, f"field 'manifest[{name!r}]' must be {{'sha256', 'size'}} with an integer size")
        _check_sha(entry["sha256"], source, f"manifest[{name!r}].sha256")
    for key, fields in (("materials", {"role", "kind", "digest"}), ("ledger_events", {"event", "digest", "head"})):
        if not isinstance(obj[key], list):
            _fail(source, f"field {key!r} must be a list")
        for i, item in enumerate(obj[key]):
            if not isinstance(item, dict) or set(item) != fields:
                _fail(source, f"field '{key}[{i}]' must be an object with keys {sorted(fields)}")
            _check_sha(item["digest"], source, f"{key}[{i}].digest")


def run_record_path(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / RUN_RECORD_NAME


def write_run_record(run_dir: str | os.PathLike, record: RunRecord) -> Path:
    path = run_record_path(run_dir)
    obj = record.to_json()
    validate_run_record(obj, str(path))
    write_canonical_json(path, obj)
    return path


def refuse_links(run_dir: str | os.PathLike) -> None:
    """Every reader of a run (verify-evidence, the report, results, status, inspect) refuses a run folder or a
    run.json that is a symbolic link: a link is not evidence, and a reader by path would read another run's."""
    run_dir = Path(run_dir)
    for path in (run_dir, run_dir / RUN_RECORD_NAME):
        if path.is_symlink():
            raise RunRecordError(f"{path}: a symbolic link (to {os.readlink(path)}); expected the run's own "
                                 f"{'folder' if path == run_dir else 'record'} (a link is not evidence)")


def read_record_json(run_dir: str | os.PathLike) -> Any:
    """run.json of `run_dir` as strict JSON (any format: a benchmark's record too), links refused (refuse_links)."""
    refuse_links(run_dir)
    return load_json_strict(run_record_path(run_dir), follow_links=False)


def read_run_record(run_dir: str | os.PathLike) -> RunRecord:
    path = run_record_path(run_dir)
    refuse_links(run_dir)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no run record (is {run_dir} a run directory?)")
    return RunRecord.from_json(load_canonical_json(path, follow_links=False), str(path))


def metric_path(run_dir: str | os.PathLike, name: str) -> Path:
    return Path(run_dir) / METRICS_DIR_NAME / f"{name}.json"


def is_run_dir(path: Path) -> bool:
    """A directory that looks like a run: it holds run.json or an executed notebook (a run that crashed
    before writing its record still counts, so that checking it fails rather than skips it)."""
    return path.is_dir() and ((path / RUN_RECORD_NAME).exists() or any(path.glob("*.ipynb")))


SUPERSEDED_ATTEMPTS_SUFFIX = ".superseded"


def superseded_attempt_dir(run_dir: Path) -> Path:
    """Where an earlier attempt of `run_dir` that did not complete is kept when its run id runs again:
    RUNS/<run-id>.superseded/attempt-<n>/ with n one more than the attempts kept so far. A re-run never
    overwrites a failed run's record; both stay, and the report lists the kept one as superseded."""
    folder = run_dir.parent / f"{run_dir.name}{SUPERSEDED_ATTEMPTS_SUFFIX}"
    taken = [int(p.name.split("-", 1)[1]) for p in folder.glob("attempt-*") if p.name.split("-", 1)[1].isdigit()]
    return folder / f"attempt-{max(taken, default=0) + 1}"


def list_run_dirs(runs_dir: str | os.PathLike) -> list[Path]:
    """Directories directly under `runs_dir` that look like runs (`is_run_dir`), and links to folders, listed so
    that their readers refuse them by name (refuse_links) rather than read them or leave them out unsaid."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise FileNotFoundError(f"{runs_dir}: runs directory not found")
    return sorted(p for p in runs_dir.iterdir() if is_run_dir(p) or p.is_symlink() and p.is_dir())
