"""The repository stays light (issue: evidence that stays light): the tracked files within their budget, and
no bytes stored twice under runs/. On failure it prints the ten largest folders."""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict

from support.models import REPO

sys.path.insert(0, str(REPO / "tools"))
from repo_size import TRACKED_BUDGET, tracked_sizes

DUPLICATE_BUDGET = 200_000  # bytes under runs/ held by a second (third...) copy of the same file


def test_tracked_files_stay_within_the_budget():
    sizes = tracked_sizes(REPO, depth=2)
    total = sum(sizes.values())
    largest = "\n".join(f"{n:>12,}  {name}" for name, n in sorted(sizes.items(), key=lambda kv: -kv[1])[:10])
    assert total <= TRACKED_BUDGET, f"tracked files {total:,} bytes > {TRACKED_BUDGET:,}; the largest folders:\n{largest}"


def test_no_file_under_runs_is_stored_twice_beyond_the_budget():
    listing = subprocess.run(["git", "-C", str(REPO), "ls-tree", "-r", "-l", "-z", "HEAD", "runs/"],
                             capture_output=True, check=True).stdout.decode()
    by_blob = defaultdict(list)
    for entry in filter(None, listing.split("\0")):
        meta, path = entry.split("\t", 1)
        _mode, _kind, blob, size = meta.split()
        by_blob[blob].append((path, int(size)))
    copies = {blob: paths for blob, paths in by_blob.items() if len(paths) > 1}
    extra = sum(paths[0][1] * (len(paths) - 1) for paths in copies.values())
    worst = sorted(copies.values(), key=lambda p: -p[0][1] * (len(p) - 1))[:5]
    assert extra <= DUPLICATE_BUDGET, f"{extra:,} duplicate bytes under runs/; the largest: {worst}"


def test_the_size_tool_counts_what_git_counts():
    """tools/repo_size.py's per-folder sum is git's own total (the number the budget is stated in)."""
    out = subprocess.run(["git", "-C", str(REPO), "ls-tree", "-r", "-l", "HEAD"], capture_output=True, text=True,
                         check=True).stdout
    total = sum(int(line.split()[3]) for line in out.splitlines() if line.split()[3] != "-")
    assert sum(tracked_sizes(REPO, depth=1).values()) == total


def test_every_current_notebook_figure_is_a_palette_png_readable_at_1400_px():
    """Executed notebooks of the current runs carry their figures as palette PNGs (colour type 3, written by
    kit.evidence.report.format.png_bytes), no wider than the 1400 px a reader's page has."""
    import base64
    import json
    import struct

    bad = []
    for nb_path in sorted((REPO / "runs").glob("*/*.ipynb")):
        for cell in json.loads(nb_path.read_text())["cells"]:
            for out in cell.get("outputs", []):
                png = out.get("data", {}).get("image/png")
                if png is None:
                    continue
                raw = base64.b64decode(png)
                width, _height = struct.unpack(">II", raw[16:24])
                if raw[25] != 3 or width > 1400:
                    bad.append(f"{nb_path.relative_to(REPO)}: colour type {raw[25]}, {width} px wide")
    assert not bad, bad[:5]
