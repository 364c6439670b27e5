"""A store in use: a training run holds a shared `flock` on HOME/in-use.lock while it can write commits,
and `kit checkpoint gc --objects` takes it exclusively (without waiting) or refuses. A worker's objects exist
before the manifest that names them, so collecting unreferenced objects during a run would delete the next
commit's objects. The lock is the kernel's: it goes with the process that held it, even after `kill -9`.
The file is never removed (removing a lock file while a process holds it would let a second holder in).
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path

from kit.store.objects import StoreError

IN_USE_NAME = "in-use.lock"


class StoreInUse(StoreError):
    """The store is held by a running training; the message says what to run when it has ended."""


def _open(home: Path) -> int:
    return os.open(home / IN_USE_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)


@contextmanager
def held(home: str | os.PathLike):
    """Hold `home` (shared: several runs may read and commit; gc waits for all) while the body runs."""
    fd = _open(Path(home))
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


def in_use_by(home: str | os.PathLike) -> str | None:
    """None when no run holds `home` (or it has no in-use.lock), else who holds it: "pid N[, M]" from the
    kernel's lock table (/proc/locks) where readable, else "a running training". The lock file is only read."""
    path = Path(home) / IN_USE_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            st = os.fstat(fd)
            pids = _lock_holders(st.st_dev, st.st_ino)
            return f"pid {', '.join(map(str, pids))}" if pids else "a running training"
        return None  # free: released when the descriptor closes
    finally:
        os.close(fd)


def _lock_holders(dev: int, ino: int) -> list[int]:
    """Pids /proc/locks names for a FLOCK on the file (dev, ino); [] where the table is not readable."""
    want = f"{os.major(dev):02x}:{os.minor(dev):02x}:{ino}"
    pids = set()
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == want and fields[4].isdigit():
            pids.add(int(fields[4]))
    return sorted(pids)


@contextmanager
def exclusive(home: str | os.PathLike, what: str):
    """`home` held by no run while the body runs; else StoreInUse naming `what` was refused."""
    home = Path(home)
    fd = _open(home)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreInUse(f"{home / IN_USE_NAME}: the store is in use by a running training; {what} refused "
                             "(it would delete objects the run is committing); run it again when the run "
                             "has ended") from None
        yield
    finally:
        os.close(fd)
