"""The report's per-family accuracy table (kit/evidence/report/accuracy.py), on the committed tiny evidence:
every cell equal to the sidecar of the run it names, the seed first, each model once per split."""

from __future__ import annotations

import json
from pathlib import Path

from kit.evidence.report.accuracy import accuracy_html
from kit.evidence.report.index import index
from kit.evidence.results import accuracy_models

REPO = Path(__file__).resolve().parents[1]
SELECTION = str(REPO / "runs" / "demo-*")


def _sidecar(run: str) -> dict | list:
    return json.loads((REPO / "runs" / run / "metrics" / "accuracy_by_family.json").read_text())


def test_every_cell_is_the_sidecar_of_the_run_it_names():
    idx = index(SELECTION)
    adaptive = next(r.contract_digest for r in idx.runs if r.run_id == "demo-adaptive-final-A")
    models = accuracy_models(idx, adaptive)
    finals = [m for m in models if m.split == "final"]
    assert [m.model for m in finals] == ["seed", "demo-adaptive-A3-migrated", "demo-adaptive-B-control",
                                            "demo-adaptive-B-growth"]
    for m in finals:
        side = "baseline" if m.model == "seed" else "candidate"
        acc = _sidecar(m.run)
        assert m.families == {f: (row[f"correct_{side}"], row["n"]) for f, row in acc.items()}
    # the A endpoint is also final-B's baseline: shown once, from final-A, which scored it first
    assert [m.run for m in finals if m.model == "demo-adaptive-A3-migrated"] == ["demo-adaptive-final-A"]
    study = next(r.contract_digest for r in idx.runs if r.run_id == "demo-study-evaluate")
    rows = accuracy_models(idx, study)
    # one kind of model: "seed" or the run that produced it (issue 64 item 6: the study's arm names)
    assert [m.model for m in rows] == ["seed", "demo-study-single", "demo-study-dense", "demo-study-powersgd"]
    assert {m.split for m in rows} == {"final"}
    for m in rows:
        arm = m.model.removeprefix("demo-study-")
        assert m.families == {x["family"]: (x["correct"], x["n"]) for x in _sidecar("demo-study-evaluate")
                                 if x["model"] == arm}


def test_one_table_per_contract_with_a_gate_or_screen_each_naming_its_contract():
    tables = accuracy_html(SELECTION)
    captions = [t.split("<caption>")[1].split("</caption>")[0] for t in tables]
    assert [c.split(" (")[0] for c in captions] == ["contracts/adaptive-shards.tiny.json",
                                                    "contracts/continued-learning.tiny.json",
                                                    "contracts/shared-gradient.tiny.json"]
    assert all('<a href="#run-demo-' in t for t in tables)  # the measuring runs link to their sections
