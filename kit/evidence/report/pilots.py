"""The report's Pilots section: each pilot record of the selection (the kit-bench/1 records of
campaigns/medium_pilot.py, "adaptive", and campaigns/study_pilot.py, "study"; docs/formats/benchmark-records.md) as its rule,
one table row per candidate (failed and ineligible ones included: they are the evidence that the retention
gate detects forgetting), the chosen candidate and, for an adaptive pilot, the positive control as a sentence.

Every cell and sentence is computed from the record's numbers. A record whose conclusions (a candidate's
`eligible`, the positive control's `seed_in_band`, `at_cohort_endpoint`, `best_eligible_gain`, `holds`)
disagree with its own numbers is refused with the file and the field, never shown as it claims.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kit.digest import load_json_strict
from kit.evidence import run_record as records
from kit.evidence.report.format import NONE, fmt, is_number, run_link, short
from kit.evidence.report.selection import Selected, Selection
from kit.evidence.run_index import load_rows
from kit.stats import gate_retention

BENCH_FORMAT = "kit-bench/1"
# Pilot records that a selection's Pilots section reads besides its own runs: the study pilot's run ids are
# study-pilot-DATE (campaigns/medium_campaign.sh), outside the medium report's `medium-*`, yet that pilot
# fixed the medium study's free choices.
PILOTS_BESIDE = {"medium-*": ("study-pilot-*",)}
ERROR_CHARS = 200  # a failed candidate's error: its first line, cut here (the record keeps it whole)


def pilot_kind(rec) -> str | None:
    """"adaptive" (parameters.drafts), "study" (parameters.draft and parameters.arm) or None (not a pilot)."""
    if not isinstance(rec, dict) or rec.get("format") != BENCH_FORMAT or not isinstance(rec.get("results"), dict):
        return None
    p = rec.get("parameters") or {}
    if isinstance(p.get("drafts"), dict):
        return "adaptive"
    if isinstance(p.get("draft"), dict) and "arm" in p:
        return "study"
    return None


def beside(selection: Selection | str | os.PathLike) -> list[Selection]:
    """The other selections whose pilot records the Pilots section of `selection` shows (PILOTS_BESIDE)."""
    selection = Selection.of(selection)
    return [Selection(selection.runs_dir, g) for g in PILOTS_BESIDE.get(selection.pattern or "", ())]


@dataclass(frozen=True, slots=True)
class PilotRecord:
    """A pilot's record found in a selection (in memory): its run, the record file and its JSON (a kit-bench/1
    record whose `results` the sentences below read), the kind ("adaptive" or "study"), and whether its run
    section is in the report (linked) or in another selection's."""
    run_id: str
    path: Path
    rec: dict
    kind: str
    linked: bool
    started_at: str


def pilot_records(selection: Selected, also: Sequence[Selected] = ()) -> list[PilotRecord]:
    """Pilot records of `selection` (linked: their run sections are in the report) and of `also` (not
    linked), in order of start."""
    out: list[PilotRecord] = []
    seen = set()
    for sel, linked in [(selection, True)] + [(a, False) for a in also]:
        for row in load_rows(sel):
            if row.run_id in seen or row.notebook != "(benchmark script)":
                continue
            path = row.dir / records.RUN_RECORD_NAME
            rec = load_json_strict(path)
            kind = pilot_kind(rec)
            if kind:
                seen.add(row.run_id)
                out.append(PilotRecord(run_id=row.run_id, path=path, rec=rec, kind=kind, linked=linked,
                                       started_at=row.started_at))
    return sorted(out, key=lambda r: (r.started_at, r.run_id))


# --- reading a record's fields, refusing what is not as documented -----------------------------------------
def _field(path, obj, where: str, key: str, expected: str, ok):
    v = obj.get(key) if isinstance(obj, dict) else None
    if not ok(v):
        text = repr(v)
        raise ValueError(f"{path}: field '{where}.{key}' = {text[:80] + '...' if len(text) > 80 else text}; "
                         f"expected {expected}")
    return v


