"""The statistics of replicate runs: how many replicates a question needs (`plan`), and what k replicates
say about a question (`paired_interval`, `reading`). Pure: numpy and scipy, no torch, no files.

The decision to know: a replicate question is a t-test over k *paired replicate differences* d_1..d_k (the
same data order in both arms, kit/replicate_order.py), each difference measured on a scoring set. Its mean
has variance sigma_d^2 / k from the replicates (training noise plus the per-replicate part of item noise)
plus, where the k replicates share one scoring set, the shared item-sampling variance tau^2 / n (the
items' own effects, common to every replicate; estimated from per-item results by a two-way replicates x
items decomposition, `shared_item_variance`, or bounded above by one scoring's item variance where only
aggregates are committed). The interval is mean +- t_{k-1} * sqrt(s^2/k + v_items), with k - 1 degrees of
freedom (conservative where v_items > 0). Below two replicates, or with no spread at all, nothing is
estimable and the functions say so; no rule compares an effect with a multiple of a spread.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from kit.record import Num, Opt, Record, Seq, spec_field

PLAN_RULE = ("k = the smallest number of paired replicate differences (k >= 2) for which a t-test with k - 1 "
             "degrees of freedom, at level alpha (one- or two-sided), has at least the asked power against the "
             "true mean difference `effect` when the differences have standard deviation `sd`; power from the "
             "noncentral t with noncentrality (effect + margin) * sqrt(k) / sd (margin: a noninferiority margin, "
             "the test of d > -margin)")
ANALYSIS_RULE = ("per question, the k paired replicate differences, their mean and a t interval with k - 1 degrees of "
                 "freedom over sqrt(s^2 / k + v_items), where v_items is the shared item-sampling variance of the "
                 "mean (scoring set common to every replicate); not estimable where k < 2 or every difference is "
                 "equal")
K_MAX = 10_000


class ReplicatePlanError(ValueError):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class PowerPoint(Record):
    """One point of a plan's power curve."""
    k: int = spec_field(Num(2, integer=True), doc="replicates per arm")
    power: float = spec_field(float, doc="the power at k")


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanInputs(Record):
    """What a plan was asked (`plan`'s arguments, as numbers)."""
    sd: float = spec_field(float, doc="the sd of one paired replicate difference")
    effect: float = spec_field(float, doc="the true mean difference to detect")
    margin: float = spec_field(float, doc="the noninferiority margin (0: none)")
    alpha: float = spec_field(float, doc="the test's level")
    power: float = spec_field(float, doc="the power wanted")
    one_sided: bool = spec_field(bool, doc="a one-sided test")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicatePlan(Record):
    """`plan_record`'s result (`kit replicates plan --out`): the smallest k, its power and the curve up to it."""
    k: int = spec_field(Num(2, integer=True), doc="the smallest k reaching the power wanted")
    power_at_k: float = spec_field(float, doc="the power at k")
    curve: tuple[PowerPoint, ...] = spec_field(Seq(PowerPoint), doc="k = 2 .. k and two beyond")
    rule: str = spec_field(str, doc="PLAN_RULE")
    inputs: PlanInputs = spec_field(PlanInputs, doc="what was asked")


@dataclass(frozen=True, slots=True, kw_only=True)
class PairedInterval(Record):
    """`paired_interval`'s result (each question's `interval` in kit-replicate-analysis/1): the t interval of the
    mean of k paired replicate differences; `lower`/`upper` null and `why` set where not estimable."""
    k: int = spec_field(Num(0, integer=True), doc="replicates")
    values: tuple[float, ...] = spec_field(Seq(float), doc="the paired differences, in the measure's units")
    mean: float | None = spec_field(Opt(float), doc="their mean (null: no replicate)")
    sd: float | None = spec_field(Opt(float), doc="their sd, ddof 1 (null: fewer than 2)")
    df: int | None = spec_field(Opt(int), doc="k - 1 (null: fewer than 2)")
    se: float | None = spec_field(Opt(float), doc="the mean's standard error, item variance added")
    lower: float | None = spec_field(Opt(float), doc="the interval's lower end")
    upper: float | None = spec_field(Opt(float), doc="its upper end")
    confidence: float = spec_field(float, doc="the two-sided confidence")
    item_variance: float = spec_field(float, doc="the shared item-sampling variance of the mean added")
    estimable: bool = spec_field(bool, doc="whether lower and upper are set")
    why: str | None = spec_field(Opt(str), doc="why not estimable (null: estimable)")


