"""The learning-rate schedule of a contract: the factor applied to every group's peak rate at an update.

A contract's `training.lr_schedule` is "constant" (the factor is 1 at every update), or an object
{"warmup_updates": W, "after": "constant" | "cosine", "floor_ratio": r}: linear warm-up from
1/W to 1 over the first W updates of the cohort (or arm), then constant, or a half cosine from 1 down
to `floor_ratio` at the cohort's last update. The index is the update within the cohort (0-based), so
each cohort's recipe is the same function of its own updates, while Adam's state carries over.
"""

from __future__ import annotations

import math

CONSTANT = "constant"
AFTER_WARMUP = ("constant", "cosine")


def lr_factor(schedule, update: int, updates: int) -> float:
    """The multiplier of the peak learning rate at 0-based `update` of `updates`; `schedule` is the contract's
    typed `training.lr_schedule` (kit.contract.LrSchedule: "constant" or an `LrWarmup`)."""
    if schedule == CONSTANT:
        return 1.0
    warmup, after, floor = schedule.warmup_updates, schedule.after, schedule.floor_ratio
    if update < warmup:
        return (update + 1) / warmup
    if after == "constant":
        return 1.0
    span = updates - 1 - warmup
    progress = 1.0 if span <= 0 else min(1.0, (update - warmup) / span)
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def check_schedule(schedule, updates: int, where: str) -> None:
    """Refuse a schedule the structural schema cannot judge: a warm-up as long as the cohort itself. A
    contract's cross-field rules call it on the typed `training.lr_schedule` ("constant" or an `LrWarmup`)."""
    if schedule == CONSTANT:
        return
    if schedule.warmup_updates >= updates:
        raise ValueError(f"{where}.warmup_updates = {schedule.warmup_updates}; expected fewer than the "
                         f"{updates} updates it applies to")
