"""`kit study ...` subcommands: prepare, arm, evaluate, screens, status.

`register(sub)` adds them to kit's argparse subparsers (kit/cli/drivers.py calls it); their handlers are in
kit/cli/handlers/study.py, imported only when a study command runs (each leaf names its `handler`), so `kit --help` stays
fast. The work is in kit/study/; the experiment imports nothing of the command line (tests/test_layers.py,
PACKAGE_TIERS).
"""

from __future__ import annotations

from kit.cli.args import (
    OutDir,
    OutFile,
    add_renamed,
    contract_file,
    device,
    public_source_file,
    seed_dir,
    study_dir,
)


def register(sub) -> None:
    study = sub.add_parser("study", help="the shared-gradient study: prepare, arms, evaluation, screens")
    actions = study.add_subparsers(dest="action", required=True)

    s = actions.add_parser("prepare", help="commit every input of a study by digest into STUDY/prepared/")
    s.add_argument("--contract", required=True, type=contract_file(("shared-gradient-study",)),
                   help="contracts/shared-gradient.json or .tiny.json")
    s.add_argument("--seed", required=True, type=seed_dir(), help="seed directory (Hugging Face Llama + tokenizer)")
    add_renamed(s, "--public-source", "--source", required=True, type=public_source_file(),
                help="local copy of the pinned public conversation source")
    add_renamed(s, "--out", "--study", required=True, type=OutDir("a study folder"),
                help="the study folder to create (the other study commands take it as --study)")
    s.add_argument("--ledger", default=None, type=OutFile("an exposure ledger file (JSONL)"),
                   help="exposure ledger read for final tasks and exposed probes (default: $KIT_LEDGER, inside "
                        "kit run the one beside runs/, else OUT/ledger/exposed.jsonl)")
    s.set_defaults(handler="kit.cli.handlers.study:cmd_prepare")

    s = actions.add_parser("arm", help="project, then run or refuse one arm; records its status and reason "
                                       "(local processes, or one torchrun process per host)")
    s.add_argument("name", choices=["single", "dense", "powersgd"],
                   help="the arm: single worker, dense gradient pair, or PowerSGD pair")
    s.add_argument("--study", required=True, type=study_dir(), help="the prepared study directory")
    s.add_argument("--seed", required=True, type=seed_dir(), help="the seed directory the study was prepared from")
    s.add_argument("--resume", metavar="ROOT", help="a commit in this arm's store to continue from: HEAD, its full root or a unique "
                        "prefix of at least 8 hex")
    s.add_argument("--until", type=int, help="stop after this update (default: the contract's last; earlier "
                                             "stops are recorded as partial)")
    s.add_argument("--seconds-per-update", type=float,
                   help="a measured per-update time for the projection (default: the contract's estimate)")
    s.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    s.add_argument("--compile", choices=["auto", "off"], default="auto", help="torch.compile blocks on CUDA")
    s.add_argument("--no-progress", action="store_true", help="no progress bars (also KIT_PROGRESS=0)")
    s.set_defaults(handler="kit.cli.handlers.study:cmd_arm")

    s = actions.add_parser("evaluate", help="freeze the candidates, then score final tasks and retention probes")
    s.add_argument("--study", required=True, type=study_dir(), help="the prepared study directory")
    s.add_argument("--seed", required=True, type=seed_dir(), help="the seed directory the study was prepared from")
    s.add_argument("--device", default="cpu", type=device, help="cpu (default) or cuda: where the final tasks are scored")
    s.set_defaults(handler="kit.cli.handlers.study:cmd_evaluate")

    s = actions.add_parser("screens", help="write STUDY/screens.json: every arm, every screen's inputs and verdict")
    s.add_argument("--study", required=True, type=study_dir(), help="the prepared study directory")
    s.set_defaults(handler="kit.cli.handlers.study:cmd_screens")

    s = actions.add_parser("status", help="every arm of the contract with its status and reason")
    s.add_argument("--study", required=True, type=study_dir(), help="the prepared study directory")
    s.set_defaults(handler="kit.cli.handlers.study:cmd_status")
