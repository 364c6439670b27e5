"""Execute a parameterised notebook with papermill into `runs/<run-id>/` and always leave a run record.

`run_notebook` checks the parameters before anything is created, executes the notebook and writes
`run.json` whatever happens (`completed`, `failed`, `unavailable`, `aborted`); notebook code records
roots, digests and metric sidecars through KIT_RUN_DIR. `run_batch` runs a plan sequentially: every
arm is checked first, a completed run id is skipped, a failed arm does not stop the batch.
Details: the notes below; formats: docs/formats/run-records.md, "Run records".

Notes: statuses, environment and plans.

papermill saves after every cell, so a failure leaves the partial notebook. `failed`: a cell raised, or the kernel
died or did not start; `unavailable` / `aborted`: the notebook raised kit.ArmUnavailable / kit.ArmAborted. The kernel
inherits this process's environment, hence KIT_RUN_DIR; what notebook code records there is merged into run.json.
A plan is a JSON or YAML list of {"notebook", "run_id", "parameters", "extra"}; its notebook paths are relative to
the current directory, as for `kit run`.
"""

from __future__ import annotations

import datetime as _dt
import errno
import fcntl
import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.digest import canonical_json, load_json_strict, loads_strict, sha256_file
from kit.environ import PROGRESS_ENV, progress_on, temporary_environ
from kit.evidence import environment, run_record
from kit.evidence.manifest import file_manifest
from kit.evidence.notebook import (
    KERNEL_CHAIN_NAME,
    KERNEL_INPUTS_NAME,
    KERNEL_ROOTS_NAME,
    RUN_DIR_ENV,
    STATUS_OF_EXCEPTION_NAME,
    KernelChain,
    KernelInputs,
    KernelRoots,
    merged_inputs,
)
from kit.evidence.parameters import check_parameters
from kit.evidence.run_record import (
    CheckpointRoot,
    CheckpointRoots,
    GitState,
    ManifestEntry,
    NumericProfile,
    RunError,
    RunRecord,
    RunRecordError,
    declared_profile,
)
from kit.evidence.runtime import (
    KERNEL_LOG_NAME,
    ensure_runtime,
    kernel_pythonpath,
    profiled_kernels,
    quiet_kernels,
)
from kit.interrupt import Interrupted, interruption
from kit.record import Omittable, Record, build, spec_field

EXTRA_KEYS = frozenset({"contract_digest", "input_digests", "notes"})
PLAN_KEYS = frozenset({"notebook", "run_id", "parameters", "extra"})


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanArm(Record):
    """One arm of a batch plan (`kit batch PLAN`, run_batch; run_notebooks_at_once writes one-arm plans)."""

    notebook: str = spec_field(str, doc="the notebook, relative to the current directory")
    run_id: str = spec_field(str, doc="its run id")
    parameters: dict | None = spec_field(Omittable(dict), doc="its parameters (default none)")
    extra: dict | None = spec_field(Omittable(dict), doc="contract_digest, input_digests, notes (default none)")
INJECTED_TAG = "injected-parameters"
ERROR_MARKER_TAG = "papermill-error-cell-tag"  # papermill's two markdown cells around an error
DEFAULT_KERNEL = "python3"  # jupyter_client maps the native kernel's `python` to this interpreter


class RunExists(ValueError):
    """The run id already names a completed run; evidence is never overwritten."""


def default_run_id(notebook: Path) -> str:
    return f"{notebook.stem}-{environment.utc_now().strftime('%Y%m%dT%H%M%S%fZ')}"


def _check_extra(extra: dict, source: str) -> None:
    unknown = set(extra) - EXTRA_KEYS
    if unknown:
        raise ValueError(f"{source}: unknown extra field(s) {sorted(unknown)}; allowed: {sorted(EXTRA_KEYS)}")
    contract = extra.get("contract_digest")
    if contract is not None and not run_record.SHA256_RE.fullmatch(str(contract)):
        raise ValueError(f"{source}: contract_digest {contract!r} is not a sha256 hex digest")
    if not isinstance(extra.get("input_digests", {}), dict):
        raise ValueError(f"{source}: extra 'input_digests' must be an object of name -> sha256")  # noqa: TRY004
    for name, digest in (extra.get("input_digests") or {}).items():
        if not run_record.SHA256_RE.fullmatch(str(digest)):
            raise ValueError(f"{source}: input digest {name!r} = {digest!r} is not a sha256 hex digest")
    if not isinstance(extra.get("notes", {}), dict):
        raise ValueError(f"{source}: extra 'notes' must be an object")  # noqa: TRY004
    try:
        canonical_json(extra)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{source}: not JSON ({e})") from None


