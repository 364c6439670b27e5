"""Publishing an output folder whole: written in a staging sibling, then renamed into place.

A reader (or a resumed command) sees either no folder or the finished one, never a half-written one:
the rename is atomic on one filesystem, which a sibling shares. The staging folder is removed when the
body raises, so a failed build leaves nothing behind. Layer 0: no torch.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def staging_path(out: Path) -> Path:
    """The staging sibling of `out` for this process: `.<name>.staging-<pid>` beside it."""
    return out.parent / f".{out.name}.staging-{os.getpid()}"


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` exists on this host (one of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_staging(out: Path) -> list[Path]:
    """Remove the staging siblings of `out` whose process is dead (a build killed with SIGKILL or by a
    power cut leaves `.<name>.staging-<pid>`); a live process's staging folder is left alone."""
    removed = []
    for staging in out.parent.glob(f".{out.name}.staging-*"):
        pid = staging.name.rpartition("-")[2]
        if pid.isdigit() and staging.is_dir() and not staging.is_symlink() and not pid_alive(int(pid)):
            shutil.rmtree(staging, ignore_errors=True)
            removed.append(staging)
    return removed


@contextmanager
def publish_dir(out: str | os.PathLike, *, replace: bool = False) -> Iterator[Path]:
    """Yield a fresh staging folder; when the body returns it becomes `out` by one rename.

    `out` must be absent or an empty directory (checked on entry, before the body does any work), unless
    `replace`: then an existing `out` (an earlier output that the caller has judged incomplete) is removed
    just before the rename. When the body raises, the staging folder is removed and `out` is untouched.
    """
    out = Path(out)
    if not replace and out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out}: already exists and is not an empty directory; choose a new output or remove it")
    staging = staging_path(out)
    shutil.rmtree(staging, ignore_errors=True)  # left by an earlier process with this pid that was killed
    remove_stale_staging(out)
    staging.mkdir(parents=True)
    try:
        yield staging
        if out.exists():
            if replace:
                shutil.rmtree(out)
            else:
                out.rmdir()  # checked empty on entry
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
