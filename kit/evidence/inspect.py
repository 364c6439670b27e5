"""What is recorded about one run, for notebooks/90_inspect_failed_arm.ipynb, from committed evidence alone:
anything `kit verify-evidence` accepts, a notebook run (`run.json`, completed or not) or a benchmark
record (`kit-bench/1`, not in canonical form).

`inspect_run(runs_dir, run_id)` returns one JSON-able dict (its fields: docs/formats/run-inspection.md, "Run
inspection"): kind and status, the recorded error with the cell it happened in, what the run was bound
to, the loss curves and last commit from the store when it is on this machine, else from the committed
sidecars. Nothing is written; an unreadable record is an error naming the file.

Which store a notebook run used is the experiments' knowledge: each registers a `StoreReader` when its
package is imported (kit.adaptive, kit.study; `kit.inspect_run` imports both through kit.api), so this
module stands below the experiments and imports none of them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kit.digest import load_json_strict
from kit.evidence import run_record
from kit.evidence.archive import resolve
from kit.evidence.run_record import RunRecord
from kit.record import Opt, Record, Seq, spec_field
from kit.store.commits import read_head, verify_commit

# sidecars an evaluation run writes (notebooks/13, 21): shown as the run's evaluation, not as raw metrics
EVALUATION_SIDECARS = ("gates", "gate_verdict", "nll_change_bounds", "accuracy_by_family", "evaluation_file",
                       "screens", "evaluation")


class InspectError(ValueError):
    pass


def inspect_run(runs_dir: str | os.PathLike, run_id: str) -> dict:
    """Everything recorded about `runs_dir/run_id` (module docstring)."""
    if not run_id:
        raise InspectError("RUN_ID is empty; name a run folder of the runs folder to inspect")
    # an archived run (runs/archive/, kit/evidence/archive.py) is inspected in its unpacked folder
    run_dir = resolve(Path(runs_dir) / run_id)
    path = run_dir / run_record.RUN_RECORD_NAME
    run_record.refuse_links(run_dir)
    if not path.is_file():
        raise InspectError(f"{path}: no such run record (the runs folder read is {Path(runs_dir)}; "
                           "set RUNS_DIR to the folder that holds the run)")
    raw = load_json_strict(path)  # strict JSON, any key order: what verify-evidence accepts
    if isinstance(raw, dict) and raw.get("format") == "kit-bench/1":
        return _benchmark(run_dir, raw)
    return _notebook(run_dir, run_record.read_run_record(run_dir))


def _benchmark(run_dir: Path, rec: dict) -> dict:
    raw = rec.get("raw_output")
    names = raw if isinstance(raw, list) else [raw] if isinstance(raw, str) else []
    errors = rec.get("errors") or []
    git = rec.get("git") or {}
    return {
        "run_id": rec.get("run_id", run_dir.name), "kind": "benchmark", "status": rec.get("status"),
        "reason": errors[0].get("error") if errors and isinstance(errors[0], dict) else None,
        "summary": {"command": rec.get("command"), "started_at": rec.get("started_at"),
                    "ended_at": rec.get("ended_at"), "duration_s": rec.get("duration_s"),
                    "git": git.get("commit"), "dirty": git.get("dirty"), "device": _device_words(rec.get("device"))},
        "error": {"errors": errors} if errors else None,
        "bound": {f"parameter {k}": json.dumps(v) for k, v in sorted((rec.get("parameters") or {}).items())},
        "raw_output": {n: (run_dir / n).exists() for n in names},
        "curves": None, "curves_source": None, "sidecars": [], "evaluation": {}, "last_commit": None,
    }


def _device_words(device) -> str | None:
    if not isinstance(device, dict):
        return None
    gpus = device.get("gpus")
    if isinstance(gpus, list) and gpus:
        return f"{len(gpus)} x {gpus[0].get('name')}"
    return device.get("name") or device.get("cpu") or device.get("type")


def _failed_cell(run_dir: Path, run: RunRecord) -> dict | None:
    """The recorded error and the source of the notebook's own cell that raised it."""
    error = run.error
    if error is None and run.status == "completed":
        return None
    index = error.cell_index if error is not None else None
    source, tail = _cell_and_traceback(run_dir, run, index)
    return FailedCell(ename=error.ename if error is not None else None,
                      evalue=error.evalue if error is not None else None, cell_index=index,
                      cell_source=source, traceback_tail=tail).to_json()


@dataclass(frozen=True, slots=True, kw_only=True)
class FailedCell(Record):
    """`error` of a notebook run's inspection (docs/formats/run-inspection.md)."""

    ename: str | None = spec_field(Opt(str), doc="the exception's class name, as recorded")
    evalue: str | None = spec_field(Opt(str), doc="its message")
    cell_index: int | None = spec_field(Opt(int), doc="the source notebook's cell that raised it")
    cell_source: str | None = spec_field(Opt(str), doc="that cell's source, where the executed notebook has it")
    traceback_tail: tuple[str, ...] = spec_field(Seq(str), doc="the last three lines of its traceback")


