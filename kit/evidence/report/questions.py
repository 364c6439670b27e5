"""The reviewer's first screen: the scope in three computed sentences, then one row per question in plain words
(the contract's identifier in small type) with what its verdict weighs: the tested statistic itself, the gate's
one-sided 95% bound (the page's one interval convention), the power or the pass rate under no change where the
verdict is near a coin flip, and how the verdict held on earlier seeds and across replicates; then a legend of
the trial's words. Every number is read from the sidecars the verdict rows read.

The replicate readings come from outside (a mapping question key -> reading, history.question_key); where none
is given the robustness column holds the earlier seeds' verdicts only.
"""

from __future__ import annotations

import dataclasses
import html
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from kit.digest import load_json_strict
from kit.evidence.replicate_analysis import robustness_by_question
from kit.evidence.report.analysis import sign_test_p
from kit.evidence.report.format import NONE, NOT_EVALUABLE, fmt, is_number, run_link
from kit.evidence.report.history import contracts_note, question_key, seed_reading, seed_verdicts
from kit.evidence.report.index import REPO, RunIndex, index, is_cpu, run_contract
from kit.evidence.report.page import PAGE_CSS
from kit.evidence.report.readings import (
    Numbers,
    baseline_sentence,
    numbers,
    reading_sentences,
    tie_probability,
)
from kit.evidence.report.scope import accuracy_points
from kit.evidence.report.seed_knew import build_record, seed_digests, training_mix
from kit.evidence.report.selection import GLOB_CHARACTERS, Selected, Selection
from kit.evidence.report.sidecar_formats import SeedBuild, paired_task_changes, retention_changes, sidecar
from kit.evidence.report.verdict_rows import VerdictRow, question_text, verdict_rows

NEAR_SE = 3.0  # an estimate within this many standard errors of its threshold: the verdict may go either way
COLUMNS = ("question", "verdict", "what was tested", "what the verdict weighs", "on other seeds and replicates")

LEGEND = (
    ("the seed", "the pretrained model every run starts from"),
    ("cohort A", "the seed trained on the new tasks, with a pull (KL) toward the seed on replayed chat"),
    ("cohort B", "cohort A's endpoint trained further, with the pull toward cohort A"),
    ("growth", ("cohort B with identity blocks appended mid-run, against the same run without them "
               "(its fixed-depth control)")),
    ("migration", "a run moved to another number of workers mid-run, against the same run left uninterrupted"),
    ("the arms", ("the method study's three ways of training the same model: single (one worker), dense (two "
                 "workers averaging full gradients), PowerSGD (two workers exchanging rank-limited gradients)")),
    ("nats/token", ("the model's average negative log-likelihood per assistant token (natural log); lower means the "
                   "model predicts the reference answers better")),
    ("generated answers", ("final tasks answered by generation and checked: an answer gained is right now and wrong "
                          "before, an answer lost the reverse")),
)


def _num(v, suffix: str = "") -> str:
    data = f' data-value="{html.escape(repr(v))}"' if is_number(v) else ""
    return f'<span class="num"{data}>{html.escape(fmt(v))}</span>{suffix}'


