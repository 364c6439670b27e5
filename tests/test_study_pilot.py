"""The study pilot (campaigns/study_pilot.py) and the study contract's optional development role.

- `data.dev` is optional: the committed study contracts keep their digests; a dev role that reuses the
  training or final role name is refused naming the file and the field;
- prepare writes the development tasks disjoint by digest from the seed's, the training and final tasks;
- the pilot in --tiny --device cpu mode on the tiny study fixture (support.study): keeps every candidate,
  its choice is RULE recomputed from the development evaluations it kept, and it never opens a final
  role (no freeze, no opening log, no final scores, ledger bytes unchanged);
- bad --lr / --warmup / --until are refused before anything is written.
"""

from __future__ import annotations

import json
import math
import re

import pytest
from support.evidence import evidence_path
from support.study import FULL, TINY, make_study_env

from campaigns import study_pilot
from kit.contract import ContractError
from kit.data.conversations import read_jsonl
from kit.data.tasks import generate_set
from kit.digest import sha256_json
from kit.study.schema import load_study_contract

MEDIUM_DRAFT = TINY.parent / "shared-gradient.medium.draft.json"


def test_committed_study_contracts_keep_their_digests_without_a_dev_role():
    for path in (TINY, FULL, MEDIUM_DRAFT,
                 evidence_path("medium-superseded-seed-800112e3", "contracts", "shared-gradient.medium.json")):
        data = json.loads(path.read_text())
        assert "dev" not in data["data"]
        assert load_study_contract(path).digest == sha256_json(data)


@pytest.mark.parametrize("role, field", [("study-dev", "data.tasks.role"), ("study-dev", "data.final_test.role")])
def test_a_dev_role_named_like_another_role_is_refused(tmp_path, role, field):
    data = json.loads(TINY.read_text())
    data["data"][field.split(".")[1]]["role"] = role  # another role already named like the dev role
    data["data"]["dev"] = {"count": 8, "role": role, "seed": 4, "difficulty": 1}
    (tmp_path / "c.json").write_text(json.dumps(data))
    with pytest.raises(ContractError, match=rf"c\.json: field 'data\.dev\.role' = '{role}' is also {field}"):
        load_study_contract(tmp_path / "c.json")
    data["data"]["dev"] = {"count": 8, "role": "study-held-out", "seed": 4, "difficulty": 1}
    (tmp_path / "c.json").write_text(json.dumps(data))
    with pytest.raises(ContractError, match=r"c\.json: field 'data\.dev\.role' = 'study-held-out'; expected a role "
                                            r"name containing 'dev'"):
        load_study_contract(tmp_path / "c.json")
    data["data"]["dev"] = {"count": 0, "role": "study-dev", "seed": 4, "difficulty": 1}
    (tmp_path / "c.json").write_text(json.dumps(data))
    with pytest.raises(ContractError, match=r"data\.dev\.count"):
        load_study_contract(tmp_path / "c.json")


@pytest.fixture(scope="module")
def pilot(tmp_path_factory):
    root = tmp_path_factory.mktemp("study-pilot")
    env = make_study_env(root)
    before = env["ledger"].read_bytes()
    out = root / "run"
    # --warmup out of order: the record lists candidates in the tie-break's order (shorter warm-up first)
    rc = study_pilot.main(["--tiny", "--device", "cpu", "--seed", str(env["seed"]), "--draft", str(env["contract"]),
                           "--public-source", str(env["source"]), "--ledger", str(env["ledger"]), "--lr", "1e-2",
                           "--warmup", "2", "0", "--until", "2", "--out", str(out), "--work", str(root / "work"),
                           "--run-id", "study-pilot-test"])
    return {"rc": rc, "out": out, "work": root / "work", "env": env, "ledger_before": before,
            "record": json.loads((out / "run.json").read_text())}


