"""The adaptive drivers read a job's contract as typed terms (kit.adaptive.continued_schema.job_contract): one
view for an adaptive and a continued job, attributes for fields, read-only mappings for cohorts by name."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from kit.adaptive.continued_schema import ContinuedJob, job_contract, load_continued_contract
from kit.adaptive.evaluation import gates, nll_change_bounds
from kit.adaptive.formats import AnyPreparedJob, ContinuedPreparedJob, Cursor, load_prepared
from kit.adaptive.ownership import memory_model_of
from kit.adaptive.schema import (
    AdaptiveContract,
    AdaptiveJob,
    commit_points,
    engine_config,
    load_adaptive_contract,
    optimizer_groups,
)
from kit.contract import ContractError

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "contracts/adaptive-shards.tiny.json"
CONTINUED = REPO / "contracts/continued-learning.tiny.json"


DEMO_JOBS = REPO / "runs/demo-adaptive-select/files/prepared.json", REPO / "runs/demo-continued-select/files/prepared.json"


def _job(committed: Path, path: Path, digest: str, **fields) -> AnyPreparedJob:
    """A committed prepared job of the kind, bound to the contract file at `path` (job_contract reads its
    `contract.digest`, `locations.contract` and, for a continued job, `start.cursor` and `seed.parameter_digest`)."""
    pj = load_prepared(committed.parent)
    return dataclasses.replace(pj, contract=dataclasses.replace(pj.contract, digest=digest),
                               locations=dataclasses.replace(pj.locations, contract=str(path)), **fields)


def _adaptive_job(path=TINY) -> AnyPreparedJob:
    """A prepared adaptive job of the tiny contract at `path`."""
    return _job(DEMO_JOBS[0], path, load_adaptive_contract(path).digest)


def _continued_job() -> AnyPreparedJob:
    pj = load_prepared(DEMO_JOBS[1].parent)
    assert isinstance(pj, ContinuedPreparedJob)
    start = dataclasses.replace(pj.start, cursor=Cursor(step=8, cohort=0, cohort_step=8))
    return _job(DEMO_JOBS[1], CONTINUED, load_continued_contract(CONTINUED).digest, start=start,
                seed=dataclasses.replace(pj.seed, parameter_digest="ab" * 32))


def test_adaptive_job_view_reads_attributes_and_cohorts_by_name():
    data = json.loads(TINY.read_text())
    t = job_contract(_adaptive_job())
    assert isinstance(t, AdaptiveJob) and isinstance(t, AdaptiveContract)  # `terms: AdaptiveContract` accepts it
    assert t.to_json() == {**data, "cohort_order": ["A", "B"]}
    assert t.training.max_tokens == data["training"]["max_tokens"]
    assert t.evaluation.max_new_tokens == data["evaluation"]["max_new_tokens"]
    assert t.cohort_order == ("A", "B")
    assert dict(t.endpoints) == data["endpoints"]
    assert t.cohorts["B"].per_update.replay_a == data["cohorts"]["B"]["per_update"]["replay_a"]
    assert t.comparisons["B"].baseline == data["comparisons"]["B"]["baseline"]
    assert t.training.lr_schedule == data["training"]["lr_schedule"] == "constant"
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.training.max_tokens = 1
    with pytest.raises(TypeError):
        t.endpoints["A"] = 1  # a read-only mapping


def test_continued_job_view_states_its_cohorts_like_an_adaptive_one():
    data = json.loads(CONTINUED.read_text())
    t = job_contract(_continued_job())
    assert isinstance(t, ContinuedJob)
    assert t.cohort_order == ("A", "C")
    assert dict(t.endpoints) == {"A": 8, "C": data["cohort"]["updates"]}
    assert t.cohorts["C"].documents_per_update == data["cohort"]["documents_per_update"]
    assert t.cohorts["C"].updates == data["cohort"]["updates"]  # the schedule's span (kit/adaptive/train.py)
    assert (t.growth.add_blocks, t.growth.cohort) == (0, None)
    assert t.seed.parameter_digest == "ab" * 32 and t.start_step == 8
    assert t.start.from_ == data["start"]["from"]
    assert "planner" not in t and "planner" in job_contract(_adaptive_job())  # admission's default model for C


def test_the_drivers_translations_read_the_view():
    data = json.loads(TINY.read_text())
    t = job_contract(_adaptive_job())
    every, end = data["training"]["commit_every"], data["endpoints"]["A"]
    assert commit_points(t, "A") == sorted(set(range(every, end + 1, every)) | {end})
    cfg = engine_config(t, pad_id=3)
    assert (cfg.microbatch_size, cfg.max_grad_norm, cfg.distill.weight, cfg.pad_id) == (
        data["training"]["microbatch_size"], data["training"]["max_grad_norm"],
        data["training"]["distillation"]["weight"], 3)
    groups = optimizer_groups(t)
    assert sorted(groups) == sorted(data["training"]["optimizer"])
    assert groups["grown"].lr == data["training"]["optimizer"]["grown"]["lr"]
    assert memory_model_of(t)["reserve_bytes"] == data["planner"]["reserve_bytes"]


def test_gates_read_terms_without_key_reads():
    """A final evaluation judged through the kit's gates, on the job view and on a contract's terms."""
    rows = [{"cand_nll": 1.0 + i / 10, "base_nll": 1.2 + i / 10, "tokens": 5, "family": "arithmetic", "id": str(i),
             "cand_correct": True, "base_correct": i % 2 == 0} for i in range(6)]
    ev = {"split": "final", "candidate": "c", "baseline": "b", "tasks": rows,
          "retention": [{k: r[k] for k in ("id", "cand_nll", "base_nll", "tokens")} for r in rows]}
    verdict = gates(ev, job_contract(_adaptive_job()))
    bounds = nll_change_bounds(ev, load_adaptive_contract(TINY).terms)
    assert [g["name"] for g in verdict["gates"]] == ["gain", "retention", "generated"]
    assert bounds["tasks"]["resamples"] == json.loads(TINY.read_text())["bootstrap"]["resamples"]


def test_a_notebook_cell_reads_the_view_by_attribute():
    """Notebooks read c.training.max_tokens from job_contract; a key read is refused (an executed notebook
    committed before the contracts were declared re-runs at the commit its record names)."""
    scope = {"__name__": "__main__", "c": job_contract(_adaptive_job())}
    exec(compile("max_tokens, max_new = c.training.max_tokens, c.evaluation.max_new_tokens", "<cell>", "exec"), scope)  # noqa: S102
    data = json.loads(TINY.read_text())
    assert (scope["max_tokens"], scope["max_new"]) == (data["training"]["max_tokens"],
                                                       data["evaluation"]["max_new_tokens"])
    with pytest.raises(TypeError):
        exec(compile('c["training"]', "<cell>", "exec"), scope)  # noqa: S102


def test_a_changed_contract_file_is_refused(tmp_path):
    edited = tmp_path / "c.json"
    data = json.loads(TINY.read_text())
    edited.write_text(json.dumps(data))
    pj = _adaptive_job(edited)
    data["training"]["max_grad_norm"] = 0.5
    edited.write_text(json.dumps(data))
    with pytest.raises(ContractError, match=r"contract digest [0-9a-f]{64}; prepared.json field 'contract.digest'"):
        job_contract(pj)


def test_a_notebook_hands_over_the_file_s_json():
    """Notebooks 13 and 16 pass prepared.json's JSON: read as its class, the same view as the object gives."""
    pj = _continued_job()
    assert job_contract(pj.to_json()) == job_contract(pj)
    assert job_contract(_adaptive_job().to_json()) == job_contract(_adaptive_job())
