"""The order in which `make test`'s two pytest-xdist workers receive the test files.

`make test` runs `pytest -n 2 --dist loadfile --no-loadscope-reorder`: each file runs whole on one worker
(its module fixtures are built once, and a file that writes a fixed repository path such as
build/test-gpu-wheels never runs against itself), and files are handed out in collection order as a
worker frees up. A few files take most of the suite's time; one of them started last would leave the
other worker idle at the end (xdist's own reordering sorts by number of tests, which put the 3-test
replay file near the end), so the workers collect them first, longest first. Everything else keeps
pytest's order. The list only affects balance: a stale or missing entry costs wall time, never a result.
"""

from __future__ import annotations

import os
from pathlib import Path

# Files by their time under `make test` on a 2-core x86 box with other load (seconds of worker time,
# setup included, from --durations=0), longest first. Paths relative to tests/.
LONGEST_FIRST = (
    "test_replay.py",                   # ~195: replays demo-seed, the tiny prepare and an arm
    "test_examples.py",                 # ~190: both examples/*.sh end to end
    "test_replicates_tiny.py",          # ~150: the tiny replicate path, plan to fresh finals (2026-12-05, loaded)
    "test_newcomer_training.py",        # ~70: resume, an aborted attempt, a study arm while it trains
    "test_report_first_screen.py",      # ~60: the medium page in headless Chromium at two widths
    "test_adaptive_netns.py",           # ~50: two network namespaces
    "test_report.py",                   # ~50: the report over runs/, in headless Chromium
    "test_checkpoint_training.py",      # ~50: multi-process resume, migration, kills
    "test_engine.py",                   # ~48: gloo workers against the oracle
    "test_numeric_profile.py",          # ~47: the probe under several thread counts
    "reliability/test_rank_faults.py",  # ~43
    "test_medium_pilot.py",             # ~41
    "test_integrity.py",                # ~35
    "test_worker_faults.py",            # ~27
    "test_torchrun.py",                 # ~27
    "test_digest.py",                   # ~25
    "test_seed.py",                     # ~24
    "test_study.py",                    # ~21
    "test_evidence.py",                 # ~19
    "test_readme_python.py",            # ~17
    "test_async_commit.py",             # ~16
)


def on_xdist_worker() -> bool:
    """True in a pytest-xdist worker process (which sets PYTEST_XDIST_WORKER); a plain run keeps its order."""
    return bool(os.environ.get("PYTEST_XDIST_WORKER"))


def longest_first(items: list, tests_dir: Path) -> list:
    """`items` (collected tests) with the files of LONGEST_FIRST first, in that order; a stable sort, so
    the tests inside a file and all other files keep their collected order."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def key(item) -> int:
        rel = Path(str(item.path)).resolve().relative_to(tests_dir.resolve()).as_posix()
        return rank.get(rel, len(LONGEST_FIRST))

    return sorted(items, key=key)
