"""The adaptive package's result records (kit/adaptive/formats.py: the evaluation record, the development curve;
kit/adaptive/lineage.py: inherited.json) held against their docs pages' field tables, and the classes' round trip of a record's JSON."""

from __future__ import annotations

import pytest
from support.format_docs import assert_docs_match

from kit.adaptive.formats import DevCurve, EvaluationRecord
from kit.adaptive.lineage import InheritedLogs
from kit.record import ContractError

PAGE = "formats/adaptive-evaluation.md"


@pytest.mark.parametrize("heading, cls", [("Evaluation record", EvaluationRecord), ("Development curve", DevCurve)])
def test_evaluation_page_matches_its_classes(heading, cls):
    assert_docs_match(PAGE, heading, cls)


def test_homes_page_matches_inherited_logs():
    assert_docs_match("formats/adaptive-homes.md", "inherited.json (kit/adaptive/lineage.py)", InheritedLogs)


def _evaluation(**extra) -> dict:
    return {"split": "dev", "candidate": "f" * 64, "baseline": "seed:seed", **extra,
            "roles": {"tasks": "dev.tasks", "retention": "dev.retention"},
            "role_sha256": {"tasks": "a" * 64, "retention": "b" * 64},
            "tasks": [{"id": "t1", "family": "sorting", "tokens": 3, "cand_nll": 1.5, "base_nll": 2.0,
                       "cand_correct": True, "base_correct": False, "cand_reply": "1 2", "base_reply": "2 1"}],
            "retention": [{"id": "r1", "tokens": 4, "cand_nll": 3.0, "base_nll": 3.25}]}


def test_an_evaluation_record_reads_back_to_its_own_json_device_only_where_written():
    cpu = EvaluationRecord.from_json(_evaluation(), "ev.json")
    assert cpu.to_json() == _evaluation() and "device" not in cpu and cpu.tasks[0].cand_reply == "1 2"
    gpu = EvaluationRecord.from_json(_evaluation(device="cuda"), "ev.json")
    assert gpu.device == "cuda" and gpu.to_json() == _evaluation(device="cuda")
    built = EvaluationRecord(split="dev", candidate=cpu.candidate, baseline=cpu.baseline, roles=cpu.roles,
                             role_sha256=cpu.role_sha256, tasks=cpu.tasks, retention=cpu.retention, device=None)
    assert built.to_json() == _evaluation()  # what evaluate writes on CPU: no device field


def test_an_evaluation_record_refuses_another_split():
    with pytest.raises(ContractError, match="ev.json: field 'split' = 'test'; expected one of"):
        EvaluationRecord.from_json(_evaluation() | {"split": "test"}, "ev.json")
