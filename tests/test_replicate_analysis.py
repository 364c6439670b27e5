"""The replicate analysis over the committed medium runs (issue 59 item 1): `kit replicates analyse PLAN` and
robustness_by_question, read from runs/ and the archived study pilot."""

from __future__ import annotations

import json

from support.models import REPO

from kit.cli import main
from kit.evidence.replicate_analysis import (
    AdaptiveScore,
    ReplicateAnalysis,
    StudyScore,
    analyse,
    analysis,
    robustness_by_question,
)
from kit.evidence.report.verdict_rows import verdict_rows

PLAN = REPO / "campaigns" / "medium-replicates-plan.json"


def test_analyse_prints_the_analysis_with_replicate_zero_modes_and_amendments(capsys):
    assert main(["replicates", "analyse", str(PLAN), "--runs-dir", str(REPO / "runs")]) == 0
    out = json.loads(capsys.readouterr().out)
    single = out["arms"]["study/single"]
    # replicate 0 of single: the study pilot's c0, whose endpoint root is medium-study-single's
    assert [(r["k"], r["correct"], r["n"]) for r in single] == [(0, 294, 1024), (1, 349, 1024), (2, 344, 1024)]
    assert single[0]["scored_by"] == "runs/study-pilot-2026-12-03/evals/c0.json"
    assert single[0]["training"]["run"] == "medium-study-single"
    assert any("study/dense: replicate 0" in m for m in out["missing"])
    q = {tuple(x["key"]): x for x in out["questions"]}
    gain = q[("study", "single_gain")]["interval"]
    assert gain["k"] == 3 and gain["df"] == 2 and gain["values"][0] == (294 - 159) / 1024
    ni = q[("quality screen", "noninferior_to_single")]
    assert ni["replicates"] == [1, 2] and ni["passes_in"] == 0 and ni["interval"]["df"] == 1
    assert q[("quality screen", "task_gain")]["interval"]["why"].endswith("agree exactly (zero spread)")
    growth = q[("growth_vs_control", "generated")]
    assert growth["replicates"] == [0, 1, 2] and growth["reading"].startswith(
        "growth vs control (development accuracy): trails in 2 of 3 replicates (-2.1, +0.2, -2.5 points), mean -1.5")
    assert out["amendments"] == json.loads(PLAN.read_text())["amendments"]
    assert any("modes differ" in m and "study/single" in m for m in out["modes"])
    assert "2 sd" not in json.dumps(out)
    # per-item results: committed where the evidence holds them (pinned by sha256), else said why not
    growth_arm = out["arms"]["adaptive/growth_vs_control"]
    assert growth_arm[0]["per_item"].startswith("committed: runs/medium-campaign-2026-12-03-block4/work/adaptive/dev-G.json")
    assert growth_arm[1]["per_item"].startswith("not committed: the evaluation file dev-G-r1.json (sha256 ")
    assert "cannot be re-derived without a GPU" in growth_arm[1]["per_item"]
    assert single[0]["per_item"].startswith("committed: runs/study-pilot-2026-12-03/evals/c0.json")
    assert single[1]["per_item"].startswith("not committed")


def test_robustness_answers_the_report_s_verdict_keys():
    words = robustness_by_question(REPO / "runs")
    rows = verdict_rows(REPO / "runs" / "medium-*")
    keys = {(r.comparison, r.check) for r in rows.all()}
    assert set(words) <= keys
    assert {("B_vs_A", "gain"), ("growth_vs_control", "gain"), ("quality screen", "noninferior_to_single")} <= set(words)
    assert words[("B_vs_A", "gain")].startswith("passes in 3 of 3 replicates (committed verdict: pass")
    assert words[("quality screen", "noninferior_to_single")].startswith("passes in 0 of 2 replicates (committed verdict: pass")
    assert words[("growth_vs_control", "gain")].startswith("passes in 1 of 3 replicates (committed verdict: fail")
    assert ("A_vs_seed", "gain") not in words  # cohort A has no replicates


def test_a_plan_without_its_scale_is_one_line(tmp_path, capsys):
    bad = tmp_path / "plan.json"
    bad.write_text('{"format": "kit-replicate-plan/1"}')
    assert main(["replicates", "analyse", str(bad)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0] and "field 'scale'" in err[0]


def test_the_analysis_changes_with_the_evidence(tmp_path):
    import shutil

    runs = tmp_path / "runs"
    for d in (REPO / "runs").glob("medium-*"):
        if d.is_dir():
            shutil.copytree(d, runs / d.name)
    side = runs / "medium-adaptive-dev-G-r2" / "metrics" / "generated_answers.json"
    side.write_text(json.dumps({"gained": 10, "lost": 40, "net": -30}))
    result = analysis(runs)
    q = {x.key: x for x in result.questions}
    assert q[("growth_vs_control", "generated")].passes_in == 1  # r1 alone now (r0 lost more than gained)
    assert result.arms["study/single"][0].k == 1  # no pilot beside these runs: no replicate 0


def test_the_analysis_is_its_declared_record_and_reads_back_from_its_json():
    plan = json.loads(PLAN.read_text())
    result = analysis(REPO / "runs", "medium", plan)
    assert all(isinstance(r, StudyScore) for r in result.arms["study/single"])
    assert all(isinstance(r, AdaptiveScore) for r in result.arms["adaptive/B_vs_A"])
    written = json.loads(json.dumps(analyse(REPO / "runs", "medium", plan)))
    again = ReplicateAnalysis.from_json(written, "analysis.json")
    assert again.to_json() == written and again.arms["study/single"][0].note is not None
    assert isinstance(again.arms["adaptive/growth_vs_control"][0], AdaptiveScore)


def test_the_noise_sentence_reads_no_effect_against_one_pair():
    from kit.evidence.report.noise import noise_sentences

    text = " ".join(noise_sentences(REPO / "runs" / "medium-*"))
    assert "powersgd vs single: +3.42 points." in text
    assert "that gap" not in text and "beyond" not in text and "the replicate section reads each question" in text
