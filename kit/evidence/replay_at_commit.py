"""`kit verify-evidence --replay --at-recorded-commit RUN`: replay a committed run with the code of the commit its
record names (`git.commit`), not today's.

`--replay` alone runs today's notebooks and kit with the run's recorded parameters: a run recorded before an internal
module moved (an executed notebook that imports `kit.evidence.records`, say) no longer replays that way. The decision
to know: compatibility is said, not shimmed. This module extracts the recorded commit's tree (`git archive`, without
its `runs/` and `reports/`: the runs replayed are read from the checkout at hand) into the replay's work folder and
runs `python -m kit verify-evidence --replay` there, in a subprocess of the same interpreter (the same venv) with
PYTHONPATH set to that tree, so the kernel imports that tree's `kit` and executes that tree's notebooks. A commit
that is not in this clone is refused by name (a shallow clone: `git fetch --unshallow`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

from kit.evidence import run_record
from kit.evidence.environment import evidence_base, git_toplevel

# what the extracted tree leaves out: the committed evidence and reports (the runs are read where they are named)
LEFT_OUT_OF_TREE = ("runs", "reports")


class RecordedCommitError(ValueError):
    """A run cannot be replayed at its recorded commit: no commit recorded, no repository, or a commit this
    clone does not hold."""


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=False)


def recorded_commit(run_dir: Path) -> str:
    """The commit a run's record names (refused where it names none: the run ran outside a repository)."""
    record = run_record.read_run_record(run_dir)
    commit = record.git.commit
    if commit is None:
        raise RecordedCommitError(f"{run_dir / run_record.RUN_RECORD_NAME}: field git.commit is null (the run ran "
                                  "outside a git repository): there is no recorded commit to replay it at")
    return commit


def check_commit_present(repo: Path, commit: str, run_dir: Path) -> None:
    """Refuse, naming the run, the commit and the way out, unless `repo` holds `commit`."""
    if _git(repo, "cat-file", "-e", f"{commit}^{{commit}}").returncode == 0:
        return
    shallow = _git(repo, "rev-parse", "--is-shallow-repository").stdout.decode().strip() == "true"
    raise RecordedCommitError(
        f"{run_dir / run_record.RUN_RECORD_NAME}: its recorded commit {commit} is not in this clone ({repo}); "
        + ("the clone is shallow: `git fetch --unshallow` fetches its history, then run this again"
           if shallow else "fetch it (`git fetch --unshallow` in a shallow clone, or from the remote that has it)"))


def extract_tree(repo: Path, commit: str, target: Path) -> Path:
    """`commit`'s tracked files (but LEFT_OUT_OF_TREE) under `target`; reused when a previous call left it
    complete (the marker file is written last)."""
    done = target / ".kit-extracted"
    if done.is_file():
        return target
    if target.exists():
        shutil.rmtree(target)  # an extraction interrupted before its marker: start again
    target.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(repo), "archive", "--format=tar", commit], stdout=subprocess.PIPE)
    assert archive.stdout is not None
    with tarfile.open(fileobj=archive.stdout, mode="r|") as tar:
        for member in tar:
            if member.name.split("/", 1)[0] in LEFT_OUT_OF_TREE:
                continue
            tar.extract(member, target, filter="data")
    if archive.wait() != 0:
        raise RecordedCommitError(f"git archive {commit} in {repo} failed (exit {archive.returncode})")
    done.write_text(commit + "\n")
    return target


def replay_at_recorded_commits(run_dirs: list[Path], work: Path, extra_args: list[str],
                               log: Callable[[str], None] = print) -> int:
    """Replay each run with the kit and notebooks of the commit its record names: runs grouped by commit, each group
    by one `python -m kit verify-evidence --replay` of that commit's tree (its output passes through). The exit
    status is the worst of theirs (0 when every group replayed equal)."""
    by_commit: dict[str, list[Path]] = {}
    repos: dict[str, Path] = {}
    for run_dir in (Path(d).resolve() for d in run_dirs):
        commit = recorded_commit(run_dir)
        repo = git_toplevel(evidence_base(run_dir.parent))  # an archived run: its runs folder's repository
        if repo is None:
            raise RecordedCommitError(f"{run_dir}: not inside a git repository; the recorded commit {commit} "
                                      "is read from the repository that holds the run")
        check_commit_present(repo, commit, run_dir)
        by_commit.setdefault(commit, []).append(run_dir)
        repos[commit] = repo
    status = 0
    for commit, dirs in by_commit.items():
        tree = extract_tree(repos[commit], commit, work / "trees" / commit)
        log(f"replay at recorded commit {commit[:12]}: {', '.join(d.name for d in dirs)} with the kit and "
            f"notebooks of {tree}")
        # PYTHONPATH: that tree first, so `python -m kit` and the kernel (kernel_pythonpath) import its kit
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])}
        cmd = [sys.executable, "-m", "kit", "verify-evidence", "--replay", *map(str, dirs),
               "--work", str(work / "replays" / commit), *extra_args]
        done = subprocess.run(cmd, cwd=tree, env=env, check=False)
        status = max(status, done.returncode)
    return status
