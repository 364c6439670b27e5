"""Replay (`kit checkpoint replay --home H ROOT [--from PARENT]`, kit/cli/adaptive.py): recompute an update
window and compare roots.

A hash names a state; it does not prove the updates that led to it were done. Replay runs the
prepared job's updates from PARENT's committed state to ROOT's cohort step in a scratch store and
compares the learned-state root it reaches with ROOT's: equal on CPU (the numeric profile), equal or
the largest difference on GPU. Windows that cross cohorts or the growth transition are refused.
Every replay writes `H/replays/<ROOT>-from-<PARENT>.json` (docs/formats/adaptive-homes.md, "Replay records").
Details: the notes below.

Notes: the window and the refusals.

The attempt that committed ROOT names the prepared job, cohort, worker count and reference, and the schedule names
every record, so the window is recomputed exactly; PARENT may be any ancestor in the same lineage. On CPU a
difference fails (exit 1) naming the largest parameter difference. Refused before any update: a PARENT that is not
an ancestor (by `parent` links); a window crossing cohorts other than from the previous cohort's endpoint into its
first update; a window containing the append transition (a growth commit is its own window, checked by re-applying
the transition); no completed attempt of H listing ROOT.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import torch

from kit.adaptive.compare import compare
from kit.adaptive.continued_schema import job_contract
from kit.adaptive.formats import load_prepared
from kit.adaptive.train import CohortRequest, train
from kit.digest import load_json_strict, write_canonical_json
from kit.store.commits import read_commit

REPLAY_FORMAT = "kit-replay/1"


class ReplayRefused(ValueError):
    pass


def _attempt_of(home: Path, root: str) -> dict:
    for path in sorted(home.glob("attempts/*/attempt.json")):
        rec = load_json_strict(path)
        if rec.get("status") == "completed" and any(c.get("full_root") == root for c in rec.get("commits", [])):
            return {**rec, "_path": str(path)}
    raise ReplayRefused(f"{home}/attempts: no completed attempt lists commit {root}; replay needs the attempt "
                        "that committed it (prepared job, cohort, workers, reference)")


def _lineage(home: Path, root: str, parent: str | None) -> tuple[list[dict], str]:
    """Manifests from ROOT back to PARENT (exclusive of PARENT), and PARENT (default: ROOT's parent)."""
    m = read_commit(home, root)
    if parent is None:
        if m["parent"] is None:
            raise ReplayRefused(f"commit {root} has no parent; name --from")
        return [m], m["parent"]
    chain = [m]
    while chain[-1]["parent"] != parent:
        if chain[-1]["parent"] is None:
            raise ReplayRefused(f"--from {parent}: not an ancestor of {root} in {home} (the parent chain ends at "
                                f"{chain[-1]['full_root']})")
        chain.append(read_commit(home, chain[-1]["parent"]))
    return chain, parent


def _max_difference(a_home: str, a_root: str, b_home: str, b_root: str) -> float | None:
    res = compare(a_home, a_root, b_home, b_root, "A")
    return res["max_abs_parameter_difference"]


def replay(home: str, root: str, parent: str | None = None, workers: int | None = None,
           scratch: str | None = None) -> dict:
    """Replay the window (PARENT, ROOT] of store `home`; returns and writes the replay record."""
    h = Path(home)
    chain, parent = _lineage(h, root, parent)
    target, start = chain[0], read_commit(h, parent)
    attempt = _attempt_of(h, root)
    prepared = Path(attempt["prepared"])
    pj = load_prepared(prepared)
    terms = job_contract(pj.to_json())
    order, cohort = terms.cohort_order, attempt["cohort"]
    tc, sc = target["learned_state"]["cursor"], start["learned_state"]["cursor"]
    idx = order.index(cohort)
    if tc.get("cohort", 0) != idx:
        raise ReplayRefused(f"commit {root}: cursor {tc} is not in cohort {cohort} of its attempt {attempt['_path']}")
    same = sc.get("cohort", 0) == idx
    from_prev_end = (sc.get("cohort", 0) == idx - 1 and idx > 0
                     and sc.get("cohort_step") == terms.endpoints[order[idx - 1]])
    if not (same or from_prev_end):
        raise ReplayRefused(f"--from {parent}: cursor {sc}; a window stays in cohort {cohort} or starts at the "
                            f"endpoint of cohort {order[idx - 1] if idx else '-'}")
    grown = [m["full_root"] for m in chain[1:] + [start] if max(b for _, b in m["layout"]["blocks"])
             != max(b for _, b in target["layout"]["blocks"])]
    if grown:
        raise ReplayRefused(f"the window ({parent}, {root}] contains the append transition (depth changes at "
                            f"{grown[0]}); replay the updates after the growth commit (--from it)")
    until = tc["cohort_step"]
    first = (sc.get("cohort_step", 0) if same else 0) + 1
    workers = workers or attempt["workers"]
    tmp = Path(scratch) if scratch else Path(tempfile.mkdtemp(prefix="kit-replay-"))
    scratch_home = tmp / "home"  # fresh: the replay writes only here; H is read (objects re-hashed on fetch)
    reference = attempt.get("reference") if cohort != order[0] else None
    ref_home = attempt.get("reference_home") or attempt.get("source_home") or home if reference else None
    t0 = time.perf_counter()
    try:
        commits = train(CohortRequest(str(prepared), pj.locations.seed, str(scratch_home), cohort, workers,
                                      resume=parent, reference=reference, source_home=str(h), until=until,
                                      reference_home=ref_home,
                                      replicate=(attempt.get("replicate") or {}).get("index", 0)))
    finally:
        seconds = time.perf_counter() - t0
    got = next(c for c in commits if c["cohort_step"] == until)
    equal = got["learned_state_root"] == target["learned_state_root"]
    record = {
        "format": REPLAY_FORMAT, "home": str(h), "root": root, "from": parent, "cohort": cohort,
        "cohort_steps": [first, until], "updates": until - first + 1, "workers": workers,
        "prepared": str(prepared), "prepared_job_digest": pj.job_digest, "attempt": attempt["_path"],
        "expected_learned_state_root": target["learned_state_root"],
        "replayed_learned_state_root": got["learned_state_root"], "equal": equal,
        "max_abs_parameter_difference": 0.0 if equal else _max_difference(str(h), root, str(scratch_home),
                                                                             got["full_root"]),
        "device": "cpu" if not _cuda() else "cuda", "seconds": round(seconds, 3),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_canonical_json(h / "replays" / f"{root}-from-{parent}.json", record)
    if not scratch:
        shutil.rmtree(tmp, ignore_errors=True)
    return record


def _cuda() -> bool:
    return torch.cuda.is_available() and os.environ.get("KIT_DEVICE", "cpu") != "cpu"
