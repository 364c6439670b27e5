"""Every test file has exactly one tier (tests/support/tiers.py), the markers are registered, the unit tier
reads no committed evidence, and a file without a tier stops collection naming the file and the fix."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from support.tiers import SLOW, SLOW_FILES, SLOW_TESTS, TIER_NAMES, TIERS, UNIT, NoTier, tier_of

TESTS = Path(__file__).resolve().parent

# What reading the committed evidence looks like in a test file: the repository's runs/, reports/ or
# ledger/ joined to its root, or support.evidence.evidence_path (committed runs, archived ones included).
READS_EVIDENCE = re.compile(r'(\b(REPO|ROOT)|parents\[1\]\)?)\s*/\s*"(runs|reports|ledger)\b|\bevidence_path\(')
# Unit files that name those paths without reading them: test_ledger_scope.py only passes REPO / "runs"
# and the committed ledger's path to kit.demo.demo_ledger, which compares paths; this file's examples.
NAMES_EVIDENCE_WITHOUT_READING = {"test_ledger_scope.py", "test_tiers.py"}


def test_every_test_file_has_exactly_one_tier_and_the_table_lists_no_other_file():
    on_disk = {p.relative_to(TESTS).as_posix() for p in TESTS.rglob("test_*.py")}
    assert sorted(on_disk - set(TIERS)) == [], "test files without a tier: add them to tests/support/tiers.py"
    assert sorted(set(TIERS) - on_disk) == [], "tiers.py lists files that do not exist"
    assert {name: tiers for name, tiers in TIERS.items() if len(tiers) != 1} == {}


def test_the_four_tiers_and_slow_are_the_markers_pyproject_registers():
    config = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    registered = [line.split(":")[0] for line in config["markers"]]
    assert registered == [*TIER_NAMES, SLOW]
    assert {t for tiers in TIERS.values() for t in tiers} == set(TIER_NAMES)  # no tier left empty


def test_no_unit_file_reads_the_committed_evidence():
    unit = sorted(name for name, tiers in TIERS.items() if tiers == [UNIT])
    reading = [name for name in unit if READS_EVIDENCE.search((TESTS / name).read_text())]
    assert sorted(reading) == sorted(NAMES_EVIDENCE_WITHOUT_READING)


def test_the_evidence_pattern_sees_each_way_a_test_reads_runs_reports_and_the_ledger():
    for line in ('REPO / "runs" / "demo-seed"', 'ROOT / "runs/seed-small"', 'REPO / "reports" / "medium"',
                 'REPO / "ledger" / "exposed.jsonl"', 'Path(__file__).resolve().parents[1] / "runs" / "x"',
                 'evidence_path("medium-seed")'):
        assert READS_EVIDENCE.search(line), line
    for line in ('tmp_path / "runs"', 'out / "ledger" / "exposed.jsonl"', 'REPO / "contracts"', 'REPO / "runsx"'):
        assert not READS_EVIDENCE.search(line), line


def test_a_file_without_exactly_one_tier_is_refused_naming_the_file_and_the_fix(tmp_path, monkeypatch):
    assert tier_of(TESTS / "test_tiers.py", TESTS) == UNIT
    assert tier_of(TESTS / "reliability" / "test_signals.py", TESTS) == "e2e"
    with pytest.raises(NoTier, match=r"^tests/sub/test_new\.py: no tier in tests/support/tiers\.py; list it in "
                                     r"exactly one of UNIT_FILES, E2E_FILES, EVIDENCE_FILES, CAMPAIGN_FILES$"):
        tier_of(TESTS / "sub" / "test_new.py", TESTS)
    monkeypatch.setitem(TIERS, "test_twice.py", ["unit", "e2e"])
    with pytest.raises(NoTier, match=r"^tests/test_twice\.py: 2 tiers \(unit, e2e\) in tests/support/tiers\.py"):
        tier_of(TESTS / "test_twice.py", TESTS)


def test_collection_marks_each_test_with_its_files_tier(request):
    assert [m.name for m in request.node.iter_markers() if m.name in TIER_NAMES] == [UNIT]


def test_every_slow_entry_names_a_test_file_or_function_that_exists():
    """A renamed file or test would silently drop out of `slow` and into `make test-fast`."""
    assert sorted(set(SLOW_FILES) - set(TIERS)) == []
    for entry in SLOW_TESTS:
        name, _, function = entry.partition("::")
        assert name in TIERS and f"def {function}(" in (TESTS / name).read_text(), entry


def test_the_fast_selection_holds_the_engine_oracle_at_one_and_two_workers_only():
    """`make test-fast` (-m "unit and not slow") includes the 1- and 2-worker engine-against-oracle test."""
    from support.tiers import is_slow

    engine = TESTS / "test_engine.py"
    assert TIERS["test_engine.py"] == [UNIT]
    assert not is_slow(engine, "test_one_and_two_workers_match_oracle_and_each_other", TESTS)
    assert is_slow(engine, "test_three_workers_match_oracle_and_one_worker", TESTS)
