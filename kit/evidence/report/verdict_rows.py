"""The rows of the report's verdict tables, computed from the sidecars that hold a verdict:
gates.json (adaptive and continued learning), comparison.json (migration and growth), a GPU
campaign's kit-bench/1 comparisons, and screen_quality.json / screen_speed.json (the study).
The page shows exactly these values (tests parse them back), each beside the sentence that says
which side of its threshold passes.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from kit.digest import load_json_strict
from kit.evidence import run_record as records
from kit.evidence.report.format import NONE, NOT_EVALUABLE, fmt, is_number, kv_table, records_table, run_link
from kit.evidence.report.index import IndexedRun, RunIndex, arm_runs, index, producer
from kit.evidence.report.selection import Selected
from kit.evidence.report.sidecar_formats import (
    BoundGate,
    Comparison,
    Gates,
    GateVerdict,
    ScreenQuality,
    ScreenSpeed,
    sidecar,
)


# --- verdicts --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class VerdictRow:
    """One row of a verdict table: a check of a comparison, the statistic its rule tests, the threshold and the
    verdict, the runs it came from and the sidecar (or benchmark result) that holds its numbers."""

    experiment: str  # "adaptive" (gates, migration, growth, the GPU campaign's comparisons) or "study" (screens)
    comparison: str  # the contract's comparison ("B_vs_A"), "migration, cohort A", "quality screen", ...
    check: str  # the gate or screen part ("gain", "noninferior_to_dense", SPEED_CHECK, ...)
    statistic: str  # what `value` is, in words
    value: float | None  # the number the rule compares (None where the check has none)
    threshold: str  # the rule's side and threshold, in words
    threshold_value: float | None
    verdict: str | None  # "pass", "fail", "not evaluable", "n/a"; a screen's own (None where it records none)
    runs: tuple[str, ...]  # the run holding the numbers first, then the runs it compares
    source: str  # RUN/metrics/NAME.json, or RUN/run.json#results/INDEX
    candidate: str | None = None  # a gate's models (gate_verdict.json)
    baseline: str | None = None
    recorded: str | None = None  # the gate's own verdict where the row shows "not evaluable" instead
    reason: str | None = None  # why a speed screen was not measured


@dataclass(frozen=True, slots=True)
class VerdictRows:
    adaptive: list[VerdictRow]
    study: list[VerdictRow]

    def all(self) -> list[VerdictRow]:
        return self.adaptive + self.study


def verdict_rows(runs_dir: Selected) -> VerdictRows:
    """The verdict rows of the selection's runs, in order of start: the adaptive experiment's and the study's."""
    idx = index(runs_dir)
    adaptive: list[VerdictRow] = []
    study: list[VerdictRow] = []
    for r in idx.runs:
        gates = sidecar(r, Gates)
        if gates is not None:
            adaptive += _gate_rows(r, gates, sidecar(r, GateVerdict), idx)
        comparison = sidecar(r, Comparison)
        if comparison is not None:
            adaptive.append(_comparison_row(r, comparison, idx))
        if r.notebook == "(benchmark script)":  # a GPU campaign's migration comparison (kit-bench/1)
            adaptive += _bench_comparison_rows(r, idx)
        quality, speed = sidecar(r, ScreenQuality), sidecar(r, ScreenSpeed)
        if quality is not None:
            study += _quality_rows(r, quality, idx)
        if speed is not None:
            study.append(_speed_row(r, speed, idx))
    return VerdictRows(adaptive, study)


def _gate_rows(r: IndexedRun, gates: Gates, gv: GateVerdict | None, idx: RunIndex) -> list[VerdictRow]:
    comp = gv.comparison if gv else r.run_id
    candidate, baseline = (gv.candidate, gv.baseline) if gv else (None, None)
    runs = (r.run_id, *(n for m in (candidate, baseline) if m for n in idx.runs_by_root.get(m, [])))
    out = []
    for name, g in gates.checks():
        verdict = "pass" if g.passed else "fail"
        if isinstance(g, BoundGate):
            op = "<" if "< threshold" in g.rule else "\u2264"
            statistic, value, threshold, threshold_value = (
                "upper 95% bootstrap bound, NLL change (nats/token)", g.upper, f"{op} {fmt(g.threshold)}", g.threshold)
        else:
            statistic, value, threshold, threshold_value = (
                "correct generated answers lost", g.lost, f"\u2264 gained ({g.gained})", g.gained)
        # no discordant answer: the rule's pass weighs nothing
        evaluable = isinstance(g, BoundGate) or bool(g.lost or g.gained)
        out.append(VerdictRow(experiment="adaptive", comparison=comp, check=name, statistic=statistic, value=value,
                              threshold=threshold, threshold_value=threshold_value,
                              verdict=verdict if evaluable else NOT_EVALUABLE, runs=runs, candidate=candidate,
                              baseline=baseline, source=f"{r.run_id}/metrics/gates.json",
                              recorded=None if evaluable else verdict))
    return out


