"""`kit adaptive prepare`: the frozen contract's data, schedule and ownership, bound by digests, before training.

It writes role files, schedule.json, ownership.json, prepared.json and adaptive-shards-inputs.json
into a fresh directory (docs/formats/adaptive-preparation.md, "Adaptive preparation").

The decision to know: preparation never loads a tensor (the seed may be 1.7B parameters and this
runs anywhere): the inventory comes from safetensors headers and the digest from streamed bytes.
Selection and order are pure functions of the contract's data seeds, and everything is staged in a
sibling and renamed into place, so a refusal or a crash leaves nothing half-prepared.
Details: the notes below.

Notes: seeds, order and disjointness.

A contract that pins the parameter digest refuses another seed before anything is written. Records are ranked by
sha256(canonical_json([seed, label, id])), which no library upgrade can change (docs/design.md, "Determinism").
Roles are disjoint by construction (task roles exclude every earlier role's digests and the seed's training tasks;
conversation roles skip content already used) and checked again by id and content digest before writing.
"""

from __future__ import annotations

import dataclasses
import types
from datetime import UTC, datetime
from pathlib import Path

from kit.adaptive.continued_schema import ContinuedContract
from kit.adaptive.formats import (
    CohortSchedule,
    DevRetentionSource,
    ExcludedDigests,
    Exclusions,
    FileDigest,
    FinalRetentionReport,
    FinalTasksReport,
    LedgerRead,
    Locations,
    PreparedContract,
    PreparedJob,
    PrepareSummary,
    PublicSource,
    ReplaySource,
    RoleFile,
    Schedule,
    ScheduledRecord,
    SeedIdentity,
    SelectionSkipped,
    Sources,
)
from kit.adaptive.ownership import OWNERSHIP_FILE, _block_of, ownership_manifests
from kit.adaptive.schema import AdaptiveContract, load_adaptive_contract
from kit.data.chat import ChatTemplateError, encode_or_refuse, load_tokenizer
from kit.data.conversations import (
    Conversation,
    conversation_from_json,
    instruction_source_range,
    normalize_text,
    read_jsonl,
    write_jsonl,
)
from kit.data.tasks import FAMILIES, TaskExample, assert_disjoint, generate_set
from kit.digest import sha256_file, sha256_json, write_canonical_json
from kit.evidence.ledger import (
    CONVERSATION_KINDS,
    TASK_KINDS,
    LedgerPin,
    LedgerSummary,
    exposed_digests,
    exposure_hint,
    ledger_path,
    ledger_pin,
    summarize_ledger,
    tasks_excluding,
)
from kit.inventory import check_shapes, inventory, inventory_digest, parameter_digest
from kit.model.config import LlamaShape, load_config
from kit.provenance import input_commitments
from kit.publish import publish_dir

PREPARED_FORMAT = "kit.adaptive.prepared/1"
SCHEDULE_FORMAT = "kit.adaptive.schedule/1"
PREPARED_FILE = "prepared.json"
SCHEDULE_FILE = "schedule.json"
COMMITMENTS_FILE = "adaptive-shards-inputs.json"
ROLES = ("A.new", "A.replay", "B.new", "B.replay_a", "B.replay_conv",
         "dev.tasks", "dev.retention", "final.tasks", "final.retention")
TRAINING_ROLES = ("A.new", "A.replay", "B.new", "B.replay_a", "B.replay_conv")
# role -> contract part of the per-update composition (kit/adaptive/schema.py)
COHORT_PARTS = {"A": {"A.new": "new", "A.replay": "replay_conv"},
                "B": {"B.new": "new", "B.replay_a": "replay_a", "B.replay_conv": "replay_conv"}}
# Seed files that change behaviour besides the weights; hashed and committed when present.
SEED_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
              "special_tokens_map.json", "chat_template.jinja", "vocab.json", "merges.txt", "tokenizer.model")
TOKENIZER_FILES = SEED_FILES[2:]


class PrepareError(ValueError):
    """Preparation refused: the message names the input or contract field and what was expected."""


def role_file(role: str) -> str:
    return f"roles/{role}.jsonl"


