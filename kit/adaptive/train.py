"""`kit adaptive train`: one cohort arm of the adaptive experiment on owned blocks only, asked for by a
`CohortRequest` (the CLI's options, notebook 11's parameters).

The driver checks every input commitment (the kit's own source included) before any worker starts,
creates an attempt record that survives every outcome, prepares the start state, launches the
workers and finalises the record; per-update numbers go to `attempts/<attempt>/updates.jsonl`.
The decision to know: one global cursor (`step` since the seed, `cohort`, `cohort_step`), and
cohort B continues the committed A endpoint with the same Adam state.
Details: the notes below; files: docs/formats/adaptive-homes.md, "Adaptive homes".

Notes: the start states, the update log and the cursor.

The start state is a seed, a commit to resume, a migration from another store, or the append transition; the
driver launches the workers (local launcher) or is one torchrun worker. `updates.jsonl` holds each update's CE, KL,
token counts, gradient norm, clip factor, time and record ids; at each commit point and the endpoint the driver
prints one JSON line with the step and both roots. `step` counts Adam updates since the seed; `cohort` is 0 (A) or
1 (B); cohort B starts from the committed A endpoint (cohort 0 at its endpoint).
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from kit import numerics
from kit.adaptive.bindings import TrainRefused, check_a_trained, check_bindings, check_cohort, check_inputs
from kit.adaptive.continued_schema import JobTerms, job_contract
from kit.adaptive.formats import (
    AnyPreparedJob,
    CommitCursor,
    ContinuedPreparedJob,
    LayoutJson,
    MadeCommit,
    ScheduleEntry,
    WorkerPlan,
    WorkerSchedule,
    commit_cursor,
    load_attempt,
    load_job_files,
    load_prepared,
    ref_json,
    worker_outcome,
    worker_schedule,
)
from kit.adaptive.growth import grow_commit
from kit.adaptive.lineage import inherit_logs
from kit.adaptive.ownership import memory_model_of, planned_layout
from kit.adaptive.schema import AdaptiveContract, Growth, commit_points, engine_config, optimizer_groups
from kit.data.chat import EncodedExample, encode_or_refuse, load_tokenizer
from kit.data.conversations import read_jsonl
from kit.digest import canonical_json, load_json_strict, loads_strict, write_canonical_json
from kit.distributed.group import under_torchrun
from kit.distributed.launch import DISK_RESERVE_ENV, launch
from kit.engine.migration import open_start, open_start_over_group, reference_over_group
from kit.engine.session import Session
from kit.interrupt import Interrupted, interruption
from kit.model.config import load_config
from kit.model.shard import even_layout
from kit.paths import inside
from kit.refs import CommitRef, PeerCommitRef, Ref, SeedRef
from kit.replicate_order import ReplicateRefused, check_replicate, describe, reorder_steps
from kit.store import commits
from kit.store.commits import read_head, verify_commit
from kit.store.in_use import held, in_use_by
from kit.store.manifest import Manifest
from kit.store.objects import ObjectStore, fetch_objects
from kit.store.start import start_from_commit
from kit.train.batch import TrainRecord
from kit.train.schedule import CONSTANT, lr_factor

WORKER_TIMEOUT_S = 300  # the workers' collective timeout (a dead peer is an error within it)
COHORTS = ("A", "B", "C")


@dataclass(frozen=True)
class CohortRequest:
    """One cohort arm of the adaptive experiment: what `kit adaptive train` and notebook 11 ask for.

    Empty strings and `until=0` (a notebook's "not given") read as None."""

    prepared: str  # the prepared job (`kit adaptive prepare` OUT)
    seed_dir: str  # the seed it was prepared from
    home: str  # the checkpoint store this arm commits into
    cohort: str  # "A", "B" or "C" (continued learning)
    workers: int  # local worker processes (under torchrun: WORLD_SIZE)
    resume: str | None = None  # full root of a complete commit to continue from (None: from the seed)
    reference: str | None = None  # cohorts B and C: full root of the frozen reference (the A endpoint)
    source_home: str | None = None  # migration: the store holding `resume` (assigned objects are fetched)
    until: int | None = None  # stop after this cohort step (None: the contract's endpoint)
    grow: bool = False  # append the contract's identity blocks before training
    reference_home: str | None = None  # the store holding `reference` (None: source_home, else home)
    timeout_s: float = 1800  # the whole launch's deadline (seconds)
    replicate: int = 0  # 0: the committed order; k > 0: the cohort's schedule in a derived order (kit/replicate_order.py)

    def __post_init__(self):
        for name in ("prepared", "seed_dir", "home"):
            value = getattr(self, name)
            if not isinstance(value, (str, os.PathLike)) or not str(value):
                raise TrainRefused(f"CohortRequest.{name} = {value!r}; expected a path")
            object.__setattr__(self, name, str(value))
        for name in ("resume", "reference", "source_home", "reference_home"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, (str, os.PathLike)):
                raise TrainRefused(f"CohortRequest.{name} = {value!r}; expected a string or None")
            object.__setattr__(self, name, str(value) if value not in (None, "") else None)
        if self.cohort not in COHORTS:
            raise TrainRefused(f"CohortRequest.cohort = {self.cohort!r}; expected one of {', '.join(COHORTS)}")
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise TrainRefused(f"CohortRequest.workers = {self.workers!r}; expected a positive int")
        if self.until == 0:
            object.__setattr__(self, "until", None)
        if self.until is not None and (isinstance(self.until, bool) or not isinstance(self.until, int)
                                       or self.until < 0):
            raise TrainRefused(f"CohortRequest.until = {self.until!r}; expected a positive int or None")
        if not isinstance(self.grow, bool):
            raise TrainRefused(f"CohortRequest.grow = {self.grow!r}; expected True or False")
        try:
            check_replicate(self.replicate, "CohortRequest.replicate")
        except ReplicateRefused as e:
            raise TrainRefused(str(e)) from None

    def for_job(self, pj: AnyPreparedJob) -> CohortRequest:
        """The request with the prepared job's defaults: cohort C starts from, and trains against, the
        store of the bound phase-A endpoint (prepared.json `locations.start_home`)."""
        if self.cohort != "C" or not isinstance(pj, ContinuedPreparedJob):
            return self
        # prepared.json files written before 2026-12-03 kept the store's path in `start.home`
        source_home = self.source_home or pj.locations.start_home or pj.start.home
        return replace(self, source_home=source_home, reference_home=self.reference_home or source_home)

    def start(self) -> SeedRef | CommitRef:
        """Where training starts: the seed, or `resume` in `source_home` (migration) or `home`."""
        return SeedRef(self.seed_dir) if self.resume is None else CommitRef(self.source_home or self.home,
                                                                            self.resume)

    def reference_ref(self) -> SeedRef | CommitRef:
        """What the KL term compares against: the seed for cohort A, else the committed `reference`."""
        if self.cohort == "A":
            return SeedRef(self.seed_dir)
        assert self.reference is not None, "check_cohort refuses cohorts B and C without --reference"
        return CommitRef(self.reference_home or self.source_home or self.home, self.reference)


def _schedule(prepared: Path) -> WorkerSchedule:
    """The job's schedule.json, the part training reads."""
    where = f"{Path(prepared) / 'prepared.json'} field 'schedule.file'"
    path = inside(Path(prepared), load_job_files(prepared).schedule.file, where)
    return worker_schedule(load_json_strict(path), str(path))


def cohort_steps(prepared: Path, cohort: str, replicate: int = 0) -> list[list[ScheduleEntry]]:
    """The cohort's scheduled updates, in replicate `replicate`'s order (the prepared order for 0; else each
    role's records reordered from the schedule's seed, every update keeping its count per role)."""
    schedule = _schedule(prepared)
    if replicate and schedule.seed is None:
        raise TrainRefused(f"{Path(prepared) / 'prepared.json'} field 'schedule.file': its field 'seed' must be an "
                           f"integer for replicate {replicate}'s derived order")
    seed = schedule.seed if replicate and schedule.seed is not None else 0
    return [list(step) for step in reorder_steps(schedule.cohorts[cohort].steps, seed, replicate,
                                                 role_of=lambda e: e.role, key=lambda e: e.id)]


def replicate_record(prepared: Path, cohort: str, replicate: int) -> dict:
    """What an attempt of replicate k > 0 records about its order (kit.replicate_order.describe)."""
    steps = cohort_steps(prepared, cohort, replicate)  # refuses a schedule without a seed
    seed = _schedule(prepared).seed
    assert seed is not None, "cohort_steps refused a schedule without one"
    return describe(seed, replicate, steps, key=lambda e: e.id)


@dataclass(frozen=True, slots=True)
class CohortData:
    """What every worker encodes of a cohort before its first update (deterministic, the same on every rank)."""

    steps: list[list[ScheduleEntry]]  # the schedule's updates, in this replicate's order
    encoded: dict[str, EncodedExample]  # record id -> its encoded example
    pad_id: int


def records_for_cohort(prepared: Path, cohort: str, seed_dir: str, max_tokens: int, replicate: int = 0) -> CohortData:
    """Encode every record the cohort's schedule names; an over-long record is refused before any update."""
    pj = load_job_files(prepared)
    where = f"{prepared / 'prepared.json'} field"
    steps = cohort_steps(prepared, cohort, replicate)
    roles = {e.role for step in steps for e in step}
    tok = load_tokenizer(seed_dir)
    convs = {}
    for role in sorted(roles):
        info = pj.roles[role]
        for c in read_jsonl(inside(prepared, info.file, f"{where} 'roles.{role}.file'"), info.sha256):
            convs[c.id] = c
    encoded: dict[str, EncodedExample] = {}
    for cid, c in convs.items():
        example = encode_or_refuse(tok, c, max_tokens, TrainRefused, f"{prepared}: record")
        assert example is not None  # an over-long record raised TrainRefused
        encoded[cid] = example
    return CohortData(steps=steps, encoded=encoded, pad_id=tok.pad_token_id or 0)


def _open_start(group, plan: WorkerPlan, layout, ctx) -> tuple:
    """The start state this worker's blocks train from: (start, bytes fetched, the peer fetch record or None).
    A commit of another store is migrated first; over the group when hosts share no filesystem."""
    start_ref = plan.start.ref()
    fetch = None
    if isinstance(start_ref, PeerCommitRef):  # hosts without a shared filesystem (kit/adaptive/torchrun.py)
        start, fetch = open_start_over_group(group, plan.home, layout, start_ref.root, start_ref.source, ctx)
        fetched = fetch["received"]
    elif isinstance(start_ref, CommitRef):  # from another store: its assigned objects are migrated first
        migrate_from = start_ref.home if start_ref.home != plan.home else None
        start, fetched = open_start(group, plan.home, layout, {"root": start_ref.root}, migrate_from, ctx)
    else:
        start, fetched = open_start(group, plan.home, layout, start_ref.to_json(), None, ctx)
    return start, fetched, fetch


def _open_reference(group, plan: WorkerPlan, layout) -> tuple:
    """The frozen reference of the KL term, as the Session takes it, and the peer fetch record (or None)."""
    reference_ref = plan.reference.ref()
    if isinstance(reference_ref, PeerCommitRef):
        return reference_over_group(group, reference_ref.source, plan.home, layout, reference_ref.root)
    return reference_ref.to_json(), None


def _start_cohort_step(terms: JobTerms, cohort: str, manifest: Manifest | None) -> int:
    """The cohort step training resumes at: 0 for the first update of cohort B (or C), which must start
    from the committed endpoint of the cohort before it; else the start commit's own cohort step."""
    order = terms.cohort_order
    cursor = commit_cursor(manifest) if manifest else CommitCursor(step=0)
    cohort_idx = order.index(cohort)
    if (cursor.cohort or 0) != cohort_idx:  # the first update of cohort B (or C), from the A endpoint
        if (cursor.cohort or 0) + 1 != cohort_idx or cursor.steps_in_cohort != terms.endpoints[order[cohort_idx - 1]]:
            shown = dict(manifest.learned_state.cursor) if manifest else {"step": 0}  # as the message always said
            raise TrainRefused(f"cohort {cohort} must start from the committed endpoint of cohort "
                               f"{order[cohort_idx - 1]}; the start commit's cursor is {shown}")
        return 0
    return cursor.steps_in_cohort


def adaptive_worker(group, args: dict | WorkerPlan, ctx) -> dict:
    """Launcher/torchrun entry; `args` is `worker_args`' plan, as JSON where it crossed into a worker process
    (the launcher's launch-args.json)."""
    # the prepared job's inputs are checked before the rest of the plan is read: a changed byte anywhere is the
    # first refusal a worker gives, whatever else its plan holds
    prepared = Path(args.prepared if isinstance(args, WorkerPlan) else args["prepared"])
    if os.environ.get("KIT_GPU_DETERMINISTIC") == "1" and group.device.type == "cuda":
        numerics.apply(group.device, deterministic_gpu=True, threads=int(os.environ.get("KIT_THREADS", "1")))
    ctx.progress(phase="check-inputs")
    check_inputs(prepared)  # every worker: a changed byte anywhere stops the run before the first update
    plan = args if isinstance(args, WorkerPlan) else WorkerPlan.from_json(args, "worker plan (launch-args.json)")
    terms = job_contract(load_prepared(prepared))
    order = terms.cohort_order
    tr = terms.training
    cohort = plan.cohort
    layout = plan.layout.layout()
    start, fetched, fetch = _open_start(group, plan, layout, ctx)
    reference, reference_fetch = _open_reference(group, plan, layout)
    data = records_for_cohort(prepared, cohort, plan.seed_dir, tr.max_tokens, plan.replicate)

    docs = terms.cohorts[cohort].documents_per_update
    # a continued-learning contract has no planner section: admission then uses the device's default model
    memory_model = memory_model_of(terms) if isinstance(terms, AdaptiveContract) else None
    session = Session(group, plan.home, layout, start, engine_config(terms, pad_id=data.pad_id),
                      optimizer_groups(terms), reference=reference,
                      admission={"microbatch": (tr.microbatch_size, tr.max_tokens),
                                 "microbatches": -(-docs // tr.microbatch_size),
                                 "memory_model": memory_model})
    cohort_idx = order.index(cohort)
    cohort_step = _start_cohort_step(terms, cohort, start.commit)
    until = min(int(plan.until or terms.endpoints[cohort]), terms.endpoints[cohort])
    points = set(commit_points(terms, cohort)) | {until}  # the contract's commit points, and where we stop
    log = Path(plan.attempt_dir) / "updates.jsonl" if group.rank == 0 else None
    first_cohort_step, made = cohort_step, []
    stats = _RankStats(group)
    while cohort_step < until:
        ctx.progress(step=session.step + 1, phase="update")
        entries = data.steps[cohort_step]
        records = [TrainRecord(e.id, data.encoded[e.id].input_ids, data.encoded[e.id].target_mask, 1.0, e.replay)
                   for e in entries]
        if tr.lr_schedule != CONSTANT:
            session.set_lr_factor(lr_factor(tr.lr_schedule, cohort_step, terms.cohorts[cohort].updates))
        res = session.update(records)
        cohort_step += 1
        ranks = stats.gather()  # every rank takes part (a collective); rank 0 logs it
        parts = res.parts.to_json()  # the bar: cross-entropy per new token, the objective beside it
        ctx.progress(done=cohort_step - first_cohort_step, total=until - first_cohort_step,
                     ce=parts["ce_per_token"], loss=res.parts.objective, tokens_per_s=res.tokens / max(res.seconds, 1e-9))
        if log is not None:
            _append_line(log, canonical_json({"cohort": cohort, "cohort_step": cohort_step, "step": session.step,
                                              "ids": [e.id for e in entries], **res.to_json(), "ranks": ranks}))
        if cohort_step in points:
            ctx.progress(phase="commit")
            full, learned = session.commit({"cohort": cohort_idx, "cohort_step": cohort_step})
            made.append(MadeCommit(cohort=cohort, cohort_step=cohort_step, step=session.step, full_root=full,
                                   learned_state_root=learned).to_json())
            if log is not None:  # as it happens: an attempt that is aborted or fails later still names it
                _append_line(log.with_name(COMMITS_LOG), canonical_json(made[-1]))
            stats.reset()  # the commit's traffic and buffers are not the next update's

    return {"rank": group.rank, "fetched_bytes": fetched, "commits": made, "start_cohort_step": first_cohort_step,
            "admission": session.admission, "device": str(group.device), "fetch": fetch,
            "reference_fetch": reference_fetch, "commit_transfers": session.transfers,
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled()}


def _append_line(path: Path, line: bytes) -> None:
    """Append one line to `path`; an OSError (a full disk) names the file."""
    try:
        with open(path, "ab") as f:
            f.write(line + b"\n")
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(path)) from e


class _RankStats:
    """Per-update measurements of one rank, gathered to every rank as canonical JSON: the peak of
    allocated device memory during the update (`torch.cuda.max_memory_allocated`, reset after each
    update; None on CPU) and the point-to-point bytes this rank handed to the pipeline's sends
    (`Group.bytes_sent`; collectives are not counted)."""

    def __init__(self, group):
        self.group = group
        self.reset()

    def reset(self) -> None:
        if self.group.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.group.device)
        self.sent = getattr(self.group, "bytes_sent", None)

    def gather(self) -> list[dict]:
        g = self.group
        peak = int(torch.cuda.max_memory_allocated(g.device)) if g.device.type == "cuda" else None
        sent = getattr(g, "bytes_sent", None)
        mine = {"rank": g.rank, "device": str(g.device), "peak_memory_bytes": peak,
                "bytes_sent": None if sent is None or self.sent is None else sent - self.sent}
        rows = [loads_strict(b, "rank stats") for b in g.allgather_bytes(canonical_json(mine))]
        self.reset()
        return rows


