"""The shared-gradient study: arms against each other, PowerSGD traffic and exact resume, admission
(projection, availability), the evaluation freeze and the screens at their boundaries.

One small study (a 2-block Llama, 4 updates of 6 documents) is prepared once per module and its
three arms run in separate processes (gloo): single (1 worker), dense and powersgd (2 each).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from support.study import FULL, TINY

from kit.distributed.traffic import LogicalTraffic, counter_delta, read_interface_counters, ring_wire_bytes
from kit.evidence.dev_evaluation_format import ProbeScore, TaskScore
from kit.store import commits
from kit.store.objects import ObjectStore, fetch_objects
from kit.study import arms as study_arms
from kit.study.arms import own_compile_cache
from kit.study.compression_state import (
    COMPRESSION_DIR,
    CompressionStateError,
    read_compression_record,
    record_digests,
)
from kit.study.cost import project_arm
from kit.study.measurement import COMPILE_CACHE
from kit.study.prepare import PREPARED_DIR, prepare_study
from kit.study.schema import ContractError, arm_spec, load_study_contract
from kit.study.screens import (
    EvaluationRefused,
    build_screens,
    evaluate_study,
    paired_task_change,
    quality_screen,
    retention_change,
    speed_screen,
)


@pytest.fixture(scope="module")
def study(env):
    """The three arms of one prepared study, run once for the module."""
    sdir = env["tmp"] / "s1"
    prepare_study(env["contract"], env["seed"], env["source"], sdir, env["ledger"])
    recs = {name: study_arms.run_arm(study_arms.ArmRequest(sdir, name, env["seed"])) for name in ("single", "dense", "powersgd")}
    return sdir, recs


def _endpoint_states(rec: dict) -> dict:
    m = commits.read_commit(rec["endpoint"]["home"], rec["endpoint"]["full_root"])
    return commits.load_param_states(ObjectStore(rec["endpoint"]["home"]), m["learned_state"]["params"])


def test_dense_pair_equals_single_and_replicas_are_identical(study):
    _, recs = study
    single, dense = recs["single"], recs["dense"]
    assert single["status"] == dense["status"] == "completed", (single["reason"], dense["reason"])
    roots = dense["endpoint"]["replica_learned_state_roots"]
    assert len(roots) == 2 and roots[0] == roots[1] == dense["endpoint"]["learned_state_root"]
    assert dense["replicas_equal"] is True
    # same global batch, same normalisation: the losses agree, and clipping was active
    for a, b in zip(single["updates"], dense["updates"]):
        assert a["target_tokens"] == b["target_tokens"] and a["documents"] == b["documents"] == 6
        assert b["local_documents"] == 3 and a["local_documents"] == 6
        assert a["objective"] == pytest.approx(b["objective"], rel=1e-6)
        assert a["clip_factor"] < 1 and a["clip_factor"] == pytest.approx(b["clip_factor"], rel=1e-5)
    s, d = _endpoint_states(single), _endpoint_states(dense)
    assert sorted(s) == sorted(d)
    for name in s:
        assert s[name]["age"] == d[name]["age"] == 4
        for field in ("param", "exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(d[name][field], s[name][field], rtol=0, atol=1e-6, msg=f"{name}.{field}")
    assert single["traffic"]["logical_per_rank"][0]["sent_bytes_total"] == 0
    m = dense["measurement"]
    assert m["active_tokens_per_s"] > 0 and m["gpu_seconds_per_update"] == pytest.approx(
        m["wall_seconds"] * 2 / 4)
    assert dense["shared_gpus"] is None and m["workers"] == m["devices"] == 2  # CPU: nothing shared
    # each worker process compiled from its own empty cache (the first update's cost is the arm's own)
    assert m["compile_cache"] == single["measurement"]["compile_cache"] == COMPILE_CACHE


def test_an_arm_worker_compiles_from_its_own_empty_cache_and_leaves_the_environment_as_it_was(monkeypatch):
    for before in (None, "/somewhere/else"):
        for var in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
            if before is None:
                monkeypatch.delenv(var, raising=False)
            else:
                monkeypatch.setenv(var, before)
        with pytest.raises(RuntimeError, match="inside"), own_compile_cache() as first:
            assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == first and not any(Path(first).iterdir())
            assert os.environ["TRITON_CACHE_DIR"] == str(Path(first) / "triton")  # not an inherited one
            (Path(first) / "compiled").write_text("x")
            with own_compile_cache() as second:  # another worker: another empty folder
                assert second != first and not any(Path(second).iterdir())
            assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == first
            raise RuntimeError("inside")
        assert not Path(first).exists() and not Path(second).exists()
        assert os.environ.get("TORCHINDUCTOR_CACHE_DIR") == os.environ.get("TRITON_CACHE_DIR") == before


def test_powersgd_bytes_after_warmup_are_20x_below_dense(study):
    _, recs = study
    p, d = recs["powersgd"], recs["dense"]
    assert p["status"] == "completed" and p["replicas_equal"] is True, p["reason"]
    dense_per_update = d["traffic"]["logical_per_rank"][0]["gradient_bytes_total"] / 4
    logical = p["traffic"]["logical_per_rank"][0]
    assert logical["warmup_updates"] == 1
    assert p["updates"][0]["gradient_bytes"] == dense_per_update  # the warm-up sends the dense gradient
    assert dense_per_update / logical["gradient_bytes_per_update_after_warmup"] >= 20
    assert logical["compression_ratio_after_warmup"] >= 20
    assert logical["compression_ratio_with_warmup_and_overhead"] < logical["compression_ratio_after_warmup"]
    stats = p["traffic"]["powersgd_per_rank"][0]
    assert stats["compressed_bytes_after_warmup"] == logical["gradient_bytes_per_update_after_warmup"] * 3
    assert set(stats["columns"]) == {"p_dead", "q_dead", "q_redrawn", "calls_with_dead_p"}  # issue 49's counters
    assert stats["columns"]["q_redrawn"] == stats["columns"]["q_dead"]
    assert p["cost"]["cross_zone_bytes"] == sum(r["sent_bytes_total"] for r in p["traffic"]["logical_per_rank"])


def test_powersgd_resumed_from_committed_compression_state_is_bit_identical(study, env):
    sdir, recs = study
    p = recs["powersgd"]
    mid = next(c for c in p["commits"] if c["step"] == 2)
    for rank in (0, 1):  # the committed records name the commit and hold the step
        rec = read_compression_record(p["home"], mid["full_root"], rank, 2)
        assert rec.meta["step"] == 2 and any(k.startswith("error/") for k in rec.tensors)
    # a second study with the same prepared inputs receives the step-2 commit and its compression state
    s2 = env["tmp"] / "s2"
    shutil.copytree(sdir / PREPARED_DIR, s2 / PREPARED_DIR)
    home2 = study_arms.arm_dir(s2, "powersgd") / "home"
    manifest = commits.read_commit(p["home"], mid["full_root"])
    src, dst = ObjectStore(p["home"]), ObjectStore(home2)
    digests = commits.object_digests(manifest)
    for rank in (0, 1):
        rec = read_compression_record(p["home"], mid["full_root"], rank, 2)
        digests += [e.digest for e in rec.tensors.values()]
    fetch_objects(src, dst, digests)
    shutil.copytree(Path(p["home"]) / COMPRESSION_DIR / mid["full_root"], home2 / COMPRESSION_DIR / mid["full_root"])
    commits.adopt_commit(home2, manifest)
    resumed = study_arms.run_arm(study_arms.ArmRequest(s2, "powersgd", env["seed"], resume=mid["full_root"]))
    assert resumed["status"] == "completed", resumed["reason"]
    assert [u["step"] for u in resumed["updates"]] == [3, 4]
    assert resumed["endpoint"]["full_root"] == p["endpoint"]["full_root"]
    assert resumed["endpoint"]["learned_state_root"] == p["endpoint"]["learned_state_root"]
    assert record_digests(home2, p["endpoint"]["full_root"], 2) == record_digests(p["home"], p["endpoint"]["full_root"], 2)
    assert [u["objective"] for u in resumed["updates"]] == [u["objective"] for u in p["updates"][2:]]


def test_resume_without_compression_state_is_refused(study, env):
    sdir, recs = study
    s3 = env["tmp"] / "s3"
    shutil.copytree(sdir / PREPARED_DIR, s3 / PREPARED_DIR)
    dense_home = recs["dense"]["home"]
    mid = next(c for c in recs["dense"]["commits"] if c["step"] == 2)  # weights only: a dense arm's commit
    home3 = study_arms.arm_dir(s3, "powersgd") / "home"
    manifest = commits.read_commit(dense_home, mid["full_root"])
    fetch_objects(ObjectStore(dense_home), ObjectStore(home3), commits.object_digests(manifest))
    commits.adopt_commit(home3, manifest)
    with pytest.raises(CompressionStateError, match="no compression state for rank 0 of commit"):
        study_arms.run_arm(study_arms.ArmRequest(s3, "powersgd", env["seed"], resume=mid["full_root"]))
    assert not (s3 / "arms" / "powersgd" / "run").exists()


def test_evaluation_and_screens_list_every_arm(study, env):
    sdir, recs = study
    evaluate_study(sdir, env["seed"])
    with pytest.raises(study_arms.ArmRefused, match="frozen for final-test scoring"):
        study_arms.run_arm(study_arms.ArmRequest(sdir, "single", env["seed"]))
    out = build_screens(sdir)
    assert [a["arm"] for a in out["arms"]] == ["single", "dense", "powersgd"]
    assert all(a["status"] == "completed" for a in out["arms"])
    assert set(out["accuracy_by_family"]) == {"seed", "single", "dense", "powersgd"}
    assert set(out["paired_task_change"]["powersgd"]) == {"seed", "single", "dense"}
    q = out["screens"]["quality"]
    assert q["verdict"] in ("pass", "fail") and set(q["checks"]) == {
        "task_gain", "retention", "noninferior_to_single", "noninferior_to_dense"}
    s = out["screens"]["speed"]
    assert s["reason"] is None and s["shared_gpus"] == {}  # CPU processes: nothing shared, the ratio is measured
    assert s["ratio"] == pytest.approx(recs["powersgd"]["measurement"]["active_tokens_per_s"]
                                       / recs["single"]["measurement"]["active_tokens_per_s"])
    assert out["cost"]["total_usd"] == pytest.approx(sum(r["cost"]["total_usd"] for r in recs.values()))
    assert json.loads((sdir / "screens.json").read_text())["screens"]["speed"]["verdict"] == s["verdict"]


def test_evaluation_refused_until_every_arm_is_settled_and_projection_refuses(env):
    sdir = env["tmp"] / "s4"
    prepare_study(env["contract"], env["seed"], env["source"], sdir, env["ledger"])
    with pytest.raises(EvaluationRefused, match="arm 'single' is 'not run'"):
        evaluate_study(sdir, env["seed"])
    rec = study_arms.run_arm(study_arms.ArmRequest(sdir, "single", env["seed"], seconds_per_update=1e6))
    assert rec["status"] == "rejected" and "deadline" in rec["reason"]
    assert rec["projection"]["seconds_per_update_source"] == "measured (given)"
    assert not (sdir / "arms" / "single" / "run").exists()  # never launched
    with pytest.raises(EvaluationRefused, match="arm 'dense' is 'not run'"):
        evaluate_study(sdir, env["seed"])


def test_unavailable_arms_are_recorded_with_reason_never_run(env):
    c = json.loads(env["contract"].read_text())
    c["device"] = "cuda"
    cuda_contract = env["tmp"] / "cuda-contract.json"
    cuda_contract.write_text(json.dumps(c))
    sdir = env["tmp"] / "s5"
    prepare_study(cuda_contract, env["seed"], env["source"], sdir, env["ledger"])
    # on a one-GPU host a pair arm is admitted, its workers sharing the GPU: the projection charges one GPU
    admitted = study_arms.admit_arm(study_arms.ArmRequest(sdir, "dense", env["seed"]), cuda_devices=1, write=False)
    shared = admitted.record.shared_gpus
    assert shared is not None and shared.gpus == 1 and shared.workers == 2
    proj = admitted.record.projection
    assert proj.projected_gpus == 1 and proj.projected_gpu_hours == pytest.approx(proj.projected_seconds / 3600)
    assert not (sdir / "arms" / "clock.json").exists() and not (sdir / "arms" / "dense" / "attempts").exists()
    gpus = {"single": 0, "dense": 0, "powersgd": 0}  # a host without a GPU: no arm of a cuda contract runs
    recs = {n: study_arms.run_arm(study_arms.ArmRequest(sdir, n, env["seed"]), cuda_devices=g) for n, g in gpus.items()}
    for n, rec in recs.items():
        assert rec["status"] == "unavailable" and rec["shared_gpus"] is None
        assert rec["reason"] == (f"contract device 'cuda' needs 1 GPU(s) for arm {n!r}; this host has "
                                 f"torch.cuda.device_count() = {gpus[n]}")
        assert rec["measurement"] is None and not (sdir / "arms" / n / "run").exists()
    # every arm settled (none ran): scoring may open, for the seed alone, and every output lists every arm
    evaluate_study(sdir, env["seed"])
    out = build_screens(sdir)
    assert [(a["arm"], a["status"]) for a in out["arms"]] == [
        ("single", "unavailable"), ("dense", "unavailable"), ("powersgd", "unavailable")]
    assert all("device_count()" in a["reason"] for a in out["arms"])
    assert out["screens"]["quality"]["verdict"] == out["screens"]["speed"]["verdict"] == "not evaluable"
    assert [a["arm"] for a in out["screens"]["quality"]["arms_not_completed"]] == ["single", "dense", "powersgd"]
    assert out["cost"]["total_usd"] == 0 and [r["attempts"] for r in out["cost"]["rows"]] == [1, 1, 1]


def test_projection_numbers_and_bound():
    full = load_study_contract(FULL)
    c, arm = full.terms, arm_spec(full, "dense")
    gib = 2**30
    p = project_arm(c, arm, 128, 12.0, "contract", 50 * gib, 5, now=1000.0, clock_started_at=None, spent_usd=0.0)
    assert p.projected_seconds == 600 + 128 * 12 + 5 * 180
    assert p.projected_cross_zone_bytes == 100 * gib  # two ranks x ring factor 1 x 50 GiB
    assert p.projected_cross_zone_cost_usd == pytest.approx(100 * 0.01 * 2)
    assert p.projected_gpu_cost_usd == pytest.approx(p.projected_seconds * 2 / 3600 * 2.24208)
    assert p.fits and p.reason is None
    late = project_arm(c, arm, 128, 12.0, "contract", 0, 1, now=1000.0 + 6 * 3600 - 100, clock_started_at=1000.0,
                       spent_usd=0.0)
    assert not late.fits and "after the 6 h stop deadline" in (late.reason or "")
    broke = project_arm(c, arm, 128, 12.0, "contract", 0, 1, now=1000.0, clock_started_at=1000.0, spent_usd=99.5)
    assert not broke.fits and "exceeds the $100 bound" in (broke.reason or "") and broke.within_deadline


def test_tiny_contract_rank_compresses_the_tiny_seed_20x():
    from kit.seed.build import SeedBuildConfig

    c = load_study_contract(TINY)
    cfg = SeedBuildConfig.tiny()
    shape = cfg.shape(cfg.vocab_size, 1, 2, 0)
    from kit.model.llama import LlamaCausalLM

    with torch.device("meta"):
        shapes = {n: tuple(p.shape) for n, p in LlamaCausalLM(shape).named_parameters()}
    dense = study_arms.projected_logical_bytes(c.terms, arm_spec(c, "dense"), shapes, 2, 3)
    compressed = study_arms.projected_logical_bytes(c.terms, arm_spec(c, "powersgd"), shapes, 2, 3)
    assert dense / compressed >= 20


def test_contract_rules_refuse_mismatched_fields(tmp_path, env):
    bad = json.loads(env["contract"].read_text())
    bad["data"]["tasks"]["count"] += 1
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(bad))
    with pytest.raises(ContractError, match=r"tasks.count \+ replay.count = 25 documents"):
        load_study_contract(p)
    bad = json.loads(env["contract"].read_text())
    bad["arms"][1]["workers"] = 3
    p.write_text(json.dumps(bad))
    with pytest.raises(ContractError, match=r"field 'arms\[1\]' \('dense'\) has workers=3"):
        load_study_contract(p)
    bad = json.loads(env["contract"].read_text())
    bad["screens"]["colour"] = "red"
    p.write_text(json.dumps(bad))
    with pytest.raises(ContractError, match="unknown field 'screens.colour'"):
        load_study_contract(p)


# --- pure screens at their boundaries -------------------------------------------------------
# the screens section of the contract terms, with these thresholds (the functions read attributes)
SCREENS = dataclasses.replace(load_study_contract(FULL).terms.screens, min_task_gain=0.10,
                              max_retention_upper_nats=0.02, noninferiority_margin=0.03, normal_multiplier=1.645,
                              min_speedup=1.10)


@pytest.mark.parametrize("gain, retention, lowers, verdict", [
    (0.6 - 0.5, 0.02, {"single": -0.0299, "dense": 0.0}, "pass"),  # every threshold met exactly
    (0.0999, 0.0, {"single": 0.0, "dense": 0.0}, "fail"),
    (0.2, 0.02 + 1e-9, {"single": 0.0, "dense": 0.0}, "fail"),
    (0.2, 0.0, {"single": -0.03, "dense": 0.0}, "fail"),  # the bound must be strictly above -margin
    (0.2, 0.0, {"single": 0.0, "dense": None}, "not evaluable"),  # a control that did not complete
    (None, 0.0, {"single": 0.0, "dense": 0.0}, "not evaluable"),
])
def test_quality_screen_boundaries(gain, retention, lowers, verdict):
    out = quality_screen(gain, retention, lowers, SCREENS)
    assert out.verdict == verdict
    assert out.inputs.noninferiority_lower == lowers and out.thresholds.min_task_gain == 0.10


@pytest.mark.parametrize("cand, base, verdict", [(110.0, 100.0, "pass"), (109.99, 100.0, "fail"),
                                                 (None, 100.0, "not evaluable"), (100.0, None, "not evaluable")])
def test_speed_screen_boundaries(cand, base, verdict):
    assert speed_screen(cand, base, SCREENS).verdict == verdict


def test_paired_task_change_and_retention_change_by_hand():
    cand = [TaskScore(id=f"t{i}", family="lookup" if i < 2 else "sorting", reply="", correct=c)
            for i, c in enumerate([True, True, False, True])]
    ref = [TaskScore(id=f"t{i}", family="lookup" if i < 2 else "sorting", reply="", correct=c)
           for i, c in enumerate([False, True, True, False])]
    out = paired_task_change(list(reversed(cand)), ref, 0.03, 1.645)
    assert (out.gained, out.lost, out.difference) == (2, 1, 0.25)
    assert {f: d.to_json() for f, d in out.by_family.items()} == {
        "lookup": {"n": 2, "difference": 0.5}, "sorting": {"n": 2, "difference": 0.0}}
    d = [1, 0, -1]  # per-probe differences in an order the tokens weight
    base = [ProbeScore(id=f"r{i}", nll_sum=10.0, tokens=t) for i, t in enumerate([2, 4, 4])]
    probes = [ProbeScore(id=f"r{i}", nll_sum=10.0 + d[i], tokens=t) for i, t in enumerate([2, 4, 4])]
    r = retention_change(probes, base, 1.645)
    assert r.change_nats_per_token == pytest.approx(0.0)
    z = [0 + (di - 0) / (10 / 3) for di in d]  # z_i = R + (d_i - R t_i) / mean(t)
    sd = torch.tensor(z, dtype=torch.float64).std().item()
    assert r.upper == pytest.approx(1.645 * sd / 3**0.5)
    with pytest.raises(ValueError, match="different example ids"):
        paired_task_change([TaskScore(id="x", family="lookup", reply="", correct=True)], ref[:1], 0.03, 1.645)


# --- counters -------------------------------------------------------------------------------
def test_interface_counters_and_logical_traffic(tmp_path):
    dev = tmp_path / "dev"
    head = "Inter-|   Receive |  Transmit\n face |bytes packets errs drop fifo frame compressed multicast|bytes ...\n"
    row = "{:>6}: {} 1 0 0 0 0 0 0 {} 2 0 0 0 0 0 0\n"
    dev.write_text(head + row.format("lo", 100, 100) + row.format("eth0", 1000, 50))
    before = read_interface_counters(str(dev))
    assert before == {"lo": {"rx_bytes": 100, "tx_bytes": 100}, "eth0": {"rx_bytes": 1000, "tx_bytes": 50}}
    dev.write_text(head + row.format("lo", 400, 400) + row.format("eth0", 900, 80))
    delta = counter_delta(before, read_interface_counters(str(dev)))
    assert delta["loopback"] == {"rx_bytes": 300, "tx_bytes": 300}
    assert delta["non_loopback"] == {"rx_bytes": None, "tx_bytes": 30}  # a counter that went down
    dev.write_text(head + "eth0 1 2 3\n")
    with pytest.raises(ValueError, match="expected 'iface: 16 counters'"):
        read_interface_counters(str(dev))
    assert read_interface_counters()  # this host's real counters parse
    t = LogicalTraffic(world=2, dense_equivalent_bytes=4000)
    t.add_gradient(4000, warmup=True)
    t.add_overhead(16)
    t.end_update(1)
    for step in (2, 3):
        t.add_gradient(100)
        t.add_overhead(16)
        t.end_update(step)
    t.add_overhead(50, in_update=False)
    s = t.summary()
    assert s["gradient_bytes_per_update_after_warmup"] == 100 and s["compression_ratio_after_warmup"] == 40
    assert s["sent_bytes_total"] == 4200 + 48 + 50
    assert s["compression_ratio_with_warmup_and_overhead"] == pytest.approx(12000 / 4298)
    assert ring_wire_bytes(1000, 2) == 1000 and ring_wire_bytes(900, 3) == 1200 and ring_wire_bytes(5, 1) == 0
