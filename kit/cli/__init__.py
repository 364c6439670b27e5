"""`kit` command line. Each subcommand is a thin wrapper over a kit function. The parser (this module,
kit/cli/drivers.py, adaptive.py, study.py, replicates.py and args.py) imports nothing heavy; what a command
runs is a function of a module of kit/cli/handlers/, named by its leaf parser (`handler="module:function"`)
and imported by `main` only for the command being run (`command_handler`, the command line's one lazy
import), so `kit --help`, a usage error and `kit digest` start fast and import
on the GPU image as it is. The driver subcommands are registered from `kit.cli.drivers` (which never
imports this module).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import signal
import sys
import threading
from collections.abc import Callable

from kit import __version__, numerics
from kit.cli.args import (
    Dir,
    File,
    FileOrDir,
    OutDir,
    Parser,
    StatusDir,
    add_renamed,
    deprecated_scale,
    device,
    leaf_parsers,
    name_metavars,
    one_line,
    print_error,
    public_source_file,
    seed_dir,
    store_dir,
)
from kit.cli.drivers import DRIVER_COMMANDS
from kit.distributed.launch import WorkerFailure
from kit.environ import PROGRESS_ENV
from kit.interrupt import interruption, raise_on_signals
from kit.planner import MemoryModel
from kit.sizes import SizeError, parse_size

WORKFLOW = """\
workflow (README.md, "Command line", has every option; `kit COMMAND --help` for one):
  1. contract   pick or write one: contracts/adaptive-shards.tiny.json, contracts/shared-gradient.tiny.json
  2. prepare    kit seed build; kit adaptive prepare | kit study prepare   (commits every input by digest)
  3. train      kit adaptive train | kit study arm   (checkpoint stores; kit checkpoint verify|show|list)
  4. evaluate   kit adaptive evaluate, kit adaptive select | kit study evaluate   (dev, then final roles)
  5. gates      kit adaptive gates | kit study screens; kit report --out DIR   (verdicts and the HTML report)
  demo: `kit demo` (or `make demo`) runs all of it on the embedded tiny contracts in a few minutes."""


# The command line's one lazy import: each leaf parser names what runs it, `handler="module:function"`, a
# function of kit/cli/handlers/. A handler module imports its drivers (torch, transformers, the notebook
# runner) at module level, so importing them all would make `kit --help` import torch; `main` imports the
# module of the parsed command only, after the numeric profile is applied. tests/test_cli_walk.py checks
# that every leaf's handler is found this way.
def command_handler(args: argparse.Namespace) -> Callable[[argparse.Namespace], int | None]:
    """The function that runs the parsed leaf subcommand: the one its `handler` ("module:function") names."""
    module, _, function = args.handler.partition(":")
    return getattr(importlib.import_module(module), function)


# --- planner --------------------------------------------------------------------------------
def worker_spec(text: str) -> tuple[int, float]:
    """--worker SIZE[:SPEED] -> (bytes, relative speed); SIZE takes units (kit/sizes.py), a bare number is GiB."""
    size, _, speed = text.partition(":")
    try:
        memory = parse_size(size, bare_unit="GiB")
    except SizeError as e:
        raise argparse.ArgumentTypeError(f"{e} (a bare number is GiB), then optionally :SPEED") from None
    try:
        relative = float(speed) if speed else 1.0
    except ValueError:
        relative = float("nan")
    if not relative > 0 or relative == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: speed {speed!r} is not a positive number; expected "
                                         "SIZE[:SPEED], e.g. 80GiB or 80GiB:1.5 (SPEED relative, default 1)")
    if memory <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a memory size above 0, e.g. 80GiB")
    return memory, relative


def memory_model_json(text: str) -> dict:
    """--memory-model JSON -> a dict of MemoryModel fields, each name checked before the planner sees it."""
    fields = sorted(f.name for f in dataclasses.fields(MemoryModel))
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: not JSON ({e}); expected a JSON object of MemoryModel "
                                         "fields, e.g. '{\"reserve_bytes\": 0}'") from None
    if not isinstance(obj, dict):
        raise argparse.ArgumentTypeError(f"{text!r}: not a JSON object; expected one of MemoryModel fields")
    if unknown := sorted(set(obj) - set(fields)):
        raise argparse.ArgumentTypeError(f"unknown MemoryModel field(s) {', '.join(unknown)}; expected only "
                                         f"{', '.join(fields)} (docs/planner.md)")
    return obj


def _add_seed_commands(sub) -> None:
    """`kit seed build` (either scale) and `kit seed show`."""
    seed = sub.add_parser("seed", help="build or describe a seed").add_subparsers(dest="action", required=True)
    s = seed.add_parser("build", help="train the tiny seed (tokenizer + Llama) into DIR")
    s.add_argument("--out", required=True, type=OutDir("a folder for the seed"), help="the seed folder (created)")
    s.add_argument("--test-size", action="store_true", help="an even smaller seed, for tests")
    s.add_argument("--scale", choices=("tiny", "medium"), default="tiny", type=deprecated_scale("--scale"),
                   help="tiny: the embedded default's ~1.75M CPU seed; medium: the ~126M medium-scale seed (one "
                        "GPU); small: deprecated name of medium")
    s.add_argument("--device", default="cpu", type=device, help="medium only: cuda (the real build) or cpu (test sizes)")
    s.add_argument("--config", type=File("a JSON object of SmallSeedConfig fields, e.g. {\"max_updates\": 50}", fmt="json"),
                   help="medium only: JSON object of SmallSeedConfig fields to override")
    s.add_argument("--public-source", type=public_source_file(),
                   help="medium only: the pinned conversations (default data/alpaca_5000.json in the repository)")
    s.add_argument("--general-text", type=File("the pinned general text, data/python3.11-doc.jsonl.xz (data/SOURCE.md)", fmt="xz"),
                   help="medium only: the pinned general text (default data/python3.11-doc.jsonl.xz in the repository)")
    s.add_argument("--contracts", type=Dir("a folder of contracts whose dev/final task roles the seed must not train on"),
                   help="medium only: contracts whose dev/final task roles are excluded (default contracts/ in the repository)")
    s.add_argument("--no-progress", action="store_true", help="no progress bars (also KIT_PROGRESS=0)")
    s.set_defaults(handler="kit.cli.handlers.core:cmd_seed_build")
    s = seed.add_parser("show", help="digest, shape and a sample reply of a seed directory")
    s.add_argument("dir", type=seed_dir(), help="a seed folder (made by kit seed build)")
    s.set_defaults(handler="kit.cli.handlers.core:cmd_seed_show")


def _add_checkpoint_commands(sub) -> None:
    """`kit checkpoint verify|show|export|list|gc|replay` of a store, each run by its own handler."""
    ck = sub.add_parser("checkpoint", help="verify, show, export, list, gc or replay commits of a store")
    ck_sub = ck.add_subparsers(dest="action", required=True)
    core = "kit.cli.handlers.core"
    for action, handler, help_text in (
            ("verify", f"{core}:cmd_checkpoint_verify",
             "re-hash every object of a commit (default HEAD) and recompute both roots"),
            ("show", f"{core}:cmd_checkpoint_show", "print a commit's manifest (default HEAD)"),
            ("export", f"{core}:cmd_checkpoint_export",
             "write a Hugging Face directory of a commit and print its kit digest"),
            ("list", f"{core}:cmd_checkpoint_list",
             "every commit of the store, oldest first: root, step, time written; HEAD marked"),
            ("gc", f"{core}:cmd_checkpoint_gc", "remove temporary files (and, with --objects, unreferenced objects)")):
        s = ck_sub.add_parser(action, help=help_text)
        if action in ("verify", "show", "export"):
            s.add_argument("root", nargs="?", help="a commit: HEAD (default), its full root or a unique prefix of at least 8 hex")
        s.add_argument("--home", required=True, type=store_dir(), help="the checkpoint store folder")
        if action == "export":
            s.add_argument("--out", required=True, type=OutDir("a folder for the Hugging Face export"),
                           help="the Hugging Face folder to write (created)")
            s.add_argument("--tokenizer-from", type=seed_dir(), help="copy tokenizer files from this seed directory")
        if action == "gc":
            s.add_argument("--objects", action="store_true", help="also remove objects no commit names")
        s.set_defaults(handler=handler, root=getattr(s, "root", None))
    # replay needs an adaptive home's attempt records (kit/adaptive/replay.py), but it is a command of the store
    s = ck_sub.add_parser("replay", help="recompute the updates between a commit and its parent (or --from an "
                                         "ancestor) from the committed parent state and the prepared job")
    s.add_argument("root", help="the commit to recompute: its full root, a unique prefix of at least 8 hex, or HEAD")
    s.add_argument("--home", required=True, type=store_dir(), help="the checkpoint store holding ROOT")
    s.add_argument("--from", dest="from_root", metavar="ROOT", help="an earlier ancestor of ROOT (default: its parent)")
    s.add_argument("--workers", type=int, help="worker count (default: the committing attempt's)")
    s.set_defaults(handler="kit.cli.handlers.core:cmd_checkpoint_replay")


def _add_plan_command(sub) -> None:
    s = sub.add_parser("plan", help="capacity planner: contiguous block assignment minimising peak utilisation")
    s.add_argument("--config", required=True, type=FileOrDir("a model config.json or a folder holding one",
                                                              "config.json", "kit seed build"),
                   help="config.json or a directory holding one")
    s.add_argument("--worker", action="append", required=True, type=worker_spec, metavar="SIZE[:SPEED]",
                   help="a worker's memory with its unit, 80GiB (GiB = 2^30 bytes) or 80GB (GB = 10^9 bytes), also "
                        "B, kB, MB, TB, KiB, MiB, TiB (a bare number is GiB), then optionally :SPEED, its relative "
                        "speed (default 1); once per worker")
    s.add_argument("--batch", type=int, default=1, help="sequences per microbatch (default 1)")
    s.add_argument("--seq-len", type=int, default=2048, help="tokens per sequence (default 2048)")
    s.add_argument("--in-flight", type=int, default=1, help="microbatches in flight per worker (default 1)")
    s.add_argument("--grow", type=int, default=0, help="plan for this many appended blocks")
    s.add_argument("--memory-model", metavar="JSON", type=memory_model_json, help="JSON object of MemoryModel fields")
    s.add_argument("--json", action="store_true", help="print the whole plan record as JSON (default: a table)")
    s.set_defaults(handler="kit.cli.handlers.core:cmd_plan")


def _add_demo_command(sub) -> None:
    s = sub.add_parser("demo", help="the embedded default: both tiny contracts end to end")
    s.add_argument("--out", default="demo-out", type=OutDir("the demo's working folder"),
                   help="working directory for seeds, stores and runs")
    s.add_argument("--runs-dir", default="runs", type=OutDir("a runs folder"),
                   help="where the executed notebooks and run records go")
    s.add_argument("--reports-dir", default="reports", type=OutDir("a reports folder"),
                   help="where the rendered report goes")
    s.add_argument("--public-source", type=public_source_file(), help="local copy of the pinned public source (default data/alpaca_5000.json in the repository; its sha256 is checked before anything runs)")
    s.add_argument("--no-progress", action="store_true", help="no progress bars (also KIT_PROGRESS=0)")
    s.add_argument("--scale", choices=("tiny", "medium"), default="tiny", type=deprecated_scale("--scale"),
                   help="tiny (default): the embedded CPU demo; medium: the frozen medium contracts on a host "
                        "with two GPUs (docs/gpu-hosts.md, \"The medium campaign\"); run ids and the report "
                        "folder are named demo-* or medium-*")
    s.add_argument("--parts", default="adaptive,study",
                   help="comma-separated experiments to run after the seed: adaptive, study (default both)")
    s.add_argument("--no-report", action="store_true", help="do not render the report at the end")
    add_renamed(s, "--seed", "--seed-dir", dest="seed_dir", type=seed_dir(),
                help="inspect this seed, built before (e.g. by the medium pilot on the same host), instead of "
                     "building one; the contracts' digest pin still decides")
    s.set_defaults(handler="kit.cli.handlers.core:cmd_demo")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="kit", description="kit: a research toolkit for adaptive sharded learning and the "
                                       "shared-gradient study, with run records and reports.",
               epilog=WORKFLOW, formatter_class=argparse.RawDescriptionHelpFormatter)

    p.add_argument("--version", action="version", version=f"kit {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("digest", help="parameter digest of a Hugging Face directory (docs/formats/parameter-digest.md)")
    s.add_argument("dir", type=Dir("a Hugging Face model folder (*.safetensors)", "kit checkpoint export or kit seed build"),
                   help="a Hugging Face model folder (a seed or an exported checkpoint)")
    s.set_defaults(handler="kit.cli.handlers.core:cmd_digest")

    s = sub.add_parser("status", help="HEAD, commits, attempts, last loss and elapsed time of a checkpoint home, "
                                      "run folder, campaign folder or demo output")
    s.add_argument("path", type=StatusDir("a checkpoint home, a run folder, a study arm, a campaign folder or a "
                                          "demo output", "kit adaptive train or kit run"),
                   help="the folder to describe (an archived run is read in place: runs/<folder>/<run id>)")
    s.add_argument("--json", action="store_true", help="print the report as JSON (docs/formats/kit-status.md, \"kit status\")")
    s.set_defaults(handler="kit.cli.handlers.core:cmd_status")

    _add_seed_commands(sub)
    _add_checkpoint_commands(sub)
    _add_plan_command(sub)
    _add_demo_command(sub)

    for register in DRIVER_COMMANDS:
        register(sub)
    _name_command_groups(p)
    for words, leaf in leaf_parsers(p):
        leaf.set_defaults(_prog=leaf.prog)
        name_metavars(leaf)
    return p


def _name_command_groups(parser: argparse.ArgumentParser) -> None:
    """`kit adaptive` without a subcommand says "required: COMMAND", not the internal dest name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            action.metavar = "COMMAND"
            for sp in action.choices.values():
                _name_command_groups(sp)


