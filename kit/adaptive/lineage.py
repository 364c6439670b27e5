"""The update logs of a checkpoint home's lineage, referenced rather than copied.

A migrated or grown run continues a lineage begun in another home: its per-update numbers (loss curves,
the B replay check that every `B.replay_a` record was trained in phase A) need the source home's update
logs too. They used to be copied into every attempt folder (`inherited-<attempt>-updates.jsonl`), so a
campaign's homes held the same megabytes several times. Now an attempt records them in
`attempts/<attempt>/inherited.json` (docs/formats/adaptive-homes.md, "inherited.json"): per log, the source home relative
to this home, the attempt and file names there, and the file's sha256 and size. Readers go through
`lineage_logs`, which yields the same (name, text) sequence the copies gave, in the same order, resolving
references recursively and refusing a referenced file whose bytes changed. Homes written before this
change keep their copies, which are read as they are.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from kit.digest import load_json_strict, write_canonical_json
from kit.record import ContractError, Omittable, OneOf, Record, Seq, spec_field

INHERITED_NAME = "inherited.json"
INHERITED_FORMAT = "kit-inherited-logs/1"
_LOG_SUFFIX = "updates.jsonl"


class LineageError(ValueError):
    """A referenced update log is missing or its bytes changed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class InheritedLog(Record):
    """One update log an attempt references (docs/formats/adaptive-homes.md, "inherited.json"). Its digest and
    size are Omittable here because `_read_checked` refuses a missing or changed one with its own message."""

    name: str = spec_field(str, doc="the log's name in this attempt (inherited-<attempt>-<name>)")
    home: str = spec_field(str, doc="the home that holds it, relative to this home")
    attempt: str = spec_field(str, doc="the attempt there")
    file: str = spec_field(str, doc="the file's name there")
    sha256: str | None = spec_field(Omittable(str))
    size: int | None = spec_field(Omittable(int))


@dataclass(frozen=True, slots=True, kw_only=True)
class InheritedLogs(Record):
    FORMAT = INHERITED_FORMAT
    format: str = spec_field(OneOf(INHERITED_FORMAT))
    logs: tuple[InheritedLog, ...] = spec_field(Seq(InheritedLog))


@dataclass(frozen=True, slots=True)
class _Source:
    """A log a new attempt inherits: its name there and the file that holds its bytes."""

    name: str
    path: Path


def _own_logs(attempt_dir: Path) -> list[tuple[str, Path]]:
    return [(p.name, p) for p in attempt_dir.iterdir()
            if p.name.endswith(_LOG_SUFFIX) and p.is_file() and not p.is_symlink()]


def _referenced(attempt_dir: Path) -> list[tuple[str, Path, InheritedLog]]:
    path = attempt_dir / INHERITED_NAME
    if not path.is_file():
        return []

    try:
        rec = InheritedLogs.from_json(load_json_strict(path), str(path))
    except ContractError as error:
        raise LineageError(f"{error} (an inherited.json names the logs an attempt references)") from None
    out = []
    for i, e in enumerate(rec.logs):
        for k, value in (("attempt", e.attempt), ("file", e.file)):
            if "/" in value or value in ("", ".", ".."):
                raise LineageError(f"{path}: logs[{i}].{k} {value!r} must be a plain name")
        home = (attempt_dir.parent.parent.resolve() / e.home).resolve()
        out.append((e.name, home / "attempts" / e.attempt / e.file, e))
    return out


