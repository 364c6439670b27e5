"""Training noise as data: the between-replicate spread of the development scores, and each frozen verdict
read against it (the runs: campaigns/medium-replicates-plan.json; the notes in kit/replicates.py).

One call, from the run rows of `kit.evidence.run_index.load_runs` (sidecars read from each row's dir/metrics/):

    spread = replicate_spread(load_runs("runs"), prefix="medium")

It returns {"format", "prefix", "rule", "arms", "comparisons", "noise_floor"}: per arm and per comparison the
mean and between-replicate sd of pooled and per-family development accuracy and of the NLL change, and the
dense-vs-single comparison as the noise floor. Descriptive only: what the replicates say about each question
(t intervals with k - 1 df, readings) is kit/evidence/replicate_analysis.py's; no final effect is read against
these development spreads. Fields: the function.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.digest import load_json_strict
from kit.record import MapOf, Record, Seq, spec_field

PLAN_FORMAT = "kit-replicate-plan/1"
SPREAD_FORMAT = "kit-replicate-spread/2"
RULE = ("descriptive: per arm and per paired comparison the development values of each replicate, their mean and "
        "their sd (ddof 1); inference is kit.evidence.replicate_analysis's (t intervals with k - 1 df)")
STUDY_ARMS = ("single", "dense", "powersgd")
_SUFFIX = re.compile(r"-r(\d+)$")


def _stat(values: list[float]) -> dict:
    n = len(values)
    mean = sum(values) / n if n else None
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n >= 2 and mean is not None else None
    return {"values": values, "n": n, "mean": mean, "sd": sd}


def _sidecar(row: dict, name: str) -> dict | None:
    path = Path(row["dir"]) / "metrics" / f"{name}.json"
    return load_json_strict(path) if path.is_file() else None


def replicate_of(row: dict) -> int:
    """A run's replicate index (`replicate_number`) from its row as JSON (load_runs' rows)."""
    return replicate_number(row["run_id"], row.get("parameters") or {})


def replicate_number(run_id: str, parameters: Mapping[str, Any]) -> int:
    """A run's replicate index: parameter REPLICATE, else the run id's `-r<k>` suffix, else 0."""
    value = parameters.get("REPLICATE")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    m = _SUFFIX.search(run_id)
    return int(m.group(1)) if m else 0


def _scores(row: dict, side: str, nll_sidecar: str) -> dict | None:
    """(pooled accuracy, per family, task and retention NLL change) of one side of a development scoring."""
    acc, nll = _sidecar(row, "accuracy_by_family"), _sidecar(row, nll_sidecar) or {}
    if not acc or "all" not in acc:
        return None

    def change(part):
        return (nll.get(part) or {}).get("change_nats_per_token")

    return {"pooled": acc["all"][f"accuracy_{side}"],
            "by_family": {f: v[f"accuracy_{side}"] for f, v in acc.items() if f != "all"},
            "task_nll_change": change("tasks"), "retention_nll_change": change("retention")}


def _arm_entry(by_k: dict[int, dict], runs: dict[int, str], nll: bool = True) -> dict:
    ks = sorted(by_k)
    families = sorted({f for s in by_k.values() for f in s["by_family"]})
    entry = {"replicates": ks, "runs": [runs[k] for k in ks],
             "pooled_accuracy": _stat([by_k[k]["pooled"] for k in ks]),
             "accuracy_by_family": {f: _stat([by_k[k]["by_family"][f] for k in ks if f in by_k[k]["by_family"]])
                                    for f in families}}
    if nll:
        for part in ("task_nll_change", "retention_nll_change"):
            entry[part] = _stat([by_k[k][part] for k in ks if by_k[k][part] is not None])
    return entry


def _collect(rows: list[dict], prefix: str) -> tuple[dict, dict, dict]:
    """{arm: {k: scores}}, {arm: {k: run id}}, {k: growth-vs-control effect scores} of the completed runs."""
    arms: dict[str, dict[int, dict]] = {}
    runs: dict[str, dict[int, str]] = {}
    growth: dict[int, dict] = {}
    study = re.compile(rf"^{re.escape(prefix)}-study-dev-({'|'.join(STUDY_ARMS)})-r\d+$")
    dev = re.compile(rf"^{re.escape(prefix)}-adaptive-dev-([BG])(-r\d+)?$")
    for row in rows:
        if row.get("status") != "completed":
            continue
        k = replicate_of(row)
        if m := study.match(row["run_id"]):
            s = _scores(row, "candidate", "nll_change")
            if s:
                arms.setdefault(f"study/{m.group(1)}", {})[k] = s
                runs.setdefault(f"study/{m.group(1)}", {})[k] = row["run_id"]
        elif m := dev.match(row["run_id"]):
            name = "B-control" if m.group(1) == "B" else "B-growth"
            s = _scores(row, "candidate", "nll_change_bounds")
            if s:
                arms.setdefault(f"adaptive/{name}", {})[k] = s
                runs.setdefault(f"adaptive/{name}", {})[k] = row["run_id"]
            if m.group(1) == "G" and s:
                base = _scores(row, "baseline", "nll_change_bounds")
                assert base is not None, "the scoring that gave the candidate's scores gives the baseline's"
                growth[k] = {**s, "difference": s["pooled"] - base["pooled"]}
    return arms, runs, growth


def replicate_spread(rows: list[dict], prefix: str = "medium") -> dict:
    """The spread of the replicates among `rows` (load_runs' rows).

    Counted: completed development scorings only, the study's notebook-22 runs `<prefix>-study-dev-<arm>-r<k>`
    (sidecars `accuracy_by_family`, `nll_change`) and the growth pair's notebook-13 runs
    `<prefix>-adaptive-dev-B[-r<k>]` and `-dev-G[-r<k>]` (`accuracy_by_family`, `nll_change_bounds`; the committed
    ones are replicate 0); the index is parameter REPLICATE, else the `-r<k>` suffix, else 0.
    Returned (accuracies as fractions, NLL changes in nats per assistant token), S = {"values", "n", "mean",
    "sd"} with sd between replicates (ddof 1; None below two values):
    - `arms`: {"study/<arm>" | "adaptive/B-control" | "adaptive/B-growth": {"replicates", "runs",
      "pooled_accuracy": S, "accuracy_by_family": {family: S}, "task_nll_change": S, "retention_nll_change": S}}
      (the study's changes against the seed, B's control's against A, the growth arm's against its control);
    - `comparisons`: {"study/<a> vs <b>": {"replicates", "accuracy_difference": S}, "adaptive/growth vs control":
      {..., "task_nll_change": S, "retention_nll_change": S}}, paired by replicate index;
    - `noise_floor`: comparisons["study/dense vs single"] (the same update in exact arithmetic) or None."""
    arms, runs, growth = _collect(rows, prefix)
    arm_stats = {name: _arm_entry(by_k, runs[name]) for name, by_k in sorted(arms.items())}
    comparisons = {}
    for i, a in enumerate(STUDY_ARMS):
        for b in STUDY_ARMS[:i]:
            ka, kb = arms.get(f"study/{a}", {}), arms.get(f"study/{b}", {})
            ks = sorted(set(ka) & set(kb))
            if ks:
                comparisons[f"study/{a} vs {b}"] = {
                    "replicates": ks, "accuracy_difference": _stat([ka[k]["pooled"] - kb[k]["pooled"] for k in ks])}
    if growth:
        ks = sorted(growth)
        comparisons["adaptive/growth vs control"] = {
            "replicates": ks, "accuracy_difference": _stat([growth[k]["difference"] for k in ks]),
            **{part: _stat([growth[k][part] for k in ks if growth[k][part] is not None])
               for part in ("task_nll_change", "retention_nll_change")}}
    return {"format": SPREAD_FORMAT, "prefix": prefix, "rule": RULE, "arms": arm_stats, "comparisons": comparisons,
            "noise_floor": comparisons.get("study/dense vs single")}


# -- the executed campaign's plan (campaigns/medium-replicates-plan.json, kit.replicates.campaign_plan() plus the
# fields written beside it; docs/formats/replicates.md, "Replicate plans, designs and analyses") ---------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class ContractSeed(Record):
    field: str = spec_field(str, doc="the contract's field the order seed derives from")
    value: int = spec_field(int, doc="its value")


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannedReplicate(Record):
    index: int = spec_field(int, doc="the replicate index")
    order_seed: int = spec_field(int, doc="kit.replicate_order.replicate_seed of the contract seed and index")
    runs: tuple[str, ...] = spec_field(Seq(str), doc="its training runs")
    dev_runs: tuple[str, ...] = spec_field(Seq(str), doc="their development scorings")


@dataclass(frozen=True, slots=True, kw_only=True)
class StudyPlan(Record):
    contract: str = spec_field(str, doc="the study contract")
    contract_digest: str = spec_field(str, doc="its digest")
    contract_seed: ContractSeed = spec_field(ContractSeed, doc="the seed the orders derive from")
    replicates: tuple[PlannedReplicate, ...] = spec_field(Seq(PlannedReplicate), doc="the replicates")
    committed: Mapping[str, str] = spec_field(MapOf(str), doc="arm -> the committed run")
    committed_order_dev_runs: tuple[str, ...] = spec_field(Seq(str), doc="the committed order's scorings")


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanStart(Record):
    runs: tuple[str, ...] = spec_field(Seq(str), doc="cohort A's endpoint re-derived")
    repeats: tuple[str, ...] = spec_field(Seq(str), doc="the committed runs they repeat")
    mode: str = spec_field(str, doc="their GPU mode, in words")


@dataclass(frozen=True, slots=True, kw_only=True)
class AdaptivePlan(Record):
    contract: str = spec_field(str, doc="the adaptive contract")
    contract_digest: str = spec_field(str, doc="its digest")
    contract_seed: ContractSeed = spec_field(ContractSeed, doc="the seed the orders derive from")
    start: PlanStart = spec_field(PlanStart, doc="what the growth pairs start from")
    replicates: tuple[PlannedReplicate, ...] = spec_field(Seq(PlannedReplicate), doc="the replicates")
    committed_dev_runs: Mapping[str, str] = spec_field(MapOf(str), doc="B, G -> the committed scorings")


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanLedger(Record):
    file: str = spec_field(str, doc="the ledger")
    entries: int = spec_field(int, doc="its first entries the preparations read")
    sha256: str = spec_field(str, doc="their sha256")
    carried: str = spec_field(str, doc="the copy carried to a host")
    make: str = spec_field(str, doc="the command that makes the copy")


@dataclass(frozen=True, slots=True, kw_only=True)
class CampaignInputs(Record):
    """What the re-derived inputs must equal (`kit.replicates.record_checks`)."""
    why: str = spec_field(str, doc="why they are re-derived, in words")
    ledger: PlanLedger = spec_field(PlanLedger, doc="the ledger prefix the preparations read")
    adaptive_job_digest: str = spec_field(str, doc="the adaptive job's digest")
    study_prepared_files: Mapping[str, str] = spec_field(MapOf(str), doc="the study's prepared file -> sha256")
    a_endpoint_roots: Mapping[str, str] = spec_field(MapOf(str), doc="cohort A's endpoint runs -> root")
    study_committed_roots: Mapping[str, str] = spec_field(MapOf(str), doc="the study arms' runs -> root")


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanBudget(Record):
    tracked_bytes_added_at_most: int = spec_field(int, doc="bytes the campaign may add to the repository")


@dataclass(frozen=True, slots=True, kw_only=True)
class CampaignPlan(Record):
    """The executed replicate campaign's plan (`kit-replicate-plan/1`)."""
    FORMAT = PLAN_FORMAT
    format: str = spec_field(str, doc=PLAN_FORMAT)
    scale: str = spec_field(str, doc="the demo scale")
    order_rule: str = spec_field(str, doc="kit.replicate_order.RULE")
    scoring_rule: str = spec_field(str, doc="kit.replicates.SCORING_RULE")
    study: StudyPlan = spec_field(StudyPlan, doc="the study's replicates")
    adaptive: AdaptivePlan = spec_field(AdaptivePlan, doc="the growth pairs' replicates")
    written: str = spec_field(str, doc="when and against what it was written")
    inputs: CampaignInputs = spec_field(CampaignInputs, doc="what the re-derived inputs must equal")
    modes: Mapping[str, str] = spec_field(MapOf(str), doc="part -> its GPU mode, in words")
    order_of_work: tuple[str, ...] = spec_field(Seq(str), doc="the parts in order, in words")
    budget: PlanBudget = spec_field(PlanBudget, doc="the repository's budget")
    amendments: tuple[str, ...] = spec_field(Seq(str), doc="dated sentences: what was added after a replicate ran")


def read_plan(path: str | Path) -> CampaignPlan:
    """A replicate plan file, checked against its declared class (a ContractError naming the file and field)."""
    return CampaignPlan.from_json(load_json_strict(path), str(path))
