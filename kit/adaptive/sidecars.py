"""The metric sidecars the adaptive notebooks record, each computed here from what train, compare and
evaluate return (or from the attempt logs a home keeps), so a notebook cell is one call and a display.
The report draws the same sidecars (kit.evidence.report), so a notebook shows what the report shows.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from kit.adaptive.compare import update_curve
from kit.adaptive.continued import continued_gates
from kit.adaptive.continued_schema import AdaptiveFamilyTerms, ContinuedJob, JobTerms
from kit.adaptive.evaluation import gates, nll_change_bounds
from kit.adaptive.formats import (
    AnsweredTasks,
    AnyPreparedJob,
    CommitComparison,
    CommitSpec,
    ContinuedPreparedJob,
    MadeCommit,
    PairedScores,
    PreparedJob,
    PrepareSummary,
    SelectionRecord,
    answered_tasks,
    evaluation_split,
    gate_verdict,
    load_attempt,
    load_ownership,
    paired_scores,
    prepare_summary,
    prepared_job_from_json,
    timed_update,
)
from kit.adaptive.prepare import OWNERSHIP_FILE
from kit.adaptive.schema import AdaptiveJob
from kit.digest import sha256_file
from kit.record import to_json
from kit.stats import accuracy_by_family, bootstrap_ratio_distribution, gained_lost

COMMIT_COLUMNS = ["cohort", "cohort_step", "step", "full_root", "learned_state_root"]


# --- a prepared job (notebooks 10 and 15) -----------------------------------------------------
def roles_table(summary: dict | PrepareSummary) -> dict:
    """The `prepared_roles` sidecar: {"columns": ["role", "records"], "rows"} of a prepare summary."""
    return {"columns": ["role", "records"], "rows": [[r, n] for r, n in prepare_summary(summary).roles.items()]}


def prepare_sidecars(summary: dict | PrepareSummary) -> dict:
    """{"prepared": the digests and exclusions of prepare()'s summary, "prepared_roles": its role sizes}."""
    s = prepare_summary(summary)
    return {"prepared": {"out": s.out, "contract_digest": s.contract_digest, "job_digest": s.job_digest,
                         "prepared_sha256": s.prepared_sha256, "parameter_digest": s.parameter_digest,
                         "final_retention_excluded": to_json(s.final_retention_excluded),
                         "final_tasks_excluded": to_json(s.final_tasks_excluded)},
            "prepared_roles": roles_table(s)}


def ownership_rows(prepared_dir: str) -> list[dict]:
    """The `ownership` sidecar: one row per worker of every layout the planner wrote (ownership file of
    the prepared job), with its block range, embedding ownership, memory estimate and tensors."""
    ownership = load_ownership(Path(prepared_dir) / OWNERSHIP_FILE)
    return [{"workers": lay.workers, "layers": lay.num_hidden_layers, "grown": lay.grown,
             "rank": w.rank, "blocks": f"[{w.blocks[0]}, {w.blocks[1]})", "owns_embedding": w.owns_embedding,
             "estimate_MiB": round(w.estimate_bytes / 2**20, 1), "utilization": w.utilization,
             "tensors": len(w.tensors)}
            for lay in ownership.layouts for w in lay.per_worker]


def continued_prepare_sidecars(summary: dict | PrepareSummary) -> dict:
    """{"start_endpoint" (with the note that says whether the start was exploratory), "exclusions",
    "prepared_roles"} of prepare_continued()'s summary."""
    s = prepare_summary(summary)
    start = s.start
    if start is None:
        raise ValueError("prepare summary: no field 'start'; expected the summary of kit continued prepare")
    note = ("EXPLORATORY: the start endpoint's gates did not pass" if start.exploratory
            else "the start endpoint's gates passed")
    return {"start_endpoint": start.to_json() | {"note": note},
            "exclusions": {"final_tasks": to_json(s.final_tasks_excluded),
                           "final_retention": to_json(s.final_retention_excluded)},
            "prepared_roles": roles_table(s)}


# --- the selection record (notebook 14) --------------------------------------------------------
def commit_specs(specs: dict[str, str]) -> dict[str, dict]:
    """{name: "HOME:FULL_ROOT"} as {name: {"home", "root"}} (a home may itself hold colons)."""
    out = {}
    for name, spec in specs.items():
        home, _, root = spec.rpartition(":")
        if not home or not root:
            raise ValueError(f"candidate {name!r} = {spec!r}: expected 'HOME:FULL_ROOT'")
        out[name] = {"home": home, "root": root}
    return out



def selection_sidecars(selection: dict | SelectionRecord, candidates: dict[str, dict], out: str) -> dict:
    """{"selection": each bound candidate with its home, "selection_file": the record's path and sha256}."""
    record = selection if isinstance(selection, SelectionRecord) else SelectionRecord.from_json(selection, str(out))
    homes = {name: CommitSpec.from_json(c, "candidates", name).home for name, c in candidates.items()}
    return {"selection": {n: {**bound.to_json(), "home": homes[n]} for n, bound in record.candidates.items()},
            "selection_file": {"path": str(out), "sha256": sha256_file(out),
                               "prepared_digest": record.prepared_digest}}


# --- one arm (notebook 11) ---------------------------------------------------------------------
def commits_table(commits: list[dict]) -> dict:
    """The `commits` sidecar: {"columns", "rows"}, one row per commit train() returned."""
    made = [MadeCommit.from_json(c, "train() result", f"commits[{i}]") for i, c in enumerate(commits)]
    return {"columns": COMMIT_COLUMNS,
            "rows": [[m.cohort, m.cohort_step, m.step, m.full_root, m.learned_state_root] for m in made]}


def attempt_throughput(home: str, commits: list[dict], workers: int) -> dict:
    """The `throughput` sidecar of the attempt that finalised exactly `commits` in `home` (a home keeps
    every attempt made in it): its updates, assistant tokens, update seconds and fetched bytes, read from
    `attempts/<attempt>/attempt.json` and its own `updates.jsonl` (inherited logs are not this attempt's)."""
    made = [MadeCommit.from_json(c, "train() result", f"commits[{i}]") for i, c in enumerate(commits)]
    attempts = [(p.parent, load_attempt(p)) for p in sorted(Path(home).glob("attempts/*/attempt.json"))]
    found = next(((d, a) for d, a in attempts if a.commits is not None and list(a.commits) == made), None)
    if found is None:
        raise ValueError(f"{home}/attempts: no attempt.json has field commits equal to the {len(commits)} "
                         "commit(s) train() returned; expected the attempt that made them")
    attempt_dir, attempt = found
    log = attempt_dir / "updates.jsonl"
    own = [timed_update(json.loads(line), str(log)) for line in log.read_text().splitlines()]
    seconds, tokens = sum(r.seconds for r in own), sum(r.tokens for r in own)
    return {"attempt": attempt.attempt, "status": attempt.status, "workers": workers,
            "updates": len(own), "assistant_tokens": tokens, "update_seconds": round(seconds, 3),
            "assistant_tokens_per_s": round(tokens / seconds, 1) if seconds else None,
            "fetched_bytes": sum(attempt.fetched_bytes or [0])}


def loss_curves(home: str, cohort: str) -> list[dict]:
    """The `loss_curves` sidecar: per update of `cohort` along the lineage kept in `home` (inherited logs
    travel with migrated and grown states), keyed by "update" (the cohort step)."""
    return [{"update": u.cohort_step, **{k: v for k, v in u.to_json().items() if k != "cohort_step"}}
            for u in update_curve(home, cohort)]



# --- the run inspection's view of an adaptive run's store (kit/evidence/inspect.py, StoreReader) ---------
def store_curves(params: dict) -> tuple[list, str] | None:
    """The loss curves of a run whose parameters name a checkpoint store (HOME) that is on this machine."""
    if params.get("HOME") and (Path(params["HOME"]) / "attempts").is_dir():
        return loss_curves(params["HOME"], params.get("COHORT", "A")), params["HOME"]
    return None


def store_home(params: dict) -> str | None:
    return params.get("HOME") or None

# --- a side-by-side comparison (notebook 12) ---------------------------------------------------
def comparison_summary(result: dict | CommitComparison, cohort: str) -> dict:
    """The `comparison` sidecar of compare()'s result: both learned-state roots and layouts, equality."""
    c = result if isinstance(result, CommitComparison) else CommitComparison.from_json(result, "comparison")
    return {"cohort": cohort, "candidate_learned_state_root": c.a.learned_state_root,
            "control_learned_state_root": c.b.learned_state_root,
            "candidate_layout": to_json(c.a.layout), "control_layout": to_json(c.b.layout),
            "learned_state_equal": c.learned_state_equal, "same_parameter_names": c.same_parameter_names,
            "parameters_differing": c.parameters_differing,
            "max_abs_parameter_difference": c.max_abs_parameter_difference, "torch": c.torch}


def _measured(value: float | None, what: str, step: int) -> float:
    if value is None:
        raise ValueError(f"comparison: update {step} has no field {what!r}; expected both runs' {what}")
    return value


def trajectories(result: dict | CommitComparison) -> list[dict]:
    """The `trajectories` sidecar: per update both runs made, both objectives, their difference and
    both gradient norms."""
    c = result if isinstance(result, CommitComparison) else CommitComparison.from_json(result, "comparison")
    control = {u.cohort_step: u for u in c.b.updates}
    rows = []
    for u in c.a.updates:
        ctl = control.get(step := u.cohort_step)
        if ctl is None:
            continue
        objective, control_objective = _measured(u.objective, "objective", step), \
            _measured(ctl.objective, "objective", step)
        rows.append({"update": step, "candidate_objective": objective, "control_objective": control_objective,
                     "objective_difference": objective - control_objective,
                     "candidate_grad_norm": u.grad_norm, "control_grad_norm": ctl.grad_norm})
    return rows


# --- an evaluation (notebook 13) ---------------------------------------------------------------
def evaluation_file(ev: dict | PairedScores, comparison: str, split: str, out: str) -> dict:
    """The `evaluation_file` sidecar: where the evaluation record is, its sha256 and what it scored."""
    scores = paired_scores(ev)
    return {"comparison": comparison, "split": split, "path": str(out), "sha256": sha256_file(out),
            "candidate": scores.candidate, "baseline": scores.baseline, "tasks": len(scores.tasks),
            "retention": len(scores.retention)}


def accuracy_sidecars(ev: dict | AnsweredTasks) -> dict:
    """{"accuracy_by_family": {family: {n, accuracy_/correct_ candidate and baseline}},
    "generated_answers": gained and lost correct answers, candidate against baseline}. `ev` needs only "tasks",
    each with "family", "cand_correct" and "base_correct" (a report rebuilds such rows from other records)."""
    tasks = (ev if isinstance(ev, AnsweredTasks) else answered_tasks(ev)).tasks
    cand = accuracy_by_family([{"family": x.family, "correct": x.cand_correct} for x in tasks])
    base = accuracy_by_family([{"family": x.family, "correct": x.base_correct} for x in tasks])
    table = cand.merge(base, on=["family", "n"], suffixes=("_candidate", "_baseline")).set_index("family")
    by_family = {f: {k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}
                 for f, row in table.to_dict(orient="index").items()}
    answers = gained_lost([x.cand_correct for x in tasks], [x.base_correct for x in tasks])
    return {"accuracy_by_family": by_family, "generated_answers": answers}


def nll_change_sidecars(ev: dict | PairedScores, terms: AdaptiveFamilyTerms, normal_multiplier: float) -> dict:
    """{"nll_change_bounds": the bootstrap and normal bounds the gates judge (evaluation.nll_change_bounds),
    "bootstrap_distribution": per part, a 40-bin histogram of the resampled statistic behind the bound
    (the same resamples: the contract's seed and count)}."""
    scores = paired_scores(ev)
    bounds = nll_change_bounds(scores, terms, normal_multiplier)
    hist = {}
    for part, rows in (("tasks", scores.tasks), ("retention", scores.retention)):
        stats = bootstrap_ratio_distribution(np.array([x.cand_nll - x.base_nll for x in rows], dtype=np.float64),
                                             np.array([x.tokens for x in rows], dtype=np.float64),
                                             bounds[part]["resamples"], bounds[part]["bootstrap_seed"])
        counts, edges = np.histogram(stats, bins=40)
        hist[part] = {"counts": counts.tolist(), "edges": edges.tolist(), "resamples": int(stats.size)}
    return {"nll_change_bounds": bounds, "bootstrap_distribution": hist}


def gate_sidecars(ev: dict | PairedScores, terms: JobTerms, prepared: dict | AnyPreparedJob, comparison: str) -> dict:
    """The final roles' verdict as sidecars: {"gates": {name: passed, inputs, rule}, "gate_verdict"} and,
    for a continued-learning job (generated answers are its primary gate), "start_endpoint" with the note
    that says whether its start was exploratory. Refused on development roles: they may only abort."""
    split = evaluation_split(ev)  # refused first, whatever else it holds
    if split != "final":
        raise ValueError(f"evaluation of {comparison or 'this comparison'}: field split = {split!r}; "
                         "the gates apply to final roles only")
    scores = paired_scores(ev)
    job = prepared if isinstance(prepared, (PreparedJob, ContinuedPreparedJob)) else \
        prepared_job_from_json(prepared, "prepared.json")  # a notebook hands over the file's JSON
    out = {}
    if isinstance(job, ContinuedPreparedJob):
        start = job.start
        assert isinstance(terms, ContinuedJob), "the job's contract is of the prepared job's kind (job_contract)"
        verdict = gate_verdict(continued_gates(scores, terms, start.exploratory))
        out["start_endpoint"] = {"full_root": start.full_root, "gates_passed": start.gates_passed,
                                 "exploratory": start.exploratory, "note": verdict.note}
    else:
        assert isinstance(terms, AdaptiveJob), "the job's contract is of the prepared job's kind (job_contract)"
        verdict = gate_verdict(gates(scores, terms))
    out["gates"] = {g.name: {"passed": g.passed, **g.inputs, "rule": g.rule} for g in verdict.gates}
    out["gate_verdict"] = {"comparison": comparison, "passed": verdict.passed, "candidate": verdict.candidate,
                           "baseline": verdict.baseline,
                           **({"exploratory": verdict.exploratory, "note": verdict.note}
                              if "exploratory" in verdict else {})}
    return out
