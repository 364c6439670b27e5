"""docs/formats/selection-records.md's verification procedure of a final evaluation (kit/evidence/final_verification.py):
it completes on a full set of files, fails at the step whose file was altered, completes on the committed
demo evidence (the files its runs keep in files/) and fails there when one of them is altered or gone, and
runs to its end on the committed medium evidence, naming what the repository does not hold."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from support.evidence import evidence_path

from kit.evidence.final_verification import final_scoring_files, verify_final_scoring

REPO = Path(__file__).resolve().parents[1]
ROOT, OTHER = "a" * 64, "b" * 64


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _files(tmp: Path) -> dict:
    prep = tmp / "prepared.json"
    prep.write_text('{"job": 1}')
    sel = tmp / "selection.json"
    sel.write_text(json.dumps({"prepared_digest": _sha(prep), "candidates": {
        "A": {"full_root": ROOT, "baseline": {"kind": "seed", "parameter_digest": "c" * 64}}}}))
    ev = tmp / "final-A.json"
    ev.write_text(json.dumps({"candidate": ROOT, "baseline": "seed:build/seed", "split": "final"}))
    (tmp / "selections.jsonl").write_text(json.dumps({"sha256": _sha(sel)}) + "\n")
    (tmp / "final-evaluations.jsonl").write_text(json.dumps({"evaluation": str(ev), "sha256": _sha(ev)}) + "\n")
    (tmp / "final-access.jsonl").write_text(json.dumps({"allowed": False, "selection": None}) + "\n"
                                           + json.dumps({"allowed": True, "selection_sha256": _sha(sel)}) + "\n")
    return {"selection": sel, "prepared": prep, "evaluation": ev, "selection_sha256": _sha(sel),
            "evaluation_sha256": _sha(ev), **{n: tmp / n for n in
                                              ("selections.jsonl", "final-evaluations.jsonl", "final-access.jsonl")}}


def test_the_procedure_completes_on_a_full_set_of_files(tmp_path):
    out = verify_final_scoring(_files(tmp_path))
    assert out.complete and [s.result for s in out.steps] == ["pass"] * 5 and out.missing == []


@pytest.mark.parametrize("alter, step", [
    ("prepared", "prepared digest"), ("selections", "selection listed"), ("access", "access allowed"),
    ("candidate", "candidate bound"), ("evaluations", "evaluation logged")])
def test_each_step_fails_on_the_file_it_checks(alter, step, tmp_path):
    f = _files(tmp_path)
    if alter == "prepared":
        f["prepared"].write_text('{"job": 2}')
    elif alter == "selections":
        f["selections.jsonl"].write_text(json.dumps({"sha256": "0" * 64}) + "\n")
    elif alter == "access":
        f["final-access.jsonl"].write_text(json.dumps({"allowed": False, "selection_sha256": f["selection_sha256"]}))
    elif alter == "candidate":
        f["evaluation"].write_text(json.dumps({"candidate": OTHER, "baseline": "seed:build/seed"}))
        f["evaluation_sha256"] = _sha(f["evaluation"])
        f["final-evaluations.jsonl"].write_text(json.dumps({"sha256": f["evaluation_sha256"]}) + "\n")
    else:
        f["final-evaluations.jsonl"].write_text("")
    out = verify_final_scoring(f)
    assert not out.complete
    assert [s.step for s in out.steps if s.result != "pass"] == [step]


DEMO_FINALS = {"demo-adaptive-final-A": "demo-adaptive-select", "demo-adaptive-final-B": "demo-adaptive-select",
               "demo-adaptive-final-G": "demo-adaptive-select", "demo-continued-final-C": "demo-continued-select"}


@pytest.mark.parametrize("run", sorted(DEMO_FINALS))
def test_the_procedure_completes_on_the_committed_demo_evidence(run):
    """Every step passes on the committed files, and each file is the copy the evaluation run or its
    selection run keeps, not one found elsewhere by name."""
    files = final_scoring_files(REPO / "runs", run)
    out = verify_final_scoring(files)
    assert out.complete, out.steps
    assert [s.result for s in out.steps] == ["pass"] * 5 and out.missing == []
    runs = REPO / "runs"
    for key, kept_by in (("selection", DEMO_FINALS[run]), ("prepared", DEMO_FINALS[run]),
                         ("selections.jsonl", DEMO_FINALS[run]), ("evaluation", run),
                         ("final-access.jsonl", run), ("final-evaluations.jsonl", run)):
        assert Path(files[key]).parent == runs / kept_by / "files", key


def _flip_allowed(text: str) -> str:
    return text.replace('"allowed":true', '"allowed":false')


@pytest.mark.parametrize("path, change, failing", [
    ("demo-adaptive-select/files/prepared.json", lambda t: t + " ", [("prepared digest", "fail")]),
    # the access line names the selection by its sha256 too, so both steps that hash the record fail
    ("demo-adaptive-select/files/selection.json", lambda t: t + "\n",
     [("selection listed", "fail"), ("access allowed", "fail")]),
    ("demo-adaptive-select/files/selections.jsonl", None, [("selection listed", "missing")]),
    ("demo-adaptive-final-A/files/final-A.json", lambda t: t.replace('"split":"final"', '"split":"dev"'),
     [("evaluation logged", "fail")]),
    ("demo-adaptive-final-A/files/final-access.jsonl", _flip_allowed, [("access allowed", "fail")]),
    ("demo-adaptive-final-A/files/final-evaluations.jsonl", None, [("evaluation logged", "missing")])])
def test_an_altered_or_missing_demo_file_is_caught(path, change, failing, tmp_path):
    """The committed selection run and one final run, copied, with one of their kept files altered or
    removed: the steps that read it, and only those, no longer pass."""
    for run in ("demo-adaptive-select", "demo-adaptive-final-A"):
        shutil.copytree(REPO / "runs" / run, tmp_path / run)
    target = tmp_path / path
    before = target.read_text()
    if change is None:
        target.unlink()
    else:
        assert change(before) != before  # the alteration changes the bytes
        target.write_text(change(before))
    out = verify_final_scoring(final_scoring_files(tmp_path, "demo-adaptive-final-A"))
    assert not out.complete
    assert [(s.step, s.result) for s in out.steps if s.result != "pass"] == failing


def test_the_procedure_runs_to_its_end_on_the_committed_medium_evidence(tmp_path):
    """The first medium campaign (seed 800112e3) brought back the selection and evaluation records (not yet
    the logs: the campaign script brings them back from its next sitting on), so the binding of candidate and
    baseline checks and the other steps name the file they lack. Its run records now lie in
    runs/medium-superseded-seed-800112e3 (the re-run's took runs/medium-*); laid out again as they stood,
    beside every evidence folder the repository holds, they are looked up as before."""
    from kit.evidence.run_index import evidence_folders

    old = evidence_path("medium-superseded-seed-800112e3")
    runs = tmp_path / "runs"
    for d in old.glob("medium-*"):
        shutil.copytree(d, runs / d.name)
    for d in evidence_folders(REPO / "runs"):
        if d != old:
            shutil.copytree(d, runs / d.name)
    medium = verify_final_scoring(final_scoring_files(runs, "medium-adaptive-final-A"))
    results = {s.step: s.result for s in medium.steps}
    assert results == {"selection listed": "missing", "prepared digest": "missing", "evaluation logged": "missing",
                       "candidate bound": "pass", "access allowed": "missing"}
    assert medium.missing == ["selections.jsonl", "prepared.json", "final-evaluations.jsonl", "final-access.jsonl"]
