"""Run records: `runs/<run-id>/run.json`, its metric sidecars, and what a notebook reports from its kernel.

A run record says what ran (notebook and its digest, parameters), where (git commit and dirty
flag, package versions, device), on what (contract and input digests, checkpoint roots used),
what it produced (checkpoint roots, metric sidecars pinned by sha256) and how it ended (status,
times, the failing cell). It is canonical JSON (kit.digest), so it has one byte form and can be
pinned and compared. docs/formats.md ("Run records") is the reference.

Notebook code calls, from inside the kernel, `record_roots`, `record_inputs` and `record_metric`;
they write into the run directory named by the environment variable KIT_RUN_DIR (the runner sets
it; outside a run they write nothing and return None, so a notebook also runs by hand). A notebook
ends itself as `unavailable` or `aborted` by raising `ArmUnavailable(reason)` / `ArmAborted(reason)`:
the runner maps the exception's name to the status. This module imports neither torch nor papermill.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import platform
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import kit
from kit.digest import canonical_json, load_canonical_json, load_json_strict, write_canonical_json

RUN_FORMAT = "kit-run/2"  # /2 added numeric_profile
STATUSES = ("completed", "failed", "aborted", "unavailable")
RUN_DIR_ENV = "KIT_RUN_DIR"
RUN_RECORD_NAME = "run.json"
METRICS_DIR_NAME = "metrics"
KERNEL_ROOTS_NAME = ".kernel-roots.json"  # written by record_roots, merged into run.json, then removed
KERNEL_INPUTS_NAME = ".kernel-inputs.json"  # written by record_inputs, likewise
RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
METRIC_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
ROOT_RE = re.compile(r"[0-9a-f]{64}")
SHA256_RE = re.compile(r"[0-9a-f]{64}")
VERSIONED_PACKAGES = ("torch", "transformers", "tokenizers", "safetensors", "numpy", "papermill", "kit")
GIT_EXCLUDED_FROM_DIRTY = ("runs", "reports", "ledger")  # evidence outputs (the exposure ledger too) are not code


class RunRecordError(ValueError):
    """A run record or sidecar is malformed; the message names the file and the field."""


class ArmSignal(Exception):
    """Raised by notebook code to end a run with a status other than `failed`; str(e) is the reason."""

    status = "failed"

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class ArmUnavailable(ArmSignal):
    """The arm cannot run here (e.g. it needs more GPUs than the host has); not a failure of the kit."""

    status = "unavailable"


class ArmAborted(ArmSignal):
    """The arm stopped itself on purpose (e.g. a gate said the rest is pointless)."""

    status = "aborted"


# The kernel reports an exception by class name only, so the runner maps names, not classes.
STATUS_OF_EXCEPTION_NAME = {cls.__name__: cls.status for cls in (ArmUnavailable, ArmAborted)}


# --- calls made by notebook code inside the kernel ------------------------------------------
def current_run_dir() -> Path | None:
    """The run directory of the execution this kernel belongs to, or None outside `kit run`."""
    value = os.environ.get(RUN_DIR_ENV)
    return Path(value) if value else None


def _check_root(root: Any, source: str) -> str:
    if not isinstance(root, str) or not ROOT_RE.fullmatch(root):
        raise RunRecordError(f"{source}: checkpoint root {root!r} is not 64 lowercase hex characters")
    return root


def _merge_root_entries(existing: list[dict], new: list[dict]) -> list[dict]:
    out = list(existing)
    for entry in new:
        if entry not in out:
            out.append(entry)
    return out


def record_roots(produced=(), used=(), home: str | os.PathLike | None = None) -> Path | None:
    """Record checkpoint roots this run produced and used (full roots, 64 hex) in checkpoint `home`.

    Calls accumulate (duplicates are dropped); `home` is what `kit verify-evidence` re-verifies the
    roots against. Returns the file written, or None outside a run.
    """
    entries = {
        role: [{"root": _check_root(r, f"record_roots({role}=...)"),
                "home": str(Path(home).resolve()) if home is not None else None} for r in roots]
        for role, roots in (("produced", list(produced)), ("used", list(used)))
    }
    run_dir = current_run_dir()
    if run_dir is None:
        return None
    path = run_dir / KERNEL_ROOTS_NAME
    old = load_json_strict(path) if path.exists() else {"produced": [], "used": []}
    merged = {role: _merge_root_entries(old[role], entries[role]) for role in ("produced", "used")}
    write_canonical_json(path, merged)
    return path


def record_inputs(contract_digest: str | None = None, input_digests: dict[str, str] | None = None) -> Path | None:
    """Record the digest of the contract and of named inputs this run was bound to (sha256 hex).

    A name recorded twice with different digests, here or by the caller of the runner, makes the
    run `failed` with an EvidenceConflict: a record must not name two inputs for one thing.
    """
    if contract_digest is not None and not (isinstance(contract_digest, str) and SHA256_RE.fullmatch(contract_digest)):
        raise RunRecordError(f"record_inputs: contract_digest {contract_digest!r} is not a sha256 hex digest")
    for name, digest in (input_digests or {}).items():
        if not isinstance(digest, str) or not SHA256_RE.fullmatch(digest):
            raise RunRecordError(f"record_inputs: input {name!r} has digest {digest!r}, not a sha256 hex digest")
    run_dir = current_run_dir()
    if run_dir is None:
        return None
    path = run_dir / KERNEL_INPUTS_NAME
    old = load_json_strict(path) if path.exists() else {"contract_digest": None, "input_digests": {}}
    merged = merge_inputs(old, {"contract_digest": contract_digest, "input_digests": dict(input_digests or {})},
                          str(path))
    write_canonical_json(path, merged)
    return path


def merge_inputs(a: dict, b: dict, source: str) -> dict:
    """Union of two {"contract_digest", "input_digests"} records; conflicting digests are an error."""
    contract = a.get("contract_digest")
    if b.get("contract_digest") is not None:
        if contract is not None and contract != b["contract_digest"]:
            raise RunRecordError(f"{source}: contract digest {b['contract_digest']} conflicts with {contract}")
        contract = b["contract_digest"]
    inputs = dict(a.get("input_digests") or {})
    for name, digest in (b.get("input_digests") or {}).items():
        if inputs.get(name, digest) != digest:
            raise RunRecordError(f"{source}: input {name!r} digest {digest} conflicts with {inputs[name]}")
        inputs[name] = digest
    return {"contract_digest": contract, "input_digests": inputs}


def record_metric(name: str, obj: Any) -> Path | None:
    """Write `obj` as the canonical-JSON sidecar runs/<run-id>/metrics/<name>.json (NaN is refused).

    Shapes the report draws (docs/formats.md): a list of records with an "update" key -> curves;
    other lists of records, {"columns", "rows"} or a dict of dicts -> a table; a flat dict -> a
    one-column table; anything else is shown as JSON.
    """
    if not isinstance(name, str) or not METRIC_NAME_RE.fullmatch(name):
        raise RunRecordError(f"record_metric: name {name!r} must match {METRIC_NAME_RE.pattern}")
    try:
        canonical_json(obj)
    except (TypeError, ValueError) as e:
        raise RunRecordError(f"record_metric({name!r}): not canonical JSON ({e}); convert NaN/arrays first") from None
    run_dir = current_run_dir()
    if run_dir is None:
        return None
    path = run_dir / METRICS_DIR_NAME / f"{name}.json"
    write_canonical_json(path, obj)
    return path


# --- environment capture --------------------------------------------------------------------
def utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


def iso_utc(moment: _dt.datetime) -> str:
    return moment.astimezone(_dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _git(directory: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=30,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None  # no git on this host
    return done.stdout if done.returncode == 0 else None


def git_toplevel(directory: Path) -> Path | None:
    out = _git(directory, "rev-parse", "--show-toplevel")
    return Path(out.strip()) if out else None


def evidence_base(runs_dir: Path) -> Path:
    """What paths in run records are relative to: the repository holding `runs_dir`, else its parent."""
    return git_toplevel(runs_dir) or Path(runs_dir).resolve().parent


def relative_to_base(path: str | os.PathLike, base: Path) -> str:
    """`path` relative to `base` (POSIX form) when inside it, else absolute: records stay portable."""
    path = Path(path).resolve()
    try:
        return path.relative_to(base.resolve()).as_posix()
    except ValueError:
        return str(path)


def git_state(directory: Path) -> dict:
    """{"commit", "dirty"} of the repository holding `directory`; both None outside a repository."""
    commit = _git(directory, "rev-parse", "--verify", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    excludes = [f":(top,exclude){p}" for p in GIT_EXCLUDED_FROM_DIRTY]
    status = _git(directory, "status", "--porcelain", "--untracked-files=normal", "--", ":/", *excludes)
    return {"commit": commit.strip(), "dirty": None if status is None else bool(status.strip())}


def git_commit_exists(directory: Path, commit: str) -> bool:
    return _git(directory, "cat-file", "-e", f"{commit}^{{commit}}") is not None


def git_commit_in_history(directory: Path, commit: str) -> bool:
    """`commit` is HEAD or one of its ancestors: the code that ran is in the history the evidence is read
    from (a commit kept only on a branch that was never merged, or on another host, is not)."""
    return _git(directory, "merge-base", "--is-ancestor", commit, "HEAD") is not None


GPU_REFERENCE_REQUIREMENTS = Path("requirements") / "gpu-reference.txt"


def gpu_reference_requirements_sha256() -> str | None:
    """sha256 of the kit repository's requirements/gpu-reference.txt (the pinned GPU image), or None
    when the running kit is not inside a checkout that has it."""
    import kit

    path = Path(kit.__file__).resolve().parents[1] / GPU_REFERENCE_REQUIREMENTS
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def package_versions() -> dict:
    """Python and package versions from installed metadata; nothing is imported (torch stays unloaded);
    and `gpu_reference_requirements_sha256`, the pinned GPU requirements file this run names."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in VERSIONED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    versions["gpu_reference_requirements_sha256"] = gpu_reference_requirements_sha256()
    return versions


