"""The evidence package's declared formats held against their docs pages' field tables (tests/support/format_docs.py):
run.json and batch plans (docs/formats/run-records.md), the archive index (archived-evidence.md) and a superseded
folder's note (verify-evidence.md)."""

from __future__ import annotations

import pytest
from support.format_docs import assert_docs_match

from kit.evidence.archive import ArchiveIndex
from kit.evidence.run_record import RunRecord
from kit.evidence.runner import PlanArm
from kit.evidence.superseded import SupersededNote


@pytest.mark.parametrize("page, heading, cls", [
    ("formats/run-records.md", "Run records (runs/<run-id>/run.json)", RunRecord),
    ("formats/run-records.md", "Batch plans (`kit batch PLAN`)", PlanArm),
    ("formats/archived-evidence.md", "Archive index", ArchiveIndex),
    ("formats/verify-evidence.md", "Superseded notes", SupersededNote),
])
def test_declared_fields_match_the_docs_table(page, heading, cls):
    assert_docs_match(page, heading, cls)
