"""One dispatch from a metric sidecar to its view on the page. A sidecar the reviewer knows by name
(loss curves with the run's own updates marked, accuracy bars, the bootstrap bounds, a comparison,
a cost) gets that view; any other is drawn by its shape (docs/formats/metric-sidecars.md, "Metric sidecars"):
    list of records with a numeric "update" (or "step") key      curves, one panel per numeric field
    dict of equal-length numeric lists (>= 2 points)             curves over the index
    {"columns": [...], "rows": [[...], ...]}, list of records   table
    dict of dicts                                                table, one row per key
    other dicts                                                  two-column table (nested values as JSON)
    anything else                                                JSON text
"""

from __future__ import annotations

import html
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.digest import load_json_strict
from kit.evidence import run_record as records
from kit.evidence.report.figures import (
    GROWTH_NOTE,
    accuracy_figure,
    bootstrap_figure,
    curves_alt,
    curves_png,
    dev_curve_figure,
    learning_figure,
)
from kit.evidence.report.format import img_html, is_number, kv_table, records_table, table_html
from kit.evidence.report.index import IndexedRun, RunIndex, index, is_cpu, metric, producer
from kit.evidence.report.sections import Lineage, lineage

CURVE_X_KEYS = ("update", "step")
CPU_COST_NOTE = ('<p class="kit-note">This run used no GPU: GPU hours and GPU cost are not shown (the total is '
                 'the contract\'s projected price, not money spent).</p>')
GPU_COST_NOTE = ('<p class="kit-note">The contract\'s prices (the seed\'s L40S hosts, cross-zone transfer for ring '
                 'bytes estimated from logical bytes) applied to this run: a projection at the seed\'s prices, '
                 'not what it cost. GPU time as measured is in the study\'s cost table under the verdicts.</p>')


@dataclass(frozen=True, slots=True)
class ColumnTable:
    """A sidecar shaped as a table (in memory): {"columns": [...], "rows": [[...], ...]}, drawn as one whatever its
    name (commits, dev_curve, ...)."""
    columns: Any
    rows: Any

    @classmethod
    def of(cls, obj: Any) -> ColumnTable | None:
        """The table of a sidecar of that shape (other keys beside), else None."""
        if not (isinstance(obj, dict) and set(obj) >= {"columns", "rows"}):
            return None
        return cls(columns=obj["columns"], rows=obj["rows"])


def metric_view(obj: Any) -> tuple[str, Any]:
    """("curves", (x_name, x_values, {series: values})) | ("table", DataFrame) | ("json", obj)."""
    import pandas as pd  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    if isinstance(obj, list) and obj and all(isinstance(r, dict) for r in obj):
        for x in CURVE_X_KEYS:
            if all(is_number(r.get(x)) for r in obj):
                names = [k for k in obj[0] if k != x and all(is_number(r.get(k)) for r in obj)]
                if names:
                    return "curves", (x, [r[x] for r in obj], {k: [r[k] for r in obj] for k in names})
        return "table", pd.DataFrame(obj)
    if isinstance(obj, dict) and obj:
        table = ColumnTable.of(obj)
        if table is not None and isinstance(table.rows, list):
            return "table", pd.DataFrame(table.rows, columns=table.columns)
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


def curves_figure(obj: Any, title: str) -> bytes:
    """PNG of a sidecar shaped as curves, drawn as the report draws it (notebooks display this)."""
    kind, view = metric_view(obj)
    if kind != "curves":
        raise ValueError(f"{title}: a sidecar shaped as {kind}, expected curves (records with a numeric "
                         "'update' or 'step' key, or equal-length numeric lists)")
    x_name, x, series = view
    return curves_png(x_name, x, series, title)


def _control_curve(row: IndexedRun, idx: RunIndex, lin: Lineage | None) -> tuple[str, list] | None:
    """A migrated run's uninterrupted control: the other run of its cohort resumed from the same root with the
    parent's worker count; (run id, its loss curves) to draw over the migrated run's."""
    if not lin or "migrated" not in lin.kind:
        return None
    p = row.parameters
    for other in idx.runs:
        q = other.parameters
        if other is not row and q.get("RESUME") == p.get("RESUME") and q.get("COHORT") == p.get("COHORT") \
                and q.get("WORKERS") != p.get("WORKERS") and not q.get("GROW"):
            curve = metric(other, "loss_curves")
            if isinstance(curve, list) and curve:
                return other.run_id, curve
    return None


def _model_names(row: IndexedRun, idx: RunIndex) -> dict[str, str]:
    """The legend's names of a gate run's two models: the seed, or the run that produced the root it scored."""
    p = row.parameters
    out = {}
    for side, key in (("baseline", "BASELINE"), ("candidate", "CANDIDATE")):
        spec = str(p.get(key) or "")
        if spec.startswith("seed:"):
            out[side] = f"{side}: the seed"
        elif spec:  # HOME:root
            root = spec.rsplit(":", 1)[-1]
            out[side] = f"{side}: {producer(root, idx) or root[:12]}"
    return out


