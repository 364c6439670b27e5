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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, NoReturn

from kit.digest import load_canonical_json, load_json_strict, write_canonical_json
from kit.evidence.environment import declared_numeric_profile
from kit.record import MapOf, Omittable, OneOf, Opt, Record, Seq, build, spec_field, to_json

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


def defaulted_field(spec: Any, default_factory: Any, doc: str) -> Any:
    """A declared field with a default, for the fields a record built by code may leave to it (`spec_field`'s
    fields are required or Omittable)."""
    return field(default_factory=default_factory, metadata={"spec": spec, "key": None, "doc": doc})


# The nested objects of run.json, one declared class each. run.json itself is validated by validate_run_record (its
# messages are the format's since kit-run/1); the declarations say the fields for the reader (attributes the type
# checker follows), the writer (to_json) and the docs test. `dict` marks a free-form object, kept as read.
@dataclass(frozen=True, slots=True, kw_only=True)
class GitState(Record):
    commit: str | None = spec_field(Opt(str), doc="40-hex commit of the repository holding the notebook")
    dirty: bool | None = spec_field(Opt(bool), doc="uncommitted changes (runs/, reports/, ledger/ excepted)")


@dataclass(frozen=True, slots=True, kw_only=True)
class RunError(Record):
    cell_index: int | None = spec_field(Opt(int), doc="0-based index of the failing cell in the source notebook")
    execution_count: int | None = spec_field(Opt(int), doc="its In [n] in the executed notebook")
    ename: str = spec_field(str, doc="the exception's class name")
    evalue: str = spec_field(str, doc="its message")


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointRoot(Record):
    root: str = spec_field(str, doc="64-hex full root")
    home: str | None = spec_field(Opt(str), doc="checkpoint home, relative like `notebook`")


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointRoots(Record):
    produced: tuple[CheckpointRoot, ...] = spec_field(Seq(CheckpointRoot), doc="roots the run committed")
    used: tuple[CheckpointRoot, ...] = spec_field(Seq(CheckpointRoot), doc="roots the run read")


@dataclass(frozen=True, slots=True, kw_only=True)
class NumericProfile(Record):
    name: str = spec_field(str, doc="the profile (kit/numerics.py)")
    environment: Mapping[str, str] = spec_field(MapOf(str), doc="the variables it set, as the runner saw them")
    gpu: dict | None = spec_field(Omittable(dict), doc="a GPU host's numeric mode (gpu_numeric_mode)")


@dataclass(frozen=True, slots=True, kw_only=True)
class ManifestEntry(Record):
    sha256: str = spec_field(str, doc="sha256 of the file")
    size: int = spec_field(int, doc="its size in bytes")


@dataclass(frozen=True, slots=True, kw_only=True)
class Material(Record):
    role: str = spec_field(str, doc="what the run used it as")
    kind: str = spec_field(str, doc="file, evaluation or commit")
    digest: str = spec_field(str, doc="sha256 of the file, or the commit's full root")


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerEvent(Record):
    event: str = spec_field(str, doc="exposure, selection or final-access")
    digest: str = spec_field(str, doc="sha256 of the event")
    head: str = spec_field(str, doc="the ledger's sha256 after it")


def declared_profile() -> NumericProfile:
    """The numeric profile this kit declares (kit/numerics.py), as the record holds it."""
    return build(declared_numeric_profile(), NumericProfile)


