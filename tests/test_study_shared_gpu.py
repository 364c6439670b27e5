"""The study's pair arms on fewer GPUs than workers (the host-staged group): admission, the record's
`shared_gpus` read from what the ranks report, the GPU-seconds charged, and the speed screen's
"not measured" verdict. Pure functions with fake rank results: no GPU and no process is needed."""

from __future__ import annotations

import dataclasses
import json

import pytest
from support.study import TINY

from kit.distributed.group import STAGED_BACKEND, Group
from kit.evidence.report.index import IndexedRun, RunIndex
from kit.evidence.report.sidecar_formats import ScreenSpeed, SharedGpuArm
from kit.evidence.report.verdict_rows import _speed_row
from kit.study import arms as study_arms
from kit.study.cost import arm_cost, gpu_hour_price
from kit.study.formats import (
    ARM_STATUSES,
    ArmRecord,
    ArmTraffic,
    LogicalTrafficSummary,
    ReplicaResult,
    with_nulls,
)
from kit.study.measurement import shared_gpus, summarise
from kit.study.schema import arm_spec, load_study_contract
from kit.study.screens import NOT_EVALUABLE, speed_screen

# the tiny contract's terms (CPU), and the same on CUDA: the functions read the typed terms, never keys
CPU = load_study_contract(TINY).terms
CUDA = dataclasses.replace(CPU, device="cuda")
PAIR = arm_spec(load_study_contract(TINY), "dense")
SCREENS = dataclasses.replace(CPU.screens, min_speedup=1.1)
ONE = SharedGpuArm(workers=2, gpus=1, transport=STAGED_BACKEND, source="ranks")  # a pair on one GPU


def test_a_cuda_pair_arm_may_share_one_gpu_but_not_run_on_none():
    assert study_arms.availability(CUDA, PAIR, cuda_devices=1) is None
    assert study_arms.availability(CUDA, PAIR, cuda_devices=2) is None
    assert study_arms.availability(CUDA, PAIR, cuda_devices=0) == (
        "contract device 'cuda' needs 1 GPU(s) for arm 'dense'; this host has torch.cuda.device_count() = 0")
    assert study_arms.availability(CPU, PAIR, cuda_devices=0) is None
    # what the admission expects: shared on one GPU, own GPUs on two, nothing shared on CPU
    expected = study_arms.expected_sharing(CUDA, PAIR, cuda_devices=1)
    assert expected is not None
    assert (expected.workers, expected.gpus, expected.transport) == (2, 1, "gloo (host-staged)")
    assert expected.source.startswith("admission")
    assert study_arms.expected_sharing(CUDA, PAIR, cuda_devices=2) is None
    assert study_arms.expected_sharing(CPU, PAIR, cuda_devices=0) is None


def test_the_staged_group_names_the_transport_the_record_uses():
    import torch

    g = Group(0, 2, torch.device("cpu"), staged=True)
    assert g.backend == STAGED_BACKEND == "gloo (host-staged)"


def _traffic(sent: int) -> dict:
    """A rank's logical traffic summary (kit.distributed.traffic) that sent `sent` bytes."""
    return LogicalTrafficSummary(
        world=2, updates=3, warmup_updates=0, dense_equivalent_bytes_per_update=0, gradient_bytes_total=sent,
        overhead_bytes_in_updates_total=0, overhead_bytes_between_updates_total=0, sent_bytes_total=sent,
        sent_bytes_per_update_with_warmup_and_overhead=sent / 3, gradient_bytes_per_update_after_warmup=sent / 3,
        compression_ratio_after_warmup=None, compression_ratio_with_warmup_and_overhead=None,
        ring_wire_bytes_total_estimate=sent).to_json()


def _rank(rank: int, device: str, host: str = "h1", backend: str = STAGED_BACKEND, sent: int = 1000) -> ReplicaResult:
    updates = [{"step": s, "input_tokens": 100, "target_tokens": 40, "seconds": 0.5 + s, "ce_sum": 1.0, "kl_sum": 0.0,
                "objective": 0.025, "documents": 2, "local_documents": 1, "grad_norm": 1.0, "clip_factor": 1.0,
                "warmup": False, "gradient_bytes": 0, "overhead_bytes": 0} for s in (1, 2, 3)]
    commit = {"step": 3, "full_root": "f" * 64, "learned_state_root": "l" * 64, "seconds": 1.0,
              "replica_learned_state_roots": ["l" * 64] * 2, "replicas_equal": True, "compression_record": None}
    return ReplicaResult.from_json(
        {"rank": rank, "world": 2, "arm": "dense", "start_step": 0, "device": device, "host": host, "backend": backend,
         "staged": backend == STAGED_BACKEND, "updates": updates, "commits": [commit], "active_seconds": 7.5,
         "checkpoint_seconds": 1.0, "setup_seconds": 2.0, "traffic": _traffic(sent), "powersgd": None,
         "compile_cache": "x"}, "a rank's result")


