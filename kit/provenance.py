"""Input and source commitments: what a prepared job was made from, re-checked before training (layer 0).

"Source mismatches fail before training": preparation records every file's path, realpath and
sha256, plus a digest of the kit's own source; `check_commitments` re-hashes them and raises
`CommitmentMismatch` naming the file, the expected and the actual value. The decision to know: the
source digest covers every regular file of the package except caches and hidden files, so an edit
anywhere fails closed (docs/formats/adaptive-preparation.md, "adaptive-shards-inputs.json").
Layer 0: stdlib, kit.digest and kit.record only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import kit
from kit.digest import canonical_json, sha256_bytes, sha256_file
from kit.record import BYTES, MapOf, OneOf, Opt, Record, Seq, build, spec_field

COMMITMENTS_FORMAT = "kit.adaptive-shards-inputs/1"
_SKIPPED_SUFFIXES = (".pyc", ".pyo")


class CommitmentMismatch(ValueError):
    """A committed file or the kit's source differs from what preparation recorded."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FileCommitment(Record):
    """One file preparation read or wrote."""

    path: str = spec_field(str, doc="what a later check resolves (relative to the prepared folder for its own files)")
    realpath: str | None = spec_field(Opt(str), doc="the path with links resolved; null for a relocatable file")
    sha256: str = spec_field(str, doc="sha256 of its bytes")
    bytes: int = spec_field(BYTES, doc="its size")


@dataclass(frozen=True, slots=True, kw_only=True)
class ContractCommitment(FileCommitment):
    """The contract file, with the digest of its canonical JSON."""

    digest: str = spec_field(str, doc="the contract digest")


@dataclass(frozen=True, slots=True, kw_only=True)
class KitSource(Record):
    """The kit's source as preparation ran it."""

    package_dir: str = spec_field(str, doc="the package's directory")
    digest: str = spec_field(str, doc="sha256 of the canonical JSON of `files`")
    files: tuple[tuple[str, str], ...] = spec_field(Seq(Seq(str)), doc="sorted [relative path, sha256] rows")


@dataclass(frozen=True, slots=True, kw_only=True)
class Commitments(Record):
    """adaptive-shards-inputs.json (docs/formats/adaptive-preparation.md)."""

    FORMAT = COMMITMENTS_FORMAT
    format: str = spec_field(OneOf(COMMITMENTS_FORMAT), doc=COMMITMENTS_FORMAT)
    contract: ContractCommitment = spec_field(ContractCommitment, doc="the contract")
    inputs: Mapping[str, FileCommitment] = spec_field(MapOf(FileCommitment), doc="every file preparation read")
    prepared: Mapping[str, FileCommitment] = spec_field(MapOf(FileCommitment), doc="every file it wrote")
    kit_source: KitSource = spec_field(KitSource, doc="the kit's source")


def kit_package_dir() -> Path:
    """The directory of the `kit` package that is running now (the source that will train)."""
    return Path(kit.__file__).resolve().parent


