"""Preparation of a shared-gradient study: every input committed by digest before any training.

`prepare_study(contract, seed_dir, source, study_dir)` writes `study_dir/prepared/` (contract, encoded
training documents, schedule, final tasks, retention probes, development tasks when the contract has the
optional `data.dev`, prepared.json; docs/formats/study-records.md,
"Shared-gradient study records"). The decision to know: every document is trained exactly once in a
seeded permutation, and final tasks and retention probes exclude every training and seed task and
every item another contract's scoring exposed, all by content digest and counted; development tasks
exclude every seed, training and final task digest.
Data selection: the notes below.

Notes: the selection rules behind the counts in prepared.json.

Files and fields: docs/formats/study-records.md. Replay documents longer than `data.max_tokens` are rejected and
counted, never truncated, and train with cross entropy like the tasks (docs/study.md says why). The schedule is a
numpy default_rng(schedule.order_seed) permutation cut into global batches.
Retention probes exclude any record whose normalised prompt or content digest matches a training document; with
`data.retention.exposed` only records whose digest is in the exposure ledger are eligible, so "exposed" names the
set that really was exposed. Development tasks come from a role of their own (the schema refuses the training or
final role's name) and are drawn after the final tasks, so adding `data.dev` changes no other file; `kit.study.dev`
reads only their file (its digest checked), never the final ones or the ledger.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kit.contract import Contract
from kit.data.chat import encode_or_refuse, load_tokenizer
from kit.data.conversations import (
    Conversation,
    Message,
    instruction_source_range,
    normalize_text,
    read_jsonl,
    write_jsonl,
)
from kit.data.tasks import generate_set
from kit.digest import (
    canonical_json,
    load_json_strict,
    loads_strict,
    sha256_file,
    sha256_json,
    write_bytes_atomic,
    write_canonical_json,
)
from kit.evidence.environment import versions
from kit.evidence.ledger import (
    CONVERSATION_KINDS,
    TASK_KINDS,
    LedgerSummary,
    exposed_digests,
    ledger_path,
    summarize_ledger,
    tasks_excluding,
)
from kit.inventory import inventory_digest, parameter_digest
from kit.paths import inside
from kit.provenance import CommitmentMismatch, _check_source, kit_package_dir, source_digest
from kit.publish import publish_dir
from kit.study.formats import StudyPreparedJob, StudySchedule, TrainRow
from kit.study.schema import StudyContract, load_study_contract

PREPARED_FORMAT = "kit.study.prepared/1"
PREPARED_DIR = "prepared"
FILES = ("contract.json", "train.jsonl", "schedule.json", "final_tasks.jsonl", "retention.jsonl")
DEV_FILE = "dev_tasks.jsonl"  # only with the optional `data.dev` (what a study pilot scores)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")
SEED_TRAINED_FILE = "trained_conversations.jsonl"


class PreparedError(ValueError):
    pass


def _task_conversation(example, with_answer: bool) -> Conversation:
    meta = {"family": example.family, "digest": example.digest, "role": example.role}
    if with_answer:
        meta["answer"] = example.answer
    return Conversation(example.id, (Message("user", example.prompt), Message("assistant", example.answer)),
                        "task", meta)


def _seed_task_digests(seed_dir: Path) -> tuple[set[str], bool]:
    path = seed_dir / SEED_TRAINED_FILE
    if not path.exists():
        return set(), False
    return {c.meta["digest"] for c in read_jsonl(path) if c.source == "task" and "digest" in c.meta}, True


def _first_fitting(tokenizer, conversations, count: int, max_tokens: int, what: str, skip=None):
    """The first `count` conversations that encode within max_tokens (and `skip` does not exclude)."""
    chosen: list[tuple[Conversation, Any]] = []  # (conversation, its encoding)
    rejected, excluded = 0, 0
    for c in conversations:
        if len(chosen) == count:
            break
        if skip is not None and skip(c):
            excluded += 1
            continue
        enc = encode_or_refuse(tokenizer, c, max_tokens)
        if enc is None:
            rejected += 1
            continue
        chosen.append((c, enc))
    if len(chosen) < count:
        raise PreparedError(f"{what}: only {len(chosen)} of {count} records fit max_tokens={max_tokens} "
                            f"({rejected} too long, {excluded} excluded); widen the contract's source range")
    return chosen, {"rejected_too_long": rejected, "excluded": excluded}


def _record_row(c: Conversation, enc, family: str | None) -> TrainRow:
    return TrainRow(id=c.id, source=c.source, family=family, replay=c.source != "task",
                    input_ids=tuple(enc.input_ids), target_mask=tuple(bool(m) for m in enc.target_mask),
                    conversation_digest=c.digest)


def _ledger_exposure(ledger, contract_digest: str, study_dir) -> tuple[Path, LedgerSummary, set[str], set[str]]:
    """(the ledger, its summary, task digests another contract exposed, every exposed conversation digest):
    final-test tasks avoid the first; exposed retention probes are drawn from the second. `ledger` None:
    ledger_path(study_dir), the ledger scoped to this study."""
    ledger = Path(ledger) if ledger is not None else ledger_path(study_dir)
    return (ledger, summarize_ledger(ledger), exposed_digests(TASK_KINDS, ledger, other_than=contract_digest),
            exposed_digests(CONVERSATION_KINDS, ledger))


def _training_documents(d, tokenizer, seed_tasks: set[str], source_path: Path) -> tuple:
    """The generated tasks and the first replay records that fit max_tokens (`d`: the terms' data section):
    (tasks, task pairs, task stats, replay range, replay pairs, replay stats); a pair is (conversation, encoding)."""
    tasks = generate_set(d.tasks.count, d.tasks.seed, d.tasks.role, d.tasks.difficulty, exclude_digests=seed_tasks)
    task_pairs, task_stats = _first_fitting(tokenizer, [_task_conversation(t, False) for t in tasks],
                                            len(tasks), d.max_tokens, "data.tasks")
    rng = d.replay.source
    replay_range = instruction_source_range(source_path, rng.sha256, rng.start, rng.stop, rng.name)
    replay_pairs, replay_stats = _first_fitting(tokenizer, replay_range.conversations, d.replay.count,
                                                d.max_tokens, "data.replay")
    return tasks, task_pairs, task_stats, replay_range, replay_pairs, replay_stats


def _retention_probes(d, tokenizer, source_path: Path, train_pairs: list, exposed_convs: set[str],
                      ledger: Path) -> tuple[list, dict, int]:
    """The retention probes: records of their range that match no training document by normalised
    prompt or content digest; with `data.retention.exposed`, only records the ledger holds.
    Returns (pairs, stats, how many records were left out as not exposed)."""
    train_prompts = {normalize_text(c.prompt) for c, _ in train_pairs}
    train_digests = {c.digest for c, _ in train_pairs}
    rng = d.retention.source
    retention_range = instruction_source_range(source_path, rng.sha256, rng.start, rng.stop, rng.name)
    probes: Sequence[Conversation] = retention_range.conversations
    not_exposed = 0
    if d.retention.exposed:  # "already exposed": the records some scoring really opened
        probes = [c for c in retention_range.conversations if c.digest in exposed_convs]
        not_exposed = len(retention_range.conversations) - len(probes)
        if len(probes) < d.retention.count:
            raise PreparedError(f"{ledger}: {len(probes)} records of data.retention.source [{rng.start}, "
                                f"{rng.stop}) are in the exposure ledger; field 'data.retention.count' = "
                                f"{d.retention.count} exposed probes needed (data.retention.exposed = true: "
                                "probes some earlier scoring opened); give a ledger that holds such exposures "
                                "with --ledger FILE (or $KIT_LEDGER), e.g. a copy of the repository's "
                                "ledger/exposed.jsonl or the ledger of an adaptive run's final evaluation")
    pairs, stats = _first_fitting(
        tokenizer, probes, d.retention.count, d.max_tokens, "data.retention",
        skip=lambda c: normalize_text(c.prompt) in train_prompts or c.digest in train_digests)
    return pairs, stats, not_exposed


def _seed_record(seed_dir: Path, digest: str, seed_records_present: bool, seed_tasks: set[str]) -> dict:
    return {"dir": str(seed_dir), "parameter_digest": digest, "inventory_digest": inventory_digest(seed_dir),
            "config_sha256": sha256_file(seed_dir / "config.json"),
            "tokenizer_files": {n: sha256_file(seed_dir / n) for n in TOKENIZER_FILES if (seed_dir / n).exists()},
            "trained_conversations_present": seed_records_present,
            "trained_tasks_excluded_by_digest": len(seed_tasks)}


def _dev_tasks(d, excluded: set[str]) -> list | None:
    """The development tasks of `data.dev` (None without it): drawn in their own role, excluding every seed,
    training and final task digest, so no development task is ever trained or final."""
    dev = d.dev
    if dev is None:
        return None
    tasks = generate_set(dev.count, dev.seed, dev.role, dev.difficulty, exclude_digests=excluded)
    if len(tasks) != dev.count:
        raise PreparedError(f"data.dev: drew {len(tasks)} of {dev.count} development tasks")
    return tasks


def _write_files(staging: Path, contract: Contract[StudyContract], train_pairs: list, schedule: StudySchedule, final: list, retention_pairs: list,
                 dev: list | None = None) -> None:
    """FILES into `staging`: the contract, the encoded training documents, the schedule, finals, probes,
    and DEV_FILE when the contract has `data.dev`."""
    write_canonical_json(staging / "contract.json", contract.terms.to_json())
    lines = [canonical_json(_record_row(c, enc, c.meta.get("family")).to_json()) + b"\n" for c, enc in train_pairs]
    write_bytes_atomic(staging / "train.jsonl", b"".join(lines))
    write_canonical_json(staging / "schedule.json", schedule.to_json())
    write_jsonl(staging / "final_tasks.jsonl", [_task_conversation(t, True) for t in final])
    write_jsonl(staging / "retention.jsonl", [c for c, _ in retention_pairs])
    if dev is not None:
        write_jsonl(staging / DEV_FILE, [_task_conversation(t, True) for t in dev])


def prepare_study_job(contract_path: str | os.PathLike, seed_dir: str | os.PathLike,
                      source_path: str | os.PathLike, study_dir: str | os.PathLike,
                      ledger: str | os.PathLike | None = None) -> StudyPreparedJob:
    """`prepare_study`, its prepared.json read as the declared record (`kit study prepare`)."""
    return StudyPreparedJob.from_json(prepare_study(contract_path, seed_dir, source_path, study_dir, ledger),
                                      str(Path(study_dir) / PREPARED_DIR / "prepared.json"))


def prepare_study(contract_path: str | os.PathLike, seed_dir: str | os.PathLike, source_path: str | os.PathLike,
                  study_dir: str | os.PathLike, ledger: str | os.PathLike | None = None) -> dict:
    """Write study_dir/prepared/ (see the module docstring); returns prepared.json's content.

    `ledger`: the exposure ledger (kit/evidence/ledger.py; default ledger_path(study_dir)). Final-test tasks exclude
    every task digest another contract exposed (counted); with `data.retention.exposed` the probes are
    the records of the retention range whose content digest the ledger holds (really exposed), and
    preparation is refused when too few are."""
    contract = load_study_contract(contract_path)
    ledger, ledger_info, exposed_tasks, exposed_convs = _ledger_exposure(ledger, contract.digest, study_dir)
    seed_dir, source_path, study_dir = Path(seed_dir), Path(source_path), Path(study_dir)
    out = study_dir / PREPARED_DIR
    if (out / "prepared.json").exists():
        raise PreparedError(f"{out / 'prepared.json'}: this study is already prepared; use a new study directory")
    terms = contract.terms
    d = terms.data
    digest = parameter_digest(seed_dir)
    want = terms.seed.parameter_digest
    if want is not None and want != digest:
        raise PreparedError(f"{seed_dir}: parameter digest {digest}; the contract's field 'seed.parameter_digest' "
                            f"is {want}")
    tokenizer = load_tokenizer(seed_dir)
    # documents are only counted here, and over-long ones refused by the contract's max_tokens: without this,
    # transformers warns about the seed's model_max_length before a one-line refusal (as kit.adaptive.prepare)
    tokenizer.model_max_length = 1 << 62
    seed_tasks, seed_records_present = _seed_task_digests(seed_dir)

    tasks, task_pairs, task_stats, replay_range, replay_pairs, replay_stats = _training_documents(
        d, tokenizer, seed_tasks, source_path)
    train_pairs = task_pairs + replay_pairs
    final, final_exposed = tasks_excluding(d.final_test.count, d.final_test.seed, d.final_test.role,
                                           d.final_test.difficulty, seed_tasks | {t.digest for t in tasks},
                                           exposed_tasks)
    dev = _dev_tasks(d, seed_tasks | {t.digest for t in tasks} | {t.digest for t in final})
    retention_pairs, retention_stats, not_exposed = _retention_probes(d, tokenizer, source_path, train_pairs,
                                                                      exposed_convs, ledger)
    ids = [c.id for c, _ in train_pairs]
    order = np.random.default_rng(terms.schedule.order_seed).permutation(len(ids))
    per = terms.schedule.documents_per_update
    schedule = StudySchedule(updates=tuple(tuple(ids[int(i)] for i in order[a:a + per]) for a in range(0, len(ids), per)))

    # a previous preparation that never wrote prepared.json is replaced
    with publish_dir(out, replace=True) as staging:
        source = source_digest(kit_package_dir())
        _write_files(staging, contract, train_pairs, schedule, final, retention_pairs, dev)
        names = FILES if dev is None else (*FILES, DEV_FILE)
        prepared = {
            "format": PREPARED_FORMAT,
            "contract": {"path": str(contract.path), "digest": contract.digest, "name": terms.name},
            "seed": _seed_record(seed_dir, digest, seed_records_present, seed_tasks),
            "source": {"path": str(source_path), "sha256": sha256_file(source_path)},
            "files": {n: sha256_file(staging / n) for n in names},
            "counts": {"train_tasks": len(task_pairs), "train_replay": len(replay_pairs), "final_tasks": len(final),
                       "retention": len(retention_pairs), "updates": len(schedule.updates),
                       "documents_per_update": per, **({} if dev is None else {"dev_tasks": len(dev)}),
                       "train_target_tokens": sum(enc.num_targets for _, enc in train_pairs),
                       "train_tokens": sum(enc.num_tokens for _, enc in train_pairs)},
            # what prepared it, as the adaptive prepare commits (kit/provenance.py): the kit's own source and
            # the library versions; `run_arm` refuses a kit whose source digest differs (check_source)
            "kit_source": {"package_dir": str(kit_package_dir()), "digest": source[0], "files": source[1]},
            "versions": versions(),
            "ledger": {"path": ledger_info.path, "sha256": ledger_info.sha256, "entries": ledger_info.entries,
                       "digests": dict(ledger_info.digests), "final_test_excluded": final_exposed, "retention_not_exposed": not_exposed},
            "exclusions": {"tasks": task_stats, "replay": {**replay_stats,
                                                           "skipped_empty_output": len(replay_range.skipped_empty_output)},
                           "retention": {**retention_stats, "rule": "normalised prompt or content digest matches a "
                                         "training document", "not_in_ledger": not_exposed},
                           "final_test": {"ledger": final_exposed}},
        }
        write_canonical_json(staging / "prepared.json", prepared)
    return prepared


def load_prepared(study_dir: str | os.PathLike, only: tuple[str, ...] | None = None) -> tuple[dict, Contract, str]:
    """The notebooks' view of `load_prepared_job` (kit.load_prepared_study): prepared.json as its plain JSON."""
    prepared, contract, digest = load_prepared_job(study_dir, only)
    return prepared.to_json(), contract, digest


def load_prepared_job(study_dir: str | os.PathLike,
                      only: tuple[str, ...] | None = None) -> tuple[StudyPreparedJob, Contract, str]:
    """(prepared.json, the contract, prepared digest); every listed file is re-hashed first, or only the
    files named in `only` (a development scoring must not read the final tasks), each of which must be listed.
    The digest is of the file's own JSON (every committed arm record names it)."""
    out = Path(study_dir) / PREPARED_DIR
    path = out / "prepared.json"
    if not path.exists():
        raise PreparedError(f"{path}: not found; run `kit study prepare` for this study directory first")
    found = load_json_strict(path)
    prepared = StudyPreparedJob.from_json(found, str(path))
    for name in only or ():
        if name not in prepared.files:
            raise PreparedError(f"{path}: field 'files' has no {name!r}")
    for name, want in prepared.files.items():
        if only is not None and name not in only:
            continue
        got = sha256_file(inside(out, name, f"{path} field 'files'"))
        if got != want:
            raise PreparedError(f"{out / name}: sha256 {got} differs from {want} recorded in {path}")
    contract = load_study_contract(out / "contract.json")
    if contract.digest != prepared.contract.digest:
        raise PreparedError(f"{out / 'contract.json'}: contract digest {contract.digest} differs from "
                            f"prepared.json's {prepared.contract.digest}")
    return prepared, contract, sha256_json(found)


def check_source(prepared: StudyPreparedJob, path: str | os.PathLike = "prepared.json",
                 package_dir: str | os.PathLike | None = None) -> None:
    """Refuse to train with a kit whose source differs from the one that prepared (or a preparation
    that did not commit it); the refusal names the file and the expected digest."""
    entry = prepared.kit_source
    if entry is None:
        raise PreparedError(f"{path}: field 'kit_source' missing; expected the kit source digest committed at "
                            "prepare (prepare the study again with this kit)")
    try:
        _check_source(entry.to_json(), Path(package_dir) if package_dir is not None else kit_package_dir())
    except CommitmentMismatch as e:
        raise PreparedError(f"{path}: field 'kit_source.digest' = {entry.digest}: {e}") from None


def check_seed(prepared: StudyPreparedJob, seed_dir: str | os.PathLike) -> None:
    """Refuse a seed directory whose weights or tokenizer differ from the prepared ones."""
    seed_dir = Path(seed_dir)
    got = parameter_digest(seed_dir)
    if got != prepared.seed.parameter_digest:
        raise PreparedError(f"{seed_dir}: parameter digest {got} differs from the prepared "
                            f"{prepared.seed.parameter_digest}")
    for name, want in prepared.seed.tokenizer_files.items():
        if sha256_file(seed_dir / name) != want:
            raise PreparedError(f"{seed_dir / name}: differs from the prepared tokenizer file (sha256 {want})")


def read_train_rows(study_dir: str | os.PathLike) -> dict[str, TrainRow]:
    """The encoded training documents by id (the file's digest was checked by load_prepared)."""
    path = Path(study_dir) / PREPARED_DIR / "train.jsonl"
    rows = {}
    for lineno, line in enumerate(path.read_bytes().splitlines(), start=1):
        row = TrainRow.from_json(loads_strict(line, f"{path}:{lineno}"), f"{path}:{lineno}")
        rows[row.id] = row
    return rows
