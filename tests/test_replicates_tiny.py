"""The whole replicate path at tiny scale through the notebooks (python -m kit.replicates, part by part, as the
medium campaign runs it): preparations, cohort A's endpoint, every study arm's replicate, the growth pair on its
order, the development scorings; no final role opened (the ledger's bytes unchanged), records that verify, and
the spread computed from them."""

from __future__ import annotations

from pathlib import Path

from support.adaptive import PUBLIC, distinct, make_seed, seed_tasks
from support.study import exposed_ledger

from kit.data.conversations import synthetic_conversations
from kit.digest import load_json_strict, sha256_json


def test_the_replicate_parts_at_tiny_scale(tmp_path, monkeypatch):
    from kit.evidence.replicates import replicate_spread
    from kit.evidence.run_index import load_runs
    from kit.evidence.run_record import read_run_record
    from kit.evidence.verify import verify_evidence
    from kit.replicates import main

    seed = make_seed(tmp_path, distinct(synthetic_conversations(300, 11))[:120] + seed_tasks())
    ledger = exposed_ledger(tmp_path / "ledger" / "exposed.jsonl", PUBLIC, 4000, 4100)
    before = ledger.read_bytes()
    monkeypatch.setenv("KIT_LEDGER", str(ledger))
    monkeypatch.chdir(tmp_path)  # records name paths relative to here, as the campaign's checkout does
    # the single arm stands for the study's three (the medium campaign runs all, the same code path)
    common = ["--scale", "tiny", "--out", "work", "--seed", str(seed), "--runs-dir", "runs", "--replicates", "1",
              "--arms", "single"]
    for part in ("prepare", "a-endpoint", "study", "growth", "study-dev"):
        assert main(["--part", part, *common]) == 0, part
    runs = Path("runs")
    ids = sorted(p.name for p in runs.iterdir() if not p.name.startswith("."))  # not the run-id locks
    want = {"demo-study-single-r1", "demo-study-dev-single-r1", "demo-adaptive-B-control-r1",
            "demo-adaptive-B-growth-r1", "demo-adaptive-dev-B-r1", "demo-adaptive-dev-G-r1",
            "demo-replicates-A2-to-step4", "demo-replicates-A3-migrated", "demo-replicates-study-prepare",
            "demo-replicates-adaptive-prepare"}
    assert set(ids) == want
    for rid in ids:
        assert read_run_record(runs / rid).status == "completed", rid
        # (git: this folder is no repository; every other check of the record must pass)
        failed = [c for c in verify_evidence(runs / rid)["checks"] if c["result"] == "fail" and c["check"] != "git"]
        assert not failed, (rid, failed)
    assert ledger.read_bytes() == before  # no scoring recorded an exposure: no final role was opened
    b = read_run_record(runs / "demo-adaptive-B-growth-r1")
    assert b.parameters["REPLICATE"] == 1 and b.parameters["GROW"] is True
    # both arms of the pair trained on one derived order, recorded in their attempts, not the prepared one
    orders = {load_json_strict(p)["replicate"]["order_sha256"] for h in ("B-r1", "G-r1")
              for p in Path("work/adaptive", h).glob("attempts/*/attempt.json")}
    prepared = Path("work/adaptive/prepared")
    committed = load_json_strict(prepared / load_json_strict(prepared / "prepared.json")["schedule"]["file"])
    assert len(orders) == 1 and orders != {sha256_json([[e["id"] for e in step]
                                                         for step in committed["cohorts"]["B"]["steps"]])}
    spread = replicate_spread(load_runs(runs), prefix="demo")
    assert set(spread["arms"]) == {"study/single", "adaptive/B-control", "adaptive/B-growth"}
    assert spread["arms"]["study/single"]["replicates"] == [1]
    assert spread["comparisons"]["adaptive/growth vs control"]["replicates"] == [1]
    # the replicate analysis over the same records (issue 59): one replicate per question is said to be not
    # estimable, with its GPU mode and code disclosed, and the single arm's missing replicate 0 named
    from kit.evidence.replicate_analysis import analyse

    result = analyse(runs, prefix="demo")
    growth = {tuple(q["key"]): q for q in result["questions"]}[("growth_vs_control", "gain")]
    assert growth["replicates"] == [1] and growth["reading"].endswith("not estimable: 1 replicate (a spread needs at least 2).")
    assert result["arms"]["study/single"][0]["training"]["run"] == "demo-study-single-r1"
    assert any(m.startswith("study/single: replicate 0") for m in result["missing"])
