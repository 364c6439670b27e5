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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def values_text(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {setting(v)}" for k, v in values.items())


def first_line(text: str) -> str:
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return line if len(line) <= ERROR_CHARS else line[:ERROR_CHARS] + "\u2026"


# --- one record, read once into the classes below, in the order its sections are written ------------------
def _anything(v) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class FamilyCounts:
    """A family's dev counts (in memory): tasks scored, answered right by the candidate and by the seed."""
    n: int
    candidate_correct: int
    seed_correct: int


@dataclass(frozen=True, slots=True)
class DevRetention:
    """An adaptive candidate's development retention gate (in memory): the change, its bound, the threshold, and
    the gate's own decision (which the record's `eligible` must agree with)."""
    change: float
    upper: float
    threshold: float
    eligible: bool


@dataclass(frozen=True, slots=True)
class CandidateDevScores:
    """A candidate's checked dev evaluation (in memory)."""
    accuracy: float
    seed_accuracy: float
    families: Mapping[str, FamilyCounts]
    task_change: float
    retention: DevRetention | None  # adaptive pilots only


@dataclass(frozen=True, slots=True)
class Candidate:
    """A pilot's candidate (in memory): its settings (`overrides`, or `values` in the study pilot), status, error
    as recorded, and dev evaluation (None: failed, or cut by the deadline)."""
    name: str
    status: str
    values: Mapping[str, Any]
    error: Any
    dev: CandidateDevScores | None
    records_retention: bool  # its dev object has a `retention` change (the study pilot gates none)


@dataclass(frozen=True, slots=True)
class Chosen:
    """The pilot's chosen candidate and its settings (in memory)."""
    candidate: str
    values: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class PositiveControl:
    """The adaptive pilot's positive control, checked against its own numbers (in memory)."""
    seed: float
    band: tuple[float, float]
    until: int
    cohort: int
    min_gain: float
    best: str | None
    best_accuracy: float | None
    gain: float | None
    inside: bool
    at_end: bool
    holds: bool


@dataclass(frozen=True, slots=True)
class Draft:
    """A draft contract a pilot ran (in memory): its path and digest as recorded (None where not recorded)."""
    path: Any
    digest: Any


@dataclass(frozen=True, slots=True)
class FinalRoles:
    """The check that the final roles stayed closed (in memory): opened, and the ledger unchanged (None: not
    checked)."""
    opened: bool
    ledger_unchanged: Any  # true, false, or anything else: not checked


@dataclass(frozen=True, slots=True)
class Pilot:
    """A pilot record as the Pilots section reads it (in memory): built once by `read_pilot`, every conclusion of
    the record checked against its numbers. Fields the section shows verbatim keep the record's JSON values."""
    kind: str
    status: Any
    drafts: tuple[Draft, ...]  # the adaptive pilot's drafts, or the study pilot's one
    arm: Any
    seed_digest: Any
    until: Any
    rule: Any
    candidates: tuple[Candidate, ...]
    chosen: Chosen | None
    no_choice: Any
    # absent: the record predates it; None: not computed; else the control, checked (adaptive pilots only)
    positive_control: PositiveControl | None
    has_positive_control: bool
    final_roles: FinalRoles | None
    errors: tuple[str, ...]  # the record's errors that are not a candidate's own, as "key: first line"


def _candidates(path, results: dict) -> list[dict]:
    cands = _field(path, results, "results", "candidates", "a list of candidates",
                   lambda v: isinstance(v, list) and all(isinstance(c, dict) for c in v))
    for i, c in enumerate(cands):
        where = f"results.candidates[{i}]"
        _field(path, c, where, "name", "a candidate name", lambda v: isinstance(v, str) and v)
        _field(path, c, where, "status", "a status string", lambda v: isinstance(v, str) and v)
        key = "overrides" if "overrides" in c else "values"
        _field(path, c, where, key, "an object of the candidate's settings", lambda v: isinstance(v, dict))
    return cands


def _dev(path, c: dict, i: int, kind: str) -> CandidateDevScores | None:
    """The candidate's checked dev evaluation, or None when it has none (failed, cut by the deadline)."""
    where = f"results.candidates[{i}].dev"
    dev = _field(path, c, f"results.candidates[{i}]", "dev", "an object", lambda v: v is None or isinstance(v, dict))
    if dev is None:
        return None
    acc = _field(path, dev, where, "accuracy", "a fraction", _fraction)
    seed = _field(path, dev, where, "seed_accuracy", "a fraction", _fraction)
    fams = _field(path, dev, where, "accuracy_by_family", "an object of families", lambda v: isinstance(v, dict) and v)
    counts = {}
    for fam, f in fams.items():
        n, cand, seed_correct = (_field(path, f, f"{where}.accuracy_by_family.{fam}", k, "a count", _count)
                                 for k in ("n", "candidate_correct", "seed_correct"))
        counts[fam] = FamilyCounts(n=n, candidate_correct=cand, seed_correct=seed_correct)
    tasks = _field(path, dev, where, "tasks", "an object", lambda v: isinstance(v, dict))
    task_change = _field(path, tasks, f"{where}.tasks", "change_nats_per_token", "a finite number", _finite)
    retention = None
    if kind == "adaptive":
        ret = _field(path, dev, where, "retention", "an object", lambda v: isinstance(v, dict))
        change = _field(path, ret, f"{where}.retention", "change_nats_per_token", "a finite number", _finite)
        upper = _field(path, ret, f"{where}.retention", "bootstrap_upper", "a finite number", _finite)
        threshold = _field(path, dev, where, "retention_threshold", "a finite number", _finite)
        recorded = _field(path, dev, where, "eligible", "true or false", lambda v: isinstance(v, bool))
        # the trial's own retention gate decides, as the pilot did: a record that disagrees is refused
        passed = gate_retention(upper, threshold)["passed"]
        if recorded != passed:
            raise _disagrees(path, f"{where}.eligible", recorded, passed)
        retention = DevRetention(change=change, upper=upper, threshold=threshold, eligible=passed)
    return CandidateDevScores(accuracy=acc, seed_accuracy=seed, families=counts, task_change=task_change,
                         retention=retention)


def _candidate(path, c: dict, i: int, kind: str) -> Candidate:
    where = f"results.candidates[{i}]"
    key = "overrides" if "overrides" in c else "values"
    dev = _dev(path, c, i, kind)
    raw_dev = _field(path, c, where, "dev", "an object", _anything)
    return Candidate(name=_field(path, c, where, "name", "a candidate name", _anything),
                     status=_field(path, c, where, "status", "a status string", _anything),
                     values=_field(path, c, where, key, "an object", _anything),
                     error=_field(path, c, where, "error", "an error", _anything), dev=dev,
                     records_retention=isinstance(raw_dev, dict) and "retention" in raw_dev)


def _chosen(path, results: dict, names: list[str]) -> Chosen | None:
    chosen = _field(path, results, "results", "chosen", "an object or null", _anything)
    if chosen is None:
        return None
    name = _field(path, chosen, "results.chosen", "candidate", "a candidate name", lambda v: isinstance(v, str))
    if name not in names:
        raise _disagrees(path, "results.chosen.candidate", name, "no candidate of that name")
    values = _field(path, chosen, "results.chosen", "values", "an object", lambda v: isinstance(v, dict))
    return Chosen(candidate=name, values=values)


def _positive_control(path, results: dict, cands: tuple[Candidate, ...]) -> PositiveControl | None:
    """The positive control of results.positive_control, checked against the candidates it names; None when it
    was not computed."""
    pc = _field(path, results, "results", "positive_control", "an object or null",
                lambda v: v is None or isinstance(v, dict))
    if pc is None:
        return None
    w = "results.positive_control"
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
        recorded = _field(path, pc, w, key, "true or false", _anything)
        if recorded != computed:
            raise _disagrees(path, f"{w}.{key}", recorded, computed)
    gain = accuracy = None
    if best is not None:
        d = next((c.dev for c in cands if c.name == best), None)
        if d is None or d.retention is None or not d.retention.eligible:
            raise _disagrees(path, f"{w}.best_eligible", best, "not an eligible evaluated candidate")
        accuracy, gain = d.accuracy, d.accuracy - seed
        recorded_gain = _field(path, pc, w, "best_eligible_gain", "a finite number", _finite)
        if abs(recorded_gain - gain) > 1e-9:
            raise _disagrees(path, f"{w}.best_eligible_gain", recorded_gain, gain)
    holds = bool(inside and at_end and gain is not None and gain >= min_gain)
    recorded_holds = _field(path, pc, w, "holds", "true or false", _anything)
    if recorded_holds != holds:
        raise _disagrees(path, f"{w}.holds", recorded_holds, holds)
    return PositiveControl(seed=seed, band=(band[0], band[1]), until=until, cohort=cohort, min_gain=min_gain,
                           best=best, best_accuracy=accuracy, gain=gain, inside=inside, at_end=at_end, holds=holds)


def _final_roles(path, results: dict) -> FinalRoles | None:
    fr = _field(path, results, "results", "final_roles", "an object", _anything)
    if not isinstance(fr, dict):
        return None
    return FinalRoles(opened=bool(_field(path, fr, "results.final_roles", "opened", "true or false", _anything)),
                      ledger_unchanged=_field(path, fr, "results.final_roles", "ledger_unchanged", "true or false",
                                              _anything))


def read_pilot(p: PilotRecord) -> Pilot:
    """The record of `p`, read and checked: the candidates and their dev evaluations, the chosen candidate and (an
    adaptive pilot) the positive control, refused with the file and the field where they disagree with the
    record's numbers (the order of the section: candidates, chosen, positive control)."""
    path, rec, kind = p.path, p.rec, p.kind
    params = _field(path, rec, "record", "parameters", "an object", _anything) or {}
    results = _field(path, rec, "record", "results", "an object", lambda v: isinstance(v, dict))
    listed = _field(path, params, "parameters", "drafts", "an object", _anything).values() \
        if kind == "adaptive" else [_field(path, params, "parameters", "draft", "an object", _anything)]
    drafts = tuple(Draft(path=_field(path, d, "parameters.drafts", "path", "a path", _anything),
                         digest=_field(path, d, "parameters.drafts", "digest", "a digest", _anything)) for d in listed)
    raw = _candidates(path, results)
    cands = tuple(_candidate(path, c, i, kind) for i, c in enumerate(raw))
    chosen = _chosen(path, results, [c.name for c in cands])
    seed = _field(path, results, "results", "seed", "an object", _anything)
    errors = _field(path, rec, "record", "errors", "a list", _anything) or []
    return Pilot(
        kind=kind, status=_field(path, rec, "record", "status", "a status", _anything), drafts=drafts,
        arm=_field(path, params, "parameters", "arm", "an arm", _anything),
        seed_digest=_field(path, seed or {}, "results.seed", "parameter_digest", "a digest", _anything),
        until=_field(path, params, "parameters", "until", "a count", _anything),
        rule=_field(path, params, "parameters", "rule", "the rule", _anything),
        candidates=cands, chosen=chosen,
        no_choice=_field(path, results, "results", "no_choice", "why none", _anything),
        positive_control=_positive_control(path, results, cands)
        if kind == "adaptive" and "positive_control" in results else None,
        has_positive_control="positive_control" in results, final_roles=_final_roles(path, results),
        errors=tuple(f"{k}: {first_line(v)}" for e in errors if isinstance(e, dict) and "candidate" not in e
                     for k, v in e.items()))


def _families(devs) -> list[str]:
    return sorted({f for d in devs if d for f in d.families})


def candidate_table(pilot: Pilot) -> tuple[list[str], list[list[tuple[str, str]]]]:
    """Column names and, per candidate, cells as (text, CSS class)."""
    cands = pilot.candidates
    fams = _families(c.dev for c in cands)
    chosen = pilot.chosen.candidate if pilot.chosen else None
    errors = any(c.error for c in cands)
    cols = (["candidate", "values", "status", "dev accuracy (pooled)", "seed", "change (points)"]
            + [f"{f}: correct of n, candidate vs seed" for f in fams] + ["task NLL change (nats/token)"])
    if pilot.kind == "adaptive":
        cols += ["retention NLL change (nats/token)", "retention upper bound", "threshold", "dev retention gate"]
    if errors:
        cols.append("error (first line)")
    rows = []
    for c in cands:
        d = c.dev
        name = c.name + (" (chosen)" if c.name == chosen else "")
        row = [(name, ""), (values_text(c.values), ""), (c.status, f"status-{c.status}")]
        if d is None:
            row += [(NONE, "")] * (4 + len(fams))
        else:
            row += [(pct(d.accuracy), "num"), (pct(d.seed_accuracy), "num"),
                    (points(d.accuracy - d.seed_accuracy), "num")]
            for f in fams:
                x = d.families.get(f)
                row.append((f"{x.candidate_correct} vs {x.seed_correct} of {x.n}", "num") if x else (NONE, ""))
            row.append((signed(d.task_change), "num"))
        if pilot.kind == "adaptive":
            ret = d.retention if d else None
            if ret is None:
                row += [(NONE, "")] * 4
            else:
                row += [(signed(ret.change), "num"), (signed(ret.upper), "num"), (limit(ret.threshold), "num"),
                        retention_cell(ret)]
        if errors:
            row.append((first_line(c.error) if c.error else "", ""))
        rows.append(row)
    return cols, rows


def retention_cell(d: DevRetention) -> tuple[str, str]:
    if d.eligible:
        return f"passes (eligible): upper bound {signed(d.upper)} \u2264 {limit(d.threshold)}", "verdict-pass"
    return f"fails dev retention: upper bound {signed(d.upper)} > {limit(d.threshold)}", "verdict-fail"


def retention_sentence(pilot: Pilot) -> str:
    """How many evaluated candidates the dev retention gate refused, and which."""
    done = [(c, c.dev.retention) for c in pilot.candidates if c.dev and c.dev.retention]
    if not done:
        return "Dev retention gate: no candidate was evaluated."
    failing = [(c, d) for c, d in done if not d.eligible]
    if not failing:
        return (f"Dev retention gate: all {len(done)} evaluated candidate(s) pass it (largest upper bound "
                f"{signed(max(d.upper for _, d in done))}).")
    named = "; ".join(f"{c.name} ({values_text(c.values)}): upper bound {signed(d.upper)} > {limit(d.threshold)}"
                      for c, d in failing)
    return (f"Dev retention gate: {len(failing)} of {len(done)} evaluated candidate(s) fail dev retention, their "
            f"development retention NLL rising by more than the gate allows: {named}.")


def positive_control_sentence(pilot: Pilot) -> str:
    """The medium scale's positive control, from results.positive_control and the candidates it names."""
    if not pilot.has_positive_control:
        return "Positive control: no positive control recorded (record predates it)."
    pc = pilot.positive_control
    if pc is None:
        done = sum(1 for c in pilot.candidates if c.dev)
        return (f"Positive control: not computed ({done} of {len(pilot.candidates)} candidate(s) completed a "
                f"development evaluation).")
    end = "" if pc.at_end else " (not cohort A's endpoint)"
    if pc.best is None or pc.gain is None or pc.best_accuracy is None:
        best_text = f"no eligible candidate at update {pc.until} of {pc.cohort}{end}"
    else:
        best_text = (f"best eligible {pc.best} at update {pc.until} of {pc.cohort}{end}: {pct(pc.best_accuracy)}, "
                     f"{points(pc.gain)} points (at least {setting(100 * pc.min_gain)} needed)")
    return (f"Positive control: {'holds' if pc.holds else 'does not hold'} \u2014 seed {pct(pc.seed)} pooled (band "
            f"{setting(100 * pc.band[0])}\u2013{setting(100 * pc.band[1])}%: {'inside' if pc.inside else 'outside'}); "
            f"{best_text}.")


def chosen_sentence(pilot: Pilot) -> str:
    if pilot.chosen is None:
        if pilot.no_choice:
            return f"Chosen: none \u2014 {pilot.no_choice}."
        return f"Chosen: none (results.chosen is null; the record's status is {pilot.status})."
    return f"Chosen: {pilot.chosen.candidate} ({values_text(pilot.chosen.values)})."


def final_roles_sentence(pilot: Pilot) -> str:
    fr = pilot.final_roles
    if fr is None:
        return "Final roles: no check recorded."
    opened = "opened" if fr.opened else "not opened"
    ledger_text: dict[bool | None, str] = {True: "exposure ledger unchanged", False: "exposure ledger changed"}
    ledger = ledger_text.get(fr.ledger_unchanged, "ledger not checked")
    return f"Final roles: {opened}; {ledger}."


def _table_html(cols, rows) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f'<td class="{cls}">{html.escape(t)}</td>' if cls else f"<td>{html.escape(t)}</td>"
                                    for t, cls in row) + "</tr>" for row in rows)
    return (f'<div class="kit-scroll"><table class="kit-table kit-pilot"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


def pilot_html(p: PilotRecord) -> str:
    """One pilot record: header, rule, candidates, retention (adaptive), chosen, positive control (adaptive)."""
    pilot = read_pilot(p)
    path, run_id = p.path, p.run_id
    name = run_link(run_id) if p.linked else (
        f"{html.escape(run_id)} (record {html.escape(path.parent.parent.name)}/{html.escape(path.parent.name)}/"
        f"run.json; its run section is outside this report's selection)")
    shown = [(html.escape(str(d.path)), short(str(d.digest))) for d in pilot.drafts]
    if pilot.kind == "adaptive":
        what = "adaptive pilot, drafts " + ", ".join(f"{where} {digest}" for where, digest in shown)
    else:
        what = f"study pilot, arm {html.escape(str(pilot.arm))}, draft {shown[0][0]} {shown[0][1]}"
    seed = pilot.seed_digest
    cands = pilot.candidates
    head = (f'<p id="pilot-{html.escape(run_id)}"><b>{name}</b>: {what}; status '
            f'<b>{html.escape(str(pilot.status))}</b>; seed {short(seed) if seed else NONE}; '
            f"{len(cands)} candidate(s); target update {html.escape(setting(pilot.until))}.</p>")
    parts = [head, f'<p class="kit-note">Rule (verbatim from the record): {html.escape(str(pilot.rule))}</p>']
    parts.append(_table_html(*candidate_table(pilot)))
    sentences = []
    if pilot.kind == "adaptive":
        sentences.append(retention_sentence(pilot))
    else:
        gated = sum(1 for c in cands if c.records_retention)
        sentences.append(f"Dev retention gate: none ({gated} of {len(cands)} candidate(s) record a development "
                         "retention change; the study pilot gates none).")
    sentences.append(chosen_sentence(pilot))
    if pilot.kind == "adaptive":
        sentences.append(positive_control_sentence(pilot))
    sentences.append(final_roles_sentence(pilot))
    sentences += [f"Record error: {e}" for e in pilot.errors]
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
