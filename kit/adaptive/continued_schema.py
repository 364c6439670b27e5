"""The continued-learning contract (`ContinuedContract`) and the one contract view the adaptive drivers use
(`job_contract`: an `AdaptiveJob` or a `ContinuedJob`, `JobTerms`), apart from kit/adaptive/continued.py so that
selection, training and evaluation can read a continued job's contract without importing its preparation (no import
cycle). A job view states a continued job's cohorts as an adaptive job's are (`cohort_order`, `endpoints` and
`cohorts` by name), so one driver serves both.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from kit.adaptive.formats import (
    PREPARED_FILE,
    AnyPreparedJob,
    ContinuedPreparedJob,
    PreparedJob,
    prepared_job_from_json,
)
from kit.adaptive.schema import (
    AdaptiveContract,
    AdaptiveJob,
    Bootstrap,
    ContinuedTraining,
    DataSeeds,
    DevEvaluation,
    SeedPin,
    Tasks,
    load_adaptive_contract,
)
from kit.contract import Contract, ContractError, MapOf, Num, OneOf, Opt, Record, Seq, load_contract
from kit.record import build, spec_field

KIND = "continued-learning"
PREPARED_FORMAT = "kit.continued.prepared/1"
COHORT = "C"
ROLES = ("C.new", "C.replay", "dev.tasks", "dev.retention", "final.tasks", "final.retention")
GENERATED_MIN_NET_GAINED = 1  # "generated-answer improvement": at least one more correct case, net
RETENTION_UPPER_AT_MOST = 0.02
_COUNT = Num(1, integer=True)


# The objects of the continued-learning contract (docs/contracts.md), those it shares with the adaptive one
# declared in kit/adaptive/schema.py.

@dataclass(frozen=True, slots=True, kw_only=True)
class Start(Record):
    from_: str = spec_field(OneOf("A.endpoint"), doc="JSON key `from`")
    contract_kind: str = spec_field(OneOf("adaptive-shards"))
    contract_digest: str | None = spec_field(Opt(str))
    comparison: str = spec_field(str)
    gates_must_pass: bool = spec_field(OneOf(True))
    exploratory: bool = spec_field(bool)


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinuedCounts(Record):
    new: int = spec_field(_COUNT)
    replay_conv: int = spec_field(_COUNT)


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinuedCohort(Record):
    name: str = spec_field(OneOf(COHORT))
    updates: int = spec_field(_COUNT)
    documents_per_update: int = spec_field(_COUNT)
    workers: int = spec_field(_COUNT)
    reference: str = spec_field(OneOf("start"))
    replay_every_update: bool = spec_field(OneOf(True))
    per_update: ContinuedCounts = spec_field(ContinuedCounts)
    totals: ContinuedCounts = spec_field(ContinuedCounts)


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinuedRetention(Record):
    source_name: str = spec_field(str)
    sha256: str = spec_field(str)
    start: int = spec_field(Num(0, integer=True))
    stop: int = spec_field(_COUNT)
    count: int = spec_field(_COUNT)
    exclusion_rules: tuple[str, ...] = spec_field(
        Seq(OneOf("prompt_exact", "prompt_normalized", "document_normalized")))
    excluded_against: str = spec_field(OneOf("every prepared training and development record"))


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinuedFinal(Record):
    tasks: int = spec_field(_COUNT)
    excluded: str = spec_field(OneOf("the exposure ledger and every record of the start job"))
    retention: ContinuedRetention = spec_field(ContinuedRetention)


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinuedEvaluation(Record):
    dev: DevEvaluation = spec_field(DevEvaluation)
    final: ContinuedFinal = spec_field(ContinuedFinal)
    max_new_tokens: int = spec_field(_COUNT)


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinuedGates(Record):
    primary: str = spec_field(OneOf("generated"))
    generated_min_net_gained: int = spec_field(OneOf(GENERATED_MIN_NET_GAINED))
    retention_upper_at_most: float = spec_field(OneOf(RETENTION_UPPER_AT_MOST))
    gain: str = spec_field(OneOf("reported, not a gate"))
    unit: str = spec_field(OneOf("nats per assistant token"))
    bound: str = spec_field(OneOf("one-sided upper, paired bootstrap over examples"))


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinuedComparison(Record):
    cohort: str = spec_field(OneOf(COHORT))
    grown: bool = spec_field(OneOf(False))
    baseline: str = spec_field(OneOf("start"))


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinuedTerms(Record):
    """The fields a continued-learning contract and its job view share (all but `growth`)."""
    kind: str = spec_field(OneOf(KIND))
    version: int = spec_field(OneOf(1))
    scale: str = spec_field(OneOf("full", "tiny"))
    description: str = spec_field(str)
    start: Start = spec_field(Start)
    data_seeds: DataSeeds = spec_field(DataSeeds)
    tasks: Tasks = spec_field(Tasks)
    cohort: ContinuedCohort = spec_field(ContinuedCohort)
    training: ContinuedTraining = spec_field(ContinuedTraining)
    evaluation: ContinuedEvaluation = spec_field(ContinuedEvaluation)
    gates: ContinuedGates = spec_field(ContinuedGates)
    bootstrap: Bootstrap = spec_field(Bootstrap)
    comparisons: Mapping[str, ContinuedComparison] = spec_field(MapOf(ContinuedComparison))


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinuedContract(ContinuedTerms):
    """A continued-learning contract (contracts/continued-learning*.json): `load_continued_contract` reads it."""
    FORMAT = KIND
    growth: str = spec_field(OneOf("forbidden"))


@dataclass(frozen=True, slots=True, kw_only=True)
class JobGrowth(Record):
    """A continued job's growth, stated as an adaptive job's is: none."""
    add_blocks: int = spec_field(OneOf(0))
    cohort: str | None = spec_field(Opt(str))


@dataclass(frozen=True, slots=True, kw_only=True)
class JobCohort(Record):
    """Cohort C as the drivers read a cohort: its batch and its length (the learning-rate schedule's span)."""
    documents_per_update: int = spec_field(_COUNT)
    updates: int = spec_field(_COUNT)


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinuedJob(ContinuedTerms):
    """The adaptive drivers' view of a continued job's contract (`job_contract`): the contract's fields, its
    cohorts stated as an adaptive job's are (`cohort_order`, `endpoints`, `cohorts` by name, `growth`), the start
    job's seed, and the step it starts at."""
    growth: JobGrowth = spec_field(JobGrowth)
    cohort_order: tuple[str, ...] = spec_field(Seq(str, min_len=2))
    endpoints: Mapping[str, int] = spec_field(MapOf(_COUNT))
    cohorts: Mapping[str, JobCohort] = spec_field(MapOf(JobCohort))
    seed: SeedPin = spec_field(SeedPin)
    start_step: int = spec_field(Num(0, integer=True))


# The contract of a prepared job, as the adaptive drivers read it (`job_contract`).
JobTerms = AdaptiveJob | ContinuedJob
# Any terms of the adaptive family, a contract's or a job's (what reads only the fields they share: `bootstrap`).
AdaptiveFamilyTerms = AdaptiveContract | ContinuedTerms


class ContinuedRefused(ValueError):
    """Continued-learning preparation refused; the message names the file, the field and what was expected."""


def _fail(source: str, field: str, value, expected: str) -> None:
    raise ContractError(f"{source}: field {field!r} = {value!r}; expected {expected}")


def load_continued_contract(path: str | os.PathLike) -> Contract[ContinuedContract]:
    """Load, validate against `ContinuedContract` and the cross-field rules."""
    contract = load_contract(path, ContinuedContract, KIND)
    c, source = contract.terms, str(contract.path)
    k = c.cohort
    for part, total, per_part in (("new", k.totals.new, k.per_update.new),
                                  ("replay_conv", k.totals.replay_conv, k.per_update.replay_conv)):
        if total != k.updates * per_part:
            _fail(source, f"cohort.totals.{part}", total, f"updates x per_update.{part} = {k.updates * per_part}")
    per_sum = k.per_update.new + k.per_update.replay_conv
    if per_sum != k.documents_per_update:
        _fail(source, "cohort.documents_per_update", k.documents_per_update, f"the sum of per_update = {per_sum}")
    if c.training.commit_every > k.updates:
        _fail(source, "training.commit_every", c.training.commit_every, "at most cohort.updates")
    if set(c.comparisons) != {COHORT}:
        _fail(source, "comparisons", sorted(c.comparisons), f"exactly {{'{COHORT}': C endpoint vs the start}}")
    digest = c.start.contract_digest
    if c.scale == "full" and digest is None:
        _fail(source, "start.contract_digest", digest, "the digest of the full adaptive contract it continues")
    r = c.evaluation.final.retention
    if r.stop <= r.start or r.count > r.stop - r.start:
        _fail(source, "evaluation.final.retention", [r.start, r.stop, r.count], "start < stop, count <= stop - start")
    return contract


def adaptive_job_terms(data: dict) -> AdaptiveJob:
    """The job view of a loaded adaptive contract's JSON (`Contract.data`): its terms and `cohort_order` A, B."""
    return build({**data, "cohort_order": ["A", "B"]}, AdaptiveJob)


def _check_prepared_digest(contract: Contract, expected: str) -> None:
    if contract.digest != expected:
        raise ContractError(f"{contract.path}: contract digest {contract.digest}; prepared.json field "
                            f"'contract.digest' expects {expected}")


def job_contract(pj: AnyPreparedJob | dict) -> JobTerms:
    """The contract of a prepared job (adaptive or continued), as one typed view for the drivers
    (`AdaptiveJob` or `ContinuedJob`: attributes, frozen): the contract's fields plus `cohort_order` (the cohort a
    cohort continues precedes it), `endpoints`, `growth.add_blocks`, `seed.parameter_digest`, and for a
    continued job `start_step`. The contract file must still have the digest prepared.json records. `pj` is the
    job `load_prepared` read; a notebook may hand over prepared.json's JSON, read here as that class."""
    job = pj if isinstance(pj, (PreparedJob, ContinuedPreparedJob)) else prepared_job_from_json(pj, PREPARED_FILE)
    location, expected = job.locations.contract, job.contract.digest  # prepared.json's contract file and digest
    if not isinstance(job, ContinuedPreparedJob) or job.contract.kind != KIND:
        adaptive = load_adaptive_contract(location)
        _check_prepared_digest(adaptive, expected)
        return adaptive_job_terms(adaptive.data)
    contract = load_continued_contract(location)
    _check_prepared_digest(contract, expected)
    c, cursor = contract.terms, job.start.cursor
    view = {**contract.data, "cohort_order": ["A", COHORT],
            "endpoints": {"A": cursor.cohort_step, COHORT: c.cohort.updates},
            "growth": {"add_blocks": 0, "cohort": None},
            "cohorts": {COHORT: {"documents_per_update": c.cohort.documents_per_update, "updates": c.cohort.updates}},
            "seed": {"parameter_digest": job.seed.parameter_digest, "description": "the start job's seed"},
            "start_step": cursor.step}
    return build(view, ContinuedJob)
