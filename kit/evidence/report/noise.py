"""Noise and power: the minimum detectable effect of every verdict at its n (readings.power), the training noise
measured so far (two arms that do the same arithmetic in exact math: single and dense), which differences are
within it, and the replicates: runs that record a REPLICATE parameter, or which are missing until they exist."""

from __future__ import annotations

import html
import math
import re

from kit.evidence.replicates import replicate_spread
from kit.evidence.report.analysis import sign_test_p
from kit.evidence.report.format import fmt, records_table
from kit.evidence.report.index import index, metric, run_contract
from kit.evidence.report.readings import summary_rows
from kit.evidence.results import results, study_evaluations
from kit.evidence.run_index import load_runs, split_selection

SAME_MATH = ("dense", "single")  # equal in exact math: dense averages two halves of single's batch


def noise_sentences(runs_dir) -> list[str]:
    idx = index(runs_dir)
    out = []
    for r in idx["runs"]:
        changes = metric(r, "paired_task_change")
        if not isinstance(changes, dict):
            continue
        c = changes.get(" vs ".join(SAME_MATH))
        if not c:
            continue
        noise = abs(c["difference"])
        p = sign_test_p(c["gained"], c["lost"])
        text = (f"Training noise ({r['run_id']}): single and dense do the same arithmetic in exact math, yet differ by "
                f"{100 * c['difference']:+.2f} points on {c['n']:,} items, {c['gained'] + c['lost']} of them "
                f"discordant (sign test p = {fmt(p)}). The screens' bounds cover only the sampling of test items. ")
        others = [(k, v) for k, v in changes.items() if not k.endswith("vs seed") and k.split(" vs ")[0] < k.split(" vs ")[1]
                  and set(k.split(" vs ")) != set(SAME_MATH)]
        text += " ".join(f"{k}: {100 * v['difference']:+.2f} points, {abs(v['difference']) / noise:.1f}\u00d7 that gap"
                         f" ({'within' if abs(v['difference']) <= noise else 'beyond'} the one measured pair)."
                         for k, v in others if noise)
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