def _comparison_row(r: IndexedRun, comparison: Comparison, idx: RunIndex) -> VerdictRow:
    params = r.parameters
    cand = [producer(comparison.candidate_learned_state_root, idx) or producer(params.get("CANDIDATE_ROOT", ""), idx)]
    ctrl = [producer(comparison.control_learned_state_root, idx) or producer(params.get("CONTROL_ROOT", ""), idx)]
    runs = (r.run_id, *(n for n in cand + ctrl if n))
    src = f"{r.run_id}/metrics/comparison.json"
    if comparison.same_parameter_names:
        return VerdictRow(experiment="adaptive", comparison=f"migration, cohort {comparison.cohort}",
                          check="learned state equal to the uninterrupted control",
                          statistic="max |parameter difference|", value=comparison.max_abs_parameter_difference,
                          threshold="= 0 (equal learned-state roots)", threshold_value=0,
                          verdict="pass" if comparison.learned_state_equal else "fail", runs=runs, source=src)
    return VerdictRow(experiment="adaptive", comparison=f"growth, cohort {comparison.cohort}",
                      check="structure vs the fixed-depth control",
                      statistic="parameter names and shapes differ (appended blocks): not compared elementwise",
                      value=None, threshold="quality is judged by the growth gates", threshold_value=None,
                      verdict="n/a", runs=runs, source=src)


def _bench_results(row: IndexedRun) -> list:
    try:
        rec = load_json_strict(row.dir / records.RUN_RECORD_NAME)
    except (FileNotFoundError, ValueError):
        return []
    res = rec.get("results")
    return res if isinstance(res, list) else []


def _bench_comparison_rows(r: IndexedRun, idx: RunIndex) -> list[VerdictRow]:
    out = []
    for i, x in enumerate(_bench_results(r)):
        if not (isinstance(x, dict) and "learned_state_equal" in x):
            continue
        same = x.get("parameters_differing") is not None
        out.append(VerdictRow(
            experiment="adaptive", comparison=f"GPU campaign {x.get('phase', 'comparison')}",
            check="learned state equal to the uninterrupted control" if same else
                  "structure vs the control (not compared elementwise)",
            statistic="max |parameter difference|", value=x.get("max_abs_parameter_difference"),
            threshold="= 0 (equal learned-state roots)" if same else "n/a", threshold_value=0 if same else None,
            verdict=("pass" if x["learned_state_equal"] else "fail") if same else "n/a",
            runs=(r.run_id,), source=f"{r.run_id}/run.json#results/{i}"))
    return out


SPEED_CHECK = "speed: candidate / single-GPU active throughput"


def _speed_row(r: IndexedRun, s: ScreenSpeed, idx: RunIndex) -> VerdictRow:
    arms = arm_runs(r, idx)
    # a screen that says why it was not measured (workers that shared GPUs) shows that reason beside the ratio
    reason = s.reason if s.ratio is None else None
    return VerdictRow(
        experiment="study", comparison=f"{s.name} screen", source=f"{r.run_id}/metrics/{ScreenSpeed.NAME}.json",
        check=SPEED_CHECK,
        statistic=(f"ratio ({fmt(s.inputs.candidate_active_tokens_per_s)} / "
                   f"{fmt(s.inputs.baseline_active_tokens_per_s)} tokens/s)" + (f"; {reason}" if reason else "")),
        value=s.ratio, threshold=f"\u2265 {fmt(s.thresholds.min_speedup)}",
        threshold_value=s.thresholds.min_speedup, verdict=s.verdict, reason=reason,
        runs=(r.run_id, *(arms[a] for a in ("powersgd", "single") if a in arms)))