def _finite(v) -> bool:
    return is_number(v) and math.isfinite(v)


def _fraction(v) -> bool:
    return _finite(v) and 0 <= v <= 1


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _disagrees(path, where: str, recorded, computed) -> ValueError:
    return ValueError(f"{path}: field '{where}' = {recorded!r}; its own numbers give {computed!r}")


# --- how values are written --------------------------------------------------------------------------------
def pct(v: float) -> str:
    return f"{100 * v:.1f}%"


def points(d: float) -> str:
    return f"{100 * d:+.1f}"


def signed(v: float) -> str:
    """A measured change: 4 significant digits (the page's format) with its sign."""
    return ("+" if v > 0 else "") + fmt(v)


def setting(v) -> str:
    """A chosen setting or a contract constant as written in the contract (1e-05, 0.0003, 16)."""
    return f"{v:g}" if isinstance(v, float) else fmt(v)


def limit(v: float) -> str:
    """A contract's threshold, signed like the changes it bounds (+0.02)."""
    return ("+" if v > 0 else "") + setting(v)


def values_text(values: dict) -> str:
    return ", ".join(f"{k} {setting(v)}" for k, v in values.items())


def first_line(text: str) -> str:
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return line if len(line) <= ERROR_CHARS else line[:ERROR_CHARS] + "\u2026"


# --- one record --------------------------------------------------------------------------------------------
def _candidates(path, rec: dict) -> list[dict]:
    cands = _field(path, rec["results"], "results", "candidates", "a list of candidates",
                   lambda v: isinstance(v, list) and all(isinstance(c, dict) for c in v))
    for i, c in enumerate(cands):
        where = f"results.candidates[{i}]"
        _field(path, c, where, "name", "a candidate name", lambda v: isinstance(v, str) and v)
        _field(path, c, where, "status", "a status string", lambda v: isinstance(v, str) and v)
        key = "overrides" if "overrides" in c else "values"
        _field(path, c, where, key, "an object of the candidate's settings", lambda v: isinstance(v, dict))
    return cands


def _dev(path, c: dict, i: int, kind: str) -> dict | None:
    """The candidate's checked dev evaluation, or None when it has none (failed, cut by the deadline)."""
    dev = c.get("dev")
    if dev is None:
        return None
    where = f"results.candidates[{i}].dev"
    _field(path, c, f"results.candidates[{i}]", "dev", "an object", lambda v: isinstance(v, dict))
    acc = _field(path, dev, where, "accuracy", "a fraction", _fraction)
    seed = _field(path, dev, where, "seed_accuracy", "a fraction", _fraction)
    fams = _field(path, dev, where, "accuracy_by_family", "an object of families", lambda v: isinstance(v, dict) and v)
    for fam, f in fams.items():
        for k in ("n", "candidate_correct", "seed_correct"):
            _field(path, f, f"{where}.accuracy_by_family.{fam}", k, "a count", _count)
    tasks = _field(path, dev, where, "tasks", "an object", lambda v: isinstance(v, dict))
    out = {"accuracy": acc, "seed_accuracy": seed, "families": fams,
           "task_change": _field(path, tasks, f"{where}.tasks", "change_nats_per_token", "a finite number", _finite)}
    if kind == "adaptive":
        ret = _field(path, dev, where, "retention", "an object", lambda v: isinstance(v, dict))
        out["retention_change"] = _field(path, ret, f"{where}.retention", "change_nats_per_token", "a finite number",
                                         _finite)
        out["retention_upper"] = _field(path, ret, f"{where}.retention", "bootstrap_upper", "a finite number", _finite)
        out["threshold"] = _field(path, dev, where, "retention_threshold", "a finite number", _finite)
        recorded = _field(path, dev, where, "eligible", "true or false", lambda v: isinstance(v, bool))
        # the trial's own retention gate decides, as the pilot did: a record that disagrees is refused
        passed = gate_retention(out["retention_upper"], out["threshold"])["passed"]
        if recorded != passed:
            raise _disagrees(path, f"{where}.eligible", recorded, passed)
        out["eligible"] = passed
    return out


