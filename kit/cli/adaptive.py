"""`kit adaptive prepare | train | evaluate | select | gates | compare`, `kit continued prepare` and
`kit checkpoint replay`: argument parsing only; the work is in kit/adaptive/ (prepare.py, train.py,
evaluation.py, selection.py, compare.py, continued.py, replay.py). kit/cli/drivers.py registers them; the
experiment imports nothing of the command line (tests/test_layers.py, PACKAGE_TIERS)."""

from __future__ import annotations

import json
from pathlib import Path


def cmd_train(a) -> int:
    import os

    from kit.adaptive.torchrun import train_torchrun
    from kit.adaptive.train import CohortRequest, train
    from kit.distributed.group import exit_torchrun_worker, under_torchrun
    from kit.store.commits import resolve_root

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
    from kit.adaptive.continued_schema import job_contract
    from kit.adaptive.evaluation import evaluate
    from kit.digest import load_json_strict

    pj = load_json_strict(Path(a.prepared) / "prepared.json")
    terms = job_contract(pj)
    res = evaluate(a.prepared, a.candidate, a.baseline, a.split, a.out, a.tokenizer or pj["locations"]["seed"],
                   terms.training.max_tokens, terms.evaluation.max_new_tokens, a.selection, device=a.device)
    correct = sum(x["cand_correct"] for x in res["tasks"]), sum(x["base_correct"] for x in res["tasks"])
    print(json.dumps({"out": a.out, "split": a.split, "tasks": len(res["tasks"]), "candidate_correct": correct[0],
                      "baseline_correct": correct[1]}, sort_keys=True))
    return 0


def cmd_select(a) -> int:
    from kit.adaptive.selection import write_selection

    cands = {}
    for spec in a.candidate:
        name, _, loc = spec.partition("=")
        home, _, root = loc.rpartition(":")
        if not name or not home or len(root) != 64:
            raise ValueError(f"--candidate {spec!r}: expected NAME=HOME:FULL_ROOT")
        cands[name] = {"home": home, "root": root}
    dev = {}
    for path in a.dev_eval or []:
        from kit.digest import sha256_file

        dev[Path(path).name] = sha256_file(path)
    rec = write_selection(a.prepared, cands, a.out, {"dev_evaluations": dev})
    print(json.dumps({"out": a.out, "candidates": rec["candidates"]}, sort_keys=True))
    return 0


def cmd_gates(a) -> int:
    from kit.adaptive.continued import KIND as CONTINUED
    from kit.adaptive.continued import continued_gates, load_continued_contract
    from kit.adaptive.evaluation import gates
    from kit.adaptive.schema import load_adaptive_contract
    from kit.digest import load_json_strict, write_canonical_json

    continued = load_json_strict(a.contract).get("kind") == CONTINUED
    contract = (load_continued_contract if continued else load_adaptive_contract)(a.contract)
    out = {"contract_digest": contract.digest, "comparisons": {}}
    if continued:  # the report says whether the start endpoint's gates passed (exploratory otherwise)
        if not a.prepared:
            raise ValueError("kit adaptive gates: a continued-learning contract needs --prepared (its start record)")
        start = load_json_strict(Path(a.prepared) / "prepared.json")["start"]
        out["start"] = {k: start[k] for k in ("full_root", "gates", "gates_passed", "exploratory")}
    for spec in a.eval:
        name, _, path = spec.partition("=")
        ev = load_json_strict(path)
        verdict = (continued_gates(ev, contract.terms, out["start"]["exploratory"]) if continued
                   else gates(ev, contract.terms))
        out["comparisons"][name] = {"evaluation": path, **verdict}
    out["all_passed"] = all(v["passed"] for v in out["comparisons"].values())
    write_canonical_json(a.out, out)
    print(json.dumps({n: {"passed": v["passed"], "gates": {g["name"]: g["passed"] for g in v["gates"]}}
                      for n, v in out["comparisons"].items()}, sort_keys=True))
    return 0


