"""Evaluation of the study's candidates and the quality and speed screens, written to one JSON per study.

The decision to know: all candidates are committed before any test scoring. `freeze_candidates`
refuses until every arm has a committed endpoint or a recorded non-run status, re-verifies every
endpoint and writes `evaluation/freeze.json`, after which no arm may run; only then does
`evaluate_study` score. `build_screens` aggregates accuracies, paired changes, the retention bound
and the screens (pure functions of the contract's thresholds).
Screens and the retention bound: docs/study.md and the notes below.

Notes: the screens' rules and the retention bound.

The order is the seed document's (seeds/004: "all candidates must be committed before any test scoring"); after
freeze.json kit/study/arms.py refuses to run, and every opening is appended to `opened.jsonl`.
- quality: task gain >= min_task_gain (ratios of counts compared with a 1e-12 tolerance, so 0.6 - 0.5 counts as the
  0.10 it is); retention upper bound <= max_retention_upper_nats; noninferiority to every control: mean paired
  difference - multiplier x sd / sqrt(n) > -margin. speed: active throughput ratio >= min_speedup.
- retention: R = sum(d_i) / sum(t_i) (d_i a probe's NLL change, t_i its assistant tokens); its bound is the
  delta-method one, kit/stats.normal_upper_bound on z_i = R + (d_i - R t_i) / mean(t): mean(z) = R exactly and
  sd(z) / sqrt(n) is the ratio's linearised standard error.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np

from kit.adaptive.formats import GainedLost
from kit.data.chat import load_tokenizer
from kit.data.conversations import read_jsonl
from kit.digest import canonical_json, load_json_strict, sha256_file, write_canonical_json
from kit.evaluation.scoring import answer_tasks, eval_batch_sizes, load_model, score_nll
from kit.evidence.dev_evaluation_format import ProbeScore, TaskScore
from kit.evidence.ledger import ledger_path, record_exposures
from kit.evidence.report.sidecar_formats import (
    NotCompletedArm,
    QualityInputs,
    QualityThresholds,
    RetentionChange,
    ScreenQuality,
    ScreenSpeed,
    SharedGpuArm,
    SpeedInputs,
    SpeedThresholds,
)
from kit.stats import accuracy_by_family, gained_lost, normal_noninferiority, ratio_change_normal_upper
from kit.store import commits
from kit.study.arms import FREEZE_FILE, NON_RUN, arm_record, arm_statuses, attempt_records
from kit.study.cost import ArmCosts, cost_table
from kit.study.formats import (
    Endpoint,
    FamilyAccuracyRow,
    FamilyDifference,
    Freeze,
    FrozenArm,
    ModelScores,
    Noninferiority,
    PairedChange,
    ScreenArm,
    Screens,
    StudyScores,
    StudyScreens,
    plain,
    with_nulls,
)
from kit.study.prepare import PREPARED_DIR, check_seed, load_prepared_job

SCREENS_FORMAT = "kit.study.screens/1"
EVAL_FORMAT = "kit.study.evaluation/1"
GAIN_TOLERANCE = 1e-12
NOT_EVALUABLE = "not evaluable"


class EvaluationRefused(ValueError):
    pass


# --- the scoring adapter (kit/evaluation/scoring.py) --------------------------------------------------
def _scorer():
    return load_model, score_nll, answer_tasks


# --- freeze and score -----------------------------------------------------------------------
def freeze_candidates(study_dir: str | os.PathLike) -> Freeze:
    """Refuse unless every arm is settled; verify every endpoint; write (or re-check) freeze.json."""
    study_dir = Path(study_dir)
    _, contract, prepared_digest = load_prepared_job(study_dir)
    statuses = arm_statuses(study_dir, contract.terms)
    unsettled = [s for s in statuses if s.status not in NON_RUN and not (s.status == "completed" and s.endpoint)]
    if unsettled:
        raise EvaluationRefused(
            "final-test scoring refused: every arm the contract lists needs a committed endpoint or a recorded "
            "non-run status first; " + ", ".join(f"arm {s.arm!r} is {s.status!r}" for s in unsettled))
    for s in statuses:
        if s.status == "completed" and s.endpoint:
            commits.verify_commit(s.endpoint.home, s.endpoint.full_root)
    arms = tuple(FrozenArm(arm=s.arm, status=s.status, reason=s.reason, endpoint=s.endpoint) for s in statuses)
    path = study_dir / FREEZE_FILE
    if path.exists():
        old = Freeze.from_json(load_json_strict(path), str(path))
        if (old.contract_digest, old.prepared_digest, old.arms) != (contract.digest, prepared_digest, arms):
            raise EvaluationRefused(f"{path}: the arms changed since the candidates were frozen")
        return old
    path.parent.mkdir(parents=True, exist_ok=True)
    write_canonical_json(path, Freeze(format=Freeze.FORMAT, contract_digest=contract.digest,
                                      prepared_digest=prepared_digest, arms=arms, frozen_at=time.time()).to_json())
    return Freeze.from_json(load_json_strict(path), str(path))


def evaluate_study(study_dir: str | os.PathLike, seed_dir: str | os.PathLike, device: str = "cpu") -> dict:
    """`score_study`'s result as its JSON (notebook 21, through kit.evaluate_study, reads it as a dict)."""
    return score_study(study_dir, seed_dir, device).to_json()


