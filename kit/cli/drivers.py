"""Driver subcommands of `kit`, registered into kit/cli/__init__.py's parser.

A flat list of small `register_*` functions, listed in `DRIVER_COMMANDS` at the end; each adds
one subparser that names its handler (`handler="module:function"`), a function of kit/cli/handlers/ that
`kit.cli.main` imports only when the command runs (kit.cli.command_handler), so `kit --help` stays fast and needs neither papermill nor
torch. Add new driver commands the same way, and list them in `DRIVER_COMMANDS`.
"""

from __future__ import annotations

from kit.cli import adaptive, replicates, study
from kit.cli.args import Dir, EvidenceDir, File, OutDir, OutFile, RunsSelection, add_renamed


# --- kit run --------------------------------------------------------------------------------
def register_run(sub) -> None:
    s = sub.add_parser("run", help="execute a notebook with papermill into runs/<run-id>/ and write run.json")
    s.add_argument("notebook", type=File("a Jupyter notebook (.ipynb)", None, fmt="json"),
                   help="the notebook (.ipynb) to execute, e.g. notebooks/90_inspect_failed_arm.ipynb")
    s.add_argument("-p", "--parameter", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help="a parameter of the notebook's `parameters` cell; VALUE is read as JSON or a Python "
                        "literal, else as a string (verbatim when the default is a string)")
    s.add_argument("--run-id", metavar="ID", help="default: <notebook stem>-<UTC time>")
    s.add_argument("--runs-dir", default="runs", type=OutDir("a runs folder"),
                   help="where the run's folder (executed notebook, run.json, kernel.log) goes (default runs); "
                        "for a notebook with RUN_ID and RUNS_DIR parameters (notebooks/90_inspect_failed_arm.ipynb) "
                        "also the runs folder it inspects, unless -p RUNS_DIR names another")
    s.add_argument("--contract-digest", metavar="SHA256", help="sha256 of the contract this run is bound to")
    s.add_argument("--input-digest", action="append", metavar="NAME=SHA256", help="a named input's digest")
    s.add_argument("--kernel", default="python3", metavar="NAME", help="Jupyter kernel name")
    s.add_argument("--log-output", action="store_true", help="stream the notebook's output to stderr")
    s.add_argument("--no-progress", action="store_true", help="no progress bars (also KIT_PROGRESS=0)")
    s.set_defaults(handler="kit.cli.handlers.evidence:cmd_run")



# --- kit batch ------------------------------------------------------------------------------
def register_batch(sub) -> None:
    s = sub.add_parser("batch", help="run a plan of notebook executions in order; skips completed run ids")
    s.add_argument("plan", type=File("a batch plan file (JSON or YAML)", None, fmt="json-if-suffix"),
                   help='JSON (or YAML) list of {"notebook", "run_id", "parameters", "extra"}')
    s.add_argument("--runs-dir", default="runs", type=OutDir("a runs folder"),
                   help="where each arm's run folder goes (default runs)")
    s.add_argument("--kernel", default="python3", metavar="NAME", help="Jupyter kernel name")
    s.add_argument("--log-output", action="store_true", help="stream the notebooks' output to stderr")
    s.add_argument("--no-progress", action="store_true", help="no progress bars (also KIT_PROGRESS=0)")
    s.set_defaults(handler="kit.cli.handlers.evidence:cmd_batch")



# --- kit verify-evidence --------------------------------------------------------------------
def register_verify_evidence(sub) -> None:
    s = sub.add_parser("verify-evidence", help="check run directories against their run.json")
    s.add_argument("run_dirs", nargs="*", type=EvidenceDir("a run folder (with run.json) or a runs folder", "kit run"),
                   help="run directories, or a runs directory for all of its runs (default runs)")
    s.add_argument("--json", action="store_true", help="print the check reports as JSON")
    s.add_argument("--replay", action="store_true",
                   help="re-execute each completed CPU run (and the runs it depends on) from its recorded parameters "
                        "and compare its digests and roots with the committed ones (kit/evidence/replay.py)")
    s.add_argument("--work", type=OutDir("a work folder for the replay"), help="with --replay: the folder for the replayed runs and their data (default: a new "
                                  "temporary folder)")
    s.add_argument("--at-recorded-commit", action="store_true",
                   help="with --replay: replay each run with the kit and notebooks of the commit its run.json names "
                        "(extracted from this clone into the work folder; kit/evidence/replay_at_commit.py)")
    s.add_argument("--root", metavar="SHA256",
                   help="also fail unless the evidence root of the runs folder and its ledger (`kit evidence-root`) "
                        "is SHA256")
    s.add_argument("--at", metavar="COMMIT",
                   help="also fail where the evidence differs from COMMIT's (files named) or COMMIT's stated root "
                        "does not recompute; a tag signed with git's SSH signing is verified")
    s.add_argument("--allowed-signers", type=File("an ssh-keygen allowed-signers file", fmt="allowed-signers"),
                   help="with --at TAG: the ssh-keygen allowed-signers file (default: git's gpg.ssh.allowedSignersFile)")
    s.add_argument("--no-progress", action="store_true", help="no progress bars (also KIT_PROGRESS=0)")
    s.set_defaults(handler="kit.cli.handlers.evidence:cmd_verify_evidence")


