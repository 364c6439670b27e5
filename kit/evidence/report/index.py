"""The runs directory as the report's kernel reads it: an index of run records by id and by root,
their metric sidecars, and the contract a run names by digest (from contracts/ at HEAD or at the
commit the run records). Everything here reads only committed evidence.
"""

from __future__ import annotations

import functools
import html
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.digest import load_json_strict, loads_strict, sha256_json
from kit.evidence.replicates import replicate_of
from kit.evidence.report.format import root_html, run_link
from kit.evidence.report.selection import Selected, Selection
from kit.evidence.report.sidecar_formats import Commits, sidecar
from kit.evidence.run_index import IndexedRun, KeptRun, kept_rows, load_rows, metric

REPO = Path(__file__).resolve().parents[3]
# the rows and their sidecar reader are kit.evidence.run_index's; the report's modules and kit.evidence.results
# import them from here
__all__ = ["REPO", "IndexedRun", "KeptRun", "RunIndex", "arm_runs", "contract_for", "gpu_names", "index", "is_cpu",
           "is_replicate", "kept", "metric", "model_html", "producer", "recorded_contract", "run_contract"]


# --- the runs directory as an index ----------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RunIndex:
    """The runs of a selection, in memory (not a file), in start order; looked up by run id, and by the checkpoint
    root (or `seed:DIR`) a run produced, for the links from a root to its producer."""
    runs: tuple[IndexedRun, ...]
    by_id: dict[str, IndexedRun]
    runs_by_root: dict[str, list[str]]
    parent_of_root: dict[str, str]

    @property
    def records(self) -> tuple[dict, ...]:
        """The rows as JSON (a run record's with its `dir`), for readers outside the report that take that JSON."""
        return tuple(r.record for r in self.runs)


def kept(runs_dir: Selected) -> list[KeptRun]:
    """The runs kept in the evidence folders of a selection (kit.evidence.run_index.kept_rows)."""
    return kept_rows(runs_dir)


@functools.lru_cache(maxsize=8)
def _index_cached(runs_dir: str, stamp: float) -> RunIndex:
    runs = tuple(load_rows(runs_dir))
    by_id = {r.run_id: r for r in runs}
    runs_by_root: dict[str, list[str]] = {}
    parent_of_root: dict[str, str] = {}
    for r in runs:
        for p in r.roots.produced:
            runs_by_root.setdefault(p.root, []).append(r.run_id)
        commits = sidecar(r, Commits)
        if commits is not None:
            for full, learned in zip(commits.cells("full_root"), commits.cells("learned_state_root")):
                for root in (full, learned):
                    if isinstance(root, str) and root and r.run_id not in runs_by_root.setdefault(root, []):
                        runs_by_root[root].append(r.run_id)
    for r in runs:
        if r.parameters.get("MODE") == "build" and r.parameters.get("SEED_DIR"):
            runs_by_root.setdefault("seed:" + r.parameters["SEED_DIR"], []).append(r.run_id)
    return RunIndex(runs=runs, by_id=by_id, runs_by_root=runs_by_root, parent_of_root=parent_of_root)


def index(runs_dir: Selection | str | os.PathLike) -> RunIndex:
    selection = Selection.of(runs_dir)
    folder = selection.runs_dir
    return _index_cached(str(selection.resolved()), folder.stat().st_mtime if folder.exists() else 0.0)


def model_html(spec: str, idx: RunIndex) -> str:
    if spec.startswith("seed:"):
        names = idx.runs_by_root.get(spec, [])
        return (", ".join(run_link(n) for n in names) + " " if names else "") + f"<code>{html.escape(spec)}</code>"
    return root_html(spec, idx.runs_by_root)


def producer(root: str, idx: RunIndex) -> str | None:
    names = idx.runs_by_root.get(root) or []
    return names[0] if names else None


# --- contracts and scale ---------------------------------------------------------------------
@functools.lru_cache(maxsize=64)
def contract_for(digest: str, commit: str | None) -> dict | None:
    """The contract file whose canonical digest is `digest`: in contracts/ now, else at `commit`."""
    cdir = REPO / "contracts"
    for f in sorted(cdir.glob("*.json")):
        try:
            obj = load_json_strict(f)
        except ValueError:
            continue
        if sha256_json(obj) == digest:
            return {"file": f"contracts/{f.name}", "commit": None, **obj}
    if commit:
        # the files contracts/ held at that commit, not those it holds now: a contract may since have moved
        # (the first medium campaign's frozen contracts went to runs/medium-superseded-seed-800112e3/)
        try:
            names = subprocess.run(["git", "-C", str(REPO), "ls-tree", "--name-only", f"{commit}:contracts"],
                                   capture_output=True, text=True, timeout=20, check=True).stdout.split()
        except (subprocess.SubprocessError, OSError):
            names = []
        for name in sorted(n for n in names if n.endswith(".json")):
            try:
                text = subprocess.run(["git", "-C", str(REPO), "show", f"{commit}:contracts/{name}"],
                                      capture_output=True, text=True, timeout=20, check=True).stdout
                obj = loads_strict(text)
            except (subprocess.SubprocessError, OSError, ValueError):
                continue
            if sha256_json(obj) == digest:
                return {"file": f"contracts/{name}", "commit": commit, **obj}
    return None


def recorded_contract(digest: str, commit: str | None, where: str) -> dict:
    """The contract a run recorded by canonical digest (contract_for), without the `file` and `commit`
    this module adds: the body its gates and roles were computed from. Refused, naming `where`, when no
    contracts/*.json now or at `commit` has that digest."""
    found = contract_for(digest, commit)
    if found is None:
        raise ValueError(f"{where}: no contracts/*.json (now or at the run's commit) has the recorded contract "
                         f"digest {digest}")
    return {k: v for k, v in found.items() if k not in ("file", "commit")}


def run_contract(row: IndexedRun | dict) -> dict | None:
    run = row if isinstance(row, IndexedRun) else IndexedRun.of(row)
    if not run.contract_digest:
        return None
    return contract_for(run.contract_digest, run.commit)


def gpu_names(row: IndexedRun) -> list[Any]:  # the names as recorded (a record's JSON strings)
    """The names of the GPUs a run record's `device` lists (one per device the run saw), [] on CPU."""
    return [g.get("name") for g in row.device.get("gpus") or [] if isinstance(g, dict)]


def is_cpu(row: IndexedRun) -> bool:
    return not row.device.get("gpu_count") and not row.device.get("gpus")


def is_replicate(r: IndexedRun) -> bool:
    """A replicate's run (its arm or its development scoring; kit.evidence.replicates.replicate_of >= 1), not a
    frozen arm."""
    return replicate_of(r.record) > 0


def arm_runs(r: IndexedRun | dict, idx: RunIndex) -> dict[str, str]:
    """{arm: run id} of the study arm runs that share the study folder of run `r` (an index row, or a row as JSON
    as kit.evidence.results passes it; its frozen arms: replicates, which share the folder, are read by the noise
    section)."""
    study_dir = (r if isinstance(r, IndexedRun) else IndexedRun.of(r)).parameters.get("STUDY_DIR")
    return {x.parameters["ARM"]: x.run_id for x in idx.runs
            if x.parameters.get("ARM") and not is_replicate(x) and x.parameters.get("STUDY_DIR") == study_dir}
