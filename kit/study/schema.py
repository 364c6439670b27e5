"""The shared-gradient study contract: its schema, its cross-field rules and loading (no torch).

A contract (`contracts/shared-gradient.json`, full scale; `contracts/shared-gradient.tiny.json`,
2 CPU cores) freezes every number of seeds/004_c2816a6b0f4864c9.txt plus the choices the seed
leaves open (learning rate, microbatch size, token cap, prices). The structural schema below is
declared by `StudyContract` (kit/record.py: unknown or missing fields are errors naming the field); the rules the
structure cannot express (the schedule consumes exactly the prepared documents, the arms are the
three the seed names, the screens name existing arms) are checked in `check_rules`, naming the
file and the field as well.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from kit.contract import (
    LR,
    LR_SCHEDULE,
    SEED,
    WEIGHT_DECAY,
    Contract,
    ContractError,
    LrSchedule,
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
from kit.distributed.pipeline import EngineConfig
from kit.record import spec_field
from kit.train.optim import GroupConfig
from kit.train.schedule import CONSTANT, check_schedule

KIND = "shared-gradient-study"
ARM_NAMES = ("single", "dense", "powersgd")
REDUCTIONS = ("none", "dense", "powersgd")

_COUNT = Num(lo=1, integer=True)
_NATURAL = Num(lo=0, integer=True)
_POSITIVE = Num(lo=0)


# The objects of the study contract (docs/contracts.md, "shared-gradient-study: fields"), leaves first.

@dataclass(frozen=True, slots=True, kw_only=True)
class Price(Record):
    value: float = spec_field(Num(lo=0))
    unit: str = spec_field(str)
    source: str = spec_field(str)
    as_of: str = spec_field(str)
    note: str = spec_field(str)


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskRole(Record):
    """Generated tasks of one role (kit.data.tasks), drawn from their own seed."""
    count: int = spec_field(_COUNT)
    role: str = spec_field(str)
    seed: int = spec_field(SEED)
    difficulty: int = spec_field(OneOf(1, 2, 3))


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingTasks(Record):
    """The trained tasks: as `TaskRole`, but a study may train none."""
    count: int = spec_field(_NATURAL)
    role: str = spec_field(str)
    seed: int = spec_field(SEED)
    difficulty: int = spec_field(OneOf(1, 2, 3))


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceRange(Record):
    """Records [start, stop) of a pinned public source (shared/data/SOURCE.md)."""
    name: str = spec_field(str)
    sha256: str = spec_field(str)
    start: int = spec_field(_NATURAL)
    stop: int = spec_field(_COUNT)


@dataclass(frozen=True, slots=True, kw_only=True)
class StudySeed(Record):
    description: str = spec_field(str)
    parameter_digest: str | None = spec_field(Opt(str), doc="prepare refuses a seed directory with another digest")


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleTerms(Record):
    updates: int = spec_field(_COUNT)
    documents_per_update: int = spec_field(_COUNT)
    order_seed: int = spec_field(SEED)
    replica_split: str = spec_field(OneOf("position-modulo-workers"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Replay(Record):
    count: int = spec_field(_NATURAL)
    source: SourceRange = spec_field(SourceRange)
    loss: str = spec_field(OneOf("ce"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Retention(Record):
    count: int = spec_field(Num(lo=2, integer=True))
    source: SourceRange = spec_field(SourceRange)
    exposed: bool = spec_field(bool)


@dataclass(frozen=True, slots=True, kw_only=True)
class StudyData(Record):
    max_tokens: int = spec_field(Num(lo=8, integer=True))
    tasks: TrainingTasks = spec_field(TrainingTasks)
    replay: Replay = spec_field(Replay)
    final_test: TaskRole = spec_field(TaskRole)
    # optional, added after the committed contracts were frozen (an absent field leaves their digests): the
    # development tasks a study pilot scores (campaigns/study_pilot.py); never trained, never final
    dev: TaskRole | None = spec_field(Omittable(TaskRole))
    retention: Retention = spec_field(Retention)


@dataclass(frozen=True, slots=True, kw_only=True)
class StudyOptimizer(Record):
    lr: float = spec_field(LR)
    beta1: float = spec_field(Num(0, 0.999999))
    beta2: float = spec_field(Num(0, 0.999999))
    eps: float = spec_field(Num(lo=1e-12))
    weight_decay: float = spec_field(WEIGHT_DECAY)


@dataclass(frozen=True, slots=True, kw_only=True)
class StudyTraining(Record):
    parameters: str = spec_field(OneOf("all"))
    microbatch_size: int = spec_field(_COUNT)
    max_grad_norm: float = spec_field(Num(lo=0))
    compute_dtype: str = spec_field(OneOf("float32", "bfloat16"))
    optimizer: StudyOptimizer = spec_field(StudyOptimizer)
    commit_every: int = spec_field(_NATURAL, doc="0: the endpoint only")
    # absent: "constant" (kit/train/schedule.py), added after the first contracts were frozen
    lr_schedule: LrSchedule | None = spec_field(Omittable(LR_SCHEDULE))


@dataclass(frozen=True, slots=True, kw_only=True)
class Arm(Record):
    name: str = spec_field(OneOf(*ARM_NAMES))
    workers: int = spec_field(_COUNT)
    reduction: str = spec_field(OneOf(*REDUCTIONS))


@dataclass(frozen=True, slots=True, kw_only=True)
class PowerSGD(Record):
    rank: int = spec_field(_COUNT)
    warmup_updates: int = spec_field(_NATURAL)
    min_compression_numel: int = spec_field(_NATURAL)
    min_compression_rate: float = spec_field(Num(lo=0))
    warm_start: bool = spec_field(bool)
    seed: int = spec_field(SEED)
    orthogonalization_epsilon: float = spec_field(Num(lo=1e-30))
    error_feedback_device: str = spec_field(OneOf("cpu"))
    error_feedback_dtype: str = spec_field(OneOf("float32"))


@dataclass(frozen=True, slots=True, kw_only=True)
class StudyEvaluation(Record):
    max_new_tokens: int = spec_field(_COUNT)
    batch_size: int = spec_field(_COUNT)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScreenTerms(Record):
    candidate: str = spec_field(OneOf(*ARM_NAMES))
    controls: tuple[str, ...] = spec_field(Seq(OneOf(*ARM_NAMES), min_len=1))
    speed_baseline: str = spec_field(OneOf(*ARM_NAMES))
    normal_multiplier: float = spec_field(Num(lo=0))
    min_task_gain: float = spec_field(Num(0, 1))
    max_retention_upper_nats: float = spec_field(float)
    noninferiority_margin: float = spec_field(Num(0, 1))
    min_speedup: float = spec_field(Num(lo=0))


@dataclass(frozen=True, slots=True, kw_only=True)
class SecondsPerUpdate(Record):
    """The projected seconds per update of each arm (ARM_NAMES)."""
    single: float = spec_field(_POSITIVE)
    dense: float = spec_field(_POSITIVE)
    powersgd: float = spec_field(_POSITIVE)


@dataclass(frozen=True, slots=True, kw_only=True)
class Projection(Record):
    seconds_per_update: SecondsPerUpdate = spec_field(SecondsPerUpdate)
    startup_s: float = spec_field(_POSITIVE)
    checkpoint_s: float = spec_field(_POSITIVE)
    note: str = spec_field(str)


@dataclass(frozen=True, slots=True, kw_only=True)
class Host(Record):
    name: str = spec_field(str)
    instance_type: str = spec_field(str)
    gpu: str = spec_field(str)
    gpus: int = spec_field(_COUNT)
    zone: str = spec_field(str)


@dataclass(frozen=True, slots=True, kw_only=True)
class Cost(Record):
    hosts: tuple[Host, ...] = spec_field(Seq(Host, min_len=1))
    cross_zone_traffic_billed: bool = spec_field(bool)
    instance_price_usd_per_hour: Price = spec_field(Price)
    cross_zone_price_usd_per_gb_each_direction: Price = spec_field(Price)
    bytes_per_gb: int = spec_field(Num(1, 2**60, integer=True))
    deadline_hours: float = spec_field(Num(lo=0))
    bound_usd: float = spec_field(Num(lo=0))


@dataclass(frozen=True, slots=True, kw_only=True)
class StudyContract(Record):
    """A shared-gradient study contract (contracts/shared-gradient*.json): `load_study_contract` reads it."""
    FORMAT = KIND
    kind: str = spec_field(OneOf(KIND))
    name: str = spec_field(str)
    scale: str = spec_field(OneOf("full", "medium", "tiny"))
    seed_document: str = spec_field(str)
    pilot: Pilot | None = spec_field(Omittable(Pilot), doc="medium only: the pilot run it was fixed by")
    seed: StudySeed = spec_field(StudySeed)
    device: str = spec_field(OneOf("cpu", "cuda"))
    collective_timeout_s: float = spec_field(Num(lo=1))
    schedule: ScheduleTerms = spec_field(ScheduleTerms)
    data: StudyData = spec_field(StudyData)
    training: StudyTraining = spec_field(StudyTraining)
    arms: tuple[Arm, ...] = spec_field(Seq(Arm, min_len=1))
    powersgd: PowerSGD = spec_field(PowerSGD)
    evaluation: StudyEvaluation = spec_field(StudyEvaluation)
    screens: ScreenTerms = spec_field(ScreenTerms)
    projection: Projection = spec_field(Projection)
    cost: Cost = spec_field(Cost)


# The reduction each arm name stands for, and its worker count (the seed: 1 GPU; 2 GPUs; 2 GPUs).
ARM_SHAPES = {"single": (1, "none"), "dense": (2, "dense"), "powersgd": (2, "powersgd")}


def check_rules(terms: StudyContract, source: str) -> None:
    """Cross-field rules of a schema-valid contract's terms (`Contract.terms`); every message names the file
    and the field."""
    digest = terms.seed.parameter_digest
    if terms.scale == "medium" and (digest is None or len(digest) != 64
                                    or any(ch not in "0123456789abcdef" for ch in digest)):
        raise ContractError(f"{source}: field 'seed.parameter_digest' = {digest!r}; expected the pinned digest "
                            "(64 lowercase hex digits) of the medium-scale seed")
    check_pilot(terms, source)
    arms = terms.arms
    names = [a.name for a in arms]
    if len(set(names)) != len(names):
        raise ContractError(f"{source}: field 'arms' lists an arm twice: {names}")
    for i, arm in enumerate(arms):
        workers, reduction = ARM_SHAPES[arm.name]
        if (arm.workers, arm.reduction) != (workers, reduction):
            raise ContractError(f"{source}: field 'arms[{i}]' ({arm.name!r}) has workers={arm.workers}, "
                                f"reduction={arm.reduction!r}; expected workers={workers}, "
                                f"reduction={reduction!r}")
    sched, d = terms.schedule, terms.data
    try:
        check_schedule(lr_schedule(terms), sched.updates, "training.lr_schedule")
    except ValueError as e:
        raise ContractError(f"{source}: field {e}") from None
    documents = d.tasks.count + d.replay.count
    needed = sched.updates * sched.documents_per_update
    if documents != needed:
        raise ContractError(f"{source}: field 'data': tasks.count + replay.count = {documents} documents, but "
                            f"schedule.updates x schedule.documents_per_update = {needed}; every document is "
                            "trained exactly once, so they must be equal")
    _check_dev_role(d, source)
    for i, arm in enumerate(arms):
        if sched.documents_per_update < arm.workers:
            raise ContractError(f"{source}: field 'schedule.documents_per_update' = "
                                f"{sched.documents_per_update} is below arms[{i}].workers = {arm.workers}")
    for field, rng in (("replay", d.replay.source), ("retention", d.retention.source)):
        if rng.start >= rng.stop:
            raise ContractError(f"{source}: field 'data.{field}.source' range [{rng.start}, {rng.stop}) is empty")
    if d.replay.count and d.retention.source.name == d.replay.source.name:
        a, b = d.replay.source, d.retention.source
        if a.start < b.stop and b.start < a.stop:
            raise ContractError(f"{source}: field 'data.retention.source' range [{b.start}, {b.stop}) "
                                f"overlaps the replay range [{a.start}, {a.stop}) of the same source")
    screens = terms.screens
    for field, value in (("candidate", [screens.candidate]), ("controls", screens.controls),
                         ("speed_baseline", [screens.speed_baseline])):
        missing = [v for v in value if v not in names]
        if missing:
            raise ContractError(f"{source}: field 'screens.{field}' names {missing}, which 'arms' does not list")
    if screens.candidate in screens.controls:
        raise ContractError(f"{source}: field 'screens.controls' contains the candidate {screens.candidate!r}")
    if terms.powersgd.warmup_updates > sched.updates:
        raise ContractError(f"{source}: field 'powersgd.warmup_updates' = {terms.powersgd.warmup_updates} "
                            f"exceeds schedule.updates = {sched.updates}")


def _check_dev_role(d: StudyData, source: str) -> None:
    """`data.dev` is its own task role: another role name than the training and final roles, so its draw
    differs from theirs by construction (prepare also excludes their digests)."""
    if d.dev is None:
        return
    if "dev" not in d.dev.role:  # the seed builds find development and final roles by name (kit/seed/small.py)
        raise ContractError(f"{source}: field 'data.dev.role' = {d.dev.role!r}; expected a role name containing "
                            "'dev', so that seed builds exclude its tasks")
    others = {"data.tasks.role": d.tasks.role, "data.final_test.role": d.final_test.role}
    for field, role in others.items():
        if d.dev.role == role:
            raise ContractError(f"{source}: field 'data.dev.role' = {role!r} is also {field}; expected a role name "
                                "of its own (development tasks are never trained and never final)")


def load_study_contract(path: str | os.PathLike) -> Contract[StudyContract]:
    """Load, validate the structure and the cross-field rules; the digest is of the canonical JSON."""
    contract = load_contract(path, StudyContract, KIND)
    check_rules(contract.terms, str(path))
    return contract


def study_terms(data: dict, source: str = "launch argument 'contract'") -> StudyContract:
    """The typed reading of a study contract's JSON that travelled as data (a worker's launch argument,
    written from `Contract.terms.to_json()` of a validated contract): the same frozen value as `terms`, checked
    again at the process boundary."""
    return StudyContract.from_json(data, source)


def arm_spec(contract: Contract[StudyContract], name: str) -> Arm:
    """The contract's arm `name` (its section: `.name`, `.workers`, `.reduction`)."""
    for arm in contract.terms.arms:
        if arm.name == name:
            return arm
    raise ValueError(f"{contract.path}: no arm named {name!r}; the contract lists "
                     f"{[a.name for a in contract.terms.arms]}")