def _quality_rows(r: IndexedRun, s: ScreenQuality, idx: RunIndex) -> list[VerdictRow]:
    arms = arm_runs(r, idx)
    src = f"{r.run_id}/metrics/{ScreenQuality.NAME}.json"
    t, inp = s.thresholds, s.inputs
    comparison = f"{s.name} screen"
    out = []
    for name, ok in s.checks.items():
        runs = (r.run_id, *([arms["powersgd"]] if "powersgd" in arms else []))
        part = {"experiment": "study", "comparison": comparison, "source": src, "check": name,
                "verdict": "pass" if ok else "fail"}
        if name == "task_gain":
            out.append(VerdictRow(**part, runs=runs, statistic="task accuracy gain over the seed",
                                  value=inp.task_gain, threshold=f"\u2265 {fmt(t.min_task_gain)}",
                                  threshold_value=t.min_task_gain))
        elif name == "retention":
            out.append(VerdictRow(**part, runs=runs, statistic="retention upper bound (nats/token, normal)",
                                  value=inp.retention_upper,
                                  threshold=f"\u2264 {fmt(t.max_retention_upper_nats)}",
                                  threshold_value=t.max_retention_upper_nats))
        elif name.startswith("noninferior_to_"):
            ctrl = name[len("noninferior_to_"):]
            margin = t.noninferiority_margin
            out.append(VerdictRow(**part, runs=runs + ((arms[ctrl],) if ctrl in arms else ()),
                                  statistic=f"accuracy difference vs {ctrl}, lower bound",
                                  value=inp.noninferiority_lower.get(ctrl),
                                  threshold=f"> {fmt(-margin) if is_number(margin) else NONE}",
                                  threshold_value=-margin if is_number(margin) else None))
        else:
            out.append(VerdictRow(**part, runs=runs, statistic=name, value=None, threshold=s.rule,
                                  threshold_value=None))
    out.append(VerdictRow(experiment="study", comparison=comparison, source=src, check="quality screen (all parts)",
                          statistic=s.rule, value=None, threshold="every part passes", threshold_value=None,
                          verdict=s.verdict, runs=(r.run_id,)))
    return out


# Who is compared in each of the adaptive trial's comparisons (the contract's identifiers), in a reviewer's words
WHO = {"seed": "the seed", "A": "cohort A", "B": "cohort B", "C": "the continued-learning cohort C",
       "growth": "the grown model", "control": "its fixed-depth control"}

def _who(name: str) -> str:
    return WHO.get(name, f"cohort {name}" if len(name) == 1 else name)


def _pair(comparison: str) -> tuple[str, str]:
    cand, _, base = comparison.partition("_vs_")
    return _who(cand), _who(base)


def question_text(row: VerdictRow) -> str:
    """The question a verdict row answers, in a reviewer's words; its thresholds read from the row."""
    check, comp, t = row.check, row.comparison, row.threshold_value
    tv = fmt(t) if is_number(t) else ""
    if row.experiment == "adaptive" and "_vs_" in comp:
        cand, base = _pair(comp)
        if check == "gain":
            return f"Does {cand} beat {base} on the final tasks?"
        if check == "generated":
            return f"Does {cand} answer at least as many final tasks right as {base}?"
        if check == "retention":
            return f"Does {cand} keep {base}'s chat ability?"
    if check.startswith("learned state equal"):
        what = comp.replace("migration, ", "").replace("GPU campaign ", "the GPU campaign's ")
        return f"Does a run moved between workers ({what}) end exactly where the uninterrupted run ends?"
    if check.startswith("structure vs"):
        return "Can the grown model be compared weight by weight with its control?"
    if check == "task_gain":
        return f"Does PowerSGD raise task accuracy over the seed by at least {tv}?"
    if check.startswith("noninferior_to_"):
        margin = fmt(-t) if is_number(t) else ""
        return f"Is PowerSGD no worse than {check[len('noninferior_to_'):]} on task accuracy (margin {margin})?"
    if check == "retention":
        return "Does PowerSGD keep the seed's chat ability?"
    if check == "quality screen (all parts)":
        return "Does PowerSGD pass the whole quality screen?"
    if check.startswith("speed"):
        return f"Is PowerSGD at least {tv}\u00d7 as fast as one worker?"
    return f"{comp}: {check}?"


VERDICT_COLUMNS = ["comparison", "check", "statistic", "value", "threshold", "which side passes", "verdict", "runs"]