def _named_view(row: IndexedRun, idx: RunIndex, name: str, obj: Any, title: str) -> str | None:
    """The reviewer's view of a sidecar known by its name; None when the name (or its shape) has none."""
    rbr = idx.runs_by_root
    if name == "loss_curves" and isinstance(obj, list) and obj:
        lin = lineage(row, idx)
        fig = learning_figure(obj, title, lin.own_updates if lin else None, overlay=_control_curve(row, idx, lin))
        if fig:
            return img_html(*fig)
    if name == "accuracy_by_family" and isinstance(obj, (dict, list)) and obj:
        fig = accuracy_figure(obj, title, _model_names(row, idx), skip_empty=True)
        recs = [{"family": f, **v} for f, v in obj.items()] if isinstance(obj, dict) else obj
        if fig:
            return img_html(*fig) + records_table(recs, runs_by_root=rbr)
        return ('<p class="kit-note">No chart: every model answered none of these tasks correctly, so every bar '
                "would be empty.</p>" + records_table(recs, runs_by_root=rbr))
    if name == "nll_change_bounds" and isinstance(obj, dict):
        fig = bootstrap_figure(obj, metric(row, "gates"), metric(row, "bootstrap_distribution"), title)
        recs = [{"part": k, **v} for k, v in obj.items() if isinstance(v, dict)]
        return (img_html(*fig) if fig else "") + records_table(recs, runs_by_root=rbr)
    if name == "trajectories" and isinstance(obj, list) and obj:
        kind, view = metric_view(obj)
        if kind == "curves":
            comp = metric(row, "comparison") or {}
            names = {side: f"{side}: {run}" for side, run in (
                ("candidate", producer(comp.get("candidate_learned_state_root") or "", idx)),
                ("control", producer(comp.get("control_learned_state_root") or "", idx))) if run}
            x_name, x, series = view
            alt = curves_alt(x_name, x, series, title) + (
                "; each *_difference is candidate minus control" if any(k.endswith("_difference") for k in series)
                else "")
            return img_html(curves_png(x_name, x, series, title, names), alt)
    if name == "bootstrap_distribution":
        return "<p>Drawn with nll_change_bounds above.</p>"
    if name == "dev_curve" and isinstance(obj, dict):
        fig = dev_curve_figure(obj, title)
        table = ColumnTable.of(obj)
        return (img_html(*fig) if fig else "") + (table_html(table.columns, table.rows, runs_by_root=rbr)
                                                  if table is not None else "")
    if name == "comparison" and isinstance(obj, dict):
        note = "" if obj.get("same_parameter_names", True) else f'<p class="kit-note">{GROWTH_NOTE}</p>'
        return kv_table(obj, runs_by_root=rbr) + note
    if name in ("cost", "cost_total"):  # the contract's prices: on a CPU run without its GPU fields
        cpu = is_cpu(row)
        drop = (lambda d: {k: v for k, v in d.items() if not k.startswith("gpu_")}) if cpu else (lambda d: d)
        note = CPU_COST_NOTE if cpu else GPU_COST_NOTE
        if isinstance(obj, list):
            return records_table([drop(x) for x in obj], runs_by_root=rbr) + note
        if isinstance(obj, dict):
            return kv_table(drop(obj), runs_by_root=rbr) + note
    return None


def _reviewer_shape_view(name: str, obj: Any, rbr: dict) -> str | None:
    """Tables in the page's one format for the shapes a reviewer reads as tables; None for the rest."""
    if isinstance(obj, list) and obj and all(isinstance(r, dict) for r in obj) and not any(
            is_number(r.get("update")) or is_number(r.get("step")) for r in obj[:1]):
        return records_table(obj, runs_by_root=rbr)
    if isinstance(obj, dict) and obj and not any(isinstance(v, list) for v in obj.values()):
        if all(isinstance(v, dict) for v in obj.values()):
            return records_table([{"": k, **v} for k, v in obj.items()], runs_by_root=rbr)
        note = ""
        if name == "projection" and obj.get("clock_started_at") is None:
            note = '<p class="kit-note">clock_started_at \u2014: the study clock had not started.</p>'
        return kv_table(obj, runs_by_root=rbr) + note
    table = ColumnTable.of(obj)
    if table is not None:
        return table_html(table.columns, table.rows, runs_by_root=rbr)
    return None


def _shape_view(obj: Any, title: str, rbr: dict) -> str:
    """The view metric_view chooses from the sidecar's shape alone."""
    kind, view = metric_view(obj)
    if kind == "curves":
        x_name, x, series = view
        return img_html(curves_png(x_name, x, series, title), curves_alt(x_name, x, series, title))
    if kind == "table":
        import pandas as pd  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

        show_index = not isinstance(view.index, pd.RangeIndex)  # row labels only where they mean something
        recs = view.reset_index().to_dict(orient="records") if show_index else view.to_dict(orient="records")
        recs = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in recs]
        return records_table(recs, runs_by_root=rbr)
    return f"<pre>{html.escape(json.dumps(view, indent=1, sort_keys=True))}</pre>"


def sidecar_html(run_dir: str | os.PathLike, name: str) -> str:
    """The HTML view of the sidecar `name` of the run in `run_dir`: its named view, else its shape's."""
    run_dir = Path(run_dir)
    idx = index(run_dir.parent)
    run_id = next((r.run_id for r in idx.runs if r.dir.resolve() == run_dir.resolve()), run_dir.name)
    title = f"{run_id}: {name}"
    row = idx.by_id.get(run_id)
    if row is not None:
        obj = metric(row, name)
        view = _named_view(row, idx, name, obj, title) or _reviewer_shape_view(name, obj, idx.runs_by_root)
        if view is not None:
            return view
    return _shape_view(load_json_strict(records.metric_path(run_dir, name)), title, idx.runs_by_root)


def show_metric(run_dir: str | os.PathLike, name: str) -> None:
    """Display sidecar_html(run_dir, name) (the report's cell for one sidecar)."""
    from IPython.display import HTML, display  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    display(HTML(sidecar_html(run_dir, name)))
