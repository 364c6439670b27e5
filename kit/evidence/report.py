"""`kit report`: one HTML page over a runs directory, readable offline.

The report is itself a notebook, built here with nbformat: markdown headings, and code cells
tagged `remove_input` whose only code is a call to a function of this module (show_runs,
show_failures, show_metric). nbclient executes it, so every number on the page comes from a
kernel that read runs/*/run.json and the metric sidecars; nbconvert's HTML exporter ("lab"
template, with its CDN scripts - require.js, MathJax, mermaid - left out) removes the tagged
inputs. Tables are pandas HTML, plots are matplotlib PNGs embedded as base64 data URIs, and the
CSS is inlined, so nothing that matters loads from the network. `render_report` refuses to write
a page that still names an external script or stylesheet.

The run table lists every run directory, including failed, aborted and unavailable arms with
their reasons and directories whose run.json is missing or broken ("unrecorded").
How a sidecar is drawn depends on its shape (docs/formats.md, "Metric sidecars"):
    list of records with a numeric "update" (or "step") key      curves, one panel per numeric field
    dict of equal-length numeric lists (>= 2 points)             curves over the index
    {"columns": [...], "rows": [[...], ...]}, list of records   table
    dict of dicts                                                table, one row per key
    other dicts                                                  two-column table (nested values as JSON)
    anything else                                                JSON text
"""

from __future__ import annotations

import html
import io
import json
import math
import os
import re
from pathlib import Path
from typing import Any

from kit.digest import load_json_strict
from kit.environ import temporary_environ
from kit.evidence import records
from kit.evidence.run_index import load_runs

