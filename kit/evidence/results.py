"""`kit.results(runs_dir)`: every recorded task accuracy of a runs directory as one tidy table, one row per
contract x seed x model x split x family x metric (correct, n, accuracy), with the run that measured it and the
root of the model it scored. Kept runs (superseded attempts, read through kit.evidence.run_index.kept_runs)
carry the folder that keeps them in `kept_in`; the current runs have "". The report's accuracy tables are
drawn from this table, and each report folder carries it as results.csv (docs/formats/results-table.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from kit.digest import write_files_atomic
from kit.evidence.replicates import replicate_number
from kit.evidence.report.format import is_number
from kit.evidence.report.index import (
    IndexedRun,
    RunIndex,
    arm_runs,
    index,
    kept,
    metric,
    producer,
    run_contract,
)

COLUMNS = ["contract", "contract_digest", "seed", "kept_in", "split", "model", "model_root", "family", "metric",
           "value", "run_id", "replicate"]
METRICS = ("correct", "n", "accuracy")


SPLITS = ("dev", "final")  # the one vocabulary of both experiments


class ResultRow(NamedTuple):
    """One row of the results table (in memory, not a file), its fields the columns COLUMNS in order."""
    contract: str
    contract_digest: str
    seed: str
    kept_in: str
    split: str
    model: str
    model_root: str
    family: str
    metric: str
    value: Any  # correct and n as recorded (numbers), accuracy their ratio or None
    run_id: str
    replicate: int


@dataclass(frozen=True, slots=True)
class AccuracyModel:
    """A model a contract's runs scored on one split (in memory): the run that scored it first, per family
    (correct, n)."""
    split: str
    model: str
    root: str
    run: str
    families: dict[str, tuple[Any, Any]]


def split_of(r: IndexedRun | dict) -> str:
    """Which split an evaluation run scored, "dev" or "final": its SPLIT parameter (adaptive dev/final); a study
    replicate's development scoring (notebook 22: ARM and REPLICATE, no SPLIT) "dev"; else the study's evaluation,
    which scores the final tasks (notebook 21, after the freeze). `r`: an index row, or a run record's JSON."""
    return split_of_parameters(r.parameters if isinstance(r, IndexedRun) else r.get("parameters") or {})


def split_of_parameters(params: Mapping[str, Any]) -> str:
    """`split_of` from the run's parameters."""
    if not params.get("SPLIT") and params.get("REPLICATE") is not None and params.get("ARM"):
        return "dev"
    return str(params.get("SPLIT") or "final")


def _adaptive_model(spec: str, idx: RunIndex) -> tuple[str, str]:
    """(model, root): "seed" and the seed's spec for a seed directory, else the run that produced the commit
    (its short root when none did) and the commit's root."""
    if not spec or spec.startswith("seed:"):
        return "seed", spec
    root = spec.rpartition(":")[2]
    return producer(root, idx) or root[:12], root


def _arm_root(run_id: str | None, idx: RunIndex) -> str:
    produced = idx.by_id[run_id].roots.produced if run_id in idx.by_id else ()
    return produced[-1].root if produced else ""


def accuracy_models(idx: RunIndex, digest: str | None) -> list[AccuracyModel]:
    """[{split, model, root, run, families: {family: (correct, n)}}] of the contract's runs: a model scored by
    several runs on one split appears once, from the first run that scored it; the seed first within a split.
    `model` is "seed" or the run that produced the scored commit (an adaptive arm, a study arm), else its short root."""
    out: list[AccuracyModel] = []
    seen = set()

    def add(split, model, root, run, families):
        if (split, model) in seen or not families:
            return
        seen.add((split, model))
        out.append(AccuracyModel(split=split, model=model, root=root, run=run, families=families))

    for r in idx.runs:
        if r.contract_digest != digest:
            continue
        acc, split, params = metric(r, "accuracy_by_family"), split_of(r), r.parameters
        if isinstance(acc, dict):  # an adaptive comparison: the baseline, then the candidate
            for side, spec in (("baseline", params.get("BASELINE", "")), ("candidate", params.get("CANDIDATE", ""))):
                fams = {f: (row.get(f"correct_{side}"), row.get("n")) for f, row in acc.items()
                        if isinstance(row, dict) and is_number(row.get(f"correct_{side}")) and is_number(row.get("n"))}
                add(split, *_adaptive_model(str(spec), idx), r.run_id, fams)
        elif isinstance(acc, list):  # the study's evaluation: one row per model and family
            arms = arm_runs(r, idx)
            for model in dict.fromkeys(x.get("model") for x in acc if isinstance(x, dict)):
                fams = {x["family"]: (x.get("correct"), x.get("n")) for x in acc
                        if isinstance(x, dict) and x.get("model") == model and is_number(x.get("correct"))}
                root = _arm_root(arms.get(str(model)), idx) if model != "seed" else ""
                # as for the adaptive models: the run that produced it (the arm's run), else its short root
                name = "seed" if model == "seed" else arms.get(str(model)) or root[:12] or str(model)
                add(split, name, root, r.run_id, fams)
    return sorted(out, key=lambda m: (m.split, m.model != "seed"))