def test_shared_gpus_is_read_from_the_ranks_devices_and_backend():
    assert shared_gpus([_rank(0, "cuda:0"), _rank(1, "cuda:0")]) == SharedGpuArm(
        workers=2, gpus=1, transport="gloo (host-staged)", source="ranks")
    assert shared_gpus([_rank(0, "cuda:0", backend="nccl"), _rank(1, "cuda:1", backend="nccl")]) is None
    # the same device index on two hosts is two GPUs
    assert shared_gpus([_rank(0, "cuda:0", "h1", "nccl"), _rank(1, "cuda:0", "h2", "nccl")]) is None
    assert shared_gpus([_rank(0, "cpu", backend="gloo"), _rank(1, "cpu", backend="gloo")]) is None


@pytest.mark.parametrize("devices,gpus", [(("cuda:0", "cuda:0"), 1), (("cuda:0", "cuda:1"), 2)])
def test_summarise_charges_the_gpus_the_workers_used(devices, gpus):
    contract = load_study_contract(TINY)
    record = dataclasses.replace(_record(), status="completed", traffic=ArmTraffic(interfaces={}),
                                 shared_gpus=study_arms.expected_sharing(CUDA, PAIR, cuda_devices=1))  # the guess
    wall = 36.0
    record = summarise(record, [_rank(r, d) for r, d in enumerate(devices)], wall, contract.terms)
    assert (record.shared_gpus.source if record.shared_gpus else None) == ("ranks" if gpus == 1 else None)
    m, c = record.measurement, record.cost
    assert m is not None and c is not None
    assert (m.workers, m.devices) == (2, gpus)
    assert m.gpu_seconds_per_update == pytest.approx(wall * gpus / 3)
    assert m.active_gpu_seconds_per_update == pytest.approx(7.5 * gpus / 3)
    assert c.gpus == gpus and c.gpu_hours == pytest.approx(wall * gpus / 3600)
    assert c.gpu_cost_usd == pytest.approx(wall * gpus / 3600 * gpu_hour_price(contract.terms.cost))
    # the traffic is every rank's, whatever the GPUs
    assert c.cross_zone_bytes == arm_cost(contract.terms, wall, [1000, 1000]).cross_zone_bytes
    # a measured record writes every measurement field, and the ranks' compressor stats (null: not PowerSGD)
    assert set(record.to_json()["measurement"]) == set(type(m).json_fields())
    assert record.to_json()["traffic"]["powersgd_per_rank"] is None


def _record() -> ArmRecord:
    """An admitted pair arm's record, before it ran (kit.study.arms.admit_arm)."""
    return ArmRecord(format="kit.study.arm/1", arm="dense", workers=2, reduction="dense", device="cuda", home="H",
                     contract_digest="c", prepared_digest="p", resume_root=None, until=3, attempts=0,
                     status=study_arms.PENDING, reason=None, projection=None, started_at=None, ended_at=None,
                     updates=None, commits=(), endpoint=None, measurement=None, traffic=None, cost=None)


def test_arm_cost_counts_gpus_not_workers_and_refuses_more_gpus_than_workers():
    contract = load_study_contract(TINY).terms
    own, shared = arm_cost(contract, 3600.0, [0, 0]), arm_cost(contract, 3600.0, [0, 0], gpus=1)
    assert (own.gpus, own.gpu_hours) == (2, pytest.approx(2.0))
    assert (shared.gpus, shared.gpu_hours) == (1, pytest.approx(1.0))
    with pytest.raises(ValueError, match=r"gpus = 3; expected 1\.\.2"):
        arm_cost(contract, 1.0, [0, 0], gpus=3)


