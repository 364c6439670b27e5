"""Development scoring of the study's replicates: the seed and each endpoint on development tasks and on the
retention probes, never on the final tasks (plan: campaigns/medium-replicates-plan.json).

The decision to know: the development tasks are the prepared `dev_tasks.jsonl` when the contract has
`data.dev`, else drawn by the study pilot's rule (`dev_rule`) into `STUDY/replicates/dev_tasks.jsonl`; the
retention probes are scored only when the contract draws them from records the exposure ledger already holds
(`data.retention.exposed`), so nothing new is opened. Nothing is written to the ledger, the candidate freeze
or the opening log. Records: docs/formats/replicates.md, "Study replicate development scores".
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from kit.adaptive.formats import AnsweredTask, AnsweredTasks
from kit.adaptive.sidecars import accuracy_sidecars
from kit.data.chat import load_tokenizer
from kit.data.conversations import read_jsonl, write_jsonl
from kit.data.tasks import generate_set
from kit.digest import load_json_strict, sha256_file, write_canonical_json
from kit.evaluation.scoring import (
    NllScore,
    TaskAnswer,
    eval_batch_sizes,
    load_model,
    nll_scores,
    task_answers,
)
from kit.evidence.dev_evaluation_format import ModelSource, SeedSource
from kit.evidence.replicate_analysis import NllChange, NllChanges
from kit.inventory import parameter_digest
from kit.record import SEED, Either, Num, Omittable, OneOf, Opt, Record, Seq, spec_field
from kit.study.prepare import (
    DEV_FILE,
    FILES,
    PREPARED_DIR,
    _seed_task_digests,
    _task_conversation,
    check_seed,
    load_prepared_job,
)
from kit.study.schema import StudyContract

DEV_FORMAT = "kit.study.replicate-dev/1"
TASKS_FORMAT = "kit.study.replicate-dev-tasks/1"
FOLDER = "replicates"


class ReplicateScoringRefused(ValueError):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class DevRule(Record):
    """How the development tasks of a study without `data.dev` are drawn (kit.data.tasks.generate_set)."""
    count: int = spec_field(Num(1, integer=True), doc="tasks drawn")
    role: str = spec_field(str, doc="the role their draws are seeded with")
    seed: int = spec_field(SEED, doc="the draws' seed")
    difficulty: int = spec_field(OneOf(1, 2, 3), doc="the tasks' difficulty")


@dataclass(frozen=True, slots=True, kw_only=True)
class DevTasksRecord(Record):
    """`STUDY/replicates/dev_tasks.json`: the drawn development tasks' rule and digest, checked on every read."""
    format: str = spec_field(OneOf(TASKS_FORMAT), doc=TASKS_FORMAT)
    rule: DevRule = spec_field(DevRule, doc="how they were drawn")
    sha256: str = spec_field(str, doc="of dev_tasks.jsonl")
    count: int = spec_field(Num(0, integer=True), doc="tasks written")
    excluded_digests: int = spec_field(SEED, doc="task digests the draw excluded")
    prepared_json: str = spec_field(str, doc="sha256 of prepared.json when drawn")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicateDevScores(Record):
    """`STUDY/replicates/dev/<label>.json`: one model's development scoring (docs/formats/replicates.md)."""
    FORMAT: ClassVar[str] = DEV_FORMAT
    format: str = spec_field(OneOf(DEV_FORMAT), doc=DEV_FORMAT)
    label: str = spec_field(str, doc="`seed` or `<arm>-r<k>`")
    source: SeedSource | ModelSource = spec_field(Either(SeedSource, ModelSource), doc="the model scored")
    dev_tasks_sha256: str = spec_field(str, doc="the development tasks'")
    retention_sha256: str | None = spec_field(Opt(str), doc="the retention probes' (null: not exposed records)")
    tasks: tuple[TaskAnswer, ...] = spec_field(Seq(TaskAnswer), doc="per task, the reply and verdict")
    task_nll: tuple[NllScore, ...] = spec_field(Seq(NllScore), doc="per task, the answer's NLL")
    retention: tuple[NllScore, ...] | None = spec_field(Opt(Seq(NllScore)), doc="per probe (null: not scored)")
    seconds: float = spec_field(float, doc="scoring time")
    device: str | None = spec_field(Omittable(str), doc="where it was scored (absent: CPU)")