def study_evaluations(idx: RunIndex) -> set[str]:
    """Run ids of the study's evaluations (an `accuracy_by_family` per model: a list), as against the adaptive
    comparisons (one per family: a dict); both score the "final" split."""
    return {r.run_id for r in idx.runs if isinstance(metric(r, "accuracy_by_family"), list)}


def contract_digests(idx: RunIndex) -> list[str | None]:
    """The contracts (by digest) with a gate or screen, in the order their first such run started."""
    out = []
    for r in idx.runs:
        if (metric(r, "gates") is not None or metric(r, "screen_quality") is not None) \
                and r.contract_digest not in out:
            out.append(r.contract_digest)
    return out


def result_rows(runs_dir, kept_in: str = "") -> list[ResultRow]:
    """The tidy rows of one runs folder (or selection `DIR/GLOB`), each marked `kept_in`."""
    idx = index(runs_dir)
    rows = []
    for digest in contract_digests(idx):
        first = next(r for r in idx.runs if r.contract_digest == digest)
        c = run_contract(first) or {}
        seed = (c.get("seed") or {}).get("parameter_digest") or ""
        for m in accuracy_models(idx, digest):
            replicate = replicate_number(m.run, idx.by_id[m.run].parameters if m.run in idx.by_id else {})
            root = seed if m.model == "seed" and seed else m.root
            for family, (correct, n) in m.families.items():
                values = (correct, n, correct / n if n else None)  # METRICS, in order
                rows += [ResultRow(contract=c.get("file") or "", contract_digest=digest or "", seed=seed,
                                   kept_in=kept_in, split=m.split, model=m.model, model_root=root, family=family,
                                   metric=k, value=v, run_id=m.run, replicate=replicate)
                         for k, v in zip(METRICS, values, strict=True)]
    return rows


def results(runs_dir: str | os.PathLike = "runs"):
    """The tidy pandas DataFrame of every recorded task accuracy under `runs_dir` (a runs folder or a
    selection `DIR/GLOB`): the current runs, then the kept ones, in the columns COLUMNS."""
    import pandas as pd  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    rows = result_rows(runs_dir)
    folders: dict[Path, str] = {}
    for k in kept(runs_dir):  # superseded attempts: their own folder is a runs folder of its own
        folders.setdefault(k.run.dir.parent, k.kept_in or "")
    for d, where in folders.items():
        rows += result_rows(d, kept_in=where)
    return pd.DataFrame(rows, columns=COLUMNS)


def write_results(runs_dir, out: str | os.PathLike) -> Path:
    """Write results(runs_dir) to `out`: CSV, or Parquet when the name ends in .parquet."""
    out = Path(out)
    write_files_atomic({out: results_bytes(runs_dir, out)})  # a full disk leaves no truncated table behind
    return out


def results_bytes(runs_dir, out: Path) -> bytes:
    """The bytes `write_results` writes to `out` (its suffix picks CSV or Parquet)."""
    df = results(runs_dir)
    if out.suffix == ".parquet":
        return df.to_parquet(None, index=False)
    if out.suffix == ".csv":
        return df.to_csv(index=False, lineterminator="\n").encode("utf-8")
    raise ValueError(f"{out}: expected a file name ending in .csv or .parquet")
