"""The verdict section of the report: the trial's four questions answered from the verdict rows
(per contract scale when several), the verdict tables, the study's speed measurement and cost per
arm, and the failing gates and screen parts analysed. This module only composes: the rows come from
verdict_rows, the analyses from analysis and cost.
"""

from __future__ import annotations

import html

from kit.evidence.report.analysis import (
    NOT_EVALUABLE,
    gate_analysis_rows,
    speed_reason,
    speed_rows,
    speed_sensitivity,
)
from kit.evidence.report.cost import (
    NOT_MEASURED,
    UNPRICED,
    measured_cost_rows,
    measured_totals,
    projection_cost_rows,
    retention_pairs,
)
from kit.evidence.report.format import fmt, is_number, records_table
from kit.evidence.report.index import IndexedRun, RunIndex, gpu_names, index, run_contract
from kit.evidence.report.selection import Selected, Selection
from kit.evidence.report.verdict_rows import VerdictRow, projection_html, verdict_rows, verdict_table_html


def _link_text(row: IndexedRun | None) -> str:
    """Which link a pair arm's gradients crossed, from its run record's device."""
    if row is None:
        return "unknown (no arm run)"
    gpus = gpu_names(row)
    if len(gpus) >= 2:
        return (f"NCCL between {len(gpus)} GPUs of one host ({gpus[0]}; NVLink on the H200 hosts), not the "
                "seed's cross-zone network")
    if len(gpus) == 1:  # the pair's workers shared the host's one GPU (the host-staged group)
        return (f"gloo through host memory between workers sharing one GPU ({gpus[0]}), not the seed's "
                "cross-zone network")
    return "gloo between CPU processes of one host (loopback), not the seed's cross-zone network"


def _checks_text(rows: list[VerdictRow]) -> str:
    def one(r: VerdictRow) -> str:
        v = r.value
        shown = fmt(v) if is_number(v) else (v if v is not None else "")
        return f"{r.check} {r.verdict} ({shown}; needs {r.threshold})"
    return "; ".join(one(r) for r in rows)


def _row_scale(row: VerdictRow, idx: RunIndex) -> str:
    """The scale of the contract of the first run behind a verdict row that records one (a comparison
    run records none; the arms it compares do); "" when none can be read."""
    for name in row.runs:
        c = run_contract(idx.by_id[name]) if name in idx.by_id else None
        if c and c.get("scale"):
            return c["scale"]
    return ""


def trial_questions(runs_dir) -> list[dict]:
    """The trial's four questions, each answered from the verdict rows with the runs behind it,
    or said to be unanswered by this evidence; per contract scale when the evidence holds several (a
    tiny demo and a medium campaign in one runs folder answer separately)."""
    idx = index(runs_dir)
    rows = verdict_rows(runs_dir)
    scales = sorted({_row_scale(r, idx) for r in rows.all()})
    out = []
    for scale in scales:
        ad = [r for r in rows.adaptive if _row_scale(r, idx) == scale]
        st = [r for r in rows.study if _row_scale(r, idx) == scale]
        suffix = f" ({scale} scale)" if len(scales) > 1 else ""
        out += _questions(ad, st, idx, suffix, runs_dir)
    return out


