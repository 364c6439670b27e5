"""Issue 9, cases 2, 7, 8 and 9: faults on one rank of a real two-process run (gloo, CPU).

Every run here is `kit.distributed.launch.launch` starting real worker processes of
`support.reliability:faulty_session_worker`, i.e. `engine_workers.session_worker` with one fault
injected on one rank (tests/test_worker_faults.py covers the same for `engine_workers.train_worker`
at an update; these add the session's phases, commits and resumes).

Case 2. An exception on a chosen rank in each phase: preparing a migration (a failed read while
fetching), an update, a commit (the store refusing it on rank 0). The run ends with one error naming
the failing rank (and the step and phase), every worker process has ended, within a bound counted
from the moment the fault fired, and HEAD has not moved.

Cases 7 and 8. A worker SIGKILLed at update k of a run that committed at update k-1: the others stop
with an error within the bound, HEAD stays on the step k-1 commit (the same commit the uninterrupted
run made), and a resume from HEAD in a new process group ends with the learned-state root (and full
root) of the uninterrupted run. Negative control: a resume with two updates' data swapped ends
elsewhere (run in this process with one worker, next to the same resume in the original order).

Case 9. A worker hanging just before the commit's first collective: the peer's collective times out
after the group timeout, the launcher stops the hung worker after its grace period, and the error
names the hung rank and step; nothing waits forever.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import torch
from support.engine import OPT, make_batches
from support.engine_workers import session_worker
from support.reliability import worker_env, write_seed

from kit.distributed.group import Group
from kit.distributed.launch import WorkerFailure, launch
from kit.model.shard import even_layout
from kit.store.commits import read_commit, read_head, verify_commit

LAYERS, WORKERS = 2, 2
# Each worker's group timeout: every collective and receive is bounded by it. Long enough that two
# workers starting a few seconds apart on a loaded host do not time out; a dead peer is noticed at once
# (its sockets close), so only the hang test waits for it, with its own shorter timeout.
TIMEOUT_S = 10.0
HANG_TIMEOUT_S = 5.0
GRACE_S = 3.0  # the launcher's grace period before it stops the workers still running
SLACK_S = 10.0  # process exits and file writes on a loaded CI host


def bound(timeout_s: float) -> float:
    """From the fault to the launcher's error: the peer notices within the group timeout, the launcher
    waits at most GRACE_S for the others, then SIGTERM (5 s before SIGKILL); plus slack."""
    return timeout_s + GRACE_S + 5.0 + SLACK_S

ENTRY = "support.reliability:faulty_session_worker"


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    return write_seed(tmp_path_factory.mktemp("rank-faults") / "seed", layers=LAYERS)


def _args(seed: Path, home: Path, until: int, start=None, commit_at=(), batches=None, fault=None,
          source_home=None, timeout_s: float = TIMEOUT_S) -> dict:
    return {"home": str(home), "layout": even_layout(LAYERS, WORKERS).to_json(),
            "start": start or {"seed_dir": str(seed)}, "source_home": source_home and str(source_home),
            "reference": {"seed_dir": str(seed)}, "engine": {"microbatch_size": 2, "max_grad_norm": 0.5},
            "optimizer": {"default": OPT}, "batches": batches or make_batches(3, seed=7), "until": until,
            "commit_at": list(commit_at), "timeout_s": timeout_s, "fault": fault}


def _launch(run_dir: Path, args: dict) -> list[dict]:
    return launch(ENTRY, args, WORKERS, run_dir, timeout_s=300, grace_s=GRACE_S, env=worker_env())


def _failing_launch(run_dir: Path, args: dict) -> tuple[WorkerFailure, float]:
    """Run a faulty launch; returns its error and the seconds from the fault firing to the error."""
    with pytest.raises(WorkerFailure) as info:
        _launch(run_dir, args)
    ended = time.time()
    fired = json.loads((run_dir / "fault-at.json").read_text())
    assert fired["rank"] == args["fault"]["rank"]
    assert all(r.code is not None and r.code != 0 for r in info.value.reports), info.value.reports
    assert not list(run_dir.glob("result-*.json"))  # no rank finished as if nothing happened
    print(f"{run_dir.name}: {ended - fired['time']:.1f} s from the fault to the error: {info.value}")  # -s shows it
    return info.value, ended - fired["time"]


def _statuses(run_dir: Path) -> dict[int, dict]:
    return {r: json.loads((run_dir / f"status-{r}.json").read_text()) for r in range(WORKERS)
            if (run_dir / f"status-{r}.json").exists()}


@pytest.fixture(scope="module")
def uninterrupted(seed, tmp_path_factory):
    """The fault-free run: updates 1..3, committing after update 1 and at the end."""
    base = tmp_path_factory.mktemp("uninterrupted")
    out = _launch(base / "run", _args(seed, base / "home", until=3, commit_at=[1]))
    first, last = out[0]["commits"]
    assert (first["step"], last["step"]) == (1, 3)
    return {"home": base / "home", "first": first, "last": last}


def _copy_home(uninterrupted, tmp_path: Path) -> Path:
    """A store holding the uninterrupted run's step-1 commit as HEAD (its later commit removed)."""
    home = tmp_path / "home"
    shutil.copytree(uninterrupted["home"], home)
    (home / "HEAD").write_text(uninterrupted["first"]["full_root"] + "\n")
    return home


# -- case 2 ------------------------------------------------------------------------------------------------