def _rank(items, seed: int, label: str, key=lambda c: c.id) -> list:
    """`items` in the order of sha256(canonical_json([seed, label, key])): a seeded, version-proof shuffle."""
    return sorted(items, key=lambda x: sha256_json([seed, label, key(x)]))


def _labelled(conv: Conversation, role: str, **extra) -> Conversation:
    return Conversation(conv.id, conv.messages, conv.source, {**conv.meta, **extra, "role": role})


def _task_records(examples: list[TaskExample], role: str) -> list[Conversation]:
    out = []
    for e in examples:
        conv = conversation_from_json(e.to_conversation(), f"task example {e.id}", "task")
        out.append(_labelled(conv, role, answer=e.answer, difficulty=e.difficulty))
    return out


def _document_key(conv: Conversation) -> str:
    """Normalised text of the whole document: every user and assistant turn, in order."""
    return normalize_text(" ".join(m.content for m in conv.messages if m.role in ("user", "assistant")))


class _Fits:
    """Whether a conversation encodes within max_tokens under the contract's "reject" policy."""

    def __init__(self, seed_dir: Path, max_tokens: int):
        self._encode = encode_or_refuse
        self.tokenizer = load_tokenizer(seed_dir)
        self.tokenizer.model_max_length = 1 << 62  # we only count tokens; silence the long-sequence warning
        self.max_tokens = max_tokens

    def __call__(self, conv: Conversation) -> bool:
        try:
            return self._encode(self.tokenizer, conv, self.max_tokens) is not None
        except ChatTemplateError as e:  # the template's failure, not the conversation's length: refused as such
            raise PrepareError(str(e)) from None
        except ValueError:
            return False  # no learnable assistant token under this tokenizer: unusable like an over-long one


def _take(candidates, count: int, fits: _Fits, used: set[str], role: str,
          source: str) -> tuple[list, SelectionSkipped]:
    """The first `count` candidates that fit and whose content is not used yet; counts what was skipped."""
    taken: list = []
    over_max_tokens = content_used = 0
    for conv in candidates:
        if len(taken) == count:
            break
        if conv.digest in used:
            content_used += 1
        elif not fits(conv):
            over_max_tokens += 1
        else:
            taken.append(conv)
            used.add(conv.digest)
    skipped = SelectionSkipped(over_max_tokens=over_max_tokens, content_used=content_used)
    if len(taken) < count:
        raise PrepareError(f"{source}: only {len(taken)} usable conversations for role {role!r}, the contract needs "
                           f"{count} (skipped: {skipped.to_json()}; max_tokens = {fits.max_tokens})")
    return taken, skipped