def _questions(ad: list[VerdictRow], st: list[VerdictRow], idx: RunIndex, suffix: str, runs_dir) -> list[dict]:
    def answer(question, found, text, missing):
        runs = sorted({n for r in found for n in r.runs})
        return {"question": question + suffix, "answer": text if found else missing, "runs": ", ".join(runs)}

    a = [r for r in ad if r.comparison == "A_vs_seed"]
    mig = [r for r in ad if r.comparison.startswith("migration")]
    grow = [r for r in ad if r.comparison == "growth_vs_control"]
    quality = [r for r in st if r.comparison == "quality screen" and r.check == "quality screen (all parts)"]
    speed = [r for r in st if r.comparison == "speed screen"]
    out = [answer("Did phase A pass the three gates?", a,
                  ("yes: " if a and all(r.verdict == "pass" for r in a) else "no: ") + _checks_text(a),
                  "not measured: no final evaluation of the phase-A endpoint in this evidence")]
    device = ""
    if mig:
        migrated = next((idx.by_id[n] for n in mig[0].runs if n.endswith("migrated") and n in idx.by_id), None)
        gpus = gpu_names(migrated) if migrated else []
        device = f" on {len(gpus)} GPU(s) ({gpus[0]})" if gpus else " on CPU"
    out.append(answer("Did migration match its uninterrupted control?", mig,
                      ("yes" if mig and all(r.verdict == "pass" for r in mig) else "no")
                      + f"{device}: maximum |parameter difference| {fmt(mig[0].value) if mig else ''}",
                      "not measured: no migration comparison in this evidence"))
    out.append(answer("Did growth change the outcome against its fixed-depth control?", grow,
                      ("yes, it passed every gate against the control: " if grow and all(r.verdict == "pass" for r in grow)
                       else "no measurable improvement over the control: ") + _checks_text(grow),
                      "not measured: no final evaluation of the grown endpoint against its control"))
    powersgd = next((idx.by_id[n] for r in st for n in r.runs if n.endswith("powersgd") and n in idx.by_id), None)
    speed_text = f"{speed[0].verdict} ({fmt(speed[0].value)}x single" if speed else "not measured"
    if speed and speed[0].reason:  # e.g. the workers shared one GPU: no ratio to show
        speed_text = f"{speed[0].verdict} ({speed[0].reason})"
    elif speed:
        s = speed_sensitivity(runs_dir, speed[0].runs[0])
        speed_text += (f"; {fmt(s.ratio_after_first)}x, {s.verdict_after_first}, without each arm's first "
                       "update)" if s else ")")
    covered = {"A_vs_seed", "growth_vs_control"}
    for comparison in dict.fromkeys(r.comparison for r in ad if r.verdict == "fail"):
        if comparison in covered or comparison.startswith("migration"):
            continue  # answered by the questions above
        gates = [r for r in ad if r.comparison == comparison]
        failed = ", ".join(r.check for r in gates if r.verdict == "fail")
        out.append(answer(f"Did {comparison} pass its gates?", gates,
                          f"no ({failed} failed): " + _checks_text(gates), ""))
    out.append(answer("Did PowerSGD pass the quality and speed screens, and on which link?", quality + speed,
                      f"quality {quality[0].verdict if quality else 'not measured'}; speed {speed_text}; "
                      f"link: {_link_text(powersgd)}",
                      "not measured: the study's evaluation and screens are not in this evidence"))
    return out


def _speed_html(runs_dir) -> list[str]:
    """The speed screen's measurement per arm, and its verdict with and without the first updates."""
    rows = speed_rows(runs_dir)
    parts = []
    for evaluation in dict.fromkeys(r.evaluation for r in rows):
        mine = [r.table_row() for r in rows if r.evaluation == evaluation]
        s = speed_sensitivity(runs_dir, evaluation)
        reason = speed_reason(runs_dir, evaluation)
        parts.append(f"<h4>The speed screen's measurement, per arm ({html.escape(evaluation)})</h4>"
                     + (f"<p>{html.escape(s.text)}</p>" if s else "")
                     + (f"<p>The speed screen is {NOT_EVALUABLE}: {html.escape(reason)}. GPU time and wire traffic "
                        "below are what ran.</p>" if reason else "") + records_table(mine))
    return parts


