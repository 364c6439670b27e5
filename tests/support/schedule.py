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

# Files by their serial time on an idle 2-core x86 box (seconds, measured with --durations; setup included),
# longest first. Paths relative to tests/.
LONGEST_FIRST = (
    "test_replay.py",                   # ~180: replays demo-seed, the tiny prepare and an arm
    "test_examples.py",                 # ~140: both examples/*.sh end to end
    "test_medium_pilot.py",             # ~40
    "test_checkpoint_training.py",      # ~35: multi-process resume, migration, kills
    "test_engine.py",                   # ~35: gloo workers against the oracle
    "test_report.py",                   # ~35: the rendered report in headless Chromium
    "test_adaptive_netns.py",           # ~30: two network namespaces
    "reliability/test_rank_faults.py",  # ~30
    "test_numeric_profile.py",          # ~28: the probe under several thread counts
    "test_worker_faults.py",            # ~20
    "test_integrity.py",                # ~20
    "test_study.py",                    # ~15
    "test_gpu_wheels.py",               # ~15
    "test_digest.py",                   # ~15
    "test_seed.py",                     # ~15
    "test_readme_python.py",            # ~12
    "test_torchrun.py",                 # ~11
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
