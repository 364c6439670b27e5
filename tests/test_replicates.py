"""Replicates (issue 51): the derived data order, the study arm and the growth pair on it, development scoring
only, the final-role guard, the committed plan, the adoption and the spread computed from run records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from support.models import REPO

from kit import numerics
from kit.replicate_order import ReplicateRefused, check_replicate, reorder_steps, replicate_seed

numerics.apply()


# --- the derived order --------------------------------------------------------------------------------
def _steps():
    return [[{"id": f"{role}{k}-{i}", "role": role} for role, n in (("new", 3), ("replay", 1)) for i in range(n)]
            for k in range(6)]


def test_replicate_zero_is_the_committed_order_and_others_are_derived_deterministically():
    steps = _steps()
    assert reorder_steps(steps, 68223, 0, role_of=lambda e: e["role"], key=lambda e: e["id"]) is steps
    one = reorder_steps(steps, 68223, 1, role_of=lambda e: e["role"], key=lambda e: e["id"])
    assert one == reorder_steps(steps, 68223, 1, role_of=lambda e: e["role"], key=lambda e: e["id"])
    two = reorder_steps(steps, 68223, 2, role_of=lambda e: e["role"], key=lambda e: e["id"])
    assert one != steps and two != steps and one != two
    # every document once, and every update keeps its count per role
    assert sorted(e["id"] for s in one for e in s) == sorted(e["id"] for s in steps for e in s)
    for a, b in zip(one, steps):
        assert sorted(e["role"] for e in a) == sorted(e["role"] for e in b)
    # the seed is derived from the contract's seed and the index alone, and recorded as such
    assert replicate_seed(4, 1) == 15669414610369112200 and replicate_seed(4, 0) is None
    assert replicate_seed(5, 1) != replicate_seed(4, 1)
    for bad in (-1, True, 1.0, "1"):
        with pytest.raises(ReplicateRefused, match="REPLICATE"):
            check_replicate(bad)


# --- the study arm on a derived order, and its development scores -------------------------------------
@pytest.fixture(scope="module")
def study(env, tmp_path_factory):
    from kit.study import arms
    from kit.study.prepare import prepare_study

    sdir = tmp_path_factory.mktemp("replicate-study") / "study"
    prepare_study(env["contract"], env["seed"], env["source"], sdir, env["ledger"])
    recs = {k: arms.run_arm(arms.ArmRequest(sdir, "single", env["seed"], replicate=k)) for k in (0, 1)}
    return {"dir": sdir, "recs": recs}


def test_study_replicate_zero_repeats_the_committed_roots_and_one_differs_deterministically(study, env,
                                                                                            tmp_path):
    from kit.study import arms
    from kit.study.prepare import prepare_study

    r0, r1 = study["recs"][0], study["recs"][1]
    assert r0["status"] == r1["status"] == "completed"
    assert "replicate" not in r0 and r0["home"].endswith("arms/single/home")  # the committed record's bytes
    assert r1["home"].endswith("arms/single-r1/home") and r1["replicate"]["index"] == 1
    assert r1["replicate"]["order_seed"] == replicate_seed(4, 1)
    assert r0["endpoint"]["full_root"] != r1["endpoint"]["full_root"]
    # a study prepared afresh: the same arm with no replicate is replicate 0, and replicate 1 repeats itself
    again = tmp_path / "study"
    prepare_study(env["contract"], env["seed"], env["source"], again, env["ledger"])
    plain = arms.run_arm(arms.ArmRequest(again, "single", env["seed"]))
    r1_again = arms.run_arm(arms.ArmRequest(again, "single", env["seed"], replicate=1))
    assert plain["endpoint"]["full_root"] == r0["endpoint"]["full_root"]
    assert r1_again["endpoint"]["full_root"] == r1["endpoint"]["full_root"]
    assert r1_again["replicate"]["order_sha256"] == r1["replicate"]["order_sha256"]
    # the study's final scoring sees the contract's arms only: a replicate is never frozen or scored there
    assert [s.arm for s in arms.arm_statuses(again, __import__("kit.study.prepare", fromlist=["x"])
                                                  .load_prepared(again)[1].terms)] == ["single", "dense", "powersgd"]


def test_study_replicate_is_scored_on_development_roles_without_touching_the_ledger(study, env):
    from kit.study.replicate_dev import dev_sidecars, score_replicates

    ledger_before = Path(env["ledger"]).read_bytes()
    r1 = study["recs"][1]["endpoint"]
    scores = score_replicates(study["dir"], env["seed"], {"seed": "seed", "single-r1": f"{r1['home']}:{r1['full_root']}"})
    cand, seed = scores["single-r1"], scores["seed"]
    side = dev_sidecars(cand, seed)
    assert cand.retention is not None and seed.retention is not None
    assert side["accuracy_by_family"]["all"]["n"] == len(seed.tasks) > 0
    want = (sum(r.nll_sum for r in cand.retention) - sum(r.nll_sum for r in seed.retention)) / sum(
        r.tokens for r in cand.retention)
    assert side["nll_change"]["retention"]["change_nats_per_token"] == pytest.approx(want, rel=1e-12)
    assert Path(env["ledger"]).read_bytes() == ledger_before
    evaluation = study["dir"] / "evaluation"
    assert not (evaluation / "freeze.json").exists() and not (evaluation / "opened.jsonl").exists()
    dev_ids = {r.id for r in seed.tasks}
    final_ids = {json.loads(line)["id"] for line in (study["dir"] / "prepared" / "final_tasks.jsonl").open()}
    assert dev_ids and not dev_ids & final_ids


# --- the growth pair's order and the final-role guard --------------------------------------------------
def test_cohort_steps_of_replicate_zero_are_the_prepared_ones_and_the_guard_refuses_a_replicate(prepared,
                                                                                                 tmp_path):
    from kit.adaptive.selection import FinalRolesRefused, ModelPair, open_final_roles, replicate_index
    from kit.adaptive.train import cohort_steps
    from kit.digest import load_json_strict
    from kit.record import to_json
    from kit.refs import CommitRef, SeedRef

    pj = load_json_strict(Path(prepared["out"]) / "prepared.json")
    committed = load_json_strict(Path(prepared["out"]) / pj["schedule"]["file"])["cohorts"]["B"]["steps"]
    assert to_json(cohort_steps(Path(prepared["out"]), "B", 0)) == committed  # typed entries, the committed JSON
    one = to_json(cohort_steps(Path(prepared["out"]), "B", 1))
    assert one != committed and sorted(e["id"] for s in one for e in s) == sorted(e["id"] for s in committed for e in s)
    home = tmp_path / "G-r1"
    root = "ab" * 32
    (home / "attempts" / "x").mkdir(parents=True)
    (home / "attempts" / "x" / "attempt.json").write_text(json.dumps(
        {"commits": [{"full_root": root}], "replicate": {"index": 1}}))
    assert replicate_index(home, root) == 1 and replicate_index(home, "cd" * 32) == 0
    with pytest.raises(FinalRolesRefused, match="replicate 1"):
        open_final_roles(tmp_path, None, [root], "test", models=ModelPair(CommitRef(str(home), root), SeedRef("s")))


# --- the committed plan, the campaign's steps, the adoption --------------------------------------------
def test_the_committed_plan_is_the_code_s_plan_and_no_step_opens_a_final_role(tmp_path):
    from kit.demo import PlaceholderRoots
    from kit.replicates import PARTS, campaign_plan, replicate_steps

    committed = json.loads((REPO / "campaigns" / "medium-replicates-plan.json").read_text())
    assert {k: committed[k] for k in campaign_plan("medium")} == campaign_plan("medium")
    ids = []
    for part in PARTS:
        for step in replicate_steps(part, tmp_path / "work", tmp_path / "seed", PlaceholderRoots()):
            ids.append(step.run_id)
            assert step.parameters.get("SPLIT", "dev") == "dev" and "SELECTION" not in step.parameters
            assert step.notebook not in ("14_adaptive_select.ipynb", "21_study_evaluate.ipynb")
            if step.run_id.endswith(("-r1", "-r2")) and step.notebook != "13_adaptive_evaluate.ipynb":
                assert step.parameters["REPLICATE"] == int(step.run_id[-1])
    planned = [r for side in ("study", "adaptive") for rep in committed[side]["replicates"] for r in
               rep["runs"] + rep["dev_runs"]]
    assert set(planned) <= set(ids) and len(ids) == len(set(ids))


def test_adoption_adds_replicates_beside_the_committed_runs_and_refuses_a_changed_ledger(tmp_path):
    from campaigns.adopt_replicates import AdoptionRefused, adopt

    pack, runs = tmp_path / "pack", tmp_path / "runs"
    for rid, size in (("medium-study-single-r1", 300), ("medium-replicates-A2-to-step64", 200),
                      ("medium-study-single", 999)):
        (pack / "runs" / rid).mkdir(parents=True)
        (pack / "runs" / rid / "run.json").write_text(json.dumps({"status": "completed", "pad": "x" * size}))
        (pack / "runs" / rid / "kernel.log").write_bytes(b"log")
    (pack / "runs" / "medium-study-dense-r2").mkdir()  # cut off by the block's end: left in the pack
    (pack / "runs" / "medium-study-dense-r2" / "run.json").write_text(json.dumps({"status": "running"}))
    (pack / "work").mkdir()
    (pack / "work" / "replicates-checks.json").write_bytes(b"{}")
    (runs / "medium-study-single").mkdir(parents=True)
    (runs / "medium-study-single" / "run.json").write_bytes(b"committed")
    (pack / "ledger").mkdir()
    (pack / "ledger" / "exposed.jsonl").write_bytes(b'{"a":1}\n')
    plan = tmp_path / "plan.json"
    spec = {"file": "x", "entries": 1, "sha256": __import__("hashlib").sha256(b'{"a":1}\n').hexdigest()}
    plan.write_text(json.dumps({"inputs": {"ledger": spec}, "budget": {"tracked_bytes_added_at_most": 600}}))
    folder = runs / "medium-replicates-2026-12-04"
    with pytest.raises(AdoptionRefused, match="over the budget"):
        adopt(pack, folder, runs, plan, budget=400, log=lambda *_: None)
    done = adopt(pack, folder, runs, plan, log=lambda *_: None)
    assert done["bytes"] == 2 + sum(len(json.dumps({"status": "completed", "pad": "x" * n})) for n in (300, 200))
    assert done["folders"] == ["medium-replicates-2026-12-04", "medium-study-single-r1"]
    assert not (runs / "medium-study-single-r1" / "kernel.log").exists()
    assert (folder / "medium-replicates-A2-to-step64" / "run.json").is_file()
    assert (runs / "medium-study-single" / "run.json").read_bytes() == b"committed"  # never moved or replaced
    (pack / "ledger" / "exposed.jsonl").write_bytes(b'{"a":1}\n{"final":1}\n')
    with pytest.raises(AdoptionRefused, match="inputs.ledger.sha256"):
        adopt(pack, runs / "other", runs, plan, log=lambda *_: None)


# --- the spread, from synthetic run folders -------------------------------------------------------------
def _run(runs: Path, run_id: str, metrics: dict, parameters: dict | None = None) -> None:
    d = runs / run_id
    (d / "metrics").mkdir(parents=True)
    for name, value in metrics.items():
        (d / "metrics" / f"{name}.json").write_text(json.dumps(value))
    rows = _run.rows  # type: ignore[attr-defined]
    rows.append({"dir": d, "run_id": run_id, "status": "completed", "parameters": parameters or {}})


def _acc(cand: dict, base: dict) -> dict:
    return {f: {"accuracy_candidate": cand[f], "accuracy_baseline": base[f], "n": 100} for f in cand}


def test_spread_per_arm_and_comparison_and_no_verdict_against_it(tmp_path):
    from kit.evidence.replicates import replicate_spread

    _run.rows = []  # type: ignore[attr-defined]
    seed = {"all": 0.2, "lookup": 0.3}
    study = {("single", 1): 0.50, ("single", 2): 0.54, ("dense", 1): 0.51, ("dense", 2): 0.52,
             ("powersgd", 1): 0.55, ("powersgd", 2): 0.61}
    for (arm, k), acc in study.items():
        _run(tmp_path, f"medium-study-dev-{arm}-r{k}",
             {"accuracy_by_family": _acc({"all": acc, "lookup": acc + 0.1}, seed),
              "nll_change": {"tasks": {"change_nats_per_token": -acc}, "retention": {"change_nats_per_token": 0.01 * k}}},
             {"ARM": arm, "REPLICATE": k})
    for k, (g, c) in enumerate(((0.60, 0.58), (0.57, 0.59))):
        suffix = f"-r{k}" if k else ""
        _run(tmp_path, f"medium-adaptive-dev-G{suffix}",
             {"accuracy_by_family": _acc({"all": g}, {"all": c}),
              "nll_change_bounds": {"tasks": {"change_nats_per_token": 0.004 * (k + 1)},
                                    "retention": {"change_nats_per_token": 0.001}}})
    _run(tmp_path, "medium-study-evaluate", {"paired_task_change": {"powersgd vs single": {"difference": 0.034},
                                                                   "dense vs single": {"difference": 0.0107},
                                                                   "single vs seed": {"difference": 0.2}}})
    _run(tmp_path, "medium-adaptive-final-G", {"accuracy_by_family": _acc({"all": 0.614}, {"all": 0.6}),
                                               "nll_change_bounds": {"tasks": {"change_nats_per_token": 0.002}}})
    _run.rows.append({"dir": tmp_path / "x", "run_id": "medium-study-dev-single-r3", "status": "failed",  # ignored
                      "parameters": {"REPLICATE": 3}})
    s = replicate_spread(_run.rows)  # type: ignore[attr-defined]
    single = s["arms"]["study/single"]
    assert single["replicates"] == [1, 2] and single["pooled_accuracy"]["mean"] == pytest.approx(0.52)
    assert single["pooled_accuracy"]["sd"] == pytest.approx(math.sqrt(2 * 0.02 ** 2))
    assert single["accuracy_by_family"]["lookup"]["mean"] == pytest.approx(0.62)
    assert single["retention_nll_change"]["values"] == [0.01, 0.02]
    diff = s["comparisons"]["study/powersgd vs single"]["accuracy_difference"]
    assert diff["values"] == pytest.approx([0.05, 0.07]) and diff["sd"] == pytest.approx(math.sqrt(2) * 0.01)
    assert s["noise_floor"]["accuracy_difference"]["values"] == pytest.approx([0.01, -0.02])
    growth = s["comparisons"]["adaptive/growth vs control"]
    assert growth["replicates"] == [0, 1] and growth["accuracy_difference"]["values"] == pytest.approx([0.02, -0.02])
    assert s["arms"]["adaptive/B-growth"]["runs"] == ["medium-adaptive-dev-G", "medium-adaptive-dev-G-r1"]
    # issue 59: no final effect is read against a development spread, and no "2 sd" rule is left
    assert "verdicts" not in s and "2 x" not in s["rule"] and s["format"] == "kit-replicate-spread/2"


def test_the_medium_page_reads_the_committed_replicates_with_t_intervals(tmp_path):
    """The noise section's replicate tables come from the replicate analysis (issue 59): PowerSGD vs single
    with its two development replicates, a t interval with 1 df and the contract's noninferiority rule failing
    in both; the growth pair with replicate 0; single's replicate 0 (the pilot's c0, 294/1,024); no "2 sd";
    and an altered replicate record changes the reading."""
    import re
    import shutil

    from kit.evidence.report.noise import replicate_spread_html

    def rows(runs):
        text = re.sub(r"<[^>]+>", "|", replicate_spread_html(runs / "medium-*"))
        return re.sub(r"\|+", "|", text)

    page = rows(REPO / "runs")
    assert "2 sd" not in page and "beyond" not in page and "|effect| / sd" not in page
    assert re.search(r"\|study powersgd vs single \(development accuracy\)\|quality screen / noninferior_to_single\|1, 2\|"
                     r"-2.9, -2.4 points\|-2.7\|\[-29.2, \+23.8\]\|1\|0 of 2\|", page)
    assert "|study/single|0|294/1024 (28.7%)|runs/study-pilot-2026-12-03/evals/c0.json|medium-study-single|" in page
    assert re.search(r"\|growth vs control \(development accuracy\)\|growth_vs_control / generated\|0, 1, 2\|"
                     r"-2.1, \+0.2, -2.5 points\|-1.5\|", page)
    assert "B vs A (development accuracy): beats in 3 of 3 replicates (+5.5, +4.1, +4.7 points)" in page
    assert "deterministic (KIT_GPU_DETERMINISTIC=1)" in page and "KIT_GPU_DETERMINISTIC unset" in page
    assert "Plan amendment: 2026-12-04, after it ran: the growth pair&#x27;s replicate 2" in page
    assert re.search(r"\|growth vs control task NLL change \(development\)\|3\|nats/token\|0.0049\|0.0155\|31%", page)
    runs = tmp_path / "runs"
    for d in (REPO / "runs").glob("medium-*"):
        if d.is_dir():
            shutil.copytree(d, runs / d.name)
    side = runs / "medium-study-dev-powersgd-r1" / "metrics" / "accuracy_by_family.json"
    data = json.loads(side.read_text())
    data["all"]["correct_candidate"] = 400  # 400 of 1,024: above single's 349
    data["all"]["accuracy_candidate"] = 400 / 1024
    side.write_text(json.dumps(data))
    assert "|study powersgd vs single (development accuracy)|quality screen / noninferior_to_single|1, 2|+5.0, -2.4 points|" in rows(runs)