def _cost_html(runs_dir) -> list[str]:
    """The study's cost and traffic as measured, then the seed's prices applied, as a separate projection."""
    rows = measured_cost_rows(runs_dir)
    if not rows:
        return []
    tot = measured_totals(rows)
    gpu_total = tot.gpu_seconds_all_attempts
    zero = sum(1 for r in rows if r.wire_GiB == NOT_MEASURED and not r.interface_counters.startswith("none"))
    none_kept = sum(1 for r in rows if r.interface_counters.startswith("none"))
    text = (f"Every attempt that ran is listed: {tot.attempts} arm run(s), {tot.superseded_attempts} of them "
            "superseded (kept in their campaign folder); an attempt that left no run record cannot be listed. "
            + (f"GPU time of all attempts: {fmt(gpu_total)} GPU-seconds (wall seconds x the GPUs the workers used), "
               f"{UNPRICED}. " if gpu_total is not None else "No attempt ran on a GPU: no GPU time is priced. ")
            + "GPU-seconds per update are shown beside the speed ratio: a faster arm that uses more GPU time per "
              "update is not a cost reduction. Logical bytes are what the ranks handed to collectives; wire "
              "bytes are interface counters (2^30-byte GiB), and cross-zone transfer is billable only for bytes "
              "that crossed a network interface"
            + (f"; {zero} attempt(s) recorded interface counters that show no non-loopback byte (the ranks talked "
               "over the host's own links, which no interface counts)" if zero else "")
            + (f"; {none_kept} attempt(s) kept no interface counters" if none_kept else "")
            + (f": wire traffic {NOT_MEASURED}." if zero or none_kept else "."))
    parts = ["<h4>Cost and traffic as measured, per attempt</h4>" + f"<p>{html.escape(text)}</p>"
             + records_table([r.table_row() for r in rows])]
    proj = projection_cost_rows(runs_dir)
    if proj:
        parts.append("<h4>Projection at the seed's prices (not what the measured runs cost)</h4>"
                     "<p>The contract's cost frame (the seed's hosts: one L40S per g6e.2xlarge host, hosts in two "
                     "zones, cross-zone transfer priced per GiB each direction) applied to each attempt's measured "
                     "wall time and to ring bytes estimated from its logical bytes. The hardware that ran was not "
                     "that, and no byte of these runs crossed zones.</p>"
                     + records_table([p.table_row() for p in proj]))
    return parts


def _retention_html(runs_dir) -> list[str]:
    pairs = retention_pairs(runs_dir)
    if not pairs:
        return []
    first = pairs[0]
    text = (f"Token-weighted retention NLL change per token, arm against arm on the same {first.change.n} probes "
            f"({first.source}), with a paired normal 95% interval (delta method): reported, not gated. "
            + " ".join(f"{p.comparison}: {fmt(p.change.change_nats_per_token)} nats/token "
                       f"(95% CI {fmt(p.change.lower_95)} to {fmt(p.change.upper_95)}; {p.reading})." for p in pairs))
    return ["<h4>Retention, arm against arm (reported, not gated)</h4>" + f"<p>{html.escape(text)}</p>"
            + records_table([p.table_row() for p in pairs])]


def show_verdicts(runs_dir: Selected) -> None:
    from IPython.display import HTML, display  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    selection = Selection.of(runs_dir)  # the notebook cell's DIR/GLOB, parsed once
    idx = index(selection)
    rows = verdict_rows(selection)
    parts = []
    if rows.adaptive or rows.study:
        parts.append("<h3>The trial's questions</h3>" + records_table(trial_questions(selection)))
    for exp, title, mine in (
            ("adaptive", "Adaptive sharded learning: final gates, migration equality, growth vs control", rows.adaptive),
            ("study", "Shared-gradient method study: quality and speed screens", rows.study)):
        if mine:
            parts.append(f"<h3>{title}</h3>" + verdict_table_html(mine, f"kit-verdicts-{exp}", idx))
        if exp == "study":
            parts += _speed_html(selection) + _cost_html(selection) + _retention_html(selection)
    analysed = gate_analysis_rows(selection)
    if analysed:  # a failing gate is analysed, never rescued by a re-run on final data
        parts.append("<h4>Failing gates and screen parts, analysed</h4>"
                     + records_table([a.table_row() for a in analysed]))
    projection = projection_html(idx)
    if projection:
        parts.append(projection)
    if not parts:
        parts.append("<p>No gate or screen has been computed in this runs directory.</p>")
    display(HTML("".join(parts)))