REMOVE_INPUT_TAG = "remove_input"
CURVE_X_KEYS = ("update", "step")
TEMPLATE_NAME = "kit_report.html.j2"
# The lab template without the blocks that load scripts from a CDN (none of them is needed for
# tables and PNG images) and without widget state.
OFFLINE_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
"""
PAGE_CSS = """<style>
table.kit-table { border-collapse: collapse; font-size: 12px; margin: 4px 0 12px 0; }
.jp-RenderedHTMLCommon table.kit-table th, .jp-RenderedHTMLCommon table.kit-table td { border: 1px solid #ccc; padding: 2px 6px; vertical-align: top; text-align: left; }
.jp-RenderedHTMLCommon table.kit-table td { max-width: 520px; overflow-wrap: anywhere; }
.jp-RenderedHTMLCommon table.kit-table td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.kit-table caption { text-align: left; font-style: italic; }
div.kit-scroll { max-width: 100%; overflow-x: auto; }
code.kit-root { font-family: monospace; background: #f3f3f3; cursor: help; }
span.kit-json { font-family: monospace; font-size: 11px; }
#kit-runs td, #kit-failures td { white-space: pre-wrap; }
td.status-completed, td.verdict-pass { background: #e3f4e3; } td.status-failed, td.verdict-fail { background: #fbe0e0; }
td.status-aborted { background: #fdf0d5; } td.status-unavailable { background: #e8e8f4; }
td.status-unrecorded { background: #f4d8f4; } td.status-superseded, td.status-kept { background: #ececec; } td.verdict-n\\/a { background: #eeeeee; }
#kit-runs td[class*="status-"], #kit-failures td[class*="status-"], td.verdict { white-space: nowrap; font-weight: bold; overflow-wrap: normal; }
p.kit-scope { max-width: 1100px; } p.kit-note { font-style: italic; max-width: 1100px; }
img.kit-figure { max-width: 100%; height: auto; }
.jp-OutputArea-output { max-width: 100%; overflow-x: auto; }
</style>"""
EXTERNAL_RE = re.compile(r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)\s*=\s*[\"']?(?:https?:)?//[^\s\"'>]*[\"']?",
                         re.IGNORECASE)


# --- reading runs (used inside the report's kernel) -----------------------------------------
def _device_text(device: dict) -> str:
    if device.get("gpu_count"):
        return f"{device['gpu_count']} x {device['gpus'][0]['name']}"
    return device.get("cpu") or ""


def run_table(runs_dir: str | os.PathLike):
    """pandas DataFrame of every run: id, notebook, status, reason, start, duration, commit, device, roots.
    Runs kept in the selection's evidence folders follow, with status "superseded" (a folder named so:
    superseded attempts and folders) or "kept" (another record a campaign kept, e.g. a seed's rebuild) and,
    in the reason, the folder and the status they ended with."""
    import pandas as pd

    from kit.evidence.run_index import kept_runs

    rows = []
    kept = [{**r, "reason": f"kept in {r['kept_in']}/ (ended {r['status']})" + (f": {r['reason']}" if r["reason"] else ""),
             "status": "superseded" if "superseded" in r["kept_in"] else "kept"} for r in kept_runs(runs_dir)]
    for r in load_runs(runs_dir) + kept:
        commit = r["git"]["commit"]
        rows.append({
            "run": r["run_id"], "notebook": r["notebook"], "status": r["status"], "reason": r["reason"] or "",
            "started (UTC)": r["started_at"], "duration (s)": r["duration_s"],
            "commit": (commit[:12] + ("+dirty" if r["git"]["dirty"] else "")) if commit else "",
            "device": _device_text(r["device"]),
            "roots produced": " ".join(e["root"] for e in r["checkpoint_roots"]["produced"]),
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


def show_runs(runs_dir: str | os.PathLike) -> None:
    from IPython.display import HTML, display

    from kit.evidence.review_format import fmt, fmt_iso, root_html, run_link

    df = run_table(runs_dir)
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


def show_failures(runs_dir: str | os.PathLike) -> None:
    """Every run that did not complete: the cell, the exception and its full message."""
    import pandas as pd
    from IPython.display import HTML, display

    rows = []
    for r in load_runs(runs_dir):
        if r["status"] == "completed":
            continue
        error = r["error"] or {}
        rows.append({"run": r["run_id"], "status": r["status"], "cell": error.get("cell_index"),
                     "In [n]": error.get("execution_count"), "exception": error.get("ename", ""),
                     "message": error.get("evalue", r["reason"] or "")})
    if not rows:
        display(HTML("<p>Every run completed.</p>"))
        return
    df = pd.DataFrame(rows).astype({"cell": "object", "In [n]": "object"})
    display(HTML('<div class="kit-scroll">' + _styled_html(df, "kit-failures") + "</div>"))


# --- metric sidecars ------------------------------------------------------------------------
def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def metric_view(obj: Any) -> tuple[str, Any]:
    """("curves", (x_name, x_values, {series: values})) | ("table", DataFrame) | ("json", obj)."""
    import pandas as pd

    if isinstance(obj, list) and obj and all(isinstance(r, dict) for r in obj):
        for x in CURVE_X_KEYS:
            if all(is_number(r.get(x)) for r in obj):
                names = [k for k in obj[0] if k != x and all(is_number(r.get(k)) for r in obj)]
                if names:
                    return "curves", (x, [r[x] for r in obj], {k: [r[k] for r in obj] for k in names})
        return "table", pd.DataFrame(obj)
    if isinstance(obj, dict) and obj:
        if set(obj) >= {"columns", "rows"} and isinstance(obj["rows"], list):
            return "table", pd.DataFrame(obj["rows"], columns=obj["columns"])
        values = list(obj.values())
        lengths = {len(v) for v in values if isinstance(v, list)}
        if all(isinstance(v, list) and all(is_number(x) for x in v) for v in values) and len(lengths) == 1 \
                and lengths.pop() >= 2:
            return "curves", ("index", list(range(len(values[0]))), dict(obj))
        if all(isinstance(v, dict) for v in values):
            return "table", pd.DataFrame.from_dict(obj, orient="index")
        flat = {k: v if v is None or isinstance(v, (str, int, float, bool)) else json.dumps(v, sort_keys=True)
                for k, v in obj.items()}
        return "table", pd.DataFrame({"value": list(flat.values())}, index=list(flat))
    return "json", obj


def curves_png(x_name: str, x: list, series: dict[str, list], title: str) -> bytes:
    """PNG of one panel per series against x (Agg canvas through Figure: no GUI, no pyplot state)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    cols = min(3, len(series))
    rows = -(-len(series) // cols)
    fig = Figure(figsize=(4.2 * cols, 3.0 * rows), dpi=90, layout="constrained")
    fig.suptitle(title)
    for i, (name, values) in enumerate(series.items()):
        ax = fig.add_subplot(rows, cols, i + 1)
        ax.plot(x, values, marker="." if len(x) <= 64 else None, linewidth=1.2)
        ax.set_xlabel(x_name)
        if all(isinstance(v, int) for v in x):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(name)
        ax.grid(alpha=0.3)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def show_metric(run_dir: str | os.PathLike, name: str) -> None:
    """A sidecar of one run: the reviewer's view of a known sidecar (kit.evidence.review), else the
    view its shape chooses; every figure with alt text that states what it shows."""
    from IPython.display import HTML, display

    from kit.evidence import review, review_figures, review_format, review_sections

    run_dir = Path(run_dir)
    idx = review.index(run_dir.parent)
    run_id = next((r["run_id"] for r in idx["runs"] if Path(r["dir"]).resolve() == run_dir.resolve()), run_dir.name)
    if run_id in idx["by_id"] and review_sections.show_metric(run_dir.parent, run_id, name):
        return
    path = records.metric_path(run_dir, name)
    kind, view = metric_view(load_json_strict(path))
    if kind == "curves":
        x_name, x, series = view
        title = f"{run_id}: {name}"
        display(HTML(review_format.img_html(curves_png(x_name, x, series, title), review_figures.curves_alt(x_name, x, series, title))))
    elif kind == "table":
        import pandas as pd

        show_index = not isinstance(view.index, pd.RangeIndex)  # row labels only where they mean something
        recs = view.reset_index().to_dict(orient="records") if show_index else view.to_dict(orient="records")
        recs = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in recs]
        display(HTML(review_format.records_table(recs, runs_by_root=idx["runs_by_root"])))
    else:
        display(HTML(f"<pre>{html.escape(json.dumps(view, indent=1, sort_keys=True))}</pre>"))


# --- building, executing and exporting the report notebook ----------------------------------
def _code_cell(source: str):
    import nbformat

    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["tags"] = [REMOVE_INPUT_TAG]
    return cell


def build_report_notebook(runs_dir: str | os.PathLike, title: str, relative_to: str | os.PathLike | None = None):
    """The report notebook (unexecuted): headings and tagged calls of the show_* functions.

    Order: what the evidence shows and does not show (show_scope: the scale caveat comes before any verdict),
    the verdict tables (kit.evidence.review_verdicts.show_verdicts), the run table, the runs that did not
    complete, then one section per run
    (benchmark records included): its header with lineage, then its sidecars."""
    import nbformat

    from kit.evidence.run_index import split_selection

    shown = str(runs_dir)
    folder, pattern = split_selection(runs_dir)
    runs_dir = folder.resolve() / pattern if pattern else folder.resolve()  # the show_* calls take the selection

    def where(p: Path) -> str:  # relative to the report folder (the kernel's directory): no host path in the page
        return os.path.relpath(p, Path(relative_to).resolve()) if relative_to is not None else str(p)

    nb = nbformat.v4.new_notebook()
    nb.metadata["title"] = title
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    imports = ("from kit.evidence.report import show_failures, show_metric, show_runs\n"
               "from kit.evidence.review import show_scope\nfrom kit.evidence.review_sections import show_run\n"
               "from kit.evidence.review_verdicts import show_verdicts\n")
    nb.cells.append(nbformat.v4.new_markdown_cell(
        f"# {title}\n\nThe evidence in `{shown}`: its scale and verdicts first, then every run in order of start. "
        "Runs are named by their run id; checkpoint roots show their first 12 hex digits (hover for the full root). "
        "Numbers: integers in full, others to 4 significant digits; times in UTC."))
    nb.cells.append(nbformat.v4.new_markdown_cell("## What this evidence shows and does not show"))
    nb.cells.append(_code_cell(imports + f"show_scope({where(runs_dir)!r})"))
    nb.cells.append(nbformat.v4.new_markdown_cell("## Verdicts"))
    nb.cells.append(_code_cell(f"show_verdicts({where(runs_dir)!r})"))
    nb.cells.append(nbformat.v4.new_markdown_cell("## Runs"))
    nb.cells.append(_code_cell(f"show_runs({where(runs_dir)!r})"))
    nb.cells.append(nbformat.v4.new_markdown_cell("## Runs that did not complete"))
    nb.cells.append(_code_cell(f"show_failures({where(runs_dir)!r})"))
    for row in load_runs(runs_dir):
        nb.cells.append(nbformat.v4.new_markdown_cell(f"## {row['run_id']} ({row['status']})"))
        nb.cells.append(_code_cell(f"show_run({where(runs_dir)!r}, {row['run_id']!r})"))
        for name in sorted(row["metrics"]):
            nb.cells.append(nbformat.v4.new_markdown_cell(f"### {name}"))
            nb.cells.append(_code_cell(f"show_metric({where(row['dir'].resolve())!r}, {name!r})"))
    return nb


def external_resources(page: str) -> list[str]:
    """Tags of `page` that load a script, stylesheet, image or frame from the network."""
    return [m.group(0) for m in EXTERNAL_RE.finditer(page)]


def export_html(nb, title: str) -> str:
    import jinja2
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import TagRemovePreprocessor

    exporter = HTMLExporter(template_name="lab", template_file=TEMPLATE_NAME,
                            extra_loaders=[jinja2.DictLoader({TEMPLATE_NAME: OFFLINE_TEMPLATE})],
                            exclude_input_prompt=True, exclude_output_prompt=True)
    exporter.register_preprocessor(TagRemovePreprocessor(remove_input_tags=(REMOVE_INPUT_TAG,)), enabled=True)
    page, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": title}})
    return page


def render_report(runs_dir: str | os.PathLike, out_dir: str | os.PathLike, *, title: str | None = None,
                  kernel_name: str = "python3", timeout_s: int = 600, select: str | None = None) -> Path:
    """Execute the report notebook over `runs_dir` (only the run ids matching the glob `select`, when
    given); write out_dir/report.ipynb and out_dir/index.html."""
    from kit.evidence.runtime import REPORT_MODULES, ensure_runtime, kernel_pythonpath

    ensure_runtime(("nbformat", "nbclient", "jupyter_client", "ipykernel", *REPORT_MODULES), "render a report")
    import nbformat
    from nbclient import NotebookClient

    runs_dir, out_dir = Path(runs_dir), Path(out_dir)
    records.list_run_dirs(runs_dir)  # a missing runs directory is an error before anything is written
    if select is not None:
        if "/" in select or not any(ch in select for ch in "*?["):
            raise ValueError(f"select {select!r}: expected a glob over run ids, e.g. 'medium-*'")
        if not load_runs(runs_dir / select):
            raise ValueError(f"{runs_dir}: no run id matches {select!r}; nothing was written")
        runs_dir = runs_dir / select
    title = title or f"Evidence report: {out_dir.name}"
    out_dir.mkdir(parents=True, exist_ok=True)
    nb = build_report_notebook(runs_dir, title, relative_to=out_dir)
    with temporary_environ({"PYTHONPATH": kernel_pythonpath()}):  # the kernel imports kit from this checkout
        NotebookClient(nb, kernel_name=kernel_name, timeout=timeout_s,
                       resources={"metadata": {"path": str(out_dir)}}).execute()
    nbformat.write(nb, out_dir / "report.ipynb")
    page = export_html(nb, title)
    external = external_resources(page)
    if external:
        raise ValueError(f"{out_dir / 'index.html'}: the page would load {len(external)} external resource(s), "
                         f"e.g. {external[0]!r}; it must read offline")
    index = out_dir / "index.html"
    index.write_text(page, encoding="utf-8")
    return index
