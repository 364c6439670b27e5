"""Side-by-side comparison of two committed runs: the 2 -> 3 migration against uninterrupted
execution from the same step, or growth against its fixed-depth control.

For migration the learned-state roots must be equal bit for bit on CPU; on GPU the report gives
the largest parameter difference and both loss trajectories. Growth changes the model, so its
comparison reports the trajectories and leaves judgement to the gates.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from kit.adaptive.formats import ComparedUpdate, compared_update, update_row
from kit.adaptive.lineage import lineage_rows
from kit.store import commits
from kit.store.manifest import Manifest
from kit.store.objects import ObjectStore
from kit.store.params import parameter_tensor


def update_log(home: str, cohort: str) -> list[dict]:
    """`update_curve` as JSON (what `compare` records)."""
    return [u.to_json() for u in update_curve(home, cohort)]


def update_curve(home: str, cohort: str) -> list[ComparedUpdate]:
    """Per-update records of a home's attempts for one cohort, by cohort step (last attempt wins): the curve
    fields of each row, as the logs hold them (older logs lack some)."""
    rows: dict[int, ComparedUpdate] = {}
    home_logs = Path(home) / "attempts"
    for raw in lineage_rows(home):  # own logs and the lineage's inherited ones (kit/adaptive/lineage.py)
        source = f"{home_logs}: an update log row"
        row = update_row(raw, source)
        if row.cohort == cohort:
            rows[row.cohort_step] = compared_update(raw, source)
    return [rows[k] for k in sorted(rows)]


def attempt_records(home: str) -> list[dict]:
    """Every attempt record of a home (`attempts/<attempt>/attempt.json`), oldest first."""
    return [json.loads(p.read_text()) for p in sorted(Path(home).glob("attempts/*/attempt.json"))]


def compare(a_home: str, a_root: str, b_home: str, b_root: str, cohort: str) -> dict:
    """The two commits side by side (a `CommitComparison`, as its JSON): parameters, roots and both update curves."""
    ma, mb = commits.read_manifest(a_home, a_root), commits.read_manifest(b_home, b_root)
    ea = {e.name: e for e in ma.learned_state.params}
    eb = {e.name: e for e in mb.learned_state.params}
    same_names = set(ea) == set(eb)
    max_diff, differing = 0.0, 0
    if same_names:
        sa, sb = ObjectStore(a_home), ObjectStore(b_home)
        for n in sorted(ea):
            if ea[n].param != eb[n].param:
                differing += 1
                ta, tb = parameter_tensor(sa, ea[n]), parameter_tensor(sb, eb[n])  # parameters only
                max_diff = max(max_diff, float((ta - tb).abs().max()))

    def run(home: str, root: str, manifest: Manifest) -> dict:
        return {"home": home, "full_root": root, "learned_state_root": manifest.learned_state_root,
                "layout": [list(b) for b in manifest.layout.blocks], "updates": update_log(home, cohort)}

    return {
        "a": run(a_home, a_root, ma), "b": run(b_home, b_root, mb),
        "same_parameter_names": same_names,
        "learned_state_equal": ma.learned_state_root == mb.learned_state_root,
        "parameters_differing": differing if same_names else None,
        "max_abs_parameter_difference": max_diff if same_names else None,
        "torch": torch.__version__,
    }
