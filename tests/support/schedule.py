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

# Files by their worker time under `make test` on a 2-core x86 box (seconds, setup included, from --durations=0
# on 2026-12-06 with one other job running, so about 1.2x a quiet machine's), longest first; test_type_check.py
# as under `make test`, whose lint fills mypy's cache first. Paths relative to tests/.
LONGEST_FIRST = (
    "test_replay.py",                     # ~221: replays demo-seed, the tiny prepare and an arm
    "test_examples.py",                   # ~177: both examples/*.sh end to end
    "test_replicates_tiny.py",            # ~166: the tiny replicate path, plan to fresh finals
    "reliability/test_signals.py",        # ~94: signals to training runs
    "test_run_at_once.py",                # ~69
    "test_medium_pilot.py",               # ~66
    "test_checkpoint_training.py",        # ~62: multi-process resume, migration, kills
    "test_numeric_profile.py",            # ~61: the probe under several thread counts
    "test_report.py",                     # ~57: the report over runs/, in headless Chromium
    "test_adaptive_netns.py",             # ~56: two network namespaces
    "test_newcomer_training.py",          # ~55: resume, an aborted attempt, a study arm while it trains
    "test_digest.py",                     # ~54
    "reliability/test_rank_faults.py",    # ~53
    "test_own_model.py",                  # ~52
    "test_report_page.py",                # ~50
    "test_study_pilot.py",                # ~48
    "test_engine.py",                     # ~46: gloo workers against the oracle
    "test_integrity.py",                  # ~42
    "test_verify_repository.py",          # ~42
    "test_report_first_screen.py",        # ~41: the medium page in headless Chromium at two widths
    "test_update_levers.py",              # ~34
    "test_readme_python.py",              # ~31
    "reliability/test_locks_and_leftovers.py",  # ~30
    "test_archive.py",                    # ~28
    "test_newcomer_evidence.py",          # ~27
    "test_seed.py",                       # ~24
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
