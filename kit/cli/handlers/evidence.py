"""What `kit run`, `kit batch`, `kit verify-evidence`, `kit report`, `kit results` and `kit archive-evidence`
run (their parsers: kit/cli/drivers.py)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from kit.evidence import archive, run_record
from kit.evidence.anchor import at_report, root_report
from kit.evidence.archive import read_index, resolve
from kit.evidence.archiving import archive_folders
from kit.evidence.chain import Evidence, ledger_report
from kit.evidence.checks import read_report
from kit.evidence.environment import evidence_base
from kit.evidence.parameters import notebook_defaults, parse_cli_parameters
from kit.evidence.replay import replay_results
from kit.evidence.replay_at_commit import replay_at_recorded_commits
from kit.evidence.replicate_design import design_reports
from kit.evidence.report.page import render_report
from kit.evidence.report.selection import Selection
from kit.evidence.results import write_results
from kit.evidence.root import evidence_root
from kit.evidence.runner import batch_exit_status, run_batch, run_notebook
from kit.evidence.runtime import KERNEL_LOG_NAME, REPORT_MODULES, ensure_runtime, quiet_kernels
from kit.evidence.tree import tree_report
from kit.evidence.verify import expand_run_dirs, verify_evidence


def cmd_run(a) -> int:
    params = parse_cli_parameters(a.notebook, [tuple(p) for p in a.parameter or []])
    params = _inspection_parameters(Path(a.notebook), params, [p[0] for p in a.parameter or []], Path(a.runs_dir))
    ensure_runtime()
    extra = {"contract_digest": a.contract_digest, "input_digests": dict(_name_value(s) for s in a.input_digest or [])}
    record = run_notebook(Path(a.notebook), params, a.run_id, Path(a.runs_dir), extra, kernel_name=a.kernel,
                          log_output=a.log_output)
    run_dir = Path(a.runs_dir) / record.run_id
    print(f"{run_dir / 'run.json'}: {record.status}" + (f" ({record.reason})" if record.reason else ""))
    return batch_exit_status([(record.run_id, record.status)])


def _inspection_parameters(notebook: Path, params: dict, given: list[str], runs_dir: Path) -> dict:
    """A notebook with RUN_ID and RUNS_DIR parameters (notebooks/90_inspect_failed_arm.ipynb) reads a run of
    the folder RUNS_DIR (-p RUNS_DIR, default --runs-dir) and records into --runs-dir, so committed evidence
    can be inspected without writing beside it. RUN_ID must name a run there, checked before anything is
    written (no failed record)."""
    defaults = notebook_defaults(notebook)
    if not {"RUN_ID", "RUNS_DIR"} <= defaults.keys():
        return params
    read_dir = Path(params["RUNS_DIR"]) if "RUNS_DIR" in given else runs_dir
    run_id = params.get("RUN_ID") or ""
    if not run_id:
        raise ValueError(f"{notebook}: name the run to inspect: -p RUN_ID <run id> (a folder of {read_dir})")
    # an archived run (runs/archive/, docs/formats/archived-evidence.md) is read where inspect_run reads it
    if not (resolve(read_dir / run_id) / "run.json").is_file():
        known = sorted(p.parent.name for p in read_dir.glob("*/run.json")) if read_dir.is_dir() else []
        hint = (f"runs there: {', '.join(known[:5])}" + (", ..." if len(known) > 5 else "")) if known else \
            "it holds no runs"
        members = archived_members(read_dir, run_id)
        if members:
            hint = f"archived as {', '.join(members[:3])}: -p RUN_ID {members[0]}"
        raise ValueError(f"{read_dir / run_id}: no such run (expected a run folder with run.json, made by `kit run` "
                         f"or `kit demo`; {hint}; -p RUNS_DIR names the folder to read); nothing was written")
    return {**params, "RUNS_DIR": str(read_dir)}


def archived_members(runs_dir: Path, run_id: str) -> list[str]:
    """Where the archive index of `runs_dir` lists a run `run_id` that is not a folder directly under it
    (`FOLDER/runs/RUN_ID`, a campaign's): those members, for the one-line refusal."""
    try:
        index = read_index(runs_dir)
    except ValueError:
        return []
    return sorted(r.member for a in (index.archives if index is not None else ()) for r in a.runs
                  if run_id in (r.run_id, Path(r.member).name) and r.member != run_id)


def _name_value(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise ValueError(f"--input-digest {text!r}: expected NAME=SHA256")
    return name, value


def cmd_batch(a) -> int:
    outcome = run_batch(a.plan, Path(a.runs_dir), kernel_name=a.kernel, log_output=a.log_output)
    failed = [run_id for run_id, status in outcome if status == "failed"]
    print(f"{len(outcome)} arm(s): " + ", ".join(f"{r} {s}" for r, s in outcome))
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return batch_exit_status(outcome)


def cmd_verify_evidence(a) -> int:
    if not a.run_dirs:  # `kit verify-evidence --at HEAD --root ...`: the repository's runs folder
        if not Path("runs").is_dir():
            raise ValueError("runs: runs directory not found; name the run or runs folders to verify")
        a.run_dirs = ["runs"]
    if a.at_recorded_commit and not a.replay:
        raise ValueError("--at-recorded-commit replays: give it with --replay")
    if a.replay:
        return _replay(expand_run_dirs(a.run_dirs), a)
    run_dirs = expand_run_dirs(a.run_dirs)
    evidences: dict = {}  # one index of the committed evidence per repository
    reports = []
    for d in run_dirs:
        base = evidence_base(Path(d).parent)
        reports.append(verify_evidence(d, base, evidences.setdefault(base, Evidence(base, expand_run_dirs))))
    # a folder given (`kit verify-evidence runs`): the repository's exposure ledger is checked as well, and
    # the folder as a whole (kit/evidence/tree.py: pins of missing runs, names, links, keys, notes, order)
    folders = [Path(p) for p in a.run_dirs if not (Path(p) / "run.json").exists()]
    for base in sorted({evidence_base(p) for p in folders}):
        reports.append(ledger_report(base))
        reports += design_reports(base)  # the repository's frozen replicate designs (kit/evidence/replicate_design.py)
    reports += [tree_report(p, evidence_base(p)) for p in folders
                if archive.origin(p) is None and not run_record.is_run_dir(p)]
    runs_for_anchor = _anchored_runs(a)
    if a.root:
        reports.append(root_report(runs_for_anchor, None, a.root))
    if a.at:
        reports.append(at_report(runs_for_anchor, None, a.at, a.allowed_signers))
    if a.json:
        print(json.dumps(reports, indent=1, sort_keys=True))
    typed = [read_report(r) for r in reports]
    if not a.json:
        for report in typed:
            print(f"{report.run_dir}: {'ok' if report.ok else 'FAILED'}")
            for check in report.checks:
                print(f"  {check.result:7s} {check.check}: {check.detail}")
    return 0 if typed and all(r.ok for r in typed) else 1


def _anchored_runs(a) -> Path:
    """The runs folder `--root` and `--at` hold to their anchor: the one folder given (a run folder's runs folder)."""
    if not (a.root or a.at):
        return Path()
    folders = {Path(p) if not run_record.is_run_dir(Path(p)) else Path(p).parent for p in a.run_dirs}
    if len(folders) != 1:
        raise ValueError(f"--root/--at: name one runs folder (got {', '.join(sorted(map(str, folders)))})")
    return folders.pop()


def cmd_evidence_root(a) -> int:
    print(evidence_root(Path(a.runs_dir), a.ledger_dir))
    return 0


def _replay(run_dirs, a) -> int:
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="kit-replay-"))
    if a.at_recorded_commit:  # each run with its recorded commit's code (kit/evidence/replay_at_commit.py)
        folders = [p for p in a.run_dirs if not (Path(p) / "run.json").exists()]
        if folders:  # a runs folder holds runs of many commits, GPU runs and benchmarks: name the runs
            raise ValueError(f"--at-recorded-commit: {folders[0]} is not a run folder (no run.json); name the runs "
                             "to replay, each is replayed at the commit its record names")
        passed = [flag for flag, on in (("--json", a.json), ("--no-progress", a.no_progress)) if on]
        return replay_at_recorded_commits(run_dirs, work.resolve(), passed, log=lambda m: print(m, file=sys.stderr))
    # a folder given (a runs directory): its benchmark records and GPU runs are listed as not replayed;
    # a run named on its own that cannot be replayed is refused
    whole_folder = any(not (Path(p) / "run.json").exists() for p in a.run_dirs)
    results = replay_results(run_dirs, work, log=lambda m: print(m, file=sys.stderr), whole_folder=whole_folder)
    if a.json:
        print(json.dumps([r.to_json() for r in results], indent=1, sort_keys=True))
    for r in results:
        if not a.json:
            if r.ok is None:
                print(f"{r.run_id}: not replayed: {r.not_replayed}")
                continue
            print(f"{r.run_id}: {'replayed, equal' if r.ok else 'REPLAY MISMATCH'} "
                  f"({len(r.compared)} fields compared; work in {work})")
        for m in r.mismatches:
            print(f"  {m}", file=sys.stderr if a.json else sys.stdout)
    replayed = [r for r in results if r.ok is not None]
    if not a.json and whole_folder:
        print(f"replay: {len(replayed)} run(s) replayed, {sum(bool(r.ok) for r in replayed)} equal; "
              f"{len(results) - len(replayed)} not replayable here")
    return 0 if replayed and all(r.ok for r in replayed) else 1