def cmd_compare(a) -> int:
    from kit.adaptive.compare import compare
    from kit.digest import write_canonical_json

    ah, _, ar = a.a.rpartition(":")
    bh, _, br = a.b.rpartition(":")
    res = compare(ah, ar, bh, br, a.cohort)
    write_canonical_json(a.out, res)
    print(json.dumps({k: res[k] for k in ("learned_state_equal", "parameters_differing",
                                          "max_abs_parameter_difference")}, sort_keys=True))
    if a.require_equal and not res["learned_state_equal"]:
        return 1
    return 0


def register(sub) -> None:
    from kit.args import (
        File,
        HomeRoot,
        Named,
        OutDir,
        OutFile,
        contract_file,
        device,
        prepared_dir,
        seed_dir,
        store_dir,
    )

    sp = adaptive_subparsers(sub)
    s = sp.add_parser("train", help="one cohort arm on owned blocks only (local launcher or torchrun)")
    s.add_argument("--prepared", required=True, type=prepared_dir(),
                   help="the prepared job (made by kit adaptive prepare or kit continued prepare)")
    s.add_argument("--seed", required=True, type=seed_dir(), help="the seed folder the job was prepared from")
    s.add_argument("--home", required=True, type=OutDir("a checkpoint store folder"),
                   help="this arm's checkpoint store (created; a fresh one for a new cohort)")
    s.add_argument("--cohort", choices=["A", "B", "C"], default="A",
                   help="A: new data from the seed (default); B: from the A endpoint; C: a continued-learning job")
    s.add_argument("--workers", type=int, default=2, help="worker processes, one pipeline stage each (default 2)")
    s.add_argument("--resume", metavar="ROOT", help="a complete commit to continue from: HEAD, its full root or a unique prefix of "
                        "at least 8 hex (in --source-home, else --home)")
    s.add_argument("--reference", metavar="ROOT",
                   help="cohort B: the committed phase-A endpoint (full root, unique prefix or HEAD)")
    s.add_argument("--reference-home", type=store_dir(), help="store holding --reference (default: --source-home or --home)")
    s.add_argument("--source-home", type=store_dir(), help="migrate: fetch assigned objects of --resume from this store")
    s.add_argument("--until", type=int, help="stop after this cohort step (default: the contract's endpoint)")
    s.add_argument("--grow", action="store_true", help="append the contract's blocks before training")
    s.add_argument("--no-progress", action="store_true", help="no progress bars (also KIT_PROGRESS=0)")
    s.set_defaults(fn=cmd_train)

    s = sp.add_parser("evaluate", help="score a candidate against its baseline (dev roles by default)")
    s.add_argument("--prepared", required=True, type=prepared_dir(), help="the prepared job")
    s.add_argument("--candidate", required=True, type=HomeRoot(seed_ok=True), help="HOME:FULL_ROOT or seed:DIR")
    s.add_argument("--baseline", required=True, type=HomeRoot(seed_ok=True), help="HOME:FULL_ROOT or seed:DIR")
    s.add_argument("--split", choices=["dev", "final"], default="dev",
                   help="dev: development roles (default); final: final roles, which need --selection")
    s.add_argument("--selection", type=File("a selection record (JSON)", "kit adaptive select", fmt="json"),
                   help="final roles: the selection record")
    s.add_argument("--tokenizer", type=seed_dir(), help="seed directory with the tokenizer (default: the prepared seed)")
    s.add_argument("--device", default="cpu", type=device, help="cpu (default) or cuda: where NLL and greedy answers are scored")
    s.add_argument("--out", required=True, type=OutFile("a path for the evaluation record"),
                   help="the evaluation record to write (JSON)")
    s.set_defaults(fn=cmd_evaluate)

    s = sp.add_parser("select", help="bind the prepared job and the candidate roots before final scoring")
    s.add_argument("--prepared", required=True, type=prepared_dir(), help="the prepared job")
    s.add_argument("--candidate", action="append", required=True, type=Named(HomeRoot()),
                   help="NAME=HOME:FULL_ROOT, once per candidate")
    s.add_argument("--dev-eval", action="append",
                   type=File("a development evaluation record (JSON)", "kit adaptive evaluate", fmt="json"),
                   help="development evaluations the decision read (recorded by sha256), once each")
    s.add_argument("--out", required=True, type=OutFile("a path for the selection record"),
                   help="the selection record to write (JSON)")
    s.set_defaults(fn=cmd_select)

    s = sp.add_parser("compare", help="two committed runs side by side (migration vs uninterrupted, growth vs control)")
    s.add_argument("--a", required=True, type=HomeRoot(), help="HOME:FULL_ROOT of the first run")
    s.add_argument("--b", required=True, type=HomeRoot(), help="HOME:FULL_ROOT of the second run")
    s.add_argument("--cohort", choices=["A", "B"], default="A", help="the cohort both commits belong to (default A)")
    s.add_argument("--require-equal", action="store_true", help="exit 1 unless the learned-state roots are equal")
    s.add_argument("--out", required=True, type=OutFile("a path for the comparison record"),
                   help="the comparison record to write (JSON)")
    s.set_defaults(fn=cmd_compare)

    s = sp.add_parser("gates", help="the seed's gates on final evaluations")
    s.add_argument("--contract", required=True, type=contract_file(("adaptive-shards", "continued-learning")),
                   help="the contract whose gates apply (adaptive or continued-learning)")
    s.add_argument("--eval", action="append", required=True,
                   type=Named(File("a final evaluation record (JSON)", "kit adaptive evaluate --split final", fmt="json")),
                   help="NAME=final evaluation JSON, once per comparison")
    s.add_argument("--prepared", type=prepared_dir(),
                   help="continued-learning: the prepared job (its start endpoint and gates)")
    s.add_argument("--out", required=True, type=OutFile("a path for the gates record"),
                   help="the gates record to write (JSON)")
    s.set_defaults(fn=cmd_gates)