def checked_job(request: CohortRequest) -> tuple[CohortRequest, JobTerms, AnyPreparedJob]:
    """Shared by the local and torchrun paths: every input commitment and the kit's source, the
    contract (adaptive or continued), the cohort name, and a later cohort's reference and resume.
    Returns (the request with the job's defaults, contract view, prepared.json)."""
    prepared = Path(request.prepared)
    check_inputs(prepared)  # before anything else: source or input changes fail here, naming the file
    pj = load_prepared(prepared)
    terms = job_contract(pj)
    check_cohort(pj, terms, request.cohort, request.resume, request.reference, request.grow)
    endpoint = terms.endpoints[request.cohort]
    if request.until is not None and request.until > endpoint:  # it trained to the endpoint, silently
        raise TrainRefused(f"--until {request.until}: past cohort {request.cohort}'s endpoint, cohort step {endpoint} "
                           f"(contract field 'endpoints.{request.cohort}'); give 1..{endpoint}, or leave it out to "
                           "train to the endpoint")
    return request.for_job(pj), terms, pj


def worker_args(request: CohortRequest, start: Ref, reference: Ref, layers: int, attempt_dir: Path) -> WorkerPlan:
    """The one plan both launch paths hand `adaptive_worker`: the request's paths and cohort, the
    planner's layout from the prepared ownership manifest (`training_layout`) for the student's depth,
    the start and reference (kit.refs) and the attempt folder."""
    layout = training_layout(Path(request.prepared), layers, request.workers)
    return WorkerPlan(prepared=request.prepared, seed_dir=request.seed_dir, home=request.home, cohort=request.cohort,
                      layout=LayoutJson(blocks=tuple(tuple(r) for r in layout.ranges),
                                        embedding_owner=layout.embedding_owner),
                      start=ref_json(start), reference=ref_json(reference), until=request.until,
                      attempt_dir=str(attempt_dir), timeout_s=WORKER_TIMEOUT_S, replicate=request.replicate)