def main(argv: list[str] | None = None) -> int:
    """Run one `kit` command; its exit status. A usage error or a bad path is one line on stderr and 2."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or a one-line error (2); in-process callers get the status
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    saved_progress = os.environ.get(PROGRESS_ENV)
    if getattr(args, "no_progress", False):  # for this command and every process it starts (put back below:
        os.environ[PROGRESS_ENV] = "0"       # an in-process caller, a test, keeps its bars)
    numerics.apply()  # every command computes under the kit's numeric profile (kit/numerics.py)

    handlers = _current_handlers()
    if threading.current_thread() is threading.main_thread():
        raise_on_signals()  # SIGINT/SIGTERM unwind the command: records are finalised, workers stopped
    try:
        return int(command_handler(args)(args) or 0)
    except (ValueError, OSError) as e:  # the kit's refusals (ValueError subclasses) and bad paths: no traceback
        return print_error(args._prog, e)
    except WorkerFailure as e:  # a worker's refusal or failure: one line, its traceback is in the worker's log
        print_error(args._prog, e)
        return e.exit_code
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: one line naming what to run next, 128 + signal
        name, code = interruption(e)
        then = getattr(e, "next_step", None) or "nothing was recorded as done: run the same command again"
        print(f"{args._prog}: interrupted by {name}; {one_line(then)}", file=sys.stderr)
        return code
    finally:
        for sig, handler in handlers.items():
            if handler is not None:  # None: a handler not installed from Python, which cannot be put back
                signal.signal(sig, handler)
        if saved_progress is None:
            os.environ.pop(PROGRESS_ENV, None)
        else:
            os.environ[PROGRESS_ENV] = saved_progress


def _current_handlers() -> dict:
    """SIGINT's and SIGTERM's handlers now, to put back after an in-process `main` call (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}


if __name__ == "__main__":
    raise SystemExit(main())
