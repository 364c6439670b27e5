"""The continued-learning contract: one cohort `C` continues a committed phase-A endpoint of an
adaptive job (Adam state included), with that endpoint as the frozen reference for replay KL, and
no growth.

The decision to know: `prepare_continued` refuses before writing anything unless the endpoint is
the start job's phase-A endpoint, bound to that job's final evaluation, with passing gates (or the
contract says `start.exploratory`, which every record then repeats), and unless no final record was
exposed elsewhere. The prepared directory has the adaptive layout, so the adaptive drivers run it.
Details: the notes below; fields: docs/contracts.md.

Notes: what each refusal checks.

"The phase-A endpoint" is checked by cursor and depth; "bound to the final evaluation" by split, candidate, role
digests and an allowed final-access line. With `start.exploratory`, prepared.json, the gates and every report say
"exploratory". Final records present in any role of the start job are excluded and counted, never reused.
"""

from __future__ import annotations

import dataclasses
import types
from datetime import UTC, datetime
from pathlib import Path

from kit.adaptive import prepare as prep
from kit.adaptive.continued_schema import (  # noqa: F401  - re-exported: the contract's names in one place
    COHORT,
    KIND,
    PREPARED_FORMAT,
    ROLES,
    ContinuedContract,
    ContinuedRefused,
    ContinuedTerms,
    adaptive_job_terms,
    job_contract,
    load_continued_contract,
)
from kit.adaptive.evaluation import bootstrap_uppers, family_accuracy, gates
from kit.adaptive.formats import (
    PREPARED_FILE,
    CohortSchedule,
    ContinuedExclusions,
    ContinuedLocations,
    ContinuedPreparedJob,
    ContinuedStart,
    Cursor,
    FileDigest,
    FinalRetentionReport,
    PairedScores,
    PreparedContract,
    PreparedJob,
    PrepareSummary,
    Schedule,
    ScheduledRecord,
    StartSummary,
    gained_lost_counts,
    gate_results,
    gate_verdict,
    paired_scores,
)
from kit.adaptive.schema import AdaptiveJob, load_adaptive_contract
from kit.adaptive.selection import (
    ACCESS_LOG,
    EVALUATIONS_LOG,
    FinalRolesRefused,
    access_entries,
    check_endpoint,
)
from kit.data.conversations import read_jsonl, write_jsonl
from kit.data.tasks import generate_set
from kit.digest import load_json_strict, sha256_file, write_canonical_json
from kit.evidence.ledger import LedgerSummary, tasks_excluding
from kit.inventory import parameter_digest
from kit.paths import inside
from kit.provenance import input_commitments
from kit.publish import publish_dir
from kit.stats import gained_lost, gate_retention
from kit.store.commits import read_manifest


def continued_gates(evaluation: dict | PairedScores, terms: ContinuedTerms, exploratory: bool) -> dict:
    """Generated answers first (net gained >= 1), retention as a guard, the NLL gain reported."""
    scores = paired_scores(evaluation)
    if scores.split != "final":
        raise ValueError("gates apply to final evaluations only; development checks may only abort")
    gain, ret = bootstrap_uppers(scores, terms)
    gl = gained_lost_counts(gained_lost([x.cand_correct for x in scores.tasks], [x.base_correct for x in scores.tasks]))
    need = terms.gates.generated_min_net_gained
    generated = {"name": "generated", "passed": gl.net >= need, "inputs": gl.to_json(),
                 "rule": f"primary: generated answers improve, gained - lost >= {need}"}
    verdicts = [generated, gate_retention(ret.upper, terms.gates.retention_upper_at_most)]
    return {"candidate": scores.candidate, "baseline": scores.baseline, "gain": gain.to_dict(),
            "retention": ret.to_dict(), "generated": gl.to_json(), "gates": verdicts,
            "passed": all(g.passed for g in gate_results(verdicts)), "exploratory": exploratory,
            "note": ("EXPLORATORY: started from a phase-A endpoint whose gates did not pass" if exploratory else
                     "started from a phase-A endpoint whose gates passed"),
            "accuracy": family_accuracy(scores)}


