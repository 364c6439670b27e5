"""The adaptive package's file formats as declared classes (kit.record.Record): a prepared job's `prepared.json`
(`PreparedJob`; a continued-learning job's `ContinuedPreparedJob`), its `schedule.json` (`Schedule`) and the plan
every training worker receives (`WorkerPlan`, the JSON of `launch-args.json`).

The decision to know: a prepared job is read once, by `load_prepared`, and passed as the object; the classes hold
exactly the fields the writers wrote (docs/formats/adaptive-preparation.md), with the fields added over time
`Omittable`, so every committed prepared.json still reads. `to_json` gives back the file's own JSON, so its digests
(`job_digest`, the file's sha256) are those of today's bytes.
"""

# spec_field returns a dataclasses.field (no shared mutable default); ruff's RUF009 cannot see that. The lasting
# fix is `extend-immutable-calls = ["kit.record.spec_field"]` in pyproject's ruff settings (not this part's file).

from __future__ import annotations

import os
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.digest import load_json_strict, sha256_json
from kit.evaluation.scoring import FamilyAccuracy, NllScore, TaskAnswer
from kit.evidence.ledger import LedgerPin
from kit.model.shard import Layout
from kit.record import MAX_COUNT, Either, MapOf, Num, Omittable, OneOf, Opt, Record, Seq, spec_field
from kit.refs import CommitRef, PeerCommitRef, Ref, SeedRef
from kit.store.manifest import Manifest

PREPARED_FILE = "prepared.json"
ADAPTIVE_PREPARED_FORMAT = "kit.adaptive.prepared/1"
CONTINUED_PREPARED_FORMAT = "kit.continued.prepared/1"
# fields written after the job digest: where the inputs were and when, neither part of the job's identity
NOT_IDENTITY = ("job_digest", "locations", "created_at")

Counts = types.MappingProxyType  # a read-only {name: count} map (MapOf(int) once built)


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedContract(Record):
    digest: str = spec_field(str, doc="the contract's digest")
    kind: str = spec_field(str, doc="the contract's kind")
    scale: str = spec_field(str, doc="the contract's scale")


@dataclass(frozen=True, slots=True, kw_only=True)
class SeedIdentity(Record):
    parameter_digest: str = spec_field(str)
    parameter_digest_pinned: bool = spec_field(bool)
    inventory_digest: str = spec_field(str)
    config_sha256: str = spec_field(str)
    num_hidden_layers: int = spec_field(int)
    param_count: int = spec_field(int)
    tensors: int = spec_field(int)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplaySource(Record):
    sha256: str = spec_field(str)
    records: int = spec_field(int)
    task_records: int = spec_field(int)
    pool: str = spec_field(str)
    pool_records: int = spec_field(int)


@dataclass(frozen=True, slots=True, kw_only=True)
class DevRetentionSource(Record):
    sha256: str | None = spec_field(Opt(str), doc="null: drawn from the replay pool")
    drawn_from: str | None = spec_field(Omittable(str), doc='"replay" where no --dev-retention was given')


@dataclass(frozen=True, slots=True, kw_only=True)
class PublicSource(Record):
    source_name: str = spec_field(str)
    sha256: str = spec_field(str)


@dataclass(frozen=True, slots=True, kw_only=True)
class Sources(Record):
    replay: ReplaySource = spec_field(ReplaySource)
    dev_retention: DevRetentionSource = spec_field(DevRetentionSource)
    public: PublicSource = spec_field(PublicSource)


@dataclass(frozen=True, slots=True, kw_only=True)
class RoleFile(Record):
    file: str = spec_field(str, doc="roles/<role>.jsonl, relative to the prepared directory")
    sha256: str = spec_field(str)
    count: int = spec_field(int)
    per_family: Counts | None = spec_field(Opt(MapOf(int)), doc="null for conversation roles")
    content_digest: str = spec_field(str)


@dataclass(frozen=True, slots=True, kw_only=True)
class FileDigest(Record):
    file: str = spec_field(str)
    sha256: str = spec_field(str)


@dataclass(frozen=True, slots=True, kw_only=True)
class FinalRetentionReport(Record):
    source_name: str = spec_field(str)
    start: int = spec_field(int)
    stop: int = spec_field(int)
    skipped_empty_output: int = spec_field(int)
    excluded: Counts = spec_field(MapOf(int), doc="records excluded per rule")
    excluded_total: int = spec_field(int)
    eligible: int = spec_field(int)
    taken: int = spec_field(int)
    against_roles: tuple[str, ...] = spec_field(Seq(str))


@dataclass(frozen=True, slots=True, kw_only=True)
class FinalTasksReport(Record):
    excluded: Counts = spec_field(MapOf(int), doc='{"ledger": n}')
    excluded_total: int = spec_field(int)
    taken: int = spec_field(int)


