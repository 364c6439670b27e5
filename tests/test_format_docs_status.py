"""`kit status --json` (kit/status.py) against its docs page's field tables (tests/support/format_docs.py)."""

from __future__ import annotations

import pytest
from support.format_docs import assert_docs_match

from kit.status import ArmEntry, AttemptEntry, HomeEntry, RunEntry, StatusReport, status


@pytest.mark.parametrize("heading, cls", [("Home entry", HomeEntry), ("Attempt entry", AttemptEntry),
                                          ("Run entry", RunEntry), ("Arm entry", ArmEntry)])
def test_each_entry_table_names_the_declared_fields(heading, cls):
    assert_docs_match("formats/kit-status.md", heading, cls)


def test_the_json_form_reads_back_as_the_declared_report(tmp_path):
    """What `--json` prints validates against the classes the tables document (a run in progress and a recorded
    one, whose notebook and throughput are present though null)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "kernel.log").write_text("")
    (tmp_path / "b" / "metrics").mkdir(parents=True)
    (tmp_path / "b" / "run.json").write_text('{"run_id": "b", "status": "completed", "notebook": null}')
    (tmp_path / "b" / "metrics" / "loss_curves.json").write_text('[{"update": 2, "objective": 1.5}]')
    (tmp_path / "b" / "metrics" / "throughput.json").write_text("{}")
    shown = status(tmp_path).to_json()
    assert StatusReport.from_json(shown, source="kit status --json").to_json() == shown
    running, recorded = shown["entries"]
    assert "notebook" not in running and recorded["notebook"] is None
    assert recorded["last_update"] == {"update": 2, "loss": 1.5, "ce_per_token": None, "tokens_per_s": None}
