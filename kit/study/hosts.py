"""`kit study arm` under torchrun: one process per host, nothing shared on disk.

Each host holds its own copy of the seed and of the prepared study (same `prepared_digest`); the
ranks talk only over torchrun's group. The decision to know: rank 0 admits the arm and sends the
decision and the deadline to every rank, so all of them stop at the same update, and a rank whose
prepared copy differs is refused by name before anything trains.
Steps: docs/study.md ("Across hosts"); failure records: docs/formats/study-records.md ("Arm record").
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from dataclasses import replace
from pathlib import Path

import torch

from kit.contract import Contract
from kit.digest import canonical_json, loads_strict, write_canonical_json
from kit.distributed.group import join, leave
from kit.distributed.launch import WorkerContext
from kit.distributed.traffic import counter_delta, interface_counters_or_none
from kit.study.arms import (
    COMMITS_LOG,
    Admission,
    ArmRefused,
    ArmRequest,
    admit_arm,
    arm_dir,
    arm_worker_result,
    finish_arm,
    finished_status,
)
from kit.study.formats import AdmissionDecision, ArmHost, ArmRecord, PeerReport, RankReport, plain
from kit.study.prepare import load_prepared_job
from kit.study.schema import StudyContract, arm_spec


def _gather(group, obj: dict, what: str) -> list[dict]:
    return [loads_strict(b, what) for b in group.allgather_bytes(canonical_json(obj))]


def run_arm_torchrun(request: ArmRequest) -> dict | None:
    """`run_arm_torchrun_record`'s record as its JSON (kit.run_arm_torchrun)."""
    record = run_arm_torchrun_record(request)
    return record.to_json() if record is not None else None


def run_arm_torchrun_record(request: ArmRequest) -> ArmRecord | None:
    """This process is one rank of a torchrun group running `request.arm`. Returns the arm record on
    rank 0 (None on the others)."""
    study_dir, arm_name = Path(request.study_dir), request.arm
    world = int(os.environ["WORLD_SIZE"])
    _, contract, prepared_digest = load_prepared_job(study_dir)
    spec = arm_spec(contract, arm_name)
    if world != spec.workers:
        raise ArmRefused(f"arm {arm_name!r} has {spec.workers} worker(s) (contract field 'arms'); torchrun "
                         f"started WORLD_SIZE={world} processes")
    if request.resume and world > 1:
        raise ArmRefused("--resume under torchrun across hosts: only rank 0's host holds the arm's commits; "
                         "run the resumed arm where every rank's home holds the root")
    group = join(device=contract.terms.device, timeout_s=float(contract.terms.collective_timeout_s))
    try:
        return _run(group, request, spec, contract, prepared_digest)
    finally:
        leave()