def _positive(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ReplicatePlanError(f"{name} = {value!r}; expected a finite number above 0")
    return float(value)


def power(sd: float, effect: float, k: int, margin: float = 0.0, alpha: float = 0.05, one_sided: bool = False) -> float:
    """The power of the paired t-test over k replicate differences (module docstring; PLAN_RULE)."""
    if k < 2:
        return 0.0
    df, ncp = k - 1, (effect + margin) * math.sqrt(k) / sd
    if one_sided:
        crit = stats.t.ppf(1 - alpha, df)
        p = stats.nct.sf(crit, df, ncp)
    else:
        crit = stats.t.ppf(1 - alpha / 2, df)
        p = stats.nct.sf(crit, df, ncp) + stats.nct.cdf(-crit, df, ncp)
    if not math.isfinite(p):  # scipy's series does not converge far in the tail: the normal limit there
        p = stats.norm.sf(crit - abs(ncp))
    return float(min(max(p, 0.0), 1.0))


def plan(sd: float, effect: float, margin: float = 0.0, alpha: float = 0.05, power_wanted: float = 0.8,
         one_sided: bool = False, **kw) -> dict:
    """`plan_record` as JSON: {"k", "power_at_k", "curve": [{"k", "power"}] for k = 2..k (and two beyond),
    "inputs", "rule"}. `power=` is accepted for `power_wanted`."""
    power_wanted = kw.pop("power", power_wanted)
    if kw:
        raise TypeError(f"plan(): unexpected argument(s) {', '.join(sorted(kw))}")
    return plan_record(sd, effect, margin, alpha, power_wanted, one_sided).to_json()


def plan_record(sd: float, effect: float, margin: float = 0.0, alpha: float = 0.05, power_wanted: float = 0.8,
                one_sided: bool = False) -> ReplicatePlan:
    """The smallest k per arm (PLAN_RULE) and the power curve up to it."""
    sd = _positive("sd", sd)
    # without a margin the direction is the test's (two-sided symmetric; one-sided read as "in its favour");
    # with one, the true difference is signed: a true deficit smaller than the margin can still be shown
    effect_abs = abs(float(effect)) if margin == 0 else float(effect)
    if not 0 < alpha < 1:
        raise ReplicatePlanError(f"alpha = {alpha!r}; expected a level between 0 and 1, e.g. 0.05")
    if not 0 < power_wanted < 1:
        raise ReplicatePlanError(f"power = {power_wanted!r}; expected a probability between 0 and 1, e.g. 0.8")
    if margin < 0 or not math.isfinite(margin):
        raise ReplicatePlanError(f"margin = {margin!r}; expected a number >= 0 (the noninferiority margin)")
    if effect_abs + margin <= 0:
        raise ReplicatePlanError(f"effect = {effect!r} with margin {margin!r}: no k has power when effect + margin "
                                 "<= 0; expected an effect above -margin (or, without a margin, not 0)")
    curve: list[PowerPoint] = []
    k = None
    for n in range(2, K_MAX + 1):
        p = power(sd, effect_abs, n, margin, alpha, one_sided)
        curve.append(PowerPoint(k=n, power=p))
        if p >= power_wanted:
            k = n
            break
    if k is None:
        raise ReplicatePlanError(f"no k up to {K_MAX} reaches power {power_wanted} (sd {sd}, effect {effect}); "
                                 "expected a larger effect or a smaller sd")
    curve += [PowerPoint(k=n, power=power(sd, effect_abs, n, margin, alpha, one_sided)) for n in (k + 1, k + 2)]
    return ReplicatePlan(k=k, power_at_k=curve[k - 2].power, curve=tuple(curve), rule=PLAN_RULE,
                         inputs=PlanInputs(sd=sd, effect=float(effect), margin=float(margin), alpha=alpha,
                                           power=power_wanted, one_sided=bool(one_sided)))


def shared_item_variance(per_item: np.ndarray) -> float:
    """The shared item-sampling variance of the mean difference, from per-item differences `per_item` [k, n]
    (replicate x item, each replicate's measure = the row mean): (var over items of the replicate means minus
    the interaction mean square / k) / n, floored at 0 (the two-way decomposition in the module docstring)."""
    x = np.asarray(per_item, dtype=np.float64)
    k, n = x.shape
    if n < 2:
        return 0.0
    item_means = x.mean(axis=0)
    between_items = item_means.var(ddof=1)
    if k < 2:
        return between_items / n  # one scoring: the whole item variance (an upper bound of the shared part)
    resid = x - x.mean(axis=1, keepdims=True) - item_means + x.mean()
    ms_resid = (resid ** 2).sum() / ((k - 1) * (n - 1))
    return max(0.0, between_items - ms_resid / k) / n


def paired_interval(differences, item_variance: float = 0.0, confidence: float = 0.95) -> PairedInterval:
    """The t interval of the mean of k paired replicate differences (ANALYSIS_RULE); not estimable below two
    replicates or with no spread (`why` says which)."""
    d = tuple(float(v) for v in differences)
    k = len(d)
    if k < 2:
        return PairedInterval(k=k, values=d, mean=sum(d) / k if k else None, sd=None, df=None, se=None, lower=None,
                              upper=None, confidence=confidence, item_variance=item_variance, estimable=False,
                              why=f"not estimable: {k} replicate{'s' if k != 1 else ''} (a spread needs at least 2)")
    mean, sd = sum(d) / k, float(np.std(d, ddof=1))
    if sd == 0:
        return PairedInterval(k=k, values=d, mean=mean, sd=sd, df=k - 1, se=None, lower=None, upper=None,
                              confidence=confidence, item_variance=item_variance, estimable=False,
                              why=f"not estimable: the {k} replicates agree exactly (zero spread)")
    se = math.sqrt(sd ** 2 / k + item_variance)
    t = stats.t.ppf(1 - (1 - confidence) / 2, k - 1)
    return PairedInterval(k=k, values=d, mean=mean, sd=sd, df=k - 1, se=se, lower=mean - t * se, upper=mean + t * se,
                          confidence=confidence, item_variance=item_variance, estimable=True, why=None)


def one_sided_bound(interval: PairedInterval, side: str = "lower", level: float = 0.95) -> float | None:
    """The one-sided `level` bound (t, k - 1 df) of an estimable `paired_interval` result, else None."""
    if not interval.estimable or interval.mean is None or interval.se is None:
        return None
    t = stats.t.ppf(level, interval.df)
    return interval.mean + (-t if side == "lower" else t) * interval.se


def reading(subject: str, interval: PairedInterval, unit: str = "points", scale: float = 100.0,
            higher: str = "beats", lower: str = "trails", margin: float | None = None, decimals: int = 1) -> str:
    """One sentence for a question, computed from `interval` (values in the measure's own units, shown times
    `scale` in `unit`): how many replicates have each sign, the mean, the interval with its df, and whether
    the interval excludes 0 (and, with `margin`, whether its lower end clears -margin)."""
    k, vals = interval.k, interval.values

    def f(x):
        return f"{scale * x:+.{decimals}f}"

    if k == 0:
        return f"{subject}: no replicate scored."
    pos, neg = sum(v > 0 for v in vals), sum(v < 0 for v in vals)
    lead = (f"{subject}: {higher} in {pos} of {k} replicates" if pos >= neg else
            f"{subject}: {lower} in {neg} of {k} replicates")
    lead += f" ({', '.join(f(v) for v in vals)} {unit}), mean {f(interval.mean)} {unit}"
    if not interval.estimable or interval.lower is None or interval.upper is None:
        return f"{lead}; {interval.why}."
    pct = round(100 * interval.confidence)
    lead += (f", {pct}% interval [{f(interval.lower)}, {f(interval.upper)}] (t, {interval.df} df"
             + (", item sampling added" if interval.item_variance else "") + ")")
    if interval.lower > 0:
        words = f"{higher}, the interval above 0"
    elif interval.upper < 0:
        words = f"{lower}, the interval below 0"
    else:
        words = "no difference established: the interval covers 0"
    if margin is not None:
        clears = interval.lower > -margin
        words += (f"; its lower end {'clears' if clears else 'does not clear'} the noninferiority margin "
                  f"{f(-margin)} {unit}")
    return f"{lead}: {words}."
