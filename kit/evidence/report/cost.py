"""The study's cost, traffic and arm-against-arm retention as measured: per attempt the hardware,
GPU-seconds and logical and wire bytes; the contract's prices applied to what ran (a projection);
and PowerSGD against dense and single on the retention probes (reported, not gated).

Measured GPU time stays unpriced: no committed record names a price for the hardware that ran, so
the contract's prices (the seed's hosts) go only in the projection table. Wire traffic is what the
arms' interface counters recorded; where they show none it is "not measured on this host".
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from kit.digest import load_json_strict, sha256_file
from kit.evidence import run_record as records
from kit.evidence.report.index import IndexedRun, KeptRun, gpu_names, index, is_replicate, kept, metric
from kit.evidence.report.selection import Selected, Selection
from kit.evidence.run_index import evidence_folders, logical_path

GIB = 2 ** 30
NOT_MEASURED = "not measured on this host"
UNPRICED = "unpriced: no record names a rate for this hardware"
Z95 = 1.959963984540054  # two-sided 95% normal quantile


def arm_attempts(runs_dir) -> list[KeptRun]:
    """Every study arm run in the evidence, committed first, then the kept (superseded) ones."""
    committed = [KeptRun(r, None) for r in index(runs_dir).runs if r.parameters.get("ARM")
                 and not _replicate_scoring(r)]
    return committed + [k for k in kept(runs_dir) if k.run.parameters.get("ARM")]


def _hardware(row: IndexedRun) -> str:
    gpus = gpu_names(row)
    if gpus:
        return f"{gpus[0]} (a host of {len(gpus)})"
    return f"CPU ({row.device.get('cpu', 'unrecorded')})"


def screens_records(runs_dir) -> list[dict]:
    """screens.json files kept in the selection's evidence folders (the study folder of a campaign)."""
    out = []
    for d in evidence_folders(runs_dir):
        for p in sorted(d.rglob("screens.json")):
            if any(records.is_run_dir(q) for q in p.parents if d in q.parents or q == d):
                continue  # a run's own raw output (a benchmark's copy) speaks for that run only
            try:
                obj = load_json_strict(p)
            except ValueError:
                continue
            if isinstance(obj, dict) and isinstance(obj.get("arms"), list):
                out.append({**obj, "_path": p})
    return out


def _interfaces(runs_dir) -> dict[tuple, dict]:
    """Per (contract digest, arm), the non-loopback interface counters from a kept screens.json."""
    out = {}
    for s in screens_records(runs_dir):
        for a in s["arms"]:
            counters = (a.get("interfaces") or {}).get("non_loopback")
            if isinstance(counters, dict):
                out[(s.get("contract_digest"), a["arm"])] = counters
    return out


def _replicate_scoring(r: IndexedRun) -> bool:
    """A replicate's development scoring (notebook 22): it names an ARM but trains nothing."""
    return is_replicate(r) and "CANDIDATE" in r.parameters


def _kept_as(kept_in: str | None) -> str:
    """Where an attempt's record is kept: the committed run; a GPU replay of it or a repeat (a campaign folder's
    replay/ and repeat/, tools/compare_repeats.py), whose GPU time counts but which supersede nothing; else a
    superseded attempt."""
    if kept_in is None:
        return "committed"
    last = kept_in.rsplit("/", 1)[-1]
    return {"replay": f"GPU replay ({kept_in})", "repeat": f"repeat ({kept_in})"}.get(last, f"superseded ({kept_in})")


def measured_cost_rows(runs_dir) -> list[dict]:
    """One row per attempt; ratios against the single arm of the same contract and sitting (the committed
    runs, or the same superseded folder)."""
    attempts = arm_attempts(runs_dir)
    singles = {(a.run.contract_digest, a.kept_in): metric(a.run, "measurement") or {}
               for a in attempts if a.run.parameters["ARM"] == "single" and not is_replicate(a.run)}
    wires = _interfaces(runs_dir)
    rows = []
    for attempt in attempts:
        r = attempt.run
        arm = r.parameters["ARM"]
        single = singles.get((r.contract_digest, attempt.kept_in)) or {}
        m = metric(r, "measurement") or {}
        traffic = metric(r, "traffic_per_rank") or []
        logical: list[Any] = [t.get("sent_bytes_total") for t in traffic if isinstance(t, dict)]  # recorded JSON
        on_gpu = bool(gpu_names(r))
        # devices: the GPUs the workers used (fewer than the workers when they shared GPUs); records made
        # before `workers` was measured had one device per worker
        devices = m.get("devices")
        workers = m.get("workers", devices)
        gps = m.get("gpu_seconds_per_update") if on_gpu else None
        wire = wires.get((r.contract_digest, arm)) if attempt.kept_in is None else None
        wire_bytes = (wire["tx_bytes"] + wire["rx_bytes"]) if wire else None
        rows.append({
            "run": r.run_id, "arm": arm,
            "kept as": _kept_as(attempt.kept_in),
            "status": r.status, "hardware": _hardware(r), "workers": workers,
            "wall_s": m.get("wall_seconds"), "updates": m.get("updates"),
            "gpu_seconds": (m["wall_seconds"] * devices) if on_gpu and m.get("wall_seconds") and devices else None,
            "gpu_s_per_update": gps,
            "gpu_s_per_update_vs_single": (gps / single["gpu_seconds_per_update"])
            if gps and on_gpu and single.get("gpu_seconds_per_update") else None,
            "speed_vs_single": (m["active_tokens_per_s"] / single["active_tokens_per_s"])
            if m.get("active_tokens_per_s") and single.get("active_tokens_per_s") else None,
            "logical_sent_GiB_all_ranks": (sum(logical) / GIB) if logical else None,
            "wire_GiB": (wire_bytes / GIB) if wire_bytes else NOT_MEASURED,
            "interface counters": ("none kept for this attempt" if wire is None else
                                   f"{wire_bytes:,} non-loopback bytes (rx + tx)"),
            "cross_zone_billable_GiB": (wire_bytes / GIB) if wire_bytes else 0.0,
            "price": UNPRICED if on_gpu else "CPU: not priced",
        })
    return rows