def score_study(study_dir: str | os.PathLike, seed_dir: str | os.PathLike, device: str = "cpu") -> StudyScores:
    """Score the seed and every completed endpoint on the final tasks and retention probes."""
    study_dir = Path(study_dir)
    freeze = freeze_candidates(study_dir)
    prepared, contract, _ = load_prepared_job(study_dir)
    check_seed(prepared, seed_dir)
    load_model, score_nll, answer_tasks = _scorer()
    tokenizer = load_tokenizer(seed_dir)
    final = read_jsonl(study_dir / PREPARED_DIR / "final_tasks.jsonl")
    retention = read_jsonl(study_dir / PREPARED_DIR / "retention.jsonl")
    ev = contract.terms.evaluation
    # (label, its source as the model file records it, its endpoint: None for the seed)
    models: list[tuple[str, dict, Endpoint | None]] = [
        ("seed", {"seed_dir": str(seed_dir), "parameter_digest": prepared.seed.parameter_digest}, None)]
    models += [(a.arm, {"home": a.endpoint.home, "full_root": a.endpoint.full_root}, a.endpoint)
               for a in freeze.arms if a.status == "completed" and a.endpoint]
    out_dir = study_dir / "evaluation" / "models"
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(study_dir / "evaluation" / "opened.jsonl", "ab") as log:
        log.write(canonical_json({"at": time.time(), "roles": ["final_tasks", "retention"],
                                  "models": [m[0] for m in models]}) + b"\n")

    record_exposures(final, retention, contract.digest, sha256_file(study_dir / PREPARED_DIR / "prepared.json"),
                     f"study final scoring of {', '.join(m[0] for m in models)}", retention_kind="retention.probe",
                     path=ledger_path(study_dir, prepared.ledger.path if prepared.ledger else None))
    written = {}
    for label, source, endpoint in models:
        path = out_dir / f"{label}.json"
        if path.exists() and plain(ModelScores.from_json(load_json_strict(path), str(path)).source) == source:
            written[label] = str(path)  # scoring is deterministic: a rerun reuses it
            continue
        t0 = time.perf_counter()
        model = (load_model(seed_dir=str(seed_dir), device=device) if endpoint is None
                 else load_model(home=endpoint.home, root=endpoint.full_root, device=device))
        # CPU: the contract's batch sizes, as before; CUDA: larger batches (same per-row math)

        nll_batch, answer_batch = (ev.batch_size, 32) if device == "cpu" else eval_batch_sizes(device)
        tasks = answer_tasks(model, tokenizer, final, ev.max_new_tokens, batch_size=answer_batch)
        nll = score_nll(model, tokenizer, retention, contract.terms.data.max_tokens, batch_size=nll_batch)
        rec = ModelScores(format=EVAL_FORMAT, label=label, source=source,
                          tasks=tuple(TaskScore.from_json(t, f"{label}'s answer {i}") for i, t in enumerate(tasks)),
                          retention=tuple(ProbeScore.from_json(r, f"{label}'s probe {i}") for i, r in enumerate(nll)),
                          seconds=time.perf_counter() - t0, device=device if device != "cpu" else None)
        write_canonical_json(path, rec.to_json())
        written[label] = str(path)
        del model
    return StudyScores(models=written, frozen_arms=freeze.arms)


