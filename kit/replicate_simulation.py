"""Simulated replicate studies with a known training noise and item sampling, to calibrate a decision rule
(tests/test_replicate_calibration.py, bench/replicate_calibration.py). Pure: numpy only.

The decision to know: each simulated study draws a fresh item set from a population, so the item-sampling
variance shared by every replicate is real; each replicate pair then draws its own training shift (the
training noise of the paired difference) and its own per-item outcomes. Two measures at the medium sizes:
binary accuracy (1,024 items; probabilities drawn per item, the arm effect varying by item) and per-item
NLL per token (512 items, normal per-item values). A rule sees the per-item differences [k, n] of one
study and says pass or not; `rate` counts how often it passes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kit.replicate_stats import one_sided_bound, paired_interval, shared_item_variance

Z95 = 1.6448536269514722


@dataclass(frozen=True)
class BinaryStudy:
    """Accuracy of two arms on n binary items: item probability p_i ~ Beta(a, b); arm B adds effect + eta_i
    (eta_i ~ N(0, tau), the effect's variation over items) and each replicate pair a training shift of the
    difference ~ N(0, train_sd), split evenly between the arms; values in accuracy units (fractions)."""

    n: int = 1024
    a: float = 2.0
    b: float = 4.3
    tau: float = 0.05
    train_sd: float = 0.025

    def omega2(self) -> float:
        """The per-item variance of one replicate's paired outcome difference, averaged over items (approx.)."""
        pq = self.a * self.b / ((self.a + self.b) * (self.a + self.b + 1))
        return 2 * (pq - self.train_sd ** 2 / 2) - self.tau ** 2

    def sd_d(self) -> float:
        """The sd of one replicate's mean difference: training noise and the per-replicate item noise."""
        return math.sqrt(self.train_sd ** 2 + self.omega2() / self.n)

    def draw(self, rng: np.random.Generator, k: int, effect: float) -> np.ndarray:
        p = rng.beta(self.a, self.b, self.n)
        eta = rng.normal(0.0, self.tau, self.n)
        shift = rng.normal(0.0, self.train_sd / math.sqrt(2), (k, 2))
        pa = np.clip(p + shift[:, :1], 0, 1)
        pb = np.clip(p + effect + eta + shift[:, 1:], 0, 1)
        return (rng.random((k, self.n)) < pb).astype(np.float64) - (rng.random((k, self.n)) < pa)


@dataclass(frozen=True)
class NllStudy:
    """Per-item NLL-per-token differences on n items: effect + training shift u_r ~ N(0, train_sd) + item
    effect h_i ~ N(0, tau) + per-replicate item noise ~ N(0, omega); nats per token."""

    n: int = 512
    tau: float = 0.03
    omega: float = 0.07
    train_sd: float = 0.0150

    def sd_d(self) -> float:
        return math.sqrt(self.train_sd ** 2 + self.omega ** 2 / self.n)

    def draw(self, rng: np.random.Generator, k: int, effect: float) -> np.ndarray:
        return (effect + rng.normal(0.0, self.train_sd, (k, 1)) + rng.normal(0.0, self.tau, self.n)
                + rng.normal(0.0, self.omega, (k, self.n)))


def analysis_rule(direction: int = 1, level: float = 0.95, threshold: float = 0.0) -> Callable[[np.ndarray], bool]:
    """The replicate analysis (kit.replicate_stats): pass when the one-sided `level` t bound of the mean paired
    difference, shared item variance added, lies beyond `threshold` in `direction` (+1: higher is better; a
    noninferiority margin M is threshold -M)."""
    def rule(x: np.ndarray) -> bool:
        iv = paired_interval(x.mean(axis=1), shared_item_variance(x), confidence=2 * level - 1)
        bound = one_sided_bound(iv, "lower" if direction > 0 else "upper", level)
        return bound is not None and direction * (bound - threshold) > 0
    return rule


def two_sd_rule(direction: int = 1) -> Callable[[np.ndarray], bool]:
    """The rule the replicate analysis replaced: pass when the mean difference exceeds twice the replicates' sd."""
    def rule(x: np.ndarray) -> bool:
        d = x.mean(axis=1)
        return len(d) >= 2 and direction * d.mean() > 2 * d.std(ddof=1)
    return rule


def single_run_rule(direction: int = 1, level: float = 0.95) -> Callable[[np.ndarray], bool]:
    """A single-run verdict: replicate 1 alone against its item-only one-sided normal bound."""
    z = Z95 if level == 0.95 else float(np.sqrt(2) * _erfinv(2 * level - 1))

    def rule(x: np.ndarray) -> bool:
        one = x[0]
        se = one.std(ddof=1) / math.sqrt(one.size)
        return direction * one.mean() - z * se > 0
    return rule


def _erfinv(y: float) -> float:
    from scipy.special import erfinv  # noqa: PLC0415 - only for a level other than 0.95

    return float(erfinv(y))


def rate(study, rule: Callable[[np.ndarray], bool], k: int, effect: float, sims: int, seed: int) -> float:
    """How often `rule` passes over `sims` simulated studies with true effect `effect` and k replicate pairs."""
    rng = np.random.default_rng(seed)
    return sum(bool(rule(study.draw(rng, k, effect))) for _ in range(sims)) / sims