def tested(row: VerdictRow, x: Numbers) -> tuple[str, str]:
    """(verdict shown, HTML of the tested statistic and its rule): the statistic the rule compares, its one
    interval (the gate's one-sided 95% bound), the threshold. A generated-answers gate on no discordant answer
    is not evaluable whatever its rule recorded."""
    v, t, check = str(row.verdict), row.threshold_value, row.check
    if x.side == "count":
        gained, lost = x.gained_lost()
        p = sign_test_p(gained, lost)
        text = (f"correct answers lost {_num(lost)} vs gained {_num(gained)}, sign test p = {_num(p)}; "
                "needs lost \u2264 gained")
        return (NOT_EVALUABLE if x.n == 0 else v), text
    if x.side == "equal":
        return v, f"largest |weight difference| {_num(x.estimate)}; passes only at 0"
    if check == "quality screen (all parts)":
        return v, "every part above passes" if v == "pass" else "a part above does not pass"
    if row.reason:  # a screen that was not measured says why (the transport's name left to the details)
        return v, html.escape(re.sub(r" over \w+ \([^)]*\)", "", row.reason))
    if check.startswith("structure vs"):
        return v, "not comparable: the grown model has more blocks; judged by the growth questions"
    unit = " nats/token" if check in ("gain", "retention") else ""
    op = html.escape(row.threshold or "")
    if check.startswith("speed"):
        return v, f"throughput ratio {_num(row.value)}; needs {op}"
    est, bound = x.estimate, x.bound
    lower = x.side == "above"
    if check == "task_gain":  # the screen compares the point estimate; its one-sided bound read from the pair
        b = x.lower_bound
        return v, (f"accuracy gain {_num(est)} (one-sided 95% lower bound {_num(b)}); the screen tests the gain "
                   f"itself: needs {op}")
    what = {"gain": "task NLL change", "retention": "chat NLL change"}.get(
        check, "accuracy difference" if check.startswith("noninferior") else check)
    side = "lower" if lower else "upper"
    return v, (f"{what} {_num(est, unit)}; one-sided 95% {side} bound {_num(bound)}, needs {op}"
               if is_number(t) else f"{what} {_num(est, unit)}")


@dataclass(frozen=True, slots=True)
class Caveats:
    """Short caveats the question rows carry (in memory), each computed from the evidence; None where it does not
    apply: the adaptive retention baseline, whether the study's retention probes are in-distribution, and the
    study's noise."""
    baseline: str | None = None
    in_distribution: str | None = None
    study_noise: str | None = None


def weight(row: VerdictRow, x: Numbers, context: Caveats) -> str:
    """What the verdict weighs, in one sentence: no data, a pass rate under no change or the effect needed to
    pass where the verdict is near a coin flip, the caveat its probes carry, or its distance from the threshold."""
    check, t, v = row.check, row.threshold_value, str(row.verdict)
    if x.side == "count":
        if x.n == 0:
            return "no answer changed between the two models: the test has no data"
        gained, lost = x.gained_lost()
        p = sign_test_p(gained, lost)
        rate = 100 * (0.5 + tie_probability(x.n or 0) / 2)
        if p >= 0.05:
            return (f"within chance (p \u2265 0.05): with no true change this check passes {rate:.0f}% of the time "
                    f"at {x.n:,} changed answers")
        return f"beyond chance: {'more gained than lost' if gained > lost else 'more lost than gained'}"
    parts = []
    se, mult = x.se, x.mult
    if is_number(t) and is_number(se) and se > 0 and is_number(x.estimate) and x.side in ("below", "above"):
        est = x.estimate
        z = abs(t - est) / se  # how far the estimate lies from the threshold, in standard errors
        passes_est = est < t if x.side == "below" else est > t
        z80 = 0.8416212335729143
        if z < NEAR_SE:
            if check == "task_gain":
                parts.append(f"near its threshold: passes 80% of the time only if the true gain is "
                             f"\u2265 {fmt(t + z80 * se)}")
            elif x.side == "below" and check == "gain":
                assert is_number(mult), "a bounded gate's numbers carry its normal multiplier"
                parts.append(("the estimate passes, its bound does not: too few examples to tell; "
                              if passes_est and v != "pass" else "")
                             + f"near its threshold: passes 80% of the time only if the true change is "
                             f"\u2264 {fmt(t - (mult + z80) * se)} nats/token")
            elif x.side == "below":
                assert is_number(mult), "a bounded gate's numbers carry its normal multiplier"
                parts.append(f"near its threshold: fails 80% of the time only if the true change is "
                             f"\u2265 {fmt(t - (mult - z80) * se)} nats/token")
            else:
                assert is_number(mult), "a bounded gate's numbers carry its normal multiplier"
                p_equal = 0.5 * (1 + math.erf((-t / se - mult) / math.sqrt(2)))
                parts.append(f"near its threshold: passes {100 * p_equal:.0f}% of the time if the arms are truly "
                             "equal")
        else:
            parts.append(f"far from its threshold ({z:.0f} standard errors)")
    if check == "retention" and row.experiment == "adaptive" and context.baseline:
        parts.append(context.baseline)
    if check == "retention" and row.experiment == "study" and context.in_distribution:
        parts.append(context.in_distribution)
    if check.startswith("noninferior") and context.study_noise:
        parts.append(context.study_noise)
    return "; ".join(parts) or NONE