def cmd_report(a) -> int:
    ensure_runtime(("jupyter_client", *REPORT_MODULES), "render a report")
    with quiet_kernels(Path(a.out) / KERNEL_LOG_NAME):  # kernel and library warnings: OUT/kernel.log
        print(render_report(Path(a.runs_dir), Path(a.out), title=a.title, kernel_name=a.kernel, select=a.select))
    return 0


def cmd_results(a) -> int:
    selection = Selection.of(a.runs_dir)  # parsed once, where the CLI receives it
    folder = selection.runs_dir
    if not folder.is_dir():
        print(f"kit results: {folder}: runs directory not found", file=sys.stderr)
        return 2
    if Path(a.out).suffix not in (".csv", ".parquet"):
        print(f"kit results: --out {a.out}: expected a file name ending in .csv or .parquet", file=sys.stderr)
        return 2
    try:
        print(write_results(selection, a.out))
    except ImportError as e:  # Parquet needs pyarrow or fastparquet, which the kit does not require
        print(f"kit results: {a.out}: Parquet needs pyarrow or fastparquet, neither is installed ({type(e).__name__}); "
              "write a .csv instead", file=sys.stderr)
        return 1
    return 0


def cmd_archive_evidence(a) -> int:
    folders = [Path(f) for f in a.folders]
    parents = {f.resolve().parent for f in folders}
    if len(parents) != 1:
        print(f"kit archive-evidence: the folders must be in one runs directory; got {sorted(map(str, parents))}",
              file=sys.stderr)
        return 2
    try:
        entry = archive_folders(parents.pop(), [f.name for f in folders], a.why)
    except ValueError as e:
        print(f"kit archive-evidence: {e}", file=sys.stderr)
        return 2
    print(f"{entry.file}: {len(entry.folders)} folder(s), {len(entry.runs)} run(s), {entry.members} "
          f"files ({entry.unpacked_bytes:,} bytes) in {entry.size:,} bytes; "
          f"{len(entry.references)} stored as references")
    return 0