def test_a_failed_attempt_on_a_shared_gpu_charges_one_gpu(tmp_path):
    contract = load_study_contract(TINY)
    record = dataclasses.replace(_record(), shared_gpus=study_arms.expected_sharing(CUDA, PAIR, cuda_devices=1))
    out = study_arms.finish_arm(tmp_path, record, contract, None, "failed", "boom", 100.0, 172.0, None)
    assert out.cost is not None and out.measurement is not None
    assert out.cost.gpus == 1 and out.cost.gpu_hours == pytest.approx(72.0 / 3600)
    assert out.measurement.to_json() == {"wall_seconds": 72.0, "workers": 2, "devices": 1}
    written = ArmRecord.from_json(json.loads((tmp_path / "arms" / "dense" / "attempts" / "001.json").read_text()),
                                  "001.json")
    assert written.status in ARM_STATUSES and written.attempts == 1 and written.commits == ()
    assert written.to_json() == out.to_json() and "compression_records" not in written


def test_speed_screen_is_not_measured_when_workers_shared_a_gpu():
    s = speed_screen(300.0, 200.0, SCREENS, {"powersgd": ONE, "single": None})
    assert s.verdict == NOT_EVALUABLE and s.ratio is None
    assert s.reason == ("not measured: one GPU (arm 'powersgd': 2 workers shared 1 GPU(s) over "
                        "gloo (host-staged); throughput is not the method's)")
    assert s.shared_gpus == {"powersgd": ONE}
    assert s.inputs.to_json() == {"candidate_active_tokens_per_s": 300.0, "baseline_active_tokens_per_s": 200.0}
    # each worker on its own GPU: the ratio decides, as before
    own = speed_screen(300.0, 200.0, SCREENS, {"powersgd": None, "single": None})
    assert (own.verdict, own.ratio, own.reason) == ("pass", 1.5, None)
    assert speed_screen(210.0, 200.0, SCREENS).verdict == "fail"
    missing = speed_screen(None, 200.0, SCREENS)
    assert missing.verdict == NOT_EVALUABLE and (missing.reason or "").startswith("not measured: ")
    two = speed_screen(300.0, 200.0, SCREENS, {"powersgd": dataclasses.replace(ONE, workers=4, gpus=2)})
    assert (two.reason or "").startswith("not measured: shared GPUs (arm 'powersgd': 4 workers shared 2 GPU(s)")


def _run(**fields) -> IndexedRun:
    """An index row of a run `ev` (kit/evidence/report/index.py) with `fields` of its record."""
    return IndexedRun.of({"dir": ".", "run_id": "ev", "status": "completed", "reason": None, "notebook": "",
                          "started_at": "", "duration_s": None, "error": None, "metrics": {},
                          "git": {"commit": None, "dirty": None}, "device": {},
                          "checkpoint_roots": {"produced": [], "used": []}, **fields})


NO_RUNS = RunIndex(runs=(), by_id={}, runs_by_root={}, parent_of_root={})


def _speed_sidecar(screen: ScreenSpeed) -> ScreenSpeed:
    """The screen as its sidecar holds it: kit.study.screens.build_screens adds the arms that did not complete."""
    return ScreenSpeed.from_json(with_nulls(dataclasses.replace(screen, arms_not_completed=()), "reason").to_json(),
                                 source="screen_speed.json")


def test_the_report_row_of_the_speed_screen_shows_the_reason_and_no_ratio():
    s = speed_screen(300.0, 200.0, SCREENS, {"powersgd": ONE})
    row = _speed_row(_run(), _speed_sidecar(s), NO_RUNS)
    assert row.value is None and row.verdict == NOT_EVALUABLE and row.reason == s.reason
    assert row.statistic.endswith("; " + (s.reason or ""))
    measured = _speed_row(_run(), _speed_sidecar(speed_screen(300.0, 200.0, SCREENS)), NO_RUNS)
    assert measured.value == 1.5 and measured.reason is None and "not measured" not in measured.statistic


def test_the_report_answer_says_why_speed_was_not_measured_and_names_the_shared_gpu():
    from kit.evidence.report.verdicts import _link_text, _questions

    row = _speed_row(_run(), _speed_sidecar(speed_screen(300.0, 200.0, SCREENS, {"powersgd": ONE})), NO_RUNS)
    answers = _questions([], [row], NO_RUNS, "", None)
    (study,) = [a for a in answers if a["question"].startswith("Did PowerSGD")]
    assert f"speed {NOT_EVALUABLE} (not measured: one GPU (arm 'powersgd'" in study["answer"]
    assert _link_text(_run(device={"gpus": [{"name": "NVIDIA H200"}]})).startswith(
        "gloo through host memory between workers sharing one GPU (NVIDIA H200)")
