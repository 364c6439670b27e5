"""`kit adaptive prepare | train | evaluate | select | gates | compare` and `kit continued prepare`: argument
parsing only; their handlers are in kit/cli/handlers/adaptive.py, and the work in kit/adaptive/ (prepare.py,
train.py, evaluation.py, selection.py, compare.py, continued.py). `kit checkpoint replay` is parsed with
the other checkpoint commands (kit/cli/__init__.py). kit/cli/drivers.py registers
them; the experiment imports nothing of the command line (tests/test_layers.py, PACKAGE_TIERS)."""

from __future__ import annotations

import argparse

from kit.cli.args import (
    File,
    HomeRoot,
    Named,
    OutDir,
    OutFile,
    contract_file,
    device,
    prepared_dir,
    public_source_file,
    seed_dir,
    store_dir,
)


def register(sub) -> None:
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
    s.set_defaults(handler="kit.cli.handlers.adaptive:cmd_train")

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
    s.set_defaults(handler="kit.cli.handlers.adaptive:cmd_evaluate")

    s = sp.add_parser("select", help="bind the prepared job and the candidate roots before final scoring")
    s.add_argument("--prepared", required=True, type=prepared_dir(), help="the prepared job")
    s.add_argument("--candidate", action="append", required=True, type=Named(HomeRoot()),
                   help="NAME=HOME:FULL_ROOT, once per candidate")
    s.add_argument("--dev-eval", action="append",
                   type=File("a development evaluation record (JSON)", "kit adaptive evaluate", fmt="json"),
                   help="development evaluations the decision read (recorded by sha256), once each")
    s.add_argument("--out", required=True, type=OutFile("a path for the selection record"),
                   help="the selection record to write (JSON)")
    s.set_defaults(handler="kit.cli.handlers.adaptive:cmd_select")

    s = sp.add_parser("compare", help="two committed runs side by side (migration vs uninterrupted, growth vs control)")
    s.add_argument("--a", required=True, type=HomeRoot(), help="HOME:FULL_ROOT of the first run")
    s.add_argument("--b", required=True, type=HomeRoot(), help="HOME:FULL_ROOT of the second run")
    s.add_argument("--cohort", choices=["A", "B"], default="A", help="the cohort both commits belong to (default A)")
    s.add_argument("--require-equal", action="store_true", help="exit 1 unless the learned-state roots are equal")
    s.add_argument("--out", required=True, type=OutFile("a path for the comparison record"),
                   help="the comparison record to write (JSON)")
    s.set_defaults(handler="kit.cli.handlers.adaptive:cmd_compare")

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
    s.set_defaults(handler="kit.cli.handlers.adaptive:cmd_gates")


def adaptive_subparsers(sub):
    """The `kit adaptive` subcommand group, created once and shared by every adaptive command."""
    parser = sub.choices.get("adaptive") or sub.add_parser("adaptive", help="the adaptive sharded learning experiment")
    action = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    return action or parser.add_subparsers(dest="adaptive_command", required=True)


def register_prepare(sub) -> None:
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
    s.set_defaults(handler="kit.cli.handlers.adaptive:cmd_prepare")


# --- kit continued prepare ---------------------------------------------------------------
def register_continued(sub) -> None:
    """`kit continued prepare` (the continued-learning contract)."""
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
    s.set_defaults(handler="kit.cli.handlers.adaptive:cmd_continued_prepare")
