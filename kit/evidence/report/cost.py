"""The study's cost, traffic and arm-against-arm retention as measured: per attempt the hardware,
GPU-seconds and logical and wire bytes; the contract's prices applied to what ran (a projection);
and PowerSGD against dense and single on the retention probes (reported, not gated).

Measured GPU time stays unpriced: no committed record names a price for the hardware that ran, so
the contract's prices (the seed's hosts) go only in the projection table. Wire traffic is what the
arms' interface counters recorded; where they show none it is "not measured on this host".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kit.digest import load_json_strict, sha256_file
from kit.evidence import run_record as records
from kit.evidence.report.index import IndexedRun, KeptRun, gpu_names, index, is_replicate, kept, metric
from kit.evidence.report.selection import Selected, Selection
from kit.evidence.report.sidecar_formats import ArmCost, Measurement, UnmeasuredArm, arm_cost, arm_measurement
from kit.evidence.run_index import evidence_folders, logical_path
from kit.record import Record, spec_field

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


@dataclass(frozen=True, slots=True)
class KeptScreens:
    """A screens.json kept in an evidence folder (in memory): its path, the contract digest it names and its
    arms as recorded (kit/study/screens.py writes it)."""
    path: Path
    contract_digest: Any
    arms: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ByteCounters(Record):
    """An arm's non-loopback interface counters in screens.json (`arms[].interfaces.non_loopback`)."""

    rx_bytes: int = spec_field(int, doc="bytes received")
    tx_bytes: int = spec_field(int, doc="bytes sent")

    @property
    def total(self) -> int:
        return self.tx_bytes + self.rx_bytes


def screens_records(runs_dir) -> list[KeptScreens]:
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
            arms = obj.get("arms") if isinstance(obj, dict) else None
            if isinstance(arms, list):
                out.append(KeptScreens(path=p, contract_digest=obj.get("contract_digest"), arms=tuple(arms)))
    return out


def _interfaces(runs_dir) -> dict[tuple, ByteCounters]:
    """Per (contract digest, arm), the non-loopback interface counters from a kept screens.json."""
    out = {}
    for s in screens_records(runs_dir):
        for i, a in enumerate(s.arms):
            counters = (a.get("interfaces") or {}).get("non_loopback")
            if isinstance(counters, dict):
                out[(s.contract_digest, a["arm"])] = ByteCounters.from_json(
                    counters, str(s.path), f"arms[{i}].interfaces.non_loopback")
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


@dataclass(frozen=True, slots=True)
class MeasuredCost:
    """One arm attempt's hardware, time and traffic as measured (in memory; a row of the report's cost table,
    whose column names `table_row` gives)."""
    run: str
    arm: str
    kept_as: str
    status: str
    hardware: str
    workers: int | None
    wall_s: float | None
    updates: int | None
    gpu_seconds: float | None
    gpu_s_per_update: float | None
    gpu_s_per_update_vs_single: float | None
    speed_vs_single: float | None
    logical_sent_GiB_all_ranks: float | None
    wire_GiB: float | str
    interface_counters: str
    cross_zone_billable_GiB: float
    price: str

    def table_row(self) -> dict:
        return {"run": self.run, "arm": self.arm, "kept as": self.kept_as, "status": self.status,
                "hardware": self.hardware, "workers": self.workers, "wall_s": self.wall_s, "updates": self.updates,
                "gpu_seconds": self.gpu_seconds, "gpu_s_per_update": self.gpu_s_per_update,
                "gpu_s_per_update_vs_single": self.gpu_s_per_update_vs_single,
                "speed_vs_single": self.speed_vs_single,
                "logical_sent_GiB_all_ranks": self.logical_sent_GiB_all_ranks, "wire_GiB": self.wire_GiB,
                "interface counters": self.interface_counters,
                "cross_zone_billable_GiB": self.cross_zone_billable_GiB, "price": self.price}


@dataclass(frozen=True, slots=True)
class CostTotals:
    """The attempts of a cost table and the GPU-seconds of those that ran on a GPU (in memory)."""
    attempts: int
    attempts_on_gpu: int
    gpu_seconds_all_attempts: float | None
    superseded_attempts: int


