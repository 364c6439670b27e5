"""`kit verify-evidence`: check that a run directory is what its run.json says it is.

Each check (record, executed notebook, parameters, metrics, roots, git) gives `pass`, `fail` or
`skipped`; the list and what each compares: docs/formats/verify-evidence.md ("Checks of `kit verify-evidence`").
The decision to know: the recorded commit must be in the history the evidence is read from; a run
kept in a superseded folder whose commit that folder names as unreachable is `skipped` with the
folder's reason. Relative paths in a record are relative to the repository holding the runs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from kit.digest import (
    BoundedReadError,
    canonical_json,
    load_json_strict,
    loads_strict,
    read_bounded,
    sha256_regular,
)
from kit.evidence import archive, environment, run_record
from kit.evidence.archive import ARCHIVE_DIR_NAME, origin
from kit.evidence.chain import Evidence, copies_check, ledger_events_check, materials_checks
from kit.evidence.checks import report_json
from kit.evidence.gpu_mode import gpu_mode_check
from kit.evidence.manifest import RECORD_PINS_RELATIVE, files_check, record_pins, run_key
from kit.evidence.parameters import ParameterError, parse_assignments
from kit.evidence.run_record import CheckpointRoots
from kit.evidence.superseded import SupersededNote
from kit.evidence.tree import note_pinned
from kit.record import build
from kit.store.commits import verify_commit
from kit.store.manifest import commits_dir

INJECTED_TAG = "injected-parameters"


def _check(name: str, result: str, detail: str) -> dict:
    assert result in ("pass", "fail", "skipped")
    return {"check": name, "result": result, "detail": detail}


def _parameters_checks(executed: Path, recorded: dict) -> list[dict]:
    nb = loads_strict(read_bounded(executed, follow_links=False), str(executed))
    meta = (nb.get("metadata", {}).get("papermill") or {}).get("parameters") or {}
    out = []
    if canonical_json(meta) == canonical_json(recorded):
        out.append(_check("parameters", "pass", f"notebook metadata holds the {len(recorded)} recorded parameter(s)"))
    else:
        out.append(_check("parameters", "fail", f"{executed}: metadata papermill.parameters {meta!r} differ from "
                                                f"run.json parameters {recorded!r}"))
    injected = [c for c in nb["cells"] if INJECTED_TAG in (c.get("metadata", {}).get("tags") or [])]
    if not recorded and not injected:
        return out
    if len(injected) != 1:
        return out + [_check("injected_cell", "fail", f"{executed}: {len(injected)} injected-parameters cells")]
    source = injected[0]["source"]
    source = "".join(source) if isinstance(source, list) else source
    try:
        values = parse_assignments(source, f"{executed}: injected cell")
    except ParameterError as e:
        return out + [_check("injected_cell", "fail", str(e))]
    if canonical_json(values) == canonical_json(recorded):
        out.append(_check("injected_cell", "pass", "the injected cell assigns exactly the recorded values"))
    else:
        out.append(_check("injected_cell", "fail", f"{executed}: injected cell assigns {values!r}, run.json "
                                                   f"records {recorded!r}"))
    return out


def _sha(path: Path) -> str:
    """The sha256 of a file of the run, read bounded (no link, device or FIFO; MAX_EVIDENCE_BYTES): a refusal reads
    as a digest that pins nothing, so the check fails naming the file."""
    try:
        return sha256_regular(path)[1]
    except BoundedReadError as e:
        return f"not read: {e}"


def _metrics_checks(run_dir: Path, pinned: Mapping[str, str]) -> list[dict]:
    metrics_dir = run_dir / run_record.METRICS_DIR_NAME
    present = {p.stem: p for p in metrics_dir.glob("*.json")} if metrics_dir.is_dir() else {}
    out = []
    for name in sorted(set(present) | set(pinned)):
        if name not in pinned:
            out.append(_check(f"metric {name}", "fail", f"{present[name]}: sidecar not pinned in run.json"))
        elif name not in present:
            out.append(_check(f"metric {name}", "fail", f"{run_record.metric_path(run_dir, name)}: pinned but missing"))
        elif _sha(present[name]) != pinned[name]:
            out.append(_check(f"metric {name}", "fail", f"{present[name]}: bytes do not hash to the pinned digest"))
        else:
            out.append(_check(f"metric {name}", "pass", "hashes to the pinned digest"))
    return out


def _roots_checks(roots: CheckpointRoots, base: Path, superseded: SupersededNote | None = None) -> list[dict]:
    """One check per recorded root. `superseded`: the superseded.json of the folder holding the run, whose
    replacement was re-made under the same run id and so into the same checkpoint home: there a root of the
    superseded run that no manifest names any more is `skipped` (the home holds the replacement's commits),
    while a manifest that is present and fails to verify still fails."""
    out = []
    for role, entries in (("produced", roots.produced), ("used", roots.used)):
        for entry in entries:
            name = f"root {role} {entry.root[:12]}"
            if entry.home is None:
                out.append(_check(name, "skipped", "no checkpoint home recorded"))
                continue
            home = Path(entry.home) if os.path.isabs(entry.home) else base / entry.home
            if not home.is_dir():
                out.append(_check(name, "skipped", f"home absent: {home}"))
                continue

            manifest = commits_dir(home) / f"{entry.root}.json"
            if superseded is not None and not manifest.is_file():
                out.append(_check(name, "skipped", f"superseded: {manifest} absent; the run id was re-made "
                                                   "into the same home, which holds its replacement's commits"))
                continue

            try:
                report = verify_commit(home, entry.root)
            except (ValueError, OSError) as e:
                out.append(_check(name, "fail", str(e).splitlines()[0]))
            else:
                out.append(_check(name, "pass", f"{report['objects']} objects in {home} re-hash"))
    return out


SUPERSEDED_NAME = "superseded.json"
SUPERSEDED_FORMAT = "kit-superseded/1"


def superseded_note(run_dir: Path, base: Path | None = None) -> SupersededNote | None:
    """The superseded.json of the folder holding `run_dir`, checked: {"format", "reason",
    "unreachable_commits": [sha], "replaced_by": {run name: replacement run name}}; None when absent. A note
    counts only in a folder of the runs folder (never in the runs folder itself, where it would cover live
    runs) and, given `base`, only as recorded when superseding: pinned in runs/RECORD_PINS.json (an archived
    folder's note is its archive's bytes); a note that is not raises ValueError naming it."""
    path = run_dir.parent / SUPERSEDED_NAME
    if not path.exists() and not path.is_symlink():
        return None
    where = origin(run_dir.parent) or Path(os.path.abspath(run_dir.parent))
    if where == Path(os.path.abspath(base)) / "runs" if base is not None else where.name == "runs":
        raise ValueError(f"{path}: a superseded note in the runs folder itself; notes hold only in a folder of "
                         "superseded runs (runs/superseded-DATE-WHY/)")
    if base is not None and not note_pinned(path, base):
        raise ValueError(f"{path}: not pinned in {base / RECORD_PINS_RELATIVE} field 'notes' as it stands; a note "
                         "counts only as recorded when superseding (`python tools/pin_run_files.py`)")
    note = load_json_strict(path, follow_links=False)
    for field, kind in (("format", str), ("reason", str), ("unreachable_commits", list), ("replaced_by", dict)):
        if not isinstance(note.get(field), kind):
            raise ValueError(f"{path}: field {field!r} must be a {kind.__name__}")  # noqa: TRY004 (bad input file)
    checked = build(note, SupersededNote)
    if checked.format != SUPERSEDED_FORMAT:
        raise ValueError(f"{path}: field 'format' is {checked.format!r}, expected {SUPERSEDED_FORMAT!r}")
    return checked


def _git_check(commit: str | None, base: Path, run_dir: Path | None = None) -> dict:
    if commit is None:
        return _check("git", "fail", "run.json records no git commit (the run was made outside a repository)")
    exists = environment.git_commit_exists(base, commit)
    if exists and environment.git_commit_in_history(base, commit):
        return _check("git", "pass", f"commit {commit} is in the history of HEAD")
    why = (f"commit {commit} exists but is not HEAD or an ancestor of HEAD in {base}" if exists
           else f"commit {commit} not found in the repository at {base}")
    if not exists and environment.git_toplevel(base) is None:  # a runs folder outside any repository
        why = (f"commit {commit} cannot be looked up: the runs folder is in no git repository ({base}, the folder "
               "its records' paths are read from, is not in one); verify it inside a clone of the repository that "
               "made it")
    try:
        note = superseded_note(run_dir, base) if run_dir is not None else None
    except ValueError as e:
        return _check("git", "fail", f"{why}; {e}")
    if note is not None and run_dir is not None and commit in note.unreachable_commits:
        after = note.replaced_by.get(run_dir.name)
        return _check("git", "skipped", f"superseded: {why}; {note.reason}"
                                        + (f"; replaced by {after}" if after else ""))
    return _check("git", "fail", why)


BENCH_FORMAT = "kit-bench/1"
ATTEMPT_RE = re.compile(r"attempt-[0-9]+")


def place_check(run_dir: Path, run_id, base: Path) -> dict:
    """The `place` check: a run's folder is named by its record's run_id (`runs/<id>`), the run_id is the folder's
    path under runs/ (a benchmark kept in a probe folder), or the folder is an attempt kept when the id ran again
    (`<id>.superseded/attempt-<n>/`); else only where runs/RECORD_PINS.json field 'places' states that folder's
    run_id (records written before the check, named once). A reader by path then reads that run."""
    name, parent = run_dir.name, run_dir.parent.name
    key = run_key(run_dir, base)
    if name == run_id or key == f"runs/{run_id}" \
            or ATTEMPT_RE.fullmatch(name) and parent == f"{run_id}{run_record.SUPERSEDED_ATTEMPTS_SUFFIX}":
        return _check("place", "pass", f"folder {name} is named by the record's run_id")
    try:
        pins = record_pins(base)
        stated = (pins.places or {}).get(key) if pins is not None else None
    except ValueError as e:
        return _check("place", "fail", str(e))
    if stated == run_id:
        return _check("place", "pass", f"{base / RECORD_PINS_RELATIVE} field 'places' states {key} holds {run_id}")
    return _check("place", "fail", f"{run_dir / run_record.RUN_RECORD_NAME}: field 'run_id' is {run_id!r}; its folder "
                                   f"is named {name!r} (expected {run_id!r}, or attempt-<n> under "
                                   f"{run_id}{run_record.SUPERSEDED_ATTEMPTS_SUFFIX})")


def _bench_record(run_dir: Path, base: Path | None = None) -> dict | None:
    """A benchmark's run record (`kit-bench/1`, written by bench/*.py on a GPU host, no notebook):
    it must parse strictly, name its raw output files, which must exist, and a git commit that exists."""
    try:
        rec = run_record.read_record_json(run_dir)
    except (FileNotFoundError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("format") != BENCH_FORMAT:
        return None
    base = base or environment.evidence_base(run_dir.parent)
    checks = [_check("record", "pass", f"benchmark record, status {rec.get('status')}"),
              place_check(run_dir, rec.get("run_id"), base)]
    raw = rec.get("raw_output")
    names = raw if isinstance(raw, list) else [raw] if isinstance(raw, str) else []
    for name in names:
        f = run_dir / name
        checks.append(_check("raw_output", "pass" if f.is_file() else "fail", f"{f}: {'present' if f.is_file() else 'missing'}"))
    base = base or environment.evidence_base(run_dir.parent)
    checks.append(files_check(run_dir, base))
    checks.append(_git_check((rec.get("git") or {}).get("commit"), base, run_dir))
    return report_json(str(run_dir), rec.get("run_id"), checks)


def verify_evidence(run_dir: str | os.PathLike, base: str | os.PathLike | None = None, evidence=None) -> dict:
    """{"run_dir", "run_id", "ok", "checks": [{"check", "result", "detail"}]} for one run directory. `base`: the
    repository the run belongs to (default: the one holding it; an archived run unpacked elsewhere names
    it); `evidence`: a kit.evidence.chain.Evidence of that base, shared when many runs are checked."""
    run_dir = Path(run_dir)
    base = Path(base) if base is not None else None
    bench = _bench_record(run_dir, base)
    if bench is not None:
        return bench
    try:
        record = run_record.read_run_record(run_dir)
    except (FileNotFoundError, ValueError) as e:
        return {"run_dir": str(run_dir), "run_id": None, "ok": False, "checks": [_check("record", "fail", str(e))]}
    base = base or environment.evidence_base(run_dir.parent)
    checks = [_check("record", "pass", f"status {record.status}"), place_check(run_dir, record.run_id, base)]
    executed = run_dir / record.executed_notebook
    if not executed.is_file():
        checks.append(_check("executed_notebook", "fail", f"{executed}: missing"))
    else:
        if record.executed_notebook_sha256 is not None and _sha(executed) != record.executed_notebook_sha256:
            checks.append(_check("executed_notebook", "fail", f"{executed}: does not hash to the recorded sha256"))
        else:
            checks.append(_check("executed_notebook", "pass", "hashes to the recorded sha256"))
        checks += _parameters_checks(executed, record.parameters)
    checks += _metrics_checks(run_dir, record.metrics)
    # every byte pinned (manifest or runs/MANIFESTS.json), and the chain to the runs it consumed
    checks += [files_check(run_dir, base, record), copies_check(run_dir)]
    if record.format == run_record.RUN_FORMAT:
        checks += materials_checks(run_dir, record, evidence or Evidence(base, expand_run_dirs))
        checks.append(ledger_events_check(run_dir, record, base))
    try:
        superseded = superseded_note(run_dir, base)
    except ValueError as e:
        superseded = None
        checks.append(_check("superseded", "fail", str(e)))
    checks += _roots_checks(record.checkpoint_roots, base, superseded)
    mode = gpu_mode_check(run_dir, record, base, superseded)
    checks += [mode] if mode is not None else []
    checks.append(_git_check(record.git.commit, base, run_dir))
    return report_json(str(run_dir), record.run_id, checks)


def expand_run_dirs(paths: list[str]) -> list[Path]:
    """Each path is a run directory; or a folder standing for the run directories anywhere under it: a runs
    directory, its campaign folders (runs/medium-campaign-DATE: superseded attempts, a seed's rebuild) and
    its superseded folders included, archived ones too (unpacked, kit/evidence/archive.py), so that
    `kit verify-evidence runs` checks every committed record; a path inside an archived folder names it there. A
    folder with none stays as given, so that its check fails with "no run record"."""
    out: list[Path] = []
    for p in (archive.resolve(p) for p in paths):
        if (p / run_record.RUN_RECORD_NAME).exists() or not p.is_dir():
            out.append(p)
        else:
            found = _run_dirs_under(p)
            for folder in archive.folder_paths(p):  # a runs directory's archived folders, checked unpacked
                found.extend([folder] if run_record.is_run_dir(folder) else _run_dirs_under(folder))
            out.extend(found or [p])
    return out


def _run_dirs_under(folder: Path) -> list[Path]:
    """Run directories (run_record.is_run_dir) at any depth under `folder`, not looking inside a run directory
    and not following symbolic links (a link back up would list runs twice)."""
    found: list[Path] = []

    for child in sorted(c for c in folder.iterdir() if c.is_dir() and not c.is_symlink() and c.name != ARCHIVE_DIR_NAME):
        found.extend([child] if run_record.is_run_dir(child) else _run_dirs_under(child))
    return found