def _start_endpoint(spj: PreparedJob, start_dir: Path, start_terms: AdaptiveJob, terms: ContinuedContract, home: str, root: str,
                    evaluation: Path) -> ContinuedStart:
    """The start endpoint's identity and its gates, recomputed from its bound final evaluation."""
    name = terms.start.comparison
    m = read_manifest(home, root)
    try:
        check_endpoint(m, name, spj, start_terms, f"{home}:{root}")
    except FinalRolesRefused as e:
        raise ContinuedRefused(f"start endpoint: {e}") from None
    if start_terms.comparisons[name].cohort != "A" or start_terms.comparisons[name].grown:
        raise ContinuedRefused(f"contract field 'start.comparison' = {name!r}; expected the start contract's "
                               "fixed-depth phase-A comparison (the continued cohort forbids growth)")
    ev = load_json_strict(evaluation)
    roles = {"tasks": spj.roles["final.tasks"].sha256, "retention": spj.roles["final.retention"].sha256}
    for field, got, want in (("split", ev.get("split"), "final"), ("candidate", ev.get("candidate"), root),
                             ("role_sha256", ev.get("role_sha256"), roles)):
        if got != want:
            raise ContinuedRefused(f"{evaluation}: field {field!r} = {got!r}; expected {want!r} (the start "
                                   f"endpoint's final evaluation in {start_dir})")
    sha = sha256_file(evaluation)
    written = [e for e in access_entries(start_dir, EVALUATIONS_LOG) if e.get("sha256") == sha]
    if not written:
        raise ContinuedRefused(f"{evaluation}: sha256 {sha} is not a final evaluation record `kit adaptive evaluate` "
                               f"wrote for {start_dir} ({EVALUATIONS_LOG}); an edited or hand-made record is refused")
    opened = [e for e in access_entries(start_dir) if e.get("allowed") and root in e.get("roots", [])
              and e.get("baseline") == ev.get("baseline")]
    if not opened:
        raise ContinuedRefused(f"{start_dir / ACCESS_LOG}: no allowed final-role opening for candidate {root} against "
                               f"{ev.get('baseline')}; the evaluation is not bound to a selection of the start job")
    verdict = gate_verdict(gates(ev, start_terms), str(evaluation))
    passed = verdict.passed
    if not passed and not terms.start.exploratory:
        failed = [g.name for g in verdict.gates if not g.passed]
        raise ContinuedRefused(f"{evaluation}: the start endpoint's gates did not pass (failed: {failed}); contract "
                               "field 'start.exploratory' = false, so a continued run may start only from a passing "
                               "phase-A endpoint (set it true to run exploratory, and the report says so)")
    return ContinuedStart(comparison=name, full_root=root, learned_state_root=m.learned_state_root,
                          cursor=Cursor.from_json(dict(m.learned_state.cursor), f"{home}:{root} learned_state.cursor"),
                          prepared_job_digest=spj.job_digest, contract_digest=spj.contract.digest,
                          evaluation_sha256=sha256_file(evaluation),
                          gates=types.MappingProxyType({g.name: g.passed for g in verdict.gates}),
                          gates_passed=passed, exploratory=not passed)


def _start_job(terms: ContinuedContract, start_dir: Path) -> tuple[PreparedJob, AdaptiveJob]:
    """The start job's prepared.json and its contract's job view (cohort order A, B), the contract's digest
    checked against prepared.json and against the continued contract's pin."""
    path = start_dir / PREPARED_FILE
    spj = PreparedJob.from_json(load_json_strict(path), str(path))  # an adaptive job: continued jobs do not chain
    start_c = load_adaptive_contract(spj.locations.contract)
    if start_c.digest != spj.contract.digest:
        raise ContinuedRefused(f"{start_c.path}: digest {start_c.digest}; {start_dir / 'prepared.json'} field "
                               f"'contract.digest' expects {spj.contract.digest}")
    pinned = terms.start.contract_digest
    if pinned is not None and pinned != start_c.digest:
        raise ContinuedRefused(f"{start_dir / 'prepared.json'}: start contract digest {start_c.digest}; contract field "
                               f"'start.contract_digest' = {pinned}")
    return spj, adaptive_job_terms(start_c.data)


def _task_roles(terms: ContinuedContract, spj: PreparedJob, start_roles: dict, exposed_tasks: frozenset) -> tuple[dict, int]:
    """C.new, dev.tasks and final.tasks, each excluding the seed's trained tasks, every start role and
    every earlier role; final.tasks also the ledger's exposed tasks. Returns (tasks, ledger-skipped finals)."""
    trained = read_jsonl(spj.locations.replay)
    excluded = {x.meta["digest"] for x in trained if "family" in x.meta and "digest" in x.meta}
    excluded |= {x.meta["digest"] for convs in start_roles.values() for x in convs if "digest" in x.meta}
    seeds, diff = terms.data_seeds, terms.tasks.difficulty
    tasks = {}
    for role, count in (("C.new", terms.cohort.totals.new), ("dev.tasks", terms.evaluation.dev.tasks)):
        tasks[role] = generate_set(count, seeds.tasks, role, diff, excluded)
        excluded |= {e.digest for e in tasks[role]}
    tasks["final.tasks"], final_skipped = tasks_excluding(terms.evaluation.final.tasks, seeds.tasks,
                                                          "final.tasks", diff, excluded, exposed_tasks)
    return tasks, final_skipped


