"""What the evidence shows and does not show, the paragraph that opens the report: per contract,
its scale's fixed description (what a scale can and cannot show), then sentences computed from the
evidence, each naming the runs it stands on.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

from kit.evidence.report.format import fmt, is_number, short
from kit.evidence.report.index import IndexedRun, RunIndex, index, is_cpu, is_replicate, metric, run_contract
from kit.evidence.report.selection import Selected, Selection
from kit.evidence.report.verdict_rows import VerdictRow, verdict_rows
from kit.evidence.results import split_of

SCALE_TEXT = {
    "tiny": ("tiny scale: the kit's tiny seed, a few updates on CPU cores. This shows that the whole "
             "pipeline runs and that every record, checkpoint root, gate and screen is computed from committed "
             "inputs; it does not measure learning quality: a gate or screen that fails (or passes) at this "
             "scale says nothing about the method at full scale."),
    "medium": ("medium scale: the frozen trial's structure and exact counts on the kit's small seed (its size and "
               "training data: \"What the seed knew\"), with the free choices fixed by a committed pilot on "
               "development roles. Verdicts speak about the method at that model size, not the trial's 1.7B result."),
    "full": ("full scale: the frozen contract. The verdicts below are the trial's result, on public task "
             "families only; they do not establish general assistant capability."),
}


def row_contract_digest(row: VerdictRow, idx: RunIndex) -> str | None:
    """The contract digest of the first run behind a verdict row that records one (a comparison run
    records none; the runs it compares do)."""
    for name in row.runs:
        digest = idx.by_id[name].contract_digest if name in idx.by_id else None
        if digest:
            return digest
    return None


def _runs_text(names) -> str:
    return ", ".join(dict.fromkeys(names))


def scope_paragraphs(runs_dir) -> list[str]:
    """One paragraph per contract with gates or screens. Every claim in it is computed from the evidence
    and names the runs it stands on; only the scale's description (what a scale can and cannot show)
    is fixed text."""
    idx = index(runs_dir)
    rows = verdict_rows(runs_dir)
    out = []
    experiments: list[tuple[Any, Any, IndexedRun]] = []  # (contract file or digest, its contract or None, its run)
    for r in idx.runs:
        if metric(r, "gates") is not None or metric(r, "screen_quality") is not None:
            c = run_contract(r)
            key = (c or {}).get("file") or r.contract_digest
            if key not in [e[0] for e in experiments]:
                experiments.append((key, c, r))
    migration_said = False
    for key, c, r in experiments:
        scale = (c or {}).get("scale")
        digest = r.contract_digest
        name = (c or {}).get("file") or f"contract {short(digest or '')}"
        where = f" at commit {c['commit'][:10]}" if c and c.get("commit") else ""
        is_study = metric(r, "screen_quality") is not None
        text = [f"<b>{html.escape(name)}</b>{where}: " + (SCALE_TEXT.get(str(scale)) or
                                                          f"scale {html.escape(str(scale))} (not described).")]
        text += [html.escape(t) for t in (seed_sentence(idx, digest), accuracy_sentence(idx, digest)) if t]
        mine = [v for v in (rows.study if is_study else rows.adaptive) if row_contract_digest(v, idx) == digest]
        passed = sum(1 for v in mine if v.verdict == "pass")
        failed = sum(1 for v in mine if v.verdict == "fail")
        other: dict[str, int] = {}
        for v in mine:
            if v.verdict not in ("pass", "fail"):
                other[str(v.verdict)] = other.get(str(v.verdict), 0) + 1
        rest = "".join(f", {k} {o}" for o, k in other.items())
        text.append(html.escape(f"Of the {len(mine)} verdict row(s) of {name}, {passed} pass and {failed} fail{rest} "
                                f"(from {_runs_text(v.source.split('/')[0] for v in mine) or 'no run'})."))
        caveat = caveat_sentence(idx, digest, c)
        if caveat:
            text.append(html.escape(caveat))
        if not is_study and not migration_said:
            sentence = migration_sentence(rows.adaptive, idx)
            if sentence:
                text.append(html.escape(sentence))
                migration_said = True
        elif is_study:
            speed = [v for v in mine if v.check.startswith("speed")]
            arms = [x for x in idx.runs if x.parameters.get("ARM") and not is_replicate(x)
                    and x.contract_digest == digest]
            cpu = all(is_cpu(x) for x in arms)
            if speed and speed[0].reason:  # not measured (e.g. the workers shared one GPU): no ratio
                text.append(html.escape(
                    f"The speed screen is {speed[0].verdict} ({speed[0].source.split('/')[0]}): "
                    f"{speed[0].reason}; GPU time and cost are reported per arm, as measured."))
            elif speed and cpu:
                text.append(html.escape(
                    f"The speed ratio ({fmt(speed[0].value)}, {speed[0].source.split('/')[0]}) was measured on "
                    f"CPU ({_runs_text(x.run_id for x in arms)}): it measures start-up and per-update overhead "
                    "there, not the throughput of the contract's GPUs; no GPU cost is priced for CPU runs."))
            elif speed:
                text.append(html.escape(
                    f"The speed ratio is {fmt(speed[0].value)} ({speed[0].source.split('/')[0]}); GPU time "
                    "and cost are reported per arm, separately from the screen."))
        out.append(" ".join(text))
    return out


@dataclass(frozen=True, slots=True)
class AccuracyPoint:
    """A per-family task accuracy a run recorded (in memory): the run, its split, the model ("seed", "baseline",
    "candidate" or as its sidecar names it), the family ("all": the overall row), the accuracy, and the counts
    where recorded."""
    run: str
    split: Any
    model: Any
    family: Any
    accuracy: float
    correct: Any
    n: Any


def accuracy_points(idx: RunIndex, digest: str | None) -> list[AccuracyPoint]:
    """Every per-family task accuracy recorded by a run of the contract `digest`; the "all" row included (family
    "all"). Replicates' runs are read by the noise section, not here: the frozen contract's numbers are its frozen
    runs'."""
    out: list[AccuracyPoint] = []
    for r in idx.runs:
        if r.contract_digest != digest or is_replicate(r):
            continue
        acc = metric(r, "accuracy_by_family")
        split = split_of(r.record)
        params = r.parameters
        if isinstance(acc, dict):
            models = {"baseline": "seed" if str(params.get("BASELINE", "")).startswith("seed:") else "baseline",
                      "candidate": "candidate"}
            for family, row in acc.items():
                if not isinstance(row, dict):
                    continue
                for side, model in models.items():
                    if is_number(row.get(f"accuracy_{side}")):
                        out.append(AccuracyPoint(run=r.run_id, split=split, model=model, family=family,
                                                 accuracy=row[f"accuracy_{side}"], correct=row.get(f"correct_{side}"),
                                                 n=row.get("n")))
        elif isinstance(acc, list):
            out += [AccuracyPoint(run=r.run_id, split=split, model=x.get("model"), family=x.get("family"),
                                  accuracy=x["accuracy"], correct=x.get("correct"), n=x.get("n"))
                    for x in acc if isinstance(x, dict) and is_number(x.get("accuracy"))]
    return out


