"""What a study arm measured, summarised into its arm record: throughput (active, steady state after the
first update, GPU seconds), the endpoint and replica agreement, whether the workers shared GPUs,
traffic per rank and cost; and the token positions the engine computes once microbatches are padded
(and bucketed on CUDA)."""

from __future__ import annotations

import json
from dataclasses import replace

from kit.evidence.report.sidecar_formats import SharedGpuArm
from kit.study.cost import arm_cost
from kit.study.formats import ArmMeasurement, ArmRecord, Endpoint, ReplicaResult, with_nulls
from kit.study.schema import StudyContract

# Recorded in each arm's measurement: how its first update's compile was paid (kit.study.arms.own_compile_cache;
# records without it shared the host's default cache, so an arm's first update depended on the arms before it).
COMPILE_CACHE = "empty per worker process (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR)"


def padded_tokens(records, microbatch_size: int, bucket: int) -> int:
    """Token positions the engine computes for these records: each microbatch padded to its longest
    record, rounded up to the length bucket when there is one (kit/train/batch.py)."""
    total = 0
    for a in range(0, len(records), microbatch_size):
        chunk = records[a:a + microbatch_size]
        T = max(len(r.input_ids) for r in chunk)
        total += len(chunk) * (-(-T // bucket) * bucket if bucket else T)
    return total


def shared_gpus(results: list[ReplicaResult]) -> SharedGpuArm | None:
    """The workers, GPUs, transport and source "ranks" when the ranks ran on fewer GPUs than there are
    ranks, read from what each rank reported (its host, device and group backend); None when each rank had
    a GPU of its own, or on CPU. GPUs are counted as distinct (host, device) pairs."""
    cuda = [r for r in results if r.device.startswith("cuda")]
    if not cuda:
        return None
    used = {(r.host, r.device) for r in cuda}
    if len(used) >= len(results):
        return None
    transports = sorted({r.backend or "not reported" for r in results})
    return SharedGpuArm(workers=len(results), gpus=len(used), transport=", ".join(transports), source="ranks")


def summarise(record: ArmRecord, results: list[ReplicaResult], wall: float, terms: StudyContract) -> ArmRecord:
    """The arm record being written (kit.study.arms.finish_arm) with the ranks' results: updates, commits,
    endpoint, measurement, traffic per rank and its cost priced under the contract terms."""
    r0 = results[0]
    # what the ranks reported replaces the admission's count
    record = replace(record, shared_gpus=shared_gpus(results))
    n = len(r0.updates)
    active = max(r.active_seconds for r in results)
    checkpoint = max(r.checkpoint_seconds for r in results)
    tokens = sum(u.input_tokens for u in r0.updates)
    targets = sum(u.target_tokens for u in r0.updates)
    later = r0.updates[1:]
    later_active = max(sum(u.seconds for u in r.updates[1:]) for r in results)
    workers, devices = len(results), record.devices
    last = r0.commits[-1]
    record = replace(
        record, updates=r0.updates, commits=r0.commits,
        compression_records=[[c.compression_record.to_json() if c.compression_record else None for c in r.commits]
                             for r in results] if record.reduction == "powersgd" else None,
        replicas_equal=all(c.replicas_equal for c in r0.commits))
    if record.status == "completed":
        record = replace(record, endpoint=Endpoint(
            home=record.home, full_root=last.full_root, step=last.step, learned_state_root=last.learned_state_root,
            replica_learned_state_roots=last.replica_learned_state_roots))
        if not last.replicas_equal:
            record = replace(record, status="failed", endpoint=None,
                             reason="replicas' learned-state roots differ at the endpoint: "
                             + ", ".join(last.replica_learned_state_roots))
    measurement = ArmMeasurement(
        updates=n, workers=workers, devices=devices, device=r0.device,
        active_seconds=active, checkpoint_seconds=checkpoint, wall_seconds=wall,
        setup_seconds=max(r.setup_seconds for r in results),
        input_tokens=tokens, target_tokens=targets,
        active_tokens_per_s=tokens / active if active else None,
        active_target_tokens_per_s=targets / active if active else None,
        active_tokens_per_s_after_first_update=(sum(u.input_tokens for u in later) / later_active
                                                if later and later_active else None),
        # The first update pays for compilation and the first attention plans of each length bucket;
        # steady state is every later update (lengths bucketed on CUDA, so plans are reused).
        first_update_seconds=max(r.updates[0].seconds for r in results) if n else None,
        steady_state_updates=len(later),
        steady_state_seconds=later_active if later else None,
        steady_state_tokens_per_s=(sum(u.input_tokens for u in later) / later_active
                                   if later and later_active else None),
        gpu_seconds_per_update=wall * devices / n if n else None,
        active_gpu_seconds_per_update=active * devices / n if n else None,
        rule="active = update time only (no setup, no commits); gpu seconds = seconds x devices (the GPUs "
             "the workers used: fewer than the workers when they shared GPUs)",
        compile_cache=COMPILE_CACHE if all(r.compile_cache for r in results) else "the host's default",
    )
    assert record.traffic is not None, "finish_arm records the interfaces first"
    traffic = replace(record.traffic, logical_per_rank=tuple(r.traffic for r in results),
                      powersgd_per_rank=tuple(r.powersgd for r in results if r.powersgd is not None)
                      if r0.powersgd else None)
    sent = [r.traffic.sent_bytes_total for r in results]
    # a measured arm writes every field of its measurement and its ranks' compressor stats, null where none
    return replace(record, measurement=with_nulls(measurement, *ArmMeasurement.json_fields()),
                   traffic=with_nulls(traffic, "powersgd_per_rank"),
                   cost=arm_cost(terms, wall, sent, gpus=devices))


def arm_summary_json(record: ArmRecord) -> str:
    """One line for the CLI: arm, status, reason, endpoint roots and the headline measurements of the arm record
    `run_arm` wrote."""
    m = record.measurement
    return json.dumps({"arm": record.arm, "status": record.status, "reason": record.reason,
                       "endpoint": record.endpoint.to_json() if record.endpoint else None,
                       "active_tokens_per_s": m.active_tokens_per_s if m else None,
                       "wall_seconds": m.wall_seconds if m else None,
                       "cost_usd": record.cost.total_usd if record.cost else None}, sort_keys=True)
