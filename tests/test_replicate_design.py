"""kit.replicate_stats and `kit replicates plan`: the smallest k per arm for a paired t-test over k replicate
differences (noncentral t), the t interval of k differences, and the shared item variance (issue 59)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from kit.cli import main
from kit.replicate_stats import (
    ReplicatePlanError,
    paired_interval,
    plan,
    power,
    reading,
    shared_item_variance,
)


@pytest.mark.parametrize("sd,effect,one_sided,k", [(3.16, 3.4, False, 9), (1.27, 3.4, False, 4),
                                                    (0.0155, 0.019, True, 6)])
def test_plan_gives_the_issues_numbers(sd, effect, one_sided, k):
    got = plan(sd, effect, alpha=0.05, power=0.8, one_sided=one_sided)
    assert got["k"] == k
    assert got["power_at_k"] >= 0.8 > got["curve"][k - 3]["power"]  # k - 1 replicates fall short
    assert [r["k"] for r in got["curve"]] == list(range(2, k + 3))


def test_power_is_the_noncentral_t_tail_and_the_margin_shifts_it():
    # the oracle written out: two-sided, df 8, noncentrality 3.4 * 3 / 3.16
    crit = stats.t.ppf(0.975, 8)
    want = stats.nct.sf(crit, 8, 3.4 * 3 / 3.16) + stats.nct.cdf(-crit, 8, 3.4 * 3 / 3.16)
    assert power(3.16, 3.4, 9) == pytest.approx(want, rel=1e-12)
    # noninferiority: a true deficit of 1 point against a 3-point margin is a test of d > -3 with effect -1
    assert power(1.3, -1.0, 5, margin=3.0, one_sided=True) == pytest.approx(power(1.3, 2.0, 5, one_sided=True))
    assert plan(1.3, -1.0, margin=3.0, one_sided=True)["k"] == plan(1.3, 2.0, one_sided=True)["k"]


@pytest.mark.parametrize("kwargs,says", [({"sd": 0, "effect": 1}, "sd = 0"), ({"sd": 1, "effect": 0}, "effect = 0"),
                                         ({"sd": 1, "effect": 1, "alpha": 1.5}, "alpha = 1.5"),
                                         ({"sd": 1, "effect": -4, "margin": 3}, "effect = -4")])
def test_plan_refuses_bad_input_naming_the_field(kwargs, says):
    with pytest.raises(ReplicatePlanError, match=says):
        plan(**kwargs)


def test_cli_prints_k_and_the_power_curve(capsys, tmp_path):
    assert main(["replicates", "plan", "--sd", "3.16", "--effect", "3.4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "k = 9"
    assert "power curve:" in out and any(line.strip().startswith("k =    9  power 0.806") for line in out)
    assert main(["replicates", "plan", "--sd", "0.0155", "--effect", "0.019", "--one-sided", "--json",
                 "--out", str(tmp_path / "p.json")]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["k"] == 6 and json.loads((tmp_path / "p.json").read_text())["k"] == 6


def test_cli_bad_number_is_one_line(capsys):
    assert main(["replicates", "plan", "--sd", "abc", "--effect", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--sd" in err[0] and "'abc' is not a number" in err[0]
    assert main(["replicates", "plan", "--sd", "-1", "--effect", "3"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sd = -1.0; expected a finite number above 0" in err[0]


def test_interval_is_t_with_k_minus_1_df_plus_item_variance():
    d = [0.055, 0.041, 0.047]
    iv = paired_interval(d, item_variance=1e-5)
    se = math.sqrt(np.var(d, ddof=1) / 3 + 1e-5)
    assert iv.df == 2 and iv.se == pytest.approx(se)
    assert iv.lower == pytest.approx(np.mean(d) - stats.t.ppf(0.975, 2) * se)
    assert iv.estimable and iv.why is None


@pytest.mark.parametrize("values,why", [([0.03], "1 replicate"), ([0.0312, 0.0312], "zero spread"), ([], "0 replicates")])
def test_not_estimable_below_two_replicates_or_without_spread(values, why):
    iv = paired_interval(values)
    assert not iv.estimable and iv.lower is None and iv.why is not None and why in iv.why
    assert "not estimable" in reading("X vs Y", iv) or not values


def test_reading_is_computed_from_the_interval():
    iv = paired_interval([0.055, 0.041, 0.047])
    text = reading("B vs A", iv)
    assert text.startswith("B vs A: beats in 3 of 3 replicates (+5.5, +4.1, +4.7 points), mean +4.8 points")
    assert iv.lower is not None and iv.upper is not None
    assert f"[{100 * iv.lower:+.1f}, {100 * iv.upper:+.1f}] (t, 2 df)" in text
    assert "sd" not in text.split("(")[0]
    assert "does not clear" in reading("P vs S", paired_interval([-0.029, -0.024]), margin=0.03)


def test_shared_item_variance_recovers_the_item_component():
    rng = np.random.default_rng(5)
    k, n, tau, omega = 8, 2000, 0.5, 1.0
    h = rng.normal(0, tau, n)
    x = rng.normal(0, 0.1, (k, 1)) + h + rng.normal(0, omega, (k, n))
    assert shared_item_variance(x) * n == pytest.approx(tau ** 2, rel=0.15)
    assert shared_item_variance(x[:, :1]) == 0.0


def test_the_final_set_analysis_is_a_t_interval_over_the_paired_replicates_not_a_multiple_of_a_spread():
    """analyse_final over per-item score records (score_final_set's): per pair of arms, k = 3 paired differences,
    the t interval with 2 df over sqrt(s^2 / k + the shared item variance); a "2 sd" rule fails here."""
    from kit.evidence.replicate_analysis import analyse_final
    from kit.evidence.replicate_design import FinalDesign

    rng = np.random.default_rng(7)
    n, k = 200, 3
    items = rng.normal(0, 1, n)
    design = FinalDesign("t", "x-", {"study/a": k, "study/b": k})

    def rec(shift):
        nll = 20 + items + shift + rng.normal(0, 0.5, n)
        return {"tasks_sha256": "s", "rows": [{"id": f"t{i}", "correct": bool(v > 20), "nll_sum": float(v),
                                                "tokens": 10} for i, v in enumerate(nll)]}

    scores = {"study": {f"x-study-{arm}-r{r}": rec(0.3 * (arm == "a") + rng.normal(0, 0.2)) for arm in "ab"
                        for r in range(k)}}
    result = analyse_final(design, scores)
    q = {tuple(q["key"]): q for q in result["questions"]}[("study", "a_vs_b", "NLL per token")]
    x = np.array([[(a["nll_sum"] - b["nll_sum"]) / 10 for a, b in zip(scores["study"][f"x-study-a-r{r}"]["rows"],
                                                                       scores["study"][f"x-study-b-r{r}"]["rows"])]
                  for r in range(k)])
    d = x.mean(axis=1)
    resid = x - x.mean(axis=1, keepdims=True) - x.mean(axis=0) + x.mean()
    v_items = max(0.0, x.mean(axis=0).var(ddof=1) - (resid ** 2).sum() / ((k - 1) * (n - 1)) / k) / n
    se = math.sqrt(d.var(ddof=1) / k + v_items)
    iv = q["interval"]
    assert iv["df"] == 2 and q["differences"] == pytest.approx(list(d))
    assert (iv["lower"], iv["upper"]) == pytest.approx((d.mean() - stats.t.ppf(0.975, 2) * se,
                                                        d.mean() + stats.t.ppf(0.975, 2) * se))
    assert "(t, 2 df" in q["reading"] and ("item sampling added" in q["reading"]) == (v_items > 0)
    with pytest.raises(ValueError, match="no record of x-study-b-r2"):
        analyse_final(design, {"study": {lab: r for lab, r in scores["study"].items() if lab != "x-study-b-r2"}})
