"""Paths that a record names (a prepared job's role files, a study's prepared files): confined to the
record's folder (layer 0, no torch).

A prepared.json is input like any other: with its commitments re-hashed, a role file of `/dev/zero`
or `../outside.jsonl` would otherwise be read (and trained on). A named file must be a relative path
without `..`, stay inside the folder once links are resolved, and be a regular file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath


def inside(folder: str | os.PathLike, name: object, source: str) -> Path:
    """`folder / name`, refused (ValueError naming `source`, the field and the name) unless it is a
    regular file inside `folder`; a missing file passes (its reader says it is missing)."""
    folder = Path(folder)
    parts = PurePosixPath(name).parts if isinstance(name, str) else ()
    if not isinstance(name, str) or not parts or PurePosixPath(name).is_absolute() or ".." in parts or "\\" in name or "\0" in name:
        raise ValueError(f"{source} = {name!r}: expected a relative file name inside {folder} (no '..', "
                         "not absolute)")
    path = folder / name
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return path
    if not path.resolve().is_relative_to(folder.resolve()) or not stat.S_ISREG(mode):
        raise ValueError(f"{source} = {name!r}: {path} is a link or not a regular file; expected a regular "
                         f"file inside {folder}")
    return path
