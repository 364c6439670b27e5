"""The metric sidecars the report reads (kit/evidence/report/sidecar_formats.py) held against the field tables of
docs/formats/metric-sidecars.md, one table per declared format; and every committed sidecar of those formats reads
and writes back its own JSON (old runs under runs/ included)."""

from __future__ import annotations

import pytest
from support.format_docs import assert_docs_match, class_fields, docs_fields

from kit.evidence.report import sidecar_formats as sf
from kit.evidence.report.index import IndexedRun, metric
from kit.evidence.run_index import kept_rows, load_rows

PAGE = "formats/metric-sidecars.md"
RECORDS = [("`gates.json`", sf.Gates), ("`gate_verdict.json`", sf.GateVerdict), ("`comparison.json`", sf.Comparison),
           ("`nll_change_bounds.json`", sf.NllChangeBounds), ("`measurement.json`", sf.Measurement),
           ("`measurement.json` of an arm no rank reported for", sf.UnmeasuredArm),
           ("`screen_quality.json`", sf.ScreenQuality), ("`screen_speed.json`", sf.ScreenSpeed)]
MAPS = [("`paired_task_change.json`", sf.TaskChange), ("`retention_change.json`", sf.RetentionChange)]
TRAINING_PAGE = "formats/report-sidecars.md"
TRAINING = [("`commits.json`", sf.Commits), ("`throughput.json`", sf.Throughput), ("`seed_build.json`", sf.SeedBuild),
            ("`cost.json` of a study arm", sf.ArmCost), ("`evaluation_file.json`", sf.EvaluationFile)]


@pytest.mark.parametrize(("heading", "cls"), RECORDS, ids=[c.__name__ for _, c in RECORDS])
def test_a_sidecar_table_names_its_class_fields(heading, cls):
    assert_docs_match(PAGE, heading, cls)


@pytest.mark.parametrize(("heading", "cls"), TRAINING, ids=[c.__name__ for _, c in TRAINING])
def test_a_training_sidecar_table_names_its_class_fields(heading, cls):
    assert_docs_match(TRAINING_PAGE, heading, cls)


@pytest.mark.parametrize(("heading", "item"), MAPS, ids=[c.__name__ for _, c in MAPS])
def test_a_map_sidecar_table_names_its_items_fields(heading, item):
    assert docs_fields(PAGE, heading) == class_fields(item, "*.")


def test_every_committed_sidecar_of_a_declared_format_reads_back_unchanged():
    rows = load_rows("runs") + [k.run for k in kept_rows("runs")]
    read = 0
    for r in rows:
        for cls in (sf.Gates, sf.GateVerdict, sf.Comparison, sf.NllChangeBounds, sf.ScreenQuality, sf.ScreenSpeed,
                    sf.Commits, sf.Throughput, sf.SeedBuild, sf.EvaluationFile):
            value = sf.sidecar(r, cls)
            if value is not None:
                assert value.to_json() == metric(r, cls.NAME)
                read += 1
        cost = sf.arm_cost(r)
        if cost is not None:
            assert cost.to_json() == metric(r, "cost")
            read += 1
        measured = sf.arm_measurement(r)
        if measured is not None:
            assert measured.to_json() == metric(r, "measurement")
            read += 1
        for name, reader in (("paired_task_change", sf.paired_task_changes), ("retention_change", sf.retention_changes)):
            changes = reader(r)
            if changes is not None:
                assert {k: v.to_json() for k, v in changes.items()} == metric(r, name)
                read += 1
    assert read > 460  # the demo, medium and superseded runs' sidecars (about 470 today)


def test_a_sidecar_not_of_its_declared_form_names_the_file_and_field(tmp_path):
    from kit.record import ContractError

    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "gates.json").write_text('{"generated": {"gained": 1}, "retention": {}}')
    with pytest.raises(ContractError, match=r"gates\.json: missing field 'generated\.lost'"):
        sf.sidecar(IndexedRun.of({"dir": tmp_path, "run_id": "r", "status": "completed", "reason": None, "notebook": "",
                                  "started_at": "", "duration_s": None, "error": None, "metrics": {"gates": "x"},
                                  "git": {}, "device": {}, "checkpoint_roots": {"produced": [], "used": []}}), sf.Gates)
