"""What each verdict's numbers say: per verdict row, its estimate, its bound (the one-sided 95% bound its rule
tests, the page's one interval convention), the opposite one-sided bound where a reading needs it (from the recorded
normal multiplier and bound: se = (bound - estimate) / multiplier) and a one-line reading computed from them (pass,
fail, or inconclusive where the estimate passes and its bound does not), with the smallest true effect that passes
(or fails) with 80% probability at the n used. Reads only the sidecars the verdict rows read.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from math import comb

from kit.evidence.report.analysis import sign_test_p
from kit.evidence.report.cost import retention_pairs
from kit.evidence.report.evaluation_files import evaluation_items
from kit.evidence.report.format import fmt, is_number
from kit.evidence.report.index import RunIndex, index, run_contract
from kit.evidence.report.sidecar_formats import (
    Gates,
    NllChangeBounds,
    ScreenQuality,
    paired_task_changes,
    retention_changes,
    sidecar,
)
from kit.evidence.report.verdict_rows import VerdictRow, direction_text, question_text, verdict_rows

Z80 = 0.8416212335729143  # the one-sided normal quantile of 80% power


def _se(estimate, bound, multiplier):
    if not all(is_number(x) for x in (estimate, bound, multiplier)) or not multiplier:
        return None
    return abs(bound - estimate) / multiplier


@dataclass(frozen=True, slots=True)
class Numbers:
    """One verdict row's numbers, None where the record holds no such number. side: "below" (passes when the bound
    is below the threshold), "above", "equal" or "count" (gained and lost answers: estimate is the net, n the
    discordant answers). lower/upper: the one-sided 95% bounds on either side of the estimate (mult x se)."""

    side: str | None = None
    estimate: float | None = None
    bound: float | None = None  # the bound the rule tests (the row's value), None for a count or an equality
    se: float | None = None
    n: int | None = None
    mult: float | None = None
    lower: float | None = None
    upper: float | None = None
    lower_bound: float | None = None  # the study's task gain: the recorded lower bound against the seed
    threshold_value: float | None = None  # the row's, where a summary row carries its numbers

    def gained_lost(self) -> tuple[int, int]:
        """A count's answers gained and lost, from its net (the estimate) and its discordant answers (n)."""
        n, net = int(self.n or 0), int(self.estimate or 0)
        return (n + net) // 2, (n - net) // 2


def numbers(row: VerdictRow, idx: RunIndex) -> Numbers:
    """The numbers of one verdict row, read from the sidecars of the run it came from."""
    side = estimate = se = n = mult = None
    bound = row.value
    run = idx.by_id.get(row.runs[0])
    check = row.check
    if row.experiment == "adaptive" and check in ("gain", "retention"):
        bounds = sidecar(run, NllChangeBounds)
        side = "below"
        if bounds is not None:
            b = bounds.part("tasks" if check == "gain" else "retention")
            estimate, n, mult = b.change_nats_per_token, b.n, b.normal_multiplier
            se = _se(b.change_nats_per_token, b.normal_upper, b.normal_multiplier)
    elif check == "generated":
        gates = sidecar(run, Gates)
        if gates is not None:
            g = gates.generated
            estimate, n, side, bound = g.gained - g.lost, g.gained + g.lost, "count", None
    elif check.startswith("learned state equal"):
        estimate, bound, side = row.value, None, "equal"
    elif row.experiment == "study":
        changes = paired_task_changes(run) or {}
        quality = sidecar(run, ScreenQuality)
        screen_mult = quality.thresholds.normal_multiplier if quality else None
        if check == "task_gain":
            bound, side, mult = None, "above", 0.0
            c = changes.get("powersgd vs seed")
            if c is not None:
                estimate, n, se = c.difference, c.n, _se(c.difference, c.noninferiority_lower, screen_mult)
        elif check.startswith("noninferior_to_"):
            side, mult = "above", screen_mult
            c = changes.get(f"powersgd vs {check[len('noninferior_to_'):]}")
            if c is not None:
                estimate, n, se = c.difference, c.n, _se(c.difference, c.noninferiority_lower, screen_mult)
        elif check == "retention":
            side = "below"
            r = (retention_changes(run) or {}).get("powersgd")
            if r is not None:
                estimate, n, mult = r.change_nats_per_token, r.n, r.multiplier
                se = _se(r.change_nats_per_token, r.upper, r.multiplier)
    m = mult if is_number(mult) and mult else 1.645
    lower = upper = None
    if is_number(estimate) and is_number(se):  # the one-sided 95% bounds on either side
        lower, upper = estimate - m * se, estimate + m * se
    return Numbers(side=side, estimate=estimate, bound=bound, se=se, n=n, mult=mult, lower=lower, upper=upper)


