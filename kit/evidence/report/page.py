"""`kit report`: the page, one HTML file over a runs directory, readable offline.

The page is itself a notebook built here: markdown headings, and code cells tagged `remove_input`
whose only code is one call of a show_* function of this package. nbclient executes it, so every
number on the page comes from a kernel that read the committed run records and sidecars; nbconvert's
"lab" template, without its CDN scripts, exports it with the tagged inputs removed. Plots are PNGs
embedded as data URIs and the CSS is inlined: `render_report` refuses to write a page that still
names an external script, stylesheet, image or frame.
"""

from __future__ import annotations

import html
import os
import re
from pathlib import Path

from kit.digest import write_files_atomic
from kit.environ import temporary_environ
from kit.evidence import run_record as records
from kit.evidence.archive import origin
from kit.evidence.report.css_prune import prune_page_styles
from kit.evidence.report.pilots import beside, pilot_records
from kit.evidence.report.selection import GLOB_CHARACTERS, Selection
from kit.evidence.results import results_bytes
from kit.evidence.root import root_and_commit
from kit.evidence.run_index import load_rows
from kit.evidence.runtime import REPORT_MODULES, ensure_runtime, kernel_pythonpath

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
details.kit-details > summary { font-size: 1.3em; font-weight: bold; cursor: pointer; margin: 12px 0; }
@media (max-width: 700px) { .jp-RenderedHTMLCommon table.kit-table td { max-width: 60vw; overflow-wrap: break-word; } }
.jp-OutputArea-output { max-width: 100%; overflow-x: auto; }
small.kit-id { font-size: 10px; color: #666; font-family: monospace; }
table.kit-questions { width: 100%; max-width: 1400px; table-layout: fixed; } span.kit-q { font-weight: bold; }
table.kit-questions { line-height: 1.25; }
table.kit-questions th:nth-child(1) { width: 31%; } table.kit-questions th:nth-child(2) { width: 7%; }
table.kit-questions th:nth-child(3) { width: 24%; } table.kit-questions th:nth-child(4) { width: 24%; }
.jp-RenderedHTMLCommon table.kit-questions td { max-width: 420px; overflow-wrap: break-word; }
ul.kit-first-scope { margin: 2px 0 6px 0; max-width: 1100px; } ul.kit-first-scope li { margin: 0; }
dl.kit-legend { font-size: 12px; max-width: 1100px; } dl.kit-legend dt { font-weight: bold; float: left; clear: left;
  margin-right: 6px; } dl.kit-legend dd { margin: 0 0 2px 0; }
div.kit-first { display: flex; flex-direction: column; }
p.kit-root { font-family: monospace; font-size: 11px; overflow-wrap: anywhere; margin: 2px 0; }
@media (max-width: 700px) {
  div.kit-first ul.kit-first-scope { order: 2; } div.kit-first-table { order: 1; } ul.kit-readings { order: 3; }
  dl.kit-legend { order: 4; } .jp-RenderedHTMLCommon h1 { font-size: 1.4em; }
  table.kit-questions, table.kit-questions tbody, table.kit-questions tr, table.kit-questions td { display: block; }
  table.kit-questions thead { display: none; }
  table.kit-questions tr { border: 1px solid #bbb; border-radius: 6px; margin: 0 0 8px 0; padding: 4px 6px; }
  .jp-RenderedHTMLCommon table.kit-questions td { border: 0; max-width: none; padding: 1px 0; white-space: normal; }
  table.kit-questions td::before { content: attr(data-label) ": "; font-weight: bold; color: #555; }
  table.kit-questions td[data-label="question"]::before { content: none; }
}
</style>"""
DETAILS_PREFIX = "kit-details-"
# Opening a collapsed section when a link points into it (run links, roots): inline, no network.
OPEN_JS = """<script>
function kitOpen() { const t = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)));
  for (let e = t; e; e = e.parentElement) if (e.tagName === 'DETAILS') e.open = true;
  if (t) t.scrollIntoView(); }