def dev_rule(terms: StudyContract) -> DevRule:
    """The development role of contract terms without `data.dev`: the study pilot's (campaigns/study_pilot.py)."""
    f = terms.data.final_test
    return DevRule(count=f.count, role="study-dev", seed=f.seed, difficulty=f.difficulty)


def dev_tasks(study_dir: str | os.PathLike) -> tuple[Path, str]:
    """(the development task file, its sha256): the prepared one, or the one drawn by `dev_rule` (written
    once, with its record `dev_tasks.json`, and checked against that record afterwards)."""
    study_dir = Path(study_dir)
    prepared, contract, _ = load_prepared_job(study_dir, only=FILES)
    if DEV_FILE in prepared.files:
        return study_dir / PREPARED_DIR / DEV_FILE, prepared.files[DEV_FILE]
    out, record_path = study_dir / FOLDER / DEV_FILE, study_dir / FOLDER / "dev_tasks.json"
    if record_path.is_file():
        record = DevTasksRecord.from_json(load_json_strict(record_path), str(record_path))
        if sha256_file(out) != record.sha256:
            raise ReplicateScoringRefused(f"{out}: sha256 differs from field 'sha256' of {record_path}")
        return out, record.sha256
    rule, d = dev_rule(contract.terms), contract.terms.data
    seed_tasks, _ = _seed_task_digests(Path(prepared.seed.dir))
    # as prepare_study excludes them (digests only: nothing is scored or exposed here): the seed's tasks, the
    # training tasks (drawn again exactly as prepare drew them) and the final tasks
    train = generate_set(d.tasks.count, d.tasks.seed, d.tasks.role, d.tasks.difficulty, exclude_digests=seed_tasks)
    final = read_jsonl(study_dir / PREPARED_DIR / "final_tasks.jsonl", prepared.files["final_tasks.jsonl"])
    excluded = seed_tasks | {t.digest for t in train} | {c.meta["digest"] for c in final}
    tasks = generate_set(rule.count, rule.seed, rule.role, rule.difficulty, exclude_digests=excluded)
    if len(tasks) != rule.count:
        raise ReplicateScoringRefused(f"{study_dir}: drew {len(tasks)} of {rule.count} development tasks")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(out, [_task_conversation(t, True) for t in tasks])
    record = DevTasksRecord(format=TASKS_FORMAT, rule=rule, sha256=sha256_file(out), count=len(tasks),
                            excluded_digests=len(excluded),
                            prepared_json=sha256_file(study_dir / PREPARED_DIR / "prepared.json"))
    write_canonical_json(record_path, record.to_json())
    return out, record.sha256


def model_source(spec: str) -> ModelSource | None:
    """"HOME:FULL_ROOT" as the commit it names; None for "seed"."""
    if spec == "seed":
        return None
    home, _, root = spec.rpartition(":")
    if not home or len(root) != 64:
        raise ReplicateScoringRefused(f"model {spec!r}; expected 'seed' or 'HOME:FULL_ROOT' (a 64-hex root)")
    return ModelSource(home=home, full_root=root)


def parse_model(spec: str) -> dict:
    """"seed" or "HOME:FULL_ROOT" as the record's `source` ({"seed": true} for the seed)."""
    source = model_source(spec)
    return {"seed": True} if source is None else source.to_json()