def student_layers(seed_dir: str, home: str | None, root: str | None) -> int:
    """The student's depth: commit `root`'s in `home` (a grown commit is deeper than the seed), else the seed's."""
    if root:
        assert home is not None, "a commit is read from its store"
        return start_from_commit(home, root).shape.num_hidden_layers

    return load_config(seed_dir).num_hidden_layers


def attempt_record(request: CohortRequest, attempt: str, pj: AnyPreparedJob) -> dict:
    """The attempt record as it starts (docs/formats/adaptive-homes.md, `attempt.json`): the request and the job's digest."""
    fields = {k: v for k, v in asdict(request).items() if k not in ("seed_dir", "home", "timeout_s", "replicate")}
    # only replicates carry it: a committed run's attempt record keeps its fields
    replicate = {"replicate": replicate_record(Path(request.prepared), request.cohort, request.replicate)} \
        if request.replicate else {}
    return {**fields, **replicate, "attempt": attempt, "prepared_job_digest": pj.job_digest, "started_at": time.time(),
            "status": "running", "error": None, "commits": []}


COMMITS_LOG = "commits.jsonl"  # an attempt's commits, one line each as it makes them (rank 0)


def logged_commits(attempt_dir: str | os.PathLike) -> list[dict]:
    """The commits an attempt logged as it made them (`attempts/<attempt>/commits.jsonl`), oldest first; a
    line cut short by the end of the process is left out."""
    try:
        lines = (Path(attempt_dir) / COMMITS_LOG).read_bytes().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(loads_strict(line, COMMITS_LOG))
        except ValueError:
            continue
    return [c for c in out if isinstance(c, dict)]