@pytest.fixture(scope="module")
def pilot_parallel(pilot):
    """The same pilot (seed, draft, source, ledger, candidates) with both candidates at once."""
    env, root = pilot["env"], pilot["out"].parent
    out = root / "run-parallel"
    rc = study_pilot.main(["--tiny", "--device", "cpu", "--seed", str(env["seed"]), "--draft", str(env["contract"]),
                           "--public-source", str(env["source"]), "--ledger", str(env["ledger"]), "--lr", "1e-2",
                           "--warmup", "2", "0", "--until", "2", "--parallel", "2", "--out", str(out),
                           "--work", str(root / "work-parallel"), "--run-id", "study-pilot-test-parallel"])
    return {"rc": rc, "out": out, "record": json.loads((out / "run.json").read_text())}


def test_pilot_keeps_every_candidate_and_chooses_by_its_rule(pilot):
    rec = pilot["record"]
    assert pilot["rc"] == 0 and rec["status"] == "completed" and rec["format"] == "kit-bench/1"
    assert rec["parameters"]["rule"] == study_pilot.RULE
    assert rec["parameters"]["dev_added"] == {"count": 8, "role": "study-dev", "seed": 4, "difficulty": 1}
    cands = rec["results"]["candidates"]
    assert [c["values"] for c in cands] == [{"lr": 1e-2, "warmup_updates": 0}, {"lr": 1e-2, "warmup_updates": 2}]
    for c in cands:
        assert c["status"] == "completed" and c["commit"]["step"] == 2 and len(c["updates"]) == 2
        contract = load_study_contract(pilot["out"] / "contracts" / f"{c['name']}.json")
        assert contract.digest == c["contract_digest"] and contract.terms.training.optimizer.lr == 1e-2
        assert contract.data["training"]["lr_schedule"] == study_pilot.schedule_for(c["values"]["warmup_updates"])
        assert set(c["dev"]["accuracy_by_family"]) == {"lookup", "filtering", "arithmetic", "sorting"}
    # the warm-up really changed training: the step-2 commits differ
    assert cands[0]["commit"]["full_root"] != cands[1]["commit"]["full_root"]
    assert rec["results"]["dev_roles_identical_across_candidates"] is True
    # RULE recomputed from the kept evaluation records: pooled accuracy, then the task NLL change
    seed = json.loads((pilot["out"] / "evals" / f"seed-{cands[0]['dev_tasks_sha256'][:12]}.json").read_text())
    seed_nll = {r["id"]: r["nll_sum"] for r in seed["task_nll"]}
    keys = {}
    for c in cands:
        ev = json.loads((pilot["out"] / "evals" / f"{c['name']}.json").read_text())
        acc = sum(r["correct"] for r in ev["tasks"]) / len(ev["tasks"])
        change = sum(r["nll_sum"] - seed_nll[r["id"]] for r in ev["task_nll"]) / sum(r["tokens"] for r in ev["task_nll"])
        assert c["dev"]["accuracy"] == acc and math.isclose(c["dev"]["tasks"]["change_nats_per_token"], change)
        assert change < 0  # a rate of 1e-2 lowers the development task NLL in two updates
        keys[c["name"]] = (-acc, change, c["values"]["warmup_updates"])
    chosen = rec["results"]["chosen"]
    assert chosen["candidate"] == min(keys, key=keys.get) and chosen["rule"] == study_pilot.RULE
    best = next(c for c in cands if c["name"] == chosen["candidate"])
    assert chosen["values"] == {"lr": 1e-2, "lr_schedule": study_pilot.schedule_for(best["values"]["warmup_updates"])}
    assert all((pilot["out"] / f).is_file() for f in rec["raw_output"])


