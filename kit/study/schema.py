"""The shared-gradient study contract: its schema, its cross-field rules and loading (no torch).

A contract (`contracts/shared-gradient.json`, full scale; `contracts/shared-gradient.tiny.json`,
2 CPU cores) freezes every number of seeds/004_c2816a6b0f4864c9.txt plus the choices the seed
leaves open (learning rate, microbatch size, token cap, prices). The structural schema below is
checked by kit/contract.py (unknown or missing fields are errors naming the field); the rules the
structure cannot express (the schedule consumes exactly the prepared documents, the arms are the
three the seed names, the screens name existing arms) are checked in `check_rules`, naming the
file and the field as well.
"""

from __future__ import annotations

import os

from kit.contract import (
    LR,
    LR_SCHEDULE,
    PILOT,
    SEED,
    WEIGHT_DECAY,
    Contract,
    ContractError,
    Num,
    Omittable,
    OneOf,
    Opt,
    Seq,
    check_pilot,
    load_contract,
    parse,
)
from kit.distributed.pipeline import EngineConfig
from kit.train.optim import GroupConfig
from kit.train.schedule import CONSTANT, check_schedule

KIND = "shared-gradient-study"
ARM_NAMES = ("single", "dense", "powersgd")
REDUCTIONS = ("none", "dense", "powersgd")

_COUNT = Num(lo=1, integer=True)
_NATURAL = Num(lo=0, integer=True)
_POSITIVE = Num(lo=0)
_PRICE = {"value": Num(lo=0), "unit": str, "source": str, "as_of": str, "note": str}
_TASK_ROLE = {"count": _COUNT, "role": str, "seed": SEED, "difficulty": OneOf(1, 2, 3)}
_SOURCE_RANGE = {"name": str, "sha256": str, "start": _NATURAL, "stop": _COUNT}

SCHEMA = {
    "kind": OneOf(KIND),
    "name": str,
    "scale": OneOf("full", "medium", "tiny"),
    "seed_document": str,
    "pilot": Omittable(PILOT),  # medium only: the pilot run a frozen medium contract was fixed by
    "seed": {
        "description": str,
        "parameter_digest": Opt(str),  # prepare refuses a seed directory with another digest
    },
    "device": OneOf("cpu", "cuda"),
    "collective_timeout_s": Num(lo=1),
    "schedule": {
        "updates": _COUNT,
        "documents_per_update": _COUNT,
        "order_seed": SEED,
        "replica_split": OneOf("position-modulo-workers"),
    },
    "data": {
        "max_tokens": Num(lo=8, integer=True),
        "tasks": {"count": _NATURAL, "role": str, "seed": SEED, "difficulty": OneOf(1, 2, 3)},
        "replay": {"count": _NATURAL, "source": _SOURCE_RANGE, "loss": OneOf("ce")},
        "final_test": _TASK_ROLE,
        # optional, added after the committed contracts were frozen (an absent field leaves their digests):
        # the development tasks a study pilot scores (campaigns/study_pilot.py); never trained, never final
        "dev": Omittable(_TASK_ROLE),
        "retention": {"count": Num(lo=2, integer=True), "source": _SOURCE_RANGE, "exposed": bool},
    },
    "training": {
        "parameters": OneOf("all"),
        "microbatch_size": _COUNT,
        "max_grad_norm": Num(lo=0),
        "compute_dtype": OneOf("float32", "bfloat16"),
        "optimizer": {"lr": LR, "beta1": Num(0, 0.999999), "beta2": Num(0, 0.999999),
                      "eps": Num(lo=1e-12), "weight_decay": WEIGHT_DECAY},
        "commit_every": _NATURAL,  # 0: the endpoint only
        "lr_schedule": Omittable(LR_SCHEDULE),  # absent: "constant" (kit/train/schedule.py)
    },
    "arms": Seq({"name": OneOf(*ARM_NAMES), "workers": _COUNT, "reduction": OneOf(*REDUCTIONS)}, min_len=1),
    "powersgd": {
        "rank": _COUNT,
        "warmup_updates": _NATURAL,
        "min_compression_numel": _NATURAL,
        "min_compression_rate": Num(lo=0),
        "warm_start": bool,
        "seed": SEED,
        "orthogonalization_epsilon": Num(lo=1e-30),
        "error_feedback_device": OneOf("cpu"),
        "error_feedback_dtype": OneOf("float32"),
    },
    "evaluation": {"max_new_tokens": _COUNT, "batch_size": _COUNT},
    "screens": {
        "candidate": OneOf(*ARM_NAMES),
        "controls": Seq(OneOf(*ARM_NAMES), min_len=1),
        "speed_baseline": OneOf(*ARM_NAMES),
        "normal_multiplier": Num(lo=0),
        "min_task_gain": Num(0, 1),
        "max_retention_upper_nats": float,
        "noninferiority_margin": Num(0, 1),
        "min_speedup": Num(lo=0),
    },
    "projection": {
        "seconds_per_update": {name: _POSITIVE for name in ARM_NAMES},
        "startup_s": _POSITIVE,
        "checkpoint_s": _POSITIVE,
        "note": str,
    },
    "cost": {
        "hosts": Seq({"name": str, "instance_type": str, "gpu": str, "gpus": _COUNT, "zone": str}, min_len=1),
        "cross_zone_traffic_billed": bool,
        "instance_price_usd_per_hour": _PRICE,
        "cross_zone_price_usd_per_gb_each_direction": _PRICE,
        "bytes_per_gb": Num(1, 2**60, integer=True),
        "deadline_hours": Num(lo=0),
        "bound_usd": Num(lo=0),
    },
}

