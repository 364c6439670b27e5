"""The per-family accuracy table of the report: for each contract with a gate or screen, every model's greedy task
accuracy per family on each split, the seed first, then each endpoint and arm, each row naming the run that
measured it. Drawn from kit.results (the current runs, kept_in ""), the same table each report folder carries as
results.csv, so the page and the CSV cannot differ.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

from kit.evidence.report.figures import accuracy_figure, dev_curve_figure
from kit.evidence.report.format import fmt, img_html, run_link, table_html
from kit.evidence.report.index import index, metric
from kit.evidence.report.selection import Selected, Selection
from kit.evidence.results import results


@dataclass(frozen=True, slots=True)
class AccuracyTable:
    """One contract's accuracy by family (in memory): its file and digest, the families (the overall "all" last),
    and per (split, model, run) row the (correct, n) of each family."""
    contract: Any
    digest: Any
    families: list[str]
    rows: list[list[Any]]  # [split, model, run, (correct, n) per family]


def accuracy_tables(runs_dir) -> list[AccuracyTable]:
    """One table per contract, from kit.results."""
    df = results(runs_dir)
    df = df[(df["kept_in"] == "") & (df["replicate"] == 0)]  # the frozen runs; replicates: the noise section
    out = []
    for digest in dict.fromkeys(df["contract_digest"]):
        mine = df[df["contract_digest"] == digest]
        fams = sorted(set(mine["family"]) - {"all"}) + (["all"] if "all" in set(mine["family"]) else [])
        rows = []
        for (split, model, run), g in mine.groupby(["split", "model", "run_id"], sort=False):
            val = {(f, m): v for f, m, v in zip(g["family"], g["metric"], g["value"])}
            rows.append([split, model, run, *[(val.get((f, "correct")), val.get((f, "n"))) for f in fams]])
        out.append(AccuracyTable(contract=mine["contract"].iloc[0], digest=digest, families=fams, rows=rows))
    return out


def cell_text(correct, n) -> str:
    return f"{fmt(int(correct))}/{fmt(int(n))} ({fmt(100 * correct / n)}%)" if n else "\u2014"


def accuracy_html(runs_dir) -> list[str]:
    """One table per contract with a gate or screen (the scope paragraph's contracts, in the same order)."""
    idx = index(runs_dir)
    out = []
    for t in accuracy_tables(runs_dir):
        rows = [[split, model, run, *(cell_text(c, n) for c, n in cells)] for split, model, run, *cells in t.rows]
        name = f"{t.contract or 'contract'} ({t.digest[:12] if t.digest else '?'})"
        table = table_html(["split", "model", "measured by", *t.families], rows, runs_by_root=idx.runs_by_root,
                           caption=html.escape(f"{name}: greedy task accuracy by family, correct/n"))
        for name_ in {x for r in t.rows for x in r[1:3]}:  # the model and run cells as links to the run sections
            if name_ in idx.by_id:
                table = table.replace(f"<td>{html.escape(name_)}</td>", f"<td>{run_link(name_)}</td>")
        out.append(table)
    return out


def figures_html(runs_dir) -> list[str]:
    """The figures shown by default: each contract's final accuracy by family and model (from the same table), or
    the sentence saying why there is none; and the development accuracy over updates where a dev curve was
    recorded."""
    out = []
    for t in accuracy_tables(runs_dir):
        final = [r for r in t.rows if r[0] == "final"]
        if not final:
            continue
        # the records accuracy_figure draws (its input, as notebook 13 passes a sidecar's)
        recs = [{"model": model, "family": f, "correct": c, "n": n} for _, model, _, *cells in final
                for f, (c, n) in zip(t.families, cells) if c is not None and n]
        title = f"{t.contract or 'contract'}: final task accuracy by family"
        fig = accuracy_figure(recs, title, skip_empty=True)
        out.append(img_html(*fig) if fig else f'<p class="kit-note">{html.escape(title)}: no chart, since every '
                   f"model answered none of the {fmt(int(max(r['n'] for r in recs)))} final tasks correctly.</p>")
        break  # one figure: the first contract with finals
    for r in index(runs_dir).runs:
        curve = metric(r, "dev_curve")
        if isinstance(curve, dict):
            fig = dev_curve_figure(curve, f"{r.run_id}: development accuracy over updates")
            if fig:
                out.append(img_html(*fig))
                break
    return out


def show_accuracy(runs_dir: Selected) -> None:
    from IPython.display import HTML, display  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    selection = Selection.of(runs_dir)  # the notebook cell's DIR/GLOB, parsed once
    tables = accuracy_html(selection)
    display(HTML("".join(tables) + "".join(figures_html(selection)) if tables else
                 "<p>No run of a contract with a gate or screen recorded accuracy by family.</p>"))