def test_parallel_candidates_give_the_sequential_results_in_parameter_order(pilot, pilot_parallel):
    seq, par = pilot["record"], pilot_parallel["record"]
    assert pilot_parallel["rc"] == 0 and par["status"] == "completed" and par["errors"] == []
    assert (seq["parameters"]["parallel"], par["parameters"]["parallel"]) == (1, 2)
    rows = par["results"]["candidates"]
    assert [c["name"] for c in rows] == ["c0", "c1"]
    assert [c["values"] for c in rows] == par["parameters"]["candidates"] == seq["parameters"]["candidates"]
    for s, p in zip(seq["results"]["candidates"], rows, strict=True):
        assert p["status"] == "completed" and p["dev_tasks_sha256"] == s["dev_tasks_sha256"]
        assert p["contract_digest"] == s["contract_digest"] and p["commit"]["full_root"] == s["commit"]["full_root"]
        assert p["updates"] == s["updates"]
        assert p["dev"] == s["dev"]  # accuracy and task NLL change: bit-identical floats on CPU
    assert par["results"]["chosen"] == seq["results"]["chosen"]
    # the seed scored once, as one after another: one seed evaluation with the same scores
    sha = rows[0]["dev_tasks_sha256"][:12]
    assert [f.name for f in (pilot_parallel["out"] / "evals").glob("seed-*")] == [f"seed-{sha}.json"]
    seed_scores = [json.loads((r["out"] / "evals" / f"seed-{sha}.json").read_text()) for r in (pilot, pilot_parallel)]
    assert [{k: v for k, v in e.items() if k != "seconds"} for e in seed_scores] == [
        {k: v for k, v in seed_scores[0].items() if k != "seconds"}] * 2
    # the candidates did run at once: c1's prepare had ended before c0's scoring began (one after another,
    # c1 starts only when c0 has finished)
    def mtimes(out, step):
        found = [f.stat().st_mtime_ns for f in (out / "logs").glob(f"{step}.*")]
        assert found, f"no logs of {step}"
        return found
    assert max(mtimes(pilot_parallel["out"], "c1-prepare")) < min(mtimes(pilot_parallel["out"], "c0-score"))
    assert max(mtimes(pilot["out"], "c0-score")) <= min(mtimes(pilot["out"], "c1-prepare"))


def test_pilot_never_opens_final_roles_and_dev_tasks_are_disjoint(pilot):
    fr = pilot["record"]["results"]["final_roles"]
    assert fr["opened"] is False and fr["ledger_unchanged"] and fr["final_files_found"] == []
    assert pilot["env"]["ledger"].read_bytes() == pilot["ledger_before"]
    for study in pilot["work"].glob("c*/study"):
        assert not (study / "evaluation").exists() and not (study / "screens.json").exists()
        prepared = study / "prepared"
        dev = {c.meta["digest"] for c in read_jsonl(prepared / "dev_tasks.jsonl")}
        final = {c.meta["digest"] for c in read_jsonl(prepared / "final_tasks.jsonl")}
        t = json.loads((prepared / "contract.json").read_text())["data"]["tasks"]
        train = {x.digest for x in generate_set(t["count"], t["seed"], t["role"], t["difficulty"])}  # the seed has none
        assert len(dev) == 8 and len(train) == 16 and not dev & final and not dev & train
        assert {c.meta["role"] for c in read_jsonl(prepared / "dev_tasks.jsonl")} == {"study-dev"}
        assert json.loads((prepared / "prepared.json").read_text())["counts"]["dev_tasks"] == 8


@pytest.mark.parametrize("args, match", [
    (["--lr", "0"], r"--lr: '0': expected a positive finite learning rate"),
    (["--lr", "nan"], r"--lr: 'nan': expected a positive finite learning rate"),
    (["--lr", "1e-3", "--warmup", "-1"], r"--warmup: '-1': expected a whole number of warm-up updates"),
    (["--lr", "1e-3", "--warmup", "1.5"], r"--warmup: '1.5': expected a whole number"),
    (["--parallel", "0"], r"--parallel: '0': expected a whole number of candidates run at once, at least 1"),
])
def test_bad_lr_or_warmup_is_refused(tmp_path, capsys, args, match):
    with pytest.raises(SystemExit) as e:
        study_pilot.main(["--tiny", "--device", "cpu", "--seed", str(tmp_path), "--out", str(tmp_path / "o"), *args])
    assert e.value.code == 2
    assert re.search(match, capsys.readouterr().err)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("args, match", [
    (["--warmup", "0", "8"], r"--warmup 8: expected fewer than 8 updates .*tiny\.json: field 'schedule\.updates'"),
    (["--until", "9"], r"--until 9: expected 1\.\.8 .*shared-gradient\.tiny\.json: field 'schedule\.updates'"),
])
def test_warmup_or_until_beyond_the_contract_is_refused_before_any_work(tmp_path, args, match):
    with pytest.raises(SystemExit, match=match):
        study_pilot.main(["--tiny", "--device", "cpu", "--seed", str(tmp_path), "--out", str(tmp_path / "o"), *args])
    assert not (tmp_path / "o").exists()


