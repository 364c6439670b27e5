"""The per-family accuracy table near the top of the report: for each contract with a gate or screen, every
model's greedy task accuracy per family on each split, the seed first, then each endpoint and arm, each
cell naming the run that measured it. Read from the `accuracy_by_family` sidecars as recorded (adaptive
evaluations: candidate and baseline of one comparison; the study's evaluation: one row per model), so a
model scored by several runs on the same split appears once, from the first run that scored it.
"""

from __future__ import annotations

import html

from kit.evidence.report.format import fmt, is_number, run_link, table_html
from kit.evidence.report.index import index, metric, producer, run_contract
from kit.evidence.report.scope import split_of


def _adaptive_model(spec: str, idx: dict) -> str:
    """"seed" for a seed directory, else the run that produced the commit (its short root when none did)."""
    if not spec or spec.startswith("seed:"):
        return "seed"
    root = spec.rpartition(":")[2]
    return producer(root, idx) or root[:12]


def accuracy_models(idx: dict, digest: str | None) -> list[dict]:
    """[{split, model, run, families: {family: (correct, n)}}] of the contract's runs, in run order."""
    out, seen = [], set()

    def add(split, model, run, families):
        if (split, model) in seen or not families:
            return
        seen.add((split, model))
        out.append({"split": split, "model": model, "run": run, "families": families})

    for r in idx["runs"]:
        if r.get("contract_digest") != digest:
            continue
        acc, split, params = metric(r, "accuracy_by_family"), split_of(r), r.get("parameters") or {}
        if isinstance(acc, dict):  # an adaptive comparison: the baseline, then the candidate
            for side, spec in (("baseline", params.get("BASELINE", "")), ("candidate", params.get("CANDIDATE", ""))):
                fams = {f: (row.get(f"correct_{side}"), row.get("n")) for f, row in acc.items()
                        if isinstance(row, dict) and is_number(row.get(f"correct_{side}")) and is_number(row.get("n"))}
                add(split, _adaptive_model(str(spec), idx), r["run_id"], fams)
        elif isinstance(acc, list):  # the study's evaluation: one row per model and family
            for model in dict.fromkeys(x.get("model") for x in acc if isinstance(x, dict)):
                fams = {x["family"]: (x.get("correct"), x.get("n")) for x in acc
                        if isinstance(x, dict) and x.get("model") == model and is_number(x.get("correct"))}
                add(split, str(model), r["run_id"], fams)
    # the seed first within each split, the rest in the order their runs started
    return sorted(out, key=lambda m: (m["split"], m["model"] != "seed"))


def accuracy_html(runs_dir) -> list[str]:
    """One table per contract with a gate or screen (the scope paragraph's contracts, in the same order)."""
    idx = index(runs_dir)
    out, done = [], []
    for r in idx["runs"]:
        if metric(r, "gates") is None and metric(r, "screen_quality") is None:
            continue
        digest = r.get("contract_digest")
        if digest in done:
            continue
        done.append(digest)
        models = accuracy_models(idx, digest)
        if not models:
            continue
        families = sorted({f for m in models for f in m["families"] if f != "all"})
        families += ["all"] if any("all" in m["families"] for m in models) else []
        rows = []
        for m in models:
            cells = []
            for f in families:
                correct, n = m["families"].get(f, (None, None))
                cells.append(f"{fmt(correct)}/{fmt(n)} ({fmt(100 * correct / n)}%)" if n else "\u2014")
            rows.append([m["split"], m["model"], m["run"], *cells])
        c = run_contract(r)
        name = f"{(c or {}).get('file') or 'contract'} ({digest[:12] if digest else '?'})"
        table = table_html(["split", "model", "measured by", *families], rows, runs_by_root=idx["runs_by_root"],
                           caption=html.escape(f"{name}: greedy task accuracy by family, correct/n"))
        # the model and run cells as links to the run sections
        for m in models:
            for name_ in {m["run"], m["model"]}:
                if name_ in idx["by_id"]:
                    table = table.replace(f"<td>{html.escape(name_)}</td>", f"<td>{run_link(name_)}</td>")
        out.append(table)
    return out


def show_accuracy(runs_dir) -> None:
    from IPython.display import HTML, display

    tables = accuracy_html(runs_dir)
    display(HTML("".join(tables) if tables else "<p>No run of a contract with a gate or screen recorded "
                                                   "accuracy by family.</p>"))
