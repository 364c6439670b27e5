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

from kit.adaptive.lineage import lineage_rows
from kit.store import commits
from kit.store.objects import ObjectStore
from kit.store.params import parameter_tensor


def update_log(home: str, cohort: str) -> list[dict]:
    """Per-update records of a home's attempts for one cohort, by cohort step (last attempt wins)."""
    rows: dict[int, dict] = {}

    for r in lineage_rows(home):  # own logs and the lineage's inherited ones (kit/adaptive/lineage.py)
        if r["cohort"] == cohort:
            rows[r["cohort_step"]] = {k: r[k] for k in ("cohort_step", "objective", "ce_per_token", "kl_per_token",
                                                        "grad_norm", "clip_factor", "seconds") if k in r}
    return [rows[k] for k in sorted(rows)]


def attempt_records(home: str) -> list[dict]:
    """Every attempt record of a home (`attempts/<attempt>/attempt.json`), oldest first."""
    return [json.loads(p.read_text()) for p in sorted(Path(home).glob("attempts/*/attempt.json"))]


def compare(a_home: str, a_root: str, b_home: str, b_root: str, cohort: str) -> dict:
    ma, mb = commits.read_commit(a_home, a_root), commits.read_commit(b_home, b_root)
    ea = {e["name"]: e for e in ma["learned_state"]["params"]}
    eb = {e["name"]: e for e in mb["learned_state"]["params"]}
    max_diff, differing = 0.0, 0
    if set(ea) == set(eb):
        sa, sb = ObjectStore(a_home), ObjectStore(b_home)
        for n in sorted(ea):
            if ea[n]["param"] != eb[n]["param"]:
                differing += 1
                ta, tb = parameter_tensor(sa, ea[n]), parameter_tensor(sb, eb[n])  # parameters only
                max_diff = max(max_diff, float((ta - tb).abs().max()))
    return {
        "a": {"home": a_home, "full_root": a_root, "learned_state_root": ma["learned_state_root"],
              "layout": ma["layout"]["blocks"], "updates": update_log(a_home, cohort)},
        "b": {"home": b_home, "full_root": b_root, "learned_state_root": mb["learned_state_root"],
              "layout": mb["layout"]["blocks"], "updates": update_log(b_home, cohort)},
        "same_parameter_names": set(ea) == set(eb),
        "learned_state_equal": ma["learned_state_root"] == mb["learned_state_root"],
        "parameters_differing": differing if set(ea) == set(eb) else None,
        "max_abs_parameter_difference": max_diff if set(ea) == set(eb) else None,
        "torch": torch.__version__,
    }