def _families(devs) -> list[str]:
    return sorted({f for d in devs if d for f in d["families"]})


def candidate_table(path, rec: dict, kind: str) -> tuple[list[str], list[list[tuple[str, str]]]]:
    """Column names and, per candidate, cells as (text, CSS class)."""
    cands = _candidates(path, rec)
    devs = [_dev(path, c, i, kind) for i, c in enumerate(cands)]
    fams = _families(devs)
    chosen = ((rec["results"].get("chosen") or {}).get("candidate"))
    errors = any(c.get("error") for c in cands)
    cols = (["candidate", "values", "status", "dev accuracy (pooled)", "seed", "change (points)"]
            + [f"{f}: correct of n, candidate vs seed" for f in fams] + ["task NLL change (nats/token)"])
    if kind == "adaptive":
        cols += ["retention NLL change (nats/token)", "retention upper bound", "threshold", "dev retention gate"]
    if errors:
        cols.append("error (first line)")
    rows = []
    for c, d in zip(cands, devs):
        values = c["overrides"] if "overrides" in c else c["values"]
        name = c["name"] + (" (chosen)" if c["name"] == chosen else "")
        row = [(name, ""), (values_text(values), ""), (c["status"], f"status-{c['status']}")]
        if d is None:
            row += [(NONE, "")] * (4 + len(fams))
        else:
            row += [(pct(d["accuracy"]), "num"), (pct(d["seed_accuracy"]), "num"),
                    (points(d["accuracy"] - d["seed_accuracy"]), "num")]
            for f in fams:
                x = d["families"].get(f)
                row.append((f"{x['candidate_correct']} vs {x['seed_correct']} of {x['n']}", "num") if x else (NONE, ""))
            row.append((signed(d["task_change"]), "num"))
        if kind == "adaptive":
            if d is None:
                row += [(NONE, "")] * 4
            else:
                row += [(signed(d["retention_change"]), "num"), (signed(d["retention_upper"]), "num"),
                        (limit(d["threshold"]), "num"),
                        retention_cell(d)]
        if errors:
            row.append((first_line(c["error"]) if c.get("error") else "", ""))
        rows.append(row)
    return cols, rows


def retention_cell(d: dict) -> tuple[str, str]:
    if d["eligible"]:
        return f"passes (eligible): upper bound {signed(d['retention_upper'])} \u2264 {limit(d['threshold'])}", \
            "verdict-pass"
    return f"fails dev retention: upper bound {signed(d['retention_upper'])} > {limit(d['threshold'])}", "verdict-fail"


def retention_sentence(path, rec: dict) -> str:
    """How many evaluated candidates the dev retention gate refused, and which."""
    cands = _candidates(path, rec)
    devs = [(c, _dev(path, c, i, "adaptive")) for i, c in enumerate(cands)]
    done = [(c, d) for c, d in devs if d]
    if not done:
        return "Dev retention gate: no candidate was evaluated."
    failing = [(c, d) for c, d in done if not d["eligible"]]
    if not failing:
        return (f"Dev retention gate: all {len(done)} evaluated candidate(s) pass it (largest upper bound "
                f"{signed(max(d['retention_upper'] for _, d in done))}).")
    named = "; ".join(f"{c['name']} ({values_text(c['overrides'])}): upper bound {signed(d['retention_upper'])} > "
                      f"{limit(d['threshold'])}" for c, d in failing)
    return (f"Dev retention gate: {len(failing)} of {len(done)} evaluated candidate(s) fail dev retention, their "
            f"development retention NLL rising by more than the gate allows: {named}.")


