"""What `kit adaptive prepare|train|evaluate|select|gates|compare` and `kit continued prepare` run (their
parsers: kit/cli/adaptive.py); the work is in kit/adaptive/."""

from __future__ import annotations

import json
import os
from pathlib import Path

from kit.adaptive.compare import compare
from kit.adaptive.continued import KIND as CONTINUED
from kit.adaptive.continued import continued_gates, load_continued_contract, prepare_continued
from kit.adaptive.continued_schema import job_contract
from kit.adaptive.evaluation import EvaluateRequest, evaluate, gates
from kit.adaptive.formats import (
    CommitComparison,
    ContinuedPreparedJob,
    ContinuedStart,
    EvaluationRecord,
    SelectionRecord,
    gate_verdict,
    load_prepared,
)
from kit.adaptive.prepare import prepare
from kit.adaptive.schema import load_adaptive_contract
from kit.adaptive.selection import write_selection
from kit.adaptive.torchrun import train_torchrun
from kit.adaptive.train import CohortRequest, train
from kit.digest import canonical_json, load_json_strict, sha256_file, write_canonical_json
from kit.distributed.group import exit_torchrun_worker, under_torchrun
from kit.record import to_json
from kit.store.commits import resolve_root


def cmd_train(a) -> int:
    if a.resume:  # HEAD or a short root -> the full root, in the store that holds it
        a.resume = resolve_root(a.source_home or a.home, a.resume, "--resume")
    if a.reference:
        a.reference = resolve_root(a.reference_home or a.source_home or a.home, a.reference, "--reference")
    torchrun = under_torchrun()
    run = train_torchrun if torchrun else train
    commits = run(CohortRequest(prepared=a.prepared, seed_dir=a.seed, home=a.home, cohort=a.cohort, workers=a.workers,
                                resume=a.resume, reference=a.reference, source_home=a.source_home, until=a.until,
                                grow=a.grow, reference_home=a.reference_home))
    if os.environ.get("RANK", "0") == "0":  # under torchrun only rank 0 prints
        for c in commits:
            print(json.dumps(c, sort_keys=True), flush=True)
    if torchrun:  # records written, group left (train_torchrun's finally)
        exit_torchrun_worker(0)
    return 0


def cmd_evaluate(a) -> int:
    pj = load_prepared(a.prepared)
    terms = job_contract(pj)
    res = evaluate(EvaluateRequest(prepared=a.prepared, candidate=a.candidate, baseline=a.baseline, split=a.split,
                                   out=a.out, tokenizer_dir=a.tokenizer or pj.locations.seed,
                                   max_tokens=terms.training.max_tokens,
                                   max_new_tokens=terms.evaluation.max_new_tokens, selection=a.selection,
                                   device=a.device))
    record = EvaluationRecord.from_json(res, str(a.out))
    correct = sum(x.cand_correct for x in record.tasks), sum(x.base_correct for x in record.tasks)
    print(json.dumps({"out": a.out, "split": a.split, "tasks": len(record.tasks), "candidate_correct": correct[0],
                      "baseline_correct": correct[1]}, sort_keys=True))
    return 0


def cmd_select(a) -> int:
    cands = {}
    for spec in a.candidate:
        name, _, loc = spec.partition("=")
        home, _, root = loc.rpartition(":")
        if not name or not home or len(root) != 64:
            raise ValueError(f"--candidate {spec!r}: expected NAME=HOME:FULL_ROOT")
        cands[name] = {"home": home, "root": root}
    dev = {}
    for path in a.dev_eval or []:
        dev[Path(path).name] = sha256_file(path)
    rec = SelectionRecord.from_json(write_selection(a.prepared, cands, a.out, {"dev_evaluations": dev}), str(a.out))
    print(json.dumps({"out": a.out, "candidates": to_json(rec.candidates)}, sort_keys=True))
    return 0


def cmd_gates(a) -> int:
    continued = load_json_strict(a.contract).get("kind") == CONTINUED
    if continued:
        continued_contract = load_continued_contract(a.contract)
        digest = continued_contract.digest
    else:
        adaptive_contract = load_adaptive_contract(a.contract)
        digest = adaptive_contract.digest
    start: ContinuedStart | None = None  # continued learning: its start endpoint (exploratory where its gates failed)
    if continued:
        if not a.prepared:
            raise ValueError("kit adaptive gates: a continued-learning contract needs --prepared (its start record)")
        job = load_prepared(a.prepared)
        if not isinstance(job, ContinuedPreparedJob):
            raise ValueError(f"--prepared {a.prepared}: an adaptive job; a continued-learning contract needs the "
                             "continued job it prepared (its start record)")
        start = job.start
    comparisons, verdicts = {}, {}
    for spec in a.eval:
        name, _, path = spec.partition("=")
        ev = load_json_strict(path)
        verdict = (continued_gates(ev, continued_contract.terms, start.exploratory) if start is not None
                   else gates(ev, adaptive_contract.terms))
        comparisons[name] = {"evaluation": path, **verdict}
        verdicts[name] = gate_verdict(verdict, path)
    all_passed = all(v.passed for v in verdicts.values())
    out = {"contract_digest": digest, "comparisons": comparisons, "all_passed": all_passed}
    if start is not None:  # canonical JSON sorts the keys: the bytes are those of before
        out = {**out, "start": {"full_root": start.full_root, "gates": dict(start.gates),
                                "gates_passed": start.gates_passed, "exploratory": start.exploratory}}
    write_canonical_json(a.out, out)
    print(json.dumps({n: {"passed": v.passed, "gates": {g.name: g.passed for g in v.gates}}
                      for n, v in verdicts.items()}, sort_keys=True))
    return 0


def cmd_compare(a) -> int:
    ah, _, ar = a.a.rpartition(":")
    bh, _, br = a.b.rpartition(":")
    res = compare(ah, ar, bh, br, a.cohort)
    write_canonical_json(a.out, res)
    result = CommitComparison.from_json(res, str(a.out))
    print(json.dumps({"learned_state_equal": result.learned_state_equal,
                      "parameters_differing": result.parameters_differing,
                      "max_abs_parameter_difference": result.max_abs_parameter_difference}, sort_keys=True))
    if a.require_equal and not result.learned_state_equal:
        return 1
    return 0


def cmd_prepare(a) -> int:
    summary = prepare(a.contract, a.seed, a.replay, a.dev_retention, a.public_source, a.out, a.ledger)
    print(canonical_json(summary).decode())
    return 0


def cmd_continued_prepare(a) -> int:
    home, _, root = a.start.rpartition(":")
    summary = prepare_continued(a.contract, a.start_prepared, home, root, a.start_evaluation, a.seed,
                                a.public_source, a.out, a.ledger)
    print(canonical_json(summary).decode())
    return 0
