"""The study's cost, traffic and arm-against-arm retention as the report computes them
(kit/evidence/report/cost.py), on the committed medium evidence and on a copy with altered counters."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from kit.evidence.report.cost import GIB, NOT_MEASURED, measured_cost_rows, measured_totals, retention_pairs
from kit.stats import ratio_change_normal_upper

REPO = Path(__file__).resolve().parents[1]


def _measurement(run: str) -> dict:
    return json.loads((REPO / "runs" / run / "metrics" / "measurement.json").read_text())


def test_measured_cost_is_gpu_seconds_at_the_hardware_that_ran_every_attempt_included():
    rows = {(r["run"], r["kept as"] == "committed"): r for r in measured_cost_rows(REPO / "runs" / "medium-*")}
    single, psgd = _measurement("medium-study-single"), _measurement("medium-study-powersgd")
    p = rows[("medium-study-powersgd", True)]
    assert p["gpu_s_per_update"] == psgd["gpu_seconds_per_update"]
    assert p["gpu_s_per_update_vs_single"] == psgd["gpu_seconds_per_update"] / single["gpu_seconds_per_update"]
    assert p["speed_vs_single"] == psgd["active_tokens_per_s"] / single["active_tokens_per_s"]
    assert p["hardware"].startswith("NVIDIA H200") and p["price"].startswith("unpriced")
    # the H200 host's interface counters show no non-loopback byte: nothing is billed as crossing zones
    assert p["wire_GiB"] == NOT_MEASURED and p["cross_zone_billable_GiB"] == 0.0
    logical = json.loads((REPO / "runs/medium-study-powersgd/metrics/traffic_per_rank.json").read_text())
    assert p["logical_sent_GiB_all_ranks"] == sum(r["sent_bytes_total"] for r in logical) / GIB
    every = measured_cost_rows(REPO / "runs" / "medium-*")
    kept = {}
    for r in every:
        kept.setdefault(r["kept as"], set()).add(r["arm"])
    # every sitting's attempts are counted: the first campaign's superseded arms, and the 2026-12-02
    # sitting's arms on the next seed, kept in its folder
    assert kept == {"committed": {"single", "dense", "powersgd"},
                    "superseded (medium-campaign-2026-12-01/study-superseded)": {"single", "dense"},
                    "superseded (medium-campaign-2026-12-02/runs)": {"single", "dense", "powersgd"}}
    totals = measured_totals(every)
    assert totals["attempts"] == 8 and totals["gpu_seconds_all_attempts"] == sum(r["gpu_seconds"] for r in every)


def test_wire_traffic_is_the_interface_counters_where_they_counted_bytes(tmp_path):
    runs = tmp_path / "runs"
    for d in (REPO / "runs").glob("medium-*"):
        shutil.copytree(d, runs / d.name)
    screens = runs / "medium-campaign-2026-12-01-b" / "study" / "screens.json"
    obj = json.loads(screens.read_text())
    dense = next(a for a in obj["arms"] if a["arm"] == "dense")
    dense["interfaces"]["non_loopback"] = {"rx_bytes": 3 * GIB, "tx_bytes": GIB}
    screens.write_text(json.dumps(obj))
    row = next(r for r in measured_cost_rows(runs / "medium-*") if r["run"] == "medium-study-dense"
               and r["kept as"] == "committed")
    assert row["wire_GiB"] == row["cross_zone_billable_GiB"] == 4.0


def test_retention_arm_against_arm_is_paired_with_both_bounds():
    pairs = {p["comparison"]: p for p in retention_pairs(REPO / "runs" / "medium-*")}
    models = REPO / "runs/medium-campaign-2026-12-01-b/study/evaluation/models"
    psgd, dense = (json.loads((models / f"{m}.json").read_text())["retention"] for m in ("powersgd", "dense"))
    by_id = {x["id"]: x for x in dense}
    d = [x["nll_sum"] - by_id[x["id"]]["nll_sum"] for x in psgd]
    t = [x["tokens"] for x in psgd]
    ratio, upper = ratio_change_normal_upper(d, t, 1.959963984540054)
    p = pairs["powersgd vs dense"]
    assert abs(p["change_nats_per_token"] - ratio) < 1e-15 and abs(p["upper_95"] - upper) < 1e-15
    assert abs((p["change_nats_per_token"] - p["lower_95"]) - (upper - ratio)) < 1e-15
    assert p["lower_95"] > 0 and p["reading"] == "powersgd worse than dense"
    assert set(pairs) == {"powersgd vs dense", "powersgd vs single", "dense vs single"}
