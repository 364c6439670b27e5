"""The adaptive-shards contract: its schema and the cross-field rules a frozen trial must satisfy.

`SCHEMA` is plain data for `kit.contract.validate` (every field required, unknown fields refused,
errors name the dotted field). The structural schema cannot say that 6,144 = 128 x 48 or that the
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

from kit.contract import (
    BYTES,
    LR,
    LR_SCHEDULE,
    PILOT,
    SEED,
    WEIGHT_DECAY,
    Contract,
    ContractError,
    MapOf,
    Num,
    Omittable,
    OneOf,
    Opt,
    Seq,
    check_pilot,
    load_contract,
)
from kit.data.tasks import FAMILIES
from kit.distributed.pipeline import EngineConfig
from kit.planner import GPU_BF16
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

_COUNTS = {"new": Num(0, integer=True), "replay_a": Num(0, integer=True), "replay_conv": Num(0, integer=True)}
_COHORT = {
    "updates": Num(1, integer=True),
    "documents_per_update": Num(1, integer=True),
    "workers": Num(1, integer=True),
    "reference": OneOf("seed", "A.endpoint"),
    "replay_every_update": bool,
    "per_update": _COUNTS,
    "totals": _COUNTS,
}
_GROUP = {"lr": LR, "beta1": Num(0, 0.999999), "beta2": Num(0, 0.999999), "eps": Num(1e-30),
          "weight_decay": WEIGHT_DECAY}


def training_schema(groups: tuple[str, ...]) -> dict:
    """The `training` section of an adaptive-family contract (adaptive, continued learning): the same
    fields everywhere; only the optimizer groups differ (continued learning forbids growth: no "grown")."""
    return {
        "optimizer": {g: _GROUP for g in groups},
        "lr_schedule": LR_SCHEDULE,
        "max_grad_norm": Num(0),
        "distillation": {"weight": Num(0), "temperature": Num(1e-6), "direction": OneOf("forward", "reverse"),
                         "applies_to": OneOf("replay")},
        "microbatch_size": Num(1, integer=True),
        "max_tokens": Num(2, integer=True),
        "over_long": OneOf("reject"),
        "compute_dtype": OneOf("float32", "bfloat16"),
        "commit_every": Num(1, integer=True),
    }

SCHEMA = {
    "kind": OneOf(KIND),
    "version": OneOf(1),
    "scale": OneOf("full", "medium", "tiny"),
    "description": str,
    "pilot": Omittable(PILOT),  # medium only: the pilot run a frozen medium contract was fixed by
    "seed": {"parameter_digest": Opt(str), "description": str},
    "adam": {
        "phase": str,
        "new_phase_at_seed": bool,
        "retained_across_cohorts": bool,
        "retained_across_redistribution": bool,
        "retained_across_growth": bool,
    },
    "data_seeds": {"tasks": SEED, "selection": SEED,
                   "schedule": SEED},
    "tasks": {"families": Seq(OneOf(*FAMILIES), min_len=1), "difficulty": Num(1, 3, integer=True)},
    "inputs": {"replay_sha256": Opt(str), "dev_retention_sha256": Opt(str)},
    "conversation_replay": {"pool": OneOf("non-task", "all"), "cohort_B": OneOf("A.replay")},
    "cohorts": {"A": _COHORT, "B": _COHORT},
    "training": training_schema(("default", "grown")),
    "endpoints": {"A": Num(1, integer=True), "B": Num(1, integer=True)},
    "migration": {"cohort": OneOf("A"), "from_workers": Num(1, integer=True), "to_workers": Num(1, integer=True),
                  "at_step": Num(1, integer=True), "control": OneOf("uninterrupted")},
    "growth": {"cohort": OneOf("B"), "at_step": OneOf(0), "add_blocks": Num(1, integer=True),
               "copy_block": Num(0, integer=True), "group": str, "control": OneOf("fixed-depth")},
    "evaluation": {
        "dev": {"tasks": Num(1, integer=True), "retention": Num(1, integer=True)},
        "final": {
            "tasks": Num(1, integer=True),
            "retention": {
                "source_name": str,
                "sha256": str,
                "start": Num(0, integer=True),
                "stop": Num(1, integer=True),
                "count": Num(1, integer=True),
                "exclusion_rules": Seq(OneOf(*EXCLUSION_RULES), min_len=1),
                "excluded_against": OneOf("every prepared training and development record"),
            },
        },
        "max_new_tokens": Num(1, integer=True),
    },
    "gates": {
        "unit": OneOf("nats per assistant token"),
        "bound": OneOf("one-sided upper, paired bootstrap over examples"),
        "gain_upper_below": OneOf(GAIN_UPPER_BELOW),
        "retention_upper_at_most": OneOf(RETENTION_UPPER_AT_MOST),
        "generated_max_net_lost": OneOf(GENERATED_MAX_NET_LOST),
    },
    "bootstrap": {"resamples": Num(100, integer=True), "seed": SEED, "confidence": OneOf(CONFIDENCE)},
    # name -> the comparison's candidate endpoint (cohort, grown or not) and its baseline: "seed" (the seed,
    # by seed.parameter_digest or the digest prepare recorded) or the name of another comparison, whose
    # candidate endpoint is then the baseline. A selection record binds exactly these pairs.
    "comparisons": MapOf({"cohort": OneOf("A", "B"), "grown": bool, "baseline": str}),
    "planner": {"regime": OneOf(*REGIMES), "reserve_bytes": BYTES,
                "worker_memory_bytes": Num(1, 2**60, integer=True)},
}


def _fail(source: str, field: str, value, expected: str) -> None:
    raise ContractError(f"{source}: field {field!r} = {value!r}; expected {expected}")


def _check_cohort(c, name: str, source: str) -> None:
    cohort = getattr(c.cohorts, name)
    per, totals, updates = cohort.per_update, cohort.totals, cohort.updates
    for part in PART_NAMES:
        if getattr(totals, part) != updates * getattr(per, part):
            _fail(source, f"cohorts.{name}.totals.{part}", getattr(totals, part),
                  f"updates x per_update.{part} = {updates} x {getattr(per, part)} = {updates * getattr(per, part)}")
    per_sum = sum(getattr(per, part) for part in PART_NAMES)
    if per_sum != cohort.documents_per_update:
        _fail(source, f"cohorts.{name}.documents_per_update", cohort.documents_per_update,
              f"the sum of per_update = {per_sum}")
    if cohort.replay_every_update is not True or per.replay_a + per.replay_conv < 1:
        _fail(source, f"cohorts.{name}.replay_every_update", cohort.replay_every_update,
              "true, with per_update.replay_a + per_update.replay_conv >= 1 (the seed: replay in every update)")
    if per.new < 1:
        _fail(source, f"cohorts.{name}.per_update.new", per.new, "at least 1 new example per update")
    if getattr(c.endpoints, name) != updates:
        _fail(source, f"endpoints.{name}", getattr(c.endpoints, name), f"the cohort's last update {updates}")


def check_rules(c, source: str) -> None:
    """Cross-field rules of a schema-valid contract's terms (`Contract.terms`); ContractError names the field."""
    digest = c.seed.parameter_digest
    if digest is not None and not _HEX64.match(digest):
        _fail(source, "seed.parameter_digest", digest, "64 lowercase hex digits or null (recorded at prepare)")
    if c.scale in ("full", "medium") and digest is None:
        _fail(source, "seed.parameter_digest", digest, f"the pinned digest of the {c.scale}-scale seed")
    check_pilot(c, source)
    for cohort in ("A", "B"):
        try:
            check_schedule(c.training.lr_schedule, getattr(c.cohorts, cohort).updates, "training.lr_schedule")
        except ValueError as e:
            raise ContractError(f"{source}: field {e} (cohort {cohort})") from None
    for field in ("new_phase_at_seed", "retained_across_cohorts", "retained_across_redistribution",
                  "retained_across_growth"):
        if getattr(c.adam, field) is not True:
            _fail(source, f"adam.{field}", getattr(c.adam, field), "true (the seed: one Adam phase, retained thereafter)")
    families = list(c.tasks.families)  # a list, as the file wrote it (the message shows it)
    if sorted(families) != sorted(FAMILIES) or len(families) != len(FAMILIES):
        _fail(source, "tasks.families", families, f"exactly the four families {list(FAMILIES)}")
    for field in ("replay_sha256", "dev_retention_sha256"):
        value = getattr(c.inputs, field)
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


