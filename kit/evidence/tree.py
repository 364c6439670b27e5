"""The runs folder as a whole, checked by `kit verify-evidence RUNS` beside each run's own checks: what no single
run's report can see (docs/formats/verify-evidence.md, "Checks of the runs folder").

- `links`: no symbolic link (and nothing but regular files and folders) anywhere under the runs folder or the
  ledger folder: a link is not evidence, and a linked run folder would be read as a run by path.
- `archive index`: archives (`archive/*.tar.xz`) only with their index, and every archive listed in it.
- `one key per run`: no folder both live and archived (two runs under one key).
- `pins name runs`: every run `runs/MANIFESTS.json`, `runs/GPU_MODES.json` or `runs/RECORD_PINS.json` names
  exists, live or archived.
- `record pins`: `runs/RECORD_PINS.json` present where `runs/MANIFESTS.json` is, well formed, and pinning
  `GPU_MODES.json` and every superseded note of the live folders by sha256 (each run's record is checked
  against it in that run's `files` check).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kit.digest import load_json_strict
from kit.evidence import archive
from kit.evidence.checks import report_json
from kit.evidence.manifest import (
    PINS_RELATIVE,
    RECORD_PINS_RELATIVE,
    RecordPins,
    file_pin,
    record_pins,
    run_pins,
)

GPU_MODES_RELATIVE = Path("runs") / "GPU_MODES.json"
SUPERSEDED_NAME = "superseded.json"


def _check(name: str, problems: list[str], ok: str) -> dict:
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return {"check": name, "result": "fail", "detail": problems[0] + more}
    return {"check": name, "result": "pass", "detail": ok}


def _links(top: Path, label: Path) -> list[str]:
    out = []
    if top.is_symlink():
        return [f"{label}: a symbolic link; expected the folder itself (a link is not evidence)"]
    for dirpath, dirnames, filenames in os.walk(top):
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            mode = os.lstat(p).st_mode
            if stat.S_ISLNK(mode):
                out.append(f"{p}: a symbolic link (to {os.readlink(p)}); a link is not evidence and is not read")
            elif not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                out.append(f"{p}: neither a regular file nor a folder; not evidence")
    return out


def _archive_checks(runs_dir: Path) -> tuple[list[dict], set[str], set[str]]:
    """(checks, archived folder names, archived run keys relative to runs_dir)."""
    adir = runs_dir / archive.ARCHIVE_DIR_NAME
    files = sorted(p.name for p in adir.iterdir()) if adir.is_dir() and not adir.is_symlink() else []
    tars = [n for n in files if n.endswith(".tar.xz")]
    problems: list[str] = []
    folders: set[str] = set()
    members: set[str] = set()
    try:
        index = archive.read_index(runs_dir)
    except ValueError as e:
        return [_check("archive index", [str(e)], "")], folders, members
    if index is None:
        if tars:
            problems.append(f"{archive.index_path(runs_dir)}: missing; {len(tars)} archive(s) in {adir} "
                            f"({tars[0]}...) need their index (else their runs drop out of verification)")
    else:
        listed = {a.file for a in index.archives}
        problems += [f"{adir / n}: an archive the index {archive.index_path(runs_dir)} does not list" for n in tars
                     if n not in listed]
        problems += [f"{adir / n}: not an archive, its index or index.md; expected nothing else in {adir}"
                     for n in files if n not in listed and not n.endswith(".tar.xz")
                     and n not in (archive.INDEX_NAME, "index.md")]
        folders = {f for a in index.archives for f in a.folders}
        members = {r.member for a in index.archives for r in a.runs}
    n = len(tars)
    return [_check("archive index", problems, f"{n} archive(s), each listed in the index")], folders, members


def _live_runs(runs_dir: Path) -> set[str]:
    """Keys (relative to runs_dir) of the live folders holding run.json, at any depth, links not followed."""
    out = set()
    for dirpath, dirnames, filenames in os.walk(runs_dir):
        rel = Path(dirpath).relative_to(runs_dir)
        if rel == Path("."):
            dirnames[:] = [d for d in dirnames if d != archive.ARCHIVE_DIR_NAME]
        if "run.json" in filenames and rel != Path("."):
            out.add(rel.as_posix())
    return out


def tree_report(runs_dir: str | os.PathLike, base: str | os.PathLike) -> dict:
    """The runs folder's own report (module docstring); `base`: the repository holding it."""
    runs_dir, base = Path(runs_dir), Path(base)
    ledger_dir = base / "ledger"
    checks = [_check("links", _links(runs_dir, runs_dir) + (_links(ledger_dir, ledger_dir) if ledger_dir.exists()
                                                             or ledger_dir.is_symlink() else []),
                     "no link or special file under the runs and ledger folders")]
    arch, archived, members = _archive_checks(runs_dir)
    checks += arch
    live_names = {p.name for p in runs_dir.iterdir()} if runs_dir.is_dir() else set()
    both = sorted(archived & live_names)
    checks.append(_check("one key per run", [f"{runs_dir / n}: live and also archived in "
                                             f"{archive.index_path(runs_dir)} (two runs under one key)" for n in both],
                         f"{len(archived)} archived folder(s), none also live"))
    is_main = Path(os.path.abspath(runs_dir)) == Path(os.path.abspath(base / "runs"))
    if not is_main:
        return _report(runs_dir, checks)
    live = _live_runs(runs_dir)
    exists = {f"runs/{k}" for k in live | members}

    def missing(keys, source):
        return [f"{source}: names {k!r}, which is no run folder (live or archived)" for k in sorted(keys)
                if k not in exists]

    problems = []
    try:
        pins = run_pins(base)
        problems += missing(pins.runs if pins is not None else {}, base / PINS_RELATIVE)
    except ValueError as e:
        problems.append(str(e))
    modes_path = base / GPU_MODES_RELATIVE
    try:
        modes = load_json_strict(modes_path, follow_links=False) if modes_path.exists() else {}
        problems += missing((modes.get("runs") or {}) if isinstance(modes, dict) else {}, modes_path)
    except ValueError as e:
        problems.append(str(e))
    try:
        rpins = record_pins(base)
    except ValueError as e:
        rpins, problems = None, problems + [str(e)]
    if rpins is not None:
        problems += missing(rpins.records, base / RECORD_PINS_RELATIVE)
    checks.append(_check("pins name runs", problems, "every pinned run exists"))
    checks.append(_record_pins_check(runs_dir, base, rpins))
    return _report(runs_dir, checks)


