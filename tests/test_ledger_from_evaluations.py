"""tools/ledger_from_evaluations.py: the exposures of committed final evaluations, rebuilt from their ids,
checked against the role digests their runs recorded, and refused (nothing written) when they differ."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from kit.evidence.ledger import read_ledger

REPO = Path(__file__).resolve().parents[1]
CAMPAIGN = REPO / "runs" / "medium-campaign-2026-12-01" / "adaptive"
TOOL = REPO / "tools" / "ledger_from_evaluations.py"


def run_tool(ledger: Path, *pairs: str) -> subprocess.CompletedProcess:
    args = [a for p in pairs for a in ("--run", p)]
    return subprocess.run([sys.executable, str(TOOL), "--ledger", str(ledger), *args], capture_output=True,
                          text=True, cwd=REPO, check=False)


def test_the_medium_finals_are_rebuilt_and_recorded_once_per_contract(tmp_path):
    demo = [e for e in read_ledger(REPO / "ledger" / "exposed.jsonl") if e["run"].startswith("demo-")]
    ledger = tmp_path / "exposed.jsonl"
    ledger.write_bytes(b"".join(json.dumps(e, sort_keys=True, separators=(",", ":")).encode() + b"\n" for e in demo))
    pairs = [f"runs/medium-adaptive-final-{x}={CAMPAIGN / f'final-{x}.json'}" for x in "ABG"]
    done = run_tool(ledger, *pairs)
    assert done.returncode == 0, done.stderr
    # A opened the 1,024 tasks and 512 conversations; B and G scored the same finals of the same contract
    assert [r["new_entries"] for r in json.loads(done.stdout)["runs"]] == [1536, 0, 0]
    entries = read_ledger(ledger)
    medium = entries[len(demo):]
    assert {e["run"] for e in medium} == {"medium-adaptive-final-A"} and len(medium) == 1536
    assert {e["kind"] for e in medium} == {"final.task", "final.retention"}
    # the committed ledger's adaptive medium lines are exactly these (the study's evaluation, a later
    # sitting, recorded its own exposures on the host: the lines after them)
    committed = [e for e in read_ledger(REPO / "ledger" / "exposed.jsonl") if e["run"].startswith("medium-adaptive-")]
    assert committed == medium
    # a conversation the demo had opened gets the same content digest the demo's scoring recorded
    by_demo = {e["id"]: e["digest"] for e in demo if e["kind"] != "final.task"}
    shared = [e for e in medium if e["id"] in by_demo]
    assert len(shared) == 40 and all(e["digest"] == by_demo[e["id"]] for e in shared)


def test_an_evaluation_whose_ids_do_not_rebuild_its_roles_is_refused(tmp_path):
    ev = json.loads((CAMPAIGN / "final-A.json").read_text())
    ev["retention"][0], ev["retention"][1] = ev["retention"][1], ev["retention"][0]  # another order, other bytes
    bad = tmp_path / "final-A.json"
    bad.write_text(json.dumps(ev))
    ledger = tmp_path / "exposed.jsonl"
    shutil.copyfile(REPO / "ledger" / "exposed.jsonl", ledger)
    before = ledger.read_bytes()
    done = run_tool(ledger, f"runs/medium-adaptive-final-B={CAMPAIGN / 'final-B.json'}",
                    f"runs/medium-adaptive-final-A={bad}")
    assert done.returncode == 2
    assert "the retention rebuilt from its ids hash to" in done.stderr and "nothing was written" in done.stderr
    assert ledger.read_bytes() == before  # the good pair before it was not written either