@contextmanager
def _kernel_environment(run_dir: Path):
    """KIT_RUN_DIR and PYTHONPATH for the kernel papermill starts (it inherits os.environ)."""
    # KIT_PROGRESS=0: a bar drawn inside the kernel would be part of the executed notebook (the evidence)
    with temporary_environ({RUN_DIR_ENV: str(run_dir.resolve()), "PYTHONPATH": kernel_pythonpath(),
                            PROGRESS_ENV: "0"}):
        yield


def _source_cell_index(executed: Path, executed_index: int | None) -> tuple[int | None, int | None]:
    """Map a cell of the parameterised notebook to (index in the source notebook, execution count).

    With `executed_index` None (the kernel died), the failing cell is the last one that started.
    Papermill's injected cell has no source index (None)."""
    if not executed.exists():
        return None, None
    try:
        nb = loads_strict(executed.read_bytes(), str(executed))
    except ValueError:  # truncated (a full disk while papermill wrote it): no cell to name
        return None, None
    cells = [c for c in nb["cells"] if ERROR_MARKER_TAG not in c.get("metadata", {}).get("tags", [])]
    if executed_index is None:
        started = [i for i, c in enumerate(cells)
                   if c.get("cell_type") == "code" and (c.get("metadata", {}).get("papermill") or {}).get("start_time")]
        if not started:
            return None, None
        executed_index = started[-1]
    if not 0 <= executed_index < len(cells):
        return None, None
    count = cells[executed_index].get("execution_count")
    injected = [i for i, c in enumerate(cells) if INJECTED_TAG in c.get("metadata", {}).get("tags", [])]
    if injected and executed_index == injected[0]:
        return None, count
    shift = 1 if injected and executed_index > injected[0] else 0
    return executed_index - shift, count


@contextmanager
def _cell_bar(run_id: str, on: bool):
    """papermill's bar over cells, on stderr, described by the cell being executed ("RUN_ID cell 3:
    session = ...") instead of papermill's "Executing"; None (no bar) when off or the output is streamed."""
    if not on:
        yield False
        return
    from papermill.engines import NotebookExecutionManager  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    def describe(manager, cell, escape_str="papermill_description="):
        lines = [line for line in (cell.get("source") or "").splitlines() if line.strip()]
        first = (lines[0].strip()[:40] if lines else "")
        return f"{run_id} cell {manager.nb.cells.index(cell)}: {first}"

    original = NotebookExecutionManager.get_cell_description
    NotebookExecutionManager.get_cell_description = describe  # papermill asks it at each cell's start
    try:
        yield {"desc": run_id, "file": sys.stderr, "leave": False}
    finally:
        NotebookExecutionManager.get_cell_description = original


def _execute(notebook: Path, output: Path, params: dict, kernel_name: str, log_output: bool,
             run_id: str = "", bar: bool = False) -> tuple[str, RunError | None]:
    """Run papermill; returns (status, error) where error is None or the record's error object."""
    import papermill  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py); lazily: the rest of the kit never needs it
    from papermill.exceptions import PapermillExecutionError  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    try:
        with _cell_bar(run_id or notebook.stem, bar and not log_output) as bar_args:
            papermill.execute_notebook(str(notebook), str(output), parameters=params, kernel_name=kernel_name,
                                       progress_bar=bar_args, log_output=log_output,
                                       stdout_file=sys.stderr if log_output else None,
                                       stderr_file=sys.stderr if log_output else None)
        return "completed", None
    except PapermillExecutionError as e:
        status = STATUS_OF_EXCEPTION_NAME.get(e.ename, "failed")
        index, count = _source_cell_index(output, e.cell_index)
        return status, RunError(cell_index=index, execution_count=count if count is not None else e.exec_count,
                                ename=str(e.ename), evalue=str(e.evalue))
    except Exception as e:  # noqa: BLE001 - a dead kernel (DeadKernelError), a kernel that never started, a lost connection
        index, count = _source_cell_index(output, None)
        evalue = str(e)
        if disk_full(e):  # papermill could not write the executed notebook: say so, not what its truncation causes
            evalue = f"the disk is full: {e} (writing {getattr(e, 'filename', None) or output})"
        return "failed", RunError(cell_index=index, execution_count=count, ename=type(e).__name__, evalue=evalue)


