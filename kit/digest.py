"""Canonical JSON and sha256 digests: the one way every hashed record of the kit is serialised.

Canonical JSON is `json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
allow_nan=False)` encoded as ASCII. Readers refuse duplicate keys and non-finite numbers, so a
file that parses has exactly one canonical form and therefore exactly one digest.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import stat
from pathlib import Path
from typing import Any

HASH_CHUNK = 1 << 22  # 4 MiB reads keep hashing of multi-GB objects streaming


class DigestMismatch(ValueError):
    """A file's bytes do not hash to the digest that names or pins it."""


class NumericProfileError(RuntimeError):
    """A digest or root of computed values was asked for outside the kit's numeric profile, or the
    profile could not take effect (torch computed first): such a number would depend on the CPU."""


# The numeric profile in force in this process (its name), set by kit.numerics.apply(). It lives here,
# below torch, so that the functions that hash computed values (seed digests, checkpoint roots) can
# refuse cheaply without importing torch.
_profile_in_force: str | None = None


def mark_numeric_profile(name: str) -> None:
    """Called by kit.numerics.apply() once the profile has taken effect in this process."""
    global _profile_in_force
    _profile_in_force = name


def require_numeric_profile(what: str) -> None:
    """Refuse to compute `what` (a digest or a root of computed values) before kit.numerics.apply()."""
    if _profile_in_force is None:
        raise NumericProfileError(
            f"{what}: the kit's numeric profile is not in force in this process, so the value could depend on "
            f"the CPU; call kit.numerics.apply() first, before any torch computation (the `kit` command, the "
            f"launcher's workers and the notebook runtime do it for you)")


def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode(
        "ascii"
    )


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_json(obj: Any) -> str:
    return sha256_bytes(canonical_json(obj))


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


# the most bytes a file of the evidence may hold when read whole (a record, an index, a ledger): a reader given a
# link to /dev/zero or a file grown past it refuses in one line instead of reading without end
MAX_EVIDENCE_BYTES = 256 << 20


class BoundedReadError(ValueError):
    """A file that may not be read: a link where none is allowed, not a regular file, or larger than its cap."""


@contextlib.contextmanager
def _open_regular(path: str | os.PathLike, cap: int, follow_links: bool):
    """The regular file `path` opened for reading (never blocking on a FIFO, never following a link unless
    follow_links) with its size checked against `cap`; BoundedReadError naming it otherwise."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | (0 if follow_links else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: file not found") from None
    except OSError as e:
        if not follow_links and os.path.islink(path):
            raise BoundedReadError(f"{path}: a symbolic link; expected the file itself (a link is not evidence)") from None
        raise BoundedReadError(f"{path}: cannot be read ({e.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise BoundedReadError(f"{path}: not a regular file (a device, FIFO or folder); expected a file")
        if st.st_size > cap:
            raise BoundedReadError(f"{path}: {st.st_size} bytes; at most {cap} are read from such a file")
        yield f, st.st_size


def read_bounded(path: str | os.PathLike, cap: int = MAX_EVIDENCE_BYTES, follow_links: bool = True) -> bytes:
    """The bytes of the regular file `path`, read at most `cap` of them: a file that is not regular (a device,
    a FIFO: never blocks), larger than `cap`, or (with follow_links=False) a symbolic link is refused with one
    line naming it; FileNotFoundError as open's."""
    with _open_regular(path, cap, follow_links) as (f, size):
        data = f.read(min(cap, size) + 1)  # one more byte than stated: a file still growing is seen
        if len(data) > size:
            data += f.read(cap + 1 - len(data))
    if len(data) > cap:
        raise BoundedReadError(f"{path}: grew past {cap} bytes while read; at most {cap} are read from such a file")
    return data


def sha256_regular(path: str | os.PathLike, cap: int = MAX_EVIDENCE_BYTES, follow_links: bool = False) -> tuple[int, str]:
    """(size, sha256) of the regular file `path`, streamed, at most `cap` bytes; a link (unless follow_links), a
    device or FIFO (never blocks) or a larger file is refused with BoundedReadError naming it."""
    h, n = hashlib.sha256(), 0
    with _open_regular(path, cap, follow_links) as (f, _):
        while chunk := f.read(min(HASH_CHUNK, cap + 1 - n)):
            n += len(chunk)
            if n > cap:
                raise BoundedReadError(f"{path}: grew past {cap} bytes while read")
            h.update(chunk)
    return n, h.hexdigest()


def _refuse_duplicates(pairs: list[tuple[str, Any]], source: str) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"{source}: duplicate key {key!r}; canonical records have unique keys")
        out[key] = value
    return out


