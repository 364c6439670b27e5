"""The evidence package's declared formats held against their docs pages' field tables (tests/support/format_docs.py):
run.json (docs/formats/run-records.md)."""

from __future__ import annotations

from support.format_docs import assert_docs_match

from kit.evidence.run_record import RunRecord


def test_run_record_fields_match_run_records_md():
    assert_docs_match("formats/run-records.md", "Run records (runs/<run-id>/run.json)", RunRecord)