DISK_RESERVE_BYTES = 256 * 1024  # freed on a full disk so that the attempt's record can still be written


def train(request: CohortRequest) -> list[dict]:
    """The local driver: checks, attempt record, optional growth, launch, finalise. Returns commits.

    The record is finalised whatever ends the attempt: `completed`, `failed` with the error (one line),
    or `aborted` with the signal (SIGINT, SIGTERM: the workers are stopped first). An interruption is
    re-raised as `Interrupted` whose `next_step` names the command that resumes or cleans up."""
    if under_torchrun():
        raise TrainRefused("this process runs under torchrun (RANK and WORLD_SIZE are set): call "
                           "kit.adaptive.torchrun.train_torchrun (the CLI does) instead of the local launcher")
    request, terms, pj = checked_job(request)
    r = request
    prepared_p = Path(r.prepared)
    check_bindings(prepared_p, pj, terms, r.seed_dir, r.home, r.cohort, r.resume, r.reference, r.source_home,
                   r.reference_home)
    home_p = Path(r.home)
    home_p.mkdir(parents=True, exist_ok=True)
    adopted = adoptable_endpoint(r, terms, pj)
    attempt = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}"
    attempt_dir = home_p / "attempts" / attempt
    attempt_dir.mkdir(parents=True)
    record = attempt_record(r, attempt, pj)
    write_canonical_json(attempt_dir / "attempt.json", record)
    if adopted is not None:  # nothing left to train: record the endpoint a crashed attempt committed
        record.update(status="completed", commits=[adopted], adopted=True, ended_at=time.time())
        write_canonical_json(attempt_dir / "attempt.json", record)
        return [adopted]
    reserve = attempt_dir / "disk-reserve"
    reserve.write_bytes(os.urandom(DISK_RESERVE_BYTES))  # random: a compressing filesystem keeps it whole
    try:
        with held(r.home):  # `kit checkpoint gc --objects` is refused while this run may commit
            if r.source_home:  # the lineage's update logs travel with the migrated state, by reference
                inherit_logs(r.source_home, attempt_dir)
            if r.cohort == "B":
                check_a_trained(r.reference_home or r.source_home or r.home, prepared_p, terms.endpoints["A"])
            start = r.start()
            if r.grow:  # the grown commit is whole in `home`: nothing to migrate
                assert r.resume is not None, "--grow is a later cohort's, which check_cohort refuses without --resume"
                start = CommitRef(r.home, grow_into(r.home, r.source_home, r.resume, terms))
            layers = student_layers(r.seed_dir, start.home, start.root) if isinstance(start, CommitRef) else \
                student_layers(r.seed_dir, None, None)
            plan = worker_args(r, start, r.reference_ref(), layers, attempt_dir)
            first_step, first_cohort_step = _resumed_at(start, terms, r.cohort)
            results = launch(adaptive_worker, plan.to_json(), r.workers, attempt_dir / "workers", timeout_s=r.timeout_s,
                             progress_total=(r.until or terms.endpoints[r.cohort]) - first_cohort_step,
                             progress_first_step=first_step,
                             desc=f"cohort {r.cohort} ({r.workers} workers)", env={DISK_RESERVE_ENV: str(reserve)})
        outcomes = [worker_outcome(res, f"{attempt_dir / 'workers'}: rank {i}'s result") for i, res in enumerate(results)]
        made = [c.to_json() for c in outcomes[0].commits]
        record.update(status="completed", commits=made, fetched_bytes=[o.fetched_bytes for o in outcomes])
        return made
    except KeyboardInterrupt as e:
        name, _ = interruption(e)
        record.update(status="aborted", signal=name, error=f"interrupted by {name}",
                      commits=logged_commits(attempt_dir))
        raise Interrupted(getattr(e, "signum", signal.SIGINT), _after_abort(r, attempt_dir)) from None
    except BaseException as e:
        record.update(status="failed", error=" ".join(f"{type(e).__name__}: {e}".split()),
                      commits=logged_commits(attempt_dir))
        raise
    finally:
        reserve.unlink(missing_ok=True)  # first: on a full disk its room is what the record is written into
        record.update(ended_at=time.time())
        write_canonical_json(attempt_dir / "attempt.json", record)


