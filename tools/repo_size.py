"""What the repository weighs, and what a GPU host call carries.

    python tools/repo_size.py            # tracked bytes by top folder, and the call's total
    python tools/repo_size.py --check    # exit 1 when the call would exceed the device tool's limit

The tracked bytes are git's (`git ls-tree -r -l HEAD`: the committed files, as a clone has them); a
device call also carries `build/gpu-wheels` and `build/bundle` (docs/gpu-hosts.md, "Sizes"), measured on
disk. The budgets: tracked files at most TRACKED_BUDGET (tests/test_repo_size.py enforces it in CI), and a
call at most CALL_LIMIT, the edge the device tool refused past (64 million bytes, measured 2026-12-03).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACKED_BUDGET = 40_000_000
CALL_LIMIT = 64_000_000
CARRIED = ("build/gpu-wheels", "build/bundle")


def tracked_sizes(repo: Path = REPO, depth: int = 1) -> dict[str, int]:
    """Bytes of the files tracked at HEAD, per folder of the given depth (files at the top: their own name)."""
    out = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "-l", "-z", "HEAD"], capture_output=True,
                         check=True).stdout.decode()
    sizes: Counter[str] = Counter()
    for entry in filter(None, out.split("\0")):
        meta, path = entry.split("\t", 1)
        size = meta.split()[3]
        if size == "-":  # a submodule
            continue
        parts = path.split("/")
        sizes["/".join(parts[:depth]) if len(parts) > depth else path] += int(size)
    return dict(sizes)


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()) if path.is_dir() else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--check", action="store_true", help="exit 1 when a GPU host call would pass its limit")
    ap.add_argument("--depth", type=int, default=2, help="folder depth of the table (default 2)")
    a = ap.parse_args(argv)
    sizes = tracked_sizes(REPO, a.depth)
    tracked = sum(sizes.values())
    for name, n in sorted(sizes.items(), key=lambda kv: -kv[1])[:15]:
        print(f"{n:>12,}  {name}")
    print(f"{tracked:>12,}  tracked files at HEAD (budget {TRACKED_BUDGET:,})")
    carried = {c: folder_bytes(REPO / c) for c in CARRIED}
    for c, n in carried.items():
        print(f"{n:>12,}  {c}{'' if n else ' (absent: build it before a campaign, docs/gpu-hosts.md)'}")
    call = tracked + sum(carried.values())
    print(f"{call:>12,}  a GPU host call (tracked + {' + '.join(CARRIED)}), limit {CALL_LIMIT:,}: "
          f"{'fits' if call <= CALL_LIMIT else 'REFUSED'} ({CALL_LIMIT - call:,} bytes left)")
    return 1 if a.check and call > CALL_LIMIT else 0


if __name__ == "__main__":
    sys.exit(main())
