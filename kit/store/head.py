"""HEAD and HEAD.lock of a checkpoint store: reading HEAD (it must name an existing manifest) and
the writers' lock (an O_CREAT|O_EXCL file holding {"host", "pid", "token"}; a dead writer's lock is
stale and is moved aside). Moving HEAD itself is `kit.store.commits._install`.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from kit.digest import canonical_json, loads_strict
from kit.record import Record, spec_field
from kit.store.manifest import HEAD_NAME, HEAD_RE, LOCK_NAME, CommitError, HeadLocked, commits_dir
from kit.store.objects import StoreError, host_tag, new_temp_path, process_alive_here, read_regular

UNREADABLE_LOCK_STALE_S = 60.0  # a lock file with no readable record older than this is a crashed writer's

# -- HEAD.lock: O_CREAT|O_EXCL file holding {"host", "pid", "token"} -----------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class LockHolder(Record):
    """The record in HEAD.lock: which writer holds it."""

    host: str = spec_field(str, doc="the writer's host tag")
    pid: int = spec_field(int, doc="its process id on that host")
    token: str = spec_field(str, doc="random, so that a writer releases only its own lock")


def _read_lock(lock: Path) -> LockHolder | None:
    """The holder, or None for a lock with no readable record (being written, or a crashed writer's)."""
    try:
        return LockHolder.from_json(loads_strict(read_regular(lock, "the writers' lock", 4096), str(lock)), str(lock))
    except (FileNotFoundError, ValueError):  # StoreError (a link, a special file) and ContractError are ValueErrors
        return None


def _lock_is_stale(lock: Path, holder: LockHolder | None) -> bool:
    if holder is not None:
        return not process_alive_here(holder.host, holder.pid)
    try:  # created but never written: the writer died between open and write
        return time.time() - lock.stat().st_mtime > UNREADABLE_LOCK_STALE_S
    except FileNotFoundError:
        return False


def _break_stale_lock(home: Path, lock: Path, holder: LockHolder | None) -> None:
    # Rename, not unlink, so that of two processes breaking the same stale lock only one succeeds;
    # if what was renamed turns out to be a fresh lock taken meanwhile, put it back.
    aside = new_temp_path(home, "stale-lock")
    try:
        os.rename(lock, aside)
    except FileNotFoundError:
        return
    if _read_lock(aside) != holder:
        try:
            os.link(aside, lock)
        except FileExistsError:
            pass
    aside.unlink(missing_ok=True)


def _acquire_lock(home: Path, timeout_s: float) -> str:
    lock = home / LOCK_NAME
    token = uuid.uuid4().hex
    record = canonical_json({"host": host_tag(), "pid": os.getpid(), "token": token})
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while True:
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _read_lock(lock)
            if _lock_is_stale(lock, holder):
                _break_stale_lock(home, lock, holder)
                continue
            if time.monotonic() >= deadline:
                raise HeadLocked(
                    f"{lock}: held by {holder.to_json() if holder else 'an unreadable record'} for over {timeout_s} s; if that "
                    f"process is gone, delete the file or run `kit checkpoint gc`"
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
            continue
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(record)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            # The lock is ours (O_EXCL) but holds no record (e.g. disk full): left in place it would
            # block every writer until it aged into staleness, so remove it before reporting the error.
            lock.unlink(missing_ok=True)
            raise
        return token


def _release_lock(home: Path, token: str) -> None:
    lock = home / LOCK_NAME
    holder = _read_lock(lock)
    if holder is not None and holder.token == token:
        lock.unlink(missing_ok=True)


# -- reading -------------------------------------------------------------------------------------


def read_head(home: str | os.PathLike) -> str | None:
    """The full root HEAD names (None when there is no HEAD yet); it must name an existing manifest."""
    head = Path(home) / HEAD_NAME
    try:
        data = read_regular(head, "HEAD", 4096)  # 64 hex digits and a newline; HEAD -> /dev/zero is refused
    except FileNotFoundError:
        return None
    except StoreError as e:
        raise CommitError(str(e)) from None
    if not HEAD_RE.fullmatch(data):
        raise CommitError(f"{head}: expected 64 lowercase hex characters and a newline, got {data[:80]!r}")
    root = data[:64].decode("ascii")
    manifest = commits_dir(Path(home)) / f"{root}.json"
    if not manifest.is_file():
        raise CommitError(f"{head}: names commit {root} but its manifest {manifest} does not exist")
    return root