@dataclass(frozen=True, slots=True)
class ProjectedCost:
    """One arm attempt's projection at the seed's prices, from its `cost` sidecar (in memory; a row of the report's
    projection table)."""
    run: str
    arm: str
    kept_as: str
    cost: ArmCost

    def table_row(self) -> dict:
        c = self.cost
        return {"run": self.run, "arm": self.arm, "kept as": self.kept_as, "gpu_hours": c.gpu_hours,
                "gpu_cost_usd": c.gpu_cost_usd, "cross_zone_bytes": c.cross_zone_bytes,
                "cross_zone_cost_usd": c.cross_zone_cost_usd, "total_usd": c.total_usd}


def _measured(m: Measurement | UnmeasuredArm | None) -> Measurement | None:
    return m if isinstance(m, Measurement) else None


def measured_cost_rows(runs_dir) -> list[MeasuredCost]:
    """One row per attempt; ratios against the single arm of the same contract and sitting (the committed
    runs, or the same superseded folder)."""
    attempts = arm_attempts(runs_dir)
    singles = {(a.run.contract_digest, a.kept_in): _measured(arm_measurement(a.run))
               for a in attempts if a.run.parameters["ARM"] == "single" and not is_replicate(a.run)}
    wires = _interfaces(runs_dir)
    rows = []
    for attempt in attempts:
        r = attempt.run
        arm = r.parameters["ARM"]
        single = singles.get((r.contract_digest, attempt.kept_in))
        m = arm_measurement(r)
        timed = _measured(m)
        traffic = metric(r, "traffic_per_rank") or []
        logical: list[Any] = [t.get("sent_bytes_total") for t in traffic if isinstance(t, dict)]  # recorded JSON
        on_gpu = bool(gpu_names(r))
        # devices: the GPUs the workers used (fewer than the workers when they shared GPUs); records made
        # before `workers` was measured had one device per worker
        devices = m.devices if m is not None else None
        workers = (m.workers if m.workers is not None else devices) if m is not None else None
        wall = m.wall_seconds if m is not None else None
        gps = timed.gpu_seconds_per_update if on_gpu and timed else None
        single_gps = single.gpu_seconds_per_update if single else None
        active = timed.active_tokens_per_s if timed else None
        single_active = single.active_tokens_per_s if single else None
        wire = wires.get((r.contract_digest, arm)) if attempt.kept_in is None else None
        wire_bytes = wire.total if wire else None
        rows.append(MeasuredCost(
            run=r.run_id, arm=arm, kept_as=_kept_as(attempt.kept_in), status=r.status, hardware=_hardware(r),
            workers=workers, wall_s=wall, updates=timed.updates if timed else None,
            gpu_seconds=(wall * devices) if on_gpu and wall and devices else None,
            gpu_s_per_update=gps,
            gpu_s_per_update_vs_single=(gps / single_gps) if gps and on_gpu and single_gps else None,
            speed_vs_single=(active / single_active) if active and single_active else None,
            logical_sent_GiB_all_ranks=(sum(logical) / GIB) if logical else None,
            wire_GiB=(wire_bytes / GIB) if wire_bytes else NOT_MEASURED,
            interface_counters=("none kept for this attempt" if wire is None else
                                f"{wire_bytes:,} non-loopback bytes (rx + tx)"),
            cross_zone_billable_GiB=(wire_bytes / GIB) if wire_bytes else 0.0,
            price=UNPRICED if on_gpu else "CPU: not priced"))
    return rows


def measured_totals(rows: list[MeasuredCost]) -> CostTotals:
    """GPU-seconds of every attempt that ran (superseded ones included), and how many attempts that is."""
    ran = [r.gpu_seconds for r in rows if r.gpu_seconds is not None]
    return CostTotals(attempts=len(rows), attempts_on_gpu=len(ran), gpu_seconds_all_attempts=sum(ran) if ran else None,
                      superseded_attempts=sum(1 for r in rows if r.kept_as.startswith("superseded")))


def projection_cost_rows(runs_dir) -> list[ProjectedCost]:
    """The arms' own cost sidecars: the contract's prices (the seed's hosts) applied to the measured
    wall time and to ring bytes estimated from logical bytes. What the trial would cost on those hosts;
    not what the measured runs cost."""
    rows = []
    for attempt in arm_attempts(runs_dir):
        c = arm_cost(attempt.run)
        if c is not None:
            rows.append(ProjectedCost(run=attempt.run.run_id, arm=attempt.run.parameters["ARM"],
                                      kept_as=_kept_as(attempt.kept_in), cost=c))
    return rows