def _check_out_dir(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise PrepareError(f"{out}: already exists and is not an empty directory; prepared jobs are immutable, "
                           "choose a new --out")


def _check_pinned(path: Path, expected: str | None, field: str) -> str:
    actual = sha256_file(path)
    if expected is not None and actual != expected:
        raise PrepareError(f"{path}: sha256 {actual} does not match the contract's {field} = {expected}")
    return actual


def _seed_identity(terms: AdaptiveContract, seed_dir: Path) -> tuple[SeedIdentity, LlamaShape, dict]:
    """Header-only inventory and streamed parameter digest; refuses a seed the contract does not name."""
    pinned = terms.seed.parameter_digest
    digest = parameter_digest(seed_dir)  # hashes each tensor's byte range; nothing is materialised
    if pinned is not None and digest != pinned:
        raise PrepareError(f"{seed_dir}: parameter digest {digest} does not match the contract's "
                           f"seed.parameter_digest = {pinned}; refusing a different seed")
    shape = load_config(seed_dir)
    inv = inventory(seed_dir)
    blocks = {b for n in inv if (b := _block_of(n)) is not None}
    if blocks != set(range(shape.num_hidden_layers)):
        raise PrepareError(f"{seed_dir}: safetensors hold blocks {sorted(blocks)}; config.json says "
                           f"num_hidden_layers = {shape.num_hidden_layers}")
    try:  # every tensor the config implies, with its shape (headers only), before the job is published
        check_shapes(seed_dir, shape.parameter_shapes())
    except ValueError as e:
        raise PrepareError(str(e)) from None
    if terms.growth.copy_block >= shape.num_hidden_layers:
        raise PrepareError(f"contract field 'growth.copy_block' = {terms.growth.copy_block}; the seed has blocks "
                           f"0..{shape.num_hidden_layers - 1}")
    workers = max(terms.migration.to_workers, terms.cohorts.A.workers, terms.cohorts.B.workers)
    if workers > shape.num_hidden_layers:
        raise PrepareError(f"the contract needs {workers} workers but the seed has only {shape.num_hidden_layers} "
                           "blocks (each worker owns at least one)")
    identity = SeedIdentity(parameter_digest=digest, parameter_digest_pinned=pinned is not None,
                            inventory_digest=inventory_digest(seed_dir),
                            config_sha256=sha256_file(seed_dir / "config.json"),
                            num_hidden_layers=shape.num_hidden_layers, param_count=shape.param_count(),
                            tensors=len(inv))
    return identity, shape, inv


def _generate_tasks(terms: AdaptiveContract, seed_task_digests: set[str], exposed: frozenset[str] = frozenset(),
                    ) -> tuple[dict[str, list[TaskExample]], FinalTasksReport]:
    """A.new, B.new, dev.tasks, final.tasks; each excludes every earlier role and the seed's own tasks;
    final.tasks also every task digest of the exposure ledger (`exposed`), counted in the report returned."""
    wanted = {"A.new": terms.cohorts.A.totals.new, "B.new": terms.cohorts.B.totals.new,
              "dev.tasks": terms.evaluation.dev.tasks, "final.tasks": terms.evaluation.final.tasks}
    excluded = set(seed_task_digests)
    out = {}
    report = final_tasks_report(0, terms.evaluation.final.tasks)
    for role, count in wanted.items():
        if role == "final.tasks" and exposed:
            out[role], skipped = tasks_excluding(count, terms.data_seeds.tasks, role, terms.tasks.difficulty,
                                                  excluded, exposed)
            report = final_tasks_report(skipped, count)
        else:
            out[role] = generate_set(count, terms.data_seeds.tasks, role, terms.tasks.difficulty, excluded)
        excluded |= {e.digest for e in out[role]}
    assert_disjoint(*out.values())
    return out, report


def final_tasks_report(skipped: int, taken: int) -> FinalTasksReport:
    """prepared.json's `exclusions.final.tasks`: the draws the ledger's exposed tasks skipped."""
    return FinalTasksReport(excluded=types.MappingProxyType({"ledger": skipped}), excluded_total=skipped,
                            taken=taken)


def _final_retention(terms: AdaptiveContract | ContinuedContract, public: Path, records: dict[str, list[Conversation]], fits: _Fits,
                     exposed: frozenset[str] = frozenset(), ledger: Path | None = None,
                     contract_digest: str | None = None) -> tuple[list, dict]:
    """The first `count` records of the pinned range surviving exclusion against every prepared record
    and against the exposure ledger (rule "ledger": a conversation digest some scoring already opened), and
    the report prepared.json records, as its JSON (read back as FinalRetentionReport)."""
    spec = terms.evaluation.final.retention
    rng = instruction_source_range(public, spec.sha256, spec.start, spec.stop, spec.source_name)
    against = [conv for role, convs in records.items() for conv in convs]
    prompts = {m.content for conv in against for m in conv.messages if m.role == "user"}
    keys = {"prompt_exact": prompts, "prompt_normalized": {normalize_text(p) for p in prompts},
            "document_normalized": {_document_key(conv) for conv in against}}
    counts = {rule: 0 for rule in keys} | {"ledger": 0, "over_max_tokens": 0, "content_used": 0}
    used: set[str] = set()
    eligible, by_ledger = [], []
    for conv in rng.conversations:  # index order; each record is counted under the first rule it meets
        probe = {"prompt_exact": conv.prompt, "prompt_normalized": normalize_text(conv.prompt),
                 "document_normalized": _document_key(conv)}
        rule = next((r for r in keys if probe[r] in keys[r]), None)
        if rule is None and conv.digest in exposed:
            rule = "ledger"
            by_ledger.append(conv.digest)
        if rule is None and conv.digest in used:
            rule = "content_used"
        elif rule is None and not fits(conv):
            rule = "over_max_tokens"
        if rule is not None:
            counts[rule] += 1
            continue
        used.add(conv.digest)
        eligible.append(conv)
    if len(eligible) < spec.count:
        hint = (f"; {counts['ledger']} of them because {exposure_hint(ledger, by_ledger, contract_digest)}"
                if by_ledger and ledger else "")
        raise PrepareError(f"{public}: records [{spec.start}, {spec.stop}) leave {len(eligible)} eligible "
                           f"after exclusion {counts}; evaluation.final.retention.count = {spec.count}{hint}")
    report = FinalRetentionReport(source_name=spec.source_name, start=spec.start, stop=spec.stop,
                                  skipped_empty_output=len(rng.skipped_empty_output),
                                  excluded=types.MappingProxyType(counts), excluded_total=sum(counts.values()),
                                  eligible=len(eligible), taken=spec.count, against_roles=tuple(sorted(records)))
    return [_labelled(x, "final.retention") for x in eligible[: spec.count]], report.to_json()


def _schedule(terms: AdaptiveContract, records: dict[str, list[Conversation]], contract_digest: str | None = None) -> Schedule:
    seed = terms.data_seeds.schedule
    cohorts = {}
    for cohort, parts in COHORT_PARTS.items():
        spec = getattr(terms.cohorts, cohort)
        ranked = {role: _rank(records[role], seed, f"schedule/{cohort}/{role}") for role in parts}
        steps = []
        for k in range(spec.updates):
            chosen = []
            for role, part in parts.items():
                n = getattr(spec.per_update, part)
                chosen += [(role, conv) for conv in ranked[role][k * n:(k + 1) * n]]
            chosen = _rank(chosen, seed, f"schedule/{cohort}/{k + 1}", key=lambda rc: [rc[0], rc[1].id])
            steps.append(tuple(ScheduledRecord(id=conv.id, role=role, replay=role not in ("A.new", "B.new"),
                                               digest=conv.digest) for role, conv in chosen))
        cohorts[cohort] = CohortSchedule(updates=spec.updates, reference=spec.reference, steps=tuple(steps))
    return Schedule(format=SCHEDULE_FORMAT, contract_digest=contract_digest, seed=seed,
                    cohorts=types.MappingProxyType(cohorts))


def _a_steps(schedule: Schedule) -> dict[str, int]:
    return {e.id: k + 1 for k, step in enumerate(schedule.cohorts["A"].steps) for e in step if e.role == "A.new"}


def _assert_roles(records: dict[str, list[Conversation]], seed_task_digests: set[str]) -> None:
    """Disjoint roles by id and content; replay roles are subsets of what they replay."""
    disjoint = ("A.new", "B.new", "dev.tasks", "final.tasks", "A.replay", "dev.retention", "final.retention")
    seen_id: dict[str, str] = {}
    seen_digest: dict[str, str] = {}
    for role in disjoint:
        for conv in records[role]:
            for key, seen in ((conv.id, seen_id), (conv.digest, seen_digest)):
                if seen.setdefault(key, role) != role:
                    raise PrepareError(f"roles {seen[key]!r} and {role!r} share record {conv.id!r}")
    for role in ("A.new", "B.new", "dev.tasks", "final.tasks"):
        clash = [x.id for x in records[role] if x.meta["digest"] in seed_task_digests]
        if clash:
            raise PrepareError(f"role {role!r} repeats the seed's own training task {clash[0]!r}")
    for role, parent in (("B.replay_a", "A.new"), ("B.replay_conv", "A.replay")):
        parent_ids = {x.id: x.digest for x in records[parent]}
        for conv in records[role]:
            if parent_ids.get(conv.id) != conv.digest:
                raise PrepareError(f"role {role!r} record {conv.id!r} is not a record of {parent!r}")


def _role_summary(convs: list[Conversation], sha: str, role: str) -> RoleFile:
    families = [x.meta.get("family") for x in convs]
    return RoleFile(file=role_file(role), sha256=sha, count=len(convs),
                    per_family=(types.MappingProxyType({f: families.count(f) for f in FAMILIES}) if any(families)
                                else None),
                    content_digest=sha256_json(sorted(x.digest for x in convs)))


def _conversation_roles(terms: AdaptiveContract, pool: list[Conversation], dev_path: Path | None, replay_path: Path,
                        fits: _Fits) -> tuple[dict[str, list[Conversation]], dict[str, SelectionSkipped]]:
    """A.replay and dev.retention: disjoint in content; dev.retention from its file, else from the pool."""
    sel, out = terms.data_seeds.selection, {}
    used: set[str] = set()
    skipped: dict[str, SelectionSkipped] = {}
    n_dev, n_replay = terms.evaluation.dev.retention, terms.cohorts.A.totals.replay_conv
    if dev_path:  # the given exposed records first, in file order; replay then avoids their content
        out["dev.retention"], skipped["dev.retention"] = _take(read_jsonl(dev_path), n_dev, fits, used,
                                                               "dev.retention", str(dev_path))
    out["A.replay"], skipped["A.replay"] = _take(_rank(pool, sel, "A.replay"), n_replay, fits, used, "A.replay",
                                                 str(replay_path))
    if not dev_path:  # exposed conversations: previously trained, not used as replay
        out["dev.retention"], skipped["dev.retention"] = _take(_rank(pool, sel, "dev.retention"), n_dev, fits, used,
                                                               "dev.retention", str(replay_path))
    return {role: [_labelled(x, role) for x in convs] for role, convs in out.items()}, skipped


def _cohort_b_replay(terms: AdaptiveContract, records: dict[str, list[Conversation]]) -> None:
    """B.replay_conv from A.replay (conversation_replay.cohort_B), B.replay_a from what A's schedule trains."""
    sel, totals = terms.data_seeds.selection, terms.cohorts.B.totals
    records["B.replay_conv"] = [_labelled(x, "B.replay_conv")
                                for x in _rank(records["A.replay"], sel, "B.replay_conv")[:totals.replay_conv]]
    a_step = _a_steps(_schedule(terms, {**records, "B.new": [], "B.replay_a": [], "B.replay_conv": []}))
    trained_in_a = _rank([x for x in records["A.new"] if x.id in a_step], sel, "B.replay_a")
    records["B.replay_a"] = [_labelled(x, "B.replay_a", trained_in="A.new", a_step=a_step[x.id])
                             for x in trained_in_a[:totals.replay_a]]


def _check_inputs(terms: AdaptiveContract, seed_dir: Path, replay: Path, dev: Path | None, public: Path, out: Path) -> None:
    _check_out_dir(out)
    for path in (seed_dir / "config.json", replay, public, *([dev] if dev else [])):
        if not path.is_file():
            raise PrepareError(f"{path}: input file not found")
    _check_pinned(public, terms.evaluation.final.retention.sha256, "evaluation.final.retention.sha256")
    _check_pinned(replay, terms.inputs.replay_sha256, "inputs.replay_sha256")
    if dev:
        _check_pinned(dev, terms.inputs.dev_retention_sha256, "inputs.dev_retention_sha256")


def _replay_pool(terms: AdaptiveContract, replay_path: Path, dev_path: Path | None) -> tuple[list, set[str], list]:
    """The seed's trained conversations, the digests of its own training tasks, and the replay pool
    (refused when it is smaller than the contract needs)."""
    trained = read_jsonl(replay_path)
    seed_task_digests = {x.meta["digest"] for x in trained if "family" in x.meta and "digest" in x.meta}
    pool = [x for x in trained if terms.conversation_replay.pool == "all" or "family" not in x.meta]
    need_replay = terms.cohorts.A.totals.replay_conv
    need = need_replay + (0 if dev_path else terms.evaluation.dev.retention)
    if len(pool) < need:
        raise PrepareError(f"{replay_path}: {len(pool)} {terms.conversation_replay.pool} conversations; the contract "
                           f"needs {need} (cohorts.A.totals.replay_conv = {need_replay}"
                           + ("" if dev_path else f" + evaluation.dev.retention = {need - need_replay}") + ")")
    return trained, seed_task_digests, pool


def ledger_exposure(ledger, contract_digest: str,
                    scope: Path) -> tuple[Path, LedgerSummary, frozenset[str], frozenset[str]]:
    """(the ledger, its summary, task digests, conversation digests) exposed under any other contract: a
    later contract may not reuse what any scoring exposed; the same contract re-prepared reproduces itself.
    `ledger` None: ledger_path(scope), the ledger scoped to the job being prepared into `scope`."""
    ledger = Path(ledger) if ledger is not None else ledger_path(scope)
    return (ledger, summarize_ledger(ledger), frozenset(exposed_digests(TASK_KINDS, ledger, other_than=contract_digest)),
            frozenset(exposed_digests(CONVERSATION_KINDS, ledger, other_than=contract_digest)))


def check_task_lengths(records: dict[str, list[Conversation]], fits: _Fits, error: type = PrepareError) -> None:
    """The over-long policy is "reject": a training or test task is never cut (`error` names the task)."""
    for role, convs in records.items():
        too_long = next((x.id for x in convs if not fits(x)), None)
        if too_long is not None:
            raise error(f"role {role!r} task {too_long!r} exceeds training.max_tokens = {fits.max_tokens}")


def _select_roles(terms: AdaptiveContract, seed_dir: Path, pool: list, seed_task_digests: set[str], dev_path: Path | None,
                  replay_path: Path, public: Path, exposed: tuple[Path, frozenset, frozenset],
                  contract_digest: str) -> tuple:
    """Every role's records, disjoint and checked: (records, task_report, final_report, selection skipped);
    `exposed` is (the ledger, its exposed task digests, its exposed conversation digests)."""
    ledger, exposed_tasks, exposed_convs = exposed
    fits = _Fits(seed_dir, terms.training.max_tokens)
    tasks, task_report = _generate_tasks(terms, seed_task_digests, exposed_tasks)
    records = {role: _task_records(examples, role) for role, examples in tasks.items()}
    check_task_lengths(records, fits)
    conversation_roles, skipped = _conversation_roles(terms, pool, dev_path, replay_path, fits)
    records |= conversation_roles
    _cohort_b_replay(terms, records)
    records["final.retention"], final_json = _final_retention(terms, public, dict(records), fits, exposed_convs,
                                                              ledger, contract_digest)
    final_report = FinalRetentionReport.from_json(final_json, "the final-retention report")
    _assert_roles(records, seed_task_digests)
    return records, task_report, final_report, skipped


def ledger_record(ledger_info: LedgerSummary, exposed_tasks: frozenset, exposed_convs: frozenset) -> LedgerRead:
    """prepared.json's "ledger": which ledger the exclusions read, and how many digests it excluded."""
    return LedgerRead(sha256=ledger_info.sha256, entries=ledger_info.entries,
                      digests=types.MappingProxyType(dict(ledger_info.digests)),
                      excluded_digests=ExcludedDigests(tasks=len(exposed_tasks), conversations=len(exposed_convs)),
                      rule="every digest exposed under another contract")


def read_ledger_head(info: LedgerSummary) -> LedgerPin:
    """prepared.json's `locations.ledger_head` of the ledger a preparation read (kit.evidence.ledger.ledger_pin)."""
    return ledger_pin(info)


def seed_inputs(seed_dir: Path) -> dict[str, Path]:
    """The seed files a prepared job commits to: weights and every file that changes behaviour."""
    return {f"seed/{p.name}": p for p in sorted(seed_dir.iterdir()) if p.name in SEED_FILES or p.suffix == ".safetensors"}


def prepare(contract_path, seed_dir, replay_path, dev_retention_path, public_source_path, out_dir,
            ledger=None) -> dict:
    """Prepare the contract's job into `out_dir` (absent or empty); returns a summary. See the module docstring.

    `ledger`: the exposure ledger (kit/evidence/ledger.py; default: ledger_path(out_dir)); final tasks and final
    retention exclude every digest in it, counted under exclusions ("ledger").

    Refused before anything is written: a contract failing its schema or rules, an input whose sha256
    differs from the contract's pin, a seed whose parameter digest differs from the pinned one, a replay
    file with fewer usable conversations than the contract needs, an existing non-empty `out_dir`.
    """
    contract = load_adaptive_contract(contract_path)
    terms = contract.terms
    seed_dir, replay_path, public = Path(seed_dir), Path(replay_path), Path(public_source_path)
    dev_path = Path(dev_retention_path) if dev_retention_path is not None else None
    out = Path(out_dir)
    _check_inputs(terms, seed_dir, replay_path, dev_path, public, out)
    identity, shape, inv = _seed_identity(terms, seed_dir)
    trained, seed_task_digests, pool = _replay_pool(terms, replay_path, dev_path)
    ledger, ledger_info, exposed_tasks, exposed_convs = ledger_exposure(ledger, contract.digest, out)
    records, task_report, final_report, skipped = _select_roles(
        terms, seed_dir, pool, seed_task_digests, dev_path, replay_path, public, (ledger, exposed_tasks, exposed_convs),
        contract.digest)
    schedule = _schedule(terms, records, contract.digest)

    with publish_dir(out) as staging:
        roles = {role: _role_summary(records[role], write_jsonl(staging / role_file(role), records[role]), role)
                 for role in ROLES}
        job = PreparedJob(
            format=PREPARED_FORMAT,
            contract=PreparedContract(digest=contract.digest, kind=terms.kind, scale=terms.scale),
            seed=identity,
            tokenizer=types.MappingProxyType({f: sha256_file(seed_dir / f) for f in TOKENIZER_FILES
                                              if (seed_dir / f).is_file()}),
            sources=Sources(
                replay=ReplaySource(sha256=sha256_file(replay_path), records=len(trained),
                                    task_records=len(seed_task_digests), pool=terms.conversation_replay.pool,
                                    pool_records=len(pool)),
                dev_retention=(DevRetentionSource(sha256=sha256_file(dev_path)) if dev_path else
                               DevRetentionSource(sha256=None, drawn_from="replay")),
                public=PublicSource(source_name=final_report.source_name, sha256=sha256_file(public))),
            roles=types.MappingProxyType(roles),
            schedule=FileDigest(file=SCHEDULE_FILE, sha256=write_canonical_json(staging / SCHEDULE_FILE,
                                                                                schedule.to_json())),
            ownership=FileDigest(file=OWNERSHIP_FILE, sha256=write_canonical_json(
                staging / OWNERSHIP_FILE, ownership_manifests(terms, shape, inv, identity.inventory_digest))),
            exclusions=Exclusions(final_retention=final_report, final_tasks=task_report,
                                  selection_skipped=types.MappingProxyType(skipped)),
            ledger=ledger_record(ledger_info, exposed_tasks, exposed_convs),
            job_digest="",  # set below, from every field but the three that are not identity
            locations=Locations(contract=str(Path(contract_path).absolute()), seed=str(seed_dir.absolute()),
                                replay=str(replay_path.absolute()), public_source=str(public.absolute()),
                                dev_retention=str(dev_path.absolute()) if dev_path else None,
                                ledger=ledger_info.path, ledger_head=read_ledger_head(ledger_info)),
            created_at=datetime.now(UTC).isoformat(timespec="seconds"))
        job = dataclasses.replace(job, job_digest=job.identity_digest())
        prepared_sha = write_canonical_json(staging / PREPARED_FILE, job.to_json())
        inputs = seed_inputs(seed_dir)
        inputs |= {"replay": replay_path, "public_source": public} | ({"dev_retention": dev_path} if dev_path else {})
        written = {role: role_file(role) for role in ROLES} | {
            "schedule": SCHEDULE_FILE, "ownership": OWNERSHIP_FILE, "prepared": PREPARED_FILE}
        write_canonical_json(staging / COMMITMENTS_FILE,
                             input_commitments(contract_path, contract.digest, inputs, staging, written))
    return PrepareSummary(out=str(out), job_digest=job.job_digest, prepared_sha256=prepared_sha,
                          ledger_sha256=ledger_info.sha256,  # the exposure ledger as read (None: absent)
                          contract_digest=contract.digest, parameter_digest=identity.parameter_digest,
                          roles={r: roles[r].count for r in ROLES}, final_retention_excluded=final_report.excluded,
                          final_tasks_excluded=task_report.excluded).to_json()


# --- CLI ------------------------------------------------------------------------------------------
