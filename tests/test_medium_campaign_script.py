"""campaigns/medium_campaign.sh's `follow` and `pack` on a host folder with no campaign running: it returns at
once (a missing or stale pid once made it wait out a whole device call) and packs what is there."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_follow_returns_at_once_without_a_campaign_and_packs_the_evidence(tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "campaigns").mkdir(parents=True)
    shutil.copy(REPO / "campaigns" / "medium_campaign.sh", checkout / "campaigns")
    w = checkout / "build" / "medium"
    (w / "runs" / "medium-seed").mkdir(parents=True)
    (w / "runs" / "medium-seed" / "run.json").write_text("{}")
    (w / "ledger").mkdir()
    (w / "ledger" / "exposed.jsonl").write_text("")
    (w / "work" / "adaptive").mkdir(parents=True)
    (w / "work" / "adaptive" / "final-A.json").write_text("{}")
    host_logs = ["work/adaptive/prepared/prepared.json", "work/adaptive/prepared/selections.jsonl",
                 "work/adaptive/prepared/final-access.jsonl", "work/adaptive/prepared/final-evaluations.jsonl",
                 "work/adaptive/A3/attempts/0001/updates.jsonl", "work/study/arms/dense/arm.json",
                 "work/study/arms/dense/attempts/001.json"]
    for name in [*host_logs, "work/adaptive/A3/objects/ab/cd", "work/adaptive/prepared/roles/tasks.json"]:
        (w / name).parent.mkdir(parents=True, exist_ok=True)
        (w / name).write_text("{}\n")
    (w / "campaign.log").write_text("medium-seed: completed in 1.0 s\n")
    out = tmp_path / "out"
    for pid in (None, "999999999"):  # no pid file; a pid that names no process
        if pid:
            (w / "campaign.pid").write_text(pid)
        t0 = time.monotonic()
        done = subprocess.run(["bash", str(checkout / "campaigns" / "medium_campaign.sh"), "follow", "120"],
                              env={"PATH": "/usr/bin:/bin", "OUT": str(out)}, capture_output=True, text=True,
                              check=True)
        assert time.monotonic() - t0 < 30 and "no campaign process running" in done.stdout
        assert "medium-seed: completed in 1.0 s" in done.stdout
    with tarfile.open(out / "medium-evidence.tgz") as tar:
        names = set(tar.getnames())
    assert {"runs/medium-seed/run.json", "ledger/exposed.jsonl", "work/adaptive/final-A.json",
            "campaign.log", *host_logs} <= names
    assert not any("objects" in n or "roles" in n for n in names)  # no checkpoint bytes, no role data
    assert (out / "campaign.log").read_text() == "medium-seed: completed in 1.0 s\n"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout.strip()


def test_sync_brings_a_stale_host_git_to_the_carried_commit_clean(tmp_path):
    """`make medium-bundle` carries the last commit as a shallow bare repository (the whole history no
    longer fit in a call); `sync` on a host copy whose .git holds unrelated history makes HEAD that commit,
    with a clean status, so that the host's run records name it with dirty: false."""
    here = tmp_path / "here"
    (here / "campaigns").mkdir(parents=True)
    shutil.copy(REPO / "campaigns" / "medium_campaign.sh", here / "campaigns")
    (here / ".gitignore").write_text("build/\n")
    _git(here, "init", "-q")
    for n in range(3):  # history the host must not need
        (here / "notes.txt").write_text(f"version {n}\n")
        _git(here, "add", "-A")
        _git(here, "commit", "-q", "-m", f"commit {n}")
    head = _git(here, "rev-parse", "HEAD")
    subprocess.run(["make", "-f", str(REPO / "Makefile"), "-C", str(here), "medium-bundle"], check=True,
                   capture_output=True)
    assert _git(here / "build" / "bundle" / "head.git", "rev-list", "--count", "HEAD") == "1"

    host = tmp_path / "host"  # the device copy: the working tree, the carried build/, a stale .git
    shutil.copytree(here, host, ignore=shutil.ignore_patterns(".git"))
    _git(host, "init", "-q")
    _git(host, "commit", "-q", "--allow-empty", "-m", "stale")
    done = subprocess.run(["bash", str(host / "campaigns" / "medium_campaign.sh"), "sync"], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, check=False)
    assert done.returncode == 0, done.stderr
    assert _git(host, "rev-parse", "HEAD") == head
    assert _git(host, "status", "--porcelain") == ""
    assert (host / "build" / "medium" / "base-commit").read_text().strip() == head

    bare = tmp_path / "bare-host"  # a device copy that has no .git at all
    shutil.copytree(here, bare, ignore=shutil.ignore_patterns(".git"))
    done = subprocess.run(["bash", str(bare / "campaigns" / "medium_campaign.sh"), "sync"], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, check=False)
    assert done.returncode == 0, done.stderr
    assert _git(bare, "rev-parse", "HEAD") == head and _git(bare, "status", "--porcelain") == ""

    (host / "notes.txt").write_text("edited on the host\n")  # a tree that is not the carried commit: refused
    refused = subprocess.run(["bash", str(host / "campaigns" / "medium_campaign.sh"), "sync"], capture_output=True,
                             text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, check=False)
    assert refused.returncode == 2 and "notes.txt" in refused.stderr
