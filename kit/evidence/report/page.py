"""`kit report`: the page, one HTML file over a runs directory, readable offline.

The page is itself a notebook built here: markdown headings, and code cells tagged `remove_input`
whose only code is one call of a show_* function of this package. nbclient executes it, so every
number on the page comes from a kernel that read the committed run records and sidecars; nbconvert's
"lab" template, without its CDN scripts, exports it with the tagged inputs removed. Plots are PNGs
embedded as data URIs and the CSS is inlined: `render_report` refuses to write a page that still
names an external script, stylesheet, image or frame.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from kit.environ import temporary_environ
from kit.evidence import records
from kit.evidence.run_index import load_runs

REMOVE_INPUT_TAG = "remove_input"
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
#kit-runs td[class*="status-"], #kit-failures td[class*="status-"], table.kit-pilot td[class*="status-"], td.verdict { white-space: nowrap; font-weight: bold; overflow-wrap: normal; }
p.kit-scope { max-width: 1100px; } p.kit-note { font-style: italic; max-width: 1100px; }
img.kit-figure { max-width: 100%; height: auto; }
.jp-OutputArea-output { max-width: 100%; overflow-x: auto; }
</style>"""
EXTERNAL_RE = re.compile(r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)\s*=\s*[\"']?(?:https?:)?//[^\s\"'>]*[\"']?",
                         re.IGNORECASE)


# --- building, executing and exporting the report notebook ----------------------------------
def _code_cell(source: str):
    import nbformat

    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["tags"] = [REMOVE_INPUT_TAG]
    return cell


def build_report_notebook(runs_dir: str | os.PathLike, title: str, relative_to: str | os.PathLike | None = None):
    """The report notebook (unexecuted): headings and tagged calls of the show_* functions.

    Order: what the evidence shows and does not show (show_scope: the scale caveat comes before any verdict),
    every model's accuracy by family (accuracy.show_accuracy), the pilots when the selection (or a selection beside it, pilots.PILOTS_BESIDE) holds pilot records
    (pilots.show_pilots), the verdict tables (verdicts.show_verdicts), the run table, the runs that did not
    complete, then one section per run
    (benchmark records included): its header with lineage, then its sidecars."""
    import nbformat

    from kit.evidence.report.pilots import beside, pilot_records
    from kit.evidence.run_index import split_selection

    shown = str(runs_dir)
    folder, pattern = split_selection(runs_dir)
    runs_dir = folder.resolve() / pattern if pattern else folder.resolve()  # the show_* calls take the selection

    def where(p: Path) -> str:  # relative to the report folder (the kernel's directory): no host path in the page
        return os.path.relpath(p, Path(relative_to).resolve()) if relative_to is not None else str(p)

    nb = nbformat.v4.new_notebook()
    nb.metadata["title"] = title
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    imports = ("from kit.evidence.report.accuracy import show_accuracy\n"
               "from kit.evidence.report.runs import show_failures, show_runs\n"
               "from kit.evidence.report.pilots import show_pilots\n"
               "from kit.evidence.report.scope import show_scope\nfrom kit.evidence.report.sections import show_run\n"
               "from kit.evidence.report.sidecars import show_metric\n"
               "from kit.evidence.report.verdicts import show_verdicts\n")
    nb.cells.append(nbformat.v4.new_markdown_cell(
        f"# {title}\n\nThe evidence in `{shown}`: its scale and verdicts first, then every run in order of start. "
        "Runs are named by their run id; checkpoint roots show their first 12 hex digits (hover for the full root). "
        "Numbers: integers in full, others to 4 significant digits; times in UTC."))
    nb.cells.append(nbformat.v4.new_markdown_cell("## What this evidence shows and does not show"))
    nb.cells.append(_code_cell(imports + f"show_scope({where(runs_dir)!r})"))
    nb.cells.append(nbformat.v4.new_markdown_cell("## Accuracy by family"))
    nb.cells.append(_code_cell(f"show_accuracy({where(runs_dir)!r})"))
    also = beside(runs_dir)
    if pilot_records(runs_dir, also):  # only a selection with pilot records has the section
        nb.cells.append(nbformat.v4.new_markdown_cell("## Pilots"))
        nb.cells.append(_code_cell(f"show_pilots({where(runs_dir)!r}, also={[where(a) for a in also]!r})"))
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
