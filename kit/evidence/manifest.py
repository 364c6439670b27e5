"""Every byte a run keeps, pinned: the manifest of a run folder and the committed index of older runs' pins.

A `kit-run/3` record carries `manifest` (relative path -> sha256 and size) of every file of its folder but
run.json itself and `kernel.log` (the kernel's warnings, ignored by git). Runs recorded before it are pinned
once, without rewriting them, in `runs/MANIFESTS.json` (tools/pin_run_files.py): their files and their
run.json, plus the head of the exposure ledger as it stood. The checks here take a run directory and the
repository base, so an archived run unpacked under its old name elsewhere is checked alike (`run_key`).
docs/formats/run-records.md ("Run manifests") is the reference.
"""

from __future__ import annotations

import os
from pathlib import Path

from kit.digest import load_json_strict, sha256_file
from kit.evidence.archive import origin

PINS_RELATIVE = Path("runs") / "MANIFESTS.json"
PINS_FORMAT = "kit-run-pins/1"
RECORD_NAME = "run.json"
UNPINNED = frozenset({RECORD_NAME, "kernel.log"})  # top-level names a manifest leaves out


def file_manifest(run_dir: str | os.PathLike) -> dict:
    """{relative POSIX path: {"sha256", "size"}} of every regular file under `run_dir` but UNPINNED (at its
    top); links are listed as files of their own bytes would be refused: a link is not evidence."""
    run_dir = Path(run_dir)
    out = {}
    for path in sorted(run_dir.rglob("*")):
        rel = path.relative_to(run_dir).as_posix()
        if rel in UNPINNED or path.is_dir() and not path.is_symlink():
            continue
        out[rel] = {"sha256": "link" if path.is_symlink() else sha256_file(path),
                    "size": -1 if path.is_symlink() else path.stat().st_size}
    return out


def run_key(run_dir: str | os.PathLike, base: str | os.PathLike) -> str:
    """The run's name in runs/MANIFESTS.json: its path relative to the repository (`runs/<id>`, or deeper in a
    superseded or campaign folder); for a folder outside `base` (an archived run unpacked into a temporary
    folder under its old name) the part from its last `runs` component on."""
    run_dir = origin(run_dir) or Path(os.path.abspath(run_dir))  # an archived run: its place in runs/
    try:
        return run_dir.relative_to(Path(os.path.abspath(base))).as_posix()
    except ValueError:
        parts = run_dir.parts
        i = max((k for k, p in enumerate(parts) if p == "runs"), default=len(parts) - 1)
        return Path(*parts[i:]).as_posix()


def read_pins(base: str | os.PathLike) -> dict | None:
    """runs/MANIFESTS.json of the repository at `base`, checked; None when absent."""
    path = Path(base) / PINS_RELATIVE
    if not path.is_file():
        return None
    pins = load_json_strict(path)
    if not isinstance(pins, dict) or pins.get("format") != PINS_FORMAT or not isinstance(pins.get("runs"), dict):
        raise ValueError(f"{path}: field 'format' must be {PINS_FORMAT!r}, with an object 'runs'")
    return pins


def compare_manifest(run_dir: Path, want: dict, source: str) -> list[str]:
    """One line per changed, added or removed file of `run_dir` against the manifest `want`."""
    have = file_manifest(run_dir)
    problems = []
    for rel in sorted(set(want) | set(have)):
        if rel not in have:
            problems.append(f"{run_dir / rel}: removed (pinned in {source})")
        elif rel not in want:
            problems.append(f"{run_dir / rel}: added (not in {source})")
        elif have[rel] != want[rel]:
            problems.append(f"{run_dir / rel}: sha256 {have[rel]['sha256'][:12]}, size {have[rel]['size']}; "
                            f"{source} pins {want[rel]['sha256'][:12]}, size {want[rel]['size']}")
    return problems


def files_check(run_dir: str | os.PathLike, base: str | os.PathLike, record=None) -> dict:
    """The `files` check: a kit-run/3 record's own manifest, else the run's pins in runs/MANIFESTS.json (its
    files and its run.json). A run with neither fails "not pinned": an unpinned record proves nothing."""
    run_dir, base = Path(run_dir), Path(base)
    if record is not None and getattr(record, "format", None) == "kit-run/3":
        problems = compare_manifest(run_dir, record.manifest, f"{run_dir / RECORD_NAME} field 'manifest'")
        return _check(problems, f"{len(record.manifest)} file(s) match the record's manifest")
    try:
        pins = read_pins(base)
    except ValueError as e:
        return {"check": "files", "result": "fail", "detail": str(e)}
    key = run_key(run_dir, base)
    entry = (pins or {}).get("runs", {}).get(key)
    if entry is None:
        where = base / PINS_RELATIVE
        return {"check": "files", "result": "fail",
                "detail": f"{run_dir}: not pinned: no manifest in its record and no entry {key!r} in {where}"
                          + ("" if pins is not None else " (absent: run `python tools/pin_run_files.py` once)")}
    source = f"{base / PINS_RELATIVE} runs[{key!r}]"
    problems = compare_manifest(run_dir, entry["files"], source + ".files")
    record_path = run_dir / RECORD_NAME
    if record_path.is_file():
        have = {"sha256": sha256_file(record_path), "size": record_path.stat().st_size}
        if have != entry[RECORD_NAME]:
            problems.append(f"{record_path}: sha256 {have['sha256'][:12]}; {source}.{RECORD_NAME} pins "
                            f"{entry[RECORD_NAME]['sha256'][:12]}")
    return _check(problems, f"{len(entry['files'])} file(s) and {RECORD_NAME} match {source}")


def _check(problems: list[str], ok: str) -> dict:
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return {"check": "files", "result": "fail", "detail": problems[0] + more}
    return {"check": "files", "result": "pass", "detail": ok}


def pin_entry(run_dir: str | os.PathLike) -> dict:
    """What runs/MANIFESTS.json holds for one run: its files' manifest and its run.json's."""
    run_dir = Path(run_dir)
    record = run_dir / RECORD_NAME
    return {"files": file_manifest(run_dir),
            RECORD_NAME: {"sha256": sha256_file(record), "size": record.stat().st_size} if record.is_file() else None}