def positive_control_sentence(path, rec: dict) -> str:
    """The medium scale's positive control, from results.positive_control and the candidates it names."""
    results = rec["results"]
    if "positive_control" not in results:
        return "Positive control: no positive control recorded (record predates it)."
    pc = results["positive_control"]
    cands = _candidates(path, rec)
    if pc is None:
        done = sum(1 for c in cands if c.get("dev"))
        return (f"Positive control: not computed ({done} of {len(cands)} candidate(s) completed a development "
                f"evaluation).")
    w = "results.positive_control"
    _field(path, results, "results", "positive_control", "an object or null", lambda v: isinstance(v, dict))
    seed = _field(path, pc, w, "seed_pooled_dev_accuracy", "a fraction", _fraction)
    band = _field(path, pc, w, "seed_band", "[low, high] fractions",
                  lambda v: isinstance(v, list) and len(v) == 2 and all(_fraction(x) for x in v) and v[0] <= v[1])
    until = _field(path, pc, w, "until", "a count of updates", _count)
    cohort = _field(path, pc, w, "cohort_A_updates", "a count of updates", _count)
    min_gain = _field(path, pc, w, "min_gain", "a fraction", _fraction)
    best = _field(path, pc, w, "best_eligible", "a candidate name or null", lambda v: v is None or isinstance(v, str))
    inside = band[0] <= seed <= band[1]
    at_end = until == cohort
    for key, computed in (("seed_in_band", inside), ("at_cohort_endpoint", at_end)):
        if pc.get(key) != computed:
            raise _disagrees(path, f"{w}.{key}", pc.get(key), computed)
    gain = None
    end = "" if at_end else " (not cohort A's endpoint)"
    if best is None:
        best_text = f"no eligible candidate at update {until} of {cohort}{end}"
    else:
        i = next((i for i, c in enumerate(cands) if c["name"] == best), None)
        d = None if i is None else _dev(path, cands[i], i, "adaptive")
        if d is None or not d["eligible"]:
            raise _disagrees(path, f"{w}.best_eligible", best, "not an eligible evaluated candidate")
        gain = d["accuracy"] - seed
        recorded = _field(path, pc, w, "best_eligible_gain", "a finite number", _finite)
        if abs(recorded - gain) > 1e-9:
            raise _disagrees(path, f"{w}.best_eligible_gain", recorded, gain)
        best_text = (f"best eligible {best} at update {until} of {cohort}{end}: {pct(d['accuracy'])}, "
                     f"{points(gain)} points (at least {setting(100 * min_gain)} needed)")
    holds = bool(inside and at_end and gain is not None and gain >= min_gain)
    if pc.get("holds") != holds:
        raise _disagrees(path, f"{w}.holds", pc.get("holds"), holds)
    return (f"Positive control: {'holds' if holds else 'does not hold'} \u2014 seed {pct(seed)} pooled (band "
            f"{setting(100 * band[0])}\u2013{setting(100 * band[1])}%: {'inside' if inside else 'outside'}); "
            f"{best_text}.")


def chosen_sentence(path, rec: dict) -> str:
    results = rec["results"]
    chosen = results.get("chosen")
    if chosen is None:
        if results.get("no_choice"):
            return f"Chosen: none \u2014 {results['no_choice']}."
        return f"Chosen: none (results.chosen is null; the record's status is {rec.get('status')})."
    name = _field(path, chosen, "results.chosen", "candidate", "a candidate name", lambda v: isinstance(v, str))
    if name not in [c["name"] for c in _candidates(path, rec)]:
        raise _disagrees(path, "results.chosen.candidate", name, "no candidate of that name")
    values = _field(path, chosen, "results.chosen", "values", "an object", lambda v: isinstance(v, dict))
    return f"Chosen: {name} ({values_text(values)})."


def record_errors(rec: dict) -> list[str]:
    """The record's errors that are not a candidate's own (the deadline, the seed, the final-role check)."""
    return [f"{k}: {first_line(v)}" for e in rec.get("errors") or [] if isinstance(e, dict) and "candidate" not in e
            for k, v in e.items()]