def replicate_spread_html(runs_dir) -> str | None:
    """The between-replicate spread (kit.evidence.replicates.replicate_spread, development roles only) and each
    frozen verdict read against it; None when no replicate beyond the committed runs has been scored."""
    folder, pattern = split_selection(runs_dir)
    prefix = (pattern or "").split("-")[0] or "medium"
    spread = replicate_spread(load_runs(folder), prefix=prefix)
    if not any(k != 0 for a in spread["arms"].values() for k in a["replicates"]):
        return None
    arms = [{"arm": name, "replicates": ", ".join(map(str, a["replicates"])), "runs": ", ".join(a["runs"]),
             "pooled dev accuracy, values (%)": ", ".join(f"{100 * v:.1f}" for v in a["pooled_accuracy"]["values"]),
             "mean (%)": f"{100 * a['pooled_accuracy']['mean']:.1f}",
             "sd (points)": "n/a" if a["pooled_accuracy"]["sd"] is None else f"{100 * a['pooled_accuracy']['sd']:.1f}"}
            for name, a in spread["arms"].items()]
    comps = [{"comparison": name, "replicates": ", ".join(map(str, c["replicates"])),
              "accuracy difference per replicate (points)": ", ".join(_pct(v) for v in c["accuracy_difference"]["values"]),
              "mean": _pct(c["accuracy_difference"]["mean"]),
              "sd": "n/a" if c["accuracy_difference"]["sd"] is None else f"{100 * c['accuracy_difference']['sd']:.1f}"}
             for name, c in spread["comparisons"].items()]
    same_sign = {name: c["accuracy_difference"]["values"] for name, c in spread["comparisons"].items()}
    verdicts = []
    for v in spread["verdicts"]:
        reps = same_sign.get(v["spread_from"], [])
        agree = ("n/a" if not reps or "difference" not in v["measure"]
                 else f"{sum((x > 0) == (v['effect'] > 0) for x in reps if x)} of {sum(1 for x in reps if x)}")
        verdicts.append({"verdict": v["verdict"], "measure": v["measure"], "committed effect": fmt(v["effect"]),
                         "replicate sd": fmt(v["spread_sd"]), "from": v["spread_from"],
                         "|effect| / sd": fmt(v["ratio"]),
                         "beyond 2 sd": {True: "yes", False: "no", None: "no spread yet"}[v["exceeds"]],
                         "replicates with the same sign": agree})
    missing = [name for name, a in spread["arms"].items() if all(k == 0 for k in a["replicates"])]
    compressors = {r["run_id"]: (r["dir"] / "metrics" / "powersgd_columns.json").is_file()
                   for r in load_runs(folder) if re.fullmatch(rf"{prefix}-study-powersgd(-r\d+)?", r["run_id"])}
    if len(set(compressors.values())) == 2:  # the compressor changed between the committed arm and its replicates
        with_counters = sorted(k for k, v in compressors.items() if v)
        without = sorted(k for k, v in compressors.items() if not v)
        text_compressor = (f" The PowerSGD arms {', '.join(with_counters)} ran the Householder orthonormalisation (their "
                           f"records carry the powersgd_columns sidecar); {', '.join(without)} ran the earlier "
                           "Gram-Schmidt one, so PowerSGD's spread mixes training noise with that change.")
    else:
        text_compressor = ""
    text = (f"Replicates are scored on development roles only ({spread['rule']}). The spread of two replicates is "
            "itself uncertain: read it as the order of magnitude of training noise, not as a bound.")
    if missing:
        text += " No replicate beyond the committed run has been scored yet for: " + ", ".join(missing) + "."
    text += text_compressor
    return ("<h4>Replicates: the spread between training runs</h4><p>" + html.escape(text) + "</p>"
            + records_table(arms) + records_table(comps) + records_table(verdicts))


def replicate_html(runs_dir) -> str:
    table = replicate_spread_html(runs_dir)
    if table is not None:
        return table
    idx = index(runs_dir)
    reps = [r for r in idx["runs"] if (r.get("parameters") or {}).get("REPLICATE") is not None]
    if reps:
        return "<h4>Replicates</h4>" + records_table([
            {"run": r["run_id"], "replicate": r["parameters"]["REPLICATE"], "arm": r["parameters"].get("ARM"),
             "cohort": r["parameters"].get("COHORT"), "status": r["status"]} for r in reps])
    wanted = []
    for r in idx["runs"]:
        c = run_contract(r) or {}
        for a in c.get("arms") or []:
            if isinstance(a, dict) and f"study arm {a.get('name')}" not in wanted:
                wanted.append(f"study arm {a.get('name')}")
        cohort = (r.get("parameters") or {}).get("COHORT")
        if cohort and f"adaptive cohort {cohort}" not in wanted:
            wanted.append(f"adaptive cohort {cohort}")
    return ("<h4>Replicates</h4><p>" + html.escape(
        "No run in this evidence records a REPLICATE parameter, so these replicates are missing: "
        + (", ".join(wanted) or "none named by a contract")
        + ". Until they exist the training noise above is the one single-vs-dense pair.") + "</p>")


def show_noise(runs_dir) -> None:
    from IPython.display import HTML, display  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    rows = [{"question": r["question"], "check": r["check"], "n": r["numbers"]["n"], "at 80% power": r["power"]}
            for r in summary_rows(runs_dir) if r["power"]]
    parts = ["<h4>Minimum detectable effects at each verdict's n</h4>" + records_table(rows)] if rows else []
    parts += [f"<p>{html.escape(t)}</p>" for t in [*noise_sentences(runs_dir), family_sentence(runs_dir)] if t]
    parts.append(replicate_html(runs_dir))
    display(HTML("".join(parts)))
