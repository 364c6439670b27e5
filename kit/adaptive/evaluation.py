"""Adaptive evaluation: score a candidate against its baseline on development or final roles,
then apply the seed's gates to the final comparison.

Comparisons (the seed): phase A endpoint vs the seed; phase B endpoint vs the phase-A endpoint;
growth vs the fixed-depth control. Per example the record holds both models' summed
assistant-token NLL and token count, and both greedy answers checked by the task checker.

Gates, exactly as the seed states them, on final roles:
  gain       upper one-sided 95% paired-bootstrap bound of the per-token NLL change on final tasks < -0.001
  retention  the same bound on final conversation retention <= +0.02
  generated  generated task answers lose no correct cases in aggregate (lost <= gained)
Development roles may abort a run; they never select another endpoint.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kit.adaptive.continued_schema import AdaptiveFamilyTerms
from kit.adaptive.formats import (
    EvaluationRecord,
    PairedScores,
    RetentionPair,
    RolePair,
    ScoreCache,
    ScoredTask,
    TaskPair,
    gate_results,
    load_job_files,
    load_prepared,
    paired_scores,
)
from kit.adaptive.schema import AdaptiveContract
from kit.adaptive.selection import EVALUATIONS_LOG, ModelPair, _log, guard_ledger, open_final_roles
from kit.data.chat import load_tokenizer
from kit.data.conversations import Conversation, read_jsonl
from kit.digest import load_json_strict, sha256_file, sha256_json, write_canonical_json
from kit.evaluation.scoring import eval_batch_sizes, load_model, nll_scores, task_answers
from kit.evidence.ledger import record_exposures
from kit.evidence.notebook import record_materials
from kit.inventory import parameter_digest
from kit.paths import inside
from kit.refs import CommitRef, SeedRef
from kit.stats import (
    accuracy_by_family,
    gained_lost,
    gate_gain,
    gate_generated,
    gate_retention,
    paired_bootstrap_upper,
    ratio_change_normal_upper,
)

DEV_ROLES = RolePair(tasks="dev.tasks", retention="dev.retention")
FINAL_ROLES = RolePair(tasks="final.tasks", retention="final.retention")


@dataclass(frozen=True, slots=True)
class RoleData:
    """The conversations of the two roles a model is scored on."""

    tasks: list[Conversation]
    retention: list[Conversation]


def read_roles(prepared_dir: Path, roles: RolePair) -> tuple[RoleData, RolePair]:
    """The roles' conversations (each file checked against its recorded sha256) and their files' sha256."""
    tasks, retention = role_file(prepared_dir, roles.tasks), role_file(prepared_dir, roles.retention)
    data = RoleData(tasks=read_jsonl(*tasks), retention=read_jsonl(*retention))
    return data, RolePair(tasks=sha256_file(tasks[0]), retention=sha256_file(retention[0]))


def role_file(prepared_dir: Path, role: str) -> tuple[Path, str]:
    info = load_job_files(prepared_dir).roles.get(role)
    if info is None:
        raise ValueError(f"{prepared_dir / 'prepared.json'}: no role {role!r}")
    return inside(prepared_dir, info.file, f"{prepared_dir / 'prepared.json'} field 'roles.{role}.file'"), info.sha256


def model_spec(spec: str) -> tuple[SeedRef | CommitRef, str]:
    """'seed:DIR' or 'HOME:ROOT' -> the model (a seed directory or a commit), plus an identity string."""
    if spec.startswith("seed:"):
        return SeedRef(spec[5:]), spec
    home, _, root = spec.rpartition(":")
    if not home or len(root) != 64:
        raise ValueError(f"model {spec!r}: expected 'seed:DIR' or 'HOME:FULL_ROOT'")
    return CommitRef(home, root), root


def load_scored_model(model: SeedRef | CommitRef, device: str = "cpu"):
    """kit.evaluation.scoring.load_model of a seed directory or a commit."""
    if isinstance(model, SeedRef):
        return load_model(seed_dir=model.seed_dir, device=device)
    return load_model(home=model.home, root=model.root, device=device)


@dataclass(frozen=True, slots=True, kw_only=True)
class EvaluateRequest:
    """One scoring of a candidate against its baseline: what `kit adaptive evaluate` and notebook 13 ask for.
    The token limits are the job's contract's (`training.max_tokens`, `evaluation.max_new_tokens`)."""

    prepared: str | os.PathLike  # the prepared job whose role files are scored
    candidate: str  # "HOME:FULL_ROOT" or "seed:DIR"
    baseline: str  # "HOME:FULL_ROOT" or "seed:DIR"
    split: str = "dev"  # "dev" or "final" (final needs `selection`)
    out: str | os.PathLike  # the evaluation record to write (JSON); its folder holds the score cache
    tokenizer_dir: str  # a seed folder with the tokenizer (the prepared job's seed)
    max_tokens: int  # tokens per scored conversation
    max_new_tokens: int = 32  # greedy answer length
    selection: str | None = None  # final roles: the selection record binding the pair
    device: str = "cpu"  # "cpu", or "cuda" for the 1.7B shape


def evaluate(request: EvaluateRequest) -> dict:
    """Score candidate and baseline on the request's split (NLL per assistant token, greedy answers) in
    batches on its device ("cpu", or "cuda" for the 1.7B shape: FP32 weights either way; GPU scores may
    differ from CPU ones in the last bits, so the score cache keys them by device)."""
    prepared_dir, split, out, device = Path(request.prepared), request.split, request.out, request.device
    candidate, baseline, selection = request.candidate, request.baseline, request.selection
    if split not in ("dev", "final"):
        raise ValueError(f"split {split!r}; expected 'dev' or 'final'")
    cand_model, cand_id = model_spec(candidate)
    base_model, base_id = model_spec(baseline)
    roles = DEV_ROLES if split == "dev" else FINAL_ROLES
    if split == "final":  # the pair must be one the selection record binds, before any final byte is read
        open_final_roles(prepared_dir, selection, [cand_id] if not cand_id.startswith("seed:") else [],
                         purpose=f"final scoring of {cand_id} against {base_id}",
                         models=ModelPair(cand_model, base_model))

    record_materials("prepared", "file", [sha256_file(prepared_dir / "prepared.json")])
    record_materials("scored", "commit", [m.root for m in (cand_model, base_model) if isinstance(m, CommitRef)])
    tok = load_tokenizer(request.tokenizer_dir)
    data, role_sha256 = read_roles(prepared_dir, roles)
    if split == "final":
        pj = load_prepared(prepared_dir)
        record_exposures(data.tasks, data.retention, pj.contract.digest, pj.job_digest,
                         f"final scoring of {cand_id} against {base_id}",
                         path=guard_ledger(prepared_dir, pj))  # the ledger the job is bound to
    cache = Path(out).parent / "score-cache"
    c, b = (cached_scores(model, ident, tok, data, role_sha256, request.max_tokens, request.max_new_tokens, cache,
                          device) for model, ident in ((cand_model, cand_id), (base_model, base_id)))
    record = EvaluationRecord(
        split=split, candidate=cand_id, baseline=base_id, roles=roles, role_sha256=role_sha256,
        tasks=tuple(ScoredTask(id=x.id, family=x.family, tokens=x.tokens, cand_nll=x.nll_sum, base_nll=y.nll_sum,
                               cand_correct=xa.correct, base_correct=ya.correct, cand_reply=xa.reply,
                               base_reply=ya.reply)
                    for x, y, xa, ya in zip(c.task_nll, b.task_nll, c.answers, b.answers)),
        retention=tuple(RetentionPair(id=x.id, tokens=x.tokens, cand_nll=x.nll_sum, base_nll=y.nll_sum)
                        for x, y in zip(c.retention_nll, b.retention_nll)),
        device=None if device == "cpu" else device)  # CPU records keep their bytes: no device field
    result = record.to_json()
    sha = write_canonical_json(out, result)
    if split == "final":  # the record's bytes, bound where the opening was logged (kit continued prepare reads it)
        _log(prepared_dir, {"evaluation": str(out), "sha256": sha, "candidate": cand_id, "baseline": base_id},
             EVALUATIONS_LOG)
    return result


def cached_scores(model_ref: SeedRef | CommitRef, ident: str, tok, data: RoleData, role_sha: RolePair, max_tokens: int, max_new_tokens: int,
                  cache: Path, device: str = "cpu") -> ScoreCache:
    """A model's scores on the roles, cached by (weights identity, role file digests, settings): scoring
    is a deterministic function of those, and each endpoint is a candidate once and a baseline once."""
    weights = parameter_digest(model_ref.seed_dir) if isinstance(model_ref, SeedRef) else ident
    key = sha256_json(["kit-adaptive-scores/1", weights, role_sha.to_json(), max_tokens, max_new_tokens]
                      + ([] if device == "cpu" else [device]))
    path = cache / f"{key}.json"
    if path.exists():
        return ScoreCache.from_json(load_json_strict(path), str(path))

    model = load_scored_model(model_ref, device)
    nll_batch, answer_batch = eval_batch_sizes(device)
    tasks, retention = data.tasks, data.retention
    scores = ScoreCache(task_nll=tuple(nll_scores(model, tok, tasks, max_tokens, batch_size=nll_batch)),
                        retention_nll=tuple(nll_scores(model, tok, retention, max_tokens, batch_size=nll_batch)),
                        answers=tuple(task_answers(model, tok, tasks, max_new_tokens, batch_size=answer_batch)))
    del model
    cache.mkdir(parents=True, exist_ok=True)
    write_canonical_json(path, scores.to_json())
    return scores


def bootstrap_uppers(scores: PairedScores, terms: AdaptiveFamilyTerms) -> tuple:
    """(tasks, retention): the one-sided paired-bootstrap bounds of the per-token NLL change (the contract's
    confidence, resamples and seed)."""
    boot = terms.bootstrap
    return tuple(paired_bootstrap_upper([x.cand_nll for x in rows], [x.base_nll for x in rows],
                                        [x.tokens for x in rows], boot.confidence, boot.resamples, boot.seed)
                 for rows in (scores.tasks, scores.retention))


def family_accuracy(scores: PairedScores) -> dict:
    """{"candidate", "baseline"}: each model's accuracy per task family (records of accuracy_by_family)."""
    return {"candidate": accuracy_by_family([{"family": x.family, "correct": x.cand_correct}
                                             for x in scores.tasks]).to_dict(orient="records"),
            "baseline": accuracy_by_family([{"family": x.family, "correct": x.base_correct}
                                            for x in scores.tasks]).to_dict(orient="records")}


