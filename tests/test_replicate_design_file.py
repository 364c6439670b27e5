"""The replicate design format (issue 59 items 4 and 7): the committed medium design is frozen, its k per arm
recomputed by `plan`, its fresh final pools drawn again equal, and `kit verify-evidence runs` checks it; each
kind of tampering is refused in one line naming the file and the field."""

from __future__ import annotations

import json

import pytest
from support.models import REPO

from kit.evidence.replicate_design import design_problems, design_reports, read_design

DESIGN = REPO / "campaigns" / "medium-replicate-design.json"


def _altered(tmp_path, change) -> str:
    data = json.loads(DESIGN.read_text())
    change(data)
    path = tmp_path / "medium-replicate-design.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_the_medium_design_is_frozen_with_k_from_plan_and_fresh_finals():
    d = read_design(DESIGN)
    assert d.k == {"study/single": 10, "study/dense": 10, "study/powersgd": 10}
    assert d.pairs.growth_vs_control.k == 6 and d.replicates.growth_vs_control == tuple(range(6))
    assert {e.k for e in d.k_chosen_by} == {10, 9, 6}
    assert design_problems(DESIGN, REPO, REPO / "runs") == []
    low, high = d.gpu_time.total_device_seconds
    assert 0 < low < high and d.gpu_time.sessions.count[0] >= 2
    [report] = design_reports(REPO)
    assert report["ok"] and report["run_dir"].endswith("medium-replicate-design.json")


@pytest.mark.parametrize("change,says", [
    (lambda d: d["k"].update({"study/dense": 4}), "field 'k' of 'study/dense' = 4; the largest k"),
    (lambda d: d["k_chosen_by"][2].update({"sd": 0.005}), "field 'k_chosen_by[2].k' = 6; plan of its inputs gives"),
    (lambda d: d["replicates"].update({"study": [1, 2, 3]}), "field 'replicates.study' = [1, 2, 3]; expected 0..9"),
    (lambda d: d["final_sets"]["study"].update({"role": "study-final", "seed": 4}), "already used by a contract"),
    (lambda d: d["contracts"]["study"].update({"digest": "0" * 64}), "field 'contracts.study.digest'"),
    (lambda d: d.pop("stopping_rule"), "field 'stopping_rule' = None; expected a str"),
    (lambda d: d["frozen"].update({"at": "yesterday"}), "field 'frozen.at' = 'yesterday'"),
])
def test_each_tampering_is_refused_naming_the_field(change, says, tmp_path):
    path = _altered(tmp_path, change)
    problems = design_problems(path, REPO, None, check_pool=False)
    assert any(says in p and p.startswith(path) for p in problems), problems


def test_a_changed_pool_digest_is_refused(tmp_path):
    path = _altered(tmp_path, lambda d: d["final_sets"]["growth"].update({"pool_sha256": "f" * 64}))
    assert [p for p in design_problems(path, REPO) if "final_sets.growth.pool_sha256" in p]


def test_a_run_of_the_design_started_before_it_was_frozen_is_refused(tmp_path):
    runs = tmp_path / "runs"
    (runs / "medium-confirm-study-single-r0").mkdir(parents=True)
    (runs / "medium-confirm-study-single-r0" / "run.json").write_text(json.dumps({"started_at": "2026-12-01T00:00:00Z"}))
    (runs / "medium-confirm-study-dense-r0").mkdir()
    (runs / "medium-confirm-study-dense-r0" / "run.json").write_text(json.dumps({"started_at": "2026-12-31T00:00:00Z"}))
    problems = design_problems(DESIGN, REPO, runs, check_pool=False)
    assert len(problems) == 1 and "medium-confirm-study-single-r0" in problems[0] and "before the design" in problems[0]


def _tiny_design(tmp_path):
    """A design of two study arms (k 2) and one growth pair (k 2) in a repository of its own, its pool drawn
    against a ledger holding one exposed task of the same stream."""
    from kit.data.tasks import generate_set
    from kit.evidence.ledger import record
    from kit.evidence.replicate_design import final_set_record

    base = tmp_path / "repo"
    (base / "ledger").mkdir(parents=True)
    ledger = base / "ledger" / "exposed.jsonl"
    first = generate_set({"lookup": 1}, 7, "tiny-replicate-final", 1)[0]
    record([("final.task", first.digest, first.id)], "c" * 64, "job", "an earlier scoring", ledger)
    data = json.loads(DESIGN.read_text())
    data.update(run_prefix="tiny-confirm-", k={"study/single": 2, "study/dense": 2},
                pairs={"growth_vs_control": {"arms": ["B-control", "B-growth"], "k": 2, "start": "A"}},
                final_sets={"study": final_set_record("tiny-replicate-final", 7, 1, 6, 4, ledger, base, ["lookup"])})
    path = base / "campaigns" / "tiny-replicate-design.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    return path, ledger, first


