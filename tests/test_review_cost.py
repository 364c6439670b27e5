"""The study's cost, traffic and arm-against-arm retention as the report computes them
(kit/evidence/report/cost.py), on the committed medium evidence (the re-run on seed af103c8d, one H200;
earlier campaigns' records kept in runs/medium-superseded-seed-800112e3 and -d1749707) and on a copy with altered
counters."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from support.evidence import evidence_path

from kit.evidence.report.cost import GIB, NOT_MEASURED, measured_cost_rows, measured_totals, retention_pairs
from kit.evidence.run_index import evidence_folders, logical_path
from kit.stats import ratio_change_normal_upper

REPO = Path(__file__).resolve().parents[1]
OLD = evidence_path("medium-superseded-seed-800112e3")  # the first medium campaign's records, same run ids


def _measurement(run: str) -> dict:
    return json.loads((REPO / "runs" / run / "metrics" / "measurement.json").read_text())


def _screens_of(runs: Path, run: str) -> Path:
    """The one screens.json under the campaign folders beside `runs` that was written under the contract
    the committed arm run `run` recorded (its study's own screens)."""
    digest = json.loads((runs / run / "run.json").read_text())["contract_digest"]
    campaigns = [d for d in evidence_folders(runs) if d.name.startswith("medium-campaign-")]
    found = [p for d in campaigns for p in sorted(d.rglob("screens.json"))
             if json.loads(p.read_text()).get("contract_digest") == digest]
    assert len(found) == 1, found
    return found[0]


def test_measured_cost_is_gpu_seconds_at_the_hardware_that_ran_every_attempt_included():
    rows = {(r["run"], r["kept as"] == "committed"): r
            for r in (x.table_row() for x in measured_cost_rows(REPO / "runs" / "medium-*"))}  # the table's rows
    single, psgd = _measurement("medium-study-single"), _measurement("medium-study-powersgd")
    p = rows[("medium-study-powersgd", True)]
    assert p["gpu_s_per_update"] == psgd["gpu_seconds_per_update"]
    assert p["gpu_s_per_update_vs_single"] == psgd["gpu_seconds_per_update"] / single["gpu_seconds_per_update"]
    assert p["speed_vs_single"] == psgd["active_tokens_per_s"] / single["active_tokens_per_s"]
    assert p["hardware"].startswith("NVIDIA H200") and p["price"].startswith("unpriced")
    # the H200 host's interface counters show no non-loopback byte: nothing is billed as crossing zones
    screens = json.loads(_screens_of(REPO / "runs", "medium-study-powersgd").read_text())
    counted = next(a for a in screens["arms"] if a["arm"] == "powersgd")["interfaces"]["non_loopback"]
    assert counted["rx_bytes"] + counted["tx_bytes"] == 0
    assert p["interface counters"] != "none kept for this attempt"  # the counters were kept, and counted 0
    assert p["wire_GiB"] == NOT_MEASURED and p["cross_zone_billable_GiB"] == 0.0
    logical = json.loads((REPO / "runs/medium-study-powersgd/metrics/traffic_per_rank.json").read_text())
    assert p["logical_sent_GiB_all_ranks"] == sum(r["sent_bytes_total"] for r in logical) / GIB
    measured = measured_cost_rows(REPO / "runs" / "medium-*")
    every = [x.table_row() for x in measured]
    kept = {}
    for r in every:
        kept.setdefault(r["kept as"], set()).add(r["arm"])
    # every sitting's attempts are counted: the first campaign's superseded arms, the 2026-12-02
    # sitting's arms on the next seed, kept in its folder, the first campaign's committed arms, kept in
    # runs/medium-superseded-seed-800112e3 since the re-run's records took runs/medium-*, and the re-run's on
    # the seed d1749707, kept in runs/medium-superseded-seed-d1749707 since the one on af103c8d took them
    first_campaign = {json.loads((d / "run.json").read_text())["parameters"].get("ARM")
                      for d in OLD.glob("medium-study-*")} - {None}
    assert first_campaign == {"single", "dense", "powersgd"}
    assert kept == {"committed": {"single", "dense", "powersgd"},
                    "superseded (medium-campaign-2026-12-01/study-superseded)": {"single", "dense"},
                    "superseded (medium-campaign-2026-12-02/runs)": {"single", "dense", "powersgd"},
                    "superseded (medium-superseded-seed-800112e3)": first_campaign,
                    "superseded (medium-superseded-seed-d1749707)": {"single", "dense", "powersgd"},
                    # the replicate block's committed-order arms, which failed on the host's full disk
                    "superseded (medium-replicates-2026-12-04/failed)": {"single", "dense", "powersgd"},
                    # the GPU replays of medium-study-single and -single-r1 on a fresh host: GPU time, not attempts
                    "GPU replay (medium-replicates-2026-12-04-b/replay)": {"single"}}
    assert {r["hardware"] for r in every if r["kept as"] == "superseded (medium-superseded-seed-800112e3)"} == {
        "NVIDIA H200 (a host of 2)"}  # the first campaign ran on two H200s
    assert {r["hardware"] for r in every if r["kept as"] == "superseded (medium-superseded-seed-d1749707)"} == {
        "NVIDIA H200 (a host of 1)"}
    totals = measured_totals(measured)
    # the replicate block's arms (the replay of single-r1 is counted with the replays)
    replicates = [r for r in every if r["run"].rsplit("-", 1)[-1] in ("r1", "r2") and r["kept as"] == "committed"]
    assert len(replicates) == 6
    replays = [r for r in every if r["kept as"].startswith("GPU replay")]
    assert sorted(r["run"] for r in replays) == ["medium-study-single", "medium-study-single-r1"]
    assert totals.attempts == 25 == sum(len(v) for v in kept.values()) + len(replicates) + len(replays) - 1
    assert totals.superseded_attempts == 25 - 3 - 6 - 2  # neither the committed, the replicates nor the replays
    assert totals.gpu_seconds_all_attempts == sum(r.gpu_seconds for r in measured)


def test_wire_traffic_is_the_interface_counters_where_they_counted_bytes(tmp_path):
    runs = tmp_path / "runs"
    for d in (REPO / "runs").glob("medium-*"):
        shutil.copytree(d, runs / d.name)
    block4 = evidence_path("medium-campaign-2026-12-03-block4")  # archived (runs/archive/): copied unpacked
    shutil.copytree(block4, runs / block4.name)
    # the screens of the committed arms' own study (the re-run's, runs/medium-campaign-2026-12-03-block4)
    screens = _screens_of(runs, "medium-study-dense")
    assert screens == runs / "medium-campaign-2026-12-03-block4" / "work" / "study" / "screens.json"
    obj = json.loads(screens.read_text())
    dense = next(a for a in obj["arms"] if a["arm"] == "dense")
    dense["interfaces"]["non_loopback"] = {"rx_bytes": 3 * GIB, "tx_bytes": GIB}
    screens.write_text(json.dumps(obj))
    row = next(r for r in measured_cost_rows(runs / "medium-*") if r.run == "medium-study-dense"
               and r.kept_as == "committed")
    assert row.wire_GiB == row.cross_zone_billable_GiB == 4.0


def test_retention_arm_against_arm_is_paired_with_both_bounds():
    """The arms' models are those beside the screens.json the committed evaluation recorded reading (by
    sha256), not an earlier campaign's study kept in another folder (medium-campaign-2026-12-01-b's)."""
    import hashlib

    pairs = {p.comparison: p.table_row() for p in retention_pairs(REPO / "runs" / "medium-*")}  # the table's rows
    recorded = json.loads((REPO / "runs/medium-study-evaluate/run.json").read_text())["input_digests"]["screens.json"]
    campaigns = [d for d in evidence_folders(REPO / "runs") if d.name.startswith("medium-campaign-")]
    screens = [p for d in campaigns for p in sorted(d.rglob("screens.json"))
               if hashlib.sha256(p.read_bytes()).hexdigest() == recorded]
    assert len(screens) == 1 and "medium-campaign-2026-12-01-b" not in str(screens[0])
    models = screens[0].parent / "evaluation" / "models"
    assert {p["source"] for p in pairs.values()} == {logical_path(models, REPO / "runs")}
    psgd, dense = (json.loads((models / f"{m}.json").read_text())["retention"] for m in ("powersgd", "dense"))
    by_id = {x["id"]: x for x in dense}
    d = [x["nll_sum"] - by_id[x["id"]]["nll_sum"] for x in psgd]
    t = [x["tokens"] for x in psgd]
    ratio, upper = ratio_change_normal_upper(d, t, 1.959963984540054)
    p = pairs["powersgd vs dense"]
    assert abs(p["change_nats_per_token"] - ratio) < 1e-15 and abs(p["upper_95"] - upper) < 1e-15
    assert abs((p["change_nats_per_token"] - p["lower_95"]) - (upper - ratio)) < 1e-15
    assert p["lower_95"] < 0 < p["upper_95"] and p["reading"] == "the interval covers 0"  # this campaign's arms
    assert set(pairs) == {"powersgd vs dense", "powersgd vs single", "dense vs single"}