def _no_roots() -> CheckpointRoots:
    return CheckpointRoots(produced=(), used=())


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord(Record):
    """run.json (docs/formats/run-records.md, "Run records"). A kit-run/2 record read has no chain fields (None,
    absent from to_json); a record built by the code has them, empty by default."""

    FORMAT: ClassVar[str] = RUN_FORMAT
    run_id: str = spec_field(str, doc="the directory name")
    notebook: str = spec_field(str, doc="source notebook, relative to the repository root when inside it")
    notebook_sha256: str = spec_field(str, doc="sha256 of the source notebook")
    executed_notebook: str = spec_field(str, doc="file name inside the run directory")
    executed_notebook_sha256: str | None = spec_field(Opt(str), doc="sha256 of that file")
    parameters: dict = spec_field(dict, doc="as given")
    status: str = spec_field(str, doc=" ".join(STATUSES))
    reason: str | None = spec_field(Opt(str), doc="why it did not complete")
    error: RunError | None = spec_field(Opt(RunError), doc="null exactly when completed")
    started_at: str = spec_field(str, doc="ISO 8601 UTC")
    ended_at: str = spec_field(str, doc="ISO 8601 UTC")
    duration_s: float = spec_field(float, doc="wall-clock seconds")
    git: GitState = spec_field(GitState, doc="the commit")
    versions: dict = spec_field(dict, doc="package versions")
    device: dict = spec_field(dict, doc="host, CPU and GPUs")
    contract_digest: str | None = defaulted_field(Opt(str), lambda: None, "sha256 of the contract")
    input_digests: Mapping[str, str] = defaulted_field(MapOf(str), dict, "input name -> sha256")
    checkpoint_roots: CheckpointRoots = defaulted_field(CheckpointRoots, _no_roots, "produced and used")
    metrics: Mapping[str, str] = defaulted_field(MapOf(str), dict, "sidecar name -> sha256 of its bytes")
    notes: dict = defaulted_field(dict, dict, "free-form annotations from the caller")
    numeric_profile: NumericProfile = defaulted_field(NumericProfile, declared_profile, "the kernel's numeric profile")
    # every file of the run folder but run.json (and the ignored kernel.log): relative path -> its sha256 and size
    manifest: Mapping[str, ManifestEntry] | None = defaulted_field(Omittable(MapOf(ManifestEntry)), dict, "(/3) run files")
    materials: tuple[Material, ...] | None = defaulted_field(Omittable(Seq(Material)), tuple, "(/3) what the run consumed")
    ledger_events: tuple[LedgerEvent, ...] | None = defaulted_field(Omittable(Seq(LedgerEvent)), tuple,
                                                           "(/3) ledger events it appended")
    format: str = defaulted_field(OneOf(*READ_FORMATS), lambda: RUN_FORMAT, "kit-run/3 (kit-run/2 read)")

    def to_json(self) -> dict:
        """Every field; an older record (kit-run/2) without the chain fields, which it never had."""
        chained = self.format == RUN_FORMAT
        return {k: to_json(getattr(self, f.name)) for k, f in type(self).json_fields().items()
                if chained or k not in CHAIN_FIELDS}

    @classmethod
    def from_json(cls, value: Any, source: str, path: str = "") -> RunRecord:
        validate_run_record(value, source)
        return build(value, cls)


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
    """Exact keys and types of a run record; errors name `source` and the field. The JSON's shape is checked first
    (exact keys of every object the declared classes read), then the values on the built record."""
    expected = set(RunRecord.json_fields())
    if isinstance(obj, dict) and obj.get("format") != RUN_FORMAT:
        expected -= set(CHAIN_FIELDS)
    if not isinstance(obj, dict) or set(obj) != expected:
        got = set(obj) if isinstance(obj, dict) else type(obj).__name__
        _fail(source, f"expected a run record object with keys {sorted(expected)}, got {got}")
    _check_shape(obj, source)
    _check_values(build(obj, RunRecord), source)


