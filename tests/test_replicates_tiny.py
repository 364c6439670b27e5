"""The whole replicate path at tiny scale (issue 59 item 6): a tiny replicate design frozen first (k = 2 for the
study's single arm and for the growth pair, k from `plan`), the parts run through the notebooks (python -m
kit.replicates part by part, as the medium campaign runs them: preparations, cohort A's endpoint, the study arm's
replicates 0 and 1, the growth pair's, the development scorings) with no final role opened, then the design's
fresh final sets: refused while a replicate is missing, opened once after every replicate is committed, every
replicate scored on them once through that guard, the analysis (t intervals with k - 1 df, the shared item
variance from the per-item results, recomputed here from the written-out formula) and the report's section."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from scipy import stats
from support.adaptive import PUBLIC, distinct, make_seed, seed_tasks
from support.models import REPO
from support.study import exposed_ledger

from kit.data.conversations import synthetic_conversations
from kit.digest import load_json_strict, sha256_json

STUDY_C, ADAPTIVE_C = "contracts/shared-gradient.tiny.json", "contracts/adaptive-shards.tiny.json"


def _freeze_design(base: Path, ledger: Path) -> Path:
    """The tiny design, written before any replicate trains: k = 2 from `plan`, two fresh final sets of 12."""
    from kit.evidence.replicate_design import DESIGN_FORMAT, final_set_record
    from kit.replicate_stats import ANALYSIS_RULE, plan

    inputs = {"sd": 1.0, "effect": 30.0, "margin": 0.0, "alpha": 0.05, "power": 0.8, "one_sided": False}
    k = plan(**inputs)["k"]
    assert k == 2
    contracts = {name: {"path": str(REPO / c), "digest": sha256_json(load_json_strict(REPO / c))}
                 for name, c in (("study", STUDY_C), ("adaptive", ADAPTIVE_C))}
    design = {
        "format": DESIGN_FORMAT, "name": "tiny-replicates", "scale": "tiny",
        "frozen": {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rule": "before any replicate"},
        "contracts": contracts, "run_prefix": "demo-", "k": {"study/single": k},
        "pairs": {"growth_vs_control": {"arms": ["B-control", "B-growth"], "k": k, "start": "cohort A's endpoint"}},
        "k_chosen_by": [{"question": "tiny", "applies_to": ["study/single", "pairs.growth_vs_control"], **inputs,
                         "k": k, "power_at_k": plan(**inputs)["power_at_k"]}],
        "replicates": {"study": list(range(k)), "growth_vs_control": list(range(k)), "replicate_zero": "committed order"},
        "pairing": "by data order", "gpu_mode": {"applies_to": "CPU"},
        "analysis": {"rule": ANALYSIS_RULE, "level": 0.95, "questions": [], "per_item": "committed"},
        "stopping_rule": "every index runs, no more",
        "final_sets": {"study": final_set_record("tiny-replicate-final", 59, 1, 12, 8, ledger, base),
                       "growth": final_set_record("tiny-replicate-final.tasks", 59, 1, 12, 8, ledger, base,
                                                  ["lookup", "filtering", "arithmetic", "sorting"])},
        "gpu_time": load_json_strict(REPO / "campaigns" / "medium-replicate-design.json")["gpu_time"]}
    path = base / "campaigns" / "tiny-replicate-design.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(design, indent=1))
    return path


def _item_variance(matrix) -> float:
    """The shared item variance of the mean of a [k, n] replicate x item matrix, written out (two-way ANOVA:
    (MS_items - MS_residual) / k, over n)."""
    k, n = len(matrix), len(matrix[0])
    grand = sum(map(sum, matrix)) / (k * n)
    rows = [sum(r) / n for r in matrix]
    cols = [sum(matrix[i][j] for i in range(k)) / k for j in range(n)]
    ms_items = k * sum((c - grand) ** 2 for c in cols) / (n - 1)
    ms_resid = sum((matrix[i][j] - rows[i] - cols[j] + grand) ** 2 for i in range(k) for j in range(n)) / ((k - 1) * (n - 1))
    return max(0.0, (ms_items - ms_resid) / k) / n


def test_the_replicate_path_at_tiny_scale(tmp_path, monkeypatch, capsys):
    from kit.demo import RecordedRoots
    from kit.evidence.ledger import read_ledger
    from kit.evidence.replicate_analysis import FinalAnalysis, analyse, analyse_final
    from kit.evidence.replicate_design import (
        DesignError,
        FinalDesign,
        design_problems,
        open_final_set,
        read_design,
        score_final_set,
    )
    from kit.evidence.replicates import replicate_spread
    from kit.evidence.report.noise import replicate_final_html
    from kit.evidence.run_index import load_runs
    from kit.evidence.run_record import read_run_record
    from kit.evidence.verify import verify_evidence
    from kit.replicates import _prepared_task_digests, main, run_part
    from kit.study.arms import arm_dir
    from kit.study.prepare import _seed_task_digests
    from kit.study.replicate_dev import final_scorer

    seed = make_seed(tmp_path, distinct(synthetic_conversations(300, 11))[:120] + seed_tasks())
    ledger = exposed_ledger(tmp_path / "ledger" / "exposed.jsonl", PUBLIC, 4000, 4100)
    monkeypatch.setenv("KIT_LEDGER", str(ledger))
    monkeypatch.chdir(tmp_path)  # records name paths relative to here, as the campaign's checkout does
    design_path = _freeze_design(tmp_path, ledger)
    design = FinalDesign.of(read_design(design_path))
    before = ledger.read_bytes()
    # the single arm stands for the study's three (the medium campaign runs all, the same code path)
    common = ["--scale", "tiny", "--out", "work", "--seed", str(seed), "--runs-dir", "runs", "--arms", "single"]
    for part in ("prepare", "a-endpoint"):
        assert main(["--part", part, *common]) == 0, part
    runs, work = Path("runs"), Path("work")
    # replicate 0 re-runs the committed order under the design's run ids; the CLI keeps --replicates > 0 for
    # the campaign's extra replicates, so these parts are called as the CLI calls them, with k = 0, 1
    assert main(["--part", "study", *common, "--replicates", "0"]) == 2
    for part in ("study", "study-dev"):
        assert run_part(part, work, seed, runs, "tiny", [0, 1], arms=["single"]) == 0, part
    finals = ["--part", "finals", *common, "--design", str(design_path)]
    capsys.readouterr()
    assert main(finals) == 2  # the growth pair is not trained yet: the guard keeps both sets closed
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(r"stays closed: 4 of the design's runs are not completed in runs \(first: "
                                       r"demo-adaptive-B-control-r0 not completed\); expected every replicate", err[0])
    assert run_part("growth", work, seed, runs, "tiny", [0, 1]) == 0
    ids = sorted(p.name for p in runs.iterdir() if not p.name.startswith("."))  # not the run-id locks
    want = {f"demo-{r}-r{k}" for k in (0, 1) for r in ("study-single", "study-dev-single", "adaptive-B-control",
                                                         "adaptive-B-growth", "adaptive-dev-B", "adaptive-dev-G")}
    assert set(ids) == want | {"demo-replicates-A2-to-step4", "demo-replicates-A3-migrated",
                               "demo-replicates-study-prepare", "demo-replicates-adaptive-prepare"}
    for rid in ids:
        assert read_run_record(runs / rid).status == "completed", rid
        # (git: this folder is no repository; every other check of the record must pass)
        failed = [c for c in verify_evidence(runs / rid)["checks"] if c["result"] == "fail" and c["check"] != "git"]
        assert not failed, (rid, failed)
    assert ledger.read_bytes() == before  # no scoring recorded an exposure: no final role was opened
    b = read_run_record(runs / "demo-adaptive-B-growth-r1")
    assert b.parameters["REPLICATE"] == 1 and b.parameters["GROW"] is True
    # both arms of a pair trained on one derived order, recorded in their attempts, not the prepared one
    orders = {load_json_strict(p)["replicate"]["order_sha256"] for h in ("B-r1", "G-r1")
              for p in Path("work/adaptive", h).glob("attempts/*/attempt.json")}
    prepared = Path("work/adaptive/prepared")
    committed = load_json_strict(prepared / load_json_strict(prepared / "prepared.json")["schedule"]["file"])
    assert len(orders) == 1 and orders != {sha256_json([[e["id"] for e in step]
                                                         for step in committed["cohorts"]["B"]["steps"]])}
    spread = replicate_spread(load_runs(runs), prefix="demo")
    assert spread["arms"]["study/single"]["replicates"] == [0, 1]
    # the development analysis over the same records: two replicates, one df
    growth_dev = {tuple(q["key"]): q for q in analyse(runs, prefix="demo")["questions"]}[("growth_vs_control", "gain")]
    assert growth_dev["replicates"] == [0, 1] and growth_dev["interval"]["df"] == 1
    assert design_problems(design_path, tmp_path, runs) == []  # frozen before its runs; pools drawn again equal

    # the fresh final sets: every replicate scored once, through the guard that opens each set once
    roots = RecordedRoots(runs)
    homes = {**{f"demo-study-single-r{k}": arm_dir(Path("work/study"), "single", k) / "home" for k in (0, 1)},
             **{f"demo-adaptive-B-{s}-r{k}": Path("work/adaptive") / f"{h}-r{k}" for k in (0, 1)
                for s, h in (("control", "B"), ("growth", "G"))}}
    models = {rid: f"{home}:{roots.endpoint(rid)}" for rid, home in homes.items()}
    models["seed"] = "seed"  # the study's baseline, scored once on its set beside the replicates
    score = final_scorer(seed, 256, 24)
    study_models = {r: m for r, m in models.items() if "-study-" in r or r == "seed"}
    with pytest.raises(DesignError, match=r"models: 1 replicate\(s\) of final set 'study' .* not named"):
        score_final_set(design_path, "study", runs, ledger, dict(list(study_models.items())[:1]), score, "finals/study")
    assert ledger.read_bytes() == before  # a refused scoring opens nothing
    assert main(finals) == 0  # both sets opened once, every replicate scored once (python -m kit.replicates)
    scores = {name: {p.stem: load_json_strict(p) for p in sorted(Path("work/finals", name).glob("*.json"))}
              for name in ("study", "growth")}
    assert {lab: r["model"] for recs in scores.values() for lab, r in recs.items()} == models
    # on the host: the seed's trained tasks and the prepared jobs' sets never count as fresh
    trained, prepared_sets = _seed_task_digests(seed)[0], _prepared_task_digests(work)
    final_tasks = [json.loads(line)["digest"] for line in Path("work/study/prepared/final_tasks.jsonl").read_text().splitlines()]
    assert trained and set(final_tasks) <= prepared_sets
    assert not {e["digest"] for e in read_ledger(ledger) if e["purpose"].startswith("replicate design")} & (
        trained | prepared_sets)
    opened = [e for e in read_ledger(ledger) if e["purpose"].startswith("replicate design tiny-replicates")]
    assert len(opened) == 24 and {e["kind"] for e in opened} == {"final.task"}
    assert main(finals) == 2 and "was scored already" in capsys.readouterr().err  # the part run again
    for name in ("study", "growth"):
        with pytest.raises(DesignError, match="was opened already; a fresh set opens once"):
            open_final_set(design_path, name, runs, ledger)
        with pytest.raises(DesignError, match="was scored already; each replicate is scored on it once"):
            score_final_set(design_path, name, runs, ledger, models, score, f"work/finals/{name}")
        with pytest.raises(DesignError, match="was opened already"):  # a fresh output folder changes nothing
            score_final_set(design_path, name, runs, ledger, models, score, f"finals/{name}-again")
    assert len([e for e in read_ledger(ledger) if e["purpose"].startswith("replicate design")]) == 24
    # the analysis: per question the k = 2 paired differences, t interval with 1 df over s^2 / k plus the shared
    # item variance of the per-item results (written out above), never a multiple of a spread
    result = load_json_strict("work/replicates-final-analysis.json")
    assert result == json.loads(json.dumps(analyse_final(design, scores)))
    by_key = {tuple(q["key"]): q for q in result["questions"]}
    pairs = {("study", "single_gain"): ("demo-study-single-r{}", "seed"),
             ("growth_vs_control", "final"): ("demo-adaptive-B-growth-r{}", "demo-adaptive-B-control-r{}")}
    assert set(by_key) == {(*key, m) for key in pairs for m in ("accuracy", "NLL per token")}
    rows = {lab: rec["rows"] for recs in scores.values() for lab, rec in recs.items()}
    for (*key, measure), q in by_key.items():
        matrix = []
        for k in (0, 1):
            g, c = (rows[lab.format(k)] for lab in pairs[tuple(key)])
            if measure == "accuracy":
                matrix.append([float(x["correct"]) - float(y["correct"]) for x, y in zip(g, c)])
            else:
                tokens = sum(x["tokens"] for x in g) / len(g)
                matrix.append([(x["nll_sum"] - y["nll_sum"]) / tokens for x, y in zip(g, c)])
        d = [sum(r) / len(r) for r in matrix]
        iv = q["interval"]
        assert q["differences"] == pytest.approx(d, abs=1e-12) and iv["df"] == 1
        if d[0] == d[1]:
            assert not iv["estimable"] and "zero spread" in q["reading"]
            continue
        se = ((d[0] - d[1]) ** 2 / 2 / 2 + _item_variance(matrix)) ** 0.5
        half = stats.t.ppf(0.975, 1) * se
        assert iv["lower"] == pytest.approx(sum(d) / 2 - half, rel=1e-9) and iv["upper"] == pytest.approx(sum(d) / 2 + half, rel=1e-9)
        words = ("the interval above 0" if iv["lower"] > 0 else "the interval below 0" if iv["upper"] < 0
                 else "the interval covers 0")
        added = ", item sampling added" if _item_variance(matrix) > 0 else ""
        assert f"(t, 1 df{added})" in q["reading"] and words in q["reading"]
    nll = by_key[("growth_vs_control", "final", "NLL per token")]
    assert nll["interval"]["estimable"]
    page = replicate_final_html(FinalAnalysis.from_json(result, "work/replicates-final-analysis.json"))
    assert "Replicates on the fresh final set (tiny-replicates)" in page and "2 sd" not in page
    assert f"[{nll['interval']['lower']:+.4f}, {nll['interval']['upper']:+.4f}]" in page
    assert '<td class="num">1</td>' in page  # its df
