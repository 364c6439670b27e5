"""Issue 48 items 11 and 14: what runs at the same time, and what a killed process leaves behind.

- Two `kit run` with the same run id: the second is refused at start (one line, exit 2) while the first
  runs, and the first completes with its folder and record intact (nothing moved aside).
- `kit checkpoint gc --objects` while a training run holds the store: refused (one line naming the lock,
  exit 2); the run then commits to its endpoint, and gc runs once it has ended.
- A `kit seed build` killed with SIGKILL leaves `.<out>.staging-<pid>`: the next publish into the same
  output removes it (its pid is dead) and leaves a live process's staging folder alone.
Real processes; rank 0 and the notebook wait on FIFOs (support.processes), nothing sleeps.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

from support.notebooks import write_notebook
from support.processes import finish, kit_process, one_line_error, wait_paused

from kit.cli import main as kit_main
from kit.evidence.run_record import read_run_record
from kit.publish import publish_dir
from kit.store.commits import list_commits


def test_a_second_run_with_the_same_run_id_is_refused_at_start(tmp_path):
    nb = write_notebook(tmp_path / "waits.ipynb", "open(name, 'rb').read()")
    runs = tmp_path / "runs"
    fifo = tmp_path / "gate"
    os.mkfifo(fifo)
    first, _ = kit_process(["run", str(nb), "--run-id", "same", "--runs-dir", str(runs), "-p", "name", str(fifo)],
                           tmp_path)
    gate = wait_paused(fifo, first)  # the first run's kernel is inside its cell
    rc, _, err = finish(kit_process(["run", str(nb), "--run-id", "same", "--runs-dir", str(runs), "-p", "name",
                                     str(tmp_path / "other")], tmp_path)[0])
    line = one_line_error(err)
    assert rc == 2 and "run id 'same' is being run by another process" in line, err[-3000:]
    gate.close()
    rc, _, err = finish(first)
    assert rc == 0, err[-3000:]
    record = read_run_record(runs / "same")
    assert record.status == "completed" and record.parameters == {"name": str(fifo)}
    assert sorted(p.name for p in runs.iterdir() if not p.name.startswith(".")) == ["same"]  # nothing moved aside


def test_gc_objects_is_refused_while_a_run_holds_the_store(prepared, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(prepared["out"], out)
    home = tmp_path / "home"
    args = ["adaptive", "train", "--prepared", str(out), "--seed", str(prepared["seed"]), "--home", str(home),
            "--cohort", "A", "--workers", "1", "--until", "6"]
    proc, fifo = kit_process(args, tmp_path, pause="6")  # the step-4 commit is written; step 6's is next
    gate = wait_paused(fifo, proc)
    assert kit_main(["checkpoint", "gc", "--home", str(home), "--objects"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{home / 'in-use.lock'}: the store is in use by a running training" in err, err
    gate.close()
    rc, stdout, err = finish(proc)
    assert rc == 0, err[-3000:]
    commits = [json.loads(line) for line in stdout.splitlines()]
    assert [c["cohort_step"] for c in commits] == [4, 6] and len(list_commits(home)) == 2
    assert kit_main(["checkpoint", "gc", "--home", str(home), "--objects"]) == 0  # the run has ended


KILLED_BUILD = r"""
import os, signal, sys
from pathlib import Path
from kit.publish import publish_dir
with publish_dir(Path(sys.argv[1])) as staging:
    (staging / "model.safetensors").write_bytes(b"half")
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_staging_folder_of_a_killed_build_is_removed_by_the_next(tmp_path):
    out = tmp_path / "seed"
    killed = subprocess.run([sys.executable, "-c", KILLED_BUILD, str(out)], env={**os.environ}, check=False)
    assert killed.returncode == -signal.SIGKILL
    [left] = tmp_path.glob(".seed.staging-*")
    live = tmp_path / f".seed.staging-{os.getppid()}"  # a live process's (our parent's) staging folder
    live.mkdir()
    with publish_dir(out) as staging:
        (staging / "config.json").write_text("{}")
    assert not left.exists() and live.is_dir() and (out / "config.json").is_file()
