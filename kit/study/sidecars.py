"""The metric sidecars the gradient-study notebooks record, each computed here from what run_arm,
evaluate_study and build_screens return, so a notebook cell is one call and a display. The report
draws the same sidecars (kit.evidence.report). Each set is declared (kit.study.formats: ArmSidecars and the
rows below it) and written as its `to_json()`; a function given the JSON a notebook holds (notebooks 20 and 21
pass what kit.run_arm, kit.evaluate_study and kit.study_screens return) reads it as its declared record first.
"""

from __future__ import annotations

from pathlib import Path

from kit.evidence.report.sidecar_formats import TaskChange
from kit.study.arms import arm_dir, attempt_records
from kit.study.formats import (
    ArmRecord,
    ArmSidecars,
    CostArmSidecar,
    CostTotal,
    FamilyAccuracySidecar,
    FrozenArmSidecar,
    LossCurveRow,
    RankColumns,
    RankTraffic,
    StudyScores,
    StudyScreens,
)


def arm_sidecars(record: ArmRecord | dict) -> dict:
    """What an arm's record holds, as sidecars: "projection", "loss_curves" (per update: objective,
    gradient norm, clip factor, seconds, gradient bytes), "measurement", "cost", "traffic_per_rank"
    (each rank's logical traffic) and, for PowerSGD, "powersgd_columns" (each rank's
    dead and re-drawn column counters); a part the arm did not produce is left out. `record`: the arm record, or
    its JSON (what kit.run_arm returns)."""
    rec = record if isinstance(record, ArmRecord) else ArmRecord.from_json(record, "the arm record")
    traffic = rec.traffic
    logical = traffic.logical_per_rank if traffic else None
    compressors = traffic.powersgd_per_rank if traffic else None
    return ArmSidecars(
        projection=rec.projection,
        loss_curves=tuple(LossCurveRow.of(u) for u in rec.updates or ()) or None,
        measurement=rec.measurement, cost=rec.cost,
        traffic_per_rank=tuple(RankTraffic.of(rank, t) for rank, t in enumerate(logical)) if logical else None,
        # absent in records made before the dead-column counters
        powersgd_columns=tuple(RankColumns.of(rank, c.columns) for rank, c in enumerate(compressors)
                               if c.columns is not None)
        if compressors and all(c.columns is not None for c in compressors) else None,
    ).to_json()


def frozen_arms(scored: StudyScores | dict) -> dict:
    """The `frozen_arms` sidecar: per arm, the status it was frozen with and its endpoint's full root. `scored`:
    what evaluate_study returns (or its JSON)."""
    s = scored if isinstance(scored, StudyScores) else StudyScores.from_json(scored, "the study's scores")
    return {a.arm: FrozenArmSidecar(status=a.status, reason=a.reason,
                                    endpoint=a.endpoint.full_root if a.endpoint else None).to_json()
            for a in s.frozen_arms}


def _screens(screens: StudyScreens | dict) -> StudyScreens:
    return screens if isinstance(screens, StudyScreens) else StudyScreens.from_json(screens, "screens.json")


def screens_sidecars(screens: StudyScreens | dict) -> dict:
    """The screens as sidecars: "screen_<name>" per screen, "accuracy_by_family" (one row per model and
    family), "paired_task_change" (per arm and reference, with the noninferiority lower bound) and
    "retention_change". `screens`: screens.json, as build_screens returns it."""
    s = _screens(screens)
    return {
        "screen_quality": s.screens.quality.to_json(), "screen_speed": s.screens.speed.to_json(),
        "accuracy_by_family": [FamilyAccuracySidecar(model=label, family=row.family, n=row.n, correct=row.correct,
                                                     accuracy=row.accuracy).to_json()
                               for label, rows in s.accuracy_by_family.items() for row in rows],
        "paired_task_change": {
            f"{arm} vs {ref}": TaskChange(
                n=ch.n, candidate_correct=ch.candidate_correct, reference_correct=ch.reference_correct,
                difference=ch.difference, gained=ch.gained, lost=ch.lost, net=ch.net,
                noninferiority_lower=ch.noninferiority.lower).to_json()
            for arm, refs in s.paired_task_change.items() for ref, ch in refs.items()},
        "retention_change": {arm: r.to_json() for arm, r in s.retention_change.items()},
    }


def cost_sidecars(screens: StudyScreens | dict) -> dict:
    """{"arms": per arm its status, measurement and rank 0's logical bytes sent, "cost": the cost table's
    rows, "cost_total": its total against the contract's bound}. `screens`: as `screens_sidecars`."""
    s = _screens(screens)
    arms = []
    for a in s.arms:
        m, t = a.measurement, a.logical_traffic_rank0
        arms.append(CostArmSidecar(
            arm=a.arm, workers=a.workers, reduction=a.reduction, status=a.status, reason=a.reason,
            attempts=a.attempts, active_tokens_per_s=m.active_tokens_per_s if m else None,
            wall_seconds=m.wall_seconds if m else None, active_seconds=m.active_seconds if m else None,
            gpu_seconds_per_update=m.gpu_seconds_per_update if m else None,
            sent_bytes_rank0=t.sent_bytes_total if t else None).to_json())
    return {"arms": arms, "cost": [r.to_json() for r in s.cost.rows],
            "cost_total": CostTotal(total_usd=s.cost.total_usd, bound_usd=s.cost.bound_usd,
                                    within_bound=s.cost.within_bound).to_json()}


# --- the run inspection's view of an arm's store (kit/evidence/inspect.py, StoreReader) -----------------
def store_curves(params: dict) -> tuple[list, str] | None:
    """The last attempt's per-update rows of the arm a run's parameters name (STUDY_DIR, ARM, REPLICATE),
    when the study folder is on this machine."""
    if not (params.get("STUDY_DIR") and (Path(params["STUDY_DIR"]) / "arms").is_dir()):
        return None

    arm = params.get("ARM", "single")
    replicate = int(params.get("REPLICATE", 0))
    attempts = attempt_records(params["STUDY_DIR"], arm, replicate)
    rows = [LossCurveRow.of(u).to_json() for u in (attempts[-1].updates if attempts else None) or ()]
    home = store_home(params)
    assert home is not None, "STUDY_DIR is set (checked above)"
    return rows, home


def store_home(params: dict) -> str | None:
    if not params.get("STUDY_DIR"):
        return None

    return str(arm_dir(params["STUDY_DIR"], params.get("ARM", "single"), int(params.get("REPLICATE", 0))) / "home")