def tie_probability(d: int) -> float:
    """P(gained == lost) among d discordant answers when each is equally likely either way."""
    return comb(d, d // 2) / 2 ** d if d % 2 == 0 else 0.0


def reading(row: VerdictRow, x: Numbers) -> str:
    """One line computed from the row's numbers: pass, fail, inconclusive (the estimate passes, its one-sided 95%
    bound does not) or not evaluable (a count of changed answers with none changed)."""
    v, t = row.verdict, row.threshold_value
    if x.side == "count":
        gained, lost = x.gained_lost()
        if not x.n:
            return f"not evaluable ({v} by its rule): no discordant answers"
        p = sign_test_p(gained, lost)
        within = "within" if p >= 0.05 else "beyond"
        return (f"{v}: lost {lost} vs gained {gained} of {x.n} discordant answers, sign test p = {fmt(p)} "
                f"({within} chance)")
    if row.check == "quality screen (all parts)":
        return f"{v}: {'every part passes' if v == 'pass' else 'a part does not pass'}"
    if x.side == "equal":
        return f"{v}: max |parameter difference| {fmt(x.estimate)}"
    est = x.estimate
    bound = x.bound if is_number(x.bound) else (x.lower if x.side == "above" else x.upper)
    if not (is_number(est) and is_number(bound) and is_number(t)):
        return f"{v}: {row.reason or row.statistic or ''}".rstrip(": ")
    below = x.side == "below"
    est_ok, bound_ok = (est < t, bound < t) if below else (est > t, bound > t)
    where = ("below" if bound_ok else "above") if below else ("above" if bound_ok else "below")
    if est_ok and not bound_ok:
        return (f"inconclusive ({v} by its rule): the estimate {fmt(est)} passes {fmt(t)}, its one-sided 95% bound "
                f"{fmt(bound)} does not")
    if bound_ok:
        return f"pass: the one-sided 95% bound {fmt(bound)} lies {where} {fmt(t)}"
    return f"fail: the estimate {fmt(est)} and its one-sided 95% bound {fmt(bound)} lie {where} {fmt(t)}"


def power(row: VerdictRow, x: Numbers, idx: RunIndex) -> str:
    """The minimum detectable effect of one verdict at its n (80% power), or the pass rate under no change."""
    t, se = row.threshold_value, x.se
    mult = x.mult
    if x.side == "count" and not x.n:
        return "not evaluable: no discordant answers"
    if x.side == "count":
        return (f"{100 * (0.5 + tie_probability(x.n or 0) / 2):.0f}% chance to pass under no change at "
                f"{x.n} discordant answers (no sampling tolerance)")
    if not (is_number(t) and is_number(se) and is_number(mult)) or se <= 0:
        return ""
    if x.side == "below":
        if row.check == "retention":
            return (f"fails with 80% probability when the true change is \u2265 {fmt(t - (mult - Z80) * se)} "
                    f"nats/token (se {fmt(se)}, n {fmt(x.n)})")
        return (f"passes with 80% probability only if the true change is \u2264 {fmt(t - (mult + Z80) * se)} "
                f"nats/token (se {fmt(se)}, n {fmt(x.n)})")
    if mult == 0:  # a point difference against its threshold (the study's task gain)
        return f"passes with 80% probability when the true gain is \u2265 {fmt(t + Z80 * se)} (se {fmt(se)})"
    p_equal = _phi(-t / se - mult)  # a bound of the difference above -margin, when the arms are equal
    return (f"{100 * p_equal:.0f}% power if the arms are truly equal; passes with 80% probability when the true "
            f"difference is \u2265 {fmt(t + (mult + Z80) * se)} (se {fmt(se)}, n {fmt(x.n)})")


def _phi(z: float) -> float:
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


SUMMARY_COLUMNS = ["question", "check", "verdict", "estimate", "bound", "threshold", "passing side", "reading"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SummaryRow:
    """One verdict read (in memory): its question and check, the plain question, the verdict, what the reading and
    the power sentences say, and the numbers they were computed from (with the threshold as a number)."""
    question: str
    plain: str
    check: str
    verdict: str
    threshold: str  # the rule's side and threshold, in words
    passing_side: str
    reading: str
    power: str
    source: str
    runs: tuple[str, ...]
    numbers: Numbers


def summary_rows(runs_dir) -> list[SummaryRow]:
    idx = index(runs_dir)
    rows = verdict_rows(runs_dir)
    out = []
    for row in rows.all():
        x = numbers(row, idx)
        out.append(SummaryRow(question=row.comparison, plain=question_text(row), check=row.check,
                              verdict=str(row.verdict), threshold=row.threshold,
                              passing_side=direction_text(row).split(":")[0], reading=reading(row, x),
                              power=power(row, x, idx), source=row.source, runs=tuple(row.runs),
                              numbers=dataclasses.replace(x, threshold_value=row.threshold_value)))
    return out


def reading_sentences(runs_dir) -> list[str]:
    """The readings the verdict table alone would hide, each computed from the rows' numbers: an inconclusive
    or failing gate with its estimate, bound and the effect it would need to pass, a retention change beyond its
    one-sided 95% bounds, the retention baseline and the study's in-distribution retention probes."""
    idx = index(runs_dir)
    out = []
    for r in summary_rows(runs_dir):
        x, t = r.numbers, r.threshold
        bounded = x.side in ("below", "above") and is_number(x.estimate) and is_number(x.bound)
        if r.reading.startswith("inconclusive") or (bounded and r.verdict == "fail" and r.check == "gain"):
            out.append(f"\u201c{r.plain}\u201d {'is inconclusive' if r.reading.startswith('inc') else 'fails'}: "
                       f"estimate {fmt(x.estimate)}, one-sided 95% bound {fmt(x.bound)} against {t}"
                       f"{'' if r.verdict == 'pass' or _estimate_passes(x) else '; no detectable improvement'}, "
                       f"and the gate {r.power}.")
        if r.check == "retention" and x.lower is not None and x.upper is not None and (x.lower > 0 or x.upper < 0) \
                and r.question != "quality screen":
            up = x.lower > 0
            out.append(f"\u201c{r.plain}\u201d The chat NLL change is "
                       f"{'positive (the candidate forgot)' if up else 'negative'} beyond chance: "
                       f"{x.estimate:+.3g} nats/token, one-sided 95% {'lower' if up else 'upper'} bound "
                       f"{fmt(x.lower if up else x.upper)}"
                       f"{f', within the allowance {t}' if r.verdict == 'pass' else ''}.")
    out += [s for s in (baseline_sentence(idx), in_distribution_sentence(runs_dir, idx)) if s]
    return out


def _estimate_passes(x: Numbers) -> bool:
    t = x.threshold_value
    return is_number(t) and is_number(x.estimate) and (x.estimate < t if x.side == "below" else x.estimate > t)


def baseline_sentence(idx: RunIndex) -> str | None:
    """The retention NLL of the adaptive trial's seed baseline, from the final evaluation file that its run kept."""
    for r in idx.runs:
        if r.parameters.get("SPLIT") == "final" and \
                str(r.parameters.get("BASELINE", "")).startswith("seed:"):
            items = (evaluation_items(r) or {}).get("retention") or []
            tokens = sum(x.get("tokens", 0) for x in items)
            if tokens:
                nll = sum(x["base_nll"] for x in items) / tokens
                return (f"The adaptive retention baseline is the seed at {fmt(nll)} nats/token on the {len(items)} "
                        f"final retention probes ({r.run_id}): a seed that barely models chat, so retention "
                        "changes are small against a high baseline.")
    return None


def in_distribution_sentence(runs_dir, idx: RunIndex) -> str | None:
    """Whether the study's retention probes come from a source its arms train on (the contract's data), and
    what the arms' retention changes against the seed then say."""
    for r in idx.runs:
        changes = retention_changes(r)
        c = run_contract(r) or {}
        probes, replay = (c.get("data") or {}).get("retention") or {}, (c.get("data") or {}).get("replay") or {}
        if changes is None or not probes:
            continue
        ps, rs = probes.get("source") or {}, replay.get("source") or {}
        arms = "; ".join(f"{a} {fmt(v.change_nats_per_token)}" for a, v in changes.items())
        where = f"{ps.get('name')} rows {ps.get('start')}\u2013{ps.get('stop')}"
        if ps.get("sha256") and ps.get("sha256") == rs.get("sha256"):
            pairs = "; ".join(f"{p.comparison} {fmt(p.change.change_nats_per_token)} ({p.reading})"
                              for p in retention_pairs(runs_dir))
            return (f"The study's retention probes ({probes.get('count')} records of {where}) are in-distribution: every "
                    f"arm trains on {replay.get('count')} records of the same source ({rs.get('name')} rows "
                    f"{rs.get('start')}\u2013{rs.get('stop')}), and every arm lowers retention NLL against the seed "
                    f"({arms} nats/token, {r.run_id}), so the screen's bound reads training on that source, not "
                    "an absence of forgetting; only arm against arm is informative"
                    + (f" ({pairs})." if pairs else "."))
        return (f"The study's retention probes ({probes.get('count')} records of {where}) come from a source the arms "
                f"do not train on ({rs.get('name') or 'no replay'}); the arms' changes against the seed: {arms}.")
    return None
