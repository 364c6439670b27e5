"""The per-family accuracy table of the report: for each contract with a gate or screen, every model's greedy task
accuracy per family on each split, the seed first, then each endpoint and arm, each row naming the run that
measured it. Drawn from kit.results (the current runs, kept_in ""), the same table each report folder carries as
results.csv, so the page and the CSV cannot differ.
"""

from __future__ import annotations

import html

from kit.evidence.report.format import fmt, run_link, table_html
from kit.evidence.report.index import index
from kit.evidence.results import results


def accuracy_tables(runs_dir) -> list[dict]:
    """[{contract, digest, families, rows: [[split, model, run, (correct, n) per family]]}] from kit.results."""
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
        out.append({"contract": mine["contract"].iloc[0], "digest": digest, "families": fams, "rows": rows})
    return out


def cell_text(correct, n) -> str:
    return f"{fmt(int(correct))}/{fmt(int(n))} ({fmt(100 * correct / n)}%)" if n else "\u2014"


def accuracy_html(runs_dir) -> list[str]:
    """One table per contract with a gate or screen (the scope paragraph's contracts, in the same order)."""
    idx = index(runs_dir)
    out = []
    for t in accuracy_tables(runs_dir):
        rows = [[split, model, run, *(cell_text(c, n) for c, n in cells)] for split, model, run, *cells in t["rows"]]
        name = f"{t['contract'] or 'contract'} ({t['digest'][:12] if t['digest'] else '?'})"
        table = table_html(["split", "model", "measured by", *t["families"]], rows, runs_by_root=idx["runs_by_root"],
                           caption=html.escape(f"{name}: greedy task accuracy by family, correct/n"))
        for name_ in {x for r in t["rows"] for x in r[1:3]}:  # the model and run cells as links to the run sections
            if name_ in idx["by_id"]:
                table = table.replace(f"<td>{html.escape(name_)}</td>", f"<td>{run_link(name_)}</td>")
        out.append(table)
    return out


def show_accuracy(runs_dir) -> None:
    from IPython.display import HTML, display  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    tables = accuracy_html(runs_dir)
    display(HTML("".join(tables) if tables else "<p>No run of a contract with a gate or screen recorded "
                                                   "accuracy by family.</p>"))