def _resumed_at(start: Ref, terms: JobTerms, cohort: str) -> tuple[int, int]:
    """(step, cohort step) training starts from, for the bar before the workers report (0, 0 from the seed, or
    where the start commit is not in a local store: the workers' own count replaces it)."""
    if not isinstance(start, CommitRef):
        return 0, 0
    try:
        manifest = commits.read_manifest(start.home, start.root)
        return commit_cursor(manifest).step, _start_cohort_step(terms, cohort, manifest)
    except (OSError, ValueError, KeyError, TypeError):  # TrainRefused too: the workers refuse it with its reason
        return 0, 0


def _after_abort(r: CohortRequest, attempt_dir: Path) -> str:
    """What an interrupted attempt tells the operator: where it is recorded and the command that goes on."""
    head = read_head(r.home)
    said = f"attempt {attempt_dir} recorded as aborted, workers stopped"
    holder = in_use_by(r.home)
    if head is None and holder is not None:  # another training holds the home: never suggest removing it
        return f"{said}; nothing was committed; {r.home} is in use by {holder}, so leave it and use another --home"
    if head is None:
        return (f"{said}; nothing was committed: clean up with `rm -r {r.home}` (it holds only this attempt) and "
                "run the same command again")
    return f"{said}; resume with the same command and `--resume HEAD` (HEAD is {head})"