# The reduction each arm name stands for, and its worker count (the seed: 1 GPU; 2 GPUs; 2 GPUs).
ARM_SHAPES = {"single": (1, "none"), "dense": (2, "dense"), "powersgd": (2, "powersgd")}


def check_rules(terms, source: str) -> None:
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
    for field in ("replay", "retention"):
        rng = getattr(d, field).source
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


def _check_dev_role(d, source: str) -> None:
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


def load_study_contract(path: str | os.PathLike) -> Contract:
    """Load, validate the structure and the cross-field rules; the digest is of the canonical JSON."""
    contract = load_contract(path, SCHEMA, KIND)
    check_rules(contract.terms, str(path))
    return contract


def study_terms(data: dict):
    """The typed reading of a study contract's JSON that travelled as data (a worker's launch argument,
    written from `Contract.terms.to_json()` of a validated contract): the same frozen sections as `terms`."""
    return parse(data, SCHEMA, KIND + "-contract")


def arm_spec(contract: Contract, name: str):
    """The contract's arm `name` (its section: `.name`, `.workers`, `.reduction`)."""
    for arm in contract.terms.arms:
        if arm.name == name:
            return arm
    raise ValueError(f"{contract.path}: no arm named {name!r}; the contract lists "
                     f"{[a.name for a in contract.terms.arms]}")


POWERSGD_FIELDS = ("rank", "warmup_updates", "min_compression_numel", "min_compression_rate", "warm_start", "seed",
                   "orthogonalization_epsilon", "error_feedback_device")


def powersgd_config_dict(terms) -> dict:
    """The PowerSGDConfig fields of the contract terms (the dtype field is fixed: FP32 error feedback), as the
    plain JSON `PowerSGDConfig.from_dict` reads (it also reads worker arguments and records, not only contracts)."""
    p = terms.powersgd
    return {k: getattr(p, k) for k in POWERSGD_FIELDS}


def engine_config(terms, compile_blocks: str = "auto", pad_id: int = 0):
    """The contract terms' training section as the engine's typed config: the one translation of a study
    contract. `compile_blocks` is a run option (`kit study arm --compile-blocks`), not a contract field;
    the study's documents are pre-tokenised and padding is never a target, so `pad_id` stays 0."""
    t = terms.training
    return EngineConfig(microbatch_size=int(t.microbatch_size), max_grad_norm=float(t.max_grad_norm),
                        compute_dtype=t.compute_dtype, compile_blocks=compile_blocks, pad_id=pad_id)


def lr_schedule(terms):
    """The terms' `training.lr_schedule` as kit.train.schedule.lr_factor reads it: "constant" when omitted
    (the field is Omittable in the study's schema), else the string or the typed section."""
    schedule = terms.training.lr_schedule
    return CONSTANT if schedule is None else schedule


def optimizer_groups(terms) -> dict:
    """The study's one AdamW group ("default") as `kit.train.optim.GroupConfig`."""
    o = terms.training.optimizer
    return {"default": GroupConfig(lr=o.lr, beta1=o.beta1, beta2=o.beta2, eps=o.eps, weight_decay=o.weight_decay)}
