"""Issue 48 items 2, 3, 12 (worker refusals) and 13 (training on a full disk); issue 52 item 3 (Ctrl-C).

Real `kit adaptive train` processes on the tiny contract (two workers), stopped at a known update by the
launcher's fault hook (rank 0 waits on a FIFO, so nothing sleeps):
- SIGTERM to the driver alone: the workers stop, nothing is committed after the signal, the attempt is
  `aborted` with the signal, one line naming `--resume HEAD` and HEAD's root, exit 143; resuming from it
  reaches the uninterrupted run's endpoint root.
- Ctrl-C (SIGINT to the process group) before the first commit: one line naming the clean-up, exit 130,
  and the same command is then refused with a message naming the aborted attempt and how to clean up.
- `kill -9` of the driver after the endpoint commit, before its record: the workers die with it, and the
  stranded endpoint is adopted by `--resume <endpoint>`, after which cohort B's reference check accepts it
  (before, its refusal names the command that adopts it).
- A refusal raised inside a worker (a corrupt object) and a moved HEAD: one line, exit 2 and 1, the
  traceback in the worker's log.
- A full disk (a real tmpfs, filled while rank 0 waits): one line naming the file and the step, exit 1,
  the attempt recorded `failed` with the error.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from support.processes import children, finish, kit_process, one_line_error, wait_gone, wait_paused

from kit.adaptive.bindings import TrainRefused, check_reference
from kit.adaptive.continued_schema import job_contract
from kit.digest import load_json_strict
from kit.store.commits import list_commits, object_digests, read_commit, read_head
from kit.store.objects import ObjectStore


@pytest.fixture(scope="module")
def job(prepared, tmp_path_factory):
    """A copy of the tiny preparation, and the roots of one uninterrupted cohort-A run (the oracle)."""
    root = tmp_path_factory.mktemp("signals")
    out = root / "out"
    shutil.copytree(prepared["out"], out)
    j = {"out": out, "seed": prepared["seed"], "root": root}
    rc, stdout, err = finish(kit_process(train_args(j, root / "clean"), root)[0])
    assert rc == 0, err[-3000:]
    j["clean"] = [json.loads(line) for line in stdout.splitlines()]
    assert [c["cohort_step"] for c in j["clean"]] == [4, 8]
    return j


def train_args(j: dict, home: Path, *more: str, workers: int = 2) -> list[str]:
    return ["adaptive", "train", "--prepared", str(j["out"]), "--seed", str(j["seed"]), "--home", str(home),
            "--cohort", "A", "--workers", str(workers), *more]


def attempts(home: Path) -> list[dict]:
    return [load_json_strict(p) for p in sorted(home.glob("attempts/*/attempt.json"))]


def test_sigterm_to_the_driver_stops_workers_and_resume_reaches_the_endpoint(job, tmp_path):
    home = tmp_path / "home"
    proc, fifo = kit_process(train_args(job, home), tmp_path, pause="6")
    writer = wait_paused(fifo, proc)
    workers = children(proc.pid)
    assert len(workers) == 2
    os.kill(proc.pid, signal.SIGTERM)  # the driver only, not its process group
    rc, _, err = finish(proc)
    writer.close()
    assert wait_gone(workers) == [], "a worker outlived its driver"
    line = one_line_error(err)
    assert rc == 143, err[-3000:]
    head = read_head(home)
    assert head == job["clean"][0]["full_root"] and list_commits(home) == sorted([head])  # nothing after
    assert "interrupted by SIGTERM" in line and "--resume HEAD" in line and head in line, line
    [rec] = attempts(home)
    # the commit it made before the signal is named (issue 64 item 6: it said none, though it was HEAD)
    assert (rec["status"], rec["signal"], [c["full_root"] for c in rec["commits"]]) == ("aborted", "SIGTERM", [head]), rec
    rc, stdout, err = finish(kit_process(train_args(job, home, "--resume", head), tmp_path)[0])
    assert rc == 0, err[-3000:]
    assert json.loads(stdout.splitlines()[-1]) == job["clean"][-1]  # the uninterrupted run's endpoint


def test_ctrl_c_before_the_first_commit_names_the_clean_up(job, tmp_path):
    home = tmp_path / "home"
    proc, fifo = kit_process(train_args(job, home), tmp_path, pause="2", start_new_session=True)
    writer = wait_paused(fifo, proc)
    workers = children(proc.pid)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends: the whole foreground group
    rc, _, err = finish(proc)
    writer.close()
    assert wait_gone(workers) == []
    line = one_line_error(err)
    assert rc == 130 and "interrupted by SIGINT" in line and f"rm -r {home}" in line, err[-3000:]
    [rec] = attempts(home)
    assert (rec["status"], rec["signal"]) == ("aborted", "SIGINT") and read_head(home) is None
    rc, _, err = finish(kit_process(train_args(job, home), tmp_path)[0])
    line = one_line_error(err)
    assert rc == 2 and "not empty" in line and f"{rec['attempt']} (aborted SIGINT)" in line \
        and f"rm -r {home}" in line, line


def test_kill_9_after_the_endpoint_commit_then_adopt_it(job, tmp_path):
    home = tmp_path / "home"
    proc, fifo = kit_process(train_args(job, home), tmp_path, pause="done")
    writer = wait_paused(fifo, proc)  # both commits written; the driver has not recorded them
    workers = children(proc.pid)
    proc.kill()
    finish(proc)
    assert wait_gone(workers) == [], "a worker outlived its driver (kill -9)"
    writer.close()
    endpoint = job["clean"][-1]["full_root"]
    assert read_head(home) == endpoint and attempts(home)[0]["status"] == "running"
    pj = load_json_strict(job["out"] / "prepared.json")
    contract = job_contract(pj)
    with pytest.raises(TrainRefused, match=f"--resume {endpoint}`, then run this command again"):
        check_reference(job["out"], pj, contract, endpoint, endpoint, str(home))
    rc, stdout, err = finish(kit_process(train_args(job, home, "--resume", endpoint), tmp_path)[0])
    assert rc == 0, err[-3000:]
    assert [json.loads(line) for line in stdout.splitlines()] == [job["clean"][-1]]
    adopted = attempts(home)[-1]
    assert (adopted["status"], adopted["adopted"], adopted["commits"]) == ("completed", True, [job["clean"][-1]])
    check_reference(job["out"], pj, contract, endpoint, endpoint, str(home))  # cohort B accepts it now


def test_refusals_raised_in_a_worker_are_one_line(job, tmp_path):
    """A HEAD that moved past the start (a runtime failure: exit 1) and a corrupt object of the start
    commit (a refusal: exit 2); the tracebacks are in the workers' logs."""
    home = tmp_path / "home"
    shutil.copytree(job["root"] / "clean", home)  # HEAD is the endpoint (step 8)
    first = job["clean"][0]["full_root"]
    resume = train_args(job, home, "--resume", first, "--until", "5", workers=1)  # commits step 5 on step 4
    rc, _, err = finish(kit_process(resume, tmp_path)[0])
    line = one_line_error(err)
    assert rc == 1 and "HeadMoved" in line and "worker rank" in line, err[-3000:]
    logs = sorted(home.glob("attempts/*/workers/worker-*.log"))
    assert any("Traceback" in p.read_text() for p in logs)

    digest = min(object_digests(read_commit(home, first)))
    obj = ObjectStore(home).path(digest)
    data = bytearray(obj.read_bytes())
    data[-1] ^= 1
    obj.chmod(0o644)
    obj.write_bytes(bytes(data))
    rc, _, err = finish(kit_process(resume, tmp_path)[0])
    line = one_line_error(err)
    assert rc == 2 and "worker rank" in line and digest in line, err[-3000:]


@pytest.fixture
def small_tmpfs(tmp_path):
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()})")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(path: Path) -> None:
    """Write `path` until the filesystem has no byte left."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        for size in (1 << 16, 1):
            try:
                while True:
                    os.write(fd, b"\xff" * size)
            except OSError:
                pass
    finally:
        os.close(fd)


def test_full_disk_during_training_names_the_file_and_the_step(job, tmp_path, small_tmpfs):
    home = small_tmpfs / "home"
    proc, fifo = kit_process(train_args(job, home), tmp_path, pause="4")  # the commit follows update 4
    writer = wait_paused(fifo, proc)
    fill(small_tmpfs / "filler")  # the disk is full from now on
    writer.close()
    rc, _, err = finish(proc)
    line = one_line_error(err)
    assert rc == 1 and "No space left on device" in line and "step 4" in line, err[-3000:]
    assert f"No space left on device: '{home}/" in line, line  # the file it was writing
    [rec] = attempts(home)
    assert rec["status"] == "failed" and "No space left on device" in rec["error"], rec
