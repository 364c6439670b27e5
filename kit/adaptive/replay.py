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
from dataclasses import dataclass
from pathlib import Path

import torch

from kit.adaptive.compare import compare
from kit.adaptive.continued_schema import job_contract
from kit.adaptive.formats import (
    AttemptRecord,
    CommitComparison,
    MadeCommit,
    commit_cursor,
    load_attempt,
    load_prepared,
)
from kit.adaptive.train import CohortRequest, train
from kit.digest import write_canonical_json
from kit.store.commits import read_manifest
from kit.store.manifest import Manifest

REPLAY_FORMAT = "kit-replay/1"


class ReplayRefused(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class ReplayedAttempt:
    """The completed attempt that made the commit a replay checks, with what the replay needs of its request."""

    path: str
    record: AttemptRecord
    prepared: str
    cohort: str
    workers: int


def _attempt_of(home: Path, root: str) -> ReplayedAttempt:
    for path in sorted(home.glob("attempts/*/attempt.json")):
        rec = load_attempt(path)
        if rec.status == "completed" and any(c.full_root == root for c in rec.commits or ()):
            if rec.prepared is None or rec.cohort is None or rec.workers is None:
                raise ReplayRefused(f"{path}: the attempt that made commit {root} does not record its prepared "
                                    "job, cohort and workers; replay needs all three")
            return ReplayedAttempt(str(path), rec, rec.prepared, rec.cohort, rec.workers)
    raise ReplayRefused(f"{home}/attempts: no completed attempt lists commit {root}; replay needs the attempt "
                        "that committed it (prepared job, cohort, workers, reference)")


def _lineage(home: Path, root: str, parent: str | None) -> tuple[list[Manifest], str]:
    """Manifests from ROOT back to PARENT (exclusive of PARENT), and PARENT (default: ROOT's parent)."""
    m = read_manifest(home, root)
    if parent is None:
        if m.parent is None:
            raise ReplayRefused(f"commit {root} has no parent; name --from")
        return [m], m.parent
    chain = [m]
    while (up := chain[-1].parent) != parent:
        if up is None:
            raise ReplayRefused(f"--from {parent}: not an ancestor of {root} in {home} (the parent chain ends at "
                                f"{chain[-1].full_root})")
        chain.append(read_manifest(home, up))
    return chain, parent


def _max_difference(a_home: str, a_root: str, b_home: str, b_root: str) -> float | None:
    res = CommitComparison.from_json(compare(a_home, a_root, b_home, b_root, "A"), "comparison")
    return res.max_abs_parameter_difference


def _depth(m: Manifest) -> int:
    return max(b for _, b in m.layout.blocks)


def replay(home: str, root: str, parent: str | None = None, workers: int | None = None,
           scratch: str | None = None) -> dict:
    """Replay the window (PARENT, ROOT] of store `home`; returns and writes the replay record."""
    h = Path(home)
    chain, parent = _lineage(h, root, parent)
    target, start = chain[0], read_manifest(h, parent)
    attempt = _attempt_of(h, root)
    prepared = Path(attempt.prepared)
    pj = load_prepared(prepared)
    terms = job_contract(pj)
    order, cohort = terms.cohort_order, attempt.cohort
    target_cursor, start_cursor = commit_cursor(target), commit_cursor(start)
    tc, sc = dict(target.learned_state.cursor), dict(start.learned_state.cursor)  # as the messages print them
    idx = order.index(cohort)
    if (target_cursor.cohort or 0) != idx:
        raise ReplayRefused(f"commit {root}: cursor {tc} is not in cohort {cohort} of its attempt {attempt.path}")
    same = (start_cursor.cohort or 0) == idx
    from_prev_end = ((start_cursor.cohort or 0) == idx - 1 and idx > 0
                     and start_cursor.cohort_step == terms.endpoints[order[idx - 1]])
    if not (same or from_prev_end):
        raise ReplayRefused(f"--from {parent}: cursor {sc}; a window stays in cohort {cohort} or starts at the "
                            f"endpoint of cohort {order[idx - 1] if idx else '-'}")
    grown = [m.full_root for m in chain[1:] + [start] if _depth(m) != _depth(target)]
    if grown:
        raise ReplayRefused(f"the window ({parent}, {root}] contains the append transition (depth changes at "
                            f"{grown[0]}); replay the updates after the growth commit (--from it)")
    if target_cursor.cohort_step is None:
        raise ReplayRefused(f"commit {root}: cursor {tc} has no cohort_step; replay needs the cohort's step")
    until = target_cursor.cohort_step
    first = ((start_cursor.cohort_step or 0) if same else 0) + 1
    workers = workers or attempt.workers
    tmp = Path(scratch) if scratch else Path(tempfile.mkdtemp(prefix="kit-replay-"))
    scratch_home = tmp / "home"  # fresh: the replay writes only here; H is read (objects re-hashed on fetch)
    rec = attempt.record
    reference = rec.reference if cohort != order[0] else None
    ref_home = rec.reference_home or rec.source_home or home if reference else None
    t0 = time.perf_counter()
    try:
        made = train(CohortRequest(str(prepared), pj.locations.seed, str(scratch_home), cohort, workers,
                                   resume=parent, reference=reference, source_home=str(h), until=until,
                                   reference_home=ref_home,
                                   replicate=rec.replicate.index if rec.replicate else 0))
    finally:
        seconds = time.perf_counter() - t0
    got = next(c for c in (MadeCommit.from_json(c, "train() result") for c in made) if c.cohort_step == until)
    equal = got.learned_state_root == target.learned_state_root
    record = {
        "format": REPLAY_FORMAT, "home": str(h), "root": root, "from": parent, "cohort": cohort,
        "cohort_steps": [first, until], "updates": until - first + 1, "workers": workers,
        "prepared": str(prepared), "prepared_job_digest": pj.job_digest, "attempt": attempt.path,
        "expected_learned_state_root": target.learned_state_root,
        "replayed_learned_state_root": got.learned_state_root, "equal": equal,
        "max_abs_parameter_difference": 0.0 if equal else _max_difference(str(h), root, str(scratch_home),
                                                                             got.full_root),
        "device": "cpu" if not _cuda() else "cuda", "seconds": round(seconds, 3),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_canonical_json(h / "replays" / f"{root}-from-{parent}.json", record)
    if not scratch:
        shutil.rmtree(tmp, ignore_errors=True)
    return record


def _cuda() -> bool:
    return torch.cuda.is_available() and os.environ.get("KIT_DEVICE", "cpu") != "cpu"
