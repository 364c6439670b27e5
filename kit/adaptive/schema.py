"""The adaptive-shards contract: its schema and the cross-field rules a frozen trial must satisfy.

`AdaptiveContract` declares the file, one class per object (kit.record.Record: every field required, unknown
fields refused, errors name the dotted field). The structural schema cannot say that 6,144 = 128 x 48 or that the
migration happens at a commit point, so `check_rules` adds those checks, each raising ContractError
naming the field, the value and the rule. The gate thresholds and the bootstrap confidence are the
seed's own numbers and are fixed here: a contract cannot loosen a gate.

Composition per update (the seed: "replay in every update"), with role names as in prepare:
  new          new generated task examples of this cohort (cross entropy)
  replay_a     examples actually trained in phase A (cohort B only; KL toward the phase-A endpoint)
  replay_conv  previously trained conversations of the seed (KL toward the cohort's reference)
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from kit.contract import (
    BYTES,
    LR,
    LR_SCHEDULE,
    SEED,
    WEIGHT_DECAY,
    Contract,
    ContractError,
    LrSchedule,
    MapOf,
    Num,
    Omittable,
    OneOf,
    Opt,
    Pilot,
    Record,
    Seq,
    check_pilot,
    load_contract,
)
from kit.data.tasks import FAMILIES
from kit.distributed.pipeline import EngineConfig
from kit.planner import GPU_BF16
from kit.record import spec_field
from kit.train.loss import DistillConfig
from kit.train.optim import GroupConfig
from kit.train.schedule import check_schedule

KIND = "adaptive-shards"
PART_NAMES = ("new", "replay_a", "replay_conv")
EXCLUSION_RULES = ("prompt_exact", "prompt_normalized", "document_normalized")
# The seed's gates, verbatim: a contract states them but cannot change them.
GAIN_UPPER_BELOW = -0.001
RETENTION_UPPER_AT_MOST = 0.02
GENERATED_MAX_NET_LOST = 0
CONFIDENCE = 0.95
# Planner regimes -> kit.planner.MemoryModel overrides (the same bytes kit.engine.admission.admit_worker assumes).
REGIMES = {
    "cpu-fp32": {},
    "gpu-bf16": dict(GPU_BF16),  # a copy: a caller that edits its regime must not change the planner's
}
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_COUNT = Num(1, integer=True)
_NATURAL = Num(0, integer=True)


# The objects of the adaptive-shards contract (docs/contracts.md, "adaptive-shards: fields"), leaves first. The
# ones the continued-learning contract shares (kit/adaptive/continued_schema.py) are declared once, here.

@dataclass(frozen=True, slots=True, kw_only=True)
class SeedPin(Record):
    parameter_digest: str | None = spec_field(Opt(str), doc="64 hex, or null: recorded at prepare")
    description: str = spec_field(str)


@dataclass(frozen=True, slots=True, kw_only=True)
class Adam(Record):
    phase: str = spec_field(str)
    new_phase_at_seed: bool = spec_field(bool)
    retained_across_cohorts: bool = spec_field(bool)
    retained_across_redistribution: bool = spec_field(bool)
    retained_across_growth: bool = spec_field(bool)


@dataclass(frozen=True, slots=True, kw_only=True)
class DataSeeds(Record):
    tasks: int = spec_field(SEED, doc="stream seed of each generated role")
    selection: int = spec_field(SEED, doc="replay and retention draws")
    schedule: int = spec_field(SEED)


@dataclass(frozen=True, slots=True, kw_only=True)
class Tasks(Record):
    families: tuple[str, ...] = spec_field(Seq(OneOf(*FAMILIES), min_len=1))
    difficulty: int = spec_field(Num(1, 3, integer=True))


@dataclass(frozen=True, slots=True, kw_only=True)
class Inputs(Record):
    replay_sha256: str | None = spec_field(Opt(str))
    dev_retention_sha256: str | None = spec_field(Opt(str))


@dataclass(frozen=True, slots=True, kw_only=True)
class ConversationReplay(Record):
    pool: str = spec_field(OneOf("non-task", "all"))
    cohort_B: str = spec_field(OneOf("A.replay"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Counts(Record):
    """Examples of each role (PART_NAMES) per update, or over the cohort."""
    new: int = spec_field(_NATURAL)
    replay_a: int = spec_field(_NATURAL)
    replay_conv: int = spec_field(_NATURAL)


@dataclass(frozen=True, slots=True, kw_only=True)
class Cohort(Record):
    updates: int = spec_field(_COUNT)
    documents_per_update: int = spec_field(_COUNT)
    workers: int = spec_field(_COUNT, doc="workers at the cohort's start")
    reference: str = spec_field(OneOf("seed", "A.endpoint"))
    replay_every_update: bool = spec_field(bool)
    per_update: Counts = spec_field(Counts)
    totals: Counts = spec_field(Counts)


V = TypeVar("V")


class ABPair(Mapping[str, V]):
    """Cohorts A and B (both required) as a read-only mapping by cohort name, as the drivers look a cohort up by the
    name they were given (`terms.cohorts[cohort]`): the mapping methods of CohortPair and EndpointPair."""
    __slots__ = ()
    A: V
    B: V

    def __getitem__(self, name: str) -> V:
        if name == "A":
            return self.A
        if name == "B":
            return self.B
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter(("A", "B"))

    def __contains__(self, name: object) -> bool:  # both required: always present
        return name in ("A", "B")

    def __len__(self) -> int:
        return 2


@dataclass(frozen=True, slots=True, kw_only=True)
class CohortPair(ABPair[Cohort], Record):
    """`cohorts`: A and B; a read-only mapping by cohort name (ABPair; the same for a continued job's cohorts)."""
    A: Cohort = spec_field(Cohort)
    B: Cohort = spec_field(Cohort)


@dataclass(frozen=True, slots=True, kw_only=True)
class EndpointPair(ABPair[int], Record):
    """`endpoints`: the last update of A and of B; a read-only mapping by cohort name (ABPair)."""
    A: int = spec_field(_COUNT)
    B: int = spec_field(_COUNT)


@dataclass(frozen=True, slots=True, kw_only=True)
class OptimizerGroup(Record):
    """An AdamW group's rates (kit.train.optim.GroupConfig; the bounds: kit/contract.py)."""
    lr: float = spec_field(LR)
    beta1: float = spec_field(Num(0, 0.999999))
    beta2: float = spec_field(Num(0, 0.999999))
    eps: float = spec_field(Num(1e-30))
    weight_decay: float = spec_field(WEIGHT_DECAY)


@dataclass(frozen=True, slots=True, kw_only=True)
class AdaptiveOptimizer(Record):
    default: OptimizerGroup = spec_field(OptimizerGroup)
    grown: OptimizerGroup = spec_field(OptimizerGroup, doc="the appended blocks' group")


@dataclass(frozen=True, slots=True, kw_only=True)
class Distillation(Record):
    weight: float = spec_field(Num(0))
    temperature: float = spec_field(Num(1e-6))
    direction: str = spec_field(OneOf("forward", "reverse"))
    applies_to: str = spec_field(OneOf("replay"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Training(Record):
    """The `training` section of an adaptive-family contract (adaptive, continued learning): the same fields
    everywhere; only the optimizer groups differ (`AdaptiveTraining`, `ContinuedTraining`: continued learning
    forbids growth, so has no "grown" group)."""
    lr_schedule: LrSchedule = spec_field(LR_SCHEDULE)
    max_grad_norm: float = spec_field(Num(0))
    distillation: Distillation = spec_field(Distillation)
    microbatch_size: int = spec_field(_COUNT)
    max_tokens: int = spec_field(Num(2, integer=True))
    over_long: str = spec_field(OneOf("reject"))
    compute_dtype: str = spec_field(OneOf("float32", "bfloat16"))
    commit_every: int = spec_field(_COUNT)


@dataclass(frozen=True, slots=True, kw_only=True)
class AdaptiveTraining(Training):
    optimizer: AdaptiveOptimizer = spec_field(AdaptiveOptimizer)


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinuedOptimizer(Record):
    default: OptimizerGroup = spec_field(OptimizerGroup)


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinuedTraining(Training):
    """The continued-learning contract's `training` (kit/adaptive/continued_schema.py)."""
    optimizer: ContinuedOptimizer = spec_field(ContinuedOptimizer, doc="one group: growth is forbidden")


class TrainedTerms(Protocol):
    """What the translations below read of a job's terms (kit.adaptive.continued_schema.JobTerms: an adaptive
    or a continued job), stated here so that this module needs nothing of the continued contract's."""
    @property
    def training(self) -> AdaptiveTraining | ContinuedTraining: ...
    @property
    def endpoints(self) -> Mapping[str, int]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Migration(Record):
    cohort: str = spec_field(OneOf("A"))
    from_workers: int = spec_field(_COUNT)
    to_workers: int = spec_field(_COUNT)
    at_step: int = spec_field(_COUNT, doc="a commit point strictly inside cohort A")
    control: str = spec_field(OneOf("uninterrupted"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Growth(Record):
    cohort: str = spec_field(OneOf("B"))
    at_step: int = spec_field(OneOf(0))
    add_blocks: int = spec_field(_COUNT)
    copy_block: int = spec_field(_NATURAL)
    group: str = spec_field(str, doc="the optimizer group of the appended blocks")
    control: str = spec_field(OneOf("fixed-depth"))


@dataclass(frozen=True, slots=True, kw_only=True)
class DevEvaluation(Record):
    tasks: int = spec_field(_COUNT)
    retention: int = spec_field(_COUNT)


@dataclass(frozen=True, slots=True, kw_only=True)
class FinalRetention(Record):
    source_name: str = spec_field(str)
    sha256: str = spec_field(str)
    start: int = spec_field(_NATURAL)
    stop: int = spec_field(_COUNT)
    count: int = spec_field(_COUNT)
    exclusion_rules: tuple[str, ...] = spec_field(Seq(OneOf(*EXCLUSION_RULES), min_len=1))
    excluded_against: str = spec_field(OneOf("every prepared training and development record"))


@dataclass(frozen=True, slots=True, kw_only=True)
class FinalEvaluation(Record):
    tasks: int = spec_field(_COUNT)
    retention: FinalRetention = spec_field(FinalRetention)


@dataclass(frozen=True, slots=True, kw_only=True)
class Evaluation(Record):
    dev: DevEvaluation = spec_field(DevEvaluation)
    final: FinalEvaluation = spec_field(FinalEvaluation)
    max_new_tokens: int = spec_field(_COUNT)


@dataclass(frozen=True, slots=True, kw_only=True)
class Gates(Record):
    unit: str = spec_field(OneOf("nats per assistant token"))
    bound: str = spec_field(OneOf("one-sided upper, paired bootstrap over examples"))
    gain_upper_below: float = spec_field(OneOf(GAIN_UPPER_BELOW))
    retention_upper_at_most: float = spec_field(OneOf(RETENTION_UPPER_AT_MOST))
    generated_max_net_lost: int = spec_field(OneOf(GENERATED_MAX_NET_LOST))


@dataclass(frozen=True, slots=True, kw_only=True)
class Bootstrap(Record):
    resamples: int = spec_field(Num(100, integer=True))
    seed: int = spec_field(SEED)
    confidence: float = spec_field(OneOf(CONFIDENCE))


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison(Record):
    """A comparison's candidate endpoint (cohort, grown or not) and its baseline: "seed" (the seed, by
    seed.parameter_digest or the digest prepare recorded) or the name of another comparison, whose candidate
    endpoint is then the baseline. A selection record binds exactly these pairs."""
    cohort: str = spec_field(OneOf("A", "B"))
    grown: bool = spec_field(bool)
    baseline: str = spec_field(str)


@dataclass(frozen=True, slots=True, kw_only=True)
class Planner(Record):
    regime: str = spec_field(OneOf(*REGIMES))
    reserve_bytes: int = spec_field(BYTES)
    worker_memory_bytes: int = spec_field(Num(1, 2**60, integer=True))


@dataclass(frozen=True, slots=True, kw_only=True)
class AdaptiveContract(Record):
    """An adaptive-shards contract (contracts/adaptive-shards*.json): `load_adaptive_contract` reads it."""
    FORMAT = KIND
    kind: str = spec_field(OneOf(KIND))
    version: int = spec_field(OneOf(1))
    scale: str = spec_field(OneOf("full", "medium", "tiny"))
    description: str = spec_field(str)
    pilot: Pilot | None = spec_field(Omittable(Pilot), doc="medium only: the pilot run it was fixed by")
    seed: SeedPin = spec_field(SeedPin)
    adam: Adam = spec_field(Adam)
    data_seeds: DataSeeds = spec_field(DataSeeds)
    tasks: Tasks = spec_field(Tasks)
    inputs: Inputs = spec_field(Inputs)
    conversation_replay: ConversationReplay = spec_field(ConversationReplay)
    cohorts: CohortPair = spec_field(CohortPair)
    training: AdaptiveTraining = spec_field(AdaptiveTraining)
    endpoints: EndpointPair = spec_field(EndpointPair)
    migration: Migration = spec_field(Migration)
    growth: Growth = spec_field(Growth)
    evaluation: Evaluation = spec_field(Evaluation)
    gates: Gates = spec_field(Gates)
    bootstrap: Bootstrap = spec_field(Bootstrap)
    comparisons: Mapping[str, Comparison] = spec_field(MapOf(Comparison), doc="name -> comparison")
    planner: Planner = spec_field(Planner)


@dataclass(frozen=True, slots=True, kw_only=True)
class AdaptiveJob(AdaptiveContract):
    """The adaptive drivers' view of an adaptive job's contract (kit.adaptive.continued_schema.job_contract):
    the contract's terms and the order of its cohorts. A parameter annotated `AdaptiveContract` accepts both."""
    cohort_order: tuple[str, ...] = spec_field(Seq(str, min_len=2), doc="a cohort's predecessor precedes it")


def _fail(source: str, field: str, value, expected: str) -> None:
    raise ContractError(f"{source}: field {field!r} = {value!r}; expected {expected}")


def _check_cohort(c: AdaptiveContract, name: str, source: str) -> None:
    cohort = c.cohorts[name]
    per, totals, updates = cohort.per_update, cohort.totals, cohort.updates
    for part, total, per_part in (("new", totals.new, per.new), ("replay_a", totals.replay_a, per.replay_a),
                                  ("replay_conv", totals.replay_conv, per.replay_conv)):
        if total != updates * per_part:
            _fail(source, f"cohorts.{name}.totals.{part}", total,
                  f"updates x per_update.{part} = {updates} x {per_part} = {updates * per_part}")
    per_sum = per.new + per.replay_a + per.replay_conv
    if per_sum != cohort.documents_per_update:
        _fail(source, f"cohorts.{name}.documents_per_update", cohort.documents_per_update,
              f"the sum of per_update = {per_sum}")
    if cohort.replay_every_update is not True or per.replay_a + per.replay_conv < 1:
        _fail(source, f"cohorts.{name}.replay_every_update", cohort.replay_every_update,
              "true, with per_update.replay_a + per_update.replay_conv >= 1 (the seed: replay in every update)")
    if per.new < 1:
        _fail(source, f"cohorts.{name}.per_update.new", per.new, "at least 1 new example per update")
    if c.endpoints[name] != updates:
        _fail(source, f"endpoints.{name}", c.endpoints[name], f"the cohort's last update {updates}")


def check_rules(c: AdaptiveContract, source: str) -> None:
    """Cross-field rules of a schema-valid contract's terms (`Contract.terms`); ContractError names the field."""
    digest = c.seed.parameter_digest
    if digest is not None and not _HEX64.match(digest):
        _fail(source, "seed.parameter_digest", digest, "64 lowercase hex digits or null (recorded at prepare)")
    if c.scale in ("full", "medium") and digest is None:
        _fail(source, "seed.parameter_digest", digest, f"the pinned digest of the {c.scale}-scale seed")
    check_pilot(c, source)
    for cohort in ("A", "B"):
        try:
            check_schedule(c.training.lr_schedule, c.cohorts[cohort].updates, "training.lr_schedule")
        except ValueError as e:
            raise ContractError(f"{source}: field {e} (cohort {cohort})") from None
    adam = c.adam
    for field, kept in (("new_phase_at_seed", adam.new_phase_at_seed),
                        ("retained_across_cohorts", adam.retained_across_cohorts),
                        ("retained_across_redistribution", adam.retained_across_redistribution),
                        ("retained_across_growth", adam.retained_across_growth)):
        if kept is not True:
            _fail(source, f"adam.{field}", kept, "true (the seed: one Adam phase, retained thereafter)")
    families = list(c.tasks.families)  # a list, as the file wrote it (the message shows it)
    if sorted(families) != sorted(FAMILIES) or len(families) != len(FAMILIES):
        _fail(source, "tasks.families", families, f"exactly the four families {list(FAMILIES)}")
    for field, value in (("replay_sha256", c.inputs.replay_sha256),
                         ("dev_retention_sha256", c.inputs.dev_retention_sha256)):
        if value is not None and not _HEX64.match(value):
            _fail(source, f"inputs.{field}", value, "64 lowercase hex digits or null")
    a, b = c.cohorts.A, c.cohorts.B
    _check_cohort(c, "A", source)
    _check_cohort(c, "B", source)
    if a.reference != "seed":
        _fail(source, "cohorts.A.reference", a.reference, "'seed' (the first cohort uses the seed reference)")
    if b.reference != "A.endpoint":
        _fail(source, "cohorts.B.reference", b.reference, "'A.endpoint' (the committed phase-A endpoint)")
    if a.per_update.replay_a != 0:
        _fail(source, "cohorts.A.per_update.replay_a", a.per_update.replay_a, "0 (nothing precedes phase A)")
    if b.totals.replay_a > a.totals.new:
        _fail(source, "cohorts.B.totals.replay_a", b.totals.replay_a,
              f"at most the {a.totals.new} examples trained in phase A")
    if b.totals.replay_conv > a.totals.replay_conv:
        _fail(source, "cohorts.B.totals.replay_conv", b.totals.replay_conv,
              f"at most the {a.totals.replay_conv} conversations of A.replay (conversation_replay.cohort_B)")
    t = c.training
    if t.microbatch_size > max(a.documents_per_update, b.documents_per_update):
        _fail(source, "training.microbatch_size", t.microbatch_size, "at most documents_per_update")
    if t.commit_every > min(a.updates, b.updates):
        _fail(source, "training.commit_every", t.commit_every, "at most the updates of a cohort")
    if c.growth.group not in t.optimizer or c.growth.group == "default":
        _fail(source, "growth.group", c.growth.group, "a non-default group of training.optimizer ('grown')")
    m = c.migration
    if m.from_workers != a.workers:
        _fail(source, "migration.from_workers", m.from_workers, f"cohorts.A.workers = {a.workers}")
    if m.to_workers == m.from_workers:
        _fail(source, "migration.to_workers", m.to_workers, "a worker count other than from_workers")
    if not 0 < m.at_step < a.updates or m.at_step % t.commit_every:
        _fail(source, "migration.at_step", m.at_step,
              f"a commit point strictly inside cohort A (a multiple of commit_every = {t.commit_every} "
              f"below {a.updates})")
    r = c.evaluation.final.retention
    if not _HEX64.match(r.sha256):
        _fail(source, "evaluation.final.retention.sha256", r.sha256, "64 lowercase hex digits")
    if r.stop <= r.start:
        _fail(source, "evaluation.final.retention.stop", r.stop, f"greater than start = {r.start}")
    if r.count > r.stop - r.start:
        _fail(source, "evaluation.final.retention.count", r.count, f"at most stop - start = {r.stop - r.start}")
    rules = list(r.exclusion_rules)  # a list, as the file wrote it (the message shows it)
    if sorted(rules) != sorted(EXCLUSION_RULES):
        _fail(source, "evaluation.final.retention.exclusion_rules", rules,
              f"every rule {list(EXCLUSION_RULES)} (the seed: prompt/document exclusion, exact and normalised)")


def check_comparisons(c: AdaptiveContract, source: str) -> None:
    """Each comparison's baseline is the seed or another comparison's endpoint; no cycles; growth only in B
    (`c`: the contract's terms)."""
    comps = c.comparisons
    if not comps:
        _fail(source, "comparisons", {}, "at least one comparison (the seed: A vs the seed, B vs A, growth vs control)")
    for name, comp in sorted(comps.items()):
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]{0,31}", name) or name == "seed":
            _fail(source, f"comparisons.{name}", name, "a name [A-Za-z][A-Za-z0-9_-]* other than 'seed'")
        if comp.grown and comp.cohort != c.growth.cohort:
            _fail(source, f"comparisons.{name}.grown", True, f"only for cohort growth.cohort = {c.growth.cohort!r}")
        base = comp.baseline
        if base != "seed" and (base not in comps or base == name):
            _fail(source, f"comparisons.{name}.baseline", base,
                  f"'seed' or the name of another comparison ({sorted(set(comps) - {name})})")
    for name in comps:  # no cycle: following baselines ends at the seed
        seen, at = set(), name
        while at != "seed":
            if at in seen:
                _fail(source, f"comparisons.{name}.baseline", comps[name].baseline, "a chain of baselines that ends at 'seed'")
            seen.add(at)
            at = comps[at].baseline
    ends = [(x.cohort, x.grown) for x in comps.values()]
    if len(set(ends)) != len(ends):
        _fail(source, "comparisons", sorted(comps), "one comparison per candidate endpoint (cohort, grown)")


def load_adaptive_contract(path: str | os.PathLike) -> Contract[AdaptiveContract]:
    """Load, validate against `AdaptiveContract` and the cross-field rules; the digest is of the canonical JSON."""
    contract = load_contract(path, AdaptiveContract, KIND)
    check_rules(contract.terms, str(contract.path))
    check_comparisons(contract.terms, str(contract.path))
    return contract


def commit_points(terms: TrainedTerms, cohort: str) -> list[int]:
    """Steps at which a cohort commits: every commit_every updates, and always the endpoint (`terms`: a
    job's contract view, `kit.adaptive.continued_schema.job_contract`)."""
    every, end = terms.training.commit_every, terms.endpoints[cohort]
    return sorted(set(range(every, end + 1, every)) | {end})


def engine_config(terms: TrainedTerms, pad_id: int = 0) -> EngineConfig:
    """The contract's training section as the engine's typed config (`kit.distributed.pipeline.EngineConfig`):
    the one translation of an adaptive contract. `pad_id` is the seed tokenizer's pad token (the
    contract does not name it); `compile_blocks` has no contract field and stays "auto"."""
    tr = terms.training
    d = tr.distillation
    return EngineConfig(microbatch_size=tr.microbatch_size, max_grad_norm=tr.max_grad_norm,
                        distill=DistillConfig(weight=d.weight, temperature=d.temperature, direction=d.direction),
                        compute_dtype=tr.compute_dtype, pad_id=pad_id)


def optimizer_groups(terms: TrainedTerms) -> dict[str, GroupConfig]:
    """The contract's optimizer groups ("default", "grown") as `kit.train.optim.GroupConfig`s. The groups
    cross as JSON (`to_json`): GroupConfig.from_json is the generic reader of an optimizer group's JSON, also of
    the tests' worker arguments, and refuses unknown fields."""
    groups = terms.training.optimizer.to_json()
    return {k: GroupConfig.from_json(v, f"training.optimizer.{k}") for k, v in groups.items()}
