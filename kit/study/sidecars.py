"""The metric sidecars the gradient-study notebooks record, each computed here from what run_arm,
evaluate_study and build_screens return, so a notebook cell is one call and a display. The report
draws the same sidecars (kit.evidence.report).
"""

from __future__ import annotations

from pathlib import Path

from kit.study.arms import arm_dir, attempt_records

CURVE_FIELDS = ("step", "objective", "grad_norm", "clip_factor", "seconds", "gradient_bytes")
MEASURED = ("active_tokens_per_s", "wall_seconds", "active_seconds", "gpu_seconds_per_update")
ARM_FIELDS = ("arm", "workers", "reduction", "status", "reason", "attempts")


def arm_sidecars(record: dict) -> dict:
    """What an arm's record holds, as sidecars: "projection", "loss_curves" (per update: objective,
    gradient norm, clip factor, seconds, gradient bytes), "measurement", "cost", "traffic_per_rank"
    (the scalar fields of each rank's logical traffic) and, for PowerSGD, "powersgd_columns" (each rank's
    dead and re-drawn column counters); a part the arm did not produce is left out."""
    out = {}
    if record["projection"]:
        out["projection"] = record["projection"]
    curves = [{k: u[k] for k in CURVE_FIELDS} for u in record["updates"] or []]
    if curves:
        out["loss_curves"] = curves
    if record["measurement"]:
        out["measurement"] = record["measurement"]
    if record["cost"]:
        out["cost"] = record["cost"]
    logical = (record["traffic"] or {}).get("logical_per_rank")
    if logical:
        out["traffic_per_rank"] = [{"rank": rank, **{k: v for k, v in t.items() if not isinstance(v, (list, dict))}}
                                   for rank, t in enumerate(logical)]
    compressors = (record["traffic"] or {}).get("powersgd_per_rank")
    if compressors and all("columns" in c for c in compressors):  # absent in records made before the dead-column counters
        out["powersgd_columns"] = [{"rank": rank, **c["columns"]} for rank, c in enumerate(compressors)]
    return out


def frozen_arms(scored: dict) -> dict:
    """The `frozen_arms` sidecar: per arm, the status it was frozen with and its endpoint's full root."""
    return {a["arm"]: {"status": a["status"], "reason": a["reason"], "endpoint": (a["endpoint"] or {}).get("full_root")}
            for a in scored["frozen_arms"]}


def screens_sidecars(screens: dict) -> dict:
    """The screens as sidecars: "screen_<name>" per screen, "accuracy_by_family" (one row per model and
    family), "paired_task_change" (per arm and reference, with the noninferiority lower bound) and
    "retention_change"."""
    out = {f"screen_{name}": screen for name, screen in screens["screens"].items()}
    out["accuracy_by_family"] = [{"model": label, **row} for label, rows in screens["accuracy_by_family"].items()
                                 for row in rows]
    out["paired_task_change"] = {
        f"{arm} vs {ref}": {**{k: v for k, v in ch.items() if k not in ("by_family", "noninferiority")},
                            "noninferiority_lower": ch["noninferiority"]["lower"]}
        for arm, refs in screens["paired_task_change"].items() for ref, ch in refs.items()}
    out["retention_change"] = screens["retention_change"]
    return out


def cost_sidecars(screens: dict) -> dict:
    """{"arms": per arm its status, measurement and rank 0's logical bytes sent, "cost": the cost table's
    rows, "cost_total": its total against the contract's bound}."""
    arms = [{**{k: a[k] for k in ARM_FIELDS}, **{k: (a["measurement"] or {}).get(k) for k in MEASURED},
             "sent_bytes_rank0": (a["logical_traffic_rank0"] or {}).get("sent_bytes_total")}
            for a in screens["arms"]]
    return {"arms": arms, "cost": screens["cost"]["rows"],
            "cost_total": {k: screens["cost"][k] for k in ("total_usd", "bound_usd", "within_bound")}}


# --- the run inspection's view of an arm's store (kit/evidence/inspect.py, StoreReader) -----------------
def store_curves(params: dict) -> tuple[list, str] | None:
    """The last attempt's per-update rows of the arm a run's parameters name (STUDY_DIR, ARM, REPLICATE),
    when the study folder is on this machine."""
    if not (params.get("STUDY_DIR") and (Path(params["STUDY_DIR"]) / "arms").is_dir()):
        return None

    arm = params.get("ARM", "single")
    replicate = int(params.get("REPLICATE", 0))
    attempts = attempt_records(params["STUDY_DIR"], arm, replicate)
    updates = [u.to_json() for u in (attempts[-1].updates if attempts else None) or ()]
    rows = [{k: u[k] for k in CURVE_FIELDS if k in u} for u in updates]
    home = store_home(params)
    assert home is not None, "STUDY_DIR is set (checked above)"
    return rows, home


def store_home(params: dict) -> str | None:
    if not params.get("STUDY_DIR"):
        return None

    return str(arm_dir(params["STUDY_DIR"], params.get("ARM", "single"), int(params.get("REPLICATE", 0))) / "home")