def test_exception_while_preparing_a_migration(seed, uninterrupted, tmp_path):
    root = uninterrupted["first"]["full_root"]
    args = _args(seed, tmp_path / "new-home", until=1, start={"root": root}, source_home=uninterrupted["home"],
                 fault={"rank": 1, "phase": "migrate"})
    error, seconds = _failing_launch(tmp_path / "run", args)
    assert seconds < bound(TIMEOUT_S)
    assert "(migrate)" in str(error) and "rank 1: OSError: injected read failure" in str(error)
    statuses = _statuses(tmp_path / "run")
    assert sorted(statuses) == [0, 1]
    for status in statuses.values():  # every rank ends with the one error, naming rank 1
        assert status["phase"] == "migrate"
        assert status["error"].startswith("MigrationError: migration preparation incomplete, HEAD unchanged: "
                                          "rank 1: OSError: injected read failure")
    assert read_head(tmp_path / "new-home") is None


def test_exception_in_an_update(seed, uninterrupted, tmp_path):
    home = _copy_home(uninterrupted, tmp_path)
    root = uninterrupted["first"]["full_root"]
    args = _args(seed, home, until=3, start={"root": root}, fault={"rank": 1, "phase": "update", "step": 2})
    error, seconds = _failing_launch(tmp_path / "run", args)
    assert seconds < bound(TIMEOUT_S)
    assert (error.rank, error.step) == (1, 2)
    assert str(error).startswith("worker rank 1 failed at step 2 (update): RuntimeError: injected failure in "
                                 "update 2 on rank 1")
    assert read_head(home) == root


def test_exception_in_a_commit(seed, uninterrupted, tmp_path):
    home = _copy_home(uninterrupted, tmp_path)
    root = uninterrupted["first"]["full_root"]
    args = _args(seed, home, until=2, start={"root": root}, fault={"rank": 0, "phase": "commit", "step": 2})
    error, seconds = _failing_launch(tmp_path / "run", args)
    assert seconds < bound(TIMEOUT_S)
    assert error.step == 2 and "(commit)" in str(error)
    statuses = _statuses(tmp_path / "run")
    for status in statuses.values():  # rank 0's refusal reaches every rank as the same error
        assert status["error"] == ("CommitError: rank 0 could not commit step 2: ValueError: injected refusal: "
                                   "the store cannot take this commit")
    assert read_head(home) == root
    assert verify_commit(home)["full_root"] == root


# -- cases 7 and 8 ---------------------------------------------------------------------------------------------


def test_killed_worker_then_resume_equals_the_uninterrupted_run(seed, uninterrupted, tmp_path):
    home = tmp_path / "home"
    args = _args(seed, home, until=3, commit_at=[1], fault={"rank": 1, "phase": "update", "kind": "sigkill",
                                                             "step": 2})
    error, seconds = _failing_launch(tmp_path / "killed", args)
    assert seconds < bound(TIMEOUT_S)
    assert (error.rank, error.step) == (1, 2)
    assert "worker rank 1 failed at step 2 (update): killed by signal 9" in str(error)
    head = read_head(home)
    assert head == uninterrupted["first"]["full_root"]  # the interrupted run committed exactly what the other did
    assert verify_commit(home)["full_root"] == head

    resumed = _launch(tmp_path / "resume", _args(seed, home, until=3, start={"root": head}))
    assert resumed[0]["start_step"] == 1 and [c["step"] for c in resumed[0]["commits"]] == [3]
    assert resumed[0]["commits"][-1]["learned_state_root"] == uninterrupted["last"]["learned_state_root"]
    assert resumed[0]["commits"][-1]["full_root"] == uninterrupted["last"]["full_root"]
    assert read_commit(home, read_head(home))["parent"] == head

    # The same resume with one worker in this process (the learned state does not depend on the worker
    # count, tests/test_engine.py) gives the same root; with updates 2 and 3 swapped it does not.
    b = make_batches(3, seed=7)
    for name, batches, same in (("same-order", b, True), ("swapped", [b[0], b[2], b[1]], False)):
        copy = tmp_path / name
        shutil.copytree(home, copy)
        (copy / "HEAD").write_text(head + "\n")
        args = {**_args(seed, copy, until=3, start={"root": head}, batches=batches),
                "layout": even_layout(LAYERS, 1).to_json()}
        out = session_worker(Group(0, 1, torch.device("cpu")), args, _Progress())
        assert (out["commits"][-1]["learned_state_root"] == uninterrupted["last"]["learned_state_root"]) == same


class _Progress:
    def progress(self, step=None, phase=None) -> None:
        pass


# -- case 9 -----------------------------------------------------------------------------------------------------


def test_hang_before_a_collective_times_out_within_the_bound(seed, uninterrupted, tmp_path):
    home = _copy_home(uninterrupted, tmp_path)
    root = uninterrupted["first"]["full_root"]
    args = _args(seed, home, until=2, start={"root": root},
                 fault={"rank": 1, "phase": "commit", "kind": "hang", "step": 2}, timeout_s=HANG_TIMEOUT_S)
    started = time.monotonic()
    error, seconds = _failing_launch(tmp_path / "run", args)
    assert seconds < bound(HANG_TIMEOUT_S) and time.monotonic() - started < 120
    assert seconds >= HANG_TIMEOUT_S - 0.5  # it was the group timeout that ended the wait
    assert (error.rank, error.step) == (1, 2)
    assert str(error).startswith("worker rank 1 failed at step 2 (commit): killed by signal 15")
    statuses = _statuses(tmp_path / "run")
    assert "Timed out" in statuses[0]["error"] or "timed out" in statuses[0]["error"]
    assert read_head(home) == root
