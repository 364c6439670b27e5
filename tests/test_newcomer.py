"""A newcomer's first hour (issue 64 item 6), the parts that need no training process: `kit status` on a study arm
(recorded, and in progress or stopped before its record) and on a study run's curves; the launcher's bar when the
workers' count replaces the driver's guess (`--resume HEAD`) and its numbers (cross-entropy per new token, the
objective beside it); `kit report`'s default title; the verifier's git check on a runs folder outside any
repository."""

from __future__ import annotations

import io
import json
import os
import subprocess

from tqdm import tqdm

from kit.distributed import launch
from kit.evidence.report import page
from kit.evidence.verify import _git_check
from kit.status import render, status

ROOTS = ("a" * 64, "b" * 64)


def _write(path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def _arm(tmp_path, *, recorded: bool):
    """STUDY/arms/dense: a store with two manifests and no HEAD, the launcher's folder with rank 0's last report
    and, when `recorded`, the attempt's record (arm.json and attempts/001.json, as kit.study.arms writes them)."""
    arm = tmp_path / "study" / "arms" / "dense"
    for root in ROOTS:
        _write(arm / "home" / "commits" / f"{root}.json", {})
    _write(arm / "run" / "launch-args.json", {"until": 8})
    _write(arm / "run" / "status-0.json", {"rank": 0, "step": 7, "phase": "update", "error": None,
                                           "shown": {"done": 6, "total": 8, "loss": 5.5, "ce": 5.5,
                                                     "tokens_per_s": 1000.0}})
    (arm / "run" / "commits.jsonl").write_text('{"step": 4}\n')
    if recorded:
        rec = {"arm": "dense", "status": "completed", "reason": None, "started_at": 100.0, "ended_at": 130.0,
               "commits": [{"step": 4}, {"step": 8}], "until": 8, "resume_root": None,
               "updates": [{"step": 8, "objective": 5.25, "target_tokens": 500, "seconds": 0.5}]}
        _write(arm / "attempts" / "001.json", rec)
        _write(arm / "arm.json", rec)
        os.utime(arm / "run" / "launch-args.json", (50.0, 50.0))  # launched before the record was written
    return arm


def test_status_of_a_recorded_study_arm_shows_its_store_and_attempts(tmp_path):
    arm = _arm(tmp_path, recorded=True)
    # the arm's attempts/ (records NNN.json) made it look like a checkpoint home: "HEAD none, commits 0"
    for path in (arm, tmp_path / "study"):
        report = status(path, now=200.0).to_json()
        assert [e["kind"] for e in report["entries"]] == ["arm"]
        entry = report["entries"][0]
        assert entry["status"] == "completed" and entry["commits"] == 2 and entry["elapsed_s"] == 30.0
        assert [(a["attempt"], a["status"], a["commits"]) for a in entry["attempts"]] == [("001", "completed", 2)]
        assert entry["last_update"] == {"update": 8, "loss": 5.25, "ce_per_token": 5.25, "tokens_per_s": 1000.0}
    text = render(status(arm, now=200.0))
    assert "  commits 2" in text and "001  completed  2 commit(s), 0m30s" in text
    assert "last update 8: ce/token 5.2500 (the objective), 1,000 tokens/s" in text


def test_status_of_a_study_arm_training_or_stopped_before_its_record(tmp_path):
    arm = _arm(tmp_path, recorded=False)  # no arm.json, no HEAD yet: it was "no checkpoint home ..." (exit 2)
    report = status(arm, now=os.stat(arm / "run" / "status-0.json").st_mtime + 12)
    entry = report.to_json()["entries"][0]
    assert entry["kind"] == "arm" and entry["status"] == "unrecorded" and entry["head"] is None
    assert entry["commits"] == 2 and entry["attempt_commits"] == 1 and entry["last_report_s"] == 12.0
    assert entry["last_update"] == {"update": 6, "loss": 5.5, "ce_per_token": 5.5, "tokens_per_s": 1000.0}
    text = render(report)
    assert "(this attempt)  1 commit(s) so far, last report 0m12s ago (update at step 7)" in text
    assert "last update 6: ce/token 5.5000 (the objective)" in text and "None" not in text


def test_status_of_a_study_run_names_its_last_update(tmp_path):
    run = tmp_path / "runs" / "demo-study-dense"  # a study arm's curves name the update `step`
    _write(run / "run.json", {"run_id": "demo-study-dense", "status": "completed", "duration_s": 13.0})
    _write(run / "metrics" / "loss_curves.json", [{"step": 7, "objective": 5.6}, {"step": 8, "objective": 5.5}])
    text = render(status(run))
    assert "last update 8: objective 5.5000" in text and "None" not in text


def test_status_of_an_adaptive_attempt_counts_the_commits_it_logged(tmp_path):
    attempt = tmp_path / "A" / "attempts" / "20261205T000000-aaaaaaaa"
    _write(attempt / "attempt.json", {"attempt": attempt.name, "status": "aborted", "error": "interrupted by SIGINT",
                                      "signal": "SIGINT", "commits": [], "started_at": 1.0, "ended_at": 2.0})
    (attempt / "commits.jsonl").write_text('{"cohort_step": 4}\n{"cohort_step": 8}\n')
    row = status(tmp_path / "A").to_json()["entries"][0]["attempts"][0]
    assert row["status"] == "aborted" and row["commits"] == 2


def _bar():
    return tqdm(total=4, file=io.StringIO(), unit="update")


def test_the_bar_takes_the_workers_count_after_a_resume(tmp_path):
    bar = _bar()
    # before the first update of a resumed run ends, rank 0 reports the step it is on (3, resumed from 2)
    head = {"rank": 0, "phase": "update", "error": None}  # what every worker status holds (WorkerStatus)
    _write(tmp_path / "status-0.json", {**head, "step": 3, "shown": None})
    launch._advance(bar, tmp_path, 2)
    assert (bar.n, bar.total) == (1, 4)
    # then its own count: 1 of the 2 updates left, with the numbers; the total was lost ("3update") before
    _write(tmp_path / "status-0.json", {**head, "step": 3, "shown": {"done": 1, "total": 2, "loss": 1.25, "ce": 6.5,
                                                             "tokens_per_s": 2000.0}})
    launch._advance(bar, tmp_path, 2)
    assert (bar.n, bar.total) == (1, 2)
    assert bar.postfix == "ce/token 6.5000 (objective 1.2500), 2,000 tokens/s"
    _write(tmp_path / "status-0.json", {**head, "step": 4, "shown": {"done": 2, "total": 2, "loss": 1.0, "ce": 6.0}})
    launch._advance(bar, tmp_path, 2)
    assert (bar.n, bar.total) == (2, 2) and bar.postfix.startswith("ce/token 6.0000 (objective 1.0000)")


def test_the_bar_names_the_objective_where_no_cross_entropy_is_reported():
    assert launch.postfix(launch.Shown(loss=2.0, tokens_per_s=10.0)) == "objective 2.0000, 10 tokens/s"
    assert launch.postfix(launch.Shown(loss=2.0, ce=2.0, tokens_per_s=10.0)) == \
        "ce/token 2.0000 (the objective), 10 tokens/s"


def test_the_report_title_names_the_runs_folder_not_the_output():
    assert page.default_title("runs") == "Evidence report: runs"
    assert page.default_title("runs/medium-*") == "Evidence report: runs/medium-*"
    assert page.default_title("/x/demo-out/runs") == "Evidence report: runs"


def test_verify_outside_a_repository_says_there_is_none(tmp_path):
    check = _git_check("c" * 40, tmp_path, None)
    assert check["result"] == "fail" and "in no git repository" in check["detail"], check
    assert "not found in the repository at" not in check["detail"]
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True, timeout=60)
    inside = _git_check("c" * 40, tmp_path / "repo", None)
    assert f"not found in the repository at {tmp_path / 'repo'}" in inside["detail"], inside