def measured_totals(rows: list[dict]) -> dict:
    """GPU-seconds of every attempt that ran (superseded ones included), and how many attempts that is."""
    ran = [r for r in rows if r["gpu_seconds"] is not None]
    return {"attempts": len(rows), "attempts_on_gpu": len(ran),
            "gpu_seconds_all_attempts": sum(r["gpu_seconds"] for r in ran) if ran else None,
            "superseded_attempts": sum(1 for r in rows if r["kept as"].startswith("superseded"))}


def projection_cost_rows(runs_dir) -> list[dict]:
    """The arms' own cost sidecars: the contract's prices (the seed's hosts) applied to the measured
    wall time and to ring bytes estimated from logical bytes. What the trial would cost on those hosts;
    not what the measured runs cost."""
    rows = []
    for attempt in arm_attempts(runs_dir):
        c = metric(attempt.run, "cost")
        if isinstance(c, dict):
            rows.append({"run": attempt.run.run_id, "arm": attempt.run.parameters["ARM"],
                         "kept as": _kept_as(attempt.kept_in),
                         **{k: c.get(k) for k in ("gpu_hours", "gpu_cost_usd", "cross_zone_bytes",
                                                  "cross_zone_cost_usd", "total_usd")}})
    return rows


def _models_dir(runs_dir) -> Path | None:
    """The scored models beside the screens.json that a selected evaluation run recorded reading (by
    sha256): an evidence folder may also keep an earlier campaign's study, whose arms are other models."""
    recorded = {r.input_digests.get("screens.json") for r in index(runs_dir).runs} - {None}
    # newer evaluation records also pin each model file (input "evaluation/models/NAME.json")
    pinned = {k.rpartition("/")[2]: v for r in index(runs_dir).runs for k, v in r.input_digests.items()
              if k.startswith("evaluation/models/")}
    for s in screens_records(runs_dir):
        d = s["_path"].parent / "evaluation" / "models"
        if d.is_dir() and sha256_file(s["_path"]) in recorded and \
                all((d / name).is_file() and sha256_file(d / name) == digest for name, digest in pinned.items()):
            return d
    return None


def paired_retention(cand: list[dict], ref: list[dict]) -> dict:
    """Token-weighted NLL change per token of `cand` against `ref` on the same probes, with the
    delta-method normal two-sided 95% interval (kit.stats' construction, both sides)."""
    by_id = {x["id"]: x for x in ref}
    if {x["id"] for x in cand} != set(by_id):
        raise ValueError("paired retention: the two models were scored on different probes")
    d = np.array([c["nll_sum"] - by_id[c["id"]]["nll_sum"] for c in cand], dtype=np.float64)
    t = np.array([c["tokens"] for c in cand], dtype=np.float64)
    ratio = float(d.sum() / t.sum())
    z = ratio + (d - ratio * t) / t.mean()
    half = Z95 * float(z.std(ddof=1)) / math.sqrt(z.size)
    return {"n": int(z.size), "tokens": int(t.sum()), "change_nats_per_token": ratio,
            "lower_95": ratio - half, "upper_95": ratio + half}


def retention_pairs(runs_dir: Selected) -> list[dict]:
    d = _models_dir(runs_dir)
    if d is None:
        return []
    models = {p.stem: load_json_strict(p) for p in sorted(d.glob("*.json"))}
    out = []
    for cand, ref in (("powersgd", "dense"), ("powersgd", "single"), ("dense", "single")):
        if cand in models and ref in models:
            res = paired_retention(models[cand]["retention"], models[ref]["retention"])
            worse = res["lower_95"] > 0
            better = res["upper_95"] < 0
            out.append({"comparison": f"{cand} vs {ref}", **res,
                        "reading": (f"{cand} worse than {ref}" if worse else f"{cand} better than {ref}" if better
                                    else "the interval covers 0"),
                        "source": logical_path(d, Selection.of(runs_dir).runs_dir)})
    return out