def _complete(runs, run_id):
    (runs / run_id).mkdir(parents=True)
    (runs / run_id / "run.json").write_text(json.dumps({"status": "completed", "started_at": "2027-01-01T00:00:00Z"}))


def test_a_fresh_final_set_opens_once_after_every_replicate(tmp_path):
    from kit.evidence.ledger import read_ledger
    from kit.evidence.replicate_design import DesignError, design_runs, open_final_set, pool, read_design

    path, ledger, exposed = _tiny_design(tmp_path)
    d = read_design(path)
    runs = tmp_path / "runs"
    assert design_runs(d) == ["tiny-confirm-study-dense-r0", "tiny-confirm-study-dense-r1", "tiny-confirm-study-single-r0",
                              "tiny-confirm-study-single-r1", "tiny-confirm-adaptive-B-control-r0",
                              "tiny-confirm-adaptive-B-growth-r0", "tiny-confirm-adaptive-B-control-r1",
                              "tiny-confirm-adaptive-B-growth-r1"]
    for run_id in design_runs(d)[:-1]:
        _complete(runs, run_id)
    with pytest.raises(DesignError, match="1 of the design's runs are not completed .*tiny-confirm-adaptive-B-growth-r1"):
        open_final_set(path, "study", runs, ledger)
    _complete(runs, design_runs(d)[-1])
    drawn = pool(d.final_sets["study"], ledger)
    assert exposed.digest not in {t.digest for t in drawn} and len(drawn) == 10
    tasks = open_final_set(path, "study", runs, ledger, exclude_digests={drawn[0].digest})  # a seed-trained task
    assert [t.digest for t in tasks] == [t.digest for t in drawn[1:7]]
    opened = [e for e in read_ledger(ledger) if e["purpose"].startswith("replicate design")]
    assert {e["digest"] for e in opened} == {t.digest for t in tasks} and {e["kind"] for e in opened} == {"final.task"}
    with pytest.raises(DesignError, match="opened already; a fresh set opens once"):
        open_final_set(path, "study", runs, ledger)
    # the pool stays what was frozen: the opening's own ledger entries do not move it
    assert [t.digest for t in pool(d.final_sets["study"], ledger)] == [t.digest for t in drawn]


def test_an_opening_racing_another_is_refused_under_the_ledger_lock(tmp_path, monkeypatch):
    """Two openings at once: the second passed the first check before the first recorded; under the lock it sees
    the opening and is refused, so the set is recorded once. A run started before the freeze keeps the set closed,
    and a pool task exposed after the freeze is refused as not fresh."""
    from kit.evidence import replicate_design as rd
    from kit.evidence.ledger import read_ledger, record

    path, ledger, _ = _tiny_design(tmp_path)
    d = rd.read_design(path)
    runs = tmp_path / "runs"
    for run_id in rd.design_runs(d):
        _complete(runs, run_id)
    early = runs / rd.design_runs(d)[0] / "run.json"
    early.write_text(json.dumps({"status": "completed", "started_at": "2026-01-01T00:00:00Z"}))
    with pytest.raises(rd.DesignError, match="stays closed: 1 of .*started 2026-01-01T00:00:00Z, before the design was frozen"):
        rd.open_final_set(path, "study", runs, ledger)
    early.write_text(json.dumps({"status": "completed", "started_at": "2027-01-01T00:00:00Z"}))
    real_pool, raced = rd.pool, []
    spec = d.final_sets["study"]
    purpose = f"replicate design {d.name}: final set study (pool {spec.pool_sha256[:16]})"

    def racing_pool(spec, at):
        tasks = real_pool(spec, at)
        if not raced:  # another process opens the set between this opener's first check and its record
            raced.append(tasks[:spec.count])
            record([("final.task", t.digest, t.id) for t in raced[0]], d.contracts.study.digest,
                   spec.pool_sha256, purpose, ledger)
        return tasks

    monkeypatch.setattr(rd, "pool", racing_pool)
    with pytest.raises(rd.DesignError, match="was opened already; a fresh set opens once"):
        rd.open_final_set(path, "study", runs, ledger)
    opened = [e for e in read_ledger(ledger) if e["purpose"].startswith("replicate design")]
    assert len(opened) == spec.count == len(raced[0])
    monkeypatch.setattr(rd, "pool", real_pool)
    # a design whose pool task was exposed after it froze (another scoring) is not opened as fresh
    path2, ledger2, _ = _tiny_design(tmp_path / "second")
    task = real_pool(rd.read_design(path2).final_sets["study"], ledger2)[0]
    record([("final.task", task.digest, task.id)], "d" * 64, "job", "a later scoring", ledger2)
    with pytest.raises(rd.DesignError, match=f"task {task.id} of final set 'study' .* exposed after the design froze"):
        rd.open_final_set(path2, "study", runs, ledger2)