def _conversation_roles(terms: ContinuedContract, start_dir: Path, start_roles: dict, records: dict, public: Path, fits,
                        exposed_convs: frozenset, ledger: Path, contract_digest: str) -> FinalRetentionReport:
    """C.replay (from the start's A.replay), dev.retention (the start's) and final.retention (fresh
    public records, excluded against every role of both jobs and the ledger) into `records`; returns
    the final-retention report. `ledger` and `contract_digest` name the exposures in a refusal."""
    n_replay, n_dev = terms.cohort.totals.replay_conv, terms.evaluation.dev.retention
    if n_replay > len(start_roles["A.replay"]) or n_dev > len(start_roles["dev.retention"]):
        raise ContinuedRefused(f"{start_dir}: A.replay has {len(start_roles['A.replay'])} and dev.retention "
                               f"{len(start_roles['dev.retention'])} records; contract fields 'cohort.totals.replay_conv' "
                               f"= {n_replay} and 'evaluation.dev.retention' = {n_dev} need at most that many")
    records["C.replay"] = [prep._labelled(x, "C.replay") for x in
                           prep._rank(start_roles["A.replay"], terms.data_seeds.selection, "C.replay")[:n_replay]]
    records["dev.retention"] = [prep._labelled(x, "dev.retention") for x in start_roles["dev.retention"][:n_dev]]
    against = dict(records) | {f"start:{role}": convs for role, convs in start_roles.items()}
    final_ret, final_json = prep._final_retention(terms, public, against, fits, exposed_convs, ledger,
                                                  contract_digest)
    final_report = FinalRetentionReport.from_json(final_json, "the final-retention report")
    start_final = {x.digest for x in start_roles["final.retention"]}
    records["final.retention"] = final_ret
    assert not {x.digest for x in final_ret} & start_final  # document rules already exclude every start record
    return final_report


def _schedule(terms: ContinuedContract, records: dict, contract_digest: str) -> Schedule:
    """Cohort C's updates: per update its share of C.new and C.replay, in a seeded, version-proof order."""
    sched_seed, k = terms.data_seeds.schedule, terms.cohort
    ranked = {role: prep._rank(records[role], sched_seed, f"schedule/C/{role}") for role in ("C.new", "C.replay")}
    steps = []
    for i in range(k.updates):
        chosen = [(role, conv) for role, part in (("C.new", "new"), ("C.replay", "replay_conv"))
                  for conv in ranked[role][i * getattr(k.per_update, part):(i + 1) * getattr(k.per_update, part)]]
        chosen = prep._rank(chosen, sched_seed, f"schedule/C/{i + 1}", key=lambda rc: [rc[0], rc[1].id])
        steps.append(tuple(ScheduledRecord(id=conv.id, role=role, replay=role == "C.replay", digest=conv.digest)
                           for role, conv in chosen))
    return Schedule(format=prep.SCHEDULE_FORMAT, contract_digest=contract_digest, seed=sched_seed,
                    cohorts=types.MappingProxyType({COHORT: CohortSchedule(updates=k.updates, reference="start",
                                                                           steps=tuple(steps))}))


def _locations(contract_path, seed_dir: Path, start_dir: Path, spj: PreparedJob, public: Path,
               ledger_info: LedgerSummary,
               start_evaluation, start_home) -> ContinuedLocations:
    """prepared.json's "locations": where each input was (not part of the job digest). The start endpoint's
    store is one of them: until 2026-12-03 its absolute path sat in `start.home`, inside the job digest,
    which then differed between checkouts (the same job prepared in two folders had two digests)."""
    return ContinuedLocations(contract=str(Path(contract_path).absolute()), seed=str(seed_dir.absolute()),
                              start_home=str(Path(start_home).absolute()), start_prepared=str(start_dir.absolute()),
                              replay=spj.locations.replay, public_source=str(public.absolute()),
                              ledger=ledger_info.path, ledger_head=prep.read_ledger_head(ledger_info),
                              start_evaluation=str(Path(start_evaluation).absolute()))