@dataclass(frozen=True, slots=True, kw_only=True)
class SelectionSkipped(Record):
    over_max_tokens: int = spec_field(int)
    content_used: int = spec_field(int)


@dataclass(frozen=True, slots=True, kw_only=True)
class Exclusions(Record):
    final_retention: FinalRetentionReport = spec_field(FinalRetentionReport, key="final.retention")
    final_tasks: FinalTasksReport = spec_field(FinalTasksReport, key="final.tasks")
    selection_skipped: types.MappingProxyType[str, SelectionSkipped] = spec_field(MapOf(SelectionSkipped))


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinuedExclusions(Record):
    final_retention: FinalRetentionReport = spec_field(FinalRetentionReport, key="final.retention")
    final_tasks: FinalTasksReport = spec_field(FinalTasksReport, key="final.tasks")


@dataclass(frozen=True, slots=True, kw_only=True)
class ExcludedDigests(Record):
    tasks: int = spec_field(int)
    conversations: int = spec_field(int)


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerRead(Record):
    sha256: str | None = spec_field(Opt(str), doc="null: no ledger yet")
    entries: int = spec_field(int)
    digests: Counts = spec_field(MapOf(int), doc="exposed digests per kind")
    excluded_digests: ExcludedDigests = spec_field(ExcludedDigests)
    rule: str = spec_field(str)


@dataclass(frozen=True, slots=True, kw_only=True)
class Locations(Record):
    contract: str = spec_field(str)
    seed: str = spec_field(str)
    replay: str = spec_field(str)
    public_source: str = spec_field(str)
    dev_retention: str | None = spec_field(Opt(str))
    ledger: str = spec_field(str)
    ledger_head: LedgerPin | None = spec_field(Omittable(LedgerPin), doc="recorded since 2026-12-04")


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinuedLocations(Record):
    contract: str = spec_field(str)
    seed: str = spec_field(str)
    start_home: str | None = spec_field(Omittable(str), doc="before 2026-12-03: `start.home`")
    start_prepared: str = spec_field(str)
    replay: str = spec_field(str)
    public_source: str = spec_field(str)
    ledger: str = spec_field(str)
    ledger_head: LedgerPin | None = spec_field(Omittable(LedgerPin), doc="recorded since 2026-12-04")
    start_evaluation: str = spec_field(str)


@dataclass(frozen=True, slots=True, kw_only=True)
class Cursor(Record):
    step: int = spec_field(int)
    cohort: int = spec_field(int)
    cohort_step: int = spec_field(int)


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinuedStart(Record):
    comparison: str = spec_field(str, doc="the selected comparison the job continues")
    full_root: str = spec_field(str)
    learned_state_root: str = spec_field(str)
    cursor: Cursor = spec_field(Cursor)
    prepared_job_digest: str = spec_field(str)
    contract_digest: str = spec_field(str)
    evaluation_sha256: str = spec_field(str)
    gates: types.MappingProxyType[str, bool] = spec_field(MapOf(bool))
    gates_passed: bool = spec_field(bool)
    exploratory: bool = spec_field(bool)
    home: str | None = spec_field(Omittable(str), doc="before 2026-12-03 only (now `locations.start_home`)")