def _record_pins_check(runs_dir: Path, base: Path, rpins: RecordPins | None) -> dict:
    where = base / RECORD_PINS_RELATIVE
    if rpins is None:
        if (base / PINS_RELATIVE).exists():
            return _check("record pins", [(f"{where}: missing beside {base / PINS_RELATIVE}; run `python "
                                          "tools/pin_run_files.py` (the records, notes and GPU modes go unpinned)")], "")
        return {"check": "record pins", "result": "skipped", "detail": f"{where}: none (no pins in this repository)"}
    problems = []
    have = file_pin(base / GPU_MODES_RELATIVE)
    if have != rpins.gpu_modes:
        problems.append(f"{base / GPU_MODES_RELATIVE}: sha256 {have.sha256[:12] if have else 'absent'}; {where} "
                        f"field 'gpu_modes' pins {rpins.gpu_modes.sha256[:12] if rpins.gpu_modes else 'none'}")
    notes = {p.relative_to(base).as_posix(): p for p in sorted(runs_dir.rglob(SUPERSEDED_NAME))
             if archive.ARCHIVE_DIR_NAME not in p.relative_to(runs_dir).parts[:1]}
    for rel in sorted(set(notes) | set(rpins.notes)):
        pinned, now = rpins.notes.get(rel), file_pin(base / rel)
        if pinned is None:
            problems.append(f"{base / rel}: a superseded note {where} does not pin (notes count only as recorded "
                            "when superseding)")
        elif now != pinned:
            problems.append(f"{base / rel}: sha256 {now.sha256[:12] if now else 'absent'}; {where} field "
                            f"'notes' pins {pinned.sha256[:12]}")
    return _check("record pins", problems, f"GPU_MODES.json and {len(notes)} superseded note(s) match {where}")


def note_pinned(note_path: Path, base: Path) -> bool:
    """Whether a live superseded note is pinned as it stands (a note in an archive is the archive's bytes: true;
    a repository without runs/RECORD_PINS.json: true)."""
    if archive.origin(note_path) is not None:
        return True
    try:
        rpins = record_pins(base)
    except ValueError:
        return False
    if rpins is None:
        return True
    try:
        rel = Path(os.path.abspath(note_path)).relative_to(Path(os.path.abspath(base))).as_posix()
    except ValueError:
        return False
    if not rel.startswith("runs/"):  # a runs folder other than the repository's (a demo's output)
        return True
    pinned = rpins.notes.get(rel)
    return pinned is not None and pinned == file_pin(note_path)


def _report(runs_dir: Path, checks: list[dict]) -> dict:
    return report_json(str(runs_dir), None, checks)