def disk_full(e: BaseException | None) -> bool:
    """Whether `e` (or what it was raised from) is a full disk or an exhausted quota."""
    while e is not None:
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        e = e.__cause__ or e.__context__
    return False


def _readable_notebook(path: Path) -> bool:
    try:
        loads_strict(path.read_bytes(), str(path))
    except (OSError, ValueError):
        return False
    return True


def _write_prepared_notebook(notebook: Path, output: Path, params: dict, kernel_name: str) -> None:
    """When execution left no notebook (the kernel never started), keep the parameterised input."""
    import papermill  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    papermill.execute_notebook(str(notebook), str(output), parameters=params, kernel_name=kernel_name,
                               prepare_only=True, progress_bar=False)


def _collect_from_kernel(run_dir: Path, base: Path, extra: dict) -> tuple[CheckpointRoots, KernelInputs, dict]:
    """(checkpoint_roots, inputs, metrics) from what the notebook recorded and what the caller passed."""
    produced: list[CheckpointRoot] = []
    used: list[CheckpointRoot] = []
    roots_path = run_dir / KERNEL_ROOTS_NAME
    if roots_path.exists():
        kernel_roots = build(load_json_strict(roots_path), KernelRoots)  # what record_roots wrote
        for entries, recorded in ((produced, kernel_roots.produced), (used, kernel_roots.used)):
            for entry in recorded or ():
                home = entry.home and environment.relative_to_base(entry.home, base)
                root = CheckpointRoot(root=entry.root, home=home)
                if root not in entries:
                    entries.append(root)
        roots_path.unlink()
    inputs = build(extra, KernelInputs)  # the caller's (_check_extra), its notes left out
    inputs = KernelInputs(contract_digest=inputs.contract_digest, input_digests=dict(inputs.input_digests or {}))
    inputs_path = run_dir / KERNEL_INPUTS_NAME
    if inputs_path.exists():
        kernel_inputs = build(load_json_strict(inputs_path), KernelInputs)
        inputs_path.unlink()
        inputs = merged_inputs(inputs, kernel_inputs, str(run_dir / run_record.RUN_RECORD_NAME))
    metrics_dir = run_dir / run_record.METRICS_DIR_NAME
    metrics = {p.stem: sha256_file(p) for p in sorted(metrics_dir.glob("*.json"))} if metrics_dir.is_dir() else {}
    return CheckpointRoots(produced=tuple(produced), used=tuple(used)), inputs, metrics


def _collect_chain(run_dir: Path) -> dict:
    """The materials and ledger events the kernel recorded (kit.evidence.notebook.record_materials), and the
    manifest of every file the run folder now holds (kit.evidence.manifest): run.json's chain fields, as the
    keyword arguments of RunRecord."""
    path = run_dir / KERNEL_CHAIN_NAME
    chain = KernelChain.from_json(load_json_strict(path), str(path)) if path.exists() else KernelChain()
    path.unlink(missing_ok=True)
    manifest = {rel: ManifestEntry.from_json(entry, str(run_dir), rel) for rel, entry in file_manifest(run_dir).items()}
    return {"materials": chain.materials, "ledger_events": chain.ledger_events, "manifest": manifest}


def _numeric_profile(device: dict) -> NumericProfile:
    """The kernel's numeric profile and, on a GPU host, the mode its numbers depend on (docs/engine.md,
    "Determinism")."""
    profile = declared_profile()
    gpu_mode = environment.gpu_numeric_mode(device.get("gpus") or [])
    return NumericProfile(name=profile.name, environment=profile.environment, gpu=gpu_mode)


def _prepare_run_dir(run_dir: Path) -> None:
    if (run_dir / run_record.RUN_RECORD_NAME).exists():
        try:
            previous = run_record.read_run_record(run_dir)
        except ValueError:
            previous = None
        if previous is not None and previous.status == "completed":
            raise RunExists(f"{run_dir}: run {previous.run_id!r} already completed; choose another --run-id "
                            f"or remove the directory to run it again")
    if run_dir.exists() and any(run_dir.iterdir()):
        # an unfinished or failed attempt: kept whole beside the new run (its record is evidence of what
        # ran), so that its leftovers do not mix with this run and nothing of it is lost
        kept = run_record.superseded_attempt_dir(run_dir)
        kept.parent.mkdir(parents=True, exist_ok=True)
        run_dir.rename(kept)
    elif run_dir.exists():
        run_dir.rmdir()
    run_dir.mkdir(parents=True)


