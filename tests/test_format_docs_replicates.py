"""The replicate design (kit/evidence/replicate_design.py, `ReplicateDesign`: kit-replicate-design/1) held against the
field table of docs/formats/replicates.md, and its round trip: the committed design reads back to its own JSON (as
does the committed plan, `CampaignPlan`: kit-replicate-plan/1); a field the class does not declare, or one it lacks,
is refused naming the file and the field."""

from __future__ import annotations

import json

import pytest
from support.format_docs import assert_docs_match
from support.models import REPO

from kit.digest import canonical_json, load_json_strict
from kit.evidence.replicate_design import (
    DESIGN_FORMAT,
    DesignError,
    ReplicateDesign,
    load_design,
    read_design,
)
from kit.evidence.replicates import read_plan

DESIGN = REPO / "campaigns" / "medium-replicate-design.json"


def test_the_design_page_matches_its_class():
    assert_docs_match("formats/replicates.md", "Replicate design (`campaigns/*replicate*.json`)", ReplicateDesign)


def test_every_committed_design_reads_back_to_its_own_json():
    designs = [p for p in sorted(REPO.glob("campaigns/*replicate*.json"))
               if load_json_strict(p).get("format") == DESIGN_FORMAT]
    assert designs == [DESIGN]
    for path in designs:
        raw = load_json_strict(path)
        assert canonical_json(read_design(path).to_json()) == canonical_json(raw)
        assert load_design(path) == raw  # the plain JSON, for the callers that read a dict
    plan = REPO / "campaigns" / "medium-replicates-plan.json"
    assert canonical_json(read_plan(plan).to_json()) == canonical_json(load_json_strict(plan))


@pytest.mark.parametrize("change, says", [
    (lambda d: d["final_sets"]["study"].update(colour="red"), "unknown field 'final_sets.study.colour'"),
    (lambda d: d["gpu_time"]["measured"].pop("scoring"), "missing field 'gpu_time.measured.scoring'"),
    (lambda d: d["pairs"]["growth_vs_control"].update(k=None), "'pairs.growth_vs_control' = None; expected an int"),
    (lambda d: d["k_chosen_by"][0].pop("alpha"), "field 'k_chosen_by[0]' lacks alpha; expected the plan inputs"),
])
def test_a_field_undeclared_or_missing_is_refused_naming_it(change, says, tmp_path):
    data = json.loads(DESIGN.read_text())
    change(data)
    path = tmp_path / "d-replicate-design.json"
    path.write_text(json.dumps(data))
    with pytest.raises(DesignError) as e:
        read_design(path)
    assert str(e.value).startswith(f"{path}: ") and says in str(e.value)