def adaptive_subparsers(sub):
    """The `kit adaptive` subcommand group, created once and shared by every adaptive command."""
    import argparse

    parser = sub.choices.get("adaptive") or sub.add_parser("adaptive", help="the adaptive sharded learning experiment")
    action = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    return action or parser.add_subparsers(dest="adaptive_command", required=True)


def cmd_prepare(a) -> int:
    from kit.adaptive.prepare import prepare
    from kit.digest import canonical_json

    summary = prepare(a.contract, a.seed, a.replay, a.dev_retention, a.public_source, a.out, a.ledger)
    print(canonical_json(summary).decode())
    return 0


def register_prepare(sub) -> None:
    from kit.args import File, OutDir, OutFile, contract_file, public_source_file, seed_dir

    s = adaptive_subparsers(sub).add_parser(
        "prepare", help="write role files, schedule, ownership manifests, prepared.json and input commitments")
    s.add_argument("--contract", required=True, type=contract_file(),
                   help="contracts/adaptive-shards.json or .tiny.json")
    s.add_argument("--seed", required=True, type=seed_dir(),
                   help="seed directory (config.json, *.safetensors, tokenizer files)")
    s.add_argument("--replay", required=True, type=File("the seed's trained_conversations.jsonl", "kit seed build",
                                                        fmt="jsonl"), help="the seed's trained_conversations.jsonl")
    s.add_argument("--dev-retention", default=None,
                   type=File("development-retention records (JSONL)", None, fmt="jsonl"),
                   help="exposed development-retention records (JSONL); default: drawn from --replay, not replayed")
    s.add_argument("--public-source", required=True, type=public_source_file(),
                   help="local copy of the pinned public source (alpaca_5000.json)")
    s.add_argument("--out", required=True, type=OutDir("a new or empty folder for the prepared job"),
                   help="a new or empty directory for the prepared job")
    s.add_argument("--ledger", default=None, type=OutFile("an exposure ledger file (JSONL)"),
                   help="exposure ledger whose finals and probes are excluded (default: $KIT_LEDGER, inside kit run the one "
                        "beside runs/, else OUT/ledger/exposed.jsonl)")
    s.set_defaults(fn=cmd_prepare)


