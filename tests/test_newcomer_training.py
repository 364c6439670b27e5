"""A newcomer's first hour (issue 64 item 6) through the command line, on the tiny prepared job and a tiny study:
the bar after `--resume HEAD` (its total and its numbers: cross-entropy per new token, the objective beside it);
`--until` past the endpoint refused in one line; an aborted attempt recording the commits it made; `kit checkpoint
list` with step and time; the exported weights' mode under the umask; `kit status` on a study arm while it trains,
after it is stopped and once completed; `kit study prepare` refusing in one line, no transformers warning first."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def kit(*args, cwd=REPO, progress: bool = False, env: dict | None = None, **kw):
    e = dict(os.environ, PYTHONPATH=str(REPO), KIT_PROGRESS="1" if progress else "0", **(env or {}))
    return subprocess.run([sys.executable, "-m", "kit", *map(str, args)], cwd=cwd, env=e, capture_output=True,
                          text=True, timeout=600, check=False, **kw)


@pytest.fixture(scope="module")
def home(prepared, tmp_path_factory):
    """Updates 1..2 of cohort A, then 3..4 resumed from HEAD with the bar on."""
    home = tmp_path_factory.mktemp("newcomer") / "A"
    train = ["adaptive", "train", "--prepared", prepared["out"], "--seed", prepared["seed"], "--home", home,
             "--workers", 1]
    first = kit(*train, "--until", 2)
    assert first.returncode == 0, first.stderr
    second = kit(*train, "--until", 4, "--resume", "HEAD", progress=True)
    assert second.returncode == 0, second.stderr
    return {"home": home, "train": train, "resumed": second}


def test_the_bar_after_resume_keeps_its_total_and_numbers(home):
    frames = [f for f in home["resumed"].stderr.replace("\r", "\n").splitlines() if f.startswith("cohort A")]
    assert frames, home["resumed"].stderr
    # every frame has a total (it showed "3update [00:04, ...]" once the workers' count came), the last is 2/2
    assert all(re.search(r"\| *\d+/\d+ \[", f) for f in frames), frames
    assert "2/2" in frames[-1], frames
    log = [json.loads(line) for line in max(home["home"].glob("attempts/*/updates.jsonl")).read_text().splitlines()]
    assert f"ce/token {log[-1]['ce_per_token']:.4f} (objective {log[-1]['objective']:.4f})" in frames[-1], frames[-1]


def test_until_past_the_endpoint_is_refused_in_one_line(home):
    p = kit(*home["train"], "--until", 99, "--resume", "HEAD")
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1, p.stderr
    assert "--until 99: past cohort A's endpoint, cohort step 8 (contract field 'endpoints.A'); give 1..8" in p.stderr


def test_checkpoint_list_shows_step_and_time(home):
    p = kit("checkpoint", "list", "--home", home["home"])
    assert p.returncode == 0, p.stderr
    rows = p.stdout.splitlines()
    assert len(rows) == 2
    assert re.fullmatch(r"[0-9a-f]{64}  step 2 \(cohort step 2\)  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", rows[0]), rows
    assert re.fullmatch(r"[0-9a-f]{64}  step 4 \(cohort step 4\)  .* UTC  HEAD", rows[1]), rows


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o027, 0o640)])
def test_exported_weights_follow_the_umask(home, tmp_path, umask, mode):
    out = tmp_path / "export"
    p = kit("checkpoint", "export", "--home", home["home"], "--out", out, preexec_fn=lambda: os.umask(umask))
    assert p.returncode == 0, p.stderr
    assert {f.name: f.stat().st_mode & 0o777 for f in out.iterdir()} == {"model.safetensors": mode, "config.json": mode}


def test_an_aborted_attempt_records_the_commits_it_made(prepared, tmp_path):
    """Ctrl-C after the commit at cohort step 4 (the contract's commit_every): the attempt is aborted and names
    that commit, which is HEAD (it said "0 commit(s)")."""
    fifo = tmp_path / "pause"
    os.mkfifo(fifo)
    home = tmp_path / "A"
    env = dict(os.environ, PYTHONPATH=str(REPO), KIT_PROGRESS="0", KIT_FAULT_PAUSE=f"6:{fifo}")
    proc = subprocess.Popen([sys.executable, "-m", "kit", "adaptive", "train", "--prepared", str(prepared["out"]),
                             "--seed", str(prepared["seed"]), "--home", str(home), "--workers", "1"], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not list(home.glob("attempts/*/commits.jsonl")):  # rank 0 logged the commit at step 4
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1]
            time.sleep(0.2)
        while not list(home.glob("attempts/*/workers/status-0.json")) or \
                json.loads(next(home.glob("attempts/*/workers/status-0.json")).read_text())["step"] != 5:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1]
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    record = json.loads(next(home.glob("attempts/*/attempt.json")).read_text())
    head = (home / "HEAD").read_text().strip()
    assert record["status"] == "aborted", err
    assert [c["cohort_step"] for c in record["commits"]] == [4] and record["commits"][0]["full_root"] == head
    text = kit("status", home).stdout
    assert "aborted (SIGINT)" in text and "1 commit(s)" in text, text


def _study_env(tmp_path):
    sys.path.insert(0, str(REPO / "tests"))
    from support.study import make_study_env

    from kit.study.prepare import prepare_study

    env = make_study_env(tmp_path)
    prepare_study(env["contract"], env["seed"], env["source"], tmp_path / "s", env["ledger"])
    return env, tmp_path / "s"


def test_status_on_a_study_arm_while_it_trains_when_stopped_and_completed(tmp_path):
    env, study = _study_env(tmp_path)
    fifo = tmp_path / "pause"
    os.mkfifo(fifo)
    arm = study / "arms" / "single"
    cmd = ["study", "arm", "single", "--study", study, "--seed", env["seed"]]
    proc = subprocess.Popen([sys.executable, "-m", "kit", *map(str, cmd)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO), KIT_PROGRESS="0", KIT_FAULT_PAUSE=f"3:{fifo}"))
    try:
        deadline = time.monotonic() + 300
        while not (arm / "run" / "commits.jsonl").is_file():  # the commit at update 2, then paused before 3
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        time.sleep(1)
        training = kit("status", arm)
        assert training.returncode == 0, training.stderr  # it was "no checkpoint home ..." or a traceback
        assert "arm single  unrecorded" in training.stdout and "(this attempt)  1 commit(s) so far" in training.stdout
        assert "last update 2: ce/token" in training.stdout, training.stdout
        for worker in [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                                        text=True, check=False).stdout.split()]:
            os.kill(worker, signal.SIGKILL)  # the worker stops; the driver records the attempt
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stopped = kit("status", arm, "--json")
    entry = json.loads(stopped.stdout)["entries"][0]
    assert entry["status"] == "failed" and entry["commits"] == 1 and entry["attempts"][0]["commits"] == 1, entry
    assert json.loads((arm / "attempts" / "001.json").read_text())["commits"][0]["step"] == 2
    shutil.rmtree(arm)
    done = kit(*cmd)
    assert done.returncode == 0, done.stderr
    text = kit("status", study).stdout
    head = (arm / "home" / "HEAD").read_text().strip()
    assert "arm single  completed" in text and f"HEAD {head} (step 4)" in text and "  commits 2" in text, text
    assert "last update 4: ce/token" in text and "None" not in text, text


def test_study_prepare_refuses_in_one_line_without_a_transformers_warning(prepared, tmp_path):
    """The tiny study contract on the adaptive test seed (no exposed probes in a new ledger): refused after its
    documents were tokenized, some longer than the seed's model_max_length."""
    p = kit("study", "prepare", "--contract", "contracts/shared-gradient.tiny.json", "--seed", prepared["seed"],
            "--public-source", "data/alpaca_5000.json", "--out", tmp_path / "study")
    assert p.returncode == 2 and p.stderr.startswith("kit study prepare: error:"), p.stderr
    assert len(p.stderr.splitlines()) == 1 and "Token indices" not in p.stderr, p.stderr
