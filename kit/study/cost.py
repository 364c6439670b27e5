"""Time and cost of the study's arms: the projection that admits or refuses an arm before it starts,
and the cost table of what ran (pure functions over the contract's cost frame; no torch).

GPU cost is GPU-hours times the per-GPU price, GPU-hours counting the GPUs the workers used (fewer
than the workers when they shared GPUs); cross-zone cost bills each byte a rank sends once leaving
and once entering a zone. The decision to know: an arm is admitted only when its projected
end is before the study deadline and the money spent plus its projected cost stays within the bound.
Formulas: the notes below.

Notes: the formulas.

The cost frame (contract `cost`) carries every price with its source and date (the seed document's: two
g6e.2xlarge, one L40S each, in us-east-1a and us-east-1b).
- GPU cost = GPU-hours x instance price / GPUs per host; GPU-hours = wall seconds x GPUs used / 3600, recorded as
  `gpus` (two workers on one GPU pay one GPU's time). A faster arm can still cost more GPU time: both are reported.
- Cross-zone: with one worker per host all a rank sends crosses; each rank sends `ring_wire_bytes`, billed leaving
  and entering: bytes / bytes_per_gb x price_each_direction x 2, only when `cross_zone_traffic_billed`.
- Projection: startup + updates x seconds per update + commits x checkpoint seconds; the deadline's clock starts
  with the first arm that ran.
"""

from __future__ import annotations

from dataclasses import dataclass

from kit.distributed.traffic import ring_wire_bytes
from kit.evidence.report.sidecar_formats import ArmCost
from kit.study.formats import ArmProjection, CostPrices, CostRow, CostTable
from kit.study.schema import StudyContract

BILLED_DIRECTIONS = 2  # out of the sending zone and into the receiving one


def gpu_hour_price(cost) -> float:
    """The price of one GPU-hour under the contract terms' `cost` section."""
    gpus = {h.gpus for h in cost.hosts}
    if len(gpus) != 1:
        raise ValueError(f"contract field 'cost.hosts': hosts differ in GPU count {sorted(gpus)}; one price per "
                         "GPU-hour needs equal hosts")
    return cost.instance_price_usd_per_hour.value / gpus.pop()


def cross_zone_bytes(cost, sent_bytes_per_rank: list[int]) -> int:
    """Bytes crossing zones (both directions together) for ranks that each sent these logical bytes."""
    world = len(sent_bytes_per_rank)
    if world < 2 or not cost.cross_zone_traffic_billed:
        return 0
    return sum(ring_wire_bytes(int(b), world) for b in sent_bytes_per_rank)


def priced(cost, seconds: float, gpus: int, crossing_bytes: int) -> ArmCost:
    """GPU-hours (seconds x `gpus`, the GPUs charged), GPU cost, cross-zone bytes and cost, and their
    total, for one arm."""
    gpu_hours = seconds * gpus / 3600.0
    gpu_usd = gpu_hours * gpu_hour_price(cost)
    gb = crossing_bytes / cost.bytes_per_gb
    zone_usd = gb * cost.cross_zone_price_usd_per_gb_each_direction.value * BILLED_DIRECTIONS
    return ArmCost(gpus=gpus, gpu_hours=gpu_hours, gpu_cost_usd=gpu_usd, cross_zone_bytes=int(crossing_bytes),
                   cross_zone_gb=gb, cross_zone_cost_usd=zone_usd, total_usd=gpu_usd + zone_usd)


