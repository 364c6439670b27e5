"""`kit report --select`: a report over some of a runs directory's runs, and the analysis of failing gates
that the verdict table carries (issue 17: a failing gate is analysed, never rescued by a re-run).

Checked on the committed medium evidence (runs/medium-*: the re-run on seed af103c8d, one H200) and the tiny
demo's (runs/demo-*), whose numbers the oracles below recompute from the runs' own sidecars. What the re-run
no longer shows is checked on earlier campaigns' records, kept unchanged: a failing quality screen, a speed
screen with a ratio and a pair arm across two GPUs on the first campaign's (seed 800112e3, two H200s,
runs/medium-superseded-seed-800112e3); failing B_vs_A gates and growth's failing generated answers on the
campaign on seed d1749707 (one H200, runs/medium-superseded-seed-d1749707)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.evidence import evidence_path

from kit.digest import load_json_strict
from kit.evidence.report.analysis import gate_analysis_rows, sign_test_p
from kit.evidence.report.page import render_report
from kit.evidence.run_index import load_runs, split_selection

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "runs"
OLD = evidence_path("medium-superseded-seed-800112e3")  # the first medium campaign's records, same run ids
D17 = evidence_path("medium-superseded-seed-d1749707")  # the campaign on the seed d1749707, same run ids


def test_a_selection_keeps_only_the_matching_run_ids():
    assert split_selection(RUNS / "medium-*") == (RUNS, "medium-*")
    assert split_selection(RUNS) == (RUNS, None)
    every = {r["run_id"] for r in load_runs(RUNS)}
    medium = {r["run_id"] for r in load_runs(RUNS / "medium-*")}
    assert medium == {i for i in every if i.startswith("medium-")}
    assert "medium-adaptive-final-A" in medium and not any(i.startswith("demo-") for i in medium)


def test_report_refuses_a_selection_that_matches_nothing_or_is_no_glob(tmp_path):
    with pytest.raises(ValueError, match=r"no run id matches 'nothing-\*'; nothing was written"):
        render_report(RUNS, tmp_path / "out", select="nothing-*")
    with pytest.raises(ValueError, match=r"select 'medium-seed': expected a glob over run ids"):
        render_report(RUNS, tmp_path / "out", select="medium-seed")
    assert not (tmp_path / "out").exists()


def test_sign_test_is_the_exact_binomial_tail():
    assert sign_test_p(0, 10) == pytest.approx(2 / 2 ** 10)
    assert sign_test_p(9, 4) == pytest.approx(2186 / 8192)  # 2 x (1 + 13 + 78 + 286 + 715) / 2^13
    assert sign_test_p(6, 7) == 1.0 and sign_test_p(0, 0) == 1.0


def test_failing_gates_are_analysed_from_their_bounds():
    from math import comb

    from kit.evidence.report.format import fmt

    def failing_checks(runs: Path) -> set:
        """The failing checks the records under `runs` list: the three finals' gates, the quality screen."""
        failing = set()
        for x in "ABG":
            m = runs / f"medium-adaptive-final-{x}" / "metrics"
            comparison = load_json_strict(m / "gate_verdict.json")["comparison"]
            failing |= {(comparison, name) for name, g in load_json_strict(m / "gates.json").items() if not g["passed"]}
        quality = load_json_strict(runs / "medium-study-evaluate" / "metrics" / "screen_quality.json")
        assert quality["verdict"] == "pass"
        return failing | {("quality screen", c) for c, ok in quality["checks"].items() if not ok}

    def gain_rows_are_the_bounds(runs: Path, rows: dict, failing_gains) -> None:
        for comparison, x in failing_gains:
            g = rows[(comparison, "gain")]
            bounds = load_json_strict(next((runs / f"medium-adaptive-final-{x}" / "metrics").glob("nll_change_bounds*")))
            assert (g.estimate, g.bound) == (bounds["tasks"]["change_nats_per_token"], bounds["tasks"]["bootstrap_upper"])
            assert g.estimate > -0.001 and ("inconclusive: " in g.analysis
                                               or "are both on the failing side" in g.analysis), g.analysis

    # the committed medium trial (seed af103c8d) fails one adaptive check, growth's gain against its control,
    # and no part of the study's quality screen (its speed screen was not evaluable: the arms' workers shared
    # one GPU): the failing checks its records list, and only those
    rows = {(r.comparison, r.check): r for r in gate_analysis_rows(RUNS / "medium-*")}
    assert set(rows) == failing_checks(RUNS) == {("growth_vs_control", "gain")}
    assert load_json_strict(RUNS / "medium-study-evaluate" / "metrics" / "screen_speed.json")["verdict"] == "not evaluable"
    gain_rows_are_the_bounds(RUNS, rows, [("growth_vs_control", "G")])
    # the campaign on the seed d1749707 (superseded, kept) failed three: B's gain over A, and growth's gain and
    # generated answers against its control
    rows = {(r.comparison, r.check): r for r in gate_analysis_rows(D17 / "medium-*")}
    assert set(rows) == failing_checks(D17) == {
        ("B_vs_A", "gain"), ("growth_vs_control", "gain"), ("growth_vs_control", "generated")}
    gain_rows_are_the_bounds(D17, rows, [("B_vs_A", "B"), ("growth_vs_control", "G")])
    # growth's generated answers: the net and the counts its gates recorded, and the exact sign test over them
    gen = load_json_strict(D17 / "medium-adaptive-final-G" / "metrics" / "gates.json")["generated"]
    r = rows[("growth_vs_control", "generated")]
    assert gen["net"] == gen["gained"] - gen["lost"] < 0
    assert r.estimate == f"net {gen['net']:+d} ({gen['gained']} gained, {gen['lost']} lost)"
    d = gen["gained"] + gen["lost"]
    p_exact = min(1.0, 2 * sum(comb(d, i) for i in range(min(gen["gained"], gen["lost"]) + 1)) / 2 ** d)
    assert f"{d} discordant answers; exact two-sided sign test p = {fmt(p_exact)}." in r.analysis
    assert p_exact >= 0.05 and "The split is within what no change produces" in r.analysis

    # the first medium campaign's records (superseded, kept): two failing gates, B's generated answers
    # (6 gained, 7 lost) and growth's gain, and one part of the study's quality screen, PowerSGD's task gain
    rows = {(r.comparison, r.check): r for r in gate_analysis_rows(OLD / "medium-*")}
    assert set(rows) == {("B_vs_A", "generated"), ("growth_vs_control", "gain"), ("quality screen", "task_gain")}
    assert rows[("B_vs_A", "generated")].estimate == "net -1 (6 gained, 7 lost)"
    assert "p = 1.000" in rows[("B_vs_A", "generated")].analysis
    g = rows[("growth_vs_control", "gain")]
    bounds = load_json_strict(next((OLD / "medium-adaptive-final-G" / "metrics").glob("nll_change_bounds*")))["tasks"]
    assert (g.estimate, g.bound) == (bounds["change_nats_per_token"], bounds["bootstrap_upper"])
    # the estimate and its opposite one-sided 95% bound (the estimate mirrored across the recorded bound) both on the
    # failing side
    opposite = g.estimate - (g.bound - g.estimate)
    assert g.estimate > opposite > -0.001 and f"opposite one-sided 95% bound ({fmt(opposite)}) are both" in g.analysis
    # an estimate on the passing side: the sample at which a bound of the same relative width clears it
    demo = {(r.comparison, r.check): r for r in gate_analysis_rows(RUNS / "demo-*")}
    a = demo[("A_vs_seed", "gain")]
    n = load_json_strict(next((RUNS / "demo-adaptive-final-A" / "metrics").glob("nll_change_bounds*")))["tasks"]["n"]
    need = n * ((a.bound - a.estimate) / (-0.001 - a.estimate)) ** 2
    assert a.estimate < -0.001 < a.bound
    assert f"about {need:,.0f} examples" in a.analysis
    # the study's task gain is a point difference: its analysis restates the counts and the controls' own
    changes = load_json_strict(OLD / "medium-study-evaluate" / "metrics" / "paired_task_change.json")
    t = rows[("quality screen", "task_gain")]
    p = changes["powersgd vs seed"]
    assert t.estimate == p["difference"] == (p["candidate_correct"] - p["reference_correct"]) / p["n"]
    assert f"PowerSGD {p['candidate_correct']}/{p['n']:,} against the seed's {p['reference_correct']}/" in t.analysis
    assert f"p = {sign_test_p(p['gained'], p['lost']):.3f}" in t.analysis
    assert all(changes[f"{a} vs seed"]["difference"] < 0.1 for a in ("single", "dense"))
    assert "No arm reaches the gain, the controls included" in t.analysis