def _identity_digest(job: Record) -> str:
    """`job_digest`: the sha256 of the job's canonical JSON without the fields that are not identity."""
    return sha256_json({k: v for k, v in job.to_json().items() if k not in NOT_IDENTITY})


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedJob(Record):
    """An adaptive job's prepared.json (`kit adaptive prepare`)."""

    FORMAT = ADAPTIVE_PREPARED_FORMAT
    format: str = spec_field(str)
    contract: PreparedContract = spec_field(PreparedContract)
    seed: SeedIdentity = spec_field(SeedIdentity)
    tokenizer: Counts = spec_field(MapOf(str), doc="tokenizer file name -> sha256")
    sources: Sources = spec_field(Sources)
    roles: types.MappingProxyType[str, RoleFile] = spec_field(MapOf(RoleFile))
    schedule: FileDigest = spec_field(FileDigest)
    ownership: FileDigest = spec_field(FileDigest)
    exclusions: Exclusions = spec_field(Exclusions)
    ledger: LedgerRead = spec_field(LedgerRead)
    job_digest: str = spec_field(str)
    locations: Locations = spec_field(Locations)
    created_at: str = spec_field(str)

    def identity_digest(self) -> str:
        return _identity_digest(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinuedPreparedJob(Record):
    """A continued-learning job's prepared.json (`kit continued prepare`)."""

    FORMAT = CONTINUED_PREPARED_FORMAT
    format: str = spec_field(str)
    contract: PreparedContract = spec_field(PreparedContract)
    start: ContinuedStart = spec_field(ContinuedStart)
    seed: SeedIdentity = spec_field(SeedIdentity)
    tokenizer: Counts = spec_field(MapOf(str))
    roles: types.MappingProxyType[str, RoleFile] = spec_field(MapOf(RoleFile))
    schedule: FileDigest = spec_field(FileDigest)
    exclusions: ContinuedExclusions = spec_field(ContinuedExclusions)
    ledger: LedgerRead = spec_field(LedgerRead)
    job_digest: str = spec_field(str)
    locations: ContinuedLocations = spec_field(ContinuedLocations)
    created_at: str = spec_field(str)

    def identity_digest(self) -> str:
        return _identity_digest(self)


AnyPreparedJob = PreparedJob | ContinuedPreparedJob


def prepared_job_from_json(value: Any, source: str) -> AnyPreparedJob:
    """The prepared job of either kind, by its `format` (an adaptive job where it names none of the two). Every
    declared field is checked; a field it does not declare is ignored, not refused: a prepared job is bound by
    its file's sha256 (the selection, the commitments), never by this reading, and a job annotated by hand (a
    note beside the fields) stays a job the drivers can run."""
    fmt = value.get("format") if isinstance(value, dict) else None
    cls = ContinuedPreparedJob if fmt == CONTINUED_PREPARED_FORMAT else PreparedJob
    return cls.from_json(_declared_only(value, cls), source)


def load_prepared(prepared_dir: str | os.PathLike) -> AnyPreparedJob:
    """`prepared_dir`/prepared.json, read once and checked against its declared class."""
    path = Path(prepared_dir) / PREPARED_FILE
    return prepared_job_from_json(load_json_strict(path), str(path))


@dataclass(frozen=True, slots=True, kw_only=True)
class StartSummary(Record):
    """A continued job's start endpoint, as `prepare_continued` reports it."""

    full_root: str = spec_field(str)
    gates: Mapping[str, bool] = spec_field(MapOf(bool))
    gates_passed: bool = spec_field(bool)
    exploratory: bool = spec_field(bool)


@dataclass(frozen=True, slots=True, kw_only=True)
class PrepareSummary(Record):
    """What `kit adaptive prepare` and `kit continued prepare` return (and print): notebooks 10 and 15 record it
    and hand it to the sidecars. An adaptive job's names its seed's digest, a continued job's its start."""

    out: str = spec_field(str, doc="the prepared directory")
    job_digest: str = spec_field(str)
    prepared_sha256: str = spec_field(str)
    ledger_sha256: str | None = spec_field(Opt(str), doc="the exposure ledger as read (null: absent)")
    contract_digest: str = spec_field(str)
    parameter_digest: str | None = spec_field(Omittable(str), doc="an adaptive job's seed")
    start: StartSummary | None = spec_field(Omittable(StartSummary), doc="a continued job's start endpoint")
    roles: Mapping[str, int] = spec_field(MapOf(int), doc="records per role")
    final_retention_excluded: Mapping[str, int] = spec_field(MapOf(int))
    final_tasks_excluded: Mapping[str, int] = spec_field(MapOf(int))


def prepare_summary(value: dict | PrepareSummary, source: str = "prepare summary") -> PrepareSummary:
    return value if isinstance(value, PrepareSummary) else PrepareSummary.from_json(value, source)


# --- what the workers read of a prepared job: its files (every other field is the drivers') ---------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class FileRef(Record):
    file: str = spec_field(str)


@dataclass(frozen=True, slots=True, kw_only=True)
class RoleRef(Record):
    file: str = spec_field(str)
    sha256: str = spec_field(str)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobFiles(Record):
    """Where a prepared job's schedule and role files are: the part of prepared.json that training workers and
    scoring read (`PreparedJob` is the whole; the drivers check it before any worker starts)."""

    schedule: FileRef = spec_field(FileRef)
    roles: Mapping[str, RoleRef] = spec_field(MapOf(RoleRef))


def load_job_files(prepared_dir: str | os.PathLike) -> JobFiles:
    path = Path(prepared_dir) / PREPARED_FILE
    return JobFiles.from_json(_declared_only(load_json_strict(path), JobFiles), str(path))


# --- schedule.json ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduledRecord(Record):
    """One record an update trains, in feeding order."""

    id: str = spec_field(str)
    role: str = spec_field(str)
    replay: bool = spec_field(bool, doc="true for every role but A.new, B.new and C.new: KL applies")
    digest: str = spec_field(str, doc="the conversation's content sha256")


@dataclass(frozen=True, slots=True, kw_only=True)
class CohortSchedule(Record):
    updates: int = spec_field(int)
    reference: str = spec_field(str)
    steps: tuple[tuple[ScheduledRecord, ...], ...] = spec_field(Seq(Seq(ScheduledRecord)))


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule(Record):
    FORMAT = "kit.adaptive.schedule/1"
    format: str = spec_field(str)
    contract_digest: str | None = spec_field(Opt(str))
    seed: int = spec_field(int, doc="data_seeds.schedule")
    cohorts: types.MappingProxyType[str, CohortSchedule] = spec_field(MapOf(CohortSchedule))



@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleEntry(Record):
    """A scheduled record as a training worker reads it (`ScheduledRecord`, with the digest Omittable: the
    commitments check it before any worker starts, and an entry goes on as it was written)."""

    id: str = spec_field(str)
    role: str = spec_field(str)
    replay: bool = spec_field(bool)
    digest: str | None = spec_field(Omittable(str))


@dataclass(frozen=True, slots=True, kw_only=True)
class CohortSteps(Record):
    steps: tuple[tuple[ScheduleEntry, ...], ...] = spec_field(Seq(Seq(ScheduleEntry)))


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerSchedule(Record):
    """The part of schedule.json training reads (`Schedule` is the whole, checked by the commitments before any
    worker starts): each cohort's updates and the seed a replicate's order derives from."""

    seed: int | None = spec_field(Omittable(int))
    cohorts: Mapping[str, CohortSteps] = spec_field(MapOf(CohortSteps))


def worker_schedule(value: Any, source: str) -> WorkerSchedule:
    return WorkerSchedule.from_json(_declared_only(value, WorkerSchedule), source)


# --- the worker plan (launch-args.json) -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SeedRefJson(Record):
    seed_dir: str = spec_field(str)

    def ref(self) -> Ref:
        return SeedRef(self.seed_dir)


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitRefJson(Record):
    home: str = spec_field(str)
    root: str = spec_field(str)

    def ref(self) -> Ref:
        return CommitRef(self.home, self.root)


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerCommitRefJson(Record):
    root: str = spec_field(str)
    source: str | None = spec_field(Opt(str))
    over_group: bool = spec_field(bool)

    def ref(self) -> Ref:
        return PeerCommitRef(self.root, self.source)


REF = Either(SeedRefJson, Either(CommitRefJson, PeerCommitRefJson))  # kit.refs JSON: one of the three
RefJson = SeedRefJson | CommitRefJson | PeerCommitRefJson


def ref_json(ref: Ref) -> RefJson:
    """The declared JSON of a kit.refs value."""
    if isinstance(ref, SeedRef):
        return SeedRefJson(seed_dir=ref.seed_dir)
    if isinstance(ref, CommitRef):
        return CommitRefJson(home=ref.home, root=ref.root)
    return PeerCommitRefJson(root=ref.root, source=ref.source, over_group=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class LayoutJson(Record):
    blocks: tuple[tuple[int, ...], ...] = spec_field(Seq(Seq(int, min_len=2)), doc="[first, end) block per rank")
    embedding_owner: int = spec_field(int)

    def layout(self) -> Layout:
        return Layout.from_json(self.to_json())


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerPlan(Record):
    """What every training worker receives (`worker_args`): the request's paths and cohort, the planner's layout,
    the start and reference, the attempt folder. It crosses the process boundary as launch-args.json."""

    FORMAT = "worker plan"
    prepared: str = spec_field(str, doc="the prepared job")
    seed_dir: str = spec_field(str)
    home: str = spec_field(str, doc="the store this arm commits into")
    cohort: str = spec_field(str)
    layout: LayoutJson = spec_field(LayoutJson)
    start: RefJson = spec_field(REF, doc="kit.refs JSON: where training starts")
    reference: RefJson = spec_field(REF, doc="kit.refs JSON: the KL term's frozen reference")
    until: int | None = spec_field(Opt(int), doc="stop after this cohort step (null: the endpoint)")
    attempt_dir: str = spec_field(str)
    timeout_s: float = spec_field(float, doc="the workers' collective timeout")
    replicate: int = spec_field(int, doc="0: the committed order")


# --- evaluation records (kit.adaptive.evaluation) ----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskPair(Record):
    """One task scored for the candidate and the baseline."""

    id: str = spec_field(str)
    family: str | None = spec_field(Opt(str))
    tokens: int = spec_field(int, doc="assistant tokens")
    cand_nll: float = spec_field(float, doc="summed NLL, candidate")
    base_nll: float = spec_field(float, doc="summed NLL, baseline")
    cand_correct: bool = spec_field(bool)
    base_correct: bool = spec_field(bool)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionPair(Record):
    id: str = spec_field(str)
    tokens: int = spec_field(int)
    cand_nll: float = spec_field(float)
    base_nll: float = spec_field(float)


@dataclass(frozen=True, slots=True, kw_only=True)
class PairedScores(Record):
    """What the gates and the bounds judge in an evaluation record (`evaluate`'s result; its other fields, the
    replies and role digests, are not read here): read with `paired_scores`, which ignores undeclared fields."""

    split: str = spec_field(str, doc='"dev" or "final"')
    candidate: str = spec_field(str)
    baseline: str = spec_field(str)
    tasks: tuple[TaskPair, ...] = spec_field(Seq(TaskPair))
    retention: tuple[RetentionPair, ...] = spec_field(Seq(RetentionPair))


def _declared_only(value: Any, spec: Any) -> Any:
    """`value` with only the fields `spec` declares (nested records and lists of them too); anything that is not
    an object of a declared class is left as it is, for `validate` to judge."""
    if isinstance(spec, (Opt, Omittable)):
        return _declared_only(value, spec.spec)
    if isinstance(spec, Seq) and isinstance(value, list):
        return [_declared_only(v, spec.item) for v in value]
    if isinstance(spec, MapOf) and isinstance(value, dict):
        return {k: _declared_only(v, spec.spec) for k, v in value.items()}
    if isinstance(spec, type) and issubclass(spec, Record) and isinstance(value, dict):
        fields = spec.json_fields()
        return {k: _declared_only(v, fields[k].metadata["spec"]) for k, v in value.items() if k in fields}
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class EvaluationSplit(Record):
    """The split of an evaluation record: what the gates check before anything else it holds."""

    split: str = spec_field(str, doc='"dev" or "final"')


def evaluation_split(evaluation: dict | PairedScores, source: str = "evaluation record") -> str:
    if isinstance(evaluation, PairedScores):
        return evaluation.split
    return EvaluationSplit.from_json(_declared_only(evaluation, EvaluationSplit), source).split


def paired_scores(evaluation: dict | PairedScores, source: str = "evaluation record") -> PairedScores:
    """The scores of an evaluation record (a notebook hands over the JSON `evaluate` returned), checked."""
    if isinstance(evaluation, PairedScores):
        return evaluation
    return PairedScores.from_json(_declared_only(evaluation, PairedScores), source)


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitSpec(Record):
    """A candidate as `commit_specs` gives it ("HOME:FULL_ROOT" split): the home and its commit's full root."""

    home: str = spec_field(str)
    root: str = spec_field(str)


# --- the selection record (kit.adaptive.selection; docs/formats/selection-records.md) ----------------------------
SELECTION_FORMAT = "kit-adaptive-selection/2"  # /2: every candidate binds its comparison's baseline


@dataclass(frozen=True, slots=True, kw_only=True)
class SeedBaseline(Record):
    kind: str = spec_field(OneOf("seed"))
    parameter_digest: str = spec_field(str, doc="the seed's: a seed:DIR baseline must have it")


@dataclass(frozen=True, slots=True, kw_only=True)
class EndpointBaseline(Record):
    kind: str = spec_field(OneOf("endpoint"))
    name: str = spec_field(str, doc="the comparison whose endpoint it is, or `start` (a continued job)")
    full_root: str = spec_field(str)


@dataclass(frozen=True, slots=True, kw_only=True)
class BoundCandidate(Record):
    full_root: str = spec_field(str)
    learned_state_root: str = spec_field(str)
    baseline: SeedBaseline | EndpointBaseline = spec_field(Either(SeedBaseline, EndpointBaseline))


@dataclass(frozen=True, slots=True, kw_only=True)
class SelectionRecord(Record):
    """What `select` binds before any final scoring: the prepared job and each candidate with its baseline."""

    FORMAT = SELECTION_FORMAT
    format: str = spec_field(OneOf(SELECTION_FORMAT))
    prepared_digest: str = spec_field(str, doc="sha256 of prepared.json")
    contract_digest: str = spec_field(str)
    candidates: Mapping[str, BoundCandidate] = spec_field(MapOf(BoundCandidate))
    # free-form: what the decision read (`dev_evaluations`: {file name: sha256}) and any note beside it
    development: Mapping[str, Any] = spec_field(MapOf(Either(str, MapOf(str))))


# --- ownership.json (kit.adaptive.ownership) ---------------------------------------------------------------------
OWNERSHIP_FORMAT = "kit.adaptive.ownership/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerShare(Record):
    """One worker of a planned layout: its blocks, its memory estimate and the tensors it owns."""

    rank: int = spec_field(int)
    blocks: tuple[int, ...] = spec_field(Seq(int), doc="[first, end)")
    owns_embedding: bool = spec_field(bool)
    estimate_bytes: int = spec_field(int)
    utilization: float = spec_field(float)
    tensors: tuple[str, ...] = spec_field(Seq(str))


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannedLayout(Record):
    workers: int = spec_field(int)
    num_hidden_layers: int = spec_field(int)
    grown: bool = spec_field(bool)
    blocks: tuple[tuple[int, ...], ...] = spec_field(Seq(Seq(int)))
    embedding_owner: int = spec_field(int)
    peak_utilization: float = spec_field(float)
    per_worker: tuple[WorkerShare, ...] = spec_field(Seq(WorkerShare))


@dataclass(frozen=True, slots=True, kw_only=True)
class OwnershipManifests(Record):
    """The planner's layouts of a prepared job, one per worker count and depth it trains at."""

    FORMAT = OWNERSHIP_FORMAT
    format: str = spec_field(str)
    seed_inventory_digest: str = spec_field(str)
    regime: str = spec_field(str)
    worker_memory_bytes: int = spec_field(int)
    reserve_bytes: int = spec_field(int)
    layouts: tuple[PlannedLayout, ...] = spec_field(Seq(PlannedLayout))


def load_ownership(path: str | os.PathLike) -> OwnershipManifests:
    return OwnershipManifests.from_json(load_json_strict(path), str(path))


@dataclass(frozen=True, slots=True, kw_only=True)
class LayoutChoice(Record):
    """What training takes of a planned layout: for which workers and depth, and the split."""

    workers: int = spec_field(int)
    num_hidden_layers: int = spec_field(int)
    blocks: tuple[tuple[int, ...], ...] = spec_field(Seq(Seq(int, min_len=2)))
    embedding_owner: int = spec_field(int)

    def layout(self) -> Layout:
        return Layout(tuple((a, b) for a, b in self.blocks), self.embedding_owner)


@dataclass(frozen=True, slots=True, kw_only=True)
class LayoutChoices(Record):
    """The part of ownership.json training reads (`OwnershipManifests` is the whole, checked by the commitments
    before any worker starts)."""

    layouts: tuple[LayoutChoice, ...] = spec_field(Seq(LayoutChoice))


def load_layout_choices(path: str | os.PathLike) -> LayoutChoices:
    return LayoutChoices.from_json(_declared_only(load_json_strict(path), LayoutChoices), str(path))


# --- the evaluation record (kit adaptive evaluate --out; docs/formats/adaptive-evaluation.md) -------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class RolePair(Record):
    """One value per scored role: the role's name or its file's sha256."""

    tasks: str = spec_field(str, doc="of the task role")
    retention: str = spec_field(str, doc="of the retention role")


@dataclass(frozen=True, slots=True, kw_only=True)
class ScoredTask(Record):
    """One task scored for the candidate and the baseline, with both greedy replies."""

    id: str = spec_field(str, doc="the task record")
    family: str | None = spec_field(Opt(str), doc="its task family")
    tokens: int = spec_field(int, doc="its assistant target tokens")
    cand_nll: float = spec_field(float, doc="the candidate's summed NLL (nats) over them")
    base_nll: float = spec_field(float, doc="the baseline's")
    cand_correct: bool = spec_field(bool, doc="the task checker's verdict on the candidate's greedy reply")
    base_correct: bool = spec_field(bool, doc="on the baseline's")
    cand_reply: str = spec_field(str, doc="the candidate's greedy reply")
    base_reply: str = spec_field(str, doc="the baseline's")


@dataclass(frozen=True, slots=True, kw_only=True)
class EvaluationRecord(Record):
    """The file `kit adaptive evaluate --out` writes: a candidate scored against its baseline on one split."""

    split: str = spec_field(OneOf("dev", "final"), doc='"dev" or "final"')
    candidate: str = spec_field(str, doc='full root, or "seed:DIR"')
    baseline: str = spec_field(str, doc="the same")
    roles: RolePair = spec_field(RolePair, doc="the role scored per part")
    role_sha256: RolePair = spec_field(RolePair, doc="sha256 of each role's file")
    tasks: tuple[ScoredTask, ...] = spec_field(Seq(ScoredTask), doc="one per task record")
    retention: tuple[RetentionPair, ...] = spec_field(Seq(RetentionPair), doc="one per retention conversation")
    device: str | None = spec_field(Omittable(str), doc="absent on CPU (CPU records keep their bytes)")


@dataclass(frozen=True, slots=True, kw_only=True)
class ScoreCache(Record):
    """One model's scores on two roles (`score-cache/<key>.json` beside an evaluation record): a cache, not
    evidence."""

    task_nll: tuple[NllScore, ...] = spec_field(Seq(NllScore))
    retention_nll: tuple[NllScore, ...] = spec_field(Seq(NllScore))
    answers: tuple[TaskAnswer, ...] = spec_field(Seq(TaskAnswer))


# --- a checkpoint home's attempt records (kit.adaptive.train; docs/formats/adaptive-homes.md) --------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class MadeCommit(Record):
    """A commit an attempt made, as train() returns it and `commits.jsonl` logs it. Only its full root is
    required: the readers find an attempt by its commits' roots, and compare the lists as they were written."""

    cohort: str | None = spec_field(Omittable(str))
    cohort_step: int | None = spec_field(Omittable(int))
    step: int | None = spec_field(Omittable(int))
    full_root: str = spec_field(str)
    learned_state_root: str | None = spec_field(Omittable(str))


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerOutcome(Record):
    """What the driver reads of a training worker's result (the rest, admission and transfers, is the worker's
    account for its status file)."""

    rank: int = spec_field(int)
    fetched_bytes: int = spec_field(int, doc="bytes this worker fetched to open its start")
    commits: tuple[MadeCommit, ...] = spec_field(Seq(MadeCommit), doc="the commits made (rank 0's are the run's)")


def worker_outcome(value: Any, source: str) -> WorkerOutcome:
    return WorkerOutcome.from_json(_declared_only(value, WorkerOutcome), source)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicateIndex(Record):
    index: int = spec_field(int, doc="the replicate (0: the contract's own order)")


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptRecord(Record):
    """The part of `attempts/<attempt>/attempt.json` the kit reads back (docs/formats/adaptive-homes.md), read
    with `load_attempt`, which ignores the rest (the record's account of the run: times, error, digests). The
    request's fields are Omittable: the record grew over time, and each reader says which ones it needs."""

    attempt: str = spec_field(str)
    status: str = spec_field(str)
    prepared_job_digest: str | None = spec_field(Omittable(str))
    cohort: str | None = spec_field(Omittable(str))
    prepared: str | None = spec_field(Omittable(str))
    workers: int | None = spec_field(Omittable(int))
    reference: str | None = spec_field(Omittable(Opt(str)))
    reference_home: str | None = spec_field(Omittable(Opt(str)))
    source_home: str | None = spec_field(Omittable(Opt(str)))
    replicate: ReplicateIndex | None = spec_field(Omittable(ReplicateIndex))
    commits: tuple[MadeCommit, ...] | None = spec_field(Omittable(Seq(MadeCommit)))
    fetched_bytes: tuple[int, ...] | None = spec_field(Omittable(Opt(Seq(int))))


def load_attempt(path: str | os.PathLike) -> AttemptRecord:
    return AttemptRecord.from_json(_declared_only(load_json_strict(path), AttemptRecord), str(path))


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateLogRow(Record):
    """The numbers of one update in `updates.jsonl` the curves read (a row also holds the record ids, token sums
    and per-rank figures; the measures are Omittable: older logs lack some)."""

    cohort: str = spec_field(str)
    cohort_step: int = spec_field(int)
    objective: float | None = spec_field(Omittable(float))
    ce_per_token: float | None = spec_field(Omittable(Opt(float)), doc="null for an update without new tokens")
    kl_per_token: float | None = spec_field(Omittable(Opt(float)), doc="null for an update without replay tokens")
    grad_norm: float | None = spec_field(Omittable(float))
    clip_factor: float | None = spec_field(Omittable(float))
    seconds: float | None = spec_field(Omittable(float))


@dataclass(frozen=True, slots=True, kw_only=True)
class TimedUpdate(Record):
    """What an attempt's throughput reads of each of its own update rows."""

    seconds: float = spec_field(float, doc="the update's wall time")
    tokens: int = spec_field(int, doc="its assistant target tokens")


def timed_update(value: Any, source: str) -> TimedUpdate:
    return TimedUpdate.from_json(_declared_only(value, TimedUpdate), source)


def update_row(value: Any, source: str) -> UpdateLogRow:
    return UpdateLogRow.from_json(_declared_only(value, UpdateLogRow), source)


# --- the comparison record (kit adaptive compare --out) ----------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class ComparedUpdate(Record):
    """One update of a compared run: the curve fields of its update log row (Omittable: older logs lack some)."""

    cohort_step: int = spec_field(int)
    objective: float | None = spec_field(Omittable(float))
    ce_per_token: float | None = spec_field(Omittable(Opt(float)), doc="null for an update without new tokens")
    kl_per_token: float | None = spec_field(Omittable(Opt(float)), doc="null for an update without replay tokens")
    grad_norm: float | None = spec_field(Omittable(float))
    clip_factor: float | None = spec_field(Omittable(float))
    seconds: float | None = spec_field(Omittable(float))


def compared_update(value: Any, source: str) -> ComparedUpdate:
    return ComparedUpdate.from_json(_declared_only(value, ComparedUpdate), source)


@dataclass(frozen=True, slots=True, kw_only=True)
class ComparedRun(Record):
    home: str = spec_field(str)
    full_root: str = spec_field(str)
    learned_state_root: str = spec_field(str)
    layout: tuple[tuple[int, ...], ...] = spec_field(Seq(Seq(int)), doc="the commit's blocks")
    updates: tuple[ComparedUpdate, ...] = spec_field(Seq(ComparedUpdate))


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitComparison(Record):
    """Two committed runs side by side (`compare`'s result)."""

    a: ComparedRun = spec_field(ComparedRun, doc="the candidate")
    b: ComparedRun = spec_field(ComparedRun, doc="the control")
    same_parameter_names: bool = spec_field(bool)
    learned_state_equal: bool = spec_field(bool)
    parameters_differing: int | None = spec_field(Opt(int), doc="null where the names differ")
    max_abs_parameter_difference: float | None = spec_field(Opt(float), doc="null where the names differ")
    torch: str = spec_field(str, doc="torch's version")


# --- a commit's data position (the cursor of its learned state; docs/formats/checkpoint-store.md) ----------------
@dataclass(frozen=True, slots=True, kw_only=True)
class CommitCursor(Record):
    """Where an adaptive commit stands: updates since the seed, and the cohort (0 = A, 1 = B) and its step
    (absent in commits made before cohorts were counted: their cohort step is the step)."""

    step: int = spec_field(int)
    cohort: int | None = spec_field(Omittable(int))
    cohort_step: int | None = spec_field(Omittable(int))

    @property
    def steps_in_cohort(self) -> int:
        return self.step if self.cohort_step is None else self.cohort_step


def commit_cursor(manifest: Manifest) -> CommitCursor:
    """The adaptive part of a commit's cursor (a cursor may hold other counters, which are not read here)."""
    cursor = dict(manifest.learned_state.cursor)
    return CommitCursor.from_json(_declared_only(cursor, CommitCursor), f"commit {manifest.full_root} cursor")


# --- the development curve (dev-curve.json, kit.adaptive.dev_curve) ------------------------------------------------
CURVE_FORMAT = "kit-adaptive-dev-curve/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class CurvePoint(Record):
    """One model of an arm's lineage scored on the development roles."""

    arm: str = spec_field(str)
    model: str = spec_field(str, doc='"seed:DIR" or "HOME:FULL_ROOT"')
    step: int = spec_field(int, doc="updates since the seed")
    cohort: str | None = spec_field(Opt(str), doc='null (the seed), "A" or "B"')
    cohort_step: int = spec_field(int)
    accuracy: Mapping[str, FamilyAccuracy] = spec_field(MapOf(FamilyAccuracy), doc='per family, and "all"')
    task_nll_per_token: float = spec_field(float)
    retention_nll_per_token: float = spec_field(float)


@dataclass(frozen=True, slots=True, kw_only=True)
class DevCurve(Record):
    FORMAT = CURVE_FORMAT
    format: str = spec_field(OneOf(CURVE_FORMAT))
    prepared_job_digest: str = spec_field(str)
    roles: RolePair = spec_field(RolePair)
    role_sha256: RolePair = spec_field(RolePair)
    max_tokens: int = spec_field(int)
    max_new_tokens: int = spec_field(int)
    device: str = spec_field(str)
    points: tuple[CurvePoint, ...] = spec_field(Seq(CurvePoint))


# --- a gate verdict (kit.adaptive.evaluation.gates, kit.adaptive.continued.continued_gates) -----------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class GateResult(Record):
    """One gate as kit.stats judges it: its inputs written out beside the rule."""

    name: str = spec_field(str)
    passed: bool = spec_field(bool)
    inputs: Mapping[str, float] = spec_field(MapOf(float), doc="the numbers the rule compares")
    rule: str = spec_field(str)


@dataclass(frozen=True, slots=True, kw_only=True)
class GainedLost(Record):
    """Generated answers correct only for the candidate (gained), only for the baseline (lost), and the net
    (kit.stats.gained_lost)."""

    gained: int = spec_field(int)
    lost: int = spec_field(int)
    net: int = spec_field(Num(-MAX_COUNT, MAX_COUNT, integer=True), doc="gained - lost")


def gained_lost_counts(value: Any) -> GainedLost:
    return GainedLost.from_json(value, "gained and lost answers")


def gate_results(values: Any) -> tuple[GateResult, ...]:
    """The verdicts of kit.stats' gates (gate_gain, gate_retention, gate_generated) as declared rows."""
    return tuple(GateResult.from_json(v, "gate verdict") for v in values)


@dataclass(frozen=True, slots=True, kw_only=True)
class GateJudgement(Record):
    """What the sidecars read of a comparison's gate verdict (its bounds and accuracy tables are left out: read
    with `gate_verdict`, which ignores them). A continued job's verdict says whether its start was exploratory."""

    candidate: str = spec_field(str)
    baseline: str = spec_field(str)
    gates: tuple[GateResult, ...] = spec_field(Seq(GateResult))
    passed: bool = spec_field(bool)
    exploratory: bool | None = spec_field(Omittable(bool))
    note: str | None = spec_field(Omittable(str))


def gate_verdict(value: Any, source: str = "gate verdict") -> GateJudgement:
    return GateJudgement.from_json(_declared_only(value, GateJudgement), source)


@dataclass(frozen=True, slots=True, kw_only=True)
class AnsweredTask(Record):
    """A task's family and both verdicts: what the accuracy tables read of an evaluation row (a report rebuilds
    such rows from other records)."""

    family: str | None = spec_field(Opt(str))
    cand_correct: bool = spec_field(bool)
    base_correct: bool = spec_field(bool)


@dataclass(frozen=True, slots=True, kw_only=True)
class AnsweredTasks(Record):
    tasks: tuple[AnsweredTask, ...] = spec_field(Seq(AnsweredTask))


def answered_tasks(value: Any, source: str = "evaluation record") -> AnsweredTasks:
    return AnsweredTasks.from_json(_declared_only(value, AnsweredTasks), source)
