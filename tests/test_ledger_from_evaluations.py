"""tools/ledger_from_evaluations.py: the exposures of committed final evaluations, rebuilt from their ids,
checked against the role digests their runs recorded, refused (nothing written) when they differ, and
marked as rebuilt, in the tool's output and in the committed ledger; readers refuse a malformed mark. The
evaluations rebuilt are the first medium campaign's (runs/medium-campaign-2026-12-01, seed 800112e3), paired with
that campaign's run records, which now lie in runs/medium-superseded-seed-800112e3 (the re-run's took runs/medium-*)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.evidence import evidence_path

from kit.evidence.ledger import LedgerError, read_ledger

REPO = Path(__file__).resolve().parents[1]
CAMPAIGN = evidence_path("medium-campaign-2026-12-01") / "adaptive"
OLD = "runs/medium-superseded-seed-800112e3"  # the run records of the campaign above
TOOL = REPO / "tools" / "ledger_from_evaluations.py"


def run_tool(ledger: Path, *pairs: str) -> subprocess.CompletedProcess:
    args = [a for p in pairs for a in ("--run", p)]
    return subprocess.run([sys.executable, str(TOOL), "--ledger", str(ledger), *args], capture_output=True,
                          text=True, cwd=REPO, check=False)


def test_the_medium_finals_are_rebuilt_and_recorded_once_per_contract(tmp_path):
    demo = [e for e in read_ledger(REPO / "ledger" / "exposed.jsonl") if e["run"].startswith("demo-")]
    ledger = tmp_path / "exposed.jsonl"
    ledger.write_bytes(b"".join(json.dumps({**e, "format": "kit-exposure/1"}, sort_keys=True,  # as /1 lines,
                                           separators=(",", ":")).encode() + b"\n" for e in demo))  # either form
    pairs = [f"{OLD}/medium-adaptive-final-{x}={CAMPAIGN / f'final-{x}.json'}" for x in "ABG"]
    done = run_tool(ledger, *pairs)
    assert done.returncode == 0, done.stderr
    # A opened the 1,024 tasks and 512 conversations; B and G scored the same finals of the same contract
    assert [r["new_entries"] for r in json.loads(done.stdout)["runs"]] == [1536, 0, 0]
    entries = read_ledger(ledger)
    medium = entries[len(demo):]
    assert {e["run"] for e in medium} == {"medium-adaptive-final-A"} and len(medium) == 1536
    assert {e["kind"] for e in medium} == {"final.task", "final.retention"}
    # each rebuilt line says so: the tool, and the evaluation record it was rebuilt from, by path and bytes
    final_a = CAMPAIGN / "final-A.json"
    recorded = json.loads((evidence_path(OLD[5:], "medium-adaptive-final-A") / "metrics" / "evaluation_file.json").read_text())
    assert hashlib.sha256(final_a.read_bytes()).hexdigest() == recorded["sha256"]
    assert all(e["rebuilt"] == {"by": "tools/ledger_from_evaluations.py",
                                "evaluation": "runs/medium-campaign-2026-12-01/adaptive/final-A.json",
                                "evaluation_sha256": recorded["sha256"]} for e in medium)
    # the committed ledger's adaptive medium lines of that campaign's contract are exactly these (the study's
    # evaluation, a later sitting, and the re-run's scorings, under the re-run's contracts, recorded their own
    # exposures on the host: the lines after them)
    old_contract = json.loads((evidence_path(OLD[5:], "medium-adaptive-final-A") / "run.json").read_text())["contract_digest"]
    assert {e["contract_digest"] for e in medium} == {old_contract}

    def first_campaigns(e):
        return e["run"].startswith("medium-adaptive-") and e["contract_digest"] == old_contract

    committed = [e for e in read_ledger(REPO / "ledger" / "exposed.jsonl") if first_campaigns(e)]
    def fields(rows):  # the same entries in either form (the committed ledger's /1 lines, the tool's /2 event)
        return [{k: v for k, v in e.items() if k != "format"} for e in rows]

    assert fields(committed) == fields(medium)
    # the other adaptive medium lines are the later campaigns' own scorings: the re-run on the seed d1749707
    # (its records now in runs/medium-superseded-seed-d1749707) and the one on af103c8d (runs/medium-adaptive-final-A)
    reruns = {json.loads((evidence_path(d, "medium-adaptive-final-A") / "run.json").read_text())["contract_digest"]
              for d in ("medium-superseded-seed-d1749707", ".")}
    assert len(reruns) == 2 and old_contract not in reruns
    assert {e["contract_digest"] for e in read_ledger(REPO / "ledger" / "exposed.jsonl")
            if e["run"].startswith("medium-adaptive-") and not first_campaigns(e)} == reruns
    # and no line a scoring wrote itself carries the mark
    assert not [e for e in read_ledger(REPO / "ledger" / "exposed.jsonl") if "rebuilt" in e and not first_campaigns(e)]
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
    done = run_tool(ledger, f"{OLD}/medium-adaptive-final-B={CAMPAIGN / 'final-B.json'}",
                    f"{OLD}/medium-adaptive-final-A={bad}")
    assert done.returncode == 2
    assert "the retention rebuilt from its ids hash to" in done.stderr and "nothing was written" in done.stderr
    assert ledger.read_bytes() == before  # the good pair before it was not written either


@pytest.mark.parametrize("marker", [True, {"by": "tool"}, {"by": "tool", "evaluation": "e.json",
                                                           "evaluation_sha256": "not hex"}])
def test_a_malformed_rebuilt_mark_is_refused_naming_the_line(marker, tmp_path):
    line = {**read_ledger(REPO / "ledger" / "exposed.jsonl")[0], "format": "kit-exposure/1"}  # either form
    ledger = tmp_path / "exposed.jsonl"
    ledger.write_text(json.dumps(line) + "\n" + json.dumps({**line, "rebuilt": marker}) + "\n")
    with pytest.raises(LedgerError, match=re.escape(f"{ledger}:2: field 'rebuilt' is ") + ".*expected an object"):
        read_ledger(ledger)