def run_notebook(notebook: Path, params: dict, run_id: str | None, runs_dir: Path, extra: dict | None = None,
                 *, kernel_name: str = DEFAULT_KERNEL, log_output: bool = False) -> RunRecord:
    """Execute `notebook` with `params` into runs_dir/<run_id>/ and write its run.json; returns the record.

    Bad parameters, extra fields or run ids raise ValueError before anything is created. `extra`
    may hold "contract_digest", "input_digests" ({name: sha256}) and "notes" (free-form object).
    """
    notebook, runs_dir, extra = Path(notebook), Path(runs_dir), dict(extra or {})
    if not notebook.is_file():
        raise FileNotFoundError(f"{notebook}: notebook not found")
    check_parameters(notebook, params)
    _check_extra(extra, f"{notebook}: extra")
    run_id = run_id or default_run_id(notebook)
    if not run_record.RUN_ID_RE.fullmatch(run_id):
        raise ValueError(f"run id {run_id!r} must match {run_record.RUN_ID_RE.pattern}")
    ensure_runtime()
    with run_id_lock(runs_dir, run_id):
        return _run_locked(notebook, params, run_id, runs_dir, extra, kernel_name, log_output)


DISK_RESERVE_NAME = ".disk-reserve"  # freed after the notebook ran, so that a full disk still takes the record
DISK_RESERVE_BYTES = 256 * 1024


class RunIdInUse(ValueError):
    """Another `kit run` (or batch arm) with the same run id is running now."""


