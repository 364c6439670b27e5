"""The prepared job's formats (kit/adaptive/formats.py) held against their docs pages' field tables, and the
committed prepared jobs read back through them byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.format_docs import assert_docs_match

from kit.adaptive.formats import (
    ADAPTIVE_PREPARED_FORMAT,
    CONTINUED_PREPARED_FORMAT,
    ContinuedPreparedJob,
    OwnershipManifests,
    PreparedJob,
    Schedule,
    SelectionRecord,
    WorkerPlan,
    prepared_job_from_json,
)
from kit.digest import canonical_json, load_json_strict
from kit.record import ContractError

REPO = Path(__file__).resolve().parents[1]
PAGE = "formats/adaptive-preparation.md"


@pytest.mark.parametrize("heading, cls", [
    ("prepared.json", PreparedJob),
    ("Continued-learning jobs (`kit continued prepare`, kit/adaptive/continued.py)", ContinuedPreparedJob),
    ("schedule.json", Schedule),
    ("ownership.json", OwnershipManifests),
])
def test_preparation_page_matches_its_classes(heading, cls):
    assert_docs_match(PAGE, heading, cls)


def test_selection_page_matches_its_class():
    assert_docs_match("formats/selection-records.md", "selection.json", SelectionRecord)


def test_worker_plan_page_matches_its_class():
    assert_docs_match("formats/adaptive-homes.md", "Worker plan (launch-args.json)", WorkerPlan)


def test_committed_prepared_jobs_read_back_to_their_own_bytes():
    paths = sorted(p for p in (REPO / "runs").rglob("prepared.json")
                   if load_json_strict(p).get("format") in (ADAPTIVE_PREPARED_FORMAT, CONTINUED_PREPARED_FORMAT))
    assert paths, "no committed prepared job under runs/"
    for path in paths:
        value = load_json_strict(path)
        job = prepared_job_from_json(value, str(path))
        assert canonical_json(job.to_json()) == canonical_json(value), path
        assert job.identity_digest() == job.job_digest, path


def test_a_prepared_job_is_checked_field_by_field_and_a_note_beside_them_is_ignored():
    path = REPO / "runs/demo-adaptive-select/files/prepared.json"
    value = load_json_strict(path)
    with pytest.raises(ContractError, match=r"unknown field 'seed\.extra'"):
        PreparedJob.from_json({**value, "seed": {**value["seed"], "extra": 1}}, str(path))
    assert prepared_job_from_json({**value, "note": "by hand"}, str(path)).job_digest == value["job_digest"]
    with pytest.raises(ContractError, match=r"field 'seed\.num_hidden_layers' = '4'; expected an integer"):
        prepared_job_from_json({**value, "seed": {**value["seed"], "num_hidden_layers": "4"}}, str(path))