def source_files(package_dir: str | os.PathLike) -> list[list[str]]:
    """Sorted rows [relative path, sha256] of the package's behaviour-affecting files."""
    root = Path(package_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: kit package directory not found")
    rows = []
    for dirpath, dirnames, filenames in os.walk(root):
        # Prune in place so os.walk does not descend into caches or hidden directories.
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
        for name in filenames:
            if name.startswith(".") or name.endswith(_SKIPPED_SUFFIXES):
                continue
            path = Path(dirpath) / name
            if path.is_file():
                rows.append([path.relative_to(root).as_posix(), sha256_file(path)])
    return sorted(rows)


def source_digest(package_dir: str | os.PathLike) -> tuple[str, list[list[str]]]:
    """(digest, rows) of the kit source under `package_dir`; see the module docstring."""
    rows = source_files(package_dir)
    return sha256_bytes(canonical_json(rows)), rows


def file_commitment(path: str | os.PathLike, recorded_path: str | None = None, relocatable: bool = False) -> dict:
    """{"path", "realpath", "sha256", "bytes"} of one file.

    `recorded_path` is what a later check resolves (default: the path as given). A relocatable file
    (the prepared directory's own outputs, recorded relative to it) has realpath null: it may move
    with its directory, and its hash still pins its bytes.
    """
    return commit_file(path, recorded_path, relocatable).to_json()


def commit_file(path: str | os.PathLike, recorded_path: str | None = None, relocatable: bool = False) -> FileCommitment:
    """`file_commitment`, declared."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: input file not found")
    return FileCommitment(path=recorded_path if recorded_path is not None else str(path),
                          realpath=None if relocatable else os.path.realpath(path), sha256=sha256_file(path),
                          bytes=path.stat().st_size)


def input_commitments(
    contract_path: str | os.PathLike,
    contract_digest: str,
    inputs: Mapping[str, str | os.PathLike],
    prepared_dir: str | os.PathLike,
    prepared_files: Mapping[str, str],
    package_dir: str | os.PathLike | None = None,
) -> dict:
    """The adaptive-shards-inputs.json object.

    inputs: name -> path of every file preparation read (recorded absolute, with realpath);
    prepared_files: name -> path relative to `prepared_dir` of every file preparation wrote;
    package_dir: the kit package whose source is committed (default: the running one).
    """
    package_dir = Path(package_dir) if package_dir is not None else kit_package_dir()
    digest, rows = source_digest(package_dir)
    prepared_dir = Path(prepared_dir)
    contract = commit_file(Path(contract_path).absolute())
    return Commitments(
        format=COMMITMENTS_FORMAT,
        contract=ContractCommitment(path=contract.path, realpath=contract.realpath, sha256=contract.sha256,
                                    bytes=contract.bytes, digest=contract_digest),
        inputs={name: commit_file(Path(p).absolute()) for name, p in sorted(inputs.items())},
        prepared={name: commit_file(prepared_dir / rel, rel, relocatable=True)
                  for name, rel in sorted(prepared_files.items())},
        kit_source=KitSource(package_dir=str(package_dir), digest=digest,
                             files=tuple((rel, sha) for rel, sha in rows)),
    ).to_json()


def _check_file(kind: str, name: str, entry: FileCommitment, resolve_path: Callable[[str], Path]) -> None:
    path = Path(resolve_path(entry.path))
    label = f"{kind} {name!r} ({path})"
    if not path.is_file():
        raise CommitmentMismatch(f"{label}: file missing; expected sha256 {entry.sha256} recorded at preparation")
    # The realpath is checked when the file is looked up where it was recorded; a caller that
    # relocates inputs on purpose (resolve_path maps them elsewhere) still has every hash checked.
    if entry.realpath is not None and str(path) == entry.path:
        actual_real = os.path.realpath(path)
        if actual_real != entry.realpath:
            raise CommitmentMismatch(f"{label}: resolves to {actual_real}; expected realpath {entry.realpath} "
                                     "recorded at preparation (a symlink was changed)")
    actual = sha256_file(path)
    if actual != entry.sha256:
        raise CommitmentMismatch(f"{label}: sha256 mismatch: expected {entry.sha256}, actual {actual} "
                                 "(changed after preparation; refusing before training)")


def _check_source(entry: KitSource | dict, package_dir: Path) -> None:
    """The kit source under `package_dir` against `entry` (a KitSource, or its JSON: kit.study.prepare gives it)."""
    entry = entry if isinstance(entry, KitSource) else build(entry, KitSource)
    digest, rows = source_digest(package_dir)
    if digest == entry.digest:
        return
    expected = dict(entry.files)
    actual = dict(rows)
    for rel in sorted(set(expected) | set(actual)):
        if expected.get(rel) != actual.get(rel):
            raise CommitmentMismatch(
                f"kit source file {rel!r} under {package_dir}: expected sha256 {expected.get(rel, 'absent')}, "
                f"actual {actual.get(rel, 'absent')} (kit source digest expected {entry.digest}, actual {digest}); "
                "the code that would train is not the code that prepared"
            )
    raise CommitmentMismatch(f"kit source under {package_dir}: digest expected {entry.digest}, actual {digest}")


def check_commitments(
    commitments: Commitments | dict,
    resolve_path: Callable[[str], Path] = Path,
    package_dir: str | os.PathLike | None = None,
) -> None:
    """Re-hash every committed file and the kit source; raise CommitmentMismatch on the first difference.

    `resolve_path` maps a recorded path to where it is now (e.g. `lambda p: prepared_dir / p`: relative
    prepared-file paths land in the prepared directory, absolute input paths stay as they are).
    `package_dir` defaults to the running kit package.
    """
    typed = commitments if isinstance(commitments, Commitments) else build(commitments, Commitments)
    if typed.format != COMMITMENTS_FORMAT:
        raise CommitmentMismatch(f"commitments: format {typed.format!r}; expected {COMMITMENTS_FORMAT!r}")
    _check_file("contract", "contract", typed.contract, resolve_path)
    for kind, files in (("input", typed.inputs), ("prepared file", typed.prepared)):
        for name, entry in sorted(files.items()):
            _check_file(kind, name, entry, resolve_path)
    _check_source(typed.kit_source, Path(package_dir) if package_dir is not None else kit_package_dir())
