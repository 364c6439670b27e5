"""Every committed run verifies: `kit verify-evidence runs` on this repository (the fast checks, no replay),
and the git check's rule that a run recorded at a commit outside HEAD's history fails unless a superseded
folder keeps it as a record, naming that commit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.evidence import evidence_path

from kit.evidence.replay import ReplayError, replay_runs
from kit.evidence.run_index import evidence_folders
from kit.evidence.verify import expand_run_dirs, superseded_note, verify_evidence

REPO = Path(__file__).resolve().parents[1]
GIT = ["git", "-c", "user.name=kit-test", "-c", "user.email=kit@test", "-c", "commit.gpgsign=false"]


def _here(run_dir: str) -> Path:
    """A run folder the subprocess named: in the repository, or in an archive it unpacked (and removed on exit),
    read again here by its place under runs/."""
    path = Path(run_dir)
    if path.exists():
        return path
    parts = path.parts
    return evidence_path(*parts[parts.index("runs") + 1:])


def test_every_committed_run_verifies():
    done = subprocess.run([sys.executable, "-m", "kit", "verify-evidence", "runs", "--json"], cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300,
                          check=False)
    reports = json.loads(done.stdout)
    failed = {r["run_dir"]: [c["detail"] for c in r["checks"] if c["result"] == "fail"] for r in reports if not r["ok"]}
    assert done.returncode == 0 and not failed, failed
    # every run directory under runs/ was checked, nested campaign and superseded folders included
    designs = [r for r in reports if [c["check"] for c in r["checks"]] == ["replicate design"]]
    assert [Path(r["run_dir"]).name for r in designs] == ["medium-replicate-design.json"]  # issue 59: checked too
    # the ledger's, the runs folder's own (kit/evidence/tree.py) and the replicate designs' reports besides
    runs = [r for r in reports if Path(r["run_dir"]).name not in ("exposed.jsonl", "runs") and r not in designs]
    assert [r["run_dir"] for r in reports if Path(r["run_dir"]).name == "runs"] == ["runs"]
    assert len(runs) == len(expand_run_dirs([str(REPO / "runs")])) > 50
    # a git check is skipped only for a run that a superseded folder names as replaced
    for r in runs:
        git = [c for c in r["checks"] if c["check"] == "git"]
        assert len(git) == 1, r["run_dir"]
        if git[0]["result"] != "pass":
            note = superseded_note(_here(r["run_dir"]))
            assert git[0]["result"] == "skipped" and note is not None, r["run_dir"]
            assert Path(r["run_dir"]).name in note.replaced_by
            assert (REPO / "runs" / note.replaced_by[Path(r["run_dir"]).name]).is_dir()


def test_every_superseded_folder_of_runs_carries_its_note():
    """A folder of runs kept aside (runs/*superseded*, holding run records) says why in superseded.json, and names
    each run's replacement: without it, a root whose home now holds the replacement's commits fails verification
    (after `kit demo` from the repository root, or on the GPU host during a medium campaign)."""
    folders = [d for d in evidence_folders(REPO / "runs") if "superseded" in d.name  # archived ones unpacked
               and any((r / "run.json").is_file() for r in d.iterdir() if r.is_dir())]
    assert len(folders) >= 6
    for folder in folders:
        runs_in = {r.name for r in folder.iterdir() if (r / "run.json").is_file()}
        note = superseded_note(next(iter(sorted(folder.iterdir()))))
        assert note is not None, folder
        assert runs_in <= set(note.replaced_by), (folder, sorted(runs_in - set(note.replaced_by)))


def _git(repo: Path, *args: str) -> str:
    return subprocess.run([*GIT, "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def _bench_run(runs: Path, name: str, commit: str) -> Path:
    d = runs / name
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"format": "kit-bench/1", "run_id": name, "status": "ok",
                                            "git": {"commit": commit}, "raw_output": []}))
    return d


def test_a_commit_outside_head_history_fails_unless_kept_as_superseded(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "a.txt").write_text("a\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "main")
    on_main = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-qb", "side")
    (repo / "b.txt").write_text("b\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "side")
    on_side = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "main")

    def git_result(run_dir):
        return next((c["result"], c["detail"]) for c in verify_evidence(run_dir)["checks"] if c["check"] == "git")

    runs = repo / "runs"
    assert git_result(_bench_run(runs, "at-main", on_main))[0] == "pass"
    result, detail = git_result(_bench_run(runs, "at-side", on_side))
    assert result == "fail" and "not HEAD or an ancestor of HEAD" in detail  # the commit exists, on a branch only
    missing = f"commit {'1' * 40} not found in the repository at {repo}"
    assert git_result(_bench_run(runs, "nowhere", "1" * 40)) == ("fail", missing)

    kept = runs / "superseded-x"
    note = {"format": "kit-superseded/1", "reason": "made at a branch", "unreachable_commits": [on_side],
            "replaced_by": {"old": "at-main"}}
    kept.mkdir()
    (kept / "superseded.json").write_text(json.dumps(note))
    result, detail = git_result(_bench_run(kept, "old", on_side))
    assert result == "skipped" and detail.endswith("made at a branch; replaced by at-main")
    assert git_result(_bench_run(kept, "other", "2" * 40))[0] == "fail"  # a commit the folder does not name
    assert {p.name for p in expand_run_dirs([str(runs)])} == {"at-main", "at-side", "nowhere", "old", "other"}

    (kept / "superseded.json").write_text(json.dumps({**note, "format": "kit-superseded/0"}))
    result, detail = git_result(kept / "old")
    assert result == "fail" and "field 'format' is 'kit-superseded/0'" in detail


def test_a_replay_of_a_runs_folder_leaves_out_the_runs_kept_in_nested_folders(tmp_path):
    runs = tmp_path / "runs"
    (runs / "top").mkdir(parents=True)
    kept = _bench_run(runs / "superseded-x", "old", "1" * 40)
    said = []
    with pytest.raises(ReplayError, match="no run record there"):  # the top-level run is tried, not refused
        replay_runs([runs / "top", kept], tmp_path / "work", log=said.append)
    expected = f"replay: 1 run(s) kept in folders under {runs.resolve()} (superseded or campaign records) are not replayed"
    assert said == [expected]