def _models_dir(runs_dir) -> Path | None:
    """The scored models beside the screens.json that a selected evaluation run recorded reading (by
    sha256): an evidence folder may also keep an earlier campaign's study, whose arms are other models."""
    recorded = {r.input_digests.get("screens.json") for r in index(runs_dir).runs} - {None}
    # newer evaluation records also pin each model file (input "evaluation/models/NAME.json")
    pinned = {k.rpartition("/")[2]: v for r in index(runs_dir).runs for k, v in r.input_digests.items()
              if k.startswith("evaluation/models/")}
    for s in screens_records(runs_dir):
        d = s.path.parent / "evaluation" / "models"
        if d.is_dir() and sha256_file(s.path) in recorded and \
                all((d / name).is_file() and sha256_file(d / name) == digest for name, digest in pinned.items()):
            return d
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionScore(Record):
    """One retention probe as a scored model file lists it (`evaluation/models/NAME.json`, `retention[]`)."""

    id: str = spec_field(str, doc="the probe")
    nll_sum: float = spec_field(float, doc="summed NLL of its assistant tokens (nats)")
    tokens: int = spec_field(int, doc="its assistant tokens")


def retention_scores(model: Path) -> tuple[RetentionScore, ...]:
    """The retention probes a scored model file lists, read."""
    listed = load_json_strict(model)["retention"]
    return tuple(RetentionScore.from_json(x, str(model), f"retention[{i}]") for i, x in enumerate(listed))


@dataclass(frozen=True, slots=True)
class PairedRetention:
    """Token-weighted NLL change per token of one model against another on the same probes, with its paired normal
    95% interval (in memory)."""
    n: int
    tokens: int
    change_nats_per_token: float
    lower_95: float
    upper_95: float


def paired_retention(cand: Sequence[RetentionScore], ref: Sequence[RetentionScore]) -> PairedRetention:
    """Token-weighted NLL change per token of `cand` against `ref` on the same probes, with the
    delta-method normal two-sided 95% interval (kit.stats' construction, both sides)."""
    by_id = {x.id: x for x in ref}
    if {x.id for x in cand} != set(by_id):
        raise ValueError("paired retention: the two models were scored on different probes")
    d = np.array([c.nll_sum - by_id[c.id].nll_sum for c in cand], dtype=np.float64)
    t = np.array([c.tokens for c in cand], dtype=np.float64)
    ratio = float(d.sum() / t.sum())
    z = ratio + (d - ratio * t) / t.mean()
    half = Z95 * float(z.std(ddof=1)) / math.sqrt(z.size)
    return PairedRetention(n=int(z.size), tokens=int(t.sum()), change_nats_per_token=ratio, lower_95=ratio - half,
                           upper_95=ratio + half)


@dataclass(frozen=True, slots=True)
class RetentionPair:
    """One arm against another on the retention probes (in memory; a row of the report's retention table): the
    change and interval, how it reads, and the folder of the scored models."""
    comparison: str
    change: PairedRetention
    reading: str
    source: str

    def table_row(self) -> dict:
        c = self.change
        return {"comparison": self.comparison, "n": c.n, "tokens": c.tokens,
                "change_nats_per_token": c.change_nats_per_token, "lower_95": c.lower_95, "upper_95": c.upper_95,
                "reading": self.reading, "source": self.source}


def retention_pairs(runs_dir: Selected) -> list[RetentionPair]:
    d = _models_dir(runs_dir)
    if d is None:
        return []
    models = {p.stem: p for p in sorted(d.glob("*.json"))}
    out = []
    for cand, ref in (("powersgd", "dense"), ("powersgd", "single"), ("dense", "single")):
        if cand in models and ref in models:
            res = paired_retention(retention_scores(models[cand]), retention_scores(models[ref]))
            worse = res.lower_95 > 0
            better = res.upper_95 < 0
            out.append(RetentionPair(comparison=f"{cand} vs {ref}", change=res,
                                     reading=(f"{cand} worse than {ref}" if worse else f"{cand} better than {ref}"
                                              if better else "the interval covers 0"),
                                     source=logical_path(d, Selection.of(runs_dir).runs_dir)))
    return out
