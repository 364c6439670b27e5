"""The continued-learning contract's schema and the one contract view the adaptive drivers use
(`job_contract`, typed terms like `Contract.terms`), apart from kit/adaptive/continued.py so that selection,
training and evaluation can read a continued job's contract without importing its preparation (no import cycle).
"""

from __future__ import annotations

from kit.adaptive.schema import SCHEMA as ADAPTIVE_SCHEMA
from kit.adaptive.schema import load_adaptive_contract, training_schema
from kit.contract import SEED, ContractError, MapOf, Num, OneOf, Opt, Seq, load_contract, parse
from kit.data.tasks import FAMILIES

KIND = "continued-learning"
PREPARED_FORMAT = "kit.continued.prepared/1"
COHORT = "C"
ROLES = ("C.new", "C.replay", "dev.tasks", "dev.retention", "final.tasks", "final.retention")
GENERATED_MIN_NET_GAINED = 1  # "generated-answer improvement": at least one more correct case, net
RETENTION_UPPER_AT_MOST = 0.02
_COUNTS = {"new": Num(1, integer=True), "replay_conv": Num(1, integer=True)}

SCHEMA = {
    "kind": OneOf(KIND),
    "version": OneOf(1),
    "scale": OneOf("full", "tiny"),
    "description": str,
    "start": {"from": OneOf("A.endpoint"), "contract_kind": OneOf("adaptive-shards"), "contract_digest": Opt(str),
              "comparison": str, "gates_must_pass": OneOf(True), "exploratory": bool},
    "growth": OneOf("forbidden"),
    "data_seeds": {"tasks": SEED, "selection": SEED, "schedule": SEED},
    "tasks": {"families": Seq(OneOf(*FAMILIES), min_len=1), "difficulty": Num(1, 3, integer=True)},
    "cohort": {"name": OneOf(COHORT), "updates": Num(1, integer=True), "documents_per_update": Num(1, integer=True),
               "workers": Num(1, integer=True), "reference": OneOf("start"), "replay_every_update": OneOf(True),
               "per_update": _COUNTS, "totals": _COUNTS},
    "training": training_schema(("default",)),
    "evaluation": {
        "dev": {"tasks": Num(1, integer=True), "retention": Num(1, integer=True)},
        "final": {
            "tasks": Num(1, integer=True),
            "excluded": OneOf("the exposure ledger and every record of the start job"),
            "retention": {"source_name": str, "sha256": str, "start": Num(0, integer=True), "stop": Num(1, integer=True),
                          "count": Num(1, integer=True),
                          "exclusion_rules": Seq(OneOf("prompt_exact", "prompt_normalized", "document_normalized")),
                          "excluded_against": OneOf("every prepared training and development record")},
        },
        "max_new_tokens": Num(1, integer=True),
    },
    "gates": {"primary": OneOf("generated"), "generated_min_net_gained": OneOf(GENERATED_MIN_NET_GAINED),
              "retention_upper_at_most": OneOf(RETENTION_UPPER_AT_MOST), "gain": OneOf("reported, not a gate"),
              "unit": OneOf("nats per assistant token"),
              "bound": OneOf("one-sided upper, paired bootstrap over examples")},
    "bootstrap": {"resamples": Num(100, integer=True), "seed": SEED, "confidence": OneOf(0.95)},
    "comparisons": MapOf({"cohort": OneOf(COHORT), "grown": OneOf(False), "baseline": OneOf("start")}),
}


class ContinuedRefused(ValueError):
    """Continued-learning preparation refused; the message names the file, the field and what was expected."""


def _fail(source: str, field: str, value, expected: str) -> None:
    raise ContractError(f"{source}: field {field!r} = {value!r}; expected {expected}")


def load_continued_contract(path):
    contract = load_contract(path, SCHEMA, KIND)
    c, source = contract.terms, str(contract.path)
    k = c.cohort
    for part in ("new", "replay_conv"):
        if getattr(k.totals, part) != k.updates * getattr(k.per_update, part):
            _fail(source, f"cohort.totals.{part}", getattr(k.totals, part),
                  f"updates x per_update.{part} = {k.updates * getattr(k.per_update, part)}")
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


_ORDER = Seq(str, min_len=2)
ADAPTIVE_JOB_VIEW = {**ADAPTIVE_SCHEMA, "cohort_order": _ORDER, "endpoints": MapOf(Num(1, integer=True)),
                     "cohorts": MapOf(ADAPTIVE_SCHEMA["cohorts"]["A"])}
CONTINUED_JOB_VIEW = {
    **SCHEMA, "cohort_order": _ORDER,
    "endpoints": MapOf(Num(1, integer=True)),
    "growth": {"add_blocks": OneOf(0), "cohort": Opt(str)},
    "cohorts": MapOf({"documents_per_update": Num(1, integer=True)}),
    "seed": {"parameter_digest": Opt(str), "description": str},
    "start_step": Num(0, integer=True),
}


def adaptive_job_terms(data: dict):
    """The job view of a loaded adaptive contract's JSON (`Contract.data`): its terms and `cohort_order` A, B."""
    return parse({**data, "cohort_order": ["A", "B"]}, ADAPTIVE_JOB_VIEW, "adaptive-shards-job")


def job_contract(pj: dict):
    """The contract of a prepared job (adaptive or continued), as one typed view for the drivers
    (`kit.contract.parse`: attributes, frozen): the contract's fields plus `cohort_order` (the cohort a
    cohort continues precedes it), `endpoints`, `growth.add_blocks`, `seed.parameter_digest`, and for a
    continued job `start_step`. The contract file must still have the digest prepared.json records."""
    kind = pj["contract"].get("kind")
    contract = (load_continued_contract if kind == KIND else load_adaptive_contract)(pj["locations"]["contract"])
    if contract.digest != pj["contract"]["digest"]:
        raise ContractError(f"{contract.path}: contract digest {contract.digest}; prepared.json field "
                            f"'contract.digest' expects {pj['contract']['digest']}")
    if kind != KIND:
        return adaptive_job_terms(contract.data)
    c = contract.terms
    view = {**contract.data, "cohort_order": ["A", COHORT],
            "endpoints": {"A": pj["start"]["cursor"]["cohort_step"], COHORT: c.cohort.updates},
            "growth": {"add_blocks": 0, "cohort": None},
            "cohorts": {COHORT: {"documents_per_update": c.cohort.documents_per_update}},
            "seed": {"parameter_digest": pj["seed"]["parameter_digest"], "description": "the start job's seed"},
            "start_step": pj["start"]["cursor"]["step"]}
    return parse(view, CONTINUED_JOB_VIEW, "continued-learning-job")