def test_rule_prefers_accuracy_then_task_nll_then_smaller_lr_then_shorter_warmup():
    def cand(name, lr, warmup, acc, task):
        return {"name": name, "values": {"lr": lr, "warmup_updates": warmup},
                "dev": {"accuracy": acc, "tasks": {"change_nats_per_token": task}, "eligible": True}}
    assert study_pilot.choose([cand("a", 1e-4, 0, 0.1, 0.0), cand("b", 3e-4, 0, 0.2, 0.1)])["name"] == "b"
    assert study_pilot.choose([cand("a", 1e-4, 0, 0.1, -0.1), cand("b", 3e-4, 0, 0.1, -0.2)])["name"] == "b"
    assert study_pilot.choose([cand("a", 3e-4, 0, 0.1, -0.1), cand("b", 1e-4, 4, 0.1, -0.1)])["name"] == "b"
    assert study_pilot.choose([cand("a", 1e-4, 4, 0.1, -0.1), cand("b", 1e-4, 0, 0.1, -0.1)])["name"] == "b"
    assert study_pilot.choose([{"name": "a", "values": {"lr": 1e-4, "warmup_updates": 0}, "status": "failed"}]) is None


def test_candidate_contract_sets_rate_schedule_and_adds_a_dev_role_only_when_absent():
    draft = load_study_contract(MEDIUM_DRAFT).data
    c = study_pilot.candidate_contract(draft, {"lr": 3e-4, "warmup_updates": 8})
    assert c["training"]["optimizer"]["lr"] == 3e-4
    assert c["training"]["lr_schedule"] == {"warmup_updates": 8, "after": "constant", "floor_ratio": 1.0}
    assert c["data"]["dev"] == {"count": 1024, "role": "study-dev", "seed": draft["data"]["final_test"]["seed"],
                                "difficulty": draft["data"]["final_test"]["difficulty"]}
    assert study_pilot.candidate_contract(draft, {"lr": 1e-4, "warmup_updates": 0})["training"]["lr_schedule"] == "constant"
    own = {**draft, "data": {**draft["data"], "dev": {"count": 64, "role": "mine", "seed": 1, "difficulty": 2}}}
    assert study_pilot.candidate_contract(own, {"lr": 1e-4, "warmup_updates": 0})["data"]["dev"]["role"] == "mine"
    assert draft["training"].get("lr_schedule") is None and "dev" not in draft["data"]  # the draft is untouched


def test_a_dev_role_changes_no_other_prepared_file_and_scoring_dev_needs_one(pilot, tmp_path):
    """The development draw comes after the final one: without `data.dev` the training documents, schedule,
    final tasks and probes are byte-identical; scoring development tasks of such a study is refused."""
    from kit.study.dev import DevScoringRefused, score_dev
    from kit.study.prepare import FILES, prepare_study

    env = pilot["env"]
    plain = prepare_study(env["contract"], env["seed"], env["source"], tmp_path / "plain", env["ledger"])
    with_dev = json.loads((pilot["work"] / "c0" / "study" / "prepared" / "prepared.json").read_text())
    assert set(with_dev["files"]) == set(FILES) | {"dev_tasks.jsonl"} and set(plain["files"]) == set(FILES)
    for name in FILES[1:]:  # contract.json differs: the candidate's rate, schedule and dev role
        assert plain["files"][name] == with_dev["files"][name], name
    assert "dev_tasks" not in plain["counts"]
    with pytest.raises(DevScoringRefused, match=r"prepared\.json: field 'files' has no 'dev_tasks\.jsonl'"):
        score_dev(tmp_path / "plain", env["seed"], tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()
