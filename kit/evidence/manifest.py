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
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.digest import (
    MAX_EVIDENCE_BYTES,
    BoundedReadError,
    load_json_strict,
    sha256_file,
    sha256_regular,
)
from kit.evidence.archive import origin
from kit.evidence.run_record import RUN_FORMAT, RunRecord
from kit.record import MapOf, Omittable, OneOf, Opt, Record, build, spec_field, to_json

PINS_RELATIVE = Path("runs") / "MANIFESTS.json"
PINS_FORMAT = "kit-run-pins/1"
RECORD_PINS_RELATIVE = Path("runs") / "RECORD_PINS.json"
RECORD_PINS_FORMAT = "kit-record-pins/1"
RECORD_NAME = "run.json"
UNPINNED = frozenset({RECORD_NAME, "kernel.log"})  # top-level names a manifest leaves out


@dataclass(frozen=True, slots=True, kw_only=True)
class FilePin(Record):
    """The bytes of one file, pinned."""

    sha256: str = spec_field(str, doc="sha256 of its bytes")
    size: int = spec_field(int, doc="their count")


@dataclass(frozen=True, slots=True, kw_only=True)
class PinnedRun(Record):
    """runs/MANIFESTS.json `runs[KEY]`: an older run's files and its run.json."""

    files: Mapping[str, FilePin] = spec_field(MapOf(FilePin), doc="relative path -> pin, as a manifest")
    run_json: FilePin | None = spec_field(Opt(FilePin), key=RECORD_NAME, doc="its record's pin (null: none)")


@dataclass(frozen=True, slots=True, kw_only=True)
class PinnedLedger(Record):
    """runs/MANIFESTS.json `ledger`: the exposure ledger's head when the pins were made."""

    path: str = spec_field(str, doc="the ledger, relative to the repository")
    sha256: str = spec_field(str, doc="sha256 of its first `size` bytes")
    size: int = spec_field(int, doc="bytes pinned")


@dataclass(frozen=True, slots=True, kw_only=True)
class RunPins(Record):
    """runs/MANIFESTS.json: runs recorded before kit-run/3, pinned once, and the ledger's head."""

    format: str = spec_field(OneOf(PINS_FORMAT), doc=PINS_FORMAT)
    runs: Mapping[str, PinnedRun] = spec_field(MapOf(PinnedRun), doc="run key -> its pins")
    ledger: PinnedLedger | None = spec_field(Omittable(Opt(PinnedLedger)), doc="the ledger's head")


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordPins(Record):
    """runs/RECORD_PINS.json: what no manifest holds (a kit-run/3 run.json, superseded notes, GPU_MODES.json)."""

    format: str = spec_field(OneOf(RECORD_PINS_FORMAT), doc=RECORD_PINS_FORMAT)
    records: Mapping[str, FilePin] = spec_field(MapOf(FilePin), doc="run key -> its run.json's pin")
    notes: Mapping[str, FilePin] = spec_field(MapOf(FilePin), doc="superseded.json path -> pin")
    places: Mapping[str, str] | None = spec_field(Omittable(MapOf(str)), doc="run key -> the run_id it holds")
    gpu_modes: FilePin | None = spec_field(Opt(FilePin), doc="runs/GPU_MODES.json's pin, null: none")


def file_manifest(run_dir: str | os.PathLike, stated: dict | None = None) -> dict:
    """{relative POSIX path: {"sha256", "size"}} of every regular file under `run_dir` but UNPINNED (at its
    top); links are listed as files of their own bytes would be refused: a link is not evidence. Reads are
    bounded: no link followed, no device or FIFO opened, and a file larger than `stated` (the manifest being
    compared: its size) or MAX_EVIDENCE_BYTES is listed by its size, not read."""
    run_dir = Path(run_dir)
    out = {}
    for path in sorted(run_dir.rglob("*")):
        rel = path.relative_to(run_dir).as_posix()
        if rel in UNPINNED or path.is_dir() and not path.is_symlink():
            continue
        if path.is_symlink():
            out[rel] = {"sha256": "link", "size": -1}
            continue
        cap = min(MAX_EVIDENCE_BYTES, (stated or {}).get(rel, {}).get("size", MAX_EVIDENCE_BYTES))
        try:
            size, sha = sha256_regular(path, max(cap, 0))
        except BoundedReadError:
            size, sha = os.lstat(path).st_size, "not read: " + ("not a regular file" if not stat.S_ISREG(
                os.lstat(path).st_mode) else "larger than pinned")
        out[rel] = {"sha256": sha, "size": size}
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
    if not path.exists() and not path.is_symlink():
        return None
    pins = load_json_strict(path, follow_links=False)
    if not isinstance(pins, dict) or pins.get("format") != PINS_FORMAT or not isinstance(pins.get("runs"), dict):
        raise ValueError(f"{path}: field 'format' must be {PINS_FORMAT!r}, with an object 'runs'")
    return pins


def run_pins(base: str | os.PathLike) -> RunPins | None:
    """`read_pins`, declared."""
    pins = read_pins(base)
    return None if pins is None else build(pins, RunPins)


def _pin_ok(pin: Any) -> bool:
    match pin:
        case {"sha256": str(), "size": int(size)}:
            return set(pin) == set(FilePin.json_fields()) and not isinstance(size, bool)
    return False


_CACHE: dict = {}


def read_record_pins(base: str | os.PathLike) -> dict | None:
    """Cached per file state (read_record_pins_now)."""
    path = Path(base) / RECORD_PINS_RELATIVE
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    key = (str(path), st.st_mtime_ns, st.st_size, st.st_ino)
    if key not in _CACHE:
        _CACHE.clear()
        _CACHE[key] = read_record_pins_now(base)
    return _CACHE[key]