def test_a_bound_analysis_reads_the_side_of_its_threshold():
    from kit.evidence.report.analysis import bound_text

    # noninferiority (a lower bound that must exceed -0.03): estimate -0.01, lower -0.05 -> half 0.04, margin 0.02
    assert "at about 400 examples (4.0\u00d7 the 100 scored)" in bound_text(
        -0.01, -0.05, -0.03, 100, upper=False)
    # a failing estimate whose opposite one-sided bound (-0.04 + 0.02) still reaches the passing side: inconclusive
    assert "inconclusive" in bound_text(-0.04, -0.06, -0.03, 100, upper=False)
    assert "opposite one-sided 95% bound (-0.02000) is on the passing side" in bound_text(-0.04, -0.06, -0.03, 100,
                                                                                          upper=False)
    # an upper bound that must stay at or below 0.02: estimate 0.01, upper 0.03 -> half 0.02, margin 0.01
    assert "at about 400 examples" in bound_text(0.01, 0.03, 0.02, 100, upper=True)
    assert "opposite one-sided 95% bound (0.03000) are both" in bound_text(0.05, 0.07, 0.02, 100, upper=True)
    assert "opposite one-sided 95% bound (0.04800) are both on the failing side of 0.02000" in bound_text(
        0.05, 0.052, 0.02, 100, upper=True)