def direction_text(row: VerdictRow) -> str:
    """One sentence beside a threshold: which direction of the statistic is better, and what passing means,
    read from the row's check and threshold value."""
    check, tv = row.check, row.threshold_value
    t = fmt(tv) if is_number(tv) else ""
    if row.experiment == "adaptive" and check == "gain":
        return (f"Lower is better: the upper bound of the NLL change must be below {t}, i.e. the candidate's NLL "
                "went down by more than that, with 95% confidence.")
    if check == "retention":
        return (f"Lower is better: the upper bound of the retention NLL change must be at most {t} nats/token "
                "(the candidate forgot at most that much).")
    if check == "generated":
        return "Fewer lost is better: it passes when no more correct answers were lost than gained."
    if check.startswith("learned state equal"):
        return "Only 0 passes: the learned states must be bit-equal."
    if check.startswith("speed"):
        return f"Higher is better: the candidate must reach at least {t} times single's active throughput."
    if check == "task_gain":
        return f"Higher is better: the task accuracy gain over the seed must be at least {t}."
    if check.startswith("noninferior_to_"):
        return (f"Higher is better: the lower bound of the accuracy difference must stay above {t} "
                "(not worse than the control by more than the margin).")
    return ""


def verdict_table_html(rows: list[VerdictRow], table_id: str, idx: RunIndex) -> str:
    head = "".join(f"<th>{c}</th>" for c in VERDICT_COLUMNS)
    body = []
    for v in rows:
        value = v.value
        data = f' data-value="{html.escape(repr(value))}"' if is_number(value) else ""
        tv = v.threshold_value
        tdata = f' data-value="{html.escape(repr(tv))}"' if is_number(tv) else ""
        runs = ", ".join(run_link(n) for n in dict.fromkeys(v.runs))
        verdict = str(v.verdict)
        body.append(
            f'<tr data-source="{html.escape(v.source)}"><td>{html.escape(v.comparison)}</td>'
            f'<td>{html.escape(v.check)}</td><td>{html.escape(v.statistic)}</td>'
            f'<td class="num value"{data}>{html.escape(fmt(value))}</td>'
            f'<td class="threshold"{tdata}>{html.escape(v.threshold)}</td>'
            f'<td class="direction">{html.escape(direction_text(v))}</td>'
            f'<td class="verdict verdict-{html.escape(verdict)}">{html.escape(verdict)}</td><td>{runs}</td></tr>')
    return (f'<div class="kit-scroll"><table id="{table_id}" class="kit-table kit-verdicts"><thead><tr>{head}'
            f'</tr></thead><tbody>{"".join(body)}</tbody></table></div>')


def projection_html(idx: RunIndex) -> str:
    """The study's projection to its seed's hardware (bench/study_projection.py, kit-bench/1 records with
    results.projection and results.validation): the link model validated on the emulated link, predicted
    beside measured; the projected study; and its assumptions."""
    parts = []
    for r in idx.runs:
        if r.notebook != "(benchmark script)":
            continue
        try:
            rec = load_json_strict(r.dir / records.RUN_RECORD_NAME)
        except (FileNotFoundError, ValueError):
            continue
        res = rec.get("results")
        if not (isinstance(res, dict) and isinstance(res.get("projection"), list) and isinstance(res.get("validation"), list)):
            continue
        fit = res.get("fit") or {}
        parts.append(f"<h3>Shared-gradient study projected to two L40S hosts across zones ({html.escape(r.run_id)})</h3>"
                     f"<p>Model: {html.escape(str(fit.get('model', '')))}; link efficiency "
                     f"{html.escape(fmt(fit.get('link_efficiency')))} fitted on the runs "
                     f"{html.escape(', '.join((rec.get('parameters') or {}).get('fit_runs', [])))}, validated on "
                     f"{html.escape(', '.join((rec.get('parameters') or {}).get('validation_runs', [])))} "
                     "(rows with held_out true). A projection, not a measurement on the seed's hosts.</p>")
        parts.append("<h4>Validation on the emulated link: predicted vs measured seconds per update</h4>"
                     + records_table(res["validation"]))
        parts.append("<h4>Projection: per-update time, speed screen, cross-zone transfer, 6 h and $100 bounds</h4>"
                     + records_table(res["projection"]))
        if isinstance(res.get("assumptions"), dict):
            parts.append("<h4>Assumptions</h4>" + kv_table(res["assumptions"]))
    return "".join(parts)


