"""campaigns/exposure_sensitivity.py on the committed medium evidence: the items another contract opened first
are found through the ledger, and the recomputed recorded gates equal the runs' own gates.json. The evaluations
of runs/medium-campaign-2026-12-01 belong to the first campaign's finals (seed 800112e3), whose records were
moved unchanged into runs/medium-superseded-seed-800112e3 when the re-run's records took runs/medium-*."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.evidence import evidence_path

from kit.digest import load_json_strict

REPO = Path(__file__).resolve().parents[1]
OLD = "runs/medium-superseded-seed-800112e3"  # the first campaign's run records, beside its working files


def test_sensitivity_finds_the_demo_exposed_conversations_and_recomputes_the_recorded_gates():
    pairs = [f"{OLD}/medium-adaptive-final-{x}=runs/medium-campaign-2026-12-01/adaptive/final-{x}.json" for x in "AG"]
    done = subprocess.run([sys.executable, "-m", "campaigns.exposure_sensitivity", *pairs], capture_output=True, text=True,
                          cwd=REPO, check=True)
    rows = {r["run"]: r for r in json.loads(done.stdout)}
    for x in "AG":
        r = rows[f"medium-adaptive-final-{x}"]
        assert len(r["opened_before_by_another_contract"]["retention"]) == 40
        assert r["opened_before_by_another_contract"]["tasks"] == [] and r["kept"] == {"tasks": 1024, "retention": 472}
        recorded = load_json_strict(evidence_path(OLD[5:], f"medium-adaptive-final-{x}") / "metrics" / "gates.json")
        for name in ("gain", "retention"):
            assert r["gates_recorded"][name]["upper"] == recorded[name]["upper"]
            assert r["gates_recorded"][name]["passed"] == r["gates_without_them"][name]["passed"] == recorded[name]["passed"]
    committed = json.loads((evidence_path("medium-campaign-2026-12-01") / "exposure-sensitivity.json").read_text())
    assert [c for c in committed if c["run"] in rows] == list(rows.values())