def caveat_sentence(idx: RunIndex, digest: str | None, contract: dict | None) -> str | None:
    """The scope caveat the trial's seed document requires, naming the contract's task families (as scored)."""
    families = sorted({p.family for p in accuracy_points(idx, digest)} - {"all"})
    if not families:
        return None
    doc = (contract or {}).get("seed_document")
    return (f"Its verdicts are on the public generated task families {', '.join(families)} only: they do not "
            "establish general assistant capability" + (f" (the caveat {doc} requires)." if doc else "."))


def accuracy_sentence(idx: RunIndex, digest: str | None) -> str | None:
    """The highest task accuracy per split, with the run, model and family that reached it."""
    points = [p for p in accuracy_points(idx, digest) if p.family != "all"]
    parts = []
    for split in dict.fromkeys(p.split for p in points):
        best = max((p for p in points if p.split == split), key=lambda p: p.accuracy)
        parts.append(f"{split} {fmt(best.accuracy)} ({best.run}, {best.model}, {best.family})")
    return ("Measured: the highest task accuracy of any model and family, per split: " + "; ".join(parts) + "."
            if parts else None)


def seed_sentence(idx: RunIndex, digest: str | None) -> str | None:
    """How many generated tasks the seed answers, per split, from its overall ("all") rows."""
    seeds = [p for p in accuracy_points(idx, digest) if p.model == "seed" and p.family == "all"
             and is_number(p.correct) and is_number(p.n)]
    groups: dict[tuple, list[str]] = {}
    for p in seeds:
        groups.setdefault((p.split, p.correct, p.n), []).append(p.run)
    parts = [f"{'none' if correct == 0 else fmt(correct)} of {fmt(n)} on the {split} split ({_runs_text(runs)})"
             for (split, correct, n), runs in groups.items()]
    return "Measured: of the generated tasks, the seed answers " + "; ".join(parts) + "." if parts else None


def migration_sentence(rows: list[VerdictRow], idx: RunIndex) -> str | None:
    """Migration equality per scale, each scale with the comparisons it stands on: "exact at N of M
    scale(s)" counts only scales whose every elementwise comparison found equal learned states."""
    mig = [v for v in rows if v.check == "learned state equal to the uninterrupted control"]
    if not mig:
        return None
    by_scale: dict[str, list[VerdictRow]] = {}
    for v in mig:
        c = None
        for n in v.runs:
            c = run_contract(idx.by_id[n]) if n in idx.by_id else None
            if c:
                break
        where = (c or {}).get("scale") or ("GPU campaign" if "#results/" in v.source else "unrecorded scale")
        by_scale.setdefault(where, []).append(v)
    exact = [s for s, vs in by_scale.items() if all(v.verdict == "pass" for v in vs)]
    parts = [f"{s} ({'equal' if s in exact else 'not equal'}: "
             f"{_runs_text(v.source.split('/')[0] for v in vs)}, max |parameter difference| "
             f"{fmt(max(v.value for v in vs if is_number(v.value)) if any(is_number(v.value) for v in vs) else None)})"
             for s, vs in by_scale.items()]
    return (f"Migration equality is exact at {len(exact)} of {len(by_scale)} scale(s) in this evidence: "
            + "; ".join(parts) + ". No other scale was measured.")


def show_scope(runs_dir: Selected) -> None:
    from IPython.display import HTML, display  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    selection = Selection.of(runs_dir)  # the notebook cell's DIR/GLOB, parsed once
    paras = scope_paragraphs(selection)
    if not paras:
        paras = ["No gate or screen was computed: this directory holds runs without a final comparison."]
    display(HTML("".join(f'<p class="kit-scope">{p}</p>' for p in paras)))