window.addEventListener('hashchange', kitOpen); window.addEventListener('load', kitOpen);
</script>"""
EXTERNAL_RE = re.compile(r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)\s*=\s*[\"']?(?:https?:)?//[^\s\"'>]*[\"']?",
                         re.IGNORECASE)


# --- building, executing and exporting the report notebook ----------------------------------
def _code_cell(source: str):
    import nbformat  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["tags"] = [REMOVE_INPUT_TAG]
    return cell


# The sections shown open, in order: (heading, the show_* function called with the selection)
LEAD_SECTIONS = (("Verdicts", "show_questions"), ("Accuracy by family", "show_accuracy"),
                 ("What the seed knew", "show_seed"), ("Noise and power", "show_noise"), ("History", "show_history"))


def heading_text(title: str) -> str:
    """`title` as markdown text that renders as itself: no HTML (`<script>` shows as text), no link, one line."""
    text = html.escape(" ".join(title.split()), quote=False)
    return text.replace("[", "\\[").replace("]", "\\]")


def evidence_root_line(evidence_root: tuple[str, str | None] | None) -> str:
    """The header's line naming the evidence root and the commit whose evidence it is (kit.evidence.root
    .root_and_commit; the commit in 12 hex digits, whole on hover); "" when none is given. A commit of None:
    the evidence is not a commit's (a demo's). `kit verify-evidence --at COMMIT --root ROOT` holds files to it."""
    if not evidence_root:
        return ""
    root, commit = evidence_root
    if not (re.fullmatch(r"[0-9a-f]{16,128}", root or "") and (commit is None
                                                               or re.fullmatch(r"[0-9a-f]{7,64}", commit))):
        raise ValueError(f"evidence_root {evidence_root!r}: expected (hex root, hex commit or None)")
    if commit is None:
        return f'<p class="kit-root">Evidence root {root}, of evidence that no commit holds</p>'
    return f'<p class="kit-root">Evidence root {root} computed at commit <span title="{commit}">{commit[:12]}</span></p>'


def build_report_notebook(runs_dir: Selection | str | os.PathLike, title: str,
                          relative_to: str | os.PathLike | None = None,
                          evidence_root: tuple[str, str | None] | None = None):
    """The report notebook (unexecuted): headings and tagged calls of the show_* functions.

    Order: the verdicts screen (questions.show_questions: the scope in three sentences, one row per question with
    what its verdict weighs, the readings the table alone would hide, a legend), accuracy by family (accuracy.show_accuracy,
    drawn from kit.results), what the seed knew (seed_knew.show_seed), noise and power (noise.show_noise) and
    every seed's verdicts (history.show_history). Then, each collapsed in a <details> (export_html): the scope and
    the verdict tables in full with speed, costs and traffic; the pilots when the selection (or one beside it,
    pilots.PILOTS_BESIDE) holds pilot records; the run table and the runs that did not complete; one section per
    run (benchmark records included): its header with lineage, then its sidecars."""
    import nbformat  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    shown = str(runs_dir)
    selection = Selection.of(runs_dir).resolved()  # the show_* calls take the selection

    def where(p: Path) -> str:  # relative to the report folder (the kernel's directory): no host path in the page
        return os.path.relpath(p, Path(relative_to).resolve()) if relative_to is not None else str(p)

    nb = nbformat.v4.new_notebook()
    nb.metadata["title"] = title
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    imports = ("from kit.evidence.report.accuracy import show_accuracy\n"
               "from kit.evidence.report.history import show_history\n"
               "from kit.evidence.report.noise import show_noise\n"
               "from kit.evidence.report.runs import show_failures, show_runs\n"
               "from kit.evidence.report.pilots import show_pilots\n"
               "from kit.evidence.report.questions import show_questions\n"
               "from kit.evidence.report.scope import show_scope\nfrom kit.evidence.report.sections import show_run\n"
               "from kit.evidence.report.seed_knew import show_seed\n"
               "from kit.evidence.report.sidecars import show_metric\n"
               "from kit.evidence.report.verdicts import show_verdicts\n")
    sel = where(selection.path)
    nb.cells.append(nbformat.v4.new_markdown_cell(
        f"# {heading_text(title)}\n\n" + evidence_root_line(evidence_root)
        + f"\n\nThe evidence in `{shown}`: each question answered first, then accuracy, what the seed knew, noise and "
        "power, and every seed's verdicts; the rest is collapsed below. Numbers to 4 significant digits; times in UTC."))
    for i, (heading, call) in enumerate(LEAD_SECTIONS):  # the page's first screens, in the order
        nb.cells.append(nbformat.v4.new_markdown_cell(f"## {heading}"))
        nb.cells.append(_code_cell((imports if i == 0 else "") + f"{call}({sel!r})"))
    details: dict[str, str] = {}

    def collapsed(key: str, summary: str, heading: str):  # a <details> from this cell up to the next one (export_html)
        details[key] = summary
        cell = nbformat.v4.new_markdown_cell(f"## {heading}")
        cell.id = DETAILS_PREFIX + key
        nb.cells.append(cell)

    collapsed("scope", "Scope, the trial's questions, verdict tables in full, costs and traffic",
              "What this evidence shows and does not show")
    nb.cells.append(_code_cell(f"show_scope({sel!r})"))
    nb.cells.append(nbformat.v4.new_markdown_cell("## Verdict tables, speed, costs and traffic"))
    nb.cells.append(_code_cell(f"show_verdicts({sel!r})"))
    also = beside(selection)
    if pilot_records(selection, also):  # only a selection with pilot records has the section
        collapsed("pilots", "Pilots", "Pilots")
        nb.cells.append(_code_cell(f"show_pilots({sel!r}, also={[where(a.path) for a in also]!r})"))
    collapsed("runs", "Runs, and the runs that did not complete", "Runs")
    nb.cells.append(_code_cell(f"show_runs({sel!r})"))
    nb.cells.append(nbformat.v4.new_markdown_cell("## Runs that did not complete"))
    nb.cells.append(_code_cell(f"show_failures({sel!r})"))
    _run_sections(nb, selection, sel, where, details)
    nb.metadata["kit_details"] = details
    return nb


def _run_sections(nb, selection: Selection, sel: str, where, details: dict) -> None:
    """One collapsed section per current run of the selection (its header, then its sidecars); the archived
    runs named in one paragraph (their sections would repeat what runs/archive/ keeps)."""
    import nbformat  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    every = load_rows(selection)
    rows = [r for r in every if origin(r.dir) is None]  # archived runs: listed, their sections in the archive
    archived = [r.run_id for r in every if origin(r.dir) is not None]
    for i, row in enumerate(rows):
        cell = nbformat.v4.new_markdown_cell(f"## {row.run_id} ({row.status})")
        if i == 0:
            cell.id = DETAILS_PREFIX + "records"
            details["records"] = f"Every run's record and sidecars ({len(rows)} runs)"
        nb.cells.append(cell)
        nb.cells.append(_code_cell(f"show_run({sel!r}, {row.run_id!r})"))
        for name in sorted(row.metrics):
            nb.cells.append(nbformat.v4.new_markdown_cell(f"### {name}"))
            nb.cells.append(_code_cell(f"show_metric({where(row.dir.resolve())!r}, {name!r})"))
    if archived:
        nb.cells.append(nbformat.v4.new_markdown_cell(
            f"## Archived runs\n\n{len(archived)} run(s) of this selection lie in `runs/archive/` (listed in the run "
            "table above; their records and sidecars: `runs/archive/index.md`, read in place by `kit verify-evidence`): "
            # each name carries its run's anchor, so a verdict or table citing an archived run links here
            + ", ".join(f'<a id="run-{html.escape(r)}"></a>`{r}`' for r in archived) + "."))


def external_resources(page: str) -> list[str]:
    """Tags of `page` that load a script, stylesheet, image or frame from the network."""
    return [m.group(0) for m in EXTERNAL_RE.finditer(page)]


def export_html(nb, title: str) -> str:
    import jinja2  # noqa: PLC0415 - optional: transformers' template engine
    from nbconvert import HTMLExporter  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)
    from nbconvert.preprocessors import TagRemovePreprocessor  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    exporter = HTMLExporter(template_name="lab", template_file=TEMPLATE_NAME,
                            extra_loaders=[jinja2.DictLoader({TEMPLATE_NAME: OFFLINE_TEMPLATE})],
                            exclude_input_prompt=True, exclude_output_prompt=True)
    exporter.register_preprocessor(TagRemovePreprocessor(remove_input_tags=(REMOVE_INPUT_TAG,)), enabled=True)
    page, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": title}})

    return prune_page_styles(collapse(page, nb.metadata.get("kit_details") or {}))


def collapse(page: str, details: dict[str, str]) -> str:
    """Each cell whose id is DETAILS_PREFIX + key opens a <details> (summary: details[key]) that runs up to the
    next such cell or the end of the notebook; cells are siblings in the lab template's <main>, so the
    wrapping keeps the page well formed."""
    starts = []
    for key, summary in details.items():
        m = re.search(r'<div class="jp-Cell[^"]*"[^>]*id="cell-id=' + re.escape(DETAILS_PREFIX + key) + '"', page)
        if m is None:
            raise ValueError(f"report page: no cell {DETAILS_PREFIX + key} to collapse")
        starts.append((m.start(), summary))
    end = page.rindex("</main>")
    out, last = [], 0
    starts.sort()
    for n, (pos, summary) in enumerate(starts):
        out.append(page[last:pos])
        if n:
            out.append("</details>")
        out.append(f'<details class="kit-details"><summary>{html.escape(summary)}</summary>')
        last = pos
    out.append(page[last:end] + ("</details>" if starts else "") + OPEN_JS + page[end:])
    return "".join(out)


def default_title(runs_dir: Selection | str | os.PathLike) -> str:
    """The title `kit report` gives without --title: the runs folder it reads (`runs`, `demo-out/runs`), with
    the selection (`runs/medium-*`), never the folder it writes."""
    selection = Selection.of(runs_dir)
    name = selection.runs_dir.name or selection.runs_dir.resolve().name
    return f"Evidence report: {name}" + (f"/{selection.pattern}" if selection.pattern else "")


def render_report(runs_dir: str | os.PathLike, out_dir: str | os.PathLike, *, title: str | None = None,
                  kernel_name: str = "python3", timeout_s: int = 600, select: str | None = None,
                  evidence_root: tuple[str, str | None] | None = None) -> Path:
    """Execute the report notebook over `runs_dir` (only the run ids matching the glob `select`, when
    given); write out_dir/report.ipynb and out_dir/index.html. `evidence_root`: (root, commit or None), shown in the
    header; by default the root of the runs folder and its ledger with the commit that holds them."""
    ensure_runtime(("nbformat", "nbclient", "jupyter_client", "ipykernel", *REPORT_MODULES), "render a report")
    import nbformat  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)
    from nbclient import NotebookClient  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    runs_dir, out_dir = Path(runs_dir), Path(out_dir)
    records.list_run_dirs(runs_dir)  # a missing runs directory is an error before anything is written
    if select is not None:
        if "/" in select or not any(ch in select for ch in GLOB_CHARACTERS):
            raise ValueError(f"select {select!r}: expected a glob over run ids, e.g. 'medium-*'")
        if not load_rows(Selection(runs_dir, select)):
            raise ValueError(f"{runs_dir}: no run id matches {select!r}; nothing was written")
    selection = Selection(runs_dir, select)  # the one parse of what the report reads: passed, never split again
    title = title or default_title(selection)
    if evidence_root is None:  # the whole evidence the selection is part of, and the commit that holds it
        evidence_root = root_and_commit(selection.runs_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    nb = build_report_notebook(selection, title, relative_to=out_dir, evidence_root=evidence_root)
    with temporary_environ({"PYTHONPATH": kernel_pythonpath()}):  # the kernel imports kit from this checkout
        NotebookClient(nb, kernel_name=kernel_name, timeout=timeout_s,
                       resources={"metadata": {"path": str(out_dir)}}).execute()
    notebook = nbformat.writes(nb)
    page = export_html(nb, title)
    external = external_resources(page)
    if external:
        raise ValueError(f"{out_dir / 'index.html'}: the page would load {len(external)} external resource(s), "
                         f"e.g. {external[0]!r}; it must read offline")
    index = out_dir / "index.html"
    # all three or none (a full disk leaves no truncated page or table; a report there before stays whole);
    # the bytes nbformat.write and write_text wrote
    write_files_atomic({out_dir / "report.ipynb": (notebook if notebook.endswith("\n") else notebook + "\n").encode("utf-8"),
                        index: page.encode("utf-8"),
                        out_dir / "results.csv": results_bytes(selection, out_dir / "results.csv")})  # kit.results
    return index