# --- pure statistics and screens ------------------------------------------------------------
class _Scored(Protocol):
    @property
    def id(self) -> str: ...


S = TypeVar("S", bound=_Scored)


def _aligned(cand: Sequence[S], ref: Sequence[S], what: str) -> tuple[Sequence[S], list[S]]:
    by_id = {r.id: r for r in ref}
    if set(by_id) != {r.id for r in cand} or len(by_id) != len(cand):
        raise ValueError(f"{what}: candidate and reference rows cover different example ids")
    return cand, [by_id[r.id] for r in cand]


def paired_task_change(cand: Sequence[TaskScore], ref: Sequence[TaskScore], margin: float,
                       multiplier: float) -> PairedChange:
    """Accuracy of both, difference overall and by family, gained/lost and the noninferiority bound."""
    cand, ref = _aligned(cand, ref, "paired task change")
    a = np.array([bool(r.correct) for r in cand])
    b = np.array([bool(r.correct) for r in ref])
    by_family = {}
    for fam in sorted({r.family for r in cand}):
        idx = np.array([r.family == fam for r in cand])
        by_family[fam] = FamilyDifference(n=int(idx.sum()), difference=float(a[idx].mean() - b[idx].mean()))
    changed = GainedLost.from_json(gained_lost(a, b), "kit.stats.gained_lost")
    return PairedChange(n=int(a.size), candidate_correct=int(a.sum()), reference_correct=int(b.sum()),
                        difference=(int(a.sum()) - int(b.sum())) / a.size, by_family=by_family,
                        gained=changed.gained, lost=changed.lost, net=changed.net,
                        noninferiority=Noninferiority.from_json(normal_noninferiority(a, b, margin, multiplier),
                                                                "kit.stats.normal_noninferiority"))


def retention_change(cand: Sequence[ProbeScore], base: Sequence[ProbeScore], multiplier: float) -> RetentionChange:
    """Token-weighted NLL change per assistant token and its delta-method normal upper bound."""
    cand, base = _aligned(cand, base, "retention change")
    bad = [c.id for c, b in zip(cand, base) if c.tokens != b.tokens]
    if bad:
        raise ValueError(f"retention change: probe {bad[0]!r} has different token counts for candidate and base")
    d = np.array([c.nll_sum - b.nll_sum for c, b in zip(cand, base)], dtype=np.float64)
    t = np.array([c.tokens for c in cand], dtype=np.float64)
    ratio, upper = ratio_change_normal_upper(d, t, multiplier)
    return RetentionChange(n=int(d.size), tokens=int(t.sum()), change_nats_per_token=ratio, upper=upper,
                           multiplier=multiplier, rule="upper = R + multiplier x sd(z) / sqrt(n), z_i = R + (d_i - "
                           "R t_i) / mean(t) (delta method for the ratio R = sum d / sum t)")


def quality_screen(task_gain: float | None, retention_upper: float | None,
                   noninferiority_lower: dict[str, float | None], screens) -> ScreenQuality:
    """Pass only when every input is present and meets its threshold (`screens`: the contract terms' section);
    missing inputs: not evaluable."""
    margin = screens.noninferiority_margin
    checks = {
        "task_gain": None if task_gain is None else task_gain + GAIN_TOLERANCE >= screens.min_task_gain,
        "retention": None if retention_upper is None else retention_upper <= screens.max_retention_upper_nats,
        **{f"noninferior_to_{c}": None if lo is None else lo > -margin for c, lo in noninferiority_lower.items()},
    }
    missing = sorted(k for k, v in checks.items() if v is None)
    verdict = NOT_EVALUABLE if missing else ("pass" if all(checks.values()) else "fail")
    return ScreenQuality(
        name="quality", verdict=verdict, checks=checks, missing_inputs=tuple(missing),
        inputs=QualityInputs(task_gain=task_gain, retention_upper=retention_upper,
                             noninferiority_lower=noninferiority_lower),
        thresholds=QualityThresholds(min_task_gain=screens.min_task_gain,
                                     max_retention_upper_nats=screens.max_retention_upper_nats,
                                     noninferiority_margin=margin, normal_multiplier=screens.normal_multiplier),
        rule="task_gain >= min_task_gain (1e-12 tolerance) and retention_upper <= max_retention_upper_nats "
             "and, for every control, noninferiority lower bound > -margin")