def _speed_rows_match_their_measurements(runs: Path):
    """Each arm's speed row of the medium runs in `runs` against its own measurement.json."""
    from kit.evidence.report.analysis import speed_rows

    measured = {a: load_json_strict(runs / f"medium-study-{a}" / "metrics" / "measurement.json")
                for a in ("single", "dense", "powersgd")}
    rows = {r.arm: r for r in speed_rows(runs / "medium-*")}
    assert set(rows) == set(measured)
    for arm, m in measured.items():
        assert rows[arm].first_update_s == m["first_update_seconds"]
        assert rows[arm].ratio_after_first == pytest.approx(
            m["active_tokens_per_s_after_first_update"] / measured["single"]["active_tokens_per_s_after_first_update"])
    return measured, rows


def test_the_speed_screen_is_taken_apart_per_arm_from_the_arms_measurements():
    from kit.evidence.report.analysis import speed_reason, speed_sensitivity

    # the committed medium arms (the re-run): each arm's row is its own measurement, and the screen, whose
    # workers shared one GPU, is not evaluable, so there is no ratio to take apart and the reason is shown
    measured, rows = _speed_rows_match_their_measurements(RUNS)
    for arm, m in measured.items():
        assert rows[arm].compile_cache == m["compile_cache"]  # recorded per arm (one empty cache per worker)
    screen = load_json_strict(RUNS / "medium-study-evaluate" / "metrics" / "screen_speed.json")
    assert screen["verdict"] == "not evaluable" and screen["ratio"] is None and screen["shared_gpus"]
    assert speed_sensitivity(RUNS / "medium-*", "medium-study-evaluate") is None
    assert speed_reason(RUNS / "medium-*", "medium-study-evaluate") == screen["reason"]

    # the first medium campaign's arms (superseded, kept), on two GPUs: the screen's ratio taken apart
    measured, rows = _speed_rows_match_their_measurements(OLD)
    screen = load_json_strict(OLD / "medium-study-evaluate" / "metrics" / "screen_speed.json")
    s = speed_sensitivity(OLD / "medium-*", "medium-study-evaluate")
    assert s.ratio_active == pytest.approx(screen["ratio"])  # the screen's own ratio, recomputed
    assert s.verdict_active == screen["verdict"]
    after = s.ratio_after_first
    assert s.verdict_after_first == ("pass" if after >= screen["thresholds"]["min_speedup"] else "fail")
    # the medium arms (CUDA, recorded before each worker compiled from its own empty cache) say so
    assert {r.compile_cache for r in rows.values()} == {"the host's shared one (not recorded)"}
    assert "compiled through the host's shared compile cache" in s.text
    # the tiny demo's CPU screen: both readings are reported, and the text says whether the verdict turns on
    # the first update (CPU timings, so which it is depends on the machine the demo ran on)
    demo = speed_sensitivity(RUNS / "demo-*", "demo-study-evaluate")
    demo_screen = load_json_strict(RUNS / "demo-study-evaluate" / "metrics" / "screen_speed.json")
    assert demo.ratio_active == pytest.approx(demo_screen["ratio"]) and demo.verdict_active == demo_screen["verdict"]
    assert demo.verdict_after_first == ("pass" if demo.ratio_after_first >= demo_screen["thresholds"]["min_speedup"]
                                           else "fail")
    same = demo.verdict_active == demo.verdict_after_first
    assert ("the verdict does not depend on it." if same else "the verdict depends on it.") in demo.text
    assert "compile cache" not in demo.text  # CPU arms compile nothing


