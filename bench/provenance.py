"""Which code a benchmark record came from: the git commit and, independently of git, the digest of
the `kit` source that ran.

On the device host the repository arrives as a copy of the working tree whose `.git` may be stale
(it read an older commit than the tree in every call of 2026-11-30), so `git rev-parse` alone can
name the wrong commit. `kit_source_sha256` is kit.provenance.source_digest of the running `kit`
package, the same digest the prepared jobs commit to: a reader recomputes it from any checkout
(`python -c "from kit.provenance import source_digest, kit_package_dir; print(source_digest(kit_package_dir())[0])"`)
to find the commits whose `kit/` matches. KIT_GIT_COMMIT / KIT_GIT_DIRTY override the git fields
when the caller knows better (pass the commit in the device command)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def git_commit() -> dict:
    """{"commit", "dirty", "source", "kit_source_sha256"} of the code running now."""
    from kit.provenance import kit_package_dir, source_digest

    commit = os.environ.get("KIT_GIT_COMMIT")
    dirty = os.environ.get("KIT_GIT_DIRTY")
    if commit is None:
        try:
            commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                                    timeout=30, check=False).stdout.strip() or None
            if dirty is None and commit:
                st = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True, timeout=30, check=False)
                dirty = "1" if st.stdout.strip() else "0"
        except (OSError, subprocess.SubprocessError):
            commit = None
    return {"commit": commit, "dirty": None if dirty is None else dirty == "1",
            "source": "env KIT_GIT_COMMIT" if os.environ.get("KIT_GIT_COMMIT") else "git rev-parse",
            "kit_source_sha256": source_digest(kit_package_dir())[0]}