def _read_checked(path: Path, entry: InheritedLog, where: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise LineageError(f"{where / INHERITED_NAME}: log {entry.name!r} refers to {path}, which cannot be "
                           f"read ({e.strerror}); expected the source home of this lineage beside this home") from e
    if hashlib.sha256(data).hexdigest() != entry.sha256 or len(data) != entry.size:
        raise LineageError(f"{where / INHERITED_NAME}: log {entry.name!r} at {path} no longer has the recorded "
                           f"sha256 and size; expected the bytes the attempt referenced")
    return data.decode()


def lineage_logs(home: str | os.PathLike) -> Iterator[tuple[str, str, str]]:
    """(attempt, log name, text) of every update log a home holds or references, in the order a sorted glob
    of `attempts/*/*updates.jsonl` gave when inherited logs were copies: attempts by name, and inside an
    attempt the logs by name (an inherited one is named `inherited-<its attempt>-<its name>`)."""
    attempts = Path(home) / "attempts"
    if not attempts.is_dir():
        return
    for attempt_dir in sorted(p for p in attempts.iterdir() if p.is_dir() and not p.is_symlink()):
        items: list[tuple[str, Path | tuple[Path, InheritedLog]]] = [(name, path) for name, path in _own_logs(attempt_dir)]
        items += [(name, (path, entry)) for name, path, entry in _referenced(attempt_dir)]
        for name, what in sorted(items, key=lambda x: x[0]):
            if isinstance(what, Path):
                yield attempt_dir.name, name, what.read_text()
            else:
                path, entry = what
                yield attempt_dir.name, name, _read_checked(path, entry, attempt_dir)


def lineage_rows(home: str | os.PathLike) -> Iterator[dict]:
    """Every update row of a home's lineage (see lineage_logs), in log order."""
    for _attempt, _name, text in lineage_logs(home):
        for line in text.splitlines():
            yield json.loads(line)


def _sources(source_home: Path) -> list[_Source]:
    """The logs a new attempt inherits from `source_home`: its own logs and, transitively, the ones it
    references, each resolved to the home that holds the bytes."""
    attempts = source_home / "attempts"
    out: list[_Source] = []
    if not attempts.is_dir():
        return out
    for attempt_dir in sorted(p for p in attempts.iterdir() if p.is_dir() and not p.is_symlink()):
        for name, path in sorted(_own_logs(attempt_dir)):
            out.append(_Source(f"inherited-{attempt_dir.name}-{name}", path))
        for name, path, entry in sorted(_referenced(attempt_dir), key=lambda x: x[0]):
            _read_checked(path, entry, attempt_dir)
            out.append(_Source(f"inherited-{attempt_dir.name}-{name}", path))
    return out


def inherit_logs(source_home: str | os.PathLike, attempt_dir: str | os.PathLike) -> list[dict]:
    """Record in `attempt_dir/inherited.json` the update logs of `source_home`'s lineage, by reference.
    Returns the entries written (none, and no file, when the source has no logs)."""
    attempt_dir = Path(attempt_dir)
    home = attempt_dir.parent.parent
    entries = []
    for src in _sources(Path(source_home)):
        path = src.path
        data = path.read_bytes()
        src_home = path.parent.parent.parent
        entries.append(InheritedLog(name=src.name, home=os.path.relpath(src_home.resolve(), home.resolve()),
                                    attempt=path.parent.name, file=path.name,
                                    sha256=hashlib.sha256(data).hexdigest(), size=len(data)).to_json())
    if entries:
        write_canonical_json(attempt_dir / INHERITED_NAME, {"format": INHERITED_FORMAT, "logs": entries})
    return entries


@dataclass(frozen=True, slots=True, kw_only=True)
class PortableLog(Record):
    """An inherited update log as it travels to rank 0 over the group (torchrun: JSON)."""

    path: str = spec_field(str, doc="where the source host holds it")
    sha256: str = spec_field(str)
    text: str = spec_field(str, doc="its bytes, copied where rank 0's host lacks them")


def portable_logs(source_home: str | os.PathLike) -> dict[str, PortableLog]:
    """For torchrun: the inherited logs by name, so that rank 0 can reference a file its own host holds with
    those bytes and copy the text of one that only another host has."""
    out = {}
    for src in _sources(Path(source_home)):
        data = src.path.read_bytes()
        out[src.name] = PortableLog(path=str(src.path.resolve()), sha256=hashlib.sha256(data).hexdigest(),
                                    text=data.decode())
    return out


def write_portable_logs(logs: Mapping[str, PortableLog], attempt_dir: str | os.PathLike) -> None:
    """Rank 0's side of portable_logs: a reference where this host holds the same bytes at the same path,
    a copy (the old form, read as it is) where it does not."""
    attempt_dir = Path(attempt_dir)
    home = attempt_dir.parent.parent
    entries = []
    for name, log in sorted(logs.items()):
        path = Path(log.path)
        try:
            same = path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == log.sha256
        except OSError:
            same = False
        if same:
            data = path.read_bytes()
            entries.append({"name": name, "home": os.path.relpath(path.parent.parent.parent, home.resolve()),
                            "attempt": path.parent.name, "file": path.name, "sha256": log.sha256,
                            "size": len(data)})
        else:
            (attempt_dir / name).write_text(log.text)
    if entries:
        write_canonical_json(attempt_dir / INHERITED_NAME, {"format": INHERITED_FORMAT, "logs": entries})