def project_arm(terms: StudyContract, arm, updates: int, seconds_per_update: float, seconds_source: str,
                logical_bytes_per_rank: int, commits: int, now: float, clock_started_at: float | None,
                spent_usd: float, gpus: int | None = None) -> ArmProjection:
    """Projected time and cost of running `updates` updates of `arm` (an arm of the contract terms), against the
    deadline and bound.

    `logical_bytes_per_rank`: what each rank is expected to hand to collectives over those updates.
    `gpus`: the GPUs the workers will use (None: one each; fewer when they share a host's GPUs).
    Returns the inputs, the projection and `fits` with a `reason` when it does not.
    """
    cost, proj = terms.cost, terms.projection
    workers = arm.workers
    seconds = proj.startup_s + updates * seconds_per_update + commits * proj.checkpoint_s
    crossing = cross_zone_bytes(cost, [logical_bytes_per_rank] * workers)
    money = priced(cost, seconds, workers if gpus is None else gpus, crossing)
    start = now if clock_started_at is None else clock_started_at
    deadline_at = start + cost.deadline_hours * 3600.0
    ends_at = now + seconds
    within_deadline = ends_at <= deadline_at
    within_bound = spent_usd + money.total_usd <= cost.bound_usd
    reasons = []
    if not within_deadline:
        reasons.append(f"projected to end {ends_at - deadline_at:.0f} s after the {cost.deadline_hours} h stop "
                       f"deadline ({seconds:.0f} s needed, {max(0.0, deadline_at - now):.0f} s left)")
    if not within_bound:
        reasons.append(f"projected cost ${money.total_usd:.2f} plus ${spent_usd:.2f} already spent exceeds the "
                       f"${cost.bound_usd} bound")
    return ArmProjection(
        arm=arm.name, workers=workers, updates=updates, commits=commits,
        seconds_per_update=seconds_per_update, seconds_per_update_source=seconds_source,
        startup_s=proj.startup_s, checkpoint_s=proj.checkpoint_s,
        logical_bytes_per_rank=int(logical_bytes_per_rank),
        projected_seconds=seconds, projected_gpus=money.gpus, projected_gpu_hours=money.gpu_hours,
        projected_gpu_cost_usd=money.gpu_cost_usd, projected_cross_zone_bytes=money.cross_zone_bytes,
        projected_cross_zone_gb=money.cross_zone_gb, projected_cross_zone_cost_usd=money.cross_zone_cost_usd,
        projected_total_usd=money.total_usd,
        clock_started_at=clock_started_at, deadline_at=deadline_at, now=now,
        spent_usd_before=spent_usd, bound_usd=cost.bound_usd,
        within_deadline=within_deadline, within_bound=within_bound,
        fits=within_deadline and within_bound, reason="; ".join(reasons) or None,
    )


def arm_cost(terms: StudyContract, wall_seconds: float, sent_bytes_per_rank: list[int],
             gpus: int | None = None) -> ArmCost:
    """What an arm that ran cost under the contract terms: its wall time on the GPUs it used and its traffic (one entry of
    `sent_bytes_per_rank` per worker). `gpus`: the GPUs the workers used (None: one per worker); workers
    that shared one GPU are charged that one GPU's wall time, not one each."""
    cost = terms.cost
    n = len(sent_bytes_per_rank) if gpus is None else gpus
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= max(1, len(sent_bytes_per_rank)):
        raise ValueError(f"arm_cost: gpus = {gpus!r}; expected 1..{len(sent_bytes_per_rank)} (one per worker at most)")
    return priced(cost, wall_seconds, n, cross_zone_bytes(cost, sent_bytes_per_rank))


@dataclass(frozen=True, slots=True)
class ArmCosts:
    """An arm as the cost table reads it: its latest status and the cost of each attempt (None: it never ran)."""
    arm: str
    status: str
    reason: str | None
    costs: tuple[ArmCost | None, ...]


def cost_table(terms: StudyContract, arms: list[ArmCosts]) -> CostTable:
    """One row per arm (every arm, whatever its status), summed over its attempts, and the study total
    against the bound."""
    cost = terms.cost
    rows = []
    for arm in arms:
        paid = [c for c in arm.costs if c]
        rows.append(CostRow(arm=arm.arm, status=arm.status, reason=arm.reason, attempts=len(arm.costs),
                            attempts_that_ran=len(paid), gpu_hours=sum(c.gpu_hours for c in paid),
                            gpu_cost_usd=sum(c.gpu_cost_usd for c in paid),
                            cross_zone_bytes=sum(c.cross_zone_bytes for c in paid),
                            cross_zone_cost_usd=sum(c.cross_zone_cost_usd for c in paid),
                            total_usd=sum(c.total_usd for c in paid)))
    total = sum(r.total_usd for r in rows)
    return CostTable(
        rows=tuple(rows), total_usd=total, bound_usd=cost.bound_usd, within_bound=total <= cost.bound_usd,
        prices=CostPrices(gpu_hour_usd=gpu_hour_price(cost),
                          instance_price_usd_per_hour=cost.instance_price_usd_per_hour.to_json(),
                          cross_zone_price_usd_per_gb_each_direction=(
                              cost.cross_zone_price_usd_per_gb_each_direction.to_json()),
                          bytes_per_gb=cost.bytes_per_gb, cross_zone_traffic_billed=cost.cross_zone_traffic_billed),
        hosts=[h.to_json() for h in cost.hosts],
        rule="gpu cost = wall s x GPUs used (one per worker, fewer when workers shared GPUs) / 3600 x "
             "instance price / GPUs per host; cross-zone cost = bytes "
             "crossing (ring all-reduce wire bytes of every rank) / bytes_per_gb x price x 2 directions; "
             "every attempt that ran is paid for, failed ones included",
    )
