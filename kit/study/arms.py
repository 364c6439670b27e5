"""The arms of the shared-gradient study: the worker every replica runs, and the driver that admits,
launches and records one arm.

One common recipe: the same seed, schedule, clipping and AdamW; only the communicated gradient
differs. The decision to know: each replica runs a whole-model engine on a local one-stage group and
normalises by the whole global batch's target count, and the gradient reducer sums the replicas'
gradients, so the replicas hold bitwise-identical learned states, which every commit checks.
`run_arm` records every attempt with one status (completed, partial, failed, rejected, unavailable).
Details: docs/study.md and the notes below; records: docs/formats/study-records.md.

Notes: how the replicas split a batch, commit, and share GPUs.

Replica r of w takes positions r, r + w, r + 2w, ... of update k's global batch (the schedule's k-th list). Replica
0 commits the weights and both moments; every replica hashes its learned state without writing it, so the roots can
be compared (`replica_learned_state_roots`); a PowerSGD arm's ranks then write their compression state.
A cuda arm needs one GPU, not one per worker (`availability`): extra workers share the host's GPUs over gloo, staged
through host memory (kit.distributed.group). The record's `shared_gpus` counts the distinct (host, device) pairs
the ranks report, replacing the admission's `expected_sharing`, which only a failed attempt keeps. The learned
states are the same computation, so quality results stand; the throughput is replicas time-slicing one GPU, so the
speed screen says "not measured".
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from kit.contract import Contract
from kit.digest import canonical_json, load_json_strict, loads_strict, write_canonical_json
from kit.distributed.grad_reduce import DenseSumReducer, PowerSGDSumReducer
from kit.distributed.group import STAGED_BACKEND, Group
from kit.distributed.launch import WorkerFailure, launch
from kit.distributed.traffic import LogicalTraffic, counter_delta, interface_counters_or_none
from kit.engine.session import Session
from kit.environ import temporary_environ
from kit.evidence.report.sidecar_formats import SharedGpuArm
from kit.model.llama import LlamaCausalLM
from kit.model.shard import Layout
from kit.refs import CommitRef, PeerCommitRef, Ref, SeedRef, ref_from_json
from kit.replicate_order import ReplicateRefused, check_replicate, describe, reorder_steps
from kit.store import commits
from kit.store.start import Start, start_from_commit, start_from_seed
from kit.study.compression_state import (
    load_compression_state,
    read_compression_record,
    write_compression_state,
)
from kit.study.cost import arm_cost, project_arm
from kit.study.formats import (
    ArmCommit,
    ArmMeasurement,
    ArmProjection,
    ArmRecord,
    ArmTraffic,
    ArmWorkerPlan,
    CompressorStats,
    Endpoint,
    LogicalTrafficSummary,
    ReplicaCommitOutcome,
    ReplicaResult,
    ReplicateOrder,
    StudyClock,
    StudySchedule,
    TrainRow,
    UpdateRow,
    plain,
    with_nulls,
)
from kit.study.measurement import padded_tokens, summarise
from kit.study.prepare import PREPARED_DIR, check_seed, check_source, load_prepared_job, read_train_rows
from kit.study.schema import (
    StudyContract,
    arm_spec,
    engine_config,
    lr_schedule,
    optimizer_groups,
    powersgd_config_dict,
    study_terms,
)
from kit.train.batch import TrainRecord
from kit.train.powersgd import FP32_BYTES, PowerSGDCompressor, PowerSGDConfig
from kit.train.schedule import CONSTANT, lr_factor

ARM_FORMAT = "kit.study.arm/1"
NON_RUN = ("failed", "rejected", "unavailable")
FREEZE_FILE = "evaluation/freeze.json"  # written by evaluation; arms refuse to run after it
DEADLINE_GRACE_S = 60.0


class DeadlineExceeded(RuntimeError):
    pass


class ArmRefused(ValueError):
    pass


@dataclass(frozen=True)
class ArmRequest:
    """One arm of the study: what `kit study arm` and notebook 20 ask for. Empty strings and zeros (a
    notebook's "not given") read as None."""

    study_dir: str  # the prepared study (`kit study prepare` OUT)
    arm: str  # the contract's arm name: "single", "dense" or "powersgd"
    seed_dir: str  # the seed the study was prepared from
    resume: str | None = None  # full root of a commit in this arm's store to continue from (None: the seed)
    until: int | None = None  # stop after this update (None: the contract's last; earlier stops are partial)
    seconds_per_update: float | None = None  # a measured per-update time for the projection (None: the contract's)
    threads: int = 1  # torch threads per worker
    compile_blocks: str = "auto"  # "auto": torch.compile the blocks on CUDA (never on CPU); "off": eager
    replicate: int = 0  # 0: the committed run; k > 0: the same arm on a derived data order (kit/replicate_order.py)

    def __post_init__(self):
        for name in ("study_dir", "seed_dir"):
            value = getattr(self, name)
            if not isinstance(value, (str, os.PathLike)) or not str(value):
                raise ArmRefused(f"ArmRequest.{name} = {value!r}; expected a path")
            object.__setattr__(self, name, str(value))
        if not isinstance(self.arm, str) or not self.arm:
            raise ArmRefused(f"ArmRequest.arm = {self.arm!r}; expected an arm name of the contract")
        if self.resume is not None and not isinstance(self.resume, str):
            raise ArmRefused(f"ArmRequest.resume = {self.resume!r}; expected a full root or None")
        for name in ("resume", "until", "seconds_per_update"):
            if getattr(self, name) in ("", 0):
                object.__setattr__(self, name, None)
        if self.until is not None and (isinstance(self.until, bool) or not isinstance(self.until, int)):
            raise ArmRefused(f"ArmRequest.until = {self.until!r}; expected an int or None")
        if self.seconds_per_update is not None and (isinstance(self.seconds_per_update, bool) or not isinstance(
                self.seconds_per_update, (int, float)) or self.seconds_per_update <= 0):
            raise ArmRefused(f"ArmRequest.seconds_per_update = {self.seconds_per_update!r}; expected seconds > 0")
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1:
            raise ArmRefused(f"ArmRequest.threads = {self.threads!r}; expected a positive int")
        if self.compile_blocks not in ("auto", "off"):
            raise ArmRefused(f"ArmRequest.compile_blocks = {self.compile_blocks!r}; expected 'auto' or 'off'")
        try:
            check_replicate(self.replicate, "ArmRequest.replicate")
        except ReplicateRefused as e:
            raise ArmRefused(str(e)) from None

    @property
    def home(self) -> str:
        """The arm's checkpoint store (STUDY/arms/<arm>/home; a replicate's STUDY/arms/<arm>-r<k>/home)."""
        return str(arm_dir(self.study_dir, self.arm, self.replicate) / "home")

    def start(self) -> SeedRef | CommitRef:
        """Where the arm starts: the seed, or `resume` in the arm's store."""
        return SeedRef(self.seed_dir) if self.resume is None else CommitRef(self.home, self.resume)


# --- worker ---------------------------------------------------------------------------------
def _tensor_digest(t: torch.Tensor) -> str:
    """sha256 of the raw bytes ObjectStore.put_tensor would store, without storing them."""
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return hashlib.sha256(flat.view(torch.uint8).numpy().data).hexdigest()  # the array's buffer, a memoryview


def learned_state_root_of(session: Session) -> str:
    """The learned-state root this replica's commit would have (kit/store/commits.py's entries)."""
    entries = []
    for name, st in sorted(session.engine.optimizer.param_states().items()):
        entries.append({"name": name, "dtype": commits.LEARNED_DTYPE, "shape": list(st["param"].shape),
                        "group": st["group"], "age": st["age"],
                        **{f: _tensor_digest(st[f]) for f in commits.TENSOR_FIELDS}})
    return commits.learned_state_root({"cursor": {"step": session.step}, "params": entries})


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _records(rows: list[TrainRow]) -> list[TrainRecord]:
    return [TrainRecord(r.id, r.input_ids, r.target_mask) for r in rows]


def _commit(group: Group, session: Session, home: str, compressor, traffic: LogicalTraffic) -> ArmCommit:
    """Replica 0 commits; every replica compares its learned-state root; PowerSGD ranks save their state."""
    t0 = time.perf_counter()
    mine = learned_state_root_of(session)
    outcome = ReplicaCommitOutcome(rank=group.rank, learned=mine, full=None, error=None)
    if group.rank == 0:
        try:
            full, learned = session.commit()
            outcome = replace(outcome, full=full, error=None if learned == mine else
                              f"committed learned-state root {learned} differs from the replica's own {mine}")
        except (ValueError, OSError) as e:
            outcome = replace(outcome, error=f"{type(e).__name__}: {e}")
    payload = canonical_json(outcome.to_json())
    gathered = [ReplicaCommitOutcome.from_json(loads_strict(b, "commit outcome"), "commit outcome")
                for b in group.allgather_bytes(payload)]
    if group.world > 1:
        traffic.add_overhead(len(payload) * group.world, in_update=False)
    errors = [f"rank {g.rank}: {g.error}" for g in gathered if g.error]
    if errors:
        raise RuntimeError("commit failed: " + "; ".join(errors))
    full_root = gathered[0].full
    assert full_root is not None, "rank 0 committed (else its error was raised above)"
    record = None
    if compressor is not None:
        record = write_compression_state(home, full_root, group.rank, group.world, compressor)
    roots = tuple(g.learned for g in gathered)
    return ArmCommit(step=session.step, full_root=full_root, learned_state_root=roots[0],
                     replica_learned_state_roots=roots, replicas_equal=len(set(roots)) == 1,
                     compression_record=record, seconds=time.perf_counter() - t0)


@contextlib.contextmanager
def own_compile_cache():
    """An empty `torch.compile` cache for this worker process while it trains, removed after.

    The first update of an arm on CUDA pays for compiling the blocks, and the screen's active time
    counts it; through the host's shared cache an arm would find that cost already paid by an earlier
    arm that compiled the same shapes, and look faster than it is. With a cache per worker no run
    inherits an earlier one's compile (measurements: docs/study.md, "Measurement")."""
    path = tempfile.mkdtemp(prefix="kit-arm-compile-")
    # Triton's kernels too: inductor derives TRITON_CACHE_DIR from its own folder only when it is unset, so
    # one inherited from the host (or set by an earlier compile in this process) would stay shared.
    try:
        with temporary_environ({"TORCHINDUCTOR_CACHE_DIR": path, "TRITON_CACHE_DIR": os.path.join(path, "triton")}):
            yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def arm_worker(group: Group, args: ArmWorkerPlan | dict, ctx) -> dict:
    """Launcher entry (`kit.study.arms:arm_worker`): train one arm's replica from `plan.start` to `plan.until`,
    compiling from an empty cache (own_compile_cache: the first update then does
    not find the compile of an arm that ran on this host before).

    args: the worker plan (kit.study.formats.ArmWorkerPlan), or its JSON as the launcher reads it back from
    `launch-args.json`."""
    plan = args if isinstance(args, ArmWorkerPlan) else ArmWorkerPlan.from_json(args, "launch-args.json")
    return arm_worker_result(group, plan, ctx).to_json()


def arm_worker_result(group: Group, plan: ArmWorkerPlan, ctx) -> ReplicaResult:
    """`arm_worker`'s result as its record (kit/study/hosts.py gathers it under torchrun)."""
    with own_compile_cache() as cache:
        return replace(_train_replica(group, plan, ctx), compile_cache=cache)


def _show_progress(ctx, u: UpdateRow, start_step: int, until: int) -> None:
    """The launcher's bar (kit/distributed/launch.py): updates done in this launch, the last one's objective
    and target tokens per second."""
    # the study's objective is the cross-entropy per target token (no replay, no KL): the bar's ce/token too
    ctx.progress(done=u.step - start_step, total=until - start_step, loss=u.objective, ce=u.objective,
                 tokens_per_s=u.target_tokens / max(u.seconds, 1e-9))


def _gradient_reducer(plan: ArmWorkerPlan, session: Session, start, rank: int, world: int,
                      traffic: LogicalTraffic) -> PowerSGDCompressor | None:
    """The arm's gradient reduction set on the engine (none for the single arm); the PowerSGD compressor, its
    state loaded from the start commit, where the arm compresses."""
    if plan.reduction == "dense":
        session.engine.grad_reducer = DenseSumReducer(world, traffic)
        return None
    if plan.reduction != "powersgd":
        return None
    params = session.engine.params
    compressor = PowerSGDCompressor(PowerSGDConfig.from_dict(plain(plan.powersgd), "contract field 'powersgd'"),
                                    {n: tuple(p.shape) for n, p in params.items()})
    if start.commit is not None:
        load_compression_state(plan.home, start.commit.full_root, rank, world, compressor)
        if compressor.step != session.step:
            raise ValueError(f"compression state of {start.commit.full_root} is at step "
                             f"{compressor.step}, the commit at step {session.step}")
    session.engine.grad_reducer = PowerSGDSumReducer(compressor, world, traffic)
    return compressor


def _train_replica(group: Group, plan: ArmWorkerPlan, ctx) -> ReplicaResult:
    t_setup = time.perf_counter()
    study = Path(plan.study_dir)
    terms = study_terms(plain(plan.contract))
    rows = read_train_rows(study)
    schedule = replicate_schedule(study, terms, plan.replicate)
    world, rank, device = group.world, group.rank, group.device
    home = plan.home
    start = open_ref(ref_from_json(plain(plan.start), "worker argument 'start'"))
    local = Group(0, 1, device, group.timeout_s)  # one pipeline stage: this replica holds the whole model
    layout = Layout(((0, start.shape.num_hidden_layers),))
    engine_cfg = engine_config(terms, compile_blocks=plan.compile_blocks)
    bucket = engine_cfg.bucket_for(device)  # CUDA: lengths padded to multiples of 64; CPU: unchanged
    session = Session(local, home, layout, start, engine_cfg, optimizer_groups(terms),
                      admission={"microbatch": [engine_cfg.microbatch_size, plan.max_tokens],
                                 "microbatches": -(-max(-(-len(u) // world) for u in schedule)
                                                   // engine_cfg.microbatch_size)})
    params = session.engine.params
    traffic = LogicalTraffic(world, sum(p.numel() for p in params.values()) * FP32_BYTES)
    compressor = _gradient_reducer(plan, session, start, rank, world, traffic)
    until, every, schedule_lr = plan.until, plan.commit_every, lr_schedule(terms)
    start_step, setup_seconds = session.step, time.perf_counter() - t_setup
    updates: list[UpdateRow] = []
    made: list[ArmCommit] = []
    active = checkpoint = 0.0
    while session.step < until:
        step = session.step + 1
        ctx.progress(step=step, phase="update")
        late = torch.tensor([1.0 if time.time() > plan.deadline_at else 0.0], dtype=torch.float64, device=device)
        if world > 1:  # every replica stops at the same update, so none waits on a peer that left
            group.allreduce_max_(late)
            traffic.add_overhead(late.numel() * late.element_size())
        if float(late) > 0:
            raise DeadlineExceeded(f"the study's stop deadline passed before update {step}")
        batch = [rows[i] for i in schedule[step - 1]]
        records = _records(batch)
        n_targets = sum(r.num_targets for r in records)  # N of the whole global batch
        mine = records[rank::world]
        if schedule_lr != CONSTANT:
            session.set_lr_factor(lr_factor(schedule_lr, step - 1, terms.schedule.updates))
        _sync(device)
        t0 = time.perf_counter()
        res = session.update(mine, total_targets=n_targets)
        parts = torch.tensor([res.parts.ce_sum, res.parts.kl_sum], dtype=torch.float64, device=device)
        if world > 1:
            group.allreduce_sum_(parts)
            traffic.add_overhead(parts.numel() * parts.element_size())
        _sync(device)
        active += (seconds := time.perf_counter() - t0)
        traffic.end_update(step)
        t_rec = traffic.updates[-1]
        ce, kl = (float(x) for x in parts.cpu())
        updates.append(UpdateRow(
            step=step, ce_sum=ce, kl_sum=kl, objective=ce / n_targets, target_tokens=n_targets,
            input_tokens=sum(len(r.input_ids) for r in records), documents=len(records),
            local_padded_tokens=padded_tokens(mine, engine_cfg.microbatch_size, bucket),
            local_documents=len(mine), grad_norm=res.grad_norm, clip_factor=res.clip_factor,
            seconds=seconds, warmup=t_rec.warmup, gradient_bytes=t_rec.gradient_bytes,
            overhead_bytes=t_rec.overhead_bytes))
        _show_progress(ctx, updates[-1], start_step, until)
        if step == until or (every and step % every == 0):
            ctx.progress(phase="commit")
            c = _commit(group, session, home, compressor, traffic)
            checkpoint += c.seconds
            made.append(_logged(ctx, group, c))
    # host, device and the group's transport as this rank saw them: the arm record's `shared_gpus` is
    # read from these (kit.study.measurement.shared_gpus), not from the admission's count
    return ReplicaResult(rank=rank, world=world, arm=plan.arm, device=str(device), host=socket.gethostname(),
                         backend=group.backend, staged=group.staged, start_step=start_step,
                         updates=tuple(updates), commits=tuple(made), setup_seconds=setup_seconds,
                         active_seconds=active, checkpoint_seconds=checkpoint,
                         traffic=LogicalTrafficSummary.from_json(traffic.summary(), "the rank's traffic"),
                         powersgd=CompressorStats.from_json(compressor.stats(), "the compressor's stats")
                         if compressor is not None else None)


COMMITS_LOG = "commits.jsonl"  # the attempt's commits, one line each as rank 0 makes them (STUDY/arms/ARM/run/)


def _logged(ctx, group: Group, commit: ArmCommit) -> ArmCommit:
    """Rank 0 appends the commit to the attempt's log as it happens, so an attempt that fails or is stopped later
    still names it (logged_commits); returns the commit."""
    if group.rank == 0:
        with open(Path(ctx.run_dir) / COMMITS_LOG, "ab") as f:
            f.write(canonical_json(commit.to_json()) + b"\n")
    return commit


def logged_commits(run_dir: Path) -> list[ArmCommit]:
    """The commits the attempt launched in `run_dir` logged as it made them; a line cut short (or not a commit)
    is left out."""
    try:
        lines = (run_dir / COMMITS_LOG).read_bytes().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(ArmCommit.from_json(loads_strict(line, COMMITS_LOG), COMMITS_LOG))
        except ValueError:  # ContractError is a ValueError too
            continue
    return out


def replicate_schedule(study_dir: Path, terms: StudyContract, replicate: int) -> list[list[str]]:
    """The prepared schedule's updates (ids), in replicate `replicate`'s order: the prepared order itself for 0,
    else the same documents reordered from the contract terms' `schedule.order_seed` (kit/replicate_order.py)."""
    path = Path(study_dir) / PREPARED_DIR / "schedule.json"
    updates = [list(u) for u in StudySchedule.from_json(load_json_strict(path), str(path)).updates]
    return reorder_steps(updates, terms.schedule.order_seed, replicate)


# --- driver ---------------------------------------------------------------------------------
def arm_dir(study_dir: str | os.PathLike, arm: str, replicate: int = 0) -> Path:
    """STUDY/arms/<arm>; a replicate k > 0 of it: STUDY/arms/<arm>-r<k>, which no evaluation freeze lists."""
    return Path(study_dir) / "arms" / (arm if not replicate else f"{arm}-r{replicate}")


def arm_record(study_dir: str | os.PathLike, arm: str, replicate: int = 0) -> ArmRecord | None:
    """The arm's latest attempt (`arm.json`), None when it never ran."""
    path = arm_dir(study_dir, arm, replicate) / "arm.json"
    return ArmRecord.from_json(load_json_strict(path), str(path)) if path.exists() else None


def read_arm_record(study_dir: str | os.PathLike, arm: str, replicate: int = 0) -> dict | None:
    """The notebooks' view of `arm_record`: its plain JSON (notebook 22 reads it as a dict)."""
    record = arm_record(study_dir, arm, replicate)
    return record.to_json() if record is not None else None


@dataclass(frozen=True, slots=True)
class ArmStatus:
    """An arm of the contract with its latest attempt's status ("not run" when it has no record)."""
    arm: str
    workers: int
    reduction: str
    status: str
    reason: str | None
    endpoint: Endpoint | None  # the latest record's, completed arms only
    attempts: int

    def to_json(self) -> dict:
        return {"arm": self.arm, "workers": self.workers, "reduction": self.reduction, "status": self.status,
                "reason": self.reason,
                "endpoint": self.endpoint.to_json() if self.endpoint else None, "attempts": self.attempts}


def arm_statuses(study_dir: str | os.PathLike, terms: StudyContract) -> list[ArmStatus]:
    """Every arm of the contract terms with its latest status and reason ("not run" when it has no record)."""
    out = []
    for spec in terms.arms:
        rec = arm_record(study_dir, spec.name)
        out.append(ArmStatus(arm=spec.name, workers=spec.workers, reduction=spec.reduction,
                             status=rec.status if rec else "not run", reason=rec.reason if rec else None,
                             endpoint=rec.endpoint if rec else None,
                             attempts=rec.attempts if rec else 0))
    return out


MIN_GPUS = 1  # workers beyond the host's GPUs share them (expected_sharing)


def _host_gpus(cuda_devices: int | None) -> int:
    return torch.cuda.device_count() if cuda_devices is None else cuda_devices


def availability(terms: StudyContract, arm, cuda_devices: int | None = None) -> str | None:
    """Why this host cannot run `arm` (an arm of the contract terms; None when it can): the contract's
    device, counted here.

    A cuda arm needs one GPU, not one per worker: with more workers than GPUs the workers share them
    (kit.distributed.group.join then stages their messages through host memory over gloo), which
    the arm record says in `shared_gpus` and the speed screen reads as "not measured"."""
    if terms.device == "cuda":
        n = _host_gpus(cuda_devices)
        if n < MIN_GPUS:
            return (f"contract device 'cuda' needs {MIN_GPUS} GPU(s) for arm {arm.name!r}; this host has "
                    f"torch.cuda.device_count() = {n}")
    return None


def expected_sharing(terms: StudyContract, arm, cuda_devices: int | None = None) -> SharedGpuArm | None:
    """The `shared_gpus` an admitted arm will have on this host (None: each worker has its own GPU, or
    CPU). The record keeps it only until the ranks report their own (kit.study.measurement.shared_gpus);
    a failed attempt, whose ranks reported nothing, keeps it, marked by its `source`."""
    n = _host_gpus(cuda_devices) if terms.device == "cuda" else None
    if n is None or arm.workers <= n:
        return None
    return SharedGpuArm(workers=arm.workers, gpus=n, transport=STAGED_BACKEND,
                        source="admission (this host's GPU count; the ranks reported nothing)")


def _clock(study_dir: Path) -> float | None:
    path = study_dir / "arms" / "clock.json"
    return StudyClock.from_json(load_json_strict(path), str(path)).started_at if path.exists() else None


def attempt_records(study_dir: str | os.PathLike, arm: str, replicate: int = 0) -> list[ArmRecord]:
    """Every attempt of `arm` (or of its replicate), oldest first (none is ever deleted)."""
    return [ArmRecord.from_json(load_json_strict(p), str(p))
            for p in sorted((arm_dir(study_dir, arm, replicate) / "attempts").glob("*.json"))]


def spent_usd(study_dir: str | os.PathLike) -> float:
    """Money of every attempt that ran (failed ones included)."""
    total = 0.0
    for path in sorted((Path(study_dir) / "arms").glob("*/attempts/*.json")):
        cost = ArmRecord.from_json(load_json_strict(path), str(path)).cost
        total += cost.total_usd if cost is not None else 0.0
    return total


def open_ref(ref: Ref) -> Start:
    """The engine's start state for a seed or a commit of this host's store."""
    if isinstance(ref, PeerCommitRef):
        raise TypeError(f"{ref.root}: a study arm starts from a seed or a commit of this host's store, not a peer's")
    return start_from_commit(ref.home, ref.root) if isinstance(ref, CommitRef) else start_from_seed(ref.seed_dir)


def named_shapes(ref: SeedRef | CommitRef) -> dict[str, tuple[int, ...]]:
    with torch.device("meta"):
        model = LlamaCausalLM(open_ref(ref).shape)
    return {n: tuple(p.shape) for n, p in model.named_parameters()}


def projected_logical_bytes(terms: StudyContract, arm, shapes: dict, first_step: int, until: int) -> int:
    """Bytes each rank will hand to collectives for updates first_step+1..until (gradients only)."""
    if arm.workers < 2:
        return 0
    dense = sum(int(torch.Size(s).numel()) for s in shapes.values()) * FP32_BYTES
    if arm.reduction == "dense":
        return dense * (until - first_step)
    cfg = PowerSGDConfig.from_dict({**powersgd_config_dict(terms), "warm_start": False})  # no Q draws
    comp = PowerSGDCompressor(cfg, shapes)
    compressed = (sum(int(torch.Size(shapes[n]).numel()) for n in comp.dense_names)
                  + sum(m.r * (m.n + m.m) for m in comp.matrices.values())) * FP32_BYTES
    warm = max(0, min(until, cfg.warmup_updates) - first_step)
    return dense * warm + compressed * (until - first_step - warm)


PENDING = "pending"  # an admitted arm's status until finish_arm sets the attempt's own: never written


def _write_attempt(study_dir: Path, record: ArmRecord) -> ArmRecord:
    """Write the attempt as the next `attempts/NNN.json` and as `arm.json`; returns it with its number."""
    d = arm_dir(study_dir, record.arm, record.replicate_index)
    attempts = d / "attempts"
    attempts.mkdir(parents=True, exist_ok=True)
    n = len(list(attempts.glob("*.json"))) + 1
    # every record writes `shared_gpus` (null: none shared); one the ranks reported writes `compression_records`
    # (null: not PowerSGD)
    record = with_nulls(replace(record, attempts=n), "shared_gpus",
                        *(("compression_records",) if record.replicas_equal is not None else ()))
    written = record.to_json()
    write_canonical_json(attempts / f"{n:03d}.json", written)
    write_canonical_json(d / "arm.json", written)
    return record


def run_arm(request: ArmRequest, *, cuda_devices: int | None = None, now: float | None = None) -> dict:
    """`run_arm_record`'s record as its JSON (notebook 20, through kit.run_arm, reads it as a dict)."""
    return run_arm_record(request, cuda_devices=cuda_devices, now=now).to_json()


def run_arm_record(request: ArmRequest, *, cuda_devices: int | None = None, now: float | None = None) -> ArmRecord:
    """Admit, run and record one arm; returns its record (also for unavailable and rejected arms).
    `cuda_devices` (None: counted) and `now` (None: the clock) describe the host, not the request."""
    admitted = admit_arm(request, cuda_devices=cuda_devices, now=now)
    if not isinstance(admitted, Admission):  # unavailable or rejected: written, never launched
        return admitted
    record, plan, contract = admitted.record, admitted.plan, admitted.contract
    study_dir, arm_name, spec = Path(request.study_dir), request.arm, admitted.spec
    run_dir = arm_dir(study_dir, arm_name, request.replicate) / "run"
    (run_dir / COMMITS_LOG).unlink(missing_ok=True)  # an earlier attempt's
    before = interface_counters_or_none()
    started = time.time()
    record = replace(record, started_at=started)
    try:
        results = launch(arm_worker, plan.to_json(), spec.workers, run_dir,
                         timeout_s=max(1.0, plan.deadline_at - started) + DEADLINE_GRACE_S,
                         threads=request.threads, progress_total=plan.until - admitted.first_step,
                         progress_first_step=admitted.first_step, desc=f"arm {arm_name}")
        status, reason = finished_status(plan.until, contract.terms)
    except WorkerFailure as e:
        results, status, reason = None, "failed", str(e)
    ended = time.time()
    after = interface_counters_or_none()
    return finish_arm(study_dir, record, contract,
                      [ReplicaResult.from_json(r, f"rank {i}'s result") for i, r in enumerate(results)]
                      if results is not None else None, status, reason, started, ended,
                      counter_delta(before, after) if before and after else None)


def finished_status(until: int, terms: StudyContract) -> tuple[str, str | None]:
    updates = terms.schedule.updates
    return ("completed", None) if until == updates else ("partial", f"stopped at update {until} of {updates} (--until)")


def finish_arm(study_dir: Path, record: ArmRecord, contract: Contract[StudyContract],
               results: list[ReplicaResult] | None, status: str, reason: str | None, started: float, ended: float,
               interfaces: dict | None, per_rank_interfaces: list | None = None) -> ArmRecord:
    """Summarise the ranks' results into the record and write the attempt (the launcher's rank 0 or the
    local driver). `interfaces` is this host's counter delta; `per_rank_interfaces` every rank's own
    (one process per host under torchrun), gathered over the process group."""
    record = replace(record, status=status, reason=reason, ended_at=ended, traffic=ArmTraffic(
        interfaces=interfaces if interfaces is not None else
        {"unavailable": "/proc/net/dev could not be read on this host"},
        interfaces_per_rank=per_rank_interfaces))
    wall = ended - started
    spec = arm_spec(contract, record.arm)
    if results is None:  # no rank reported: the admission's sharing stands (expected_sharing)
        if record.home:  # a home was made: the commits it logged before the failure (none before one)
            record = replace(record, commits=tuple(logged_commits(Path(record.home).parent / "run")))
        record = replace(record, cost=arm_cost(contract.terms, wall, [0] * spec.workers, gpus=record.devices),
                         measurement=ArmMeasurement(wall_seconds=wall, workers=spec.workers, devices=record.devices))
        return _write_attempt(Path(study_dir), record)
    return _write_attempt(Path(study_dir), summarise(record, results, wall, contract.terms))


@dataclass(frozen=True, slots=True)
class Admission:
    """An arm admitted to run: its record so far (status PENDING; the run completes it and `_write_attempt` writes
    it), the worker plan every replica gets, the contract, the arm's contract entry and the step it starts from."""
    record: ArmRecord
    plan: ArmWorkerPlan
    contract: Contract
    spec: Any  # the contract's arm entry (name, workers, reduction): its class is the contract helper's
    first_step: int


def admit_arm(request: ArmRequest, *, cuda_devices: int | None = None, now: float | None = None,
              write: bool = True) -> ArmRecord | Admission:
    """Every check before an arm runs. Returns the written record of an unavailable or rejected arm,
    or the `Admission` of one that may run (with `write`, the study clock starts). Raises ArmRefused for a
    request that is wrong."""
    study_dir, arm_name, seed_dir, resume_root = Path(request.study_dir), request.arm, request.seed_dir, request.resume
    seconds_per_update, until = request.seconds_per_update, request.until
    prepared, contract, prepared_digest = load_prepared_job(study_dir)
    if (study_dir / FREEZE_FILE).exists():
        raise ArmRefused(f"{study_dir / FREEZE_FILE}: candidates were frozen for final-test scoring; no arm may "
                         "run after that")
    terms = contract.terms
    spec = arm_spec(contract, arm_name)
    replicate = request.replicate
    last = arm_record(study_dir, arm_name, replicate)
    if last is not None and last.status == "completed":
        raise ArmRefused(f"{arm_dir(study_dir, arm_name, replicate) / 'arm.json'}: arm {arm_name!r} already "
                         f"completed at {last.endpoint.full_root if last.endpoint else None}; its endpoint is fixed")
    updates = terms.schedule.updates
    until = updates if until is None else int(until)
    home = arm_dir(study_dir, arm_name, replicate) / "home"
    record = ArmRecord(
        format=ARM_FORMAT, arm=arm_name, workers=spec.workers, reduction=spec.reduction,
        contract_digest=contract.digest, prepared_digest=prepared_digest, device=terms.device, home=str(home),
        resume_root=resume_root, until=until, attempts=0, status=PENDING, reason=None, projection=None,
        endpoint=None, commits=(), measurement=None, traffic=None, cost=None, updates=None, started_at=None,
        ended_at=None, shared_gpus=None,
        # only replicates carry it: a committed run's record keeps its bytes
        replicate=ReplicateOrder.from_json(describe(terms.schedule.order_seed, replicate,
                                                    replicate_schedule(study_dir, terms, replicate)),
                                           "the replicate's order") if replicate else None)
    if not 1 <= until <= updates:
        raise ArmRefused(f"--until {until}: expected 1..{updates} (contract field 'schedule.updates')")
    missing = availability(terms, spec, cuda_devices)
    if missing:
        rec = replace(record, status="unavailable", reason=missing)
        return _write_attempt(study_dir, rec) if write else rec
    record = replace(record, shared_gpus=expected_sharing(terms, spec, cuda_devices))
    check_seed(prepared, seed_dir)
    check_source(prepared, study_dir / PREPARED_DIR / "prepared.json")
    start = request.start()
    first = open_ref(start).step if resume_root else 0
    if resume_root and spec.reduction == "powersgd":
        for rank in range(spec.workers):  # refused here, before any process starts
            read_compression_record(home, resume_root, rank, spec.workers)
    if first >= until:
        raise ArmRefused(f"resume root {resume_root} is at step {first}; nothing to run up to --until {until}")
    shapes = named_shapes(start)
    given = seconds_per_update is not None
    spu = seconds_per_update if seconds_per_update is not None else getattr(terms.projection.seconds_per_update,
                                                                            arm_name)
    every = terms.training.commit_every
    n_commits = len({s for s in range(first + 1, until + 1) if every and s % every == 0} | {until})
    now = time.time() if now is None else now
    clock = _clock(study_dir)
    proj: ArmProjection = project_arm(terms, spec, until - first, spu, "measured (given)" if given else "contract",
                                      projected_logical_bytes(terms, spec, shapes, first, until), n_commits, now,
                                      clock, spent_usd(study_dir), gpus=record.devices)
    record = replace(record, projection=proj)
    if not proj.fits:
        rec = replace(record, status="rejected", reason=proj.reason)
        return _write_attempt(study_dir, rec) if write else rec
    if clock is None and write:
        write_canonical_json(study_dir / "arms" / "clock.json", StudyClock(started_at=now).to_json())
    deadline_at = proj.deadline_at
    home.mkdir(parents=True, exist_ok=True)
    plan = ArmWorkerPlan(arm=arm_name, reduction=spec.reduction, study_dir=str(study_dir), home=str(home),
                         start=start.to_json(), until=until, commit_every=every, contract=terms.to_json(),
                         compile_blocks=request.compile_blocks, max_tokens=terms.data.max_tokens,
                         powersgd=powersgd_config_dict(terms) if spec.reduction == "powersgd" else None,
                         deadline_at=deadline_at, device=terms.device, timeout_s=terms.collective_timeout_s,
                         replicate=replicate)
    return Admission(record=record, plan=plan, contract=contract, spec=spec, first_step=first)
