"""Independent notebooks run at the same time (kit.evidence.runner.run_notebooks_at_once), and the medium
demo's chain of such steps (kit.demo: Step.concurrent_with_next): which steps run together, and that no
step reads a root of a step still running beside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.notebooks import write_notebook

from campaigns.at_once_smoke import barrier_arms, main, write_barrier_notebook
from kit.demo import SCALES, PlaceholderRoots, demo_steps, step_chains
from kit.evidence.run_record import read_run_record
from kit.evidence.runner import PlanArm, run_notebooks_at_once


def test_arms_run_at_the_same_time_and_come_back_in_order(tmp_path):
    # each arm marks its arrival and waits for the other's mark: one arm alone (run after the other, not
    # beside it) finds no mark and fails, so both completing proves they ran at the same time
    nb = write_barrier_notebook(tmp_path / "barrier.ipynb")
    marks = tmp_path / "marks"
    marks.mkdir()
    arms = barrier_arms(nb, marks)
    records = run_notebooks_at_once(arms, tmp_path / "runs", tmp_path / "work")
    assert [r.run_id for r in records] == ["arm-a", "arm-b"]
    assert [r.status for r in records] == ["completed", "completed"]
    for arm, record in zip(arms, records):
        assert record.parameters == arm.parameters
        assert read_run_record(tmp_path / "runs" / arm.run_id) == record
        assert (tmp_path / "work" / f"{arm.run_id}.plan.json").is_file()
    # each ran while the other was running
    a, b = records
    assert a.started_at < b.ended_at and b.started_at < a.ended_at


def test_the_smoke_command_reports_both_arms(tmp_path, capsys):
    assert main(["--work", str(tmp_path / "w"), "--out", str(tmp_path / "r.json")]) == 0
    result = json.loads((tmp_path / "r.json").read_text())
    assert [(r["run_id"], r["status"]) for r in result["runs"]] == [("arm-a", "completed"), ("arm-b", "completed")]
    assert json.loads(capsys.readouterr().out) == result


def test_an_arm_that_writes_no_record_is_named_with_its_log(tmp_path):
    nb = write_notebook(tmp_path / "plain.ipynb", "print(count)")
    arms = [PlanArm(notebook=str(nb), run_id="arm-ok", parameters={"count": 1}),
            PlanArm(notebook=str(nb), run_id="arm-bad", parameters={"no_such_parameter": 1})]
    with pytest.raises(RuntimeError, match=r"no run record from arm-bad \(exit 2, log .*arm-bad\.log\)"):
        run_notebooks_at_once(arms, tmp_path / "runs", tmp_path / "work")
    assert read_run_record(tmp_path / "runs" / "arm-ok").status == "completed"  # the other arm ran to its end
    assert "no_such_parameter" in (tmp_path / "work" / "arm-bad.log").read_text()


def test_an_earlier_attempts_record_is_not_taken_for_this_ones(tmp_path):
    # arm-x failed once (its record says so); an attempt refused before it starts writes no record, and the
    # earlier attempt's record, still in place, must not be returned as this attempt's outcome
    nb = write_notebook(tmp_path / "fails.ipynb", "raise RuntimeError(count)")
    runs, work = tmp_path / "runs", tmp_path / "work"
    first = run_notebooks_at_once([PlanArm(notebook=str(nb), run_id="arm-x", parameters={"count": 1})], runs, work)
    assert first[0].status == "failed"
    earlier = (runs / "arm-x" / "run.json").read_bytes()
    arms = [PlanArm(notebook=str(nb), run_id="arm-x", parameters={"no_such_parameter": 1}),
            PlanArm(notebook=str(nb), run_id="arm-y", parameters={"count": 2})]
    with pytest.raises(RuntimeError, match=r"no run record from arm-x \(exit 2, log .*arm-x\.log\)"):
        run_notebooks_at_once(arms, runs, work)
    assert (runs / "arm-x" / "run.json").read_bytes() == earlier  # the failed attempt's record is kept as it was


class ReadOrder:
    """Roots that remember, for each root read, the steps yielded before it."""

    def __init__(self):
        self.yielded: list = []
        self.reads: list[tuple[str, int]] = []

    def endpoint(self, run_id: str) -> str:
        self.reads.append((run_id, len(self.yielded)))
        return PlaceholderRoots().endpoint(run_id)

    def produced(self, run_id: str) -> list[str]:
        self.reads.append((run_id, len(self.yielded)))
        return PlaceholderRoots().produced(run_id)


def _chains(steps) -> list[list[str]]:
    """The groups of more than one step that run_demo starts together (kit.demo.step_chains)."""
    return [[s.run_id for s in chain] for chain in step_chains(steps) if len(chain) > 1]


def test_steps_group_lazily_and_a_last_step_never_waits_for_a_next():
    from kit.demo import Step

    asked: list[str] = []

    def steps():
        for run_id, together in (("a", True), ("b", False), ("c", False), ("d", True), ("e", True)):
            asked.append(run_id)
            yield Step(run_id, "x.ipynb", {}, concurrent_with_next=together)

    groups = step_chains(steps())
    assert [s.run_id for s in next(groups)] == ["a", "b"] and asked == ["a", "b"]  # c not asked for before a+b ran
    assert [s.run_id for s in next(groups)] == ["c"] and asked == ["a", "b", "c"]
    assert [s.run_id for s in next(groups)] == ["d", "e"]  # the plan's end closes the group
    assert next(groups, None) is None


@pytest.mark.parametrize("scale", ["tiny", "medium"])
@pytest.mark.parametrize("seed_dir", [None, Path("built-seed")])
def test_only_the_medium_demo_runs_cohort_b_and_the_control_together_and_reads_their_roots_after(scale, seed_dir):
    roots = ReadOrder()
    for step in demo_steps(Path("out"), Path("data/alpaca_5000.json"), roots, SCALES[scale], parts=("adaptive",),
                           seed_dir=seed_dir):
        roots.yielded.append(step)
    steps = roots.yielded
    ids = [s.run_id for s in steps]
    run = SCALES[scale].name
    if scale == "tiny":  # one step at a time, in the order of the committed tiny evidence
        assert _chains(steps) == []
        assert ids.index(f"{run}-adaptive-A2-control") < ids.index(f"{run}-adaptive-B-control")
        return
    chain = [f"{run}-adaptive-B-control", f"{run}-adaptive-B-growth", f"{run}-adaptive-A2-control"]
    # a seed built before is inspected beside the preparation; a seed the demo builds comes first
    first = [[f"{run}-seed", f"{run}-adaptive-prepare"]] if seed_dir else []
    assert _chains(steps) == first + [chain]
    # the migrated run (whose start copies the 2-worker home's update logs) has ended before the control starts
    assert ids.index(f"{run}-adaptive-A3-migrated") < ids.index(chain[0])
    end = ids.index(chain[-1]) + 1  # the chain's steps are all yielded (and started) before any is read
    for run_id, yielded in roots.reads:
        if run_id in chain:
            assert yielded >= end, f"{run_id} read after {yielded} steps, before its chain ended at {end}"
