"""The confirmatory campaign's driver (kit/replicate_campaign.py) as a dry run at tiny scale, no training: the block
plan of the frozen medium design printed by the CLI (every replicate index once per phase, every block within a
session), the plan over synthetic committed run records (a block cut off midway is planned again with only what is
missing; a half-done index stays left), one block run through a recording executor (each part a `python -m
kit.replicates --design` process in the design's GPU mode, the replays of committed inputs with it unset, the run
ids the design's), kit.replicates' refusals under a design (an index beyond k, another GPU mode, another scale),
the finals gate, and the fresh final set scored in batches: opened once by the first, read back by the next,
no label scored twice. Training and the notebooks are covered by tests/test_replicates_tiny.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.adaptive import PUBLIC
from support.models import REPO
from support.study import exposed_ledger

from kit.digest import load_json_strict, sha256_json

MEDIUM = REPO / "campaigns" / "medium-replicate-design.json"
MODE = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8", "KIT_GPU_DETERMINISTIC": "1"}


def _design(base: Path, ledger: Path) -> Path:
    """A tiny design of the medium's shape: three study arms and the growth pair, k = 2, the medium's timings."""
    from kit.evidence.replicate_design import DESIGN_FORMAT, final_set_record
    from kit.replicate_stats import ANALYSIS_RULE, plan

    inputs = {"sd": 1.0, "effect": 30.0, "margin": 0.0, "alpha": 0.05, "power": 0.8, "one_sided": False}
    k = plan(**inputs)["k"]
    arms = [f"study/{a}" for a in ("single", "dense", "powersgd")]
    contracts = {name: {"path": c, "digest": sha256_json(load_json_strict(REPO / c))}
                 for name, c in (("study", "contracts/shared-gradient.tiny.json"),
                                 ("adaptive", "contracts/adaptive-shards.tiny.json"))}
    design = {
        "format": DESIGN_FORMAT, "name": "tiny-confirm", "scale": "tiny",
        "frozen": {"at": "2026-12-05T00:00:00Z", "rule": "before any replicate"},
        "contracts": contracts, "run_prefix": "demo-confirm-", "k": dict.fromkeys(arms, k),
        "pairs": {"growth_vs_control": {"arms": ["B-control", "B-growth"], "k": k, "start": "cohort A's endpoint"}},
        "k_chosen_by": [{"question": "tiny", "applies_to": [*arms, "pairs.growth_vs_control"], **inputs, "k": k,
                         "power_at_k": plan(**inputs)["power_at_k"]}],
        "replicates": {"study": list(range(k)), "growth_vs_control": list(range(k)), "replicate_zero": "committed"},
        "pairing": "by data order", "gpu_mode": {**MODE, "applies_to": "every replicate"},
        "analysis": {"rule": ANALYSIS_RULE, "level": 0.95, "questions": [], "per_item": "committed"},
        "stopping_rule": "every index runs, no more",
        "final_sets": {"study": final_set_record("tiny-confirm-final", 63, 1, 12, 8, ledger, base),
                       "growth": final_set_record("tiny-confirm-final.tasks", 63, 1, 12, 8, ledger, base)},
        "gpu_time": load_json_strict(MEDIUM)["gpu_time"]}
    path = base / "campaigns" / "tiny-replicate-design.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(design, indent=1))
    return path


def _commit(runs: Path, *ids: str, status: str = "completed", at: str = "2026-12-05T01:00:00Z") -> None:
    for rid in ids:
        (runs / rid).mkdir(parents=True, exist_ok=True)
        (runs / rid / "run.json").write_text(json.dumps({"run_id": rid, "status": status, "started_at": at}))


def test_the_medium_design_s_block_plan_covers_every_replicate_once_per_phase_within_sessions():
    from kit.evidence.replicate_design import read_design
    from kit.replicate_campaign import SESSION_S, plan_blocks

    done = subprocess.run([sys.executable, "-m", "kit.replicate_campaign", "plan", "--design", str(MEDIUM)],
                          capture_output=True, text=True, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr
    design = read_design(MEDIUM)
    blocks = [b.to_json() for b in plan_blocks(design, MEDIUM)]  # the blocks as confirm-block-N.json writes them
    assert done.stdout.splitlines()[0].startswith(f"design medium-confirmatory-replicates (run prefix medium-confirm-): "
                                                  f"{len(blocks)} block(s)")
    for phase in (False, True):
        of = [b for b in blocks if b["finals"] is phase]
        assert sorted(k for b in of for k in b["study"]) == list(range(10))
        assert sorted(k for b in of for k in b["growth"]) == list(range(6))
    assert [b["finals"] for b in blocks] == sorted(b["finals"] for b in blocks)  # every finals block after training
    assert sum(b["seed"] for b in blocks) == 1
    for b in blocks:
        assert b["seconds"][1] <= SESSION_S and b["steps"][:3] == ["machine start", "seed rebuild", "prepare both jobs"]
        assert ("cohort A's endpoint" in b["steps"]) == bool(b["growth"])
        assert f"block {b['block']} ({'finals' if b['finals'] else 'training'}): " in done.stdout
    low, high = (sum(b["seconds"][i] for b in blocks) / 60 for i in (0, 1))
    assert f"total: {low:.1f}-{high:.1f} device min in {len(blocks)} session(s)" in done.stdout


def test_a_block_resumes_from_committed_runs_and_runs_its_parts_in_the_design_s_mode(tmp_path, monkeypatch, capsys):
    from kit.evidence.replicate_design import DesignError, open_final_set, read_design, score_final_set
    from kit.replicate_campaign import index_runs, plan_blocks, run_block
    from kit.replicates import main as replicates_main
    from kit.study.arms import arm_dir

    monkeypatch.delenv("KIT_LEDGER", raising=False)
    ledger = exposed_ledger(tmp_path / "ledger" / "exposed.jsonl", PUBLIC, 4000, 4100)
    path = _design(tmp_path, ledger)
    design = read_design(path)
    runs, out = tmp_path / "runs", tmp_path / "work"
    full = [b.to_json() for b in plan_blocks(design, path, runs)]
    # (the medium's timings: the second growth pair would pass the session's 30 minutes, high estimate)
    assert [(b["study"], b["growth"], b["finals"]) for b in full] == [
        ([0, 1], [0], False), ([], [1], False), ([0, 1], [0], True), ([], [1], True)]

    # block 1 cut off midway: study r0 done, r1 trained but not scored, growth r0 done
    _commit(runs, *index_runs(design, "study", 0), *index_runs(design, "growth", 0))
    _commit(runs, *(r for r in index_runs(design, "study", 1) if "-dev-" not in r))
    _commit(runs, "demo-confirm-adaptive-B-control-r1", status="failed")
    _commit(runs, "demo-confirm-adaptive-B-growth-r1", at="2026-12-04T23:59:59Z")  # before the freeze: not its
    left = [b.to_json() for b in plan_blocks(design, path, runs)]
    assert [(b["study"], b["growth"]) for b in left] == [([1], [1]), ([0, 1], [0]), ([], [1])]

    calls = []

    def execute(changes, argv):  # the re-derived inputs' records appear as the parts would commit them
        calls.append((changes, argv))
        if "--fixed" not in argv:  # a finals scoring
            return 0
        fixed, part, where = (argv[argv.index(f) + 1] for f in ("--fixed", "--part", "--runs-dir"))
        made = {"prepare": ["study-prepare", "adaptive-prepare"], "a-endpoint": ["A2-to-step4", "A3-migrated"]}
        _commit(Path(where), *(f"{fixed}-{r}" for r in made.get(part, [])), at="2026-12-05T01:00:00Z")
        return 0

    assert run_block(path, 1, out, tmp_path / "seed", runs, execute=execute, tag="s2") == 0
    parts = [(argv[argv.index("--part") + 1], argv) for _, argv in calls]
    assert [p for p, _ in parts] == ["prepare", "a-endpoint", "study", "study", "study-dev", "growth"]
    # r1's committed trainings re-derived first (their homes are not on a new host), in a runs folder of their own
    redo = parts.pop(2)[1]
    assert redo[redo.index("--runs-dir") + 1] == str(out / "rederived-runs") and redo[-5:] == [
        "1", "--arms", "dense", "powersgd", "single"]
    calls.pop(2)
    for (changes, argv), (part, _) in zip(calls, parts):
        assert argv[1:3] == ["-m", "kit.replicates"] and argv[argv.index("--design") + 1] == str(path)
        assert argv[argv.index("--fixed") + 1] == "demo-confirm-s2" and argv[argv.index("--runs-dir") + 1] == str(runs)
        changes = dict(changes)
        assert changes.pop("KIT_LEDGER") == str(ledger.absolute())  # every part the ledger beside the runs
        assert changes == (dict.fromkeys(MODE) if part in ("prepare", "a-endpoint") else MODE), part
    assert parts[2][1][-5:] == ["1", "--arms", "dense", "powersgd", "single"] and parts[4][1][-1] == "1"
    record = load_json_strict(out / "confirm-block-1.json")
    assert [s["argv"][0] for s in record["steps"] if s["argv"][0] in ("copy", "rm")] == ["copy", "rm", "rm"]
    assert [s["rc"] for s in record["steps"]] == [0] * 9 and record["block"]["study"] == [1]
    assert record["steps"][2]["argv"] == ["copy", str(out / "rederived-runs"), str(runs / "demo-confirm-s2-study-prepare"),
                                          str(runs / "demo-confirm-s2-adaptive-prepare"),
                                          str(runs / "demo-confirm-s2-A2-to-step4"), str(runs / "demo-confirm-s2-A3-migrated")]
    assert run_block(path, 1, out, tmp_path / "seed", runs, dry_run=True) == 0 and len(calls) == 5  # runs nothing

    # kit.replicates under the design: the stopping rule, the design's mode and scale (one line each, before work)
    common = ["--scale", "tiny", "--out", str(out), "--seed", "seed", "--runs-dir", str(runs), "--design", str(path)]
    for var in MODE:
        monkeypatch.delenv(var, raising=False)
    capsys.readouterr()
    for argv, wanted in (
            (["--part", "study", "--replicates", "2"], "field 'replicates.study' = [0, 1]; replicate 2 is not among"),
            (["--part", "growth", "--replicates", "0"], ("field 'gpu_mode.CUBLAS_WORKSPACE_CONFIG' = ':4096:8'; the "
                                                        "environment has None")),
            (["--part", "study-r0"], "part 'study-r0' has no place in a design's campaign")):
        assert replicates_main([*common, *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(path) in err[0] and wanted in err[0], err
    assert replicates_main([*common[:1], "medium", *common[2:], "--part", "prepare"]) == 2
    assert "field 'scale' = 'tiny'; expected --scale 'medium'" in capsys.readouterr().err

    # the finals block stays closed while a replicate is missing
    assert run_block(path, 2, out, tmp_path / "seed", runs, execute=execute) == 2
    assert "the fresh final sets stay closed: 2 of the design's runs" in capsys.readouterr().err
    # growth pair r1 trained, not scored: the pair re-derived (training only) before its development scorings
    _commit(runs, *(r for r in index_runs(design, "study", 1) if "-dev-" in r), "demo-confirm-adaptive-B-control-r1",
            "demo-confirm-adaptive-B-growth-r1", at="2026-12-05T02:00:00Z")
    calls.clear()
    assert run_block(path, 1, out, tmp_path / "seed", runs, execute=execute, tag="s3") == 0
    assert [(argv[argv.index("--runs-dir") + 1], argv[argv.index("--part") + 1:]) for _, argv in calls][2:] == [
        (str(out / "rederived-runs"), ["growth", "--replicates", "1", "--train-only"]),
        (str(runs), ["growth", "--replicates", "1"])]
    # every index done: the finals blocks alone are left, the first with the seed's scoring
    _commit(runs, *(r for k in (0, 1) for g in ("study", "growth") for r in index_runs(design, g, k)),
            at="2026-12-05T02:00:00Z")
    scores = tmp_path / "finals"
    finals = [b.to_json() for b in plan_blocks(design, path, runs, scores)]
    assert [(b["finals"], b["seed"], b["study"], b["growth"]) for b in finals] == [(True, True, [0, 1], [0]),
                                                                                    (True, False, [], [1])]
    calls.clear()
    assert run_block(path, 1, out, tmp_path / "seed", runs, scores, execute=execute, tag="f1") == 0
    record = load_json_strict(out / "confirm-block-1.json")["steps"]  # the homes' removal runs in the driver
    steps = [s["argv"][s["argv"].index("--part") + 1] if "--part" in s["argv"] else s["argv"][0] for s in record]
    assert steps == ["prepare", "a-endpoint", "study", "finals", "rm", "growth", "finals", "rm"]
    assert record[4]["argv"][1:] == [str(arm_dir(out / "study", a, k) / "home")
                                     for k in (0, 1) for a in ("dense", "powersgd", "single")]
    fin = [argv for _, argv in calls if "finals" in argv]
    assert fin[0][fin[0].index("--labels") + 1:] == [f"demo-confirm-study-{a}-r{k}" for k in (0, 1)
                                                      for a in ("dense", "powersgd", "single")] + ["seed"]
    assert all(argv[argv.index("--runs-dir") + 1] == str(runs) and argv[argv.index("--rederived") + 1] ==
               str(out / "rederived-runs") for argv in fin)
    assert "--train-only" in calls[4][1]

    # batches on the fresh final set: the first opens it (the guard), the next reads it back, none scores twice
    def score(tasks, model):
        return [{"id": t.id, "correct": len(model) % 2 == 0, "nll_sum": 1.0, "tokens": 2} for t in tasks]

    labels = [f"demo-confirm-study-{a}-r{k}" for k in (0, 1) for a in ("dense", "powersgd", "single")]
    before = len(ledger.read_text().splitlines())
    first = score_final_set(path, "study", runs, ledger, {lab: lab for lab in labels[:3]}, score, scores / "study",
                            base=tmp_path, batch=True)
    opened = len(ledger.read_text().splitlines())
    assert set(first) == set(labels[:3]) and opened > before
    second = score_final_set(path, "study", runs, ledger, {lab: lab for lab in [*labels[3:], "seed"]}, score,
                             scores / "study", base=tmp_path, batch=True)
    assert len(ledger.read_text().splitlines()) == opened  # read back, nothing recorded
    assert second[labels[3]]["tasks_sha256"] == first[labels[0]]["tasks_sha256"]
    with pytest.raises(DesignError, match="was scored already; each replicate is scored on it once"):
        score_final_set(path, "study", runs, ledger, {labels[0]: "x"}, score, scores / "study", base=tmp_path,
                        batch=True)
    with pytest.raises(DesignError, match="was opened already; a fresh set opens once"):
        open_final_set(path, "study", runs, ledger, base=tmp_path)
    (rest,) = [b.to_json() for b in plan_blocks(design, path, runs, scores)]  # the study's set scored: the growth pairs' are left
    assert (rest["study"], rest["growth"], rest["seed"]) == ([], [0, 1], False)