@contextmanager
def run_id_lock(runs_dir: Path, run_id: str):
    """Hold run id `run_id` of `runs_dir` exclusively while the body runs: RUNS/.<run_id>.run-lock under an
    exclusive `flock`, taken without waiting (the kernel releases it when the process ends, even by kill -9).
    A second run with the same id is refused before it touches the first's folder. The file stays."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    lock = runs_dir / f".{run_id}.run-lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunIdInUse(f"{lock}: run id {run_id!r} is being run by another process now; wait for it to "
                             "end or choose another --run-id") from None
        yield
    finally:
        os.close(fd)


def _run_locked(notebook: Path, params: dict, run_id: str, runs_dir: Path, extra: dict, kernel_name: str,
                log_output: bool) -> RunRecord:
    run_dir = runs_dir / run_id
    _prepare_run_dir(run_dir)
    reserve = run_dir / DISK_RESERVE_NAME
    try:  # random: a compressing filesystem keeps it whole
        reserve.write_bytes(os.urandom(DISK_RESERVE_BYTES))
    except OSError as e:
        reserve.unlink(missing_ok=True)
        run_dir.rmdir()
        raise OSError(e.errno, f"{run_dir}: cannot start the run: {e.strerror}"
                      + (" (the disk is full)" if disk_full(e) else "")) from None
    base = environment.evidence_base(runs_dir)
    notebook_sha = sha256_file(notebook)
    git, versions, device = environment.git_state(notebook.resolve().parent), environment.versions(), environment.device_info()
    output = run_dir / notebook.name
    started = environment.utc_now()
    interrupted = None
    bar = progress_on()  # read here: inside _kernel_environment KIT_PROGRESS is 0 (the kernel's)
    # warnings: run_dir/kernel.log; the kernel computes under the numeric profile from its start
    with _kernel_environment(run_dir), quiet_kernels(run_dir / KERNEL_LOG_NAME), profiled_kernels():
        try:
            status, error = _execute(notebook, output, params, kernel_name, log_output, run_id, bar)
        except KeyboardInterrupt as e:  # record the arm as aborted by the operator (or SIGTERM), then stop
            name, _ = interruption(e)
            interrupted = Interrupted(getattr(e, "signum", signal.SIGINT), f"run {run_id} recorded as aborted in "
                                      f"{run_dir / run_record.RUN_RECORD_NAME}; run the same command again to "
                                      "redo it (the aborted attempt is kept beside it)")
            status, error = "aborted", RunError(cell_index=None, execution_count=None, ename="KeyboardInterrupt",
                                                evalue=f"interrupted by the operator ({name})")
    ended = environment.utc_now()
    reserve.unlink(missing_ok=True)  # first: on a full disk its room is what the notebook and record are written into
    if output.exists() and error is not None and not _readable_notebook(output):
        output.unlink()  # truncated by a full disk: the parameterised notebook takes its place below
        assert error is not None, "a run that did not complete has its error"
        error = RunError(cell_index=error.cell_index, execution_count=error.execution_count, ename=error.ename,
                         evalue=f"{error.evalue}; {output.name} was left truncated and is replaced by the "
                         "parameterised notebook")
    if not output.exists():
        try:
            _write_prepared_notebook(notebook, output, params, kernel_name)
        except Exception as e:  # noqa: BLE001 - the record below still says what happened; it must be written
            print(f"{output}: could not write the parameterised notebook either: {e}", file=sys.stderr)
    try:
        roots, inputs, metrics = _collect_from_kernel(run_dir, base, extra)
    except (RunRecordError, ValueError) as e:
        roots, inputs, metrics = CheckpointRoots(produced=(), used=()), KernelInputs(contract_digest=None,
                                                                                    input_digests={}), {}
        status, error = "failed", RunError(cell_index=None, execution_count=None, ename="EvidenceConflict",
                                           evalue=str(e))
    reason = None
    if error is not None and status in ("unavailable", "aborted"):
        reason = error.evalue
    elif error is not None and status == "failed":
        reason = f"{error.ename}: {error.evalue}".splitlines()[0] if error.evalue else error.ename
    record = RunRecord(
        run_id=run_id, notebook=environment.relative_to_base(notebook, base), notebook_sha256=notebook_sha,
        executed_notebook=output.name, executed_notebook_sha256=sha256_file(output) if output.exists() else None,
        parameters=dict(params), status=status, reason=reason, error=error,
        started_at=environment.iso_utc(started), ended_at=environment.iso_utc(ended),
        duration_s=round((ended - started) / _dt.timedelta(seconds=1), 3),
        git=GitState.from_json(git, "the notebook's git state"), versions=versions, device=device,
        contract_digest=inputs.contract_digest, input_digests=inputs.input_digests,
        checkpoint_roots=roots, metrics=metrics, notes=dict(extra.get("notes") or {}),
        numeric_profile=_numeric_profile(device), **_collect_chain(run_dir),
    )
    try:
        run_record.write_run_record(run_dir, record)
    except OSError as e:  # no executed notebook stays without the record that describes it
        output.unlink(missing_ok=True)
        raise OSError(e.errno, f"{run_dir / run_record.RUN_RECORD_NAME}: the run's record could not be written: "
                      f"{e.strerror}" + (" (the disk is full)" if disk_full(e) else "")
                      + f"; removed {output}, which no record would describe (run {run_id} {status})") from None
    if interrupted is not None:
        raise interrupted
    return record


# --- batches --------------------------------------------------------------------------------
def load_plan(path: str | os.PathLike) -> list[PlanArm]:
    """Read and check a batch plan; every arm's notebook and parameters are checked here, up front."""
    path = Path(path)
    if path.suffix in (".yaml", ".yml"):
        try:
            import yaml  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)
        except ImportError:
            raise ValueError(f"{path}: a YAML plan needs PyYAML, which is not importable; use JSON") from None
        try:
            plan = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as e:
            raise ValueError(f"{path}: invalid YAML ({e})") from None
    else:
        plan = load_json_strict(path)
    if not isinstance(plan, list) or not plan:
        raise ValueError(f"{path}: a plan is a non-empty list of {{'notebook', 'run_id', 'parameters'}} objects")
    seen: set[str] = set()
    arms = []
    for i, raw in enumerate(plan):
        where = f"{path}: arm {i}"
        if not isinstance(raw, dict) or not {"notebook", "run_id"} <= set(raw) or set(raw) - PLAN_KEYS:
            raise ValueError(f"{where}: expected keys notebook, run_id and optionally parameters, extra; "
                             f"got {sorted(raw) if isinstance(raw, dict) else type(raw).__name__}")
        arm = build(raw, PlanArm)
        if not isinstance(arm.run_id, str) or not run_record.RUN_ID_RE.fullmatch(arm.run_id):
            raise ValueError(f"{where}: run_id {arm.run_id!r} must match {run_record.RUN_ID_RE.pattern}")
        if arm.run_id in seen:
            raise ValueError(f"{where}: run_id {arm.run_id!r} appears twice in the plan")
        seen.add(arm.run_id)
        if not isinstance(raw.get("parameters", {}), dict) or not isinstance(raw.get("extra", {}), dict):
            raise ValueError(f"{where}: 'parameters' and 'extra' must be objects")  # noqa: TRY004
        notebook = Path(arm.notebook)
        if not notebook.is_file():
            raise FileNotFoundError(f"{where}: notebook {notebook} not found (paths are relative to {Path.cwd()})")
        check_parameters(notebook, arm.parameters or {})
        _check_extra(arm.extra or {}, f"{where}: extra")
        arms.append(arm)
    return arms