def cpu_model() -> str | None:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return platform.processor() or None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "Hardware"):
            return value.strip()
    return platform.processor() or None


def gpus() -> list[dict]:
    """[{"name", "driver"}] per NVIDIA GPU from nvidia-smi; [] without the tool or when it fails."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return []
    try:
        done = subprocess.run([tool, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if done.returncode != 0:
        return []
    rows = [line.rsplit(",", 1) for line in done.stdout.splitlines() if line.strip()]
    return [{"name": name.strip(), "driver": driver.strip()} for name, driver in rows if driver is not None]


def declared_numeric_profile() -> dict:
    """The profile a notebook kernel started by the runner runs under: the kernel calls
    kit.numerics.apply() before its first cell (kit/evidence/runtime.py), which sets these variables
    or refuses to compute. (torch is not imported here.)"""
    return {"name": kit.NUMERIC_PROFILE, "environment": dict(kit.NUMERIC_ENV)}


def device_info() -> dict:
    found = gpus()
    return {"cpu": cpu_model(), "cpu_count": os.cpu_count(), "gpus": found, "gpu_count": len(found)}


# --- the record -----------------------------------------------------------------------------
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
    format: str = RUN_FORMAT

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: Any, source: str) -> RunRecord:
        validate_run_record(obj, source)
        return cls(**obj)


def _fail(source: str, what: str) -> None:
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
    if not isinstance(obj, dict) or set(obj) != expected:
        got = set(obj) if isinstance(obj, dict) else type(obj).__name__
        _fail(source, f"expected a run record object with keys {sorted(expected)}, got {got}")
    if obj["format"] != RUN_FORMAT:
        _fail(source, f"field 'format' = {obj['format']!r}, expected {RUN_FORMAT!r}")
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
            _check_root(entry["root"], f"{source}: checkpoint_roots.{role}")


def run_record_path(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / RUN_RECORD_NAME


def write_run_record(run_dir: str | os.PathLike, record: RunRecord) -> Path:
    path = run_record_path(run_dir)
    obj = record.to_json()
    validate_run_record(obj, str(path))
    write_canonical_json(path, obj)
    return path


def read_run_record(run_dir: str | os.PathLike) -> RunRecord:
    path = run_record_path(run_dir)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no run record (is {run_dir} a run directory?)")
    return RunRecord.from_json(load_canonical_json(path), str(path))


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
    """Directories directly under `runs_dir` that look like runs (`is_run_dir`)."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise FileNotFoundError(f"{runs_dir}: runs directory not found")
    return sorted(p for p in runs_dir.iterdir() if is_run_dir(p))