def gates(evaluation: dict | PairedScores, terms: AdaptiveContract) -> dict:
    """The seed's three gates on a final evaluation record, with every input written out."""
    scores = paired_scores(evaluation)
    if scores.split != "final":
        raise ValueError("gates apply to final evaluations only; development checks may only abort")
    g = terms.gates
    gain, ret = bootstrap_uppers(scores, terms)
    gl = gained_lost([x.cand_correct for x in scores.tasks], [x.base_correct for x in scores.tasks])
    verdicts = [gate_gain(gain.upper, g.gain_upper_below), gate_retention(ret.upper, g.retention_upper_at_most),
                gate_generated(gl)]
    return {
        "candidate": scores.candidate, "baseline": scores.baseline,
        "gain": gain.to_dict(), "retention": ret.to_dict(), "generated": gl,
        "gates": verdicts, "passed": all(g.passed for g in gate_results(verdicts)),
        "accuracy": family_accuracy(scores),
    }


def nll_change_bounds(evaluation: dict | PairedScores, terms: AdaptiveFamilyTerms, normal_multiplier: float = 1.645) -> dict:
    """Per part ("tasks", "retention"): the per-token NLL change with its one-sided paired-bootstrap
    upper bound (the contract's confidence, resamples and seed: the numbers `gates` judges on final
    roles) and the approximate delta-method normal bound beside it. Notebooks show these; they never
    compute a bound themselves."""
    scores = paired_scores(evaluation)
    parts: tuple[tuple[str, Sequence[TaskPair] | Sequence[RetentionPair]], ...] = (
        ("tasks", scores.tasks), ("retention", scores.retention))
    bounds = {}
    for (part, rows), b in zip(parts, bootstrap_uppers(scores, terms)):
        _, normal_upper = ratio_change_normal_upper([x.cand_nll - x.base_nll for x in rows], [x.tokens for x in rows],
                                                    normal_multiplier)
        bounds[part] = {"n": b.n, "tokens": int(sum(x.tokens for x in rows)), "change_nats_per_token": b.estimate,
                        "bootstrap_upper": b.upper, "normal_upper": normal_upper, "confidence": b.confidence,
                        "resamples": b.n_resamples, "bootstrap_seed": b.seed, "normal_multiplier": normal_multiplier}
    return bounds
