"""The development curve: every commit along each arm's lineage scored on the development roles.

An endpoint comparison (kit.adaptive.evaluation) says where a cohort ended; the curve says how it got
there: per-family greedy accuracy and per-token NLL on the prepared `dev.tasks` and `dev.retention`
roles at the seed and at each commit, so that a reader sees whether accuracy rose steadily, rose and
fell back, or never moved. Development roles only: the curve never opens a final role, and (as every
development result) it may inform an abort, never the choice of an endpoint.

Scores come from kit.adaptive.evaluation's cached scorer with the same key, so the seed and the endpoints
the development comparisons already scored are read back from the cache rather than scored twice.
File: docs/formats/adaptive-evaluation.md, "Development curve".

Notes: lineages, and why it runs last.

Each lineage is a list in training order (refused otherwise): the demo's `A3-migrated`, `A2-control`, `B-control`,
`B-growth`. Through the shared score cache its points equal the development comparisons' numbers. The demo runs it
last in the adaptive part (notebooks/16_adaptive_dev_curve.ipynb), after the finals: nothing the selection or the
finals use comes from it, and on a device block of fixed length the verdicts should not wait behind it. The report
draws its `dev_curve` sidecar as accuracy against updates since the seed, a panel per family, a line per arm.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kit.adaptive.evaluation import DEV_ROLES, cached_scores, model_spec, read_roles
from kit.adaptive.formats import (
    CURVE_FORMAT,
    CurvePoint,
    DevCurve,
    commit_cursor,
    load_prepared,
)
from kit.data.chat import load_tokenizer
from kit.digest import write_canonical_json
from kit.evaluation.scoring import FamilyAccuracy, NllScore
from kit.refs import CommitRef
from kit.stats import accuracy_by_family
from kit.store.commits import read_manifest

CURVE_COLUMNS = ["arm", "model", "step", "cohort", "cohort_step", "family", "n", "correct", "accuracy"]
NLL_COLUMNS = ["arm", "model", "step", "cohort", "cohort_step", "task_nll_per_token", "retention_nll_per_token"]
COHORT_NAMES = ("A", "B")  # a commit cursor's cohort index (docs/formats/checkpoint-store.md, "Learned state")


@dataclass(frozen=True, slots=True)
class CurveHead:
    """Which model a curve point scores and where it stands in its arm's lineage."""

    arm: str
    model: str  # "seed:DIR" or "HOME:FULL_ROOT"
    step: int  # updates since the seed
    cohort: str | None  # None: the seed
    cohort_step: int


def _point(arm: str, spec: str) -> CurveHead:
    """'seed:DIR' or 'HOME:FULL_ROOT' -> its head, from the commit's cursor (the seed: step 0, no cohort)."""
    model, _ = model_spec(spec)
    if not isinstance(model, CommitRef):
        return CurveHead(arm, spec, 0, None, 0)
    cursor = commit_cursor(read_manifest(model.home, model.root))
    cohort = None if cursor.cohort is None else COHORT_NAMES[cursor.cohort]
    return CurveHead(arm, spec, cursor.step, cohort, cursor.steps_in_cohort)


def dev_curve(prepared_dir: str | os.PathLike, lineages: dict[str, list[str]], out: str | os.PathLike,
              tokenizer_dir: str, max_tokens: int, max_new_tokens: int, device: str = "cpu") -> dict:
    """Score every model of every lineage ({arm: ["seed:DIR" or "HOME:FULL_ROOT", ...]}, each list in
    training order) on the development roles; write and return the curve record (docs/formats/adaptive-evaluation.md).
    A lineage must be in increasing `step` order, so that a curve is never drawn out of order."""
    prepared_dir = Path(prepared_dir)
    if not lineages or any(not isinstance(v, list) or not v for v in lineages.values()):
        raise ValueError(f"lineages {lineages!r}: expected {{arm: [model spec, ...]}} with at least one model per arm")
    # arms in name order: a run record keeps LINEAGES as canonical JSON (sorted keys), so a replay passes them
    # sorted whatever order the first run's dict had; the curve must not depend on it
    points = {arm: [_point(arm, spec) for spec in lineages[arm]] for arm in sorted(lineages)}
    for arm, heads in points.items():
        steps = [h.step for h in heads]
        if steps != sorted(steps) or len(set(steps)) != len(steps):
            raise ValueError(f"lineage {arm!r}: steps {steps}; expected strictly increasing steps (training order)")
    tok = load_tokenizer(tokenizer_dir)
    data, role_sha = read_roles(prepared_dir, DEV_ROLES)
    cache = Path(out).parent / "score-cache"  # the development comparisons' cache: same key, same scores
    rows = []
    for heads in points.values():
        for h in heads:
            model, ident = model_spec(h.model)
            s = cached_scores(model, ident, tok, data, role_sha, max_tokens, max_new_tokens, cache, device)
            table = accuracy_by_family([{"family": a.family, "correct": a.correct} for a in s.answers])
            accuracy = {str(r.family): FamilyAccuracy(n=int(r.n), correct=int(r.correct), accuracy=float(r.accuracy))
                        for r in table.itertuples(index=False)}
            rows.append(CurvePoint(arm=h.arm, model=h.model, step=h.step, cohort=h.cohort, cohort_step=h.cohort_step,
                                   accuracy=accuracy, task_nll_per_token=_per_token(s.task_nll),
                                   retention_nll_per_token=_per_token(s.retention_nll)))
    record = DevCurve(format=CURVE_FORMAT, prepared_job_digest=load_prepared(prepared_dir).job_digest,
                      roles=DEV_ROLES, role_sha256=role_sha, max_tokens=max_tokens, max_new_tokens=max_new_tokens,
                      device=device, points=tuple(rows))
    write_canonical_json(out, record.to_json())
    return record.to_json()


def _per_token(rows: Sequence[NllScore]) -> float:
    tokens = sum(r.tokens for r in rows)
    return sum(r.nll_sum for r in rows) / tokens if tokens else float("nan")


def curve_sidecars(record: dict | DevCurve) -> dict:
    """{"dev_curve": per-family accuracy at every point, "dev_curve_nll": per-token NLLs at every point},
    each a {"columns", "rows"} table (the report draws such tables as they are)."""
    curve = record if isinstance(record, DevCurve) else DevCurve.from_json(record, "development curve")
    acc, nll = [], []
    for p in curve.points:
        head = [p.arm, p.model, p.step, p.cohort, p.cohort_step]
        acc += [head + [family, a.n, a.correct, a.accuracy] for family, a in p.accuracy.items()]
        nll.append(head + [p.task_nll_per_token, p.retention_nll_per_token])
    return {"dev_curve": {"columns": CURVE_COLUMNS, "rows": acc}, "dev_curve_nll": {"columns": NLL_COLUMNS, "rows": nll}}
