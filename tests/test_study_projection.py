"""The link model of kit/study/projection.py: the fit recovers known compute times and efficiency,
validation sets predicted beside measured, and the projection of the full contract adds up."""

from __future__ import annotations

import pytest
from support.models import REPO

from kit.study.projection import fit_link, project_study, validate
from kit.study.schema import load_study_contract


def _points(c_dense=0.8, c_psgd=1.0, eff=0.9):
    out = []
    for rate in (1e9, 5e7, 1e8):
        for arm, nbytes, c in (("dense", 7e6, c_dense), ("powersgd", 1.9e6, c_psgd)):
            s = c + nbytes * 1.004 * 8 / (eff * rate)
            out.append({"arm": arm, "rate_bit": rate, "bytes_per_update": nbytes, "wire_overhead": 1.004,
                        "seconds_per_update": s})
    return out


def test_fit_recovers_compute_and_efficiency_and_predicts_held_out_rate():
    pts = _points()
    fit = fit_link(pts[:4])
    assert fit["compute_seconds"]["dense"] == pytest.approx(0.8) and fit["efficiency"] == pytest.approx(0.9)
    rows = validate(fit, pts[4:])
    assert all(abs(r["error_pct"]) < 1e-6 for r in rows)
    with pytest.raises(ValueError, match="unknowns"):
        fit_link(pts[:2])


def test_projection_of_the_full_contract_adds_up():
    c = load_study_contract(REPO / "contracts" / "shared-gradient.json").terms
    dense_b, psgd_b = 1_711_376_384 * 4, 60_000_000
    sc = project_study(c, single_compute_s=2.0, pair_compute_fraction=0.5, dense_bytes_per_update=dense_b,
                       powersgd_bytes_per_update=psgd_b, wire_overhead=1.0, efficiency=1.0, rate_bit=5e9,
                       rtt_s=0.0, collectives={"dense": 0, "powersgd": 0}, label="t")
    by = {r["arm"]: r for r in sc["rows"]}
    assert by["dense"]["seconds_per_update"] == pytest.approx(1.0 + dense_b * 8 / 5e9)
    # both ranks' bytes cross, each billed leaving one zone and entering the other
    gb = 128 * dense_b * 2 / 2**30
    assert by["dense"]["cross_zone_gb"] == pytest.approx(gb)
    assert by["dense"]["cross_zone_cost_usd"] == pytest.approx(gb * 0.01 * 2)
    assert sc["speed_screen"]["dense"] == "fail" and sc["study_hours"] == pytest.approx(
        sum(r["arm_hours"] for r in sc["rows"]))
