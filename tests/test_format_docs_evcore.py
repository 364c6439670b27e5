"""The evidence package's declared formats held against their docs pages' field tables (tests/support/format_docs.py):
run.json, batch plans and the run and record pins (docs/formats/run-records.md), the archive index
(archived-evidence.md), a superseded folder's note and verify-evidence's reports (verify-evidence.md), the exposure
ledger's event header and entry (exposure-ledger.md) and the GPU modes index (gpu-modes.md)."""

from __future__ import annotations

import pytest
from support.format_docs import assert_docs_match

from kit.evidence.archive import ArchiveIndex
from kit.evidence.checks import EvidenceReport, ReplayResult
from kit.evidence.gpu_mode import GpuModes
from kit.evidence.ledger_chain import EventHeader, LedgerEntry
from kit.evidence.manifest import RecordPins, RunPins
from kit.evidence.run_record import RunRecord
from kit.evidence.runner import PlanArm
from kit.evidence.superseded import SupersededNote


@pytest.mark.parametrize("page, heading, cls", [
    ("formats/run-records.md", "Run records (runs/<run-id>/run.json)", RunRecord),
    ("formats/run-records.md", "Batch plans (`kit batch PLAN`)", PlanArm),
    ("formats/archived-evidence.md", "Archive index", ArchiveIndex),
    ("formats/verify-evidence.md", "Superseded notes", SupersededNote),
    ("formats/run-records.md", "Run manifests (`manifest` of kit-run/3, `runs/MANIFESTS.json`, kit/evidence/manifest.py)",
     RunPins),
    ("formats/run-records.md", "Record pins (`runs/RECORD_PINS.json`, kit.evidence.manifest.RecordPins)", RecordPins),
    ("formats/verify-evidence.md", "Reports (`--json`)", EvidenceReport),
    ("formats/verify-evidence.md", "Replay results (`--replay --json`)", ReplayResult),
    ("formats/exposure-ledger.md", "Event header", EventHeader),
    ("formats/exposure-ledger.md", "Exposure entry", LedgerEntry),
    ("formats/gpu-modes.md", "GPU numeric modes (`numeric_profile.gpu`, `runs/GPU_MODES.json`, kit/evidence/gpu_mode.py)",
     GpuModes),
])
def test_declared_fields_match_the_docs_table(page, heading, cls):
    assert_docs_match(page, heading, cls)