POWERSGD_FIELDS = ("rank", "warmup_updates", "min_compression_numel", "min_compression_rate", "warm_start", "seed",
                   "orthogonalization_epsilon", "error_feedback_device")


def powersgd_config_dict(terms: StudyContract) -> dict:
    """The PowerSGDConfig fields of the contract terms (the dtype field is fixed: FP32 error feedback), as the
    plain JSON `PowerSGDConfig.from_dict` reads (it also reads worker arguments and records, not only contracts)."""
    return {k: v for k, v in terms.powersgd.to_json().items() if k in POWERSGD_FIELDS}


def engine_config(terms: StudyContract, compile_blocks: str = "auto", pad_id: int = 0) -> EngineConfig:
    """The contract terms' training section as the engine's typed config: the one translation of a study
    contract. `compile_blocks` is a run option (`kit study arm --compile-blocks`), not a contract field;
    the study's documents are pre-tokenised and padding is never a target, so `pad_id` stays 0."""
    t = terms.training
    return EngineConfig(microbatch_size=int(t.microbatch_size), max_grad_norm=float(t.max_grad_norm),
                        compute_dtype=t.compute_dtype, compile_blocks=compile_blocks, pad_id=pad_id)


def lr_schedule(terms: StudyContract) -> LrSchedule:
    """The terms' `training.lr_schedule` as kit.train.schedule.lr_factor reads it: "constant" when omitted
    (the field is Omittable in the study's schema), else the string or the typed section."""
    schedule = terms.training.lr_schedule
    return CONSTANT if schedule is None else schedule


def optimizer_groups(terms: StudyContract) -> dict[str, GroupConfig]:
    """The study's one AdamW group ("default") as `kit.train.optim.GroupConfig`."""
    o = terms.training.optimizer
    return {"default": GroupConfig(lr=o.lr, beta1=o.beta1, beta2=o.beta2, eps=o.eps, weight_decay=o.weight_decay)}
