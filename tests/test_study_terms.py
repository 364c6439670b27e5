"""The study reads its contract as typed terms (Contract.terms), never by string key: the worker's reading of
the contract it was launched with, the learning-rate schedule handed to kit.train.schedule, and the pure
functions of cost, projection, screens and development tasks on the terms (kit.study.schema.StudyContract)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from support.study import FULL, TINY

from kit.contract import LrWarmup, Record
from kit.digest import canonical_json
from kit.study import arms as study_arms
from kit.study.cost import ArmCosts, arm_cost, cost_table, project_arm
from kit.study.projection import project_study
from kit.study.replicate_dev import dev_rule
from kit.study.schema import (
    arm_spec,
    engine_config,
    load_study_contract,
    lr_schedule,
    optimizer_groups,
    powersgd_config_dict,
    study_terms,
)
from kit.study.screens import quality_screen, speed_screen
from kit.train.schedule import lr_factor

WARM_COSINE = {"warmup_updates": 2, "after": "cosine", "floor_ratio": 0.1}


def test_the_worker_reads_back_the_terms_it_was_launched_with():
    contract = load_study_contract(TINY)
    sent = contract.terms.to_json()  # what admit_arm writes into the launch arguments
    assert canonical_json(sent) == canonical_json(contract.data)  # the bytes of launch-args.json are unchanged
    assert study_terms(json.loads(canonical_json(sent))) == contract.terms


def test_lr_schedule_is_constant_when_omitted_and_the_typed_section_when_given(tmp_path):
    contract = load_study_contract(TINY)
    assert "lr_schedule" not in contract.terms.training and lr_schedule(contract.terms) == "constant"
    data = json.loads(TINY.read_text())
    for given in ("constant", WARM_COSINE):
        data["training"]["lr_schedule"] = given
        path = tmp_path / "c.json"
        path.write_text(json.dumps(data))
        got = lr_schedule(load_study_contract(path).terms)
        assert got == given if isinstance(given, str) else (isinstance(got, LrWarmup) and got.to_json() == given)
    assert [lr_factor(got, u, 5) for u in (0, 1)] == [0.5, 1.0]


def test_engine_optimizer_and_powersgd_configs_come_from_the_terms():
    contract = load_study_contract(TINY)
    t, data = contract.terms, contract.data
    cfg = engine_config(t, compile_blocks="off")
    assert (cfg.microbatch_size, cfg.max_grad_norm, cfg.compute_dtype) == (
        data["training"]["microbatch_size"], data["training"]["max_grad_norm"], data["training"]["compute_dtype"])
    assert dataclasses.asdict(optimizer_groups(t)["default"]) == data["training"]["optimizer"]
    psgd = powersgd_config_dict(t)
    assert psgd == {k: v for k, v in data["powersgd"].items() if k != "error_feedback_dtype"}
    assert all(not isinstance(v, Record) for v in psgd.values())  # a plain dict: written into launch-args.json


def test_cost_table_writes_the_contract_prices_and_hosts_as_json():
    contract = load_study_contract(FULL)
    cost = contract.data["cost"]
    table = cost_table(contract.terms, [ArmCosts(arm="single", status="completed", reason=None,
                                                 costs=(arm_cost(contract.terms, 3600.0, [0]),))]).to_json()
    # what screens.json holds: the same JSON as the contract's, whatever the reading
    assert canonical_json(table["hosts"]) == canonical_json(cost["hosts"])
    assert table["prices"]["instance_price_usd_per_hour"] == cost["instance_price_usd_per_hour"]
    assert table["total_usd"] == pytest.approx(cost["instance_price_usd_per_hour"]["value"] / cost["hosts"][0]["gpus"])


def test_admission_and_projection_read_attributes():
    full = load_study_contract(FULL)
    t = full.terms
    dense = arm_spec(full, "dense")
    assert (dense.workers, dense.reduction) == (2, "dense")
    with pytest.raises(ValueError, match=r"no arm named 'triple'; the contract lists \['single', 'dense', 'powersgd'\]"):
        arm_spec(full, "triple")
    assert study_arms.availability(t, dense, cuda_devices=1) is None
    shared = study_arms.expected_sharing(t, dense, cuda_devices=1)
    assert shared is not None and shared.gpus == 1
    assert study_arms.finished_status(t.schedule.updates, t) == ("completed", None)
    shapes = {"w": (64, 64)}
    assert study_arms.projected_logical_bytes(t, dense, shapes, 0, 2) == 2 * 64 * 64 * 4
    p = project_arm(t, dense, 1, 1.0, "contract", 0, 1, now=0.0, clock_started_at=None, spent_usd=0.0)
    assert p.startup_s == full.data["projection"]["startup_s"] and p.arm == "dense"
    study = project_study(t, single_compute_s=2.0, pair_compute_fraction=0.5, dense_bytes_per_update=8,
                          powersgd_bytes_per_update=1, wire_overhead=1.0, efficiency=1.0, rate_bit=1e9, rtt_s=0.0,
                          collectives={"dense": 0, "powersgd": 0}, label="t")
    assert study["deadline_hours"] == full.data["cost"]["deadline_hours"]


def test_screens_and_the_development_rule_read_the_terms():
    t = load_study_contract(FULL).terms
    sc = dataclasses.replace(t.screens, min_speedup=1.1)
    assert speed_screen(110.0, 100.0, sc).verdict == "pass"
    q = quality_screen(1.0, -1.0, {c: 0.0 for c in sc.controls}, sc)
    assert q.verdict == "pass" and q.thresholds.min_task_gain == sc.min_task_gain
    f = load_study_contract(FULL).data["data"]["final_test"]
    assert dev_rule(t).to_json() == {"count": f["count"], "role": "study-dev", "seed": f["seed"], "difficulty": f["difficulty"]}