def final_roles_sentence(rec: dict) -> str:
    fr = rec["results"].get("final_roles")
    if not isinstance(fr, dict):
        return "Final roles: no check recorded."
    opened = "opened" if fr.get("opened") else "not opened"
    ledger_text: dict[bool | None, str] = {True: "exposure ledger unchanged", False: "exposure ledger changed"}
    ledger = ledger_text.get(fr.get("ledger_unchanged"), "ledger not checked")
    return f"Final roles: {opened}; {ledger}."


def _table_html(cols, rows) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f'<td class="{cls}">{html.escape(t)}</td>' if cls else f"<td>{html.escape(t)}</td>"
                                    for t, cls in row) + "</tr>" for row in rows)
    return (f'<div class="kit-scroll"><table class="kit-table kit-pilot"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


def pilot_html(p: PilotRecord) -> str:
    """One pilot record: header, rule, candidates, retention (adaptive), chosen, positive control (adaptive)."""
    path, rec, kind, run_id = p.path, p.rec, p.kind, p.run_id
    params, results = rec.get("parameters") or {}, rec["results"]
    name = run_link(run_id) if p.linked else (
        f"{html.escape(run_id)} (record {html.escape(path.parent.parent.name)}/{html.escape(path.parent.name)}/"
        f"run.json; its run section is outside this report's selection)")
    if kind == "adaptive":
        drafts = params["drafts"]
        what = "adaptive pilot, drafts " + ", ".join(
            f"{html.escape(str((d or {}).get('path')))} {short(str((d or {}).get('digest')))}" for d in drafts.values())
    else:
        d = params["draft"]
        what = (f"study pilot, arm {html.escape(str(params.get('arm')))}, draft {html.escape(str(d.get('path')))} "
                f"{short(str(d.get('digest')))}")
    seed = (results.get("seed") or {}).get("parameter_digest")
    cands = _candidates(path, rec)
    head = (f'<p id="pilot-{html.escape(run_id)}"><b>{name}</b>: {what}; status '
            f'<b>{html.escape(str(rec.get("status")))}</b>; seed {short(seed) if seed else NONE}; '
            f"{len(cands)} candidate(s); target update {html.escape(setting(params.get('until')))}.</p>")
    parts = [head, f'<p class="kit-note">Rule (verbatim from the record): {html.escape(str(params.get("rule")))}</p>']
    parts.append(_table_html(*candidate_table(path, rec, kind)))
    sentences = []
    if kind == "adaptive":
        sentences.append(retention_sentence(path, rec))
    else:
        gated = sum(1 for c in cands if "retention" in (c.get("dev") or {}))
        sentences.append(f"Dev retention gate: none ({gated} of {len(cands)} candidate(s) record a development "
                         "retention change; the study pilot gates none).")
    sentences.append(chosen_sentence(path, rec))
    if kind == "adaptive":
        sentences.append(positive_control_sentence(path, rec))
    sentences.append(final_roles_sentence(rec))
    sentences += [f"Record error: {e}" for e in record_errors(rec)]
    parts += [f'<p class="kit-scope">{html.escape(s)}</p>' for s in sentences]
    return "".join(parts)


def show_pilots(runs_dir: Selected, also: Sequence[Selected] = ()) -> None:
    """Every pilot record of the selection `runs_dir` and of the selections `also` (whose run sections this report
    lacks)."""
    from IPython.display import HTML, display  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    selection = Selection.of(runs_dir)  # the notebook cell's DIR/GLOB, parsed once
    found = pilot_records(selection, also)
    if not found:
        display(HTML("<p>No pilot record in this selection.</p>"))
        return
    counts = {k: sum(1 for p in found if p.kind == k) for k in ("adaptive", "study")}
    intro = (f"<p>{len(found)} pilot record(s): {counts['adaptive']} adaptive, {counts['study']} study, in order of "
             "start. Every candidate is listed, failed and ineligible ones included.</p>")
    display(HTML(intro + "<hr>".join(pilot_html(p) for p in found)))
