"""The local launcher (`--workers N`): N worker processes on one host, set up as torchrun would.

Each worker runs `python -m kit.distributed.launch ENTRY ARGS_JSON` with RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT set, calls `ENTRY(group, args, worker)` (ENTRY = "module:function") and writes its
JSON result to `run_dir/result-<rank>.json`. Workers report progress (the step they are on) to
`run_dir/status-<rank>.json`, so when one dies or raises, the launcher ends the whole run with one
line naming the rank, the step and the error (`WorkerFailure`; the traceback stays in the worker's log),
stops the others within a bounded grace period and never waits forever. A worker never outlives its
driver: the kernel kills it when the driver dies (`PR_SET_PDEATHSIG`), and every step checks its parent.
"""

from __future__ import annotations

import ctypes
import errno
import importlib
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from kit import numerics
from kit.digest import load_json_strict, write_canonical_json
from kit.environ import progress_on
from kit.record import Omittable, OneOf, Opt, Record, spec_field

# Errors a healthy rank raises when a peer vanished; used to name the root cause, not a victim.
PEER_ERROR_MARKERS = ("Connection closed", "Connection reset", "connection", "Broken pipe", "peer",
                      "Timed out", "timed out", "timeout", "NCCL")


DRIVER_PID_ENV = "KIT_DRIVER_PID"  # the launcher's pid: a worker whose parent is another process stops
DISK_RESERVE_ENV = "KIT_DISK_RESERVE"  # a file a worker removes on ENOSPC so that its status can be written
PAUSE_ENV = "KIT_FAULT_PAUSE"  # "POINT:FIFO": rank 0 blocks reading FIFO at a step or phase (fault tests)
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# a raised error of one of these classes is a runtime failure (exit 1), not a refusal of the input (exit 2)
RUNTIME_ERRORS = ("HeadMoved", "DriverGone")


@dataclass(frozen=True, slots=True, kw_only=True)
class Shown(Record):
    """What the training bar shows (rank 0's `ctx.progress(done=, total=, loss=, ce=, tokens_per_s=)`); each
    field only once the worker reported it."""

    done: int | None = spec_field(Omittable(int), doc="updates finished in this launch")
    total: int | None = spec_field(Omittable(int), doc="updates to run in this launch")
    loss: float | None = spec_field(Omittable(Opt(float)), doc="the last update's objective")
    ce: float | None = spec_field(Omittable(Opt(float)), doc="its cross-entropy per new token, where reported")
    tokens_per_s: float | None = spec_field(Omittable(Opt(float)), doc="its target tokens per second")


NOTHING_SHOWN = Shown()


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerStatus(Record):
    """`status-<rank>.json`: where a worker is, rewritten atomically as it progresses; after a failure, the
    error with its time, kind and traceback (and no `shown`)."""

    rank: int = spec_field(int, doc="the worker's rank")
    step: int | None = spec_field(Opt(int), doc="the step it is on, null before the first")
    phase: str = spec_field(str, doc="what it is doing: start, join, load, update, commit, done, ...")
    error: str | None = spec_field(Opt(str), doc="null, or the error it failed with (type: message)")
    shown: Shown | None = spec_field(Omittable(Opt(Shown)), doc="null or what the training bar shows")
    time: float | None = spec_field(Omittable(float), doc="after a failure: when (Unix seconds)")
    kind: str | None = spec_field(Omittable(OneOf("refusal", "runtime")), doc="after a failure: `error_kind`")
    traceback: str | None = spec_field(Omittable(str), doc="after a failure: the traceback's last 4,000 characters")


@dataclass(frozen=True, slots=True)
class WorkerReport:
    """One rank's outcome, as the launcher saw it: its exit code and its last status."""

    rank: int
    code: int | None  # None: still running when the launcher gave up on it
    step: int | None
    phase: str | None
    error: str | None
    time: float | None
    kind: str | None