def prepare_continued(contract_path, start_prepared, start_home: str, start_root: str, start_evaluation,
                      seed_dir, public_source, out_dir, ledger=None) -> dict:
    """Prepare the continued cohort into `out_dir` (new or empty); see the module docstring."""
    contract = load_continued_contract(contract_path)
    terms = contract.terms
    start_dir, out = Path(start_prepared), Path(out_dir)
    prep._check_out_dir(out)
    spj, start_terms = _start_job(terms, start_dir)
    start = _start_endpoint(spj, start_dir, start_terms, terms, start_home, start_root, Path(start_evaluation))
    seed_dir, public = Path(seed_dir), Path(public_source)
    actual = parameter_digest(seed_dir)
    if actual != spj.seed.parameter_digest:
        raise ContinuedRefused(f"--seed {seed_dir}: parameter digest {actual}; {start_dir / 'prepared.json'} field "
                               f"'seed.parameter_digest' expects {spj.seed.parameter_digest}")
    prep._check_pinned(public, terms.evaluation.final.retention.sha256, "evaluation.final.retention.sha256")

    ledger, ledger_info, exposed_tasks, exposed_convs = prep.ledger_exposure(ledger, contract.digest, out)
    where = f"{start_dir / 'prepared.json'} field"
    start_roles = {role: read_jsonl(inside(start_dir, info.file, f"{where} 'roles.{role}.file'"), info.sha256)
                   for role, info in spj.roles.items()}
    tasks, final_skipped = _task_roles(terms, spj, start_roles, exposed_tasks)
    fits = prep._Fits(seed_dir, terms.training.max_tokens)
    records = {role: prep._task_records(ex, role) for role, ex in tasks.items()}
    prep.check_task_lengths(records, fits, ContinuedRefused)
    final_report = _conversation_roles(terms, start_dir, start_roles, records, public, fits, exposed_convs, ledger,
                                       contract.digest)
    schedule = _schedule(terms, records, contract.digest)

    with publish_dir(out) as staging:
        roles = {role: prep._role_summary(records[role], write_jsonl(staging / prep.role_file(role), records[role]),
                                          role) for role in ROLES}
        job = ContinuedPreparedJob(
            format=PREPARED_FORMAT,
            contract=PreparedContract(digest=contract.digest, kind=KIND, scale=terms.scale),
            start=start,
            seed=dataclasses.replace(spj.seed, parameter_digest=actual, _present=None),
            tokenizer=spj.tokenizer,
            roles=types.MappingProxyType(roles),
            schedule=FileDigest(file=prep.SCHEDULE_FILE, sha256=write_canonical_json(staging / prep.SCHEDULE_FILE,
                                                                                     schedule.to_json())),
            exclusions=ContinuedExclusions(final_retention=final_report,
                                           final_tasks=prep.final_tasks_report(final_skipped,
                                                                               terms.evaluation.final.tasks)),
            ledger=prep.ledger_record(ledger_info, exposed_tasks, exposed_convs),
            job_digest="",  # set below, from every field but the three that are not identity
            locations=_locations(contract_path, seed_dir, start_dir, spj, public, ledger_info, start_evaluation,
                                 start_home),
            created_at=datetime.now(UTC).isoformat(timespec="seconds"))
        job = dataclasses.replace(job, job_digest=job.identity_digest())
        prepared_sha = write_canonical_json(staging / prep.PREPARED_FILE, job.to_json())
        inputs = prep.seed_inputs(seed_dir)
        inputs |= {"public_source": public, "start_prepared": start_dir / prep.PREPARED_FILE,
                   "start_evaluation": Path(start_evaluation)}
        written = {role: prep.role_file(role) for role in ROLES} | {"schedule": prep.SCHEDULE_FILE,
                                                                    "prepared": prep.PREPARED_FILE}
        write_canonical_json(staging / prep.COMMITMENTS_FILE,
                             input_commitments(contract_path, contract.digest, inputs, staging, written))
    return PrepareSummary(out=str(out), job_digest=job.job_digest, prepared_sha256=prepared_sha,
                          ledger_sha256=ledger_info.sha256,  # the exposure ledger as read (None: absent)
                          contract_digest=contract.digest,
                          start=StartSummary(full_root=start.full_root, gates=start.gates,
                                             gates_passed=start.gates_passed, exploratory=start.exploratory),
                          roles={r: roles[r].count for r in ROLES}, final_retention_excluded=final_report.excluded,
                          final_tasks_excluded={"ledger": final_skipped}).to_json()