def _context(runs_dir, idx: RunIndex) -> Caveats:
    """Short caveats the rows carry, each computed from the evidence: the adaptive retention baseline, whether
    the study's retention probes are in-distribution."""
    said = baseline_sentence(idx)
    m = re.match(r"The adaptive retention baseline is the seed at (\S+) nats/token", said or "")
    baseline = f"the seed's own chat NLL is {m.group(1)} nats/token: it barely models chat" if m else None
    in_distribution = None
    for r in idx.runs:
        c = run_contract(r) or {}
        probes, replay = (c.get("data") or {}).get("retention") or {}, (c.get("data") or {}).get("replay") or {}
        if retention_changes(r) is not None and probes:
            ps, rs = probes.get("source") or {}, replay.get("source") or {}
            if ps.get("sha256") and ps.get("sha256") == rs.get("sha256"):
                in_distribution = ("the chat probes come from the source every arm trains on: the bound "
                                   "reads that training, not an absence of forgetting")
            break
    return Caveats(baseline=baseline, in_distribution=in_distribution)


def _lower_bound(row: VerdictRow, idx: RunIndex) -> float | None:
    """The study's task gain: the recorded one-sided 95% lower bound of PowerSGD against the seed."""
    change = (paired_task_changes(idx.by_id.get(row.runs[0])) or {}).get("powersgd vs seed")
    return change.noninferiority_lower if change else None


@dataclass(frozen=True, slots=True, kw_only=True)
class QuestionRow:
    """One row of the first screen's question table (in memory)."""
    key: str  # history.question_key: "<comparison>/<check>"
    question: str  # the question in the reviewer's words
    contract_id: str  # the contract's identifier of the check: "<comparison> · <check>"
    verdict: str  # the gate's, or "not evaluable"
    recorded: str  # the verdict the gate recorded
    tested: str  # what was tested (HTML)
    weighs: str  # what the verdict weighs
    robustness: str  # other seeds and replicates, in words
    source: str
    runs: tuple[str, ...]
    numbers: Numbers


def question_rows(runs_dir, replicates: Mapping[str, str] | None = None) -> list[QuestionRow]:
    """One row per verdict. `replicates`: question key -> a reading across replicates (in words), appended to
    the robustness."""
    idx = index(runs_dir)
    rows = verdict_rows(runs_dir)
    history = seed_verdicts(runs_dir)
    context = _context(runs_dir, idx)
    out = []
    # the trial's questions first (the gates, then the study's screens), the mechanics (migration, growth's
    # structure) after them
    gates = [r for r in rows.adaptive if "_vs_" in r.comparison]
    for row in gates + rows.study + [r for r in rows.adaptive if r not in gates]:
        x = numbers(row, idx)
        if row.check == "task_gain":
            x = dataclasses.replace(x, lower_bound=_lower_bound(row, idx))
        key = question_key(row)
        verdict, text = tested(row, x)
        seeds = seed_reading(history.get(key, []))
        rep = (replicates or {}).get(key)
        robust = "; ".join(s for s in (seeds, rep) if s) or NONE
        out.append(QuestionRow(key=key, question=question_text(row), contract_id=f"{row.comparison} \u00b7 {row.check}",
                               verdict=verdict, recorded=str(row.recorded if row.recorded is not None else row.verdict),
                               tested=text, weighs=weight(row, x, context), robustness=robust, source=row.source,
                               runs=tuple(row.runs), numbers=x))
    return out


