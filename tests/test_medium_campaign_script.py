"""bench/medium_campaign.sh's `follow` and `pack` on a host folder with no campaign running: it returns at
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
    (checkout / "bench").mkdir(parents=True)
    shutil.copy(REPO / "bench" / "medium_campaign.sh", checkout / "bench")
    w = checkout / "build" / "medium"
    (w / "runs" / "medium-seed").mkdir(parents=True)
    (w / "runs" / "medium-seed" / "run.json").write_text("{}")
    (w / "ledger").mkdir()
    (w / "ledger" / "exposed.jsonl").write_text("")
    (w / "work" / "adaptive").mkdir(parents=True)
    (w / "work" / "adaptive" / "final-A.json").write_text("{}")
    (w / "campaign.log").write_text("medium-seed: completed in 1.0 s\n")
    out = tmp_path / "out"
    for pid in (None, "999999999"):  # no pid file; a pid that names no process
        if pid:
            (w / "campaign.pid").write_text(pid)
        t0 = time.monotonic()
        done = subprocess.run(["bash", str(checkout / "bench" / "medium_campaign.sh"), "follow", "120"],
                              env={"PATH": "/usr/bin:/bin", "OUT": str(out)}, capture_output=True, text=True,
                              check=True)
        assert time.monotonic() - t0 < 30 and "no campaign process running" in done.stdout
        assert "medium-seed: completed in 1.0 s" in done.stdout
    with tarfile.open(out / "medium-evidence.tgz") as tar:
        names = set(tar.getnames())
    assert {"runs/medium-seed/run.json", "ledger/exposed.jsonl", "work/adaptive/final-A.json",
            "campaign.log"} <= names
    assert (out / "campaign.log").read_text() == "medium-seed: completed in 1.0 s\n"