def shared_gpus_reason(shared: dict[str, SharedGpuArm]) -> str:
    """Why the speed screen is not measured when arms' workers shared GPUs (their arm records'
    `shared_gpus`): a pair sharing one GPU time-slices it, so its throughput is not the method's."""
    gpus = {s.gpus for s in shared.values()}
    where = "one GPU" if gpus == {1} else "shared GPUs"
    arms = "; ".join(f"arm {arm!r}: {s.workers} workers shared {s.gpus} GPU(s) over {s.transport}"
                     for arm, s in shared.items())
    return f"not measured: {where} ({arms}; throughput is not the method's)"


def speed_screen(candidate_tokens_per_s: float | None, baseline_tokens_per_s: float | None, screens,
                 shared_gpus: dict[str, SharedGpuArm | None] | None = None) -> ScreenSpeed:
    """Candidate over baseline active throughput against min_speedup (`screens`: the contract terms'
    section). `shared_gpus`: the candidate's and
    the baseline's arm records' `shared_gpus` by arm; when either shared GPUs the verdict is not
    evaluable with that `reason` (their throughputs stay in `inputs`: they are what ran). Its JSON writes
    `reason` also when null (`screen_json`)."""
    shared = {arm: s for arm, s in (shared_gpus or {}).items() if s}
    ratio, reason = None, None
    if shared:
        reason = shared_gpus_reason(shared)
    elif candidate_tokens_per_s is not None and baseline_tokens_per_s:
        ratio = candidate_tokens_per_s / baseline_tokens_per_s
    else:
        reason = "not measured: the candidate's or the baseline's throughput is missing (see arms_not_completed)"
    verdict = NOT_EVALUABLE if ratio is None else ("pass" if ratio >= screens.min_speedup else "fail")
    return ScreenSpeed(
        name="speed", verdict=verdict, ratio=ratio, reason=reason, shared_gpus=shared,
        inputs=SpeedInputs(candidate_active_tokens_per_s=candidate_tokens_per_s,
                           baseline_active_tokens_per_s=baseline_tokens_per_s),
        thresholds=SpeedThresholds(min_speedup=screens.min_speedup),
        rule="candidate active throughput / baseline active throughput >= min_speedup; GPU time and cost "
             "are reported beside it, not in it")


# --- the study JSON -------------------------------------------------------------------------
def _accuracy(scores: ModelScores) -> tuple[FamilyAccuracyRow, ...]:
    """The model's accuracy by family (kit.stats.accuracy_by_family's table, one record a row)."""
    frame = accuracy_by_family([t.to_json() for t in scores.tasks])
    return tuple(FamilyAccuracyRow.from_json({k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()},
                                          f"accuracy by family of {scores.label}")
                 for row in frame.to_dict("records"))


def build_screens(study_dir: str | os.PathLike) -> dict:
    """`write_screens`' result as its JSON (notebook 21, through kit.study_screens, reads it as a dict)."""
    return write_screens(study_dir).to_json()


