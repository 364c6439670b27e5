"""Daily use of a training run (issue 52, items 1, 2 and 4) on the tiny prepared job, through the command
line as a user types it: the training bar on stderr (update, loss, tokens/s, ETA), `--no-progress`,
`--resume HEAD` and a short root, `kit status` of the home (text and JSON, read back against the update
log), an aborted and a failed attempt, the cell bar of `kit run` (never inside the executed notebook) and
the per-run bar of `verify-evidence --replay`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kit.store.commits import CommitError, resolve_root

REPO = Path(__file__).resolve().parents[1]


def kit_here(capsys, *args) -> tuple[int, str, str]:
    """`kit ARGS` in this process (no interpreter start): (exit status, stdout, stderr)."""
    from kit.cli import main

    capsys.readouterr()
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def kit(*args, progress: bool = True, cwd=REPO) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), KIT_PROGRESS="1" if progress else "0")
    return subprocess.run([sys.executable, "-m", "kit", *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def trained(prepared, tmp_path_factory):
    """Two trainings of the tiny job in one home: updates 1..2 from the seed, then to 3 from HEAD."""
    home = tmp_path_factory.mktemp("daily") / "A"
    train = ["adaptive", "train", "--prepared", prepared["out"], "--seed", prepared["seed"], "--home", home,
             "--workers", 1]
    first = kit(*train, "--until", 2)
    assert first.returncode == 0, first.stderr
    second = kit(*train, "--until", 3, "--resume", "HEAD", "--no-progress", progress=True)
    assert second.returncode == 0, second.stderr
    return {"home": home, "train": train, "first": first, "second": second}


def test_training_bar_shows_update_loss_rate_and_eta(trained):
    err = trained["first"].stderr
    frames = [f for f in err.replace("\r", "\n").splitlines() if f.startswith("cohort A (1 workers)")]
    assert frames, err
    last = frames[-1]
    assert "2/2" in last and "ce/token " in last and "tokens/s" in last and "update" in last, last
    assert any("<" in f for f in frames)  # tqdm's elapsed<remaining: the ETA
    logged = [json.loads(line) for line in
              min(trained["home"].glob("attempts/*/updates.jsonl")).read_text().splitlines()]
    # cross-entropy per new token, the objective beside it (issue 64 item 6: "loss" was the objective alone)
    assert f"ce/token {logged[-1]['ce_per_token']:.4f} (objective {logged[-1]['objective']:.4f})" in last
    assert [json.loads(line)["cohort_step"] for line in trained["first"].stdout.splitlines()] == [2]  # stdout: JSON only
    # --no-progress: no bar, the commits on stdout as before
    assert "cohort A" not in trained["second"].stderr and "ce/token" not in trained["second"].stderr
    assert json.loads(trained["second"].stdout.splitlines()[-1])["cohort_step"] == 3


def test_resume_head_and_short_roots(trained, tmp_path, capsys):
    home = trained["home"]
    second = json.loads(trained["second"].stdout.splitlines()[-1])
    first_end = json.loads(trained["first"].stdout.splitlines()[-1])
    assert second["step"] == first_end["step"] + 1  # HEAD was the step-2 commit
    attempts = sorted(home.glob("attempts/*/attempt.json"))
    assert json.loads(attempts[-1].read_text())["resume"] == first_end["full_root"]  # recorded in full
    assert resolve_root(home, "HEAD") == second["full_root"]
    assert resolve_root(home, second["full_root"][:8]) == second["full_root"]
    assert resolve_root(home, first_end["full_root"][:12]) == first_end["full_root"]
    code, out, _ = kit_here(capsys, "checkpoint", "show", first_end["full_root"][:10], "--home", home)
    assert code == 0 and json.loads(out)["full_root"] == first_end["full_root"]
    for bad, words in (("abc1234", "at least 8"), ("ABCDEF12", "at least 8"), ("0" * 9, "no commit of")):
        with pytest.raises(CommitError, match=words):
            resolve_root(home, bad, "--resume")
    # two manifests that share their first 8 hex: the prefix is refused in one line naming both
    fake = tmp_path / "h"
    (fake / "commits").mkdir(parents=True)
    for tail in ("a" * 56, "b" * 56):
        (fake / "commits" / f"0123abcd{tail}.json").write_text("{}")
    with pytest.raises(CommitError, match="2 commits") as e:
        resolve_root(fake, "0123abcd", "--resume")
    assert "\n" not in str(e.value) and "0123abcdaaaaaaaa" in str(e.value)
    assert resolve_root(fake, "0123abcda") == "0123abcd" + "a" * 56
    with pytest.raises(CommitError, match="no HEAD"):
        resolve_root(fake, "HEAD", "--resume")
    code, _, err = kit_here(capsys, *trained["train"], "--resume", "0123abcd")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--resume 0123abcd: no commit of" in err


def test_status_of_a_home(trained, capsys):
    home = trained["home"]
    code, out, err = kit_here(capsys, "status", home, "--json")
    assert code == 0, err
    (entry,) = json.loads(out)["entries"]
    second = json.loads(trained["second"].stdout.splitlines()[-1])
    assert entry["kind"] == "home" and entry["head"] == second["full_root"]
    assert entry["head_cursor"]["cohort_step"] == 3 and entry["commits"] == len(list(home.glob("commits/*.json")))
    assert [a["status"] for a in entry["attempts"]] == ["completed", "completed"]
    log = max(home.glob("attempts/*/updates.jsonl")).read_text().splitlines()
    last = json.loads(log[-1])
    assert entry["last_update"]["loss"] == last["objective"] and entry["last_update"]["cohort_step"] == 3
    assert entry["last_update"]["tokens_per_s"] == round(last["tokens"] / last["seconds"], 1)
    assert all(a["elapsed_s"] > 0 for a in entry["attempts"])
    text = kit_here(capsys, "status", home)[1]
    assert f"HEAD {second['full_root']} (cohort 0 step 3" in text
    assert f"last update 3: ce/token {last['ce_per_token']:.4f} (objective {last['objective']:.4f})" in text
    assert text.count("completed") == 2


def test_status_names_aborted_and_failed_attempts(trained, tmp_path, capsys):
    home = tmp_path / "home"
    shutil.copytree(trained["home"], home)
    for name, status, error in (("20991231T000001-aaaaaaaa", "aborted", "KeyboardInterrupt: "),
                                ("20991231T000002-bbbbbbbb", "failed", "WorkerFailure: rank 1 failed at step 4\nlog"),
                                ("20991231T000003-cccccccc", "running", None)):
        (home / "attempts" / name).mkdir()
        (home / "attempts" / name / "attempt.json").write_text(json.dumps(
            {"attempt": name, "status": status, "error": error, "cohort": "A", "workers": 2, "commits": [],
             "started_at": 100.0, **({"ended_at": 160.0} if status != "running" else {})}))
    from kit.status import render, status

    report = status(home, now=190.0)
    rows = {a["attempt"][-8:]: a for a in report.to_json()["entries"][0]["attempts"]}
    assert rows["aaaaaaaa"]["signal"] == "SIGINT" and rows["aaaaaaaa"]["elapsed_s"] == 60.0
    assert rows["bbbbbbbb"]["reason"] == "WorkerFailure: rank 1 failed at step 4"
    assert rows["cccccccc"]["elapsed_s"] == 90.0
    text = render(report)
    assert "aborted (SIGINT)" in text and "failed: WorkerFailure: rank 1 failed at step 4 " in text
    assert "running  cohort A, 2 workers, 0 commit(s), 1m30s" in text
    # a demo output (homes and run folders below it) lists both
    (tmp_path / "runs").mkdir()
    shutil.copytree(REPO / "runs" / "demo-adaptive-A2-control", tmp_path / "runs" / "demo-adaptive-A2-control")
    kinds = [e.kind for e in status(tmp_path).entries]
    assert kinds == ["home", "run"]
    code, _, err = kit_here(capsys, "status", tmp_path / "runs" / "demo-adaptive-A2-control" / "metrics")
    assert code == 2 and "no checkpoint home" in err and len(err.splitlines()) == 1


def test_kit_run_shows_the_cell_and_keeps_bars_out_of_the_notebook(tmp_path):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("X = 1", metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("from kit.environ import progress_on\nprint('bars', progress_on())")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "tiny.ipynb"
    nbformat.write(nb, path)
    p = kit("run", path, "--run-id", "tiny", "--runs-dir", tmp_path / "runs")
    assert p.returncode == 0, p.stderr
    assert "tiny cell 1: from kit.environ import progress_on" in p.stderr, p.stderr
    executed = (tmp_path / "runs" / "tiny" / "tiny.ipynb").read_text()
    assert "bars False" in executed and "it/s" not in executed and "%|" not in executed


def test_replay_shows_each_run(monkeypatch, capsys):
    from kit.evidence import replay
    from kit.evidence.checks import ReplayResult

    monkeypatch.setenv("KIT_PROGRESS", "1")
    monkeypatch.setattr(replay.Replayer, "replay", lambda self, run_id: ReplayResult(run_id=run_id, ok=True,
                                                                                     mismatches=(), compared=()))
    names = ["demo-adaptive-A2-control", "demo-adaptive-B-control"]
    out = replay.replay_runs([REPO / "runs" / n for n in names], Path("/nonexistent"))
    assert [r["run_id"] for r in out] == names
    err = capsys.readouterr().err
    assert "replay demo-adaptive-A2-control" in err and "replay demo-adaptive-B-control" in err and "2/2" in err
    monkeypatch.setenv("KIT_PROGRESS", "0")
    replay.replay_runs([REPO / "runs" / n for n in names], Path("/nonexistent"))
    assert "replay" not in capsys.readouterr().err