def _check_shape(obj: dict, source: str) -> None:
    """The objects and lists of a run record, with the keys their classes declare (values: _check_values)."""
    error = obj["error"]
    if error is not None and (not isinstance(error, dict) or set(error) != set(RunError.json_fields())):
        _fail(source, "field 'error' must have keys cell_index, execution_count, ename, evalue")
    profile = obj["numeric_profile"]
    if not isinstance(profile, dict) or not isinstance(profile.get("name"), str) \
            or not isinstance(profile.get("environment"), dict) or set(profile) - set(NumericProfile.json_fields()):
        _fail(source, "field 'numeric_profile' must be an object with a string 'name' and an 'environment' object")
    for name in ("parameters", "git", "versions", "device", "input_digests", "metrics", "notes", "checkpoint_roots"):
        if not isinstance(obj[name], dict):
            _fail(source, f"field {name!r} must be an object")
    if set(obj["git"]) != set(GitState.json_fields()):
        _fail(source, "field 'git' must have keys commit, dirty")
    roots = obj["checkpoint_roots"]
    if set(roots) != set(CheckpointRoots.json_fields()):
        _fail(source, "field 'checkpoint_roots' must have keys produced, used")
    for role, entries in roots.items():
        for entry in entries if isinstance(entries, list) else [None]:
            if not isinstance(entry, dict) or set(entry) != {"root", "home"} or not _is_str_or_none(entry["home"]):
                _fail(source, f"checkpoint_roots.{role} entries must be {{'root', 'home'}} objects")
    if obj["format"] != RUN_FORMAT:
        return
    if not isinstance(obj["manifest"], dict):
        _fail(source, "field 'manifest' must be an object of relative path -> {'sha256', 'size'}")
    for name, entry in obj["manifest"].items():
        if not isinstance(entry, dict) or set(entry) != {"sha256", "size"} or not isinstance(entry["size"], int):
            _fail(source, f"field 'manifest[{name!r}]' must be {{'sha256', 'size'}} with an integer size")
    for key, cls in (("materials", Material), ("ledger_events", LedgerEvent)):
        fields = set(cls.json_fields())
        if not isinstance(obj[key], list):
            _fail(source, f"field {key!r} must be a list")
        for i, item in enumerate(obj[key]):
            if not isinstance(item, dict) or set(item) != fields:
                _fail(source, f"field '{key}[{i}]' must be an object with keys {sorted(fields)}")


def _check_values(record: RunRecord, source: str) -> None:
    """The values of a run record of the right shape (_check_shape), read from the built record."""
    if record.format not in READ_FORMATS:
        _fail(source, f"field 'format' = {record.format!r}, expected one of {list(READ_FORMATS)}")
    if record.manifest is not None:
        for name, pinned in record.manifest.items():
            _check_sha(pinned.sha256, source, f"manifest[{name!r}].sha256")
    digests = [("materials", [m.digest for m in record.materials or ()]),
               ("ledger_events", [e.digest for e in record.ledger_events or ()])]
    for key, listed in digests:
        for i, digest in enumerate(listed):
            _check_sha(digest, source, f"{key}[{i}].digest")
    if not isinstance(record.run_id, str) or not RUN_ID_RE.fullmatch(record.run_id):
        _fail(source, f"field 'run_id' = {record.run_id!r} must match {RUN_ID_RE.pattern}")
    for name, text in (("notebook", record.notebook), ("executed_notebook", record.executed_notebook),
                       ("started_at", record.started_at), ("ended_at", record.ended_at)):
        if not isinstance(text, str) or not text:
            _fail(source, f"field {name!r} must be a non-empty string")
    _check_sha(record.notebook_sha256, source, "notebook_sha256")
    _check_sha(record.executed_notebook_sha256, source, "executed_notebook_sha256", nullable=True)
    _check_sha(record.contract_digest, source, "contract_digest", nullable=True)
    if record.status not in STATUSES:
        _fail(source, f"field 'status' = {record.status!r}, expected one of {list(STATUSES)}")
    if not _is_str_or_none(record.reason):
        _fail(source, "field 'reason' must be a string or null")
    error = record.error
    if (error is None) != (record.status == "completed"):
        _fail(source, "field 'error' must be null exactly when status is 'completed'")
    if error is not None:
        if not all(v is None or (isinstance(v, int) and not isinstance(v, bool))
                   for v in (error.cell_index, error.execution_count)):
            _fail(source, "error.cell_index and error.execution_count must be integers or null")
        if not isinstance(error.ename, str) or not isinstance(error.evalue, str):
            _fail(source, "error.ename and error.evalue must be strings")
    duration = record.duration_s
    if not isinstance(duration, (int, float)) or isinstance(duration, bool) or duration < 0:
        _fail(source, f"field 'duration_s' = {duration!r} must be a non-negative number")
    for name, digest in list(record.input_digests.items()) + list(record.metrics.items()):
        _check_sha(digest, source, f"input_digests/metrics[{name!r}]")
    for name in record.metrics:
        if not METRIC_NAME_RE.fullmatch(name):
            _fail(source, f"metric name {name!r} must match {METRIC_NAME_RE.pattern}")
    for role, entries in (("produced", record.checkpoint_roots.produced), ("used", record.checkpoint_roots.used)):
        for made_or_read in entries:
            check_root(made_or_read.root, f"{source}: checkpoint_roots.{role}")


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