def write_screens(study_dir: str | os.PathLike) -> StudyScreens:
    """Aggregate every arm's record and every model's scores into STUDY/screens.json."""
    study_dir = Path(study_dir)
    prepared, contract, prepared_digest = load_prepared_job(study_dir)
    freeze_path = study_dir / FREEZE_FILE
    if not freeze_path.exists():
        raise EvaluationRefused(f"{freeze_path}: not found; run `kit study evaluate` first")
    terms = contract.terms
    statuses = arm_statuses(study_dir, terms)
    records = {s.arm: arm_record(study_dir, s.arm) for s in statuses}
    sc = terms.screens
    k, margin = sc.normal_multiplier, sc.noninferiority_margin
    evals: dict[str, ModelScores] = {}  # by label: "seed" and each completed arm
    for label in ["seed"] + [s.arm for s in statuses if s.status == "completed"]:
        path = study_dir / "evaluation" / "models" / f"{label}.json"
        if not path.exists():
            raise EvaluationRefused(f"{path}: not found; `kit study evaluate` has not scored {label!r}")
        evals[label] = ModelScores.from_json(load_json_strict(path), str(path))
    accuracy = {label: _accuracy(e) for label, e in evals.items()}
    paired: dict[str, dict[str, PairedChange]] = {}
    retention: dict[str, RetentionChange] = {}
    seed = evals["seed"]
    for arm, scores in evals.items():
        if arm == "seed":
            continue
        paired[arm] = {ref: paired_task_change(scores.tasks, evals[ref].tasks, margin, k)
                       for ref in ["seed", *sc.controls, sc.candidate] if ref in evals and ref != arm}
        retention[arm] = retention_change(scores.retention, seed.retention, k)
    cand = sc.candidate
    cand_paired = paired.get(cand, {})
    cand_retention = retention.get(cand)
    quality = quality_screen(
        cand_paired["seed"].difference if "seed" in cand_paired else None,
        cand_retention.upper if cand_retention is not None else None,
        {c: cand_paired[c].noninferiority.lower if c in cand_paired else None for c in sc.controls}, sc)

    def tput(arm: str) -> float | None:
        rec = records.get(arm)
        return rec.measurement.active_tokens_per_s if rec and rec.measurement and rec.status == "completed" \
            else None

    def shared(arm: str) -> SharedGpuArm | None:
        rec = records.get(arm)
        return rec.shared_gpus if rec else None

    speed = speed_screen(tput(cand), tput(sc.speed_baseline), sc, {a: shared(a) for a in (cand, sc.speed_baseline)})

    def not_completed(needs: list[str]) -> tuple[NotCompletedArm, ...]:
        return tuple(NotCompletedArm(arm=s.arm, status=s.status, reason=s.reason)
                     for s in statuses if s.arm in needs and s.status != "completed")

    arm_rows = []
    for s in statuses:
        rec = records.get(s.arm)
        traffic = rec.traffic if rec else None
        # every row writes its `shared_gpus`, null where none were shared
        arm_rows.append(with_nulls(ScreenArm(
            arm=s.arm, workers=s.workers, reduction=s.reduction, status=s.status, reason=s.reason,
            endpoint=s.endpoint, attempts=s.attempts, replicas_equal=rec.replicas_equal if rec else None,
            projection=rec.projection if rec else None, measurement=rec.measurement if rec else None,
            shared_gpus=shared(s.arm),
            logical_traffic_rank0=traffic.logical_per_rank[0] if traffic and traffic.logical_per_rank else None,
            interfaces=traffic.interfaces if traffic else None), "shared_gpus"))
    out = StudyScreens(
        format=SCREENS_FORMAT, contract_digest=contract.digest, prepared_digest=prepared_digest,
        study=terms.name, candidate=cand, controls=tuple(sc.controls), arms=tuple(arm_rows),
        accuracy_by_family=accuracy, paired_task_change=paired, retention_change=retention,
        screens=Screens(quality=replace(quality, arms_not_completed=not_completed([cand, *sc.controls])),
                        # the speed screen writes its `reason`, null when measured
                        speed=with_nulls(replace(speed, arms_not_completed=not_completed([cand, sc.speed_baseline])),
                                         "reason")),
        cost=cost_table(terms, [ArmCosts(arm=s.arm, status=s.status, reason=s.reason,
                                         costs=tuple(a.cost for a in attempt_records(study_dir, s.arm)))
                                for s in statuses]),
        counts=prepared.counts, retention_probes_exposed=terms.data.retention.exposed)
    write_canonical_json(study_dir / "screens.json", out.to_json())
    return out