def _refuse_constant(name: str, source: str):
    raise ValueError(f"{source}: non-finite number {name} is not allowed in canonical JSON")


MAX_JSON_DEPTH = 64  # no file the kit reads nests deeper than 8; `[` * 100000 must be refused, not recursed into


def _check_tree(obj: Any, source: str, overflowed: bool) -> None:
    """Refuse nesting beyond MAX_JSON_DEPTH and (when the parser saw one) a number that overflowed
    to infinity (`1e999`), naming the field."""
    stack = [(obj, "", 1)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{source}: field {path or '(top level)'!r} = {value}: the number overflows; "
                             "expected a finite number")
        if isinstance(value, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                raise ValueError(f"{source}: field {path!r} is nested {depth} levels deep; expected at most "
                                 f"{MAX_JSON_DEPTH}")
            if isinstance(value, dict):
                children = ((f"{path}.{k}" if path else k, v) for k, v in value.items())
            else:
                children = ((f"{path}[{i}]", v) for i, v in enumerate(value))
            stack.extend((v, where, depth + 1) for where, v in children if overflowed or isinstance(v, (dict, list)))


def loads_strict(text: str | bytes, source: str = "<json>") -> Any:
    """Parse JSON refusing duplicate keys, NaN/Infinity, numbers that overflow (1e999) and nesting
    deeper than MAX_JSON_DEPTH; errors name `source` (and the field)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{source}: not UTF-8 ({e})") from None
    overflowed = []

    def parse_float(literal: str) -> float:
        value = float(literal)
        if math.isinf(value):
            overflowed.append(literal)
        return value

    try:
        obj = json.loads(
            text,
            object_pairs_hook=lambda pairs: _refuse_duplicates(pairs, source),
            parse_constant=lambda name: _refuse_constant(name, source),
            parse_float=parse_float,
        )
    except json.JSONDecodeError as e:
        raise ValueError(f"{source}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except RecursionError:  # json's parser recurses per nesting level; a garbage file must still be a ValueError
        raise ValueError(f"{source}: invalid JSON: nested too deeply to parse; expected at most "
                         f"{MAX_JSON_DEPTH} levels") from None
    if isinstance(obj, (dict, list)) and (overflowed or text.count("[") + text.count("{") > MAX_JSON_DEPTH):
        _check_tree(obj, source, bool(overflowed))
    return obj


def load_json_strict(path: str | os.PathLike, cap: int = MAX_EVIDENCE_BYTES, follow_links: bool = True) -> Any:
    """Strict JSON (loads_strict) of a regular file of at most `cap` bytes (read_bounded)."""
    return loads_strict(read_bounded(path, cap, follow_links), str(path))


def load_canonical_json(path: str | os.PathLike, follow_links: bool = True) -> Any:
    """Load a file that must be byte-identical to its canonical serialisation (manifests, records)."""
    path = Path(path)
    data = read_bounded(path, MAX_EVIDENCE_BYTES, follow_links)
    obj = loads_strict(data, str(path))
    if canonical_json(obj) != data:
        raise ValueError(f"{path}: not in canonical JSON form (key order, spacing or trailing bytes differ)")
    return obj


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write to a temporary sibling, fsync, then rename: readers see the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:  # a full disk: no half-written temporary stays, and the error names the file
        tmp.unlink(missing_ok=True)
        raise OSError(e.errno, e.strerror, str(path)) from e
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_files_atomic(files: dict[Path, bytes]) -> None:
    """Write several files all or none: each to a temporary sibling (fsynced), and only when every one is
    complete are they renamed into place. On an error (a full disk) every temporary is removed, the files
    they would replace stay as they were, and the OSError names the file and the cause."""
    done: list[tuple[Path, Path]] = []
    try:
        for path, data in files.items():
            path = Path(path)
            tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
            done.append((tmp, path))
            try:
                with open(tmp, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as e:
                full = " (the disk is full)" if e.errno in (errno.ENOSPC, errno.EDQUOT) else ""
                raise OSError(e.errno, f"{path}: could not write it: {e.strerror}{full}; removed what was written, "
                              f"{len(files)} file(s) left as they were") from e
    except BaseException:
        for tmp, _ in done:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, path in done:
        os.replace(tmp, path)
    for directory in {path.parent for _, path in done}:
        fsync_dir(directory)


def fsync_dir(directory: str | os.PathLike) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_canonical_json(path: str | os.PathLike, obj: Any) -> str:
    """Atomically write `obj` as canonical JSON; returns the sha256 of the written bytes."""
    data = canonical_json(obj)
    write_bytes_atomic(path, data)
    return sha256_bytes(data)
