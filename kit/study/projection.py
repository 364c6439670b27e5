"""Projection of the shared-gradient study onto its seed's hardware (two one-L40S hosts across zones)
from measurements on an emulated link (pure functions: numpy only, no torch).

One update of a pair arm costs compute + collectives x RTT + logical bytes x wire overhead x 8 /
(efficiency x rate). The decision to know: wire overhead is measured and efficiency fitted on the
emulated link, but RTT cannot be measured here, so it is an ASSUMPTION of the projection.
`fit_link` (a `LinkFit` of `LinkPoint`s), `validate`, `project_study` (`ProjectedArm` rows); the model term by term: the notes below.

Notes: where each term comes from.

The pair is one rank per host, a ring all-reduce over two ranks on a full-duplex link: each rank sends its logical
bytes once while receiving its peer's. Wire overhead (TCP/IP headers, gloo framing, per-update scalars) is measured
on the emulated link's interface counters; efficiency is fitted by least squares over every (arm, rate) measurement,
with the pair arms' compute times. RTT is 0 in the fit: the kernel here has no netem and a veth's round trip is tens
of microseconds. `validate` sets predicted beside measured for runs the fit did not use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from kit.record import MapOf, Num, Opt, Record, spec_field
from kit.study.schema import StudyContract

BILLED_DIRECTIONS = 2


def transfer_x(bytes_per_update: float, wire_overhead: float, rate_bit: float) -> float:
    """Seconds the bytes take at the full link rate (the regressor of the efficiency)."""
    return bytes_per_update * wire_overhead * 8.0 / rate_bit


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkPoint(Record):
    """One measurement of an arm on the emulated link: what the fit reads of a point (bench/study_projection.py's
    points carry more, e.g. their kind, which are the bench's own)."""
    arm: str = spec_field(str, doc="the arm measured")
    rate_bit: float = spec_field(Num(0), doc="the link's rate, bit/s")
    bytes_per_update: float = spec_field(Num(0), doc="logical bytes a rank sends per update")
    wire_overhead: float = spec_field(Num(0), doc="wire bytes / logical bytes, measured")
    seconds_per_update: float = spec_field(Num(0), doc="measured")

    @classmethod
    def of(cls, point: Mapping[str, Any], source: str) -> LinkPoint:
        """The point's declared fields, validated (a missing one is a ContractError naming `source`)."""
        return cls.from_json({k: v for k, v in point.items() if k in cls.json_fields()}, source)


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkFit(Record):
    """The fitted link model: one compute time per arm and 1/efficiency."""
    compute_seconds: Mapping[str, float] = spec_field(MapOf(float), doc="per arm, seconds per update")
    efficiency: float | None = spec_field(Opt(float), doc="null where the fit's 1/efficiency is not positive")
    inverse_efficiency: float = spec_field(float, doc="the fitted coefficient of the transfer time")

    def predict(self, point: LinkPoint, rtt_s: float = 0.0, collectives: int = 0,
                compute_s: float | None = None) -> float:
        compute = self.compute_seconds[point.arm] if compute_s is None else compute_s
        return (compute + collectives * rtt_s
                + transfer_x(point.bytes_per_update, point.wire_overhead, point.rate_bit) * self.inverse_efficiency)


def _points(points: list[dict], what: str) -> list[LinkPoint]:
    return [LinkPoint.of(p, f"{what} {i}") for i, p in enumerate(points)]


def fit_link(points: list[dict]) -> dict:
    """points: [{"arm", "rate_bit", "bytes_per_update", "wire_overhead", "seconds_per_update"}].
    Unknowns: one compute time per arm and 1/efficiency. Needs more points than unknowns. Returns the
    `LinkFit`'s JSON with the points and each one's residual."""
    measured = _points(points, "link point")
    arms = sorted({p.arm for p in measured})
    if len(points) < len(arms) + 1:
        raise ValueError(f"{len(points)} measurement(s) for {len(arms) + 1} unknowns; run more link rates")
    a = np.zeros((len(points), len(arms) + 1))
    y = np.zeros(len(points))
    for i, p in enumerate(measured):
        a[i, arms.index(p.arm)] = 1.0
        a[i, -1] = transfer_x(p.bytes_per_update, p.wire_overhead, p.rate_bit)
        y[i] = p.seconds_per_update
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    inv_eff = float(coef[-1])
    fit = LinkFit(compute_seconds={arm: float(c) for arm, c in zip(arms, coef[:-1])},
                  efficiency=(1.0 / inv_eff) if inv_eff > 0 else None, inverse_efficiency=inv_eff)
    return {**fit.to_json(), "points": points,
            "residuals": [p.seconds_per_update - fit.predict(p) for p in measured]}


def validate(fit: dict, held_out: list[dict]) -> list[dict]:
    """Predicted beside measured for measurements the fit (`fit_link`'s) did not use."""
    model = LinkFit.from_json({k: v for k, v in fit.items() if k in LinkFit.json_fields()}, "the link fit")
    rows = []
    for p in _points(held_out, "held-out point"):
        pred = model.predict(p)
        rows.append({"arm": p.arm, "rate_bit_per_s": p.rate_bit, "measured_s_per_update": p.seconds_per_update,
                     "predicted_s_per_update": pred,
                     "error_pct": 100.0 * (pred - p.seconds_per_update) / p.seconds_per_update})
    return rows


@dataclass(frozen=True, slots=True, kw_only=True)
class ProjectedArm(Record):
    """One arm of the full study under a scenario (a row of `project_study`'s `rows`)."""
    arm: str = spec_field(str, doc="single, dense or powersgd")
    seconds_per_update: float = spec_field(float, doc="mean over the schedule (PowerSGD's warm-up in)")
    arm_hours: float = spec_field(float, doc="wall time, startup and commits in")
    gpu_hours: float = spec_field(float, doc="wall x workers")
    gpu_cost_usd: float = spec_field(float, doc="at the contract's price")
    cross_zone_gb: float = spec_field(float, doc="bytes crossing zones (billed traffic only)")
    cross_zone_cost_usd: float = spec_field(float, doc="both directions billed")
    total_usd: float = spec_field(float, doc="GPU and cross-zone cost")


def project_study(terms: StudyContract, *, single_compute_s: float, pair_compute_fraction: float,
                  dense_bytes_per_update: int, powersgd_bytes_per_update: int, wire_overhead: float,
                  efficiency: float, rate_bit: float, rtt_s: float, collectives: dict,
                  label: str) -> dict:
    """The full study on the contract terms' hosts under one scenario. Returns per-arm rows (per-update
    seconds, arm hours, GPU cost, cross-zone bytes and cost) and the screens and bounds."""
    sched, proj, cost = terms.schedule, terms.projection, terms.cost
    updates, warm = sched.updates, terms.powersgd.warmup_updates
    every = terms.training.commit_every
    commits = len({s for s in range(1, updates + 1) if every and s % every == 0} | {updates})
    price_gpu_h = cost.instance_price_usd_per_hour.value / cost.hosts[0].gpus
    price_gb = cost.cross_zone_price_usd_per_gb_each_direction.value
    pair_compute = single_compute_s * pair_compute_fraction

    def comm(nbytes, n):
        return n * rtt_s + nbytes * wire_overhead * 8.0 / (efficiency * rate_bit)

    dense_s = pair_compute + comm(dense_bytes_per_update, collectives["dense"])  # PowerSGD's warm-up too
    powersgd_s = pair_compute + comm(powersgd_bytes_per_update, collectives["powersgd"])
    update_seconds = {"single": updates * single_compute_s, "dense": updates * dense_s,
                      "powersgd": warm * dense_s + (updates - warm) * powersgd_s}
    sent = {"single": 0, "dense": updates * dense_bytes_per_update,
            "powersgd": warm * dense_bytes_per_update + (updates - warm) * powersgd_bytes_per_update}
    rows = []
    for arm, workers in (("single", 1), ("dense", 2), ("powersgd", 2)):
        wall = proj.startup_s + update_seconds[arm] + commits * proj.checkpoint_s
        crossing = sent[arm] * wire_overhead * workers if workers > 1 and cost.cross_zone_traffic_billed else 0
        gpu_usd = wall * workers / 3600.0 * price_gpu_h
        zone_usd = crossing / cost.bytes_per_gb * price_gb * BILLED_DIRECTIONS
        rows.append(ProjectedArm(arm=arm, seconds_per_update=update_seconds[arm] / updates, arm_hours=wall / 3600.0,
                                 gpu_hours=wall * workers / 3600.0, gpu_cost_usd=gpu_usd,
                                 cross_zone_gb=crossing / cost.bytes_per_gb, cross_zone_cost_usd=zone_usd,
                                 total_usd=gpu_usd + zone_usd))
    by = {r.arm: r for r in rows}
    hours = sum(r.arm_hours for r in rows)  # the arms run one after another
    usd = sum(r.total_usd for r in rows)
    minimum = terms.screens.min_speedup
    speed = {arm: by["single"].seconds_per_update / by[arm].seconds_per_update for arm in ("dense", "powersgd")}
    return {"scenario": label, "rate_bit_per_s": rate_bit, "rtt_s": rtt_s, "rows": [r.to_json() for r in rows],
            "speed_ratio_vs_single": speed,
            "speed_screen": {arm: ("pass" if r >= minimum else "fail") for arm, r in speed.items()},
            "study_hours": hours, "deadline_hours": cost.deadline_hours,
            "within_deadline": hours <= cost.deadline_hours, "study_usd": usd, "bound_usd": cost.bound_usd,
            "within_bound": usd <= cost.bound_usd}


def ceil_div(a: int, b: int) -> int:
    return -(-a // b) if b else 0


def dense_collectives(dense_bytes: int, bucket_bytes: int) -> int:
    """All-reduces per update of the dense arm: its buckets, the loss sums and the deadline flag."""
    return ceil_div(dense_bytes, bucket_bytes) + 2


POWERSGD_COLLECTIVES = 5  # dense part, P, Q, loss sums, deadline flag (kit/distributed/grad_reduce.py)