def test_the_trial_questions_are_answered_from_the_verdict_rows():
    from kit.evidence.report.verdicts import trial_questions

    # the committed medium evidence (the re-run, on one H200)
    q = {row["question"]: row for row in trial_questions(RUNS / "medium-*")}
    phase_a = q["Did phase A pass the three gates?"]
    assert phase_a["answer"].startswith("yes: gain pass") and "medium-adaptive-final-A" in phase_a["runs"]
    migrated = load_json_strict(RUNS / "medium-adaptive-A3-migrated" / "run.json")["device"]
    gpus = [g["name"] for g in migrated["gpus"]]
    compared = load_json_strict(RUNS / "medium-adaptive-migration" / "metrics" / "comparison.json")
    assert compared["learned_state_equal"] and compared["max_abs_parameter_difference"] == 0
    assert (len(gpus), gpus[0]) == (1, "NVIDIA H200")
    assert q["Did migration match its uninterrupted control?"]["answer"] == (
        f"yes on {len(gpus)} GPU(s) ({gpus[0]}): maximum |parameter difference| 0")
    assert q["Did growth change the outcome against its fixed-depth control?"]["answer"].startswith(
        "no measurable improvement over the control: gain fail")
    # B passed every gate against A: no question of its own (one is asked only for a failing comparison)
    b_gates = load_json_strict(RUNS / "medium-adaptive-final-B" / "metrics" / "gates.json")
    assert all(g["passed"] for g in b_gates.values()) and "Did B_vs_A pass its gates?" not in q
    study = q["Did PowerSGD pass the quality and speed screens, and on which link?"]
    quality = load_json_strict(RUNS / "medium-study-evaluate" / "metrics" / "screen_quality.json")["verdict"]
    speed = load_json_strict(RUNS / "medium-study-evaluate" / "metrics" / "screen_speed.json")
    assert study["answer"].startswith(f"quality {quality}; speed {speed['verdict']} ({speed['reason']}); ")
    assert "medium-study-evaluate" in study["runs"]
    arm_gpus = [g["name"] for g in load_json_strict(RUNS / "medium-study-powersgd" / "run.json")["device"]["gpus"]]
    assert len(arm_gpus) == 1 and study["answer"].endswith(
        f"link: gloo through host memory between workers sharing one GPU ({arm_gpus[0]}), not the seed's "
        "cross-zone network")
    # on the seed d1749707 (superseded, kept) B failed a gate against A, and its question says which
    q = {row["question"]: row for row in trial_questions(D17 / "medium-*")}
    b_gates = load_json_strict(D17 / "medium-adaptive-final-B" / "metrics" / "gates.json")
    failed = ", ".join(name for name, g in b_gates.items() if not g["passed"])
    assert failed and q["Did B_vs_A pass its gates?"]["answer"].startswith(f"no ({failed} failed): ")
    # the first medium campaign's records (superseded, kept), on two H200s
    q = {row["question"]: row for row in trial_questions(OLD / "medium-*")}
    phase_a = q["Did phase A pass the three gates?"]
    assert phase_a["answer"].startswith("yes: gain pass") and "medium-adaptive-final-A" in phase_a["runs"]
    assert q["Did migration match its uninterrupted control?"]["answer"] == (
        "yes on 2 GPU(s) (NVIDIA H200): maximum |parameter difference| 0")
    assert q["Did growth change the outcome against its fixed-depth control?"]["answer"].startswith(
        "no measurable improvement over the control: gain fail")
    study = q["Did PowerSGD pass the quality and speed screens, and on which link?"]
    quality = load_json_strict(OLD / "medium-study-evaluate" / "metrics" / "screen_quality.json")["verdict"]
    assert study["answer"].startswith(f"quality {quality}; speed ") and "medium-study-evaluate" in study["runs"]
    assert "without each arm's first update" in study["answer"]
    assert "link: NCCL between 2 GPUs of one host" in study["answer"]
    # a selection without the study's evaluation says so rather than answering
    adaptive_only = {row["question"]: row for row in trial_questions(RUNS / "medium-adaptive-*")}
    unanswered = adaptive_only["Did PowerSGD pass the quality and speed screens, and on which link?"]
    assert unanswered["answer"].startswith("not measured") and unanswered["runs"] == ""
    demo = {row["question"]: row["answer"] for row in trial_questions(RUNS / "demo-*")}
    assert demo["Did PowerSGD pass the quality and speed screens, and on which link?"].endswith(
        "link: gloo between CPU processes of one host (loopback), not the seed's cross-zone network")


def test_a_folder_of_two_scales_answers_each_scale_apart():
    from kit.evidence.report.verdicts import trial_questions

    both = trial_questions(RUNS)  # the tiny demo and the medium campaign share runs/
    questions = [row["question"] for row in both]
    assert "Did phase A pass the three gates? (medium scale)" in questions
    assert "Did phase A pass the three gates? (tiny scale)" in questions
    medium = {row["question"]: row["answer"] for row in trial_questions(RUNS / "medium-*")}
    assert {row["question"][: -len(" (medium scale)")]: row["answer"] for row in both
            if row["question"].endswith("(medium scale)")} == medium