# --- kit continued prepare ---------------------------------------------------------------
def cmd_continued_prepare(a) -> int:
    from kit.adaptive.continued import prepare_continued
    from kit.digest import canonical_json

    home, _, root = a.start.rpartition(":")
    summary = prepare_continued(a.contract, a.start_prepared, home, root, a.start_evaluation, a.seed,
                                a.public_source, a.out, a.ledger)
    print(canonical_json(summary).decode())
    return 0


def register_continued(sub) -> None:
    """`kit continued prepare` (the continued-learning contract)."""
    from kit.args import (
        File,
        HomeRoot,
        OutDir,
        OutFile,
        contract_file,
        prepared_dir,
        public_source_file,
        seed_dir,
    )

    p = sub.add_parser("continued", help="the continued-learning contract (prepare; then kit adaptive train --cohort C)")
    sp = p.add_subparsers(dest="continued_command", required=True)
    s = sp.add_parser("prepare", help="roles, schedule and commitments of the continued cohort from a passing A endpoint")
    s.add_argument("--contract", required=True, type=contract_file(("continued-learning",)),
                   help="contracts/continued-learning.json or .tiny.json")
    s.add_argument("--start-prepared", required=True, type=prepared_dir(), help="the adaptive job's prepared directory")
    s.add_argument("--start", required=True, type=HomeRoot(), help="HOME:FULL_ROOT of the selected phase-A endpoint")
    s.add_argument("--start-evaluation", required=True,
                   type=File("a final evaluation record (JSON)", "kit adaptive evaluate --split final", fmt="json"),
                   help="its final evaluation record (kit adaptive evaluate)")
    s.add_argument("--seed", required=True, type=seed_dir(), help="the seed directory (tokenizer; the start job's seed)")
    s.add_argument("--public-source", required=True, type=public_source_file(),
                   help="local copy of the pinned public source")
    s.add_argument("--out", required=True, type=OutDir("a new or empty folder for the prepared job"),
                   help="a new or empty directory")
    s.add_argument("--ledger", default=None, type=OutFile("an exposure ledger file (JSONL)"), help="exposure ledger (default: $KIT_LEDGER, inside kit run the one beside runs/, else "
                   "OUT/ledger/exposed.jsonl)")
    s.set_defaults(fn=cmd_continued_prepare)


# --- kit checkpoint replay ---------------------------------------------------------------
def register_replay(sub) -> None:
    """`kit checkpoint replay` inside the existing `kit checkpoint` group."""
    import argparse

    ck = sub.choices["checkpoint"]
    group = next(x for x in ck._actions if isinstance(x, argparse._SubParsersAction))
    s = group.add_parser("replay", help="recompute the updates between a commit and its parent (or --from an "
                                        "ancestor) from the committed parent state and the prepared job")
    from kit.args import store_dir

    s.add_argument("root", help="the commit to recompute: its full root, a unique prefix of at least 8 hex, or HEAD")
    s.add_argument("--home", required=True, type=store_dir(), help="the checkpoint store holding ROOT")
    s.add_argument("--from", dest="from_root", metavar="ROOT", help="an earlier ancestor of ROOT (default: its parent)")
    s.add_argument("--workers", type=int, help="worker count (default: the committing attempt's)")
    s.set_defaults(fn=cmd_replay)


def cmd_replay(a) -> int:
    from kit.adaptive.replay import replay
    from kit.store.commits import resolve_root

    rec = replay(a.home, resolve_root(a.home, a.root), a.from_root and resolve_root(a.home, a.from_root, "--from"),
                 a.workers)
    print(json.dumps({k: rec[k] for k in ("root", "from", "cohort", "cohort_steps", "equal",
                                          "max_abs_parameter_difference")}, sort_keys=True))
    return 0 if rec["equal"] or rec["device"] != "cpu" else 1
