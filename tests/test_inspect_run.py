"""kit.evidence.inspect and notebooks/90_inspect_failed_arm.ipynb on committed evidence: a completed
notebook run (its store is not committed: curves and last commit from the sidecars), the failed GPU
campaign (a kit-bench/1 record, not canonical JSON, which verify-evidence accepts) and a benchmark."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.evidence import evidence_path

from kit import (
    inspect_run,  # the public name, as notebooks/90 calls it: it registers the experiments' readers
)
from kit.evidence.inspect import InspectError
from kit.evidence.verify import verify_evidence

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "runs"
# FAILED is archived (runs/archive/): inspected and verified in its unpacked folder, as `kit inspect` reads it
COMPLETED, FAILED, BENCH = "demo-adaptive-A2-control", "adaptive-gpu-campaign-x2-2026-11-30", "bench-update-2026-11-29"


def test_a_completed_run_without_its_store_falls_back_to_the_committed_sidecars(tmp_path, monkeypatch):
    # The run's store paths are relative to the folder it ran in, the repository root; after the README's
    # `make demo` there, demo-out/ holds such a store and would be found. From an empty folder none is.
    monkeypatch.chdir(tmp_path)
    found = inspect_run(RUNS, COMPLETED)
    sidecar = json.loads((RUNS / COMPLETED / "metrics" / "loss_curves.json").read_text())
    commits = json.loads((RUNS / COMPLETED / "metrics" / "commits.json").read_text())
    assert (found["kind"], found["status"], found["error"]) == ("notebook", "completed", None)
    assert found["curves_source"] == "sidecar" and found["curves"] == sidecar and len(sidecar) == 8
    last = found["last_commit"]
    assert last["source"] == "sidecar" and last["full_root"] == commits["rows"][-1][commits["columns"].index("full_root")]
    assert found["bound"]["parameter COHORT"] == '"A"'


def test_an_evaluation_run_shows_its_evaluation_sidecars():
    found = inspect_run(RUNS, "demo-adaptive-final-A")
    gates = json.loads((RUNS / "demo-adaptive-final-A" / "metrics" / "gates.json").read_text())
    assert found["evaluation"]["gates"] == gates and "nll_change_bounds" in found["evaluation"]


def test_the_failed_gpu_campaign_record_is_read_as_verify_evidence_reads_it():
    assert verify_evidence(evidence_path(FAILED))["ok"]  # accepted there, though not canonical JSON
    found = inspect_run(RUNS, FAILED)
    rec = json.loads((evidence_path(FAILED) / "run.json").read_text())
    assert (found["kind"], found["status"]) == ("benchmark", "failed")
    assert found["error"]["errors"] == rec["errors"] and found["reason"] == rec["errors"][0]["error"]
    assert found["summary"]["device"] == "2 x NVIDIA H200"
    assert found["raw_output"] and all(found["raw_output"].values())


def test_a_benchmark_record_and_a_missing_run():
    found = inspect_run(RUNS, BENCH)
    assert (found["kind"], found["status"], found["error"]) == ("benchmark", "completed", None)
    assert found["raw_output"] == {"update_throughput.jsonl": True}
    with pytest.raises(InspectError, match=r"no-such-run/run\.json: no such run record .*set RUNS_DIR"):
        inspect_run(RUNS, "no-such-run")


@pytest.mark.parametrize("run_id", [COMPLETED, FAILED, BENCH])
def test_the_notebook_inspects_a_committed_run_into_another_folder(run_id, tmp_path):
    from kit.evidence.runner import run_notebook

    out = tmp_path / "inspections"
    record = run_notebook(REPO / "notebooks" / "90_inspect_failed_arm.ipynb",
                          {"RUN_ID": run_id, "RUNS_DIR": str(RUNS), "OUT_DIR": str(tmp_path / "files")},
                          "inspect", out)
    assert (record.status, record.error) == ("completed", None)
    written = json.loads((tmp_path / "files" / f"{run_id}.inspection.json").read_text())
    assert written == json.loads(json.dumps(inspect_run(RUNS, run_id)))
    assert json.loads((out / "inspect" / "metrics" / "inspected.json").read_text())["status"] == written["status"]
    assert not (RUNS / "inspect").exists()  # nothing written into the folder it read
    if run_id == FAILED:  # every failed phase's cause in full, not cut by the table's column width
        executed = json.loads((out / "inspect" / "90_inspect_failed_arm.ipynb").read_text())
        shown = "".join("".join(o.get("text", "")) for c in executed["cells"] for o in c.get("outputs", []))
        for entry in json.loads((evidence_path(FAILED) / "run.json").read_text())["errors"]:
            assert f"{entry['phase']} ({entry['status']}): {entry['error']}" in shown, entry


def test_store_and_sidecar_draw_the_same_panels_in_the_same_order(tmp_path, monkeypatch):
    """Issue 52, item 12: the curves read from a store (the sidecar writer's dict order) and from the committed
    sidecar (canonical JSON, keys sorted) came out in different orders, so the panels moved."""
    from kit.evidence.inspect import PANEL_ORDER

    sidecar = json.loads((RUNS / COMPLETED / "metrics" / "loss_curves.json").read_text())
    monkeypatch.chdir(tmp_path)
    from_sidecar = inspect_run(RUNS, COMPLETED)
    assert from_sidecar["curves_source"] == "sidecar"
    # the run's store, where its parameters name it (relative to where it ran), holding the same updates
    params = json.loads((RUNS / COMPLETED / "run.json").read_text())["parameters"]
    log = tmp_path / params["HOME"] / "attempts" / "20261203T000000-00000000" / "updates.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text("".join(json.dumps({"cohort": params["COHORT"], "cohort_step": r["update"], "step": r["update"],
                                       "ce_sum": 1.0, "tokens": 9, **{k: v for k, v in r.items() if k != "update"}},
                                      sort_keys=True) + "\n" for r in sidecar))
    from_store = inspect_run(RUNS, COMPLETED)
    assert from_store["curves_source"] == "store"
    assert from_store["curves"] == from_sidecar["curves"] == sidecar  # the same fields and values
    order = [list(r) for r in from_store["curves"]]
    assert order == [list(r) for r in from_sidecar["curves"]]
    assert order[0] == [k for k in PANEL_ORDER if k in sidecar[0]] and order[0][:2] == ["update", "objective"]


def test_the_experiments_register_their_store_readers_and_evidence_imports_neither():
    """kit/evidence stands below the experiments (tests/test_layers.py): the run inspection reads a store
    through the readers kit.adaptive and kit.study register, asked in the order of their names."""
    code = ("import sys, kit.evidence.inspect as i\n"
            "try:\n    i._readers()\nexcept RuntimeError as e:\n    print('refused:', e)\n"
            "assert not any(m.startswith(('kit.adaptive', 'kit.study')) for m in sys.modules)\n"
            "import kit.study, kit.adaptive\n"
            "print([r.name for r in i._readers()])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert out.splitlines() == [("refused: no experiment has registered its store reader: call kit.inspect_run, or "
                                 "import kit.adaptive and kit.study before kit.evidence.inspect.inspect_run"),
                                "['adaptive', 'study']"]