def questions_html(runs_dir, replicates: Mapping[str, str] | None = None) -> str:
    rows = question_rows(runs_dir, replicates)
    if not rows:
        return "<p>No gate or screen has been computed in this evidence.</p>"
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    head = "".join(f"<th>{c}</th>" for c in COLUMNS)
    body = []
    for r in rows:
        v = r.verdict
        recorded = (f'<br><small>the gate recorded {html.escape(r.recorded)}</small>'
                    if v != r.recorded else "")
        cls = "na" if v in ("n/a", NOT_EVALUABLE) else v
        cells = [(f'<td data-label="question"><span class="kit-q">{html.escape(r.question)}</span><br>'
                 f'<small class="kit-id">{html.escape(r.contract_id)} \u00b7 {run_link(r.source.split("/")[0])}'
                 "</small></td>"),
                 f'<td data-label="verdict" class="verdict verdict-{html.escape(cls)}">{html.escape(v)}{recorded}</td>',
                 f'<td data-label="what was tested">{r.tested}</td>',
                 f'<td data-label="what it weighs">{html.escape(r.weighs)}</td>',
                 f'<td data-label="other seeds, replicates">{html.escape(r.robustness)}</td>']
        body.append(f'<tr data-source="{html.escape(r.source)}" data-key="{html.escape(r.key)}">'
                    + "".join(cells) + "</tr>")
    said = ", ".join(f"{n} {v}" for v, n in counts.items())
    note = contracts_note(seed_verdicts(runs_dir))
    return (f"<p>{len(rows)} questions: {html.escape(said)}. Each bound is the one-sided 95% bound its rule tests "
            f"(the page's one interval convention). {html.escape(note)}</p>"
            f'<table id="kit-verdict-summary" class="kit-table kit-questions"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def legend_html() -> str:
    return ('<dl class="kit-legend">' + "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>"
                                               for k, v in LEGEND) + "</dl>")


# --- the scope, one sentence each -------------------------------------------------------------
def _seed_size(idx: RunIndex, digest: str) -> int | None:
    for r in idx.runs:
        s = sidecar(r, SeedBuild)
        if s is not None and s.parameter_digest == digest and is_number(s.params):
            return int(s.params)
    return None


def _size(n: float) -> str:
    return f"{n / 1e9:.3g}B" if n >= 1e9 else f"{n / 1e6:.3g}M"


def full_seed_size(contract: dict | None) -> tuple[float, str] | None:
    """(parameters, contract file) of the full-scale contract beside `contract` (the same file name without the
    scale), read from its seed's description, e.g. "(1.7B)"."""
    name = (contract or {}).get("file") or ""
    full = re.sub(r"\.(tiny|medium)(\.draft)?\.json$", ".json", name)
    try:
        obj = load_json_strict(REPO / full)
    except (FileNotFoundError, ValueError):
        return None
    m = re.search(r"\((\d+(?:\.\d+)?)\s*([MB])\)", str((obj.get("seed") or {}).get("description", "")))
    if not m or obj.get("scale", "full") != "full":
        return None
    return float(m.group(1)) * (1e9 if m.group(2) == "B" else 1e6), full


def what_sentence(runs_dir) -> str | None:
    """What the evidence is, where its scale says so: a tiny CPU run of every mechanism (the scale is tiny and every
    run of a contract ran on CPU), whose quality verdicts are not evidence about the methods."""
    idx = index(runs_dir)
    contract = next((c for c in (run_contract(r) for r in idx.runs if r.contract_digest) if c), None)
    ran = [r for r in idx.runs if r.contract_digest]
    if (contract or {}).get("scale") == "tiny" and ran and all(is_cpu(r) for r in ran):
        return ("This is a tiny CPU run of every mechanism of both trials: its models are not meant to learn, so "
                "its quality verdicts are not evidence about the methods; they show that every gate and screen is "
                "computed from committed inputs.")
    return None


