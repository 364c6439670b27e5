"""The study's declared record formats (kit.record.Record): the arm record (`arms/<arm>/arm.json` and every
`attempts/NNN.json`, docs/formats/study-records.md "Arm record"), the worker plan `run_arm` hands each replica
(`launch-args.json`), what the ranks exchange, prepared.json and its train rows and schedule, each model's scores
(`evaluation/models/<label>.json`), screens.json (docs/formats/study-screens.md) and the sidecars notebooks 20 and 21
record (kit/study/sidecars.py).

The decision to know: every part a reader uses is declared field by field (the arm's projection, updates, commits,
measurement, cost, per-rank traffic and compressor stats, hosts); what stays any JSON (`JSON_VALUE`) is only written
and shown whole (interface counters, a compressor's last call, library versions), so every committed record, whichever
fields its time wrote, still loads, and `to_json` gives back its bytes. Fields added after records were committed are
`Omittable`; a code-built record writes an Omittable field only when it is not None, unless `with_nulls` names it.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar

from kit.evidence.dev_evaluation_format import ProbeScore, TaskScore
from kit.evidence.report.sidecar_formats import (
    ArmCost,
    RetentionChange,
    ScreenQuality,
    ScreenSpeed,
    SharedGpuArm,
)
from kit.record import BYTES, SEED, Either, MapOf, Num, Omittable, OneOf, Opt, Record, Seq, spec_field

JSON_DEPTH = 12  # lists and objects nested this deep: the deepest undeclared part (hosts' interfaces) is 3


def _any_json(depth: int) -> Either:
    """Any JSON value nested at most `depth` deep: null, a string, a number, a boolean, a list or an object of them.
    The spec of a record's undeclared parts (a lenient reader, kept here rather than in kit.record because only the
    study's records need it); built values are read-only (tuples, mappings). Finite, not recursive, so that walks of
    a spec (the docs test's) end."""
    scalar = Opt(Either(str, Either(bool, float)))
    if depth == 0:
        return Either(scalar, scalar)
    inner = _any_json(depth - 1)
    return Either(scalar, Either(Seq(inner), MapOf(inner)))


JSON_VALUE = _any_json(JSON_DEPTH)
ARM_STATUSES = ("completed", "partial", "failed", "rejected", "unavailable")


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint(Record):
    """The completed arm's last commit, every replica agreeing on its learned state."""
    home: str = spec_field(str, doc="the arm's checkpoint store")
    full_root: str = spec_field(str, doc="the endpoint commit")
    step: int = spec_field(Num(0, integer=True), doc="its step")
    learned_state_root: str = spec_field(str, doc="replica 0's learned-state root")
    replica_learned_state_roots: tuple[str, ...] = spec_field(Seq(str), doc="every replica's")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicateOrder(Record):
    """A replicate's derived data order (kit/replicate_order.py `describe`)."""
    index: int = spec_field(Num(1, integer=True), doc="the replicate index k > 0")
    contract_seed: int = spec_field(SEED, doc="the contract's order seed")
    order_seed: int = spec_field(Num(0, 2**64 - 1, integer=True), doc="the seed derived for k (64 bits of a sha256)")
    rule: str = spec_field(str, doc="the derivation in words")
    order_sha256: str = spec_field(str, doc="sha256_json of the trained update order")


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateRow(Record):
    """One update as rank 0 measured it (the arm record's `updates`; every rank's in its result)."""
    step: int = spec_field(Num(1, integer=True), doc="the update")
    ce_sum: float = spec_field(float, doc="cross-entropy summed over the global batch's targets")
    kl_sum: float = spec_field(float, doc="KL summed (0: the study has none)")
    objective: float = spec_field(float, doc="ce_sum / target_tokens")
    target_tokens: int = spec_field(SEED, doc="of the global batch")
    input_tokens: int = spec_field(SEED, doc="of the global batch")
    documents: int = spec_field(Num(0, integer=True), doc="of the global batch")
    local_padded_tokens: int | None = spec_field(Omittable(SEED),
                                                 doc="positions this rank computed, padded (older: absent)")
    local_documents: int = spec_field(Num(0, integer=True), doc="this rank's documents")
    grad_norm: float = spec_field(float, doc="before clipping")
    clip_factor: float = spec_field(float, doc="the clipping's scale")
    seconds: float = spec_field(float, doc="the update's active time")
    warmup: bool = spec_field(bool, doc="a PowerSGD warm-up (dense) update")
    gradient_bytes: int = spec_field(BYTES, doc="gradient bytes handed to collectives")
    overhead_bytes: int = spec_field(BYTES, doc="other bytes handed to collectives")


@dataclass(frozen=True, slots=True, kw_only=True)
class CompressionRecordRef(Record):
    """Where a rank wrote its compression state at a commit (kit.study.compression_state)."""
    path: str = spec_field(str, doc="home/compression/<full_root>/rank-<r>.json")
    sha256: str = spec_field(str, doc="of its bytes")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaCommitOutcome(Record):
    """What each replica says of a commit, allgathered as JSON (kit.study.arms._commit)."""
    rank: int = spec_field(Num(0, integer=True), doc="the replica")
    learned: str = spec_field(str, doc="its own learned-state root")
    full: str | None = spec_field(Opt(str), doc="the commit (rank 0's; null on the others)")
    error: str | None = spec_field(Opt(str), doc="why the commit failed (null: it did not)")


@dataclass(frozen=True, slots=True, kw_only=True)
class ArmCommit(Record):
    """A commit the arm made (also one line of run/commits.jsonl as rank 0 made it)."""
    step: int = spec_field(Num(0, integer=True), doc="its step")
    full_root: str = spec_field(str, doc="the commit")
    learned_state_root: str = spec_field(str, doc="replica 0's learned-state root")
    replica_learned_state_roots: tuple[str, ...] = spec_field(Seq(str), doc="every replica's")
    replicas_equal: bool = spec_field(bool, doc="all equal")
    compression_record: CompressionRecordRef | None = spec_field(Opt(CompressionRecordRef),
                                                                 doc="this rank's (PowerSGD), else null")
    seconds: float = spec_field(float, doc="the commit's time")


@dataclass(frozen=True, slots=True, kw_only=True)
class LogicalTrafficSummary(Record):
    """A rank's logical traffic (kit.distributed.traffic.LogicalTraffic.summary): what it handed to collectives."""
    world: int = spec_field(Num(1, integer=True), doc="the replicas")
    updates: int = spec_field(Num(0, integer=True), doc="updates counted")
    warmup_updates: int = spec_field(Num(0, integer=True), doc="PowerSGD warm-up (dense) updates among them")
    dense_equivalent_bytes_per_update: int = spec_field(BYTES, doc="a dense gradient's bytes (0: one replica)")
    gradient_bytes_total: int = spec_field(BYTES, doc="gradient bytes handed to collectives")
    overhead_bytes_in_updates_total: int = spec_field(BYTES, doc="other bytes within updates")
    overhead_bytes_between_updates_total: int = spec_field(BYTES, doc="other bytes between updates (commits)")
    sent_bytes_total: int = spec_field(BYTES, doc="all of them")
    sent_bytes_per_update_with_warmup_and_overhead: float | None = spec_field(Opt(float), doc="their mean")
    gradient_bytes_per_update_after_warmup: float | None = spec_field(Opt(float), doc="gradient bytes' mean "
                                                                                      "after warm-up")
    compression_ratio_after_warmup: float | None = spec_field(Opt(float), doc="dense / gradient bytes after warm-up")
    compression_ratio_with_warmup_and_overhead: float | None = spec_field(Opt(float), doc="dense / sent bytes")
    ring_wire_bytes_total_estimate: int = spec_field(BYTES, doc="a ring all-reduce's wire bytes for them")


@dataclass(frozen=True, slots=True, kw_only=True)
class RankTraffic(LogicalTrafficSummary):
    """One row of the `traffic_per_rank` sidecar: a rank's logical traffic, with its rank."""
    rank: int = spec_field(Num(0, integer=True), doc="the rank")

    @classmethod
    def of(cls, rank: int, t: LogicalTrafficSummary) -> RankTraffic:
        return cls(rank=rank, world=t.world, updates=t.updates, warmup_updates=t.warmup_updates,
                   dense_equivalent_bytes_per_update=t.dense_equivalent_bytes_per_update,
                   gradient_bytes_total=t.gradient_bytes_total,
                   overhead_bytes_in_updates_total=t.overhead_bytes_in_updates_total,
                   overhead_bytes_between_updates_total=t.overhead_bytes_between_updates_total,
                   sent_bytes_total=t.sent_bytes_total,
                   sent_bytes_per_update_with_warmup_and_overhead=t.sent_bytes_per_update_with_warmup_and_overhead,
                   gradient_bytes_per_update_after_warmup=t.gradient_bytes_per_update_after_warmup,
                   compression_ratio_after_warmup=t.compression_ratio_after_warmup,
                   compression_ratio_with_warmup_and_overhead=t.compression_ratio_with_warmup_and_overhead,
                   ring_wire_bytes_total_estimate=t.ring_wire_bytes_total_estimate)


@dataclass(frozen=True, slots=True, kw_only=True)
class ColumnCounters(Record):
    """A PowerSGD rank's dead-column counters (kit.train.powersgd.ColumnCounts' JSON)."""
    p_dead: int = spec_field(Num(0, integer=True), doc="dead P columns")
    q_dead: int = spec_field(Num(0, integer=True), doc="dead Q columns")
    q_redrawn: int = spec_field(Num(0, integer=True), doc="Q columns re-drawn")
    calls_with_dead_p: int = spec_field(Num(0, integer=True), doc="compressed calls with a dead P column")


@dataclass(frozen=True, slots=True, kw_only=True)
class RankColumns(ColumnCounters):
    """One row of the `powersgd_columns` sidecar: a rank's counters, with its rank."""
    rank: int = spec_field(Num(0, integer=True), doc="the rank")

    @classmethod
    def of(cls, rank: int, c: ColumnCounters) -> RankColumns:
        return cls(rank=rank, p_dead=c.p_dead, q_dead=c.q_dead, q_redrawn=c.q_redrawn,
                   calls_with_dead_p=c.calls_with_dead_p)


@dataclass(frozen=True, slots=True, kw_only=True)
class CompressorStats(Record):
    """A PowerSGD rank's compressor statistics (kit.train.powersgd.PowerSGDCompressor.stats)."""
    calls: int = spec_field(Num(0, integer=True), doc="reduce() calls")
    warmup_calls: int = spec_field(Num(0, integer=True), doc="of them dense warm-up calls")
    dense_equivalent_bytes: int = spec_field(BYTES, doc="bytes had every call been dense")
    compressed_bytes: int = spec_field(BYTES, doc="bytes sent")
    dense_equivalent_bytes_after_warmup: int = spec_field(BYTES, doc="the same, warm-up calls left out")
    compressed_bytes_after_warmup: int = spec_field(BYTES, doc="the same, warm-up calls left out")
    compression_ratio_after_warmup: float | None = spec_field(Opt(float), doc="dense / compressed after warm-up")
    compression_ratio_overall: float | None = spec_field(Opt(float), doc="dense / compressed")
    step: int = spec_field(Num(0, integer=True), doc="the compressor's step")
    compressed_names: int = spec_field(Num(0, integer=True), doc="matrices compressed")
    dense_names: int = spec_field(Num(0, integer=True), doc="parameters sent dense")
    last_call: Any = spec_field(Opt(MapOf(JSON_VALUE)), doc="the last call's record (null: none)")
    columns: ColumnCounters | None = spec_field(Omittable(ColumnCounters), doc="dead-column counters (older: "
                                                                               "absent)")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaResult(Record):
    """What one replica's worker returns (the launcher's result-<r>.json; under torchrun, gathered)."""
    rank: int = spec_field(Num(0, integer=True), doc="the replica")
    world: int = spec_field(Num(1, integer=True), doc="the replicas")
    arm: str = spec_field(str, doc="the arm")
    device: str = spec_field(str, doc="the torch device it ran on")
    host: str = spec_field(str, doc="its host name")
    backend: str = spec_field(str, doc="the group's transport")
    staged: bool = spec_field(bool, doc="collectives staged through host memory")
    start_step: int = spec_field(Num(0, integer=True), doc="the step it started from")
    updates: tuple[UpdateRow, ...] = spec_field(Seq(UpdateRow), doc="its updates")
    commits: tuple[ArmCommit, ...] = spec_field(Seq(ArmCommit), doc="the commits made")
    setup_seconds: float = spec_field(float, doc="before the first update")
    active_seconds: float = spec_field(float, doc="update time")
    checkpoint_seconds: float = spec_field(float, doc="commit time")
    traffic: LogicalTrafficSummary = spec_field(LogicalTrafficSummary, doc="what it handed to collectives")
    powersgd: CompressorStats | None = spec_field(Opt(CompressorStats), doc="the compressor's stats; null unless "
                                                                              "PowerSGD")
    compile_cache: str | None = spec_field(Omittable(str), doc="the worker's own compile cache folder")


@dataclass(frozen=True, slots=True, kw_only=True)
class ArmMeasurement(Record):
    """What an arm that ran measured (kit.study.measurement.summarise); a failed one: wall, workers, devices."""
    wall_seconds: float = spec_field(float, doc="the attempt's wall time")
    workers: int | None = spec_field(Omittable(Num(1, integer=True)), doc="the arm's workers (older: absent)")
    devices: int = spec_field(Num(1, integer=True), doc="the GPUs they used (one per worker on CPU)")
    updates: int | None = spec_field(Omittable(Num(0, integer=True)), doc="updates run")
    device: str | None = spec_field(Omittable(str), doc="rank 0's device")
    active_seconds: float | None = spec_field(Omittable(float), doc="update time only")
    checkpoint_seconds: float | None = spec_field(Omittable(float), doc="commit time")
    setup_seconds: float | None = spec_field(Omittable(float), doc="worker setup, the slowest rank's")
    input_tokens: int | None = spec_field(Omittable(SEED), doc="tokens trained on")
    target_tokens: int | None = spec_field(Omittable(SEED), doc="target tokens")
    active_tokens_per_s: float | None = spec_field(Omittable(Opt(float)), doc="input tokens per active second")
    active_target_tokens_per_s: float | None = spec_field(Omittable(Opt(float)), doc="target tokens per active s")
    active_tokens_per_s_after_first_update: float | None = spec_field(Omittable(Opt(float)),
                                                                      doc="the same after the first update")
    first_update_seconds: float | None = spec_field(Omittable(Opt(float)), doc="the first update (compile)")
    steady_state_updates: int | None = spec_field(Omittable(Num(0, integer=True)), doc="the later updates")
    steady_state_seconds: float | None = spec_field(Omittable(Opt(float)), doc="their time")
    steady_state_tokens_per_s: float | None = spec_field(Omittable(Opt(float)), doc="their throughput")
    gpu_seconds_per_update: float | None = spec_field(Omittable(Opt(float)), doc="wall s x devices / updates")
    active_gpu_seconds_per_update: float | None = spec_field(Omittable(Opt(float)),
                                                             doc="active s x devices / updates")
    rule: str | None = spec_field(Omittable(str), doc="how the above are counted")
    compile_cache: str | None = spec_field(Omittable(str), doc="how the first update's compile was paid")


@dataclass(frozen=True, slots=True, kw_only=True)
class ArmProjection(Record):
    """What an arm was projected to take and cost before it started, against the study's deadline and bound
    (kit.study.cost.project_arm); the arm record's `projection` and the `projection` sidecar."""
    arm: str = spec_field(str, doc="the contract's arm name")
    workers: int = spec_field(Num(1, integer=True), doc="replicas")
    updates: int = spec_field(Num(0, integer=True), doc="updates to run")
    commits: int = spec_field(Num(0, integer=True), doc="commits to make")
    seconds_per_update: float = spec_field(float, doc="the per-update time assumed")
    seconds_per_update_source: str = spec_field(str, doc="'contract' or 'measured (given)'")
    startup_s: float = spec_field(float, doc="the contract's startup time")
    checkpoint_s: float = spec_field(float, doc="the contract's time per commit")
    logical_bytes_per_rank: int = spec_field(BYTES, doc="bytes each rank will hand to collectives")
    projected_seconds: float = spec_field(float, doc="startup + updates + commits")
    projected_gpus: int | None = spec_field(Omittable(Num(0, integer=True)), doc="GPUs charged (older: absent)")
    projected_gpu_hours: float = spec_field(float, doc="projected s x gpus / 3600")
    projected_gpu_cost_usd: float = spec_field(float, doc="their price")
    projected_cross_zone_bytes: int = spec_field(BYTES, doc="ring bytes crossing zones")
    projected_cross_zone_gb: float = spec_field(float, doc="the same in GB")
    projected_cross_zone_cost_usd: float = spec_field(float, doc="their price")
    projected_total_usd: float = spec_field(float, doc="gpu and cross-zone cost")
    clock_started_at: float | None = spec_field(Opt(float), doc="the study clock's start (null: this arm starts it)")
    deadline_at: float = spec_field(float, doc="epoch seconds every replica stops by")
    now: float = spec_field(float, doc="epoch seconds at admission")
    spent_usd_before: float = spec_field(float, doc="money of every earlier attempt that ran")
    bound_usd: float = spec_field(float, doc="the contract's bound")
    within_deadline: bool = spec_field(bool, doc="projected to end before the deadline")
    within_bound: bool = spec_field(bool, doc="spent plus projected cost within the bound")
    fits: bool = spec_field(bool, doc="both")
    reason: str | None = spec_field(Opt(str), doc="why not (null when it fits)")


@dataclass(frozen=True, slots=True, kw_only=True)
class ArmTraffic(Record):
    """What crossed the network: this host's interface counters, and what the ranks reported (absent when none
    did: a failed attempt)."""
    interfaces: Any = spec_field(JSON_VALUE, doc="/proc/net/dev deltas per interface, or why unavailable")
    logical_per_rank: tuple[LogicalTrafficSummary, ...] | None = spec_field(
        Omittable(Seq(LogicalTrafficSummary)), doc="kit/distributed/traffic.py, per rank")
    powersgd_per_rank: tuple[CompressorStats, ...] | None = spec_field(
        Omittable(Opt(Seq(CompressorStats))), doc="the compressor's stats per rank (PowerSGD)")
    interfaces_per_rank: Any = spec_field(Omittable(JSON_VALUE), doc="every rank's host delta (torchrun)")


@dataclass(frozen=True, slots=True, kw_only=True)
class ArmHost(Record):
    """One rank of an arm run under torchrun, as rank 0 records it (kit/study/hosts.py)."""
    rank: int = spec_field(Num(0, integer=True), doc="the rank")
    host: str = spec_field(str, doc="its host name")
    started_at: float = spec_field(float, doc="epoch seconds")
    ended_at: float = spec_field(float, doc="epoch seconds")
    wall_seconds: float = spec_field(float, doc="ended_at - started_at")
    socket_interfaces: Any = spec_field(MapOf(JSON_VALUE), doc="GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME, "
                                                              "nccl_from_gloo")
    update_seconds: tuple[float, ...] = spec_field(Seq(float), doc="its updates' active times")


@dataclass(frozen=True, slots=True, kw_only=True)
class ArmRecord(Record):
    """One attempt of one arm (`arms/<arm>/attempts/NNN.json`; `arm.json` the latest)."""
    FORMAT = "kit.study.arm/1"
    format: str = spec_field(OneOf("kit.study.arm/1"), doc="kit.study.arm/1")
    arm: str = spec_field(str, doc="the contract's arm name")
    workers: int = spec_field(Num(1, integer=True), doc="replicas")
    reduction: str = spec_field(str, doc="none, dense or powersgd")
    device: str = spec_field(str, doc="the contract's device")
    home: str = spec_field(str, doc="the arm's checkpoint store")
    contract_digest: str = spec_field(str, doc="sha256 of the contract")
    prepared_digest: str = spec_field(str, doc="sha256 of canonical prepared.json")
    resume_root: str | None = spec_field(Opt(str), doc="the commit resumed (null: the seed)")
    until: int = spec_field(Num(1, integer=True), doc="the last update asked for")
    attempts: int = spec_field(Num(1, integer=True), doc="this attempt's number")
    status: str = spec_field(OneOf(*ARM_STATUSES), doc="completed, partial, failed, rejected or unavailable")
    reason: str | None = spec_field(Opt(str), doc="why not completed (null only if completed)")
    projection: ArmProjection | None = spec_field(Opt(ArmProjection), doc="inputs, projected seconds and cost, "
                                                  "deadline and bound checks; null when unavailable")
    started_at: float | None = spec_field(Opt(float), doc="epoch seconds")
    ended_at: float | None = spec_field(Opt(float), doc="epoch seconds")
    updates: tuple[UpdateRow, ...] | None = spec_field(Opt(Seq(UpdateRow)), doc="rank 0's rows; null if none ran")
    commits: tuple[ArmCommit, ...] = spec_field(Seq(ArmCommit), doc="made (failed: from run/commits.jsonl)")
    endpoint: Endpoint | None = spec_field(Opt(Endpoint), doc="null unless completed")
    replicas_equal: bool | None = spec_field(Omittable(bool), doc="every commit's replicas equal")
    compression_records: Any = spec_field(Omittable(JSON_VALUE), doc="per rank, per commit (PowerSGD)")
    measurement: ArmMeasurement | None = spec_field(Opt(ArmMeasurement), doc="what ran, measured")
    traffic: ArmTraffic | None = spec_field(Opt(ArmTraffic), doc="interfaces and the ranks' logical traffic")
    cost: ArmCost | None = spec_field(Opt(ArmCost), doc="what ran, priced")
    shared_gpus: SharedGpuArm | None = spec_field(Omittable(Opt(SharedGpuArm)), doc="workers sharing GPUs")
    launcher: str | None = spec_field(Omittable(str), doc="torchrun (kit/study/hosts.py)")
    hosts: tuple[ArmHost, ...] | None = spec_field(Omittable(Seq(ArmHost)), doc="per rank under torchrun")
    replicate: ReplicateOrder | None = spec_field(Omittable(ReplicateOrder), doc="a replicate's data order")

    @property
    def replicate_index(self) -> int:
        """The replicate index the arm ran as (0 when it has none: every committed record)."""
        return self.replicate.index if self.replicate is not None else 0

    @property
    def devices(self) -> int:
        """The devices its workers ran on: the GPUs they shared, else one per worker (also on CPU)."""
        return self.shared_gpus.gpus if self.shared_gpus else self.workers


@dataclass(frozen=True, slots=True, kw_only=True)
class ArmWorkerPlan(Record):
    """What `run_arm` hands every replica of an arm (the launcher's `launch-args.json`; under torchrun, in memory):
    read back by `kit.study.arms.arm_worker`."""
    arm: str = spec_field(str, doc="the contract's arm name")
    reduction: str = spec_field(OneOf("none", "dense", "powersgd"), doc="the gradient reducer")
    study_dir: str = spec_field(str, doc="the prepared study")
    home: str = spec_field(str, doc="the arm's checkpoint store")
    start: Any = spec_field(MapOf(JSON_VALUE), doc="kit.refs JSON of the start")
    until: int = spec_field(Num(1, integer=True), doc="the last update")
    commit_every: int = spec_field(Num(0, integer=True), doc="commit every so many updates (0: at the end)")
    contract: Any = spec_field(MapOf(JSON_VALUE), doc="the study contract's JSON (kit.study.schema.study_terms)")
    compile_blocks: str = spec_field(OneOf("auto", "off"), doc="torch.compile the blocks on CUDA")
    max_tokens: int = spec_field(Num(1, integer=True), doc="the contract's data.max_tokens")
    powersgd: Any = spec_field(Opt(MapOf(JSON_VALUE)), doc="PowerSGDConfig JSON; null unless powersgd")
    deadline_at: float = spec_field(float, doc="epoch seconds every replica stops by")
    device: str = spec_field(str, doc="cpu or cuda")
    timeout_s: float = spec_field(float, doc="the collectives' timeout")
    replicate: int = spec_field(Num(0, integer=True), doc="0: the committed order; k: replicate k")


def plain(value: Any) -> Any:
    """A built JSON value (read-only mappings, tuples) as plain dicts and lists, for code that takes those."""
    if isinstance(value, MappingProxyType):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class StudyClock(Record):
    """`arms/clock.json`: when the study's first arm ran, the start of its deadline clock."""
    started_at: float = spec_field(float, doc="epoch seconds")


@dataclass(frozen=True, slots=True, kw_only=True)
class FrozenArm(Record):
    """An arm as the freeze saw it: its latest status and, when completed, its verified endpoint."""
    arm: str = spec_field(str, doc="the contract's arm name")
    status: str = spec_field(str, doc="its latest attempt's status")
    reason: str | None = spec_field(Opt(str), doc="why not completed")
    endpoint: Endpoint | None = spec_field(Opt(Endpoint), doc="null unless completed")


@dataclass(frozen=True, slots=True, kw_only=True)
class Freeze(Record):
    """`evaluation/freeze.json`: the candidates frozen for final-test scoring; no arm runs once it exists."""
    FORMAT = "kit.study.freeze/1"
    format: str = spec_field(OneOf("kit.study.freeze/1"), doc="kit.study.freeze/1")
    contract_digest: str = spec_field(str, doc="sha256 of the contract")
    prepared_digest: str = spec_field(str, doc="sha256 of canonical prepared.json")
    arms: tuple[FrozenArm, ...] = spec_field(Seq(FrozenArm), doc="every contract arm, in contract order")
    frozen_at: float = spec_field(float, doc="epoch seconds")


# --- what the ranks of `kit study arm` under torchrun exchange (kit/study/hosts.py; JSON over the group) --------
@dataclass(frozen=True, slots=True, kw_only=True)
class PeerReport(Record):
    """What each rank says of its host before admission: the prepared study it holds and its GPUs."""
    rank: int = spec_field(Num(0, integer=True), doc="the rank")
    host: str = spec_field(str, doc="its host name")
    prepared_digest: str = spec_field(str, doc="sha256 of its canonical prepared.json")
    gpus: int = spec_field(Num(0, integer=True), doc="its host's GPUs (0 on CPU)")
    local_world: int = spec_field(Num(1, integer=True), doc="ranks on its host (LOCAL_WORLD_SIZE)")
    interfaces: Any = spec_field(MapOf(JSON_VALUE), doc="its socket interface settings (Group.interfaces)")


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionDecision(Record):
    """Rank 0's admission, sent to every rank: run (with the deadline and rank 0's clock), or not (the record
    written, or why the arm was refused)."""
    run: bool = spec_field(bool, doc="whether the ranks train")
    deadline_at: float | None = spec_field(Omittable(float), doc="epoch seconds every rank stops by")
    now: float | None = spec_field(Omittable(float), doc="rank 0's clock at admission")
    record: ArmRecord | None = spec_field(Omittable(ArmRecord), doc="the unavailable or rejected arm's record")
    refused: str | None = spec_field(Omittable(str), doc="why rank 0 refused the request")


@dataclass(frozen=True, slots=True, kw_only=True)
class RankReport(Record):
    """What each rank reports after training: its result, its host's interface counters and its clock."""
    rank: int = spec_field(Num(0, integer=True), doc="the rank")
    host: str = spec_field(str, doc="its host name")
    result: ReplicaResult = spec_field(ReplicaResult, doc="what its worker returned")
    interfaces: Any = spec_field(Opt(MapOf(JSON_VALUE)), doc="its host's counter delta, null if unreadable")
    started_at: float = spec_field(float, doc="epoch seconds")
    ended_at: float = spec_field(float, doc="epoch seconds")
    socket: Any = spec_field(MapOf(JSON_VALUE), doc="its socket interface settings (Group.interfaces)")


# --- prepared/train.jsonl and prepared/schedule.json (kit/study/prepare.py) ----------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class TrainRow(Record):
    """One encoded training document, a line of `prepared/train.jsonl`."""
    id: str = spec_field(str, doc="the document")
    source: str = spec_field(str, doc="'task' or the replay source")
    family: str | None = spec_field(Opt(str), doc="a task's family (null for replay)")
    replay: bool = spec_field(bool, doc="a replay document")
    input_ids: tuple[int, ...] = spec_field(Seq(int), doc="its tokens")
    target_mask: tuple[bool, ...] = spec_field(Seq(bool), doc="which tokens are targets")
    conversation_digest: str = spec_field(str, doc="the conversation's digest")


@dataclass(frozen=True, slots=True, kw_only=True)
class StudySchedule(Record):
    """`prepared/schedule.json`: the global batches, document ids per update."""
    updates: tuple[tuple[str, ...], ...] = spec_field(Seq(Seq(str)), doc="per update, its documents' ids")


# --- prepared.json of a study (kit/study/prepare.py; docs/formats/study-records.md "prepared.json") ------------
@dataclass(frozen=True, slots=True, kw_only=True)
class StudyPreparedContract(Record):
    """The contract the study was prepared under."""
    path: str = spec_field(str, doc="the contract file given")
    digest: str = spec_field(str, doc="sha256 of the contract")
    name: str = spec_field(str, doc="its name")


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedSeed(Record):
    """The seed the study starts from."""
    dir: str = spec_field(str, doc="the seed directory")
    parameter_digest: str = spec_field(str, doc="its weights' digest")
    inventory_digest: str = spec_field(str, doc="its inventory's digest")
    config_sha256: str = spec_field(str, doc="sha256 of config.json")
    tokenizer_files: Mapping[str, str] = spec_field(MapOf(str), doc="tokenizer file -> sha256")
    trained_conversations_present: bool = spec_field(bool, doc="the seed's trained records are present")
    trained_tasks_excluded_by_digest: int = spec_field(Num(0, integer=True), doc="seed tasks excluded")


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedSource(Record):
    """The public source the documents were drawn from."""
    path: str = spec_field(str, doc="the source file")
    sha256: str = spec_field(str, doc="its sha256")


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedCounts(Record):
    """What was prepared, counted."""
    train_tasks: int = spec_field(Num(0, integer=True), doc="task documents")
    train_replay: int = spec_field(Num(0, integer=True), doc="replay documents")
    final_tasks: int = spec_field(Num(0, integer=True), doc="final-test tasks")
    retention: int = spec_field(Num(0, integer=True), doc="retention probes")
    updates: int = spec_field(Num(0, integer=True), doc="updates of the schedule")
    documents_per_update: int = spec_field(Num(1, integer=True), doc="the contract's")
    dev_tasks: int | None = spec_field(Omittable(Num(0, integer=True)), doc="development tasks (with data.dev)")
    train_target_tokens: int = spec_field(SEED, doc="target tokens of the training documents")
    train_tokens: int = spec_field(SEED, doc="their tokens")


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedKitSource(Record):
    """The kit's own source at prepare (kit/provenance.py): `run_arm` refuses a kit whose digest differs."""
    package_dir: str = spec_field(str, doc="the kit package")
    digest: str = spec_field(str, doc="its source digest")
    files: Any = spec_field(JSON_VALUE, doc="per file, its sha256")


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedLedger(Record):
    """The exposure ledger read at prepare (kit/evidence/ledger.py)."""
    path: str = spec_field(str, doc="the ledger file")
    sha256: str | None = spec_field(Opt(str), doc="its sha256 (null: absent)")
    entries: Any = spec_field(JSON_VALUE, doc="its entries")
    digests: Any = spec_field(JSON_VALUE, doc="its distinct digests")
    final_test_excluded: Any = spec_field(JSON_VALUE, doc="final tasks excluded as exposed")
    retention_not_exposed: Any = spec_field(JSON_VALUE, doc="probes not in the ledger")


@dataclass(frozen=True, slots=True, kw_only=True)
class StudyPreparedJob(Record):
    """`prepared/prepared.json`: what `kit study prepare` committed (its sha256 is every arm's `prepared_digest`).
    Fields added after the first studies were committed are Omittable."""
    FORMAT = "kit.study.prepared/1"
    format: str = spec_field(OneOf("kit.study.prepared/1"), doc="kit.study.prepared/1")
    contract: StudyPreparedContract = spec_field(StudyPreparedContract, doc="the contract")
    seed: PreparedSeed = spec_field(PreparedSeed, doc="the seed")
    source: PreparedSource = spec_field(PreparedSource, doc="the public source")
    files: Mapping[str, str] = spec_field(MapOf(str), doc="prepared file -> sha256")
    counts: PreparedCounts = spec_field(PreparedCounts, doc="what was prepared")
    kit_source: PreparedKitSource | None = spec_field(Omittable(PreparedKitSource), doc="the kit's source (older: "
                                                                                         "absent, refused by run_arm)")
    versions: Any = spec_field(Omittable(MapOf(JSON_VALUE)), doc="library versions (older: absent)")
    ledger: PreparedLedger | None = spec_field(Omittable(PreparedLedger), doc="the ledger read (older: absent)")
    exclusions: Any = spec_field(MapOf(JSON_VALUE), doc="what was excluded, and why")


R = TypeVar("R", bound=Record)


def with_nulls(record: R, *keys: str) -> R:
    """`record`, built by the code, with its Omittable fields `keys` written even where null (`to_json` leaves out
    an Omittable field that is None): the fields the writer has always written as null once its part ran. Apply it
    last, on the record to write: it fixes which keys are written."""
    present = frozenset(k for k in type(record).json_fields() if k in record) | frozenset(keys)
    return dataclasses.replace(record, _present=present)


# --- evaluation/models/<label>.json: one model scored on the final tasks and retention probes ------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class ModelScores(Record):
    """`evaluation/models/<label>.json`: the seed or a frozen arm's endpoint scored (kit.study.screens)."""
    FORMAT = "kit.study.evaluation/1"
    format: str = spec_field(OneOf("kit.study.evaluation/1"), doc="kit.study.evaluation/1")
    label: str = spec_field(str, doc="'seed' or the arm's name")
    source: Any = spec_field(MapOf(JSON_VALUE), doc="{seed_dir, parameter_digest} or {home, full_root}")
    tasks: tuple[TaskScore, ...] = spec_field(Seq(TaskScore), doc="the final tasks answered")
    retention: tuple[ProbeScore, ...] = spec_field(Seq(ProbeScore), doc="the retention probes scored")
    seconds: float = spec_field(float, doc="the scoring's time")
    device: str | None = spec_field(Omittable(str), doc="the device (absent on CPU)")


@dataclass(frozen=True, slots=True, kw_only=True)
class StudyScores(Record):
    """What `evaluate_study` returns: the model files written and the arms as frozen."""
    models: Mapping[str, str] = spec_field(MapOf(str), doc="label -> its evaluation/models file")
    frozen_arms: tuple[FrozenArm, ...] = spec_field(Seq(FrozenArm), doc="freeze.json's arms")


# --- STUDY/screens.json (kit/study/screens.py build_screens; docs/formats/study-records.md "Screens JSON") -------
@dataclass(frozen=True, slots=True, kw_only=True)
class ScreenArm(Record):
    """One contract arm in the screens: its status (kit.study.arms.ArmStatus) and what its latest record holds."""
    arm: str = spec_field(str, doc="the contract's arm name")
    workers: int = spec_field(Num(1, integer=True), doc="replicas")
    reduction: str = spec_field(str, doc="none, dense or powersgd")
    status: str = spec_field(str, doc="its latest attempt's status, or 'not run'")
    reason: str | None = spec_field(Opt(str), doc="why not completed")
    endpoint: Endpoint | None = spec_field(Opt(Endpoint), doc="null unless completed")
    attempts: int = spec_field(Num(0, integer=True), doc="attempts recorded")
    replicas_equal: bool | None = spec_field(Opt(bool), doc="every commit's replicas equal")
    projection: ArmProjection | None = spec_field(Opt(ArmProjection), doc="the record's projection")
    measurement: ArmMeasurement | None = spec_field(Opt(ArmMeasurement), doc="the record's measurement")
    shared_gpus: SharedGpuArm | None = spec_field(Omittable(Opt(SharedGpuArm)), doc="workers sharing GPUs (older: "
                                                                                "absent)")
    logical_traffic_rank0: LogicalTrafficSummary | None = spec_field(Opt(LogicalTrafficSummary),
                                                                    doc="rank 0's logical traffic")
    interfaces: Any = spec_field(Opt(JSON_VALUE), doc="the record's interface counters")


@dataclass(frozen=True, slots=True, kw_only=True)
class FamilyAccuracyRow(Record):
    """One row of a model's accuracy by family (kit.stats.accuracy_by_family; the last row's family is 'all')."""
    family: str = spec_field(str, doc="the family")
    n: int = spec_field(int, doc="tasks")
    correct: int = spec_field(int, doc="answered right")
    accuracy: float = spec_field(float, doc="correct / n")


@dataclass(frozen=True, slots=True, kw_only=True)
class FamilyDifference(Record):
    n: int = spec_field(int, doc="the family's tasks")
    difference: float = spec_field(float, doc="candidate minus reference accuracy")


@dataclass(frozen=True, slots=True, kw_only=True)
class Noninferiority(Record):
    """kit.stats.normal_noninferiority's record."""
    n: int = spec_field(int, doc="paired tasks")
    mean_difference: float = spec_field(float, doc="mean paired difference")
    lower: float = spec_field(float, doc="mean - multiplier x sd / sqrt(n)")
    margin: float = spec_field(float, doc="the contract's margin")
    multiplier: float = spec_field(float, doc="the normal multiplier")
    noninferior: bool = spec_field(bool, doc="lower > -margin")
    rule: str = spec_field(str, doc="the rule, in words")


@dataclass(frozen=True, slots=True, kw_only=True)
class PairedChange(Record):
    """A candidate's paired task change against a reference (kit.study.screens.paired_task_change)."""
    n: int = spec_field(int, doc="tasks")
    candidate_correct: int = spec_field(int, doc="right for the candidate")
    reference_correct: int = spec_field(int, doc="right for the reference")
    difference: float = spec_field(float, doc="candidate minus reference accuracy")
    by_family: Mapping[str, FamilyDifference] = spec_field(MapOf(FamilyDifference), doc="the same per family")
    gained: int = spec_field(int, doc="right for the candidate only")
    lost: int = spec_field(int, doc="right for the reference only")
    net: int = spec_field(int, doc="gained - lost")
    noninferiority: Noninferiority = spec_field(Noninferiority, doc="the noninferiority bound")


@dataclass(frozen=True, slots=True, kw_only=True)
class Screens(Record):
    quality: ScreenQuality = spec_field(ScreenQuality, doc="the quality screen")
    speed: ScreenSpeed = spec_field(ScreenSpeed, doc="the speed screen")


@dataclass(frozen=True, slots=True, kw_only=True)
class CostRow(Record):
    """One arm's cost summed over its attempts (kit.study.cost.cost_table)."""
    arm: str = spec_field(str, doc="the arm")
    status: str = spec_field(str, doc="its latest status")
    reason: str | None = spec_field(Opt(str), doc="why not completed")
    attempts: int = spec_field(Num(0, integer=True), doc="attempts recorded")
    attempts_that_ran: int = spec_field(Num(0, integer=True), doc="those that were paid for")
    gpu_hours: float = spec_field(float, doc="summed")
    gpu_cost_usd: float = spec_field(float, doc="summed")
    cross_zone_bytes: int = spec_field(BYTES, doc="summed")
    cross_zone_cost_usd: float = spec_field(float, doc="summed")
    total_usd: float = spec_field(float, doc="summed")


@dataclass(frozen=True, slots=True, kw_only=True)
class CostPrices(Record):
    gpu_hour_usd: float = spec_field(float, doc="instance price / GPUs per host")
    instance_price_usd_per_hour: Any = spec_field(MapOf(JSON_VALUE), doc="the contract's price, with its source")
    cross_zone_price_usd_per_gb_each_direction: Any = spec_field(MapOf(JSON_VALUE), doc="likewise")
    bytes_per_gb: int = spec_field(SEED, doc="the contract's")
    cross_zone_traffic_billed: bool = spec_field(bool, doc="the contract's")


@dataclass(frozen=True, slots=True, kw_only=True)
class CostTable(Record):
    """Every arm's cost and the study total against the bound (kit.study.cost.cost_table)."""
    rows: tuple[CostRow, ...] = spec_field(Seq(CostRow), doc="one per contract arm")
    total_usd: float = spec_field(float, doc="their sum")
    bound_usd: float = spec_field(float, doc="the contract's bound")
    within_bound: bool = spec_field(bool, doc="total <= bound")
    prices: CostPrices = spec_field(CostPrices, doc="the prices applied")
    hosts: Any = spec_field(Seq(MapOf(JSON_VALUE)), doc="the contract's hosts")
    rule: str = spec_field(str, doc="the rule, in words")


@dataclass(frozen=True, slots=True, kw_only=True)
class StudyScreens(Record):
    """`STUDY/screens.json`: the study's one result (kit.study.screens.build_screens)."""
    FORMAT = "kit.study.screens/1"
    format: str = spec_field(OneOf("kit.study.screens/1"), doc="kit.study.screens/1")
    contract_digest: str = spec_field(str, doc="sha256 of the contract")
    prepared_digest: str = spec_field(str, doc="sha256 of canonical prepared.json")
    study: str = spec_field(str, doc="the contract's name")
    candidate: str = spec_field(str, doc="the candidate arm")
    controls: tuple[str, ...] = spec_field(Seq(str), doc="the control arms")
    arms: tuple[ScreenArm, ...] = spec_field(Seq(ScreenArm), doc="every contract arm, in contract order")
    accuracy_by_family: Mapping[str, tuple[FamilyAccuracyRow, ...]] = spec_field(
        MapOf(Seq(FamilyAccuracyRow)), doc="per model label")
    paired_task_change: Mapping[str, Mapping[str, PairedChange]] = spec_field(
        MapOf(MapOf(PairedChange)), doc="per arm, per reference")
    retention_change: Mapping[str, RetentionChange] = spec_field(MapOf(RetentionChange), doc="per arm")
    screens: Screens = spec_field(Screens, doc="quality and speed")
    cost: CostTable = spec_field(CostTable, doc="the cost table")
    counts: PreparedCounts = spec_field(PreparedCounts, doc="prepared.json's counts")
    retention_probes_exposed: bool = spec_field(bool, doc="the contract's data.retention.exposed")


# --- the sidecars notebooks 20 and 21 record (kit/study/sidecars.py; docs/formats/metric-sidecars.md) -----------
@dataclass(frozen=True, slots=True, kw_only=True)
class LossCurveRow(Record):
    """One update of the `loss_curves` sidecar (the arm record's update row, in part)."""
    step: int = spec_field(Num(1, integer=True), doc="the update")
    objective: float = spec_field(float, doc="ce_sum / target_tokens")
    grad_norm: float = spec_field(float, doc="before clipping")
    clip_factor: float = spec_field(float, doc="the clipping's scale")
    seconds: float = spec_field(float, doc="the update's active time")
    gradient_bytes: int = spec_field(BYTES, doc="gradient bytes handed to collectives")

    @classmethod
    def of(cls, u: UpdateRow) -> LossCurveRow:
        return cls(step=u.step, objective=u.objective, grad_norm=u.grad_norm, clip_factor=u.clip_factor,
                   seconds=u.seconds, gradient_bytes=u.gradient_bytes)


@dataclass(frozen=True, slots=True, kw_only=True)
class ArmSidecars(Record):
    """The sidecars of an arm's record (notebook 20): each one the arm produced, the others absent."""
    projection: ArmProjection | None = spec_field(Omittable(ArmProjection), doc="the projection")
    loss_curves: tuple[LossCurveRow, ...] | None = spec_field(Omittable(Seq(LossCurveRow)), doc="per update")
    measurement: ArmMeasurement | None = spec_field(Omittable(ArmMeasurement), doc="what ran, measured")
    cost: ArmCost | None = spec_field(Omittable(ArmCost), doc="what ran, priced")
    traffic_per_rank: tuple[RankTraffic, ...] | None = spec_field(
        Omittable(Seq(RankTraffic)), doc="per rank: its rank and its logical traffic")
    powersgd_columns: tuple[RankColumns, ...] | None = spec_field(
        Omittable(Seq(RankColumns)), doc="per rank: its rank and its compressor's column counters")


@dataclass(frozen=True, slots=True, kw_only=True)
class FrozenArmSidecar(Record):
    """One arm of the `frozen_arms` sidecar."""
    status: str = spec_field(str, doc="the status it was frozen with")
    reason: str | None = spec_field(Opt(str), doc="why not completed")
    endpoint: str | None = spec_field(Opt(str), doc="its endpoint's full root (null: none)")


@dataclass(frozen=True, slots=True, kw_only=True)
class FamilyAccuracySidecar(Record):
    """One row of the `accuracy_by_family` sidecar: a model's family row, labelled."""
    model: str = spec_field(str, doc="'seed' or the arm")
    family: str = spec_field(str, doc="the family ('all': the total)")
    n: int = spec_field(int, doc="tasks")
    correct: int = spec_field(int, doc="answered right")
    accuracy: float = spec_field(float, doc="correct / n")


@dataclass(frozen=True, slots=True, kw_only=True)
class CostArmSidecar(Record):
    """One arm of the `arms` sidecar (notebook 21): its status, measurement headline and rank 0's bytes sent."""
    arm: str = spec_field(str, doc="the arm")
    workers: int = spec_field(Num(1, integer=True), doc="replicas")
    reduction: str = spec_field(str, doc="none, dense or powersgd")
    status: str = spec_field(str, doc="its latest status")
    reason: str | None = spec_field(Opt(str), doc="why not completed")
    attempts: int = spec_field(Num(0, integer=True), doc="attempts recorded")
    active_tokens_per_s: float | None = spec_field(Opt(float), doc="input tokens per active second")
    wall_seconds: float | None = spec_field(Opt(float), doc="the attempt's wall time")
    active_seconds: float | None = spec_field(Opt(float), doc="update time only")
    gpu_seconds_per_update: float | None = spec_field(Opt(float), doc="wall s x devices / updates")
    sent_bytes_rank0: int | None = spec_field(Opt(SEED), doc="rank 0's logical bytes sent")


@dataclass(frozen=True, slots=True, kw_only=True)
class CostTotal(Record):
    """The `cost_total` sidecar: the study's total against its bound."""
    total_usd: float = spec_field(float, doc="every attempt that ran")
    bound_usd: float = spec_field(float, doc="the contract's bound")
    within_bound: bool = spec_field(bool, doc="total <= bound")
