"""The study's declared formats against their docs pages' field tables (tests/support/format_docs.py)."""

from __future__ import annotations

from support.format_docs import assert_docs_match

from kit.study.compression_state import CompressionState
from kit.study.formats import ArmRecord, Freeze, StudyPreparedJob, StudyScreens


def test_the_arm_record_table_names_the_declared_fields():
    assert_docs_match("formats/study-records.md", "Arm record (`arms/<arm>/arm.json`, `attempts/NNN.json`)", ArmRecord)


def test_the_freeze_table_names_the_declared_fields():
    assert_docs_match("formats/study-records.md", "Freeze (`evaluation/freeze.json`)", Freeze)


def test_the_compression_state_table_names_the_declared_fields():
    assert_docs_match("formats/study-records.md", "Compression-state record (`home/compression/<full_root>/rank-<r>.json`)",
                      CompressionState)


def test_the_prepared_json_table_names_the_declared_fields():
    assert_docs_match("formats/study-prepared.md", "prepared.json", StudyPreparedJob)


def test_the_screens_json_table_names_the_declared_fields():
    assert_docs_match("formats/study-screens.md", "Fields", StudyScreens)