def record_pins(base: str | os.PathLike) -> RecordPins | None:
    """`read_record_pins`, declared."""
    pins = read_record_pins(base)
    return None if pins is None else build(pins, RecordPins)


def read_record_pins_now(base: str | os.PathLike) -> dict | None:
    """runs/RECORD_PINS.json of the repository at `base`, checked, or None when absent: {"format",
    "records": {run key: pin}, "notes": {path of a superseded.json relative to base: pin}, "gpu_modes": pin or
    null}, a pin being {"sha256", "size"} of the file's bytes."""
    path = Path(base) / RECORD_PINS_RELATIVE
    if not path.exists() and not path.is_symlink():
        return None
    pins = load_json_strict(path, follow_links=False)
    if not isinstance(pins, dict) or pins.get("format") != RECORD_PINS_FORMAT:
        raise ValueError(f"{path}: field 'format' must be {RECORD_PINS_FORMAT!r}")
    for field in ("records", "notes"):
        if not isinstance(pins.get(field), dict) or not all(_pin_ok(p) for p in pins[field].values()):
            raise ValueError(f"{path}: field {field!r} must be an object of path -> {{'sha256', 'size'}}")
    places = pins.get("places", {})
    if not isinstance(places, dict) or not all(isinstance(v, str) for v in places.values()):
        raise ValueError(f"{path}: field 'places' must be an object of run key -> run_id")
    if pins.get("gpu_modes") is not None and not _pin_ok(pins["gpu_modes"]):
        raise ValueError(f"{path}: field 'gpu_modes' must be {{'sha256', 'size'}} or null")
    return pins


def pin_of(path: Path) -> dict | None:
    """{"sha256", "size"} of a regular file (not followed through a link), None when absent."""
    pin = file_pin(path)
    return None if pin is None else pin.to_json()


def file_pin(path: Path) -> FilePin | None:
    """The pin of a regular file (not followed through a link), None when absent; a link or special file, or a
    file too large to read, has a pin no file's bytes give."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return FilePin(sha256="not a regular file", size=-1)
    try:
        size, sha = sha256_regular(path)
    except BoundedReadError as e:
        return FilePin(sha256=f"not read: {e}", size=st.st_size)
    return FilePin(sha256=sha, size=size)


def record_pin_problem(run_dir: Path, key: str, base: Path) -> str | None:
    """For a run's `files` check: its run.json against runs/RECORD_PINS.json (None: matches, no such file, or a run
    outside the repository's runs/, such as a demo's output, whose records the committed pins do not cover)."""
    rpins = record_pins(base)
    if rpins is None or not key.startswith("runs/"):  # a runs folder other than the repository's (a demo's)
        return None
    pinned, have = rpins.records.get(key), file_pin(run_dir / "run.json")
    if pinned is None:
        return (f"{run_dir / 'run.json'}: not pinned: no entry {key!r} in {base / RECORD_PINS_RELATIVE} field "
                "'records' (run `python tools/pin_run_files.py`)")
    if have != pinned:
        return (f"{run_dir / 'run.json'}: sha256 {have.sha256[:12] if have else 'absent'}; "
                f"{base / RECORD_PINS_RELATIVE} records[{key!r}] pins {pinned.sha256[:12]}")
    return None


def compare_manifest(run_dir: Path, want: dict, source: str) -> list[str]:
    """One line per changed, added or removed file of `run_dir` against the manifest `want`."""
    have = file_manifest(run_dir, want)
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


def files_check(run_dir: str | os.PathLike, base: str | os.PathLike, record: RunRecord | None = None) -> dict:
    """The `files` check: a kit-run/3 record's own manifest, else the run's pins in runs/MANIFESTS.json (its
    files and its run.json). A run with neither fails "not pinned": an unpinned record proves nothing."""
    run_dir, base = Path(run_dir), Path(base)
    if record is not None and record.format == RUN_FORMAT and record.manifest is not None:
        problems = compare_manifest(run_dir, to_json(record.manifest), f"{run_dir / RECORD_NAME} field 'manifest'")
        try:
            pinned = record_pin_problem(run_dir, run_key(run_dir, base), base)
        except ValueError as e:
            pinned = str(e)
        problems += [pinned] if pinned else []
        return _check(problems, f"{len(record.manifest)} file(s) match the record's manifest; {RECORD_NAME} "
                                f"{'pinned in ' + str(base / RECORD_PINS_RELATIVE) if (base / RECORD_PINS_RELATIVE).exists() else 'unpinned (no record pins here)'}")
    try:
        pins = run_pins(base)
    except ValueError as e:
        return {"check": "files", "result": "fail", "detail": str(e)}
    key = run_key(run_dir, base)
    entry = pins.runs.get(key) if pins is not None else None
    if entry is None:
        where = base / PINS_RELATIVE
        return {"check": "files", "result": "fail",
                "detail": f"{run_dir}: not pinned: no manifest in its record and no entry {key!r} in {where}"
                          + ("" if pins is not None else " (absent: run `python tools/pin_run_files.py` once)")}
    source = f"{base / PINS_RELATIVE} runs[{key!r}]"
    problems = compare_manifest(run_dir, to_json(entry.files), source + ".files")
    record_path = run_dir / RECORD_NAME
    if record_path.is_file() or record_path.is_symlink():
        have = file_pin(record_path)
        assert have is not None, "the record exists (checked above): it has a pin"
        if have != entry.run_json:
            problems.append(f"{record_path}: sha256 {have.sha256[:12]}; {source}.{RECORD_NAME} pins "
                            f"{entry.run_json.sha256[:12] if entry.run_json else None}")
    return _check(problems, f"{len(entry.files)} file(s) and {RECORD_NAME} match {source}")


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
