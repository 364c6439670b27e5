"""Noise and power: the minimum detectable effect of every verdict at its n (readings.power), the training noise
measured so far (two arms that do the same arithmetic in exact math: single and dense), which differences are
within it, and the replicates: runs that record a REPLICATE parameter, or which are missing until they exist."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path
from statistics import NormalDist

from kit.digest import load_json_strict
from kit.evidence.replicate_analysis import FinalAnalysis, Question, StudyScore, analysis
from kit.evidence.report.analysis import sign_test_p
from kit.evidence.report.format import fmt, records_table
from kit.evidence.report.index import index, run_contract
from kit.evidence.report.readings import summary_rows
from kit.evidence.report.selection import Selected, Selection
from kit.evidence.report.sidecar_formats import paired_task_changes
from kit.evidence.results import results, study_evaluations

SAME_MATH = ("dense", "single")  # equal in exact math: dense averages two halves of single's batch


def noise_sentences(runs_dir) -> list[str]:
    idx = index(runs_dir)
    out = []
    for r in idx.runs:
        changes = paired_task_changes(r)
        if changes is None:
            continue
        c = changes.get(" vs ".join(SAME_MATH))
        if c is None:
            continue
        p = sign_test_p(c.gained, c.lost)
        text = (f"Training noise ({r.run_id}): single and dense do the same arithmetic in exact math, yet differ by "
                f"{100 * c.difference:+.2f} points on {c.n:,} items, {c.gained + c.lost} of them "
                f"discordant (sign test p = {fmt(p)}). The screens' bounds cover only the sampling of test items. ")
        others = [(k, v) for k, v in changes.items() if not k.endswith("vs seed") and k.split(" vs ")[0] < k.split(" vs ")[1]
                  and set(k.split(" vs ")) != set(SAME_MATH)]
        text += " ".join(f"{k}: {100 * v.difference:+.2f} points." for k, v in others)
        if others:  # one pair is no spread: what the differences do across training runs is the replicates' to say
            text += (" One pair of runs does not measure training noise; the replicate section reads each question "
                     "across training runs (t intervals with their degrees of freedom, development roles only).")
        out.append(text)
    return out


def family_sentence(runs_dir) -> str | None:
    """The smallest difference between two models of one family that is significant at 5% (two-sided, unpaired
    normal approximation at the family's mean accuracy over the trained models), per family of the study's
    evaluation: differences below it are within item sampling alone."""
    df = results(runs_dir)
    df = df[(df["kept_in"] == "") & (df["split"] == "final") & df["run_id"].isin(study_evaluations(index(runs_dir)))
            & (df["family"] != "all") & (df["model"] != "seed")]
    parts = []
    for family in sorted(set(df["family"])):
        mine = df[df["family"] == family]
        acc, n = mine[mine["metric"] == "accuracy"]["value"], mine[mine["metric"] == "n"]["value"]
        if acc.empty or not n.min():
            continue
        p, k = float(acc.mean()), int(n.min())
        if min(p, 1 - p) * k < 5:  # the normal approximation needs about five answers on each side
            parts.append(f"{family} not approximated ({fmt(p * k)} of {k} correct on average)")
            continue
        parts.append(f"{family} {100 * 1.959963984540054 * math.sqrt(2 * p * (1 - p) / k):.1f} points (n {k})")
    return ("Per family, two models' accuracies differ significantly (5%, two-sided, unpaired normal approximation at "
            "the family's mean accuracy) only beyond: " + "; ".join(parts) + "." if parts else None)


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:+.1f}"


def _num(x, scale: float, decimals: int) -> str:
    return "n/a" if x is None else f"{scale * x:+.{decimals}f}"


def _plan_of(folder, prefix: str) -> dict | None:
    """The executed replicate plan beside the runs (campaigns/<prefix>-replicates-plan.json), for its amendments."""
    path = Path(folder).resolve().parent / "campaigns" / f"{prefix}-replicates-plan.json"
    return load_json_strict(path) if path.is_file() else None


def training_noise_rows(questions: Sequence[Question], level: float = 0.95, power: float = 0.8) -> list[dict]:
    """Training noise in the verdicts' power, per question whose replicates have a spread:
    the item-only standard error of one run's difference (sqrt of the one-scoring item variance bound), the
    replicates' sd of the difference, the false-pass rate of a single-run verdict read against the item-only
    one-sided `level` bound when the true difference is 0, and the detectable effect at `power` item-only
    beside item and training noise together (normal: (z_level + z_power) x the standard error)."""
    z, zp = NormalDist().inv_cdf(level), NormalDist().inv_cdf(power)
    out = []
    for q in questions:
        iv = q.interval
        if not iv.estimable or not iv.item_variance or iv.sd is None:
            continue
        item_se, sd = math.sqrt(iv.item_variance), iv.sd
        total = math.sqrt(sd ** 2 + iv.item_variance)
        d = 1 if q.scale == 100.0 else 4
        out.append({"question": q.subject, "k": iv.k,
                    "unit": q.unit, "item-only se": _num(item_se, q.scale, d).lstrip("+"),
                    "replicate sd": _num(sd, q.scale, d).lstrip("+"),
                    "single-run false pass at no true effect": f"{100 * (1 - NormalDist().cdf(z * item_se / total)):.0f}%"
                                                               f" (nominal {100 * (1 - level):.0f}%)",
                    "detectable effect, item only": _num((z + zp) * item_se, q.scale, d).lstrip("+"),
                    "detectable effect, item and training noise": _num((z + zp) * total, q.scale, d).lstrip("+")})
    return out


def replicate_spread_html(runs_dir: Selected) -> str | None:
    """The report's replicate section, from kit.evidence.replicate_analysis.analyse (development roles only): each
    arm's replicate scores with their GPU mode and code, per question the paired differences, mean, t interval
    with its df and the reading, the training noise in the power table, the missing replicate 0s and the plan's
    amendments; None when no replicate beyond the committed runs has been scored."""
    selection = Selection.of(runs_dir)
    folder = selection.runs_dir
    prefix = (selection.pattern or "").split("-")[0] or "medium"
    result = analysis(folder, prefix, _plan_of(folder, prefix))
    if not any(r.k != 0 for reps in result.arms.values() for r in reps):
        return None
    arms = []
    for name, reps in result.arms.items():
        for r in reps:
            score = (f"{r.correct}/{r.n} ({100 * r.correct / r.n:.1f}%)" if isinstance(r, StudyScore)
                     else f"{_pct(r.accuracy_difference)} points vs its baseline")
            t = r.training
            arms.append({"arm": name, "replicate": r.k, "development score": score, "scored by": r.scored_by,
                         "training run": t.run or "not in the evidence", "GPU mode": t.gpu_mode or "n/a",
                         "code": (t.commit or "n/a")[:8]
                         + (f", PowerSGD {t.powersgd_orthonormalisation}" if t.powersgd_orthonormalisation else ""),
                         "per-item results": r.per_item})
    questions = _question_rows(result.questions)
    text = (f"Replicates are scored on {result.scope}. Rule: {result.rule}. Pairs are formed by replicate index "
            "(the same data order in both arms); replicate 0 is the committed run, scored where the evidence holds "
            "a development score of its endpoint.")
    notes = [*result.missing, *result.modes]
    notes += [f"Plan amendment: {a}" for a in result.amendments]
    noise = training_noise_rows(result.questions)
    return ("<h4>Replicates: what the training runs say (development roles only)</h4><p>" + html.escape(text) + "</p>"
            + records_table(arms) + records_table(questions)
            + "".join(f"<p>{html.escape(n)}</p>" for n in notes)
            + ("<h4>Training noise in the verdicts' power</h4><p>" + html.escape(
                "A single run's verdict reads its difference against item sampling only; with the replicates' spread "
                "its false-pass rate at no true effect and its detectable effect (80% power, one-sided 5%) are these. "
                "The spread of 2-3 replicates is itself uncertain.") + "</p>" + records_table(noise) if noise else ""))


def _question_rows(questions: Sequence[Question]) -> list[dict]:
    rows = []
    for q in questions:
        iv, d = q.interval, (1 if q.scale == 100.0 else 4)
        rows.append({
            "question": q.subject, "verdict key": " / ".join(q.key),
            "replicates": ", ".join(map(str, q.replicates)),
            "difference per replicate": ", ".join(_num(v, q.scale, d) for v in q.differences) + f" {q.unit}",
            "mean": _num(iv.mean, q.scale, d),
            "95% t interval": (f"[{_num(iv.lower, q.scale, d)}, {_num(iv.upper, q.scale, d)}]"
                               if iv.estimable else "not estimable"),
            "df": iv.df if iv.estimable else "n/a",
            "passes the committed check in": "n/a" if q.passes_in is None else f"{q.passes_in} of {iv.k}",
            "reading": q.reading})
    return rows


def replicate_final_html(result: FinalAnalysis) -> str:
    """The replicate section's part on a design's fresh final set, from
    kit.evidence.replicate_analysis.final_analysis: per question the paired differences, mean, t interval with its
    df (item sampling from the per-item results) and the reading."""
    text = (f"Design {result.design}: replicates scored on {result.scope}. Rule: {result.rule}. Pairs are "
            "formed by replicate index (the same data order in both arms).")
    return (f"<h4>Replicates on the fresh final set ({html.escape(result.design)})</h4><p>" + html.escape(text)
            + "</p>" + records_table(_question_rows(result.questions)))


def replicate_html(runs_dir) -> str:
    table = replicate_spread_html(runs_dir)
    if table is not None:
        return table
    idx = index(runs_dir)
    reps = [r for r in idx.runs if r.parameters.get("REPLICATE") is not None]
    if reps:
        return "<h4>Replicates</h4>" + records_table([
            {"run": r.run_id, "replicate": r.parameters["REPLICATE"], "arm": r.parameters.get("ARM"),
             "cohort": r.parameters.get("COHORT"), "status": r.status} for r in reps])
    wanted = []
    for r in idx.runs:
        c = run_contract(r) or {}
        for a in c.get("arms") or []:
            if isinstance(a, dict) and f"study arm {a.get('name')}" not in wanted:
                wanted.append(f"study arm {a.get('name')}")
        cohort = r.parameters.get("COHORT")
        if cohort and f"adaptive cohort {cohort}" not in wanted:
            wanted.append(f"adaptive cohort {cohort}")
    return ("<h4>Replicates</h4><p>" + html.escape(
        "No run in this evidence records a REPLICATE parameter, so these replicates are missing: "
        + (", ".join(wanted) or "none named by a contract")
        + ". Until they exist the training noise above is the one single-vs-dense pair.") + "</p>")


def show_noise(runs_dir: Selected) -> None:
    from IPython.display import HTML, display  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    selection = Selection.of(runs_dir)  # the notebook cell's DIR/GLOB, parsed once
    rows = [{"question": r.question, "check": r.check, "n": r.numbers.n, "at 80% power": r.power}
            for r in summary_rows(selection) if r.power]
    parts = ["<h4>Minimum detectable effects at each verdict's n</h4>" + records_table(rows)] if rows else []
    parts += [f"<p>{html.escape(t)}</p>" for t in [*noise_sentences(selection), family_sentence(selection)] if t]
    parts.append(replicate_html(selection))
    display(HTML("".join(parts)))
