"""The header of each run's section in the report: status, start, device, commit, contract, lineage
(parent run and root, and the updates the run itself did) and the roots it used and produced; for a
benchmark record (kit-bench/1), its command and result rows. Its sidecars follow (sidecars.py)."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from typing import Any

from kit.digest import load_json_strict
from kit.evidence import run_record as records
from kit.evidence.report.figures import learning_figure
from kit.evidence.report.format import (
    NONE,
    cell_html,
    fmt_iso,
    img_html,
    is_number,
    kv_table,
    records_table,
    root_html,
    run_link,
)
from kit.evidence.report.index import IndexedRun, RunIndex, gpu_names, index, producer, run_contract
from kit.evidence.report.selection import Selected, Selection
from kit.evidence.report.sidecar_formats import Commits, Throughput, sidecar


@dataclass(frozen=True, slots=True)
class Lineage:
    """Where a resumed run started (in memory): the run that produced its root (None when not in this directory),
    the root, what kind of start it was in words ("resumed, migrated from 2 to 4 workers"), and the updates it did
    itself (first, last), None when its sidecars do not say."""
    parent: str | None
    root: str
    kind: str
    own_updates: tuple[int, int] | None


def lineage(row: IndexedRun, idx: RunIndex) -> Lineage | None:
    """Where a resumed, migrated or grown run started: parent run and root, and the updates it did itself."""
    p = row.parameters
    resume = p.get("RESUME")
    if not resume:
        return None
    parent = producer(resume, idx)
    parent_row = idx.by_id.get(parent) if parent else None
    kinds = ["resumed"]
    if p.get("GROW"):
        kinds.append("grown (blocks appended)")
    pw = parent_row.parameters.get("WORKERS") if parent_row else None
    if pw and p.get("WORKERS") and pw != p.get("WORKERS"):
        kinds.append(f"migrated from {pw} to {p['WORKERS']} workers")
    if parent_row and parent_row.parameters.get("COHORT") not in (None, p.get("COHORT")):
        kinds.append(f"new cohort {p.get('COHORT')} after cohort {parent_row.parameters['COHORT']}")
    own = None
    thr, commits = sidecar(row, Throughput), sidecar(row, Commits)
    if thr is not None and is_number(thr.updates) and commits is not None and commits.rows:
        steps: tuple[Any, ...] = commits.cells("cohort_step", default=0)  # the recorded table's cohort steps
        last = max(steps)
        own = (last - thr.updates + 1, last)
    return Lineage(parent=parent, root=resume, kind=", ".join(kinds), own_updates=own)


def show_run(runs_dir: Selected, run_id: str) -> None:
    """The run's anchor and a one-table header: status, time, device, commit, contract, lineage."""
    from IPython.display import HTML, display  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    selection = Selection.of(runs_dir)  # the notebook cell's DIR/GLOB, parsed once
    idx = index(selection)
    row = idx.by_id[run_id]
    dev = row.device
    gpus = gpu_names(row)
    device = f"{len(gpus)} GPU ({', '.join(dict.fromkeys(gpus))})" if gpus else f"CPU ({dev.get('cpu', 'unknown')})"
    git = row.git
    c = run_contract(row)
    info: list[list[Any]] = [["status", row.status + (f": {row.reason}" if row.reason else "")],
            ["notebook", row.notebook or NONE],
            ["started", fmt_iso(row.started_at)],
            ["duration (s)", row.duration_s],
            ["device", device],
            ["git commit", f"{(git.get('commit') or '')[:10]}{' (dirty)' if git.get('dirty') else ''}" or NONE]]
    if c:
        info.append(["contract", f"{c['file']} (scale {c.get('scale')})"])
    lin = lineage(row, idx)
    out = [f'<a id="run-{html.escape(run_id)}"></a>']
    rows_html = "".join(f"<tr><th>{html.escape(k)}</th><td>{cell_html(v, k)}</td></tr>" for k, v in info)
    if lin:
        parent = run_link(lin.parent) if lin.parent else "(not in this directory)"
        rows_html += (f"<tr><th>lineage</th><td>{html.escape(lin.kind)} from {parent} at root "
                      f"{root_html(lin.root)}</td></tr>")
        if lin.own_updates:
            a, b = lin.own_updates
            rows_html += (f"<tr><th>this run's updates</th><td>cohort updates {a}\u2013{b} (earlier updates in its "
                          f"plots belong to its parent, drawn dashed)</td></tr>")
    used = [u.root for u in row.roots.used]
    produced = [u.root for u in row.roots.produced]
    for label, roots in (("checkpoints used", used), ("checkpoints produced", produced)):
        if roots:
            rows_html += (f"<tr><th>{label}</th><td>"
                          + "; ".join(root_html(x, idx.runs_by_root) for x in dict.fromkeys(roots)) + "</td></tr>")
    out.append(f'<div class="kit-scroll"><table class="kit-table kit-run-header">{rows_html}</table></div>')
    if row.notebook == "(benchmark script)":
        out.append(_bench_html(row))
    display(HTML("".join(out)))


def _bench_html(row: IndexedRun) -> str:
    """A kit-bench/1 record: its command, and its result rows grouped by row name."""
    try:
        rec = load_json_strict(row.dir / records.RUN_RECORD_NAME)
    except (FileNotFoundError, ValueError) as e:
        return f"<p>{html.escape(str(e))}</p>"
    parts = [(f"<p>Benchmark command: <code>{html.escape(str(rec.get('command')))}</code>; "
              f"ended {html.escape(fmt_iso(rec.get('ended_at')))}; raw output "
              f"<code>{html.escape(json.dumps(rec.get('raw_output')))}</code>.</p>")]
    if rec.get("errors"):
        parts.append("<p>Errors: " + html.escape(json.dumps(rec["errors"])) + "</p>")
    results = rec.get("results")
    if isinstance(results, list):
        groups: dict[str, list] = {}
        for r in results:
            if isinstance(r, dict):
                groups.setdefault(str(r.get("row", r.get("method", "result"))), []).append(r)
        for name, recs in groups.items():
            parts.append(f"<h4>{html.escape(name)}</h4>")
            curves = [x for x in recs if is_number(x.get("cohort_step")) and is_number(x.get("ce_per_token"))]
            for phase in dict.fromkeys(str(x.get("phase", "")) for x in curves):
                mine = [{"update": x["cohort_step"], **{k: v for k, v in x.items() if k not in ("cohort_step", "step")}}
                        for x in curves if str(x.get("phase", "")) == phase]
                fig = learning_figure(mine, f"{row.run_id}: {phase or 'updates'}", None)
                if fig:
                    parts.append(img_html(*fig))
            parts.append(records_table(recs))
    elif isinstance(results, dict):
        for k, v in results.items():
            parts.append(f"<h4>{html.escape(k)}</h4>")
            if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
                parts.append(records_table(v))
            elif isinstance(v, dict):
                parts.append(kv_table(v))
            else:
                parts.append(f"<p>{cell_html(v, k)}</p>")
    return "".join(parts)