# --- kit evidence-root ----------------------------------------------------------------------
def register_evidence_root(sub) -> None:
    s = sub.add_parser("evidence-root", help="print the Merkle root of every evidence file (runs folder and ledger)")
    s.add_argument("runs_dir", nargs="?", default="runs", metavar="RUNS", type=Dir("a runs folder", "kit run"),
                   help="the runs folder (default runs); its ledger is the folder `ledger` beside it")
    s.add_argument("--ledger-dir", type=Dir("the exposure ledger's folder"),
                   help="the exposure ledger's folder (default RUNS/../ledger)")
    s.set_defaults(handler="kit.cli.handlers.evidence:cmd_evidence_root")



# --- kit report -----------------------------------------------------------------------------
def register_report(sub) -> None:
    s = sub.add_parser("report", help="render an offline HTML report of every run into OUT/index.html")
    add_renamed(s, "--runs-dir", "--runs", default="runs",
                type=Dir("a runs folder", "kit run or kit demo", missing="runs directory not found"),
                help="the runs folder to report on (default runs)")
    s.add_argument("--out", required=True, type=OutDir("a report folder"),
                   help="report directory, e.g. reports/<report-id>/")
    s.add_argument("--title", metavar="TEXT", help="the report's title (default: one naming the runs directory)")
    s.add_argument("--select", metavar="GLOB", help="only the runs whose id matches, e.g. 'medium-*' (default all)")
    s.add_argument("--kernel", default="python3", metavar="NAME", help="Jupyter kernel name")
    s.set_defaults(handler="kit.cli.handlers.evidence:cmd_report")



# --- kit results -----------------------------------------------------------------------------
def register_results(sub) -> None:
    s = sub.add_parser("results", help="write every recorded task accuracy as one tidy table (kit.results)")
    s.add_argument("runs_dir", metavar="RUNS", type=RunsSelection("a runs folder or a selection DIR/GLOB", "kit run"),
                   help="the runs folder (or a selection DIR/GLOB quoted, e.g. 'runs/medium-*')")
    s.add_argument("--out", required=True, metavar="FILE", type=OutFile("a .csv or .parquet file to write"),
                   help="FILE.csv or FILE.parquet")
    s.set_defaults(handler="kit.cli.handlers.evidence:cmd_results")


# --- kit adaptive ... ------------------------------------------------------------------------
def register_adaptive(sub) -> None:
    adaptive.register_prepare(sub)
    adaptive.register(sub)
    adaptive.register_continued(sub)  # `kit continued prepare` (the continued-learning contract)



# --- kit study ... ---------------------------------------------------------------------------
def register_study(sub) -> None:
    study.register(sub)


def register_replicates(sub) -> None:
    replicates.register(sub)


# --- kit archive-evidence -------------------------------------------------------------------
def register_archive_evidence(sub) -> None:
    s = sub.add_parser("archive-evidence", help="move folders of runs/ that are no longer current into a "
                                                "deterministic tar.xz under runs/archive/ (docs/formats/archived-evidence.md)")
    s.add_argument("folders", nargs="+", type=Dir("a folder directly under a runs directory"),
                   help="superseded, campaign, pilot or probe folders of one runs directory")
    s.add_argument("--why", required=True, metavar="TEXT", help="why they are archived (kept in the index)")
    s.set_defaults(handler="kit.cli.handlers.evidence:cmd_archive_evidence")


DRIVER_COMMANDS = [register_run, register_batch, register_verify_evidence, register_evidence_root, register_report,
                   register_results, register_adaptive, register_study, register_archive_evidence, register_replicates]