def _cell_and_traceback(run_dir: Path, run: RunRecord, index: int | None) -> tuple[str | None, tuple[str, ...]]:
    """The source of the notebook's own cell `index` and the tail of the error it printed (None and () where the
    executed notebook does not hold them)."""
    executed = run_dir / run.executed_notebook if run.executed_notebook else None
    if executed is None or not executed.is_file():
        return None, ()
    nb = json.loads(executed.read_text())
    # the source notebook's cells: the executed one without papermill's error banners and injected parameters
    added = {"papermill-error-cell-tag", "injected-parameters"}
    cells = [c for c in nb.get("cells", []) if not added & set(c.get("metadata", {}).get("tags", []))]
    if not (isinstance(index, int) and 0 <= index < len(cells)):
        return None, ()
    cell = cells[index]
    tails = [o.get("traceback", [])[-3:] for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    return "".join(cell.get("source", "")), tuple(tails[-1]) if tails else ()


# The order of the loss panels, whichever source the rows came from: the x key, then these, then any other
# field by name. A store's rows (dict order of the sidecar writers) and a committed sidecar (canonical JSON:
# keys sorted) then draw the same panels in the same places.
PANEL_ORDER = ("update", "step", "objective", "ce_per_token", "kl_per_token", "grad_norm", "clip_factor", "seconds",
               "gradient_bytes")


def panel_rows(rows: list[dict]) -> list[dict]:
    rank = {k: i for i, k in enumerate(PANEL_ORDER)}
    return [{k: r[k] for k in sorted(r, key=lambda k: (rank.get(k, len(rank)), k))} for r in rows]


@dataclass(frozen=True)
class StoreReader:
    """How one experiment finds a run's checkpoint store from the run's parameters. The experiments register
    theirs (kit/adaptive/__init__.py, kit/study/__init__.py): kit/evidence stands below them and never
    imports them (tests/test_layers.py, PACKAGE_TIERS).

    `curves(params)`: (per-update rows, the store they came from) when the parameters name this experiment's
    store and it is on this machine, else None. `home(params)`: the store's folder when the parameters are
    this experiment's, else None."""

    name: str
    curves: Callable[[dict], tuple[list, str] | None]
    home: Callable[[dict], str | None]


# name -> reader; asked in the order of their names, so the answer does not depend on which experiment
# was imported first (adaptive's HOME before the study's STUDY_DIR, as before the registry)
STORE_READERS: dict[str, StoreReader] = {}


def register_store_reader(reader: StoreReader) -> None:
    STORE_READERS[reader.name] = reader


def _readers() -> list[StoreReader]:
    if not STORE_READERS:  # without them every store would silently read as absent (curves from the sidecars)
        raise RuntimeError("no experiment has registered its store reader: call kit.inspect_run, or import "
                           "kit.adaptive and kit.study before kit.evidence.inspect.inspect_run")
    return [STORE_READERS[name] for name in sorted(STORE_READERS)]


def _store_curves(params: dict) -> tuple[list | None, str | None]:
    """Per-update rows from the run's checkpoint store, when that store is on this machine: the fields of
    the loss_curves sidecar the arm's notebook writes from the same store (so both show the same panels)."""
    for reader in _readers():
        found = reader.curves(params)
        if found is not None:
            return found
    return None, None


def _home(params: dict) -> str | None:
    for reader in _readers():
        home = reader.home(params)
        if home:
            return home
    return None


def _notebook(run_dir: Path, run: RunRecord) -> dict:
    params = run.parameters
    metrics_dir = run_dir / run_record.METRICS_DIR_NAME
    sidecars = sorted(p.stem for p in metrics_dir.glob("*.json")) if metrics_dir.is_dir() else []
    curves, store = _store_curves(params)
    source = "store" if curves else None
    if not curves and "loss_curves" in sidecars:  # the store is not committed; its curves are
        curves, source = load_json_strict(run_record.metric_path(run_dir, "loss_curves")), "sidecar"
    evaluation = {name: load_json_strict(run_record.metric_path(run_dir, name))
                  for name in EVALUATION_SIDECARS if name in sidecars}
    bound = {"contract_digest": run.contract_digest,
             **{f"input {k}": v for k, v in run.input_digests.items()},
             **{f"parameter {k}": json.dumps(v) for k, v in params.items()},
             **{f"root used ({e.home})": e.root for e in run.checkpoint_roots.used},
             **{f"root produced ({e.home})": e.root for e in run.checkpoint_roots.produced}}
    return {
        "run_id": run.run_id, "kind": "notebook", "status": run.status, "reason": run.reason,
        "summary": {"notebook": run.notebook, "started_at": run.started_at, "duration_s": run.duration_s,
                    "git": run.git.commit, "dirty": run.git.dirty,
                    "device": f"{run.device.get('cpu')}, {run.device.get('gpu_count')} GPU(s)"},
        "error": _failed_cell(run_dir, run), "bound": bound,
        "contract_digest": run.contract_digest, "input_digests": dict(run.input_digests),
        "curves": panel_rows(curves) if curves else None, "curves_source": source if curves else None,
        "curves_store": store,
        "sidecars": sidecars, "evaluation": evaluation,
        "last_commit": _last_commit(run_dir, run, _home(params), sidecars),
    }


def _last_commit(run_dir: Path, run: RunRecord, home: str | None, sidecars: list[str]) -> dict | None:
    if home and Path(home).is_dir():
        head = read_head(home)
        if head is not None:
            report = verify_commit(home, head)
            keys = ("full_root", "learned_state_root", "parent", "params", "objects", "bytes", "num_layers",
                    "workers")
            return {"source": "store", "home": home, **{k: report.get(k) for k in keys}}
    if "commits" in sidecars:
        table = load_json_strict(run_record.metric_path(run_dir, "commits"))
        if isinstance(table, dict) and table.get("rows"):
            return {"source": "sidecar", **dict(zip(table["columns"], table["rows"][-1]))}
    produced = run.checkpoint_roots.produced
    if produced:
        return {"source": "record", "home": produced[-1].home, "full_root": produced[-1].root}
    return None