def scope_sentences(runs_dir) -> list[str]:
    """The scope on the first screen: the seed's size, what it trained on, and its size against the full trial's
    seed, one sentence each."""
    idx = index(runs_dir)
    contracts = [run_contract(r) for r in idx.runs if r.contract_digest]
    contract = next((c for c in contracts if c), None)
    out = []
    built = [s.parameter_digest for r in idx.runs if (s := sidecar(r, SeedBuild)) is not None and s.parameter_digest]
    for digest in seed_digests(runs_dir) or built:  # a tiny contract pins no seed: the one its runs built
        size = _seed_size(idx, digest)
        found = build_record(runs_dir, digest)
        if size is None and found:
            size = found[0].get("params")
        if is_number(size):
            out.append(f"Model size: the seed {digest[:8]} has {_size(size)} parameters ({size:,}).")
        if found:
            mix = [m for m in training_mix(found[0]) if m.conversations]
            total = sum(m.packed for m in mix)
            fams = next((m for m in mix if m.kind.startswith("task families")), None)
            taught = set(((found[0].get("data") or {}).get("tasks") or {}).get("per_family") or {})
            scored = {p.family for c in {r.contract_digest for r in idx.runs} - {None}
                      for p in accuracy_points(idx, c) if p.split == "final"} - {"all"}
            same = (", the families the final tasks score" if taught and taught == scored else
                    f"; the final tasks score {', '.join(sorted(scored))}" if scored else "")
            if total and fams:
                out.append(f"Training data: {100 * fams.packed / total:.0f}% of its {total:,} training "
                           f"conversations were {fams.kind}{same}.")
        else:
            out.append("Training data: this evidence keeps no build record of the seed's training mix.")
        full = full_seed_size(contract)
        if full and is_number(size):
            out.append(f"Scale: the trial's frozen contract ({full[1]}) names a {_size(full[0])} seed, "
                       f"{full[0] / size:,.0f} times this one, so these verdicts are about the method at "
                       f"{_size(size)}, not the trial's {_size(full[0])} result.")
        break  # the first seed: the one the trials ran on
    return out


def scope_html(runs_dir) -> str:
    said = scope_sentences(runs_dir)
    return ('<ul class="kit-first-scope">' + "".join(f"<li>{html.escape(s)}</li>" for s in said) + "</ul>"
            if said else "")


def first_screen_html(runs_dir, replicates: Mapping[str, str] | None = None) -> str:
    """The first screen: the scope, the questions, the readings the table alone would hide, the legend. On a
    narrow screen (page.PAGE_CSS) the questions come first, one card each, and the scope follows them."""
    said = reading_sentences(runs_dir)
    readings = ('<ul class="kit-readings">' + "".join(f"<li>{html.escape(t)}</li>" for t in said) + "</ul>"
                if said else "")
    what = what_sentence(runs_dir)
    return (PAGE_CSS + (f'<p class="kit-what"><b>{html.escape(what)}</b></p>' if what else "")
            + '<div class="kit-first">' + scope_html(runs_dir)
            + f'<div class="kit-first-table">{questions_html(runs_dir, replicates)}</div>'
            + readings + legend_html() + "</div>")


def replicate_readings(runs_dir: Selected) -> dict[str, str]:
    """The replicate analysis's reading per question (kit.evidence.replicate_analysis.robustness_by_question),
    keyed as the question rows are ("<comparison>/<check>"), for the selection's prefix (`runs/medium-*`:
    "medium"); empty where the selection names no prefix or its runs hold no replicates."""
    selection = Selection.of(runs_dir)
    prefix = (selection.pattern or "").split("-")[0].strip(GLOB_CHARACTERS)
    if not prefix:
        return {}
    return {f"{comparison}/{check}": text
            for (comparison, check), text in robustness_by_question(selection.runs_dir, prefix, brief=True).items()}


def show_questions(runs_dir: Selected, replicates: Mapping[str, str] | None = None) -> None:
    from IPython.display import HTML, display  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    selection = Selection.of(runs_dir)  # the notebook cell's DIR/GLOB, parsed once
    if replicates is None:
        replicates = replicate_readings(selection)
    display(HTML(first_screen_html(selection, replicates)))
