"""Statistics and gates: exact values on hand-made arrays, scipy's paired bootstrap as an oracle,
coverage of the one-sided bound on simulated data, and the gates' boundaries."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from kit import stats
from kit.stats import (
    accuracy_by_family,
    bootstrap_ratio_distribution,
    gained_lost,
    gate_gain,
    gate_generated,
    gate_retention,
    nll_change_per_token,
    normal_noninferiority,
    normal_upper_bound,
    paired_bootstrap_upper,
)


def test_nll_change_is_token_weighted_ratio_of_sums():
    # differences 1, -1, 1 over 4 + 2 + 2 tokens: 1/8, not the mean of per-example ratios (1/4-1/2+1/2)/3
    assert nll_change_per_token([3.0, 5.0, 2.0], [2.0, 6.0, 1.0], [4, 2, 2]) == 0.125


def test_nll_change_refuses_bad_input():
    with pytest.raises(ValueError, match="expected one entry per example each, got lengths 2, 3, 3"):
        nll_change_per_token([1.0, 2.0], [1.0, 2.0, 3.0], [1, 1, 1])
    with pytest.raises(
        ValueError, match="tokens: expected a positive assistant-token count per example; entry 1 is 0"
    ):
        nll_change_per_token([1.0, 2.0], [1.0, 2.0], [3, 0])
    with pytest.raises(ValueError, match="cand_nll: expected finite values; entry 0 is not"):
        nll_change_per_token([np.nan], [1.0], [1])
    with pytest.raises(ValueError, match="tokens: expected integer counts"):
        nll_change_per_token([1.0], [1.0], [1.5])
    with pytest.raises(ValueError, match=r"cand_nll: expected a non-empty 1-D array, got shape \(0,\)"):
        nll_change_per_token([], [], [])


def test_bootstrap_matches_a_direct_resampling_with_the_same_generator():
    rng = np.random.default_rng(11)
    tokens = rng.integers(1, 30, size=25)
    base = rng.gamma(2.0, 1.0, size=25) * tokens
    cand = base + rng.normal(0.0, 1.0, size=25)
    result = paired_bootstrap_upper(cand, base, tokens, confidence=0.9, n_resamples=500, seed=7)
    idx = np.random.default_rng(7).integers(0, 25, size=(500, 25))
    diff = cand - base
    expected = np.quantile(diff[idx].sum(axis=1) / tokens[idx].sum(axis=1), 0.9)
    assert result.upper == pytest.approx(expected, rel=1e-12, abs=1e-15)
    assert result.estimate == pytest.approx(diff.sum() / tokens.sum(), rel=1e-12)
    assert result.to_dict() == {
        "estimate": result.estimate,
        "upper": result.upper,
        "confidence": 0.9,
        "n_resamples": 500,
        "seed": 7,
        "method": "percentile",
        "n": 25,
    }


def test_bootstrap_is_paired_and_deterministic():
    tokens = np.array([3, 8, 1, 5, 9])
    base = np.array([7.0, 2.0, 4.0, 1.0, 6.0])
    # the candidate changes every example by exactly -0.25 nats per token: every paired resample sees -0.25
    cand = base - 0.25 * tokens
    result = paired_bootstrap_upper(cand, base, tokens, n_resamples=200, seed=1)
    assert result.estimate == -0.25 and result.upper == pytest.approx(-0.25, abs=1e-15)
    other = np.array([1.0, -2.0, 0.5, 3.0, -1.0])
    a = paired_bootstrap_upper(base + other, base, tokens, n_resamples=300, seed=4)
    assert a == paired_bootstrap_upper(base + other, base, tokens, n_resamples=300, seed=4)
    assert a.upper != paired_bootstrap_upper(base + other, base, tokens, n_resamples=300, seed=5).upper


def test_bootstrap_does_not_depend_on_chunk_size(monkeypatch):
    rng = np.random.default_rng(2)
    diff, tokens = rng.normal(size=37), rng.integers(1, 9, size=37).astype(float)
    whole = bootstrap_ratio_distribution(diff, tokens, 1000, 5)
    monkeypatch.setattr(stats, "_CHUNK_ENTRIES", 37 * 3 + 5)  # chunks of 3 resamples
    assert np.array_equal(whole, bootstrap_ratio_distribution(diff, tokens, 1000, 5))


def test_bootstrap_refuses_bad_settings():
    with pytest.raises(ValueError, match=r"method = 'bca'; expected one of \('percentile',\)"):
        paired_bootstrap_upper([1.0], [0.0], [1], method="bca")
    with pytest.raises(ValueError, match=r"confidence = 1.0; expected a number in \[0.5, 1\)"):
        paired_bootstrap_upper([1.0], [0.0], [1], confidence=1.0)
    with pytest.raises(ValueError, match="n_resamples = 0"):
        paired_bootstrap_upper([1.0], [0.0], [1], n_resamples=0)


def test_bootstrap_upper_agrees_with_scipy_paired_percentile():
    rng = np.random.default_rng(3)
    n = 80
    tokens = rng.integers(5, 60, size=n)
    base = rng.gamma(2.0, 1.0, size=n) * tokens
    cand = base - 0.01 * tokens + rng.normal(0.0, 0.3, size=n) * np.sqrt(tokens)
    ours = paired_bootstrap_upper(cand, base, tokens, confidence=0.95, n_resamples=20000, seed=3)
    ref = scipy.stats.bootstrap(
        (cand - base, tokens),
        lambda d, t, axis=-1: d.sum(axis=axis) / t.sum(axis=axis),
        paired=True,
        vectorized=True,
        confidence_level=0.90,  # two-sided 90%: its upper end is the one-sided 95% bound
        method="percentile",
        n_resamples=20000,
        rng=np.random.default_rng(5),
    )
    # independent Monte Carlo draws: the 95% quantiles differ by about 0.02 bootstrap sd; allow 0.1 sd
    assert abs(ours.upper - ref.confidence_interval.high) < 0.1 * ref.standard_error
    assert ours.estimate == pytest.approx(nll_change_per_token(cand, base, tokens))


def test_one_sided_bound_covers_the_true_ratio_about_95_percent():
    truth, sims, n = 0.01, 400, 100
    covered = 0
    for sim in range(sims):
        rng = np.random.default_rng(1000 + sim)
        tokens = rng.integers(5, 60, size=n)
        base = rng.gamma(2.0, 1.0, size=n) * tokens
        # E[cand - base] = truth * E[tokens]: the population ratio of sums is `truth`
        cand = base + truth * tokens + rng.normal(0.0, 0.3, size=n) * np.sqrt(tokens)
        covered += paired_bootstrap_upper(cand, base, tokens, n_resamples=1000, seed=sim).upper >= truth
    assert 0.92 <= covered / sims <= 0.98


def test_normal_upper_bound_exact():
    mean, upper = normal_upper_bound([1.0, 2.0, 3.0, 4.0], 2.0)
    # sd (ddof=1) = sqrt(5/3), n = 4: upper = 2.5 + 2 * sqrt(5/3) / 2
    assert mean == 2.5 and upper == pytest.approx(2.5 + math.sqrt(5 / 3), rel=1e-15)
    with pytest.raises(ValueError, match="expected at least 2 values"):
        normal_upper_bound([1.0], 2.0)
    with pytest.raises(ValueError, match="multiplier = 0; expected a finite number > 0"):
        normal_upper_bound([1.0, 2.0], 0)


def test_normal_noninferiority_exact():
    # differences 0, 1, 0, 1: mean 0.5, sd sqrt(1/3); lower = 0.5 - 1.96 * sqrt(1/3) / 2 = -0.06580...
    result = normal_noninferiority([1, 1, 0, 1], [1, 0, 0, 0], margin=0.03, multiplier=1.96)
    lower = 0.5 - 1.96 * math.sqrt(1 / 3) / 2
    assert result["n"] == 4 and result["mean_difference"] == 0.5
    assert result["lower"] == pytest.approx(lower, rel=1e-14)
    assert result["noninferior"] is False
    assert (
        normal_noninferiority([1, 1, 0, 1], [1, 0, 0, 0], margin=0.07, multiplier=1.96)["noninferior"] is True
    )
    # identical answers: lower = 0, and 0 > -0 is false (strict)
    assert (
        normal_noninferiority([True, False], [True, False], margin=0.0, multiplier=1.0)["noninferior"]
        is False
    )
    with pytest.raises(ValueError, match="expected paired arrays of equal length, got 2 and 3"):
        normal_noninferiority([1, 0], [1, 0, 1], 0.03, 1.96)
    with pytest.raises(ValueError, match="cand_correct: expected booleans or 0/1"):
        normal_noninferiority([2, 0], [1, 0], 0.03, 1.96)


def test_accuracy_by_family_table():
    records = [
        {"family": "sorting", "correct": True},
        {"family": "lookup", "correct": True},
        {"family": "lookup", "correct": False},
        {"family": "lookup", "correct": True},
    ]
    table = accuracy_by_family(records)
    expected = pd.DataFrame(
        {
            "family": ["lookup", "sorting", "all"],
            "n": [3, 1, 4],
            "correct": [2, 1, 3],
            "accuracy": [2 / 3, 1.0, 0.75],
        }
    )
    pd.testing.assert_frame_equal(table, expected, check_dtype=False)
    assert table["n"].dtype == np.int64
    with pytest.raises(ValueError, match="records lack field 'correct'"):
        accuracy_by_family([{"family": "lookup"}])
    with pytest.raises(ValueError, match="a record has family 'all'"):
        accuracy_by_family([{"family": "all", "correct": True}])


def test_gained_lost_counts():
    assert gained_lost([1, 1, 0, 0, 1], [1, 0, 1, 0, 0]) == {"gained": 2, "lost": 1, "net": 1}
    assert gained_lost([False, False], [True, True]) == {"gained": 0, "lost": 2, "net": -2}


def test_gate_gain_boundary_is_strict():
    assert gate_gain(-0.001)["passed"] is False  # exactly at the threshold fails
    assert gate_gain(-0.0010001)["passed"] is True
    assert gate_gain(0.5)["passed"] is False
    record = gate_gain(-0.002, threshold=-0.001)
    assert record == {
        "name": "gain",
        "passed": True,
        "inputs": {"upper": -0.002, "threshold": -0.001},
        "rule": "passes when the upper bound (nats per assistant token) < threshold",
    }
    with pytest.raises(ValueError, match="gate_gain upper = nan; expected a finite number"):
        gate_gain(float("nan"))


def test_gate_retention_boundary_is_inclusive():
    assert gate_retention(0.02)["passed"] is True  # exactly at the threshold passes
    assert gate_retention(0.0200001)["passed"] is False
    assert gate_retention(-0.3)["passed"] is True
    assert gate_retention(0.05, threshold=0.1)["inputs"] == {"upper": 0.05, "threshold": 0.1}


def test_gate_generated_no_net_loss():
    assert gate_generated({"gained": 3, "lost": 3})["passed"] is True
    assert gate_generated({"gained": 2, "lost": 3, "net": -1})["passed"] is False
    record = gate_generated(gained_lost([1, 0, 1], [0, 1, 0]))
    assert record["passed"] is True and record["inputs"] == {"gained": 2, "lost": 1, "net": 1}
    with pytest.raises(ValueError, match="gate_generated: field 'lost' = None; expected a count >= 0"):
        gate_generated({"gained": 1})
