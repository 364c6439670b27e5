"""The report's run table: every run directory in order of start, including failed, aborted and
unavailable arms with their reasons, directories whose run.json is missing or broken ("unrecorded"),
and runs kept in the selection's evidence folders ("superseded" or "kept"); then the runs that did
not complete, with the cell and the exception that stopped them.
"""

from __future__ import annotations

import dataclasses
import html
import math
import os
from collections.abc import Mapping
from typing import Any

from kit.digest import load_json_strict
from kit.evidence import run_record as records
from kit.evidence.report.format import fmt, fmt_iso, root_html, run_link
from kit.evidence.report.index import IndexedRun
from kit.evidence.report.page import PAGE_CSS
from kit.evidence.report.selection import Selected, Selection
from kit.evidence.run_index import kept_rows, load_rows


def _device_text(device: Mapping[str, Any]) -> str:
    if device.get("gpu_count"):
        return f"{device['gpu_count']} x {device['gpus'][0]['name']}"
    return device.get("cpu") or ""


def run_table(runs_dir: str | os.PathLike):
    """pandas DataFrame of every run: id, notebook, status, reason, start, duration, commit, device, roots.
    Runs kept in the selection's evidence folders follow, with status "superseded" (a folder named so:
    superseded attempts and folders) or "kept" (another record a campaign kept, e.g. a seed's rebuild) and,
    in the reason, the folder and the status they ended with."""
    import pandas as pd  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    rows = []
    kept = []
    for k in kept_rows(runs_dir):
        r, folder = k.run, k.kept_in or ""
        kept.append(dataclasses.replace(
            r, reason=f"kept in {folder}/ (ended {r.status})" + (f": {r.reason}" if r.reason else ""),
            status="superseded" if "superseded" in folder else "kept"))
    for r in load_rows(runs_dir) + kept:
        commit = r.commit
        rows.append({
            "run": r.run_id, "notebook": r.notebook, "status": r.status, "reason": r.reason or "",
            "started (UTC)": r.started_at, "duration (s)": r.duration_s,
            "commit": (commit[:12] + ("+dirty" if r.dirty else "")) if commit else "",
            "device": _device_text(r.device),
            "roots produced": " ".join(e.root for e in r.roots.produced),
        })
    columns = ["run", "notebook", "status", "reason", "started (UTC)", "duration (s)", "commit", "device",
               "roots produced"]
    return pd.DataFrame(rows, columns=columns)


def _styled_html(df, table_id: str) -> str:
    """HTML of a run table with one CSS class per status cell (colour), escaped, no index."""
    styler = df.style.hide(axis="index").format(escape="html", na_rep="", precision=1)
    if "status" in df.columns:
        styler = styler.set_td_classes(df[["status"]].map(lambda s: f"status-{s}"))
    return styler.set_table_attributes(f'id="{table_id}" class="kit-table"').to_html()


def show_runs(runs_dir: Selected) -> None:
    from IPython.display import HTML, display  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    selection = Selection.of(runs_dir)  # the notebook cell's DIR/GLOB, parsed once
    df = run_table(selection)
    counts = ", ".join(f"{n} {status}" for status, n in df["status"].value_counts().sort_index().items())
    body = []
    for r in df.to_dict(orient="records"):
        cells = [run_link(r["run"])]
        for col in df.columns[1:]:
            v = r[col]
            if col == "roots produced":
                cells.append(" ".join(root_html(x) for x in v.split()))
            elif col == "started (UTC)":
                cells.append(html.escape(fmt_iso(v)))
            elif col == "duration (s)":
                cells.append(html.escape(fmt(None if isinstance(v, float) and math.isnan(v) else v)))  # NaN: not recorded
            else:
                cells.append(html.escape(str(v)))
        cls = [f' class="status-{html.escape(r["status"])}"' if c == "status" else "" for c in df.columns]
        body.append("<tr>" + "".join(f"<td{k}>{c}</td>" for k, c in zip(cls, cells)) + "</tr>")
    head = "".join(f"<th>{html.escape(c)}</th>" for c in df.columns)
    display(HTML(PAGE_CSS + f"<p>{len(df)} run(s): {html.escape(counts or 'none')}</p>"
                 + f'<div class="kit-scroll"><table id="kit-runs" class="kit-table"><thead><tr>{head}</tr></thead>'
                 + f'<tbody>{"".join(body)}</tbody></table></div>'))


def _bench_errors(row: IndexedRun) -> list[dict]:
    """A benchmark record's recorded errors (kit-bench/1 `errors`: one object per failing step)."""
    try:
        rec = load_json_strict(row.dir / records.RUN_RECORD_NAME)
    except (FileNotFoundError, ValueError):
        return []
    errs = rec.get("errors")
    return [e for e in errs if isinstance(e, dict)] if isinstance(errs, list) else []


def failure_rows(runs_dir: str | os.PathLike) -> list[dict]:
    """Every run that did not complete, with its recorded error: a notebook's failing cell, exception and message;
    a benchmark record's failing step and error, never its command."""
    rows: list[dict[str, Any]] = []
    for r in load_rows(runs_dir):
        if r.status == "completed":
            continue
        bench = _bench_errors(r) if r.notebook == "(benchmark script)" else []
        if bench:
            for e in bench:
                step = ", ".join(f"{k} {v}" for k, v in e.items() if k != "error" and not isinstance(v, (dict, list))
                                 and len(str(v)) < 40)
                if "error" not in e:  # {"deadline": "... timed out"}: the step is the key
                    step = step or ", ".join(e)
                msg = e.get("error") or "; ".join(f"{k}: {v}" for k, v in e.items())
                rows.append({"run": r.run_id, "status": r.status, "failing cell or step": step or None, "In [n]": None,
                             "exception": "", "message": str(msg)})
            continue
        reason = r.reason or ""
        error = r.error
        rows.append({"run": r.run_id, "status": r.status, "failing cell or step": error.cell_index if error else None,
                     "In [n]": error.execution_count if error else None, "exception": error.ename if error else "",
                     "message": (error.evalue if error else "" if reason.startswith("benchmark: ") else reason)
                     or "no error recorded"})
    return rows


def show_failures(runs_dir: Selected) -> None:
    """Every run that did not complete: the cell, the exception and its full message (failure_rows)."""
    import pandas as pd  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)
    from IPython.display import HTML, display  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    selection = Selection.of(runs_dir)  # the notebook cell's DIR/GLOB, parsed once
    rows = failure_rows(selection)
    if not rows:
        display(HTML("<p>Every run completed.</p>"))
        return
    df = pd.DataFrame(rows).astype({"failing cell or step": "object", "In [n]": "object"})
    display(HTML('<div class="kit-scroll">' + _styled_html(df, "kit-failures") + "</div>"))