def check_comparisons(c, source: str) -> None:
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


def load_adaptive_contract(path: str | os.PathLike) -> Contract:
    """Load, validate against SCHEMA and the cross-field rules; the digest is of the canonical JSON."""
    contract = load_contract(path, SCHEMA, KIND)
    check_rules(contract.terms, str(contract.path))
    check_comparisons(contract.terms, str(contract.path))
    return contract


def commit_points(terms, cohort: str) -> list[int]:
    """Steps at which a cohort commits: every commit_every updates, and always the endpoint (`terms`: a
    job's contract view, `kit.adaptive.continued_schema.job_contract`)."""
    every, end = terms.training.commit_every, terms.endpoints[cohort]
    return sorted(set(range(every, end + 1, every)) | {end})


def engine_config(terms, pad_id: int = 0):
    """The contract's training section as the engine's typed config (`kit.distributed.pipeline.EngineConfig`):
    the one translation of an adaptive contract. `pad_id` is the seed tokenizer's pad token (the
    contract does not name it); `compile_blocks` has no contract field and stays "auto"."""
    tr = terms.training
    d = tr.distillation
    return EngineConfig(microbatch_size=tr.microbatch_size, max_grad_norm=tr.max_grad_norm,
                        distill=DistillConfig(weight=d.weight, temperature=d.temperature, direction=d.direction),
                        compute_dtype=tr.compute_dtype, pad_id=pad_id)


def optimizer_groups(terms) -> dict:
    """The contract's optimizer groups ("default", "grown") as `kit.train.optim.GroupConfig`s. The groups
    cross as JSON (`to_json`): GroupConfig.from_json is the generic reader of an optimizer group's JSON, also of
    the tests' worker arguments, and refuses unknown fields."""
    groups = terms.training.optimizer.to_json()
    return {k: GroupConfig.from_json(v, f"training.optimizer.{k}") for k, v in groups.items()}
