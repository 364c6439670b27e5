"""`kit verify-evidence --replay --at-recorded-commit`: a run replays with the kit and notebooks of the commit its
run.json names (extracted from the clone), and a commit the clone does not hold is refused, naming the way out.

The tiny run is notebook 90 (inspect a run) reading a committed run of runs/, recorded inside a shared clone of this
repository at its current commit, so its record names that commit and its notebook relative to it."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from pathlib import Path

import pytest

from kit.cli import main
from kit.digest import load_json_strict, write_canonical_json
from kit.evidence import run_record
from kit.evidence.replay_at_commit import RecordedCommitError, replay_at_recorded_commits
from kit.evidence.runner import run_notebook

REPO = Path(__file__).resolve().parents[1]
GIT = ["git", "-c", "user.name=kit-test", "-c", "user.email=kit@test", "-c", "commit.gpgsign=false"]


def head_commit(repo: Path) -> str:
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


def test_a_run_replays_with_the_code_of_its_recorded_commit(tmp_path, capfd):
    clone = tmp_path / "clone"  # this repository at its current commit; objects shared, nothing fetched
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(REPO), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", "HEAD", "--", "notebooks"], check=True)
    params = {"RUN_ID": "demo-adaptive-prepare", "RUNS_DIR": str(REPO / "runs")}  # absolute: read as it is
    (tmp_path / "cwd").mkdir()
    with contextlib.chdir(tmp_path / "cwd"):  # no data folder (demo-out/) here, none in the replay's either
        record = run_notebook(clone / "notebooks" / "90_inspect_failed_arm.ipynb", params, "inspect",
                              clone / "runs")
    assert record.status == "completed"
    commit = record.git.commit
    assert commit == head_commit(clone)  # this repository's HEAD when cloned (it may have moved on since)
    assert record.notebook == "notebooks/90_inspect_failed_arm.ipynb"  # relative: the replay runs the tree's

    work = tmp_path / "work"
    assert main(["verify-evidence", "--replay", "--at-recorded-commit", "--no-progress", str(clone / "runs" / "inspect"),
                 "--work", str(work)]) == 0
    out, err = capfd.readouterr()
    tree = work / "trees" / commit
    assert f"replay at recorded commit {commit[:12]}: inspect with the kit and notebooks of {tree}" in err
    assert "inspect: replayed, equal" in out
    assert (tree / "kit" / "__init__.py").is_file() and not (tree / "runs").exists()
    replayed = run_record.read_run_record(work / "replays" / commit / "runs" / "inspect")
    assert (replayed.status, replayed.git.commit) == ("completed", None)  # the extracted tree is no repository


def test_a_commit_not_in_the_clone_is_refused_naming_the_way_out(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "runs" / "demo-adaptive-prepare", repo / "runs" / "demo-adaptive-prepare")
    path = repo / "runs" / "demo-adaptive-prepare" / run_record.RUN_RECORD_NAME
    record = load_json_strict(path)
    record["git"]["commit"] = "0" * 40
    write_canonical_json(path, record)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*GIT, "-C", str(repo), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(repo), "commit", "-qm", "fixture"], check=True)
    with pytest.raises(RecordedCommitError, match=r"demo-adaptive-prepare/run.json: its recorded commit 0{40} is "
                                                  r"not in this clone .*`git fetch --unshallow`"):
        replay_at_recorded_commits([path.parent], tmp_path / "work", [])
    record["git"]["commit"] = None
    write_canonical_json(path, record)
    with pytest.raises(RecordedCommitError, match=r"field git.commit is null"):
        replay_at_recorded_commits([path.parent], tmp_path / "work", [])


def test_at_recorded_commit_needs_replay_and_named_runs(capsys):
    assert main(["verify-evidence", "--at-recorded-commit", str(REPO / "runs" / "demo-seed")]) != 0
    assert "--at-recorded-commit replays: give it with --replay" in capsys.readouterr().err
    assert main(["verify-evidence", "--replay", "--at-recorded-commit", str(REPO / "runs")]) != 0
    assert "is not a run folder (no run.json); name the runs to replay" in capsys.readouterr().err