def _run(group, request: ArmRequest, spec, contract: Contract[StudyContract], prepared_digest) -> ArmRecord | None:
    study_dir, arm_name = Path(request.study_dir), request.arm
    rank, world = group.rank, group.world
    host = socket.gethostname()
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    gpus = torch.cuda.device_count() if contract.terms.device == "cuda" else 0
    mine = PeerReport(rank=rank, host=host, prepared_digest=prepared_digest, gpus=gpus, local_world=local_world,
                      interfaces=group.interfaces)
    peers = [PeerReport.from_json(p, "peer report") for p in _gather(group, mine.to_json(), "peer")]
    wrong = [p for p in peers if p.prepared_digest != peers[0].prepared_digest]
    if wrong:
        raise ArmRefused("the ranks' prepared studies differ: " + "; ".join(
            f"rank {p.rank} ({p.host}) has {p.prepared_digest}" for p in peers)
            + "; copy rank 0's STUDY/prepared/ to every host")
    # Availability across hosts: every rank needs a GPU of its own host, one per process, or shared with the
    # host's other ranks when it has fewer GPUs than ranks (the group is then host-staged; the arm
    # record's `shared_gpus` comes from what the ranks report, kit.study.measurement.shared_gpus).
    cuda_devices = spec.workers if all(p.gpus >= p.local_world for p in peers) else min(p.gpus for p in peers)
    sent = AdmissionDecision(run=False)  # rank 0's is the one every rank reads
    if rank == 0:
        try:
            admitted = admit_arm(request, cuda_devices=cuda_devices)
            sent = (AdmissionDecision(run=True, deadline_at=admitted.plan.deadline_at, now=time.time())
                    if isinstance(admitted, Admission) else AdmissionDecision(run=False, record=admitted))
        except ArmRefused as e:
            sent = AdmissionDecision(run=False, refused=str(e))
    decision = AdmissionDecision.from_json(_gather(group, sent.to_json(), "admission")[0], "rank 0's admission")
    if not decision.run:
        if decision.refused is not None:
            raise ArmRefused(f"rank 0 refused the arm: {decision.refused}")
        return decision.record if rank == 0 else None
    ours = admitted if rank == 0 else admit_arm(request, cuda_devices=cuda_devices, write=False, now=decision.now)
    if not isinstance(ours, Admission):
        raise ArmRefused(f"rank {rank} ({host}): arm {arm_name!r} {ours.status} here: {ours.reason}")
    record = ours.record
    if decision.deadline_at is None:
        raise ArmRefused("rank 0's admission to run names no deadline; expected its `deadline_at`")
    plan = replace(ours.plan, deadline_at=decision.deadline_at)  # rank 0's clock governs every rank
    run_dir = arm_dir(study_dir, arm_name, request.replicate) / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    if rank == 0:
        (run_dir / COMMITS_LOG).unlink(missing_ok=True)  # an earlier attempt's (kit.study.arms.logged_commits)
    ctx = WorkerContext(rank, world, run_dir)
    before = interface_counters_or_none()
    started = time.time()
    record = replace(record, started_at=started)
    result, error = None, None
    try:
        result = arm_worker_result(group, plan, ctx)
    except Exception as e:  # noqa: BLE001 - recorded, then raised below
        error = f"rank {rank} ({host}): {type(e).__name__}: {e}"
        tb = traceback.format_exc()
    ended = time.time()
    after = interface_counters_or_none()
    delta = counter_delta(before, after) if before and after else None
    if error is not None:  # the group may be broken: write what this host can, then fail
        _write_failure(study_dir, arm_name, record, contract, rank, error, tb, started, ended, delta)
        raise RuntimeError(error)
    ctx.progress(phase="gather")
    assert result is not None, "the worker returned (else its error was raised above)"
    report = RankReport(rank=rank, host=host, result=result, interfaces=delta, started_at=started, ended_at=ended,
                        socket=group.interfaces)
    gathered = [RankReport.from_json(g, "rank report") for g in _gather(group, report.to_json(), "rank result")]
    ctx.progress(phase="done")
    if rank != 0:
        return None
    status, reason = finished_status(plan.until, contract.terms)
    record = replace(record, launcher="torchrun", hosts=tuple(
        ArmHost(rank=g.rank, host=g.host, started_at=g.started_at, ended_at=g.ended_at,
                wall_seconds=g.ended_at - g.started_at, socket_interfaces=g.socket,
                update_seconds=tuple(u.seconds for u in g.result.updates)) for g in gathered))
    # The arm's wall time spans the earliest start to the latest end over the hosts.
    return finish_arm(study_dir, record, contract, [g.result for g in gathered], status, reason,
                      min(g.started_at for g in gathered), max(g.ended_at for g in gathered), delta,
                      [{"rank": g.rank, "host": g.host, **(plain(g.interfaces) or
                        {"unavailable": "/proc/net/dev could not be read on this host"})} for g in gathered])


def _write_failure(study_dir, arm_name, record: ArmRecord, contract: Contract[StudyContract], rank, error, tb, started,
                   ended, delta) -> None:
    if rank == 0:
        finish_arm(study_dir, replace(record, launcher="torchrun"), contract, None, "failed", error, started, ended,
                   delta)
        return
    d = arm_dir(study_dir, arm_name, record.replicate_index) / f"attempts-rank{rank}"
    d.mkdir(parents=True, exist_ok=True)
    write_canonical_json(d / f"{int(started * 1000)}.json",
                         {"arm": arm_name, "rank": rank, "status": "failed", "reason": error,
                          "traceback": tb[-4000:], "started_at": started, "ended_at": ended, "interfaces": delta})