def score_replicates(study_dir: str | os.PathLike, seed_dir: str | os.PathLike, models: dict[str, str],
                     device: str = "cpu") -> dict[str, ReplicateDevScores]:
    """Score each of `models` ({label: "seed" or "HOME:FULL_ROOT"}) on the development tasks and, when the
    contract's probes are exposed records, the retention probes; {label: its record}, each also written to
    STUDY/replicates/dev/<label>.json (reused when its source and files are unchanged)."""
    study_dir = Path(study_dir)
    path, sha = dev_tasks(study_dir)
    prepared, contract, _ = load_prepared_job(study_dir, only=("retention.jsonl",))
    terms = contract.terms
    check_seed(prepared, seed_dir)
    retention_sha = prepared.files["retention.jsonl"] if terms.data.retention.exposed else None
    tasks = read_jsonl(path, sha)
    probes = read_jsonl(study_dir / PREPARED_DIR / "retention.jsonl", retention_sha) if retention_sha else []
    tokenizer = load_tokenizer(seed_dir)
    nll_batch, answer_batch = eval_batch_sizes(device)
    out_dir = study_dir / FOLDER / "dev"
    out_dir.mkdir(parents=True, exist_ok=True)
    records = {}
    for label, spec in models.items():
        source = model_source(spec) or SeedSource(seed_dir=str(seed_dir), parameter_digest=parameter_digest(seed_dir))
        out = out_dir / f"{label}.json"
        if out.is_file():
            old = ReplicateDevScores.from_json(load_json_strict(out), str(out))
            if old.source == source and old.dev_tasks_sha256 == sha and old.retention_sha256 == retention_sha:
                records[label] = old  # scoring is deterministic: a rerun reuses it
                continue
        t0 = time.perf_counter()
        model = (load_model(seed_dir=str(seed_dir), device=device) if isinstance(source, SeedSource)
                 else load_model(home=source.home, root=source.full_root, device=device))
        answers = tuple(task_answers(model, tokenizer, tasks, terms.evaluation.max_new_tokens, batch_size=answer_batch))
        task_nll = tuple(nll_scores(model, tokenizer, tasks, terms.data.max_tokens, batch_size=nll_batch))
        retention = (tuple(nll_scores(model, tokenizer, probes, terms.data.max_tokens, batch_size=nll_batch))
                     if probes else None)
        rec = ReplicateDevScores(format=DEV_FORMAT, label=label, source=source, dev_tasks_sha256=sha,
                                 retention_sha256=retention_sha, tasks=answers, task_nll=task_nll, retention=retention,
                                 seconds=time.perf_counter() - t0, device=device if device != "cpu" else None)
        write_canonical_json(out, rec.to_json())
        records[label] = rec
        del model
    return records


def dev_sidecars(candidate: ReplicateDevScores, baseline: ReplicateDevScores) -> dict:
    """The sidecars of one replicate's development scores against the seed, in the shapes of the adaptive
    development evaluation's (kit.adaptive.sidecars): {"accuracy_by_family": {family or "all": {n,
    correct_/accuracy_ candidate and baseline}}, "nll_change": {"tasks" | "retention": {change_nats_per_token,
    tokens, n}}} (retention None when the contract's probes are not exposed records)."""
    base = {r.id: r for r in baseline.tasks}
    if set(base) != {r.id for r in candidate.tasks}:
        raise ReplicateScoringRefused("candidate and seed were scored on different development tasks")
    paired = AnsweredTasks(tasks=tuple(AnsweredTask(family=r.family, cand_correct=r.correct,
                                                    base_correct=base[r.id].correct) for r in candidate.tasks))

    def change(cand_rows: tuple[NllScore, ...], base_rows: tuple[NllScore, ...]) -> NllChange | None:
        if not cand_rows:
            return None
        tokens = sum(r.tokens for r in cand_rows)
        return NllChange(change_nats_per_token=(sum(r.nll_sum for r in cand_rows) - sum(r.nll_sum for r in base_rows))
                         / tokens, tokens=tokens, n=len(cand_rows))

    nll = NllChanges(tasks=change(candidate.task_nll, baseline.task_nll),
                     retention=change(candidate.retention or (), baseline.retention or ()))
    return {"accuracy_by_family": accuracy_sidecars(paired)["accuracy_by_family"], "nll_change": nll.to_json()}


def final_scorer(seed_dir: str | os.PathLike, max_tokens: int, max_new_tokens: int, device: str = "cpu"):
    """A `score(tasks, model)` for kit.evidence.replicate_design.score_final_set: `model` "HOME:FULL_ROOT" or
    "seed"; each generated task (kit.data.tasks) answered greedily and its answer's NLL scored, rows [{id,
    family, correct, nll_sum, tokens}] in the tasks' order. The tokenizer is the seed's."""
    tokenizer = load_tokenizer(seed_dir)
    nll_batch, answer_batch = eval_batch_sizes(device)

    def score(tasks, model_spec: str) -> list[dict]:
        source = model_source(model_spec)
        model = (load_model(seed_dir=str(seed_dir), device=device) if source is None
                 else load_model(home=source.home, root=source.full_root, device=device))
        convs = [_task_conversation(t, True) for t in tasks]
        answers = task_answers(model, tokenizer, convs, max_new_tokens, batch_size=answer_batch)
        nll = {r.id: r for r in nll_scores(model, tokenizer, convs, max_tokens, batch_size=nll_batch)}
        return [{"id": a.id, "family": a.family, "correct": bool(a.correct),
                 "nll_sum": nll[a.id].nll_sum, "tokens": nll[a.id].tokens} for a in answers]

    return score