def adoptable_endpoint(r: CohortRequest, terms: JobTerms, pj: AnyPreparedJob) -> dict | None:
    """The commit entry of `--resume` when nothing is left to train from it (its cohort step is this
    attempt's last) and it lies in `home`, verified whole, committed where an attempt of this prepared job
    ran: a run that died after its endpoint commit but before its record. Else None (train as usual)."""
    if r.resume is None or r.source_home or r.grow:
        return None

    manifest = commits.read_manifest(r.home, r.resume)
    cursor = commit_cursor(manifest)
    cohort_idx = terms.cohort_order.index(r.cohort)
    last = min(r.until or terms.endpoints[r.cohort], terms.endpoints[r.cohort])
    if (cursor.cohort or 0) != cohort_idx or cursor.steps_in_cohort < last:
        return None
    ran_here = [p for p in sorted(Path(r.home).glob("attempts/*/attempt.json"))
                if load_attempt(p).prepared_job_digest == pj.job_digest]
    if not ran_here:
        raise TrainRefused(f"--resume {r.resume}: its cohort step {cursor.cohort_step} is the last of "
                           f"cohort {r.cohort}, but no attempt of this prepared job ran in {r.home}; expected the "
                           "home the endpoint was trained in")
    verify_commit(r.home, r.resume)
    return MadeCommit(cohort=r.cohort, cohort_step=cursor.steps_in_cohort, step=cursor.step,
                      full_root=manifest.full_root, learned_state_root=manifest.learned_state_root).to_json()


def training_layout(prepared: Path, layers: int, workers: int):
    """The planner's layout from the prepared ownership manifest when it has one for (workers, depth),
    whatever split the planner chose; an even split otherwise (a worker count the contract never planned)."""
    return planned_layout(prepared, layers, workers) or even_layout(layers, workers)


def grow_into(home: str, source_home: str | None, root: str, terms: JobTerms) -> str:
    """Bring `root` into `home` (all objects: this store grows the whole model) and append blocks."""
    g = terms.growth
    assert isinstance(g, Growth), "a continued job adds no blocks (its growth's add_blocks is 0): it never grows"
    if source_home and commits.read_head(home) != root:
        manifest = commits.read_commit(source_home, root)
        fetch_objects(ObjectStore(source_home), ObjectStore(home), commits.object_digests(manifest))
        commits.adopt_commit(home, manifest, expected_head=commits.read_head(home))
    return grow_commit(home, root, g.add_blocks, g.copy_block, g.group)