def completed_before(run_dir: Path) -> bool:
    try:
        return run_record.read_run_record(run_dir).status == "completed"
    except (FileNotFoundError, ValueError):
        return False


def run_batch(plan_path: str | os.PathLike, runs_dir: Path, *, kernel_name: str = DEFAULT_KERNEL,
              log_output: bool = False, echo=print) -> list[tuple[str, str]]:
    """Run every arm of a plan in order; returns [(run_id, status or "skipped")]. Never stops early."""
    ensure_runtime()  # before reading anything: a host without the runtime fails at once
    plan = load_plan(plan_path)
    outcome: list[tuple[str, str]] = []
    for i, arm in enumerate(plan, 1):
        run_id = arm.run_id
        if completed_before(Path(runs_dir) / run_id):
            echo(f"[{i}/{len(plan)}] {run_id}: skipped (completed before)")
            outcome.append((run_id, "skipped"))
            continue
        echo(f"[{i}/{len(plan)}] {run_id}: running {arm.notebook}")
        record = run_notebook(Path(arm.notebook), arm.parameters or {}, run_id, Path(runs_dir),
                              arm.extra or {}, kernel_name=kernel_name, log_output=log_output)
        echo(f"[{i}/{len(plan)}] {run_id}: {record.status}" + (f" ({record.reason})" if record.reason else "")
             + f" in {record.duration_s:.1f} s")
        outcome.append((run_id, record.status))
    return outcome


def _record_bytes(run_dir: Path) -> bytes | None:
    path = run_dir / run_record.RUN_RECORD_NAME
    return path.read_bytes() if path.is_file() else None


def run_notebooks_at_once(arms: list[PlanArm], runs_dir: Path, work: Path) -> list[RunRecord]:
    """Run independent arms at the same time, each as its own
    `python -m kit batch` process of a one-arm plan, and return their run records in the order given.

    Processes, not threads: run_notebook sets the kernel's environment in os.environ, which threads would
    share. Each process inherits this one's environment (the ledger, KIT_PROGRESS) and working directory,
    so its record is the one run_notebook here would write. Its plan and console go to
    work/<run_id>.plan.json and work/<run_id>.log. A process that ends without a run record of its own (it
    crashed or was refused before writing one; an earlier attempt's record left in place does not count)
    raises RuntimeError naming its log, once every process has ended."""
    work, runs_dir = Path(work), Path(runs_dir)
    work.mkdir(parents=True, exist_ok=True)
    # an earlier unfinished or failed attempt's record may still lie where this attempt's goes (the child
    # moves it aside only once it starts the run): its bytes, so that it is never taken for this attempt's
    earlier = {arm.run_id: _record_bytes(runs_dir / arm.run_id) for arm in arms}
    started = []
    for arm in arms:
        plan = work / f"{arm.run_id}.plan.json"
        plan.write_bytes(canonical_json([arm.to_json()]))
        log = (work / f"{arm.run_id}.log").open("wb")
        # --no-progress: its console is a log file, where a bar's frames are only noise
        cmd = [sys.executable, "-m", "kit", "batch", str(plan), "--runs-dir", str(runs_dir), "--no-progress"]
        started.append((arm, log, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)))
    missing = []
    for arm, log, process in started:
        process.wait()
        log.close()
        written = _record_bytes(runs_dir / arm.run_id)
        if written is None or written == earlier[arm.run_id]:
            missing.append(f"{arm.run_id} (exit {process.returncode}, log {log.name})")
    if missing:
        raise RuntimeError(f"{runs_dir}: no run record from {', '.join(missing)}")
    return [run_record.read_run_record(runs_dir / arm.run_id) for arm, _, _ in started]


def batch_exit_status(outcome: list[tuple[str, Any]]) -> int:
    """1 when any arm failed; unavailable and aborted arms are outcomes the notebook chose, not failures."""
    return 1 if any(status == "failed" for _, status in outcome) else 0
