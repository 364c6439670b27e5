"""The report's analysis of its verdicts: every failing gate or screen part analysed rather than re-run
(a failing gate is never rescued by a re-run on final data), and the study's speed measurement taken
apart, since the screen's single number hides one-time costs that differ between arms. Reads only what
the verdict rows read: committed run records and sidecars.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb
from typing import Any

from kit.evidence.report.format import NOT_EVALUABLE, fmt, is_number
from kit.evidence.report.index import IndexedRun, arm_runs, index, metric
from kit.evidence.report.selection import Selected
from kit.evidence.report.sidecar_formats import (
    Gates,
    Measurement,
    NllChangeBounds,
    ScreenSpeed,
    UnmeasuredArm,
    arm_measurement,
    paired_task_changes,
    retention_changes,
    sidecar,
)
from kit.evidence.report.verdict_rows import SPEED_CHECK, VerdictRow, verdict_rows

CONTROLS = ("single", "dense")
SHARED_CACHE = "the host's shared one (not recorded)"  # arm records before kit.study.arms.own_compile_cache


def sign_test_p(gained: int, lost: int) -> float:
    """Exact two-sided sign test over the discordant answers: P(a split at least this uneven | no change)."""
    d, k = gained + lost, min(gained, lost)
    if d == 0:
        return 1.0
    return min(1.0, 2 * sum(comb(d, i) for i in range(k + 1)) / 2 ** d)


def bound_text(estimate: float, bound: float, threshold: float, n: int, upper: bool, multiplier: float = 1.645) -> str:
    """A bound that failed its threshold: whether the estimate itself passes and, if it does, the number
    of examples at which a bound of the same relative width would clear it (half-width taken to shrink as
    1/sqrt(n), the behaviour of a bound on a mean); if it does not, whether the opposite one-sided 95% bound (the
    estimate mirrored across the recorded bound: the page's one interval convention) still lies on the passing
    side (inconclusive) or not (a detected failure)."""
    half = abs(bound - estimate)
    margin = (threshold - estimate) if upper else (estimate - threshold)
    if margin > 0:
        need = n * (half / margin) ** 2
        return (f"the estimate passes; the bound's half-width {fmt(half)} exceeds the margin {fmt(margin)}. "
                f"A bound of this relative width clears the threshold at about {need:,.0f} examples "
                f"({need / n:.1f}\u00d7 the {n:,} scored).")
    opposite = estimate - half if upper else estimate + half
    if (opposite < threshold) if upper else (opposite > threshold):
        return (f"inconclusive: the estimate ({fmt(estimate)}) is on the failing side of {fmt(threshold)}, but its "
                f"opposite one-sided 95% bound ({fmt(opposite)}) is on the passing side; no detectable change.")
    return (f"the estimate ({fmt(estimate)}) and its opposite one-sided 95% bound ({fmt(opposite)}) are both on the "
            f"failing side of {fmt(threshold)}.")


@dataclass(frozen=True, slots=True)
class GateAnalysis:
    """A failing gate or screen part, analysed (in memory; a row of the report's analysis table): its estimate
    (a number, or the generated answers' counts in words), the bound tested (None for a point comparison) and
    the threshold as the verdict row states it."""
    comparison: str
    check: str
    run: str
    estimate: Any
    bound: float | None
    threshold: Any
    analysis: str

    def table_row(self) -> dict:
        """The row as the report's table shows it (column -> value)."""
        return {"comparison": self.comparison, "check": self.check, "run": self.run, "estimate": self.estimate,
                "bound": self.bound, "threshold": self.threshold, "analysis": self.analysis}


@dataclass(frozen=True, slots=True)
class SpeedRow:
    """One arm of a study evaluation's speed screen (in memory; a row of the report's speed table)."""
    evaluation: str
    arm: str
    run: str
    workers: int
    device: str | None
    compile_cache: str
    first_update_s: float | None
    later_update_s: float | None
    active_tokens_per_s: float | None
    ratio_active: float | None
    after_first_tokens_per_s: float | None
    ratio_after_first: float | None

    def table_row(self) -> dict:
        """The row as the report's per-evaluation table shows it (the evaluation is the table's heading)."""
        return {"arm": self.arm, "run": self.run, "workers": self.workers, "device": self.device,
                "compile_cache": self.compile_cache, "first_update_s": self.first_update_s,
                "later_update_s": self.later_update_s, "active_tokens_per_s": self.active_tokens_per_s,
                "ratio_active": self.ratio_active, "after_first_tokens_per_s": self.after_first_tokens_per_s,
                "ratio_after_first": self.ratio_after_first}


@dataclass(frozen=True, slots=True)
class SpeedSensitivity:
    """The speed screen's ratio with and without each arm's first update, their verdicts at the contract's
    threshold, and the sentence that says whether the verdict turns on it (in memory)."""
    ratio_active: float
    ratio_after_first: float
    verdict_active: str
    verdict_after_first: str
    threshold: float
    text: str


def gate_analysis_rows(runs_dir) -> list[GateAnalysis]:
    """Each failing adaptive gate and each failing part of a study screen, analysed."""
    idx = index(runs_dir)
    rows = verdict_rows(runs_dir)
    out = []
    for row in rows.adaptive:
        if row.verdict == "fail" and row.check in ("gain", "retention", "generated"):
            out += _adaptive_analysis(row, idx.by_id[row.runs[0]])
    for row in rows.study:
        if row.verdict == "fail" and (row.check in ("task_gain", "retention", SPEED_CHECK)
                                         or row.check.startswith("noninferior_to_")):
            out += _study_analysis(row, idx.by_id[row.runs[0]], runs_dir)
    return out


def _adaptive_analysis(row: VerdictRow, run: IndexedRun) -> list[GateAnalysis]:
    if row.check == "generated":
        gates = sidecar(run, Gates)
        gained, lost = (gates.generated.gained, gates.generated.lost) if gates else (0, 0)
        p = sign_test_p(gained, lost)
        return [_analysed(row, run, f"net {gained - lost:+d} ({gained} gained, {lost} lost)", None,
                          "lost \u2264 gained (no tolerance)",
                          f"{gained + lost} discordant answer{'s' if gained + lost != 1 else ''}; "
                          f"exact two-sided sign test p = {fmt(p)}. "
                          + ("The split is within what no change produces; the gate has no sampling "
                             "tolerance, so at equal true rates a larger sample fails it about half the "
                             "time." if p >= 0.05 else "The loss is larger than no change explains."))]
    bounds, t = sidecar(run, NllChangeBounds), row.threshold_value
    if bounds is None or t is None:
        return []
    b = bounds.part("tasks" if row.check == "gain" else "retention")
    est, upper = b.change_nats_per_token, b.bootstrap_upper
    return [_analysed(row, run, est, upper, row.threshold,
                      bound_text(est, upper, t, b.n, upper=True, multiplier=b.normal_multiplier or 1.645))]


def _analysed(row: VerdictRow, run: IndexedRun, estimate: Any, bound: float | None, threshold: Any,
              analysis: str) -> GateAnalysis:
    return GateAnalysis(comparison=row.comparison, check=row.check, run=run.run_id, estimate=estimate, bound=bound,
                        threshold=threshold, analysis=analysis)


def _study_analysis(row: VerdictRow, run: IndexedRun, runs_dir: Selected) -> list[GateAnalysis]:
    """A failing part of the study's screens, from the evaluation run's sidecars (candidate: powersgd)."""
    changes = paired_task_changes(run) or {}
    t = row.threshold_value
    if row.check == "task_gain":
        c = changes.get("powersgd vs seed")
        if c is None or t is None:
            return []
        n = c.n
        controls = {a: ch for a in CONTROLS if (ch := changes.get(f"{a} vs seed")) is not None}
        text = (f"the screen compares the point difference in accuracy with {fmt(t)}, not a bound: PowerSGD "
                f"{c.candidate_correct}/{n:,} against the seed's {c.reference_correct}/{n:,} misses it by "
                f"{fmt(t - c.difference)} ({c.gained} gained, {c.lost} lost; exact sign test "
                f"p = {fmt(sign_test_p(c.gained, c.lost))}); a larger sample does not move a point "
                "difference towards the threshold.")
        if controls:
            text += " The controls against the seed: " + "; ".join(
                f"{a} {ch.candidate_correct}/{ch.n:,} ({fmt(ch.difference)})" for a, ch in controls.items())
            if all(ch.difference < t for ch in controls.values()):
                text += (". No arm reaches the gain, the controls included: this part fails for the seed and the "
                         "contract at this scale, not for the reduction.")
            else:
                text += "."
        return [_analysed(row, run, c.difference, None, row.threshold, text)]
    if row.check == "retention":
        r = (retention_changes(run) or {}).get("powersgd")
        if r is None or t is None:
            return []
        return [_analysed(row, run, r.change_nats_per_token, r.upper, row.threshold,
                          bound_text(r.change_nats_per_token, r.upper, t, r.n, upper=True))]
    if row.check.startswith("noninferior_to_"):
        ctrl = row.check[len("noninferior_to_"):]
        c = changes.get(f"powersgd vs {ctrl}")
        if c is None or t is None:
            return []
        return [_analysed(row, run, c.difference, c.noninferiority_lower, row.threshold,
                          bound_text(c.difference, c.noninferiority_lower, t, c.n, upper=False))]
    s = speed_sensitivity(runs_dir, run.run_id)  # the speed screen
    return [_analysed(row, run, row.value, None, row.threshold, s.text if s else "no arm measurements to analyse")]


def speed_rows(runs_dir) -> list[SpeedRow]:
    """Per arm of each study evaluation: first update seconds, active tokens/s with and without it, and
    the ratio of each to the single arm's. The screen's "active" time is update time only (no setup, no
    commits) but includes the first update, whose one-time costs (on CUDA, compiling the blocks and the
    first collectives) are not the method's per-update cost and need not be equal across arms."""
    idx = index(runs_dir)
    out = []
    for r in idx.runs:
        if not isinstance(metric(r, "screen_speed"), dict):
            continue
        arms = arm_runs(r, idx)
        measured = {a: arm_measurement(idx.by_id[name]) for a, name in arms.items()}
        single_active, single_after = _rates(measured.get("single"))
        for arm, m in measured.items():
            if m is None:
                continue
            active, after = _rates(m)
            timed = m if isinstance(m, Measurement) else None  # an arm no rank reported for has no times
            out.append(SpeedRow(evaluation=r.run_id, arm=arm, run=arms[arm],
                                workers=m.workers if m.workers is not None else m.devices,
                                device=timed.device if timed else None,
                                compile_cache=(timed.compile_cache if timed else None) or SHARED_CACHE,
                                first_update_s=timed.first_update_seconds if timed else None,
                                later_update_s=_later_update_s(timed),
                                active_tokens_per_s=active, ratio_active=_ratio(active, single_active),
                                after_first_tokens_per_s=after, ratio_after_first=_ratio(after, single_after)))
    return out


def _rates(m: Measurement | UnmeasuredArm | None) -> tuple[float | None, float | None]:
    """(active tokens/s, the same without the first update) of an arm's measurement; None where not measured."""
    if isinstance(m, Measurement):
        return m.active_tokens_per_s, m.active_tokens_per_s_after_first_update
    return None, None


def _later_update_s(m: Measurement | None) -> float | None:
    """Seconds of an update after the first (steady_state_seconds / steady_state_updates); None without one."""
    if m is None or not m.steady_state_updates or m.steady_state_seconds is None:
        return None
    return m.steady_state_seconds / m.steady_state_updates


def _ratio(mine: float | None, reference: float | None) -> float | None:
    """mine / reference; None where either is not measured (or the reference is 0)."""
    if mine is None or not reference:
        return None
    return mine / reference




def speed_reason(runs_dir, evaluation: str) -> str | None:
    """Why the speed screen of one study evaluation was not measured (its `reason`, e.g. workers that
    shared one GPU); None when it has a ratio or records no reason (records made before the field)."""
    screen = sidecar(index(runs_dir).by_id[evaluation], ScreenSpeed)
    if screen is None or screen.verdict != NOT_EVALUABLE:
        return None
    return screen.reason


def speed_sensitivity(runs_dir, evaluation: str) -> SpeedSensitivity | None:
    """The speed screen of one study evaluation (its run id) under the contract's measurement and without
    each arm's first update; None without both arms' measurements, and None when the screen's arms shared
    GPUs (a ratio of time-sliced GPUs is not the method's: speed_reason says so)."""
    rows = {r.arm: r for r in speed_rows(runs_dir) if r.evaluation == evaluation}
    screen = sidecar(index(runs_dir).by_id[evaluation], ScreenSpeed)
    p = rows.get("powersgd")
    ratio_active, ratio_after_first = (p.ratio_active, p.ratio_after_first) if p else (None, None)
    if not (screen and ratio_active is not None and ratio_after_first is not None and is_number(ratio_active)
            and is_number(ratio_after_first)):
        return None
    if screen.shared_gpus:
        return None
    t = screen.thresholds.min_speedup
    first = {a: r.first_update_s for a, r in rows.items() if is_number(r.first_update_s)}
    later = [r.later_update_s for r in rows.values() if is_number(r.later_update_s)]

    def verdict(x):
        return "pass" if is_number(t) and x >= t else "fail"

    same = verdict(ratio_active) == verdict(ratio_after_first)
    text = (f"The screen's ratio {fmt(ratio_active)} counts each arm's first update, which took "
            + ", ".join(f"{a} {fmt(s)} s" for a, s in first.items())
            + (f" against {fmt(min(later))}-{fmt(max(later))} s for a later update" if later else "")
            + f". Without the first update the ratio is {fmt(ratio_after_first)} "
            + f"({verdict(ratio_after_first)} at \u2265 {fmt(t)}): "
            + ("the verdict does not depend on it." if same else "the verdict depends on it."))
    if any(r.compile_cache == SHARED_CACHE and str(r.device).startswith("cuda") for r in rows.values()):
        # compiled blocks only on CUDA (kit/distributed/pipeline.py): on CPU there is no cache to share
        text += (" These arms compiled through the host's shared compile cache (their records predate one empty "
                 "cache per worker), so an arm's first update depends on the arms that ran before it on the host "
                 "(bench/study_first_update.py).")
    dense = rows.get("dense")
    if dense is not None and dense.ratio_after_first is not None and is_number(dense.ratio_after_first):
        text += (f" Dense, without its first update, runs at {fmt(dense.ratio_after_first)}\u00d7 single; "
                 f"PowerSGD at {fmt(ratio_after_first / dense.ratio_after_first)}\u00d7 dense.")
    return SpeedSensitivity(ratio_active=ratio_active, ratio_after_first=ratio_after_first,
                            verdict_active=verdict(ratio_active), verdict_after_first=verdict(ratio_after_first),
                            threshold=t, text=text)