class WorkerFailure(RuntimeError):
    """A worker failed; the message is one line naming the rank, step, phase and error. `exit_code` is 2
    when the root cause was a refusal of the kit (a ValueError: bad shapes, a corrupt object, admission),
    1 for a runtime failure (a crash, an OSError, a moved HEAD, a timeout)."""

    def __init__(self, message: str, rank: int, step, reports: list[WorkerReport], exit_code: int = 1):
        super().__init__(message)
        self.rank, self.step, self.reports, self.exit_code = rank, step, reports, exit_code


class DriverGone(RuntimeError):
    """This worker's driver died; the worker stops (its parent is no longer the launcher)."""


def error_kind(e: BaseException) -> str:
    """"refusal" for the kit's refusals (ValueError subclasses), "runtime" for everything else and for a
    refusal caused by a runtime failure (a moved HEAD or an OSError, wrapped by the commit's thread)."""
    if not isinstance(e, ValueError):
        return "runtime"
    seen = 0
    cause: BaseException | None = e
    while cause is not None and seen < 16:
        if isinstance(cause, OSError) or {c.__name__ for c in type(cause).__mro__} & set(RUNTIME_ERRORS) \
                or any(f"{name}:" in str(cause) for name in RUNTIME_ERRORS) or "[Errno " in str(cause):
            return "runtime"
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    return "refusal"


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this worker when its driver dies, then check the driver did not die before
    (a worker must never train on alone: its commits would race the next attempt's). Linux only; elsewhere
    the per-step check in `WorkerContext.progress` still stops it."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    check_parent()


def check_parent() -> None:
    driver = os.environ.get(DRIVER_PID_ENV)
    if driver and os.getppid() != int(driver):
        raise DriverGone(f"the driver (pid {driver}) is gone; this worker's parent is now pid {os.getppid()}")


@dataclass
class WorkerContext:
    rank: int
    world: int
    run_dir: Path
    step: int | None = None
    phase: str = "start"
    shown: dict | None = None  # what the launcher's bar shows: done, total, loss, tokens_per_s (rank 0)

    def progress(self, step: int | None = None, phase: str | None = None, **shown) -> None:
        check_parent()
        if step is not None:
            self.step = step
            _pause_if_asked(self.rank, str(step))
        if phase is not None:
            self.phase = phase
            _pause_if_asked(self.rank, phase)
        if shown:
            self.shown = {**(self.shown or {}), **shown}
        write_canonical_json(self.run_dir / f"status-{self.rank}.json",
                             {"rank": self.rank, "step": self.step, "phase": self.phase, "error": None,
                              "shown": self.shown})


def _pause_if_asked(rank: int, point: str) -> None:
    """The fault tests' hook (KIT_FAULT_PAUSE=POINT:FIFO, POINT a step or a phase such as "done"): rank 0
    blocks there until the test has opened FIFO for writing and closed it, so that a test kills or fills a
    disk at a known point without sleeping."""
    spec = os.environ.get(PAUSE_ENV)
    if rank == 0 and spec and spec.split(":", 1)[0] == point:
        with open(spec.split(":", 1)[1], "rb") as f:
            f.read()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _progress_bar(total: int | None, desc: str):
    """A tqdm bar over rank 0's reported step; off when KIT_PROGRESS=0 or no total is known."""
    if not total or not progress_on():
        return None

    return tqdm(total=total, desc=desc, unit="update", file=sys.stderr, dynamic_ncols=True)


def _advance(bar, run_dir: Path, first_step: int) -> None:
    """Move the bar to rank 0's last report: its finished updates of this run with the last update's loss
    and tokens/s when the worker shows them (`ctx.progress(done=, total=, loss=, tokens_per_s=)`), else
    the step it is on. tqdm adds the rate and the ETA."""
    path = run_dir / "status-0.json"
    try:
        status = WorkerStatus.from_json(load_json_strict(path), str(path))
    except (FileNotFoundError, ValueError):  # not written yet, or not as declared: the bar stays
        return
    shown = status.shown or NOTHING_SHOWN
    done = shown.done if shown.done is not None else status.step
    if done is not None and shown.done is None:
        done -= first_step
    if shown.total is not None and shown.total != bar.total:
        # the worker's count is this launch's (a resumed run: the updates left), which replaces the
        # driver's guess and the step count shown before the first update ended
        bar.reset(total=shown.total)
    if done is not None and done > bar.n:
        if shown.loss is not None:
            bar.set_postfix_str(postfix(shown), refresh=False)
        bar.update(done - bar.n)


def postfix(shown: Shown) -> str:
    """The bar's numbers: cross-entropy per new token (`ce`, where the worker reports it) with the update's
    objective beside it (its mean over every target, replay and KL included), and target tokens/s."""
    rate = f"{shown.tokens_per_s or 0:,.0f} tokens/s"
    if shown.ce is not None:
        beside = "the objective" if shown.ce == shown.loss else f"objective {shown.loss:.4f}"
        return f"ce/token {shown.ce:.4f} ({beside}), {rate}"
    return f"objective {shown.loss:.4f}, {rate}"


def entry_name(entry) -> str:
    """A worker entry as "module:function": a kit driver passes the function itself (an import the
    layer test sees); tests may name a test-support module's function as a string."""
    if isinstance(entry, str):
        return entry
    return f"{entry.__module__}:{entry.__qualname__}"


def launch(entry, args: dict, workers: int, run_dir: str | os.PathLike, timeout_s: float = 900.0,
           grace_s: float = 30.0, env: dict | None = None, threads: int = 1,
           progress_total: int | None = None, progress_first_step: int = 0, desc: str = "training") -> list[dict]:
    """Run `entry` on `workers` local processes; return each rank's result (rank order).

    With `progress_total`, a progress bar follows the step rank 0 reports (steps counted from
    `progress_first_step`)."""
    if workers < 1:
        raise ValueError(f"--workers {workers}; expected at least 1")
    entry = entry_name(entry)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    for stale in list(run_dir.glob("status-*.json")) + list(run_dir.glob("result-*.json")):
        stale.unlink()
    args_path = run_dir / "launch-args.json"
    write_canonical_json(args_path, args)
    port = free_port()
    procs = []
    for rank in range(workers):
        penv = dict(os.environ)
        penv.update(env or {})
        penv.update(RANK=str(rank), WORLD_SIZE=str(workers), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(workers),
                    MASTER_ADDR="127.0.0.1", **{DRIVER_PID_ENV: str(os.getpid())},
                    MASTER_PORT=str(port), KIT_RUN_DIR=str(run_dir), KIT_THREADS=str(threads),
                    OMP_NUM_THREADS=str(threads))
        log = open(run_dir / f"worker-{rank}.log", "wb")  # noqa: SIM115 (open while the worker runs; closed below)
        procs.append((subprocess.Popen([sys.executable, "-m", "kit.distributed.launch", entry, str(args_path)],
                                       env=penv, stdout=log, stderr=subprocess.STDOUT), log))
    deadline = time.monotonic() + timeout_s
    failed_at = None
    bar = _progress_bar(progress_total, desc)
    try:
        while True:
            if bar is not None:
                _advance(bar, run_dir, progress_first_step)
            codes = [p.poll() for p, _ in procs]
            if all(c == 0 for c in codes):
                break
            if failed_at is None and any(c not in (None, 0) for c in codes):
                failed_at = time.monotonic()
            if failed_at is not None and (all(c is not None for c in codes) or time.monotonic() > failed_at + grace_s):
                break
            if time.monotonic() > deadline:
                break
            try:
                procs[next(i for i, c in enumerate(codes) if c is None)][0].wait(timeout=0.05)
            except (subprocess.TimeoutExpired, StopIteration):
                pass
    finally:
        if bar is not None:
            bar.close()
        for p, log in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            log.close()
    codes = [p.returncode for p, _ in procs]
    reports = [_report(run_dir, r, codes[r]) for r in range(workers)]
    if all(c == 0 for c in codes):
        return [load_json_strict(run_dir / f"result-{r}.json") for r in range(workers)]
    cause = _root_cause(reports)
    if failed_at is None:
        msg = f"run timed out after {timeout_s:.0f}s: worker rank {cause.rank} at step {cause.step} did not finish"
    else:
        how = cause.error or f"exited with code {cause.code}"
        msg = f"worker rank {cause.rank} failed at step {cause.step} ({cause.phase}): {how}"
    others = [f"rank {r.rank}: {_first_line(r.error or 'code ' + str(r.code))}" for r in reports
              if r.rank != cause.rank and r.code != 0]
    if others:
        msg += "; then " + "; ".join(others)
    code = 2 if failed_at is not None and cause.kind == "refusal" else 1
    raise WorkerFailure(" ".join(msg.split()) + f" (tracebacks in {run_dir}/worker-<rank>.log)", cause.rank,
                        cause.step, reports, code)


def _first_line(text: str) -> str:
    return text.splitlines()[0] if text else text


def _report(run_dir: Path, rank: int, code: int | None) -> WorkerReport:
    """The rank's exit code and last status (a worker killed before it wrote one: at the start)."""
    path = run_dir / f"status-{rank}.json"
    status = WorkerStatus(rank=rank, step=None, phase="start", error=None)
    if path.exists():
        try:
            status = WorkerStatus.from_json(load_json_strict(path), str(path))
        except ValueError as e:  # the failure is still reported, with why its status says nothing
            status = WorkerStatus(rank=rank, step=None, phase="unknown", error=f"{type(e).__name__}: {e}")
    error = status.error
    if code is not None and code < 0 and not error:
        error = f"killed by signal {-code}"
    return WorkerReport(rank, code, status.step, status.phase, error, status.time, status.kind)


def _root_cause(reports: list[WorkerReport]) -> WorkerReport:
    bad = [r for r in reports if r.code != 0]
    primary = [r for r in bad if not (r.error and any(m in r.error for m in PEER_ERROR_MARKERS))
               or (r.error or "").startswith("killed")]
    pool = primary or bad
    return min(pool, key=lambda r: (r.time or float("inf"), r.rank))


def _worker_main(entry: str, args_path: str) -> int:
    # first, before this worker imports torch: its roots must not depend on the CPU (kit/numerics.py)
    numerics.apply(threads=int(os.environ.get("KIT_THREADS", "1")))
    from kit.distributed.group import join, leave  # noqa: PLC0415 - torch loads after numerics.apply() above

    run_dir = Path(os.environ["KIT_RUN_DIR"])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    ctx = WorkerContext(rank, world, run_dir)
    try:
        die_with_parent()
        ctx.progress(phase="join")
        args = load_json_strict(args_path)
        group = join(device=args.get("device"), timeout_s=float(args.get("timeout_s", 120)))
        module, _, func = entry.partition(":")
        result = getattr(importlib.import_module(module), func)(group, args, ctx)
        write_canonical_json(run_dir / f"result-{rank}.json", result if result is not None else {})
        ctx.progress(phase="done")
        leave()
        return 0
    except BaseException as e:  # noqa: BLE001 - every failure must leave a status naming rank and step
        # rank 0's commit reports a full disk as text (kit/engine/session.py), other ranks as the OSError
        no_space = getattr(e, "errno", None) == errno.ENOSPC or f"[Errno {errno.ENOSPC}]" in str(e)
        if no_space and os.environ.get(DISK_RESERVE_ENV):
            Path(os.environ[DISK_RESERVE_ENV]).unlink(missing_ok=True)  # room for this status and the record
        write_canonical_json(run_dir / f"status-{rank}.json", {
            "rank": rank, "step": ctx.step, "phase": ctx.phase, "time": time.time(), "kind": error_kind(e),
            "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-4000:]})
        sys.stderr.write(traceback.format_exc())
        return 1


if __name__ == "__main__":
    raise SystemExit(_worker_main(sys.argv[1], sys.argv[2]))
