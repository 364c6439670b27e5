"""The medium pilot and freeze (campaigns/medium_pilot.py, campaigns/medium_freeze.py) and the medium drafts.

- the drafts validate and carry the trial's counts exactly, the small seed's digest, cuda / gpu-bf16;
- adding them leaves the small seed's dev/final exclusion set (and so its pinned digest) unchanged;
- the pilot in --tiny --device cpu mode, on a 16-wide fixture seed: runs, picks by its stated rule, and
  never opens final roles (no final-access / selections / final-evaluations log, ledger bytes unchanged);
- the freeze refuses a missing, uncommitted, incomplete or mismatched pilot record and otherwise writes
  contracts that pass the schemas and record the pilot's run id and record sha256.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from support.adaptive import distinct, make_seed
from support.evidence import evidence_path

from campaigns import medium_freeze, medium_pilot
from campaigns.pilot_run import PilotRun
from kit.adaptive.schema import load_adaptive_contract
from kit.contract import ContractError
from kit.data.conversations import synthetic_conversations
from kit.digest import sha256_json
from kit.study.schema import load_study_contract

REPO = Path(__file__).resolve().parents[1]

ADAPTIVE_DRAFT = REPO / "contracts" / "adaptive-shards.medium.draft.json"
STUDY_DRAFT = REPO / "contracts" / "shared-gradient.medium.draft.json"
SMALL_SEED_DIGEST = "af103c8dbbbff7052cee8583da170a1b952c1f4177b70fdfd0ca8423f1e5b7a4"  # the seed of probe q1
# the first medium campaign (seed 800112e3): its frozen contracts and the drafts they were frozen from
FIRST_CAMPAIGN = evidence_path("medium-superseded-seed-800112e3")
# the re-run's pilots on the seed before (e83d0af3): its frozen study contract and the drafts of then
SEED_E83D0AF3 = evidence_path("medium-superseded-seed-e83d0af3")
# the re-run on the seed d1749707 (probe p10): the drafts its contracts were frozen from
SEED_D1749707 = evidence_path("medium-superseded-seed-d1749707")


# --- the drafts -------------------------------------------------------------------------------------
def test_adaptive_draft_has_the_trials_counts_exactly():
    c = load_adaptive_contract(ADAPTIVE_DRAFT).data
    a, b = c["cohorts"]["A"], c["cohorts"]["B"]
    assert (c["scale"], c["seed"]["parameter_digest"]) == ("medium", SMALL_SEED_DIGEST)
    assert "pilot" not in c and c["description"].startswith("DRAFT")
    assert (a["updates"], a["documents_per_update"], b["updates"], b["documents_per_update"]) == (128, 64, 128, 64)
    assert a["totals"] == {"new": 6144, "replay_a": 0, "replay_conv": 2048}
    assert b["totals"] == {"new": 4096, "replay_a": 2048, "replay_conv": 2048}
    assert c["evaluation"]["final"]["tasks"] == 1024 and c["evaluation"]["final"]["retention"]["count"] == 512
    assert c["planner"]["regime"] == "gpu-bf16" and c["training"]["compute_dtype"] == "bfloat16"
    assert c["growth"]["copy_block"] == 11  # the small seed's last block (12 blocks)
    full = json.loads((REPO / "contracts" / "adaptive-shards.json").read_text())
    for field in ("cohorts", "endpoints", "migration", "gates", "bootstrap", "comparisons", "data_seeds", "tasks"):
        assert c[field] == full[field], field


def test_study_draft_has_the_trials_counts_exactly():
    c = load_study_contract(STUDY_DRAFT).data
    s, d = c["schedule"], c["data"]
    assert (c["scale"], c["device"], c["seed"]["parameter_digest"]) == ("medium", "cuda", SMALL_SEED_DIGEST)
    assert "DRAFT" in c["name"] and "pilot" not in c
    assert (s["updates"], s["documents_per_update"]) == (128, 32)
    assert (d["tasks"]["count"], d["replay"]["count"], d["final_test"]["count"]) == (3072, 1024, 1024)
    assert (d["retention"]["count"], d["retention"]["exposed"]) == (128, True)
    assert [a["name"] for a in c["arms"]] == ["single", "dense", "powersgd"]


def test_medium_scale_needs_the_pinned_digest_and_pilot_only_at_medium(tmp_path):
    data = json.loads(ADAPTIVE_DRAFT.read_text())
    data["seed"]["parameter_digest"] = None
    (tmp_path / "a.json").write_text(json.dumps(data))
    with pytest.raises(ContractError, match=r"'seed\.parameter_digest' = None; expected the pinned digest of the medium"):
        load_adaptive_contract(tmp_path / "a.json")
    tiny = json.loads((REPO / "contracts" / "adaptive-shards.tiny.json").read_text())
    tiny["pilot"] = {"run_id": "x", "record": "r", "record_sha256": "a" * 64, "draft": "d", "draft_digest": "b" * 64,
                     "rule": "r", "chosen": {"lr": 1e-4}}
    (tmp_path / "t.json").write_text(json.dumps(tiny))
    with pytest.raises(ContractError, match=r"field 'pilot' is present with scale = 'tiny'"):
        load_adaptive_contract(tmp_path / "t.json")


def test_drafts_leave_the_small_seeds_exclusion_set_unchanged(tmp_path):
    """The small seed build excludes the dev/final tasks of every contracts/*.json: the drafts reuse the full
    contracts' task seeds, so the set, and the pinned digest built against it, do not change."""
    from kit.seed.small import forbidden_task_sets

    without = tmp_path / "contracts"
    shutil.copytree(REPO / "contracts", without)
    for p in without.glob("*.medium*.json"):
        p.unlink()
    digests = lambda sets: set().union(*(s.digests for s in sets.values()))
    assert digests(forbidden_task_sets(REPO / "contracts")) == digests(forbidden_task_sets(without))


# --- the pilot on CPU -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pilot_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("pilot")
    seed = make_seed(root, distinct(synthetic_conversations(200, 11))[:80])
    ledger = root / "ledger.jsonl"
    ledger.write_text("")
    out = root / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KIT_LEDGER", str(ledger))
        rc = medium_pilot.main(["--tiny", "--device", "cpu", "--seed", str(seed), "--lr", "1e-3", "1e-4",
                                "--until", "1", "--out", str(out), "--work", str(root / "work"), "--run-id", "pilot-test"])
    return {"rc": rc, "out": out, "work": root / "work", "ledger": ledger, "seed": seed,
            "record": json.loads((out / "run.json").read_text())}


@pytest.fixture(scope="module")
def pilot_parallel(pilot_run):
    """The same pilot (seed, candidates, ledger) with both candidates at once."""
    root = pilot_run["out"].parent
    out = root / "run-parallel"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KIT_LEDGER", str(pilot_run["ledger"]))
        rc = medium_pilot.main(["--tiny", "--device", "cpu", "--seed", str(pilot_run["seed"]), "--lr", "1e-3", "1e-4",
                                "--until", "1", "--parallel", "2", "--out", str(out), "--work",
                                str(root / "work-parallel"), "--run-id", "pilot-test-parallel"])
    return {"rc": rc, "out": out, "record": json.loads((out / "run.json").read_text())}


def test_pilot_runs_every_candidate_and_picks_by_its_rule(pilot_run):
    rec = pilot_run["record"]
    assert pilot_run["rc"] == 0 and rec["status"] == "completed" and rec["format"] == "kit-bench/1"
    cands = rec["results"]["candidates"]
    assert [c["overrides"]["lr"] for c in cands] == [1e-4, 1e-3]  # sorted: the tie-break prefers the smaller
    for c in cands:
        assert c["status"] == "completed" and c["commit"]["cohort_step"] == 1
        assert set(c["dev"]["accuracy_by_family"]) == {"lookup", "filtering", "arithmetic", "sorting"}
        assert c["dev"]["retention_threshold"] == 0.02
    assert rec["results"]["dev_roles_identical_across_candidates"] is True
    # Both are eligible and tie at 0% accuracy on the tiny seed; the larger rate lowers the development task
    # NLL more (the runs are bit-reproducible on any x86 CPU: the kit's numeric profile), so the rule's
    # second key picks it.
    chosen = rec["results"]["chosen"]
    assert all(c["dev"]["eligible"] for c in cands) and {c["dev"]["accuracy"] for c in cands} == {0.0}
    assert cands[1]["dev"]["tasks"]["change_nats_per_token"] < cands[0]["dev"]["tasks"]["change_nats_per_token"]
    assert chosen["candidate"] == "c1" and chosen["values"]["lr"] == 1e-3 and chosen["rule"] == medium_pilot.RULE
    assert all((pilot_run["out"] / f).is_file() for f in rec["raw_output"])
    assert rec["parameters"]["drafts"]["adaptive"]["digest"] == load_adaptive_contract(
        REPO / "contracts" / "adaptive-shards.tiny.json").digest


def test_parallel_candidates_give_the_sequential_results_in_parameter_order(pilot_run, pilot_parallel):
    seq, par = pilot_run["record"], pilot_parallel["record"]
    assert pilot_parallel["rc"] == 0 and par["status"] == "completed" and par["errors"] == []
    assert (seq["parameters"]["parallel"], par["parameters"]["parallel"]) == (1, 2)
    rows = par["results"]["candidates"]
    assert [c["name"] for c in rows] == ["c0", "c1"]
    assert [c["overrides"] for c in rows] == par["parameters"]["candidates"] == seq["parameters"]["candidates"]
    for s, p in zip(seq["results"]["candidates"], rows, strict=True):
        assert p["status"] == "completed"
        assert p["contract_digest"] == s["contract_digest"] and p["dev_role_sha256"] == s["dev_role_sha256"]
        assert p["commit"]["full_root"] == s["commit"]["full_root"] and p["updates"] == s["updates"]
        assert p["dev"] == s["dev"]  # accuracy, NLL changes and bounds: bit-identical floats on CPU
    assert par["results"]["chosen"] == seq["results"]["chosen"]
    # the candidates did run at once: c1's prepare had ended before c0's evaluation began (one after another,
    # c1 starts only when c0 has finished)
    assert max(log_mtimes(pilot_parallel["out"], "c1-prepare")) < min(log_mtimes(pilot_parallel["out"], "c0-evaluate"))
    assert max(log_mtimes(pilot_run["out"], "c0-evaluate")) <= min(log_mtimes(pilot_run["out"], "c1-prepare"))


def log_mtimes(out: Path, step: str) -> list[int]:
    """When a step's logs (OUT/logs/STEP.out, .err) were last written: the step's end, or its start if silent."""
    found = [p.stat().st_mtime_ns for p in (out / "logs").glob(f"{step}.*")]
    assert found, f"no logs of {step}"
    return found


def test_parallel_must_be_at_least_one(tmp_path, capsys):
    for bad in ("0", "-1", "2.5"):
        with pytest.raises(SystemExit) as e:
            medium_pilot.main(["--tiny", "--device", "cpu", "--seed", str(tmp_path), "--parallel", bad,
                               "--out", str(tmp_path / "o")])
        assert e.value.code == 2
        assert f"--parallel: '{bad}': expected a whole number of candidates run at once, at least 1" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


class _Pilot(PilotRun):
    """PilotRun with stand-in steps: `behave(pilot, i, row)` is candidate i."""

    def __init__(self, out: Path, n: int, behave):
        self.out, self.behave, self.deadline_saved = out, behave, threading.Event()
        self.record = {"status": "running", "errors": [], "parameters": {"candidates": [{"lr": k} for k in range(n)]},
                       "results": {"seed": None, "candidates": []}}
        self.start()

    def seed(self):
        return Path("seed")

    def candidate(self, i, values, seed, row):
        self.behave(self, i, row)
        self.save(row, status="completed")

    def save(self, row=None, **fields):
        super().save(row, **fields)
        if self.record["status"] == "partial":
            self.deadline_saved.set()


@pytest.mark.parametrize("parallel", [1, 2])
def test_a_failed_candidate_marks_its_own_row(tmp_path, parallel):
    """c0 fails after c1 has started (at once: c1's row is then the last one); only c0's row is failed."""
    c1_started = threading.Event()

    def behave(pilot, i, row):
        if i == 1:
            c1_started.set()
        if i == 0:
            if parallel > 1:
                assert c1_started.wait(30)
                assert pilot.record["results"]["candidates"][-1]["name"] != "c0"
            raise RuntimeError("c0 broke")

    pilot = _Pilot(tmp_path, 3, behave)
    pilot.run_candidates(parallel)
    rows = json.loads((tmp_path / "run.json").read_text())["results"]["candidates"]
    assert [(r["name"], r["values"], r["status"]) for r in rows] == [
        ("c0", {"lr": 0}, "failed"), ("c1", {"lr": 1}, "completed"), ("c2", {"lr": 2}, "completed")]
    assert rows[0]["error"] == "c0 broke" and "error" not in rows[1]
    assert pilot.record["errors"] == [{"candidate": "c0", "error": "c0 broke"}]
    assert pilot.record["status"] == "running"  # settle() decides: a failed candidate fails the record


def test_no_candidate_starts_after_a_deadline(tmp_path):
    """At once: c0 meets the deadline while c1 runs; c1 finishes, c2 and c3 never start, the record is partial."""
    c1_started = threading.Event()

    def behave(pilot, i, row):
        if i == 1:
            c1_started.set()
            assert pilot.deadline_saved.wait(30)  # c1 is still running when the deadline is recorded
        elif i == 0:
            assert c1_started.wait(30)
            raise TimeoutError("2s left before --deadline-s")
        else:
            raise AssertionError(f"c{i} started after the deadline")

    pilot = _Pilot(tmp_path, 4, behave)
    pilot.run_candidates(2)
    rec = json.loads((tmp_path / "run.json").read_text())
    assert rec["status"] == "partial" and rec["errors"] == [{"deadline": "2s left before --deadline-s"}]
    assert [(r["name"], r["status"]) for r in rec["results"]["candidates"]] == [("c0", "running"), ("c1", "completed")]


def test_pilot_never_opens_final_roles(pilot_run):
    rec = pilot_run["record"]
    fr = rec["results"]["final_roles"]
    assert fr["opened"] is False and fr["ledger_unchanged"] and fr["final_logs_found"] == []
    assert pilot_run["ledger"].read_text() == ""  # kit records every final scoring here
    for prepared in pilot_run["work"].glob("c*/prepared"):
        assert not any((prepared / name).exists() for name in medium_pilot.FINAL_LOGS)
    for ev in (pilot_run["out"] / "evals").glob("*.json"):
        e = json.loads(ev.read_text())
        assert e["split"] == "dev" and set(e["roles"].values()) == {"dev.tasks", "dev.retention"}
    # the guard the pilot relies on: final scoring without a selection record is refused
    from kit.adaptive.evaluation import EvaluateRequest, evaluate
    from kit.adaptive.selection import FinalRolesRefused

    copy = pilot_run["work"] / "guard-copy"
    shutil.copytree(pilot_run["work"] / "c0" / "prepared", copy)
    c = rec["results"]["candidates"][0]
    with pytest.raises(FinalRolesRefused, match="selection"):
        evaluate(EvaluateRequest(prepared=copy, candidate=f"{pilot_run['work'] / 'c0' / 'home'}:{c['commit']['full_root']}",
                                 baseline=f"seed:{pilot_run['seed']}", split="final", out=copy.parent / "x.json",
                                 tokenizer_dir=str(pilot_run["seed"]), max_tokens=256))


def test_pilot_records_the_positive_control(pilot_run):
    rec = pilot_run["record"]
    pc = rec["results"]["positive_control"]
    cands = rec["results"]["candidates"]
    # the tiny seed answers nothing and --until 1 is not cohort A's endpoint: the control cannot hold
    assert pc["seed_pooled_dev_accuracy"] == cands[0]["dev"]["seed_accuracy"] == 0.0
    assert (pc["seed_in_band"], pc["at_cohort_endpoint"], pc["holds"]) == (False, False, False)
    assert pc["best_eligible_gain"] == max(c["dev"]["accuracy"] for c in cands) - 0.0
    assert pc["cohort_A_updates"] == load_adaptive_contract(
        REPO / "contracts" / "adaptive-shards.tiny.json").terms.cohorts.A.updates


def test_positive_control_needs_the_band_the_endpoint_and_the_gain():
    def cand(name, acc, seed, eligible=True):
        return {"name": name, "dev": {"accuracy": acc, "seed_accuracy": seed, "eligible": eligible}}
    assert medium_pilot.positive_control([cand("a", 0.30, 0.10)], 128, 128)["holds"] is True
    assert medium_pilot.positive_control([cand("a", 0.24, 0.10)], 128, 128)["holds"] is False  # +14 points
    assert medium_pilot.positive_control([cand("a", 0.30, 0.10)], 64, 128)["holds"] is False  # not the endpoint
    assert medium_pilot.positive_control([cand("a", 0.60, 0.45)], 128, 128)["holds"] is False  # seed above band
    assert medium_pilot.positive_control([cand("a", 0.40, 0.10, eligible=False)], 128, 128)["holds"] is False
    both = medium_pilot.positive_control([cand("a", 0.40, 0.10, eligible=False), cand("b", 0.26, 0.10)], 128, 128)
    assert both["best_eligible"] == "b" and both["holds"] is True


def test_warmup_candidates_set_the_schedule_and_old_candidates_keep_the_drafts(tmp_path):
    draft = load_adaptive_contract(ADAPTIVE_DRAFT).data
    old = medium_pilot.candidate_overrides([1e-4], [8], [1024])
    assert old == [{"lr": 1e-4, "microbatch_size": 8, "max_tokens": 1024}]
    assert medium_pilot.candidate_contract(draft, old[0])["training"]["lr_schedule"] == draft["training"]["lr_schedule"]
    new = medium_pilot.candidate_overrides([3e-4, 1e-4], [8], [1024], [16, 0])
    assert [(c["lr"], c["warmup"]) for c in new] == [(1e-4, 0), (1e-4, 16), (3e-4, 0), (3e-4, 16)]
    assert medium_pilot.candidate_contract(draft, new[0])["training"]["lr_schedule"] == "constant"
    assert medium_pilot.candidate_contract(draft, new[1], "cosine")["training"]["lr_schedule"] == {
        "warmup_updates": 16, "after": "cosine", "floor_ratio": 0.1}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(medium_pilot.candidate_contract(draft, new[3], "cosine")))
    assert load_adaptive_contract(path).terms.training.lr_schedule.warmup_updates == 16  # passes the schema
    with pytest.raises(SystemExit):
        medium_pilot.main(["--tiny", "--device", "cpu", "--seed", "x", "--warmup", "4", "--until", "2", "--out", "y"])


def test_rule_prefers_accuracy_then_task_nll_then_smaller_lr():
    def cand(name, lr, acc, task, ret):
        return {"name": name, "overrides": {"lr": lr, "microbatch_size": 8, "max_tokens": 256},
                "dev": {"accuracy": acc, "tasks": {"change_nats_per_token": task}, "eligible": ret <= 0.02}}
    assert medium_pilot.choose([cand("a", 1e-4, 0.1, 0.0, 0.0), cand("b", 3e-4, 0.2, 0.0, 0.03)])["name"] == "a"
    assert medium_pilot.choose([cand("a", 1e-4, 0.1, -0.1, 0.0), cand("b", 3e-4, 0.1, -0.2, 0.0)])["name"] == "b"
    assert medium_pilot.choose([cand("a", 3e-4, 0.1, -0.1, 0.0), cand("b", 1e-4, 0.1, -0.1, 0.0)])["name"] == "b"
    assert medium_pilot.choose([cand("a", 1e-4, 0.5, -0.1, 0.5)]) is None


# --- the freeze -------------------------------------------------------------------------------------
VALUES = {"lr": 3e-4, "microbatch_size": 8, "max_tokens": 1024}


def _pilot_record(run_dir: Path, commit: bool = True, **changes) -> Path:
    """A pilot record of the shape campaigns/medium_pilot.py writes (a test fixture, never committed to runs/)."""
    rec = {"format": "kit-bench/1", "run_id": "medium-pilot-test", "status": "completed",
           "parameters": {"scale": "medium", "drafts": {
               "adaptive": {"path": str(ADAPTIVE_DRAFT), "digest": load_adaptive_contract(ADAPTIVE_DRAFT).digest},
               "study": {"path": str(STUDY_DRAFT), "digest": load_study_contract(STUDY_DRAFT).digest}}},
           "results": {"chosen": {"candidate": "c1", "rule": medium_pilot.RULE, "values": VALUES},
                       "candidates": [{"name": "c1", "contract_digest": sha256_json(medium_pilot.candidate_contract(
                           load_adaptive_contract(ADAPTIVE_DRAFT).data, VALUES))}],
                       "final_roles": {"opened": False}}}
    for key, value in changes.items():
        node = rec
        *head, last = key.split(".")
        for k in head:
            node = node[k]
        node[last] = value
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(json.dumps(rec))
    if commit:
        git = ["git", "-C", str(run_dir), "-c", "user.name=t", "-c", "user.email=t@t"]
        subprocess.run([*git[:3], "init", "-q"], check=True)
        subprocess.run([*git, "add", "run.json"], check=True)
        subprocess.run([*git, "commit", "-qm", "pilot"], check=True)
    return run_dir


@pytest.mark.parametrize("make, match", [
    (lambda d: d / "absent", r"run\.json: missing"),
    (lambda d: _pilot_record(d / "r", commit=False), r"not committed"),
    (lambda d: _pilot_record(d / "r", status="partial"), r"field 'status' = 'partial'; expected 'completed'"),
    (lambda d: _pilot_record(d / "r", **{"results.chosen": None}), r"field 'results\.chosen' = None"),
    # the medium scale is a positive control: a pilot that shows the seed cannot learn freezes nothing
    (lambda d: _pilot_record(d / "r", **{"results.positive_control": {"holds": False, "best_eligible_gain": 0.045,
                                                                      "min_gain": 0.15}}),
     r"field 'results\.positive_control\.holds' = False; expected true .* measured 0\.045\): the seed is not yet good"),
    (lambda d: _pilot_record(d / "r", **{"parameters.drafts.study.digest": "0" * 64}),
     r"field 'parameters\.drafts\.study\.digest' = 0{64}; the draft .* now has digest"),
    # the contract the freeze would write is not the one the pilot trained (another rate recorded)
    (lambda d: _pilot_record(d / "r", **{"results.candidates": [{"name": "c1", "contract_digest": "0" * 64}]}),
     r"rebuilt from the draft has digest [0-9a-f]{64}; the pilot recorded 0{64}"),
])
def test_freeze_refuses(tmp_path, make, match):
    out = tmp_path / "contracts"
    out.mkdir()
    with pytest.raises(medium_freeze.FreezeRefused, match=match):
        medium_freeze.freeze(make(tmp_path), out_dir=out, study_from_adaptive_pilot=True)
    assert list(out.iterdir()) == []


def test_freeze_refuses_a_record_changed_after_its_commit(tmp_path):
    run = _pilot_record(tmp_path / "r")
    (run / "run.json").write_text((run / "run.json").read_text().replace("c1", "c0"))
    with pytest.raises(medium_freeze.FreezeRefused, match="differs from the committed version"):
        medium_freeze.freeze(run, out_dir=tmp_path)


def test_freeze_writes_contracts_that_pass_the_schemas(tmp_path):
    from kit.digest import sha256_file

    run = _pilot_record(tmp_path / "r")
    out = tmp_path / "contracts"
    out.mkdir()
    medium_freeze.freeze(run, out_dir=out, study_from_adaptive_pilot=True)
    a = load_adaptive_contract(out / "adaptive-shards.medium.json").data
    s = load_study_contract(out / "shared-gradient.medium.json").data
    # what was frozen is what was piloted: the candidate contract, plus its description and the pilot field
    piloted = medium_pilot.candidate_contract(load_adaptive_contract(ADAPTIVE_DRAFT).data, VALUES)
    assert {k: v for k, v in a.items() if k not in ("description", "pilot")} == {
        k: v for k, v in piloted.items() if k != "description"}
    for c in (a, s):
        assert c["pilot"]["run_id"] == "medium-pilot-test"
        assert c["pilot"]["record_sha256"] == sha256_file(run / "run.json")
        assert c["pilot"]["chosen"] == {"lr": 3e-4, "microbatch_size": 8, "max_tokens": 1024}
    assert {g["lr"] for g in a["training"]["optimizer"].values()} == {3e-4} and s["training"]["optimizer"]["lr"] == 3e-4
    assert a["cohorts"] == load_adaptive_contract(ADAPTIVE_DRAFT).data["cohorts"]  # the counts stay
    with pytest.raises(medium_freeze.FreezeRefused, match="never rewritten"):
        medium_freeze.freeze(run, out_dir=out)


def test_a_warm_up_then_cosine_candidate_freezes_to_the_contract_it_trained(tmp_path):
    """The pilot's --schedule-after is part of the candidate contract: the freeze rebuilds it from the record."""
    values = {**VALUES, "warmup": 16}
    draft = load_adaptive_contract(ADAPTIVE_DRAFT).data
    trained = medium_pilot.candidate_contract(draft, values, "cosine")
    run = _pilot_record(tmp_path / "r", **{
        "parameters.schedule_after": "cosine", "results.chosen.values": values,
        "results.candidates": [{"name": "c1", "contract_digest": sha256_json(trained)}]})
    out = tmp_path / "contracts"
    out.mkdir()
    medium_freeze.freeze(run, out_dir=out)
    a = load_adaptive_contract(out / "adaptive-shards.medium.json").data
    assert a["training"]["lr_schedule"] == {"warmup_updates": 16, "after": "cosine", "floor_ratio": 0.1}
    assert {k: v for k, v in a.items() if k not in ("description", "pilot")} == {
        k: v for k, v in trained.items() if k != "description"}
    assert not (out / "shared-gradient.medium.json").exists()  # the study is frozen from its own pilot


STUDY_VALUES = {"lr": 3e-4, "warmup_updates": 16}


def _study_pilot_record(run_dir: Path, draft: Path = STUDY_DRAFT, **changes) -> Path:
    """A record of the shape campaigns/study_pilot.py writes (a fixture), committed in its own repository."""
    from campaigns import study_pilot

    data = load_study_contract(draft).data
    rec = {"format": "kit-bench/1", "run_id": "study-pilot-test", "status": "completed",
           "parameters": {"scale": "medium", "draft": {"path": str(draft), "digest": load_study_contract(draft).digest}},
           "results": {"chosen": {"candidate": "c3", "rule": study_pilot.RULE, "values": {
                           "lr": 3e-4, "lr_schedule": study_pilot.schedule_for(16)}},
                       "candidates": [{"name": "c3", "values": STUDY_VALUES, "contract_digest": sha256_json(
                           study_pilot.candidate_contract(data, STUDY_VALUES))}],
                       "final_roles": {"opened": False}}}
    rec.update(changes)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(json.dumps(rec))
    git = ["git", "-C", str(run_dir), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    subprocess.run([*git, "add", "run.json"], check=True)
    subprocess.run([*git, "commit", "-qm", "pilot"], check=True)
    return run_dir


def test_the_study_is_frozen_from_its_own_pilot_without_the_pilots_dev_role(tmp_path):
    from campaigns import study_pilot

    out = tmp_path / "contracts"
    out.mkdir()
    written = medium_freeze.freeze(None, out_dir=out, study_pilot=_study_pilot_record(tmp_path / "s"))
    assert set(written) == {"study"} and not (out / "adaptive-shards.medium.json").exists()
    s = load_study_contract(out / "shared-gradient.medium.json").data
    piloted = study_pilot.candidate_contract(load_study_contract(STUDY_DRAFT).data, STUDY_VALUES)
    assert "dev" in piloted["data"] and "dev" not in s["data"]  # the pilot's role stays out of contracts/
    del piloted["data"]["dev"]
    assert {k: v for k, v in s.items() if k not in ("name", "pilot")} == {k: v for k, v in piloted.items() if k != "name"}
    assert s["training"]["lr_schedule"] == {"warmup_updates": 16, "after": "constant", "floor_ratio": 1.0}
    assert s["pilot"]["run_id"] == "study-pilot-test" and "its own pilot study-pilot-test" in s["name"]
    assert s["pilot"]["chosen"] == STUDY_VALUES


def test_the_study_freeze_refuses_another_pilots_record_and_a_transfer_onto_a_dev_draft(tmp_path):
    out = tmp_path / "contracts"
    out.mkdir()
    adaptive_run = _pilot_record(tmp_path / "a")
    with pytest.raises(medium_freeze.FreezeRefused, match=r"no 'parameters\.draft'; expected a kit-bench/1 record "
                                                          r"written by campaigns/study_pilot\.py"):
        medium_freeze.freeze(None, out_dir=out, study_pilot=adaptive_run)
    with pytest.raises(medium_freeze.FreezeRefused, match=r"field 'parameters\.draft\.digest' = 0{64}"):
        medium_freeze.freeze(None, out_dir=out, study_pilot=_study_pilot_record(
            tmp_path / "s", parameters={"scale": "medium", "draft": {"path": "x", "digest": "0" * 64}}))
    own = json.loads(STUDY_DRAFT.read_text())
    own["data"]["dev"] = {"count": 64, "role": "study-dev", "seed": 4, "difficulty": 2}
    (tmp_path / "own.json").write_text(json.dumps(own))
    with pytest.raises(medium_freeze.FreezeRefused, match=r"own\.json: field 'data\.dev' is present"):
        medium_freeze.freeze(adaptive_run, study_draft=tmp_path / "own.json", out_dir=out,
                             study_from_adaptive_pilot=True)
    with pytest.raises(medium_freeze.FreezeRefused, match="nothing to freeze"):
        medium_freeze.freeze(None, out_dir=out)
    assert list(out.iterdir()) == []


def test_freezing_the_first_campaigns_pilot_again_gives_its_contracts(tmp_path):
    """The first medium campaign's contracts (kept with its superseded evidence) are exactly what the freeze
    makes of its committed pilot record and its drafts, by its procedure (the study's rate transferred from
    the adaptive pilot). Only `pilot.draft` differs: it names where the draft was then, contracts/."""
    out = tmp_path / "contracts"
    out.mkdir()
    kept = FIRST_CAMPAIGN / "contracts"
    medium_freeze.freeze(evidence_path("medium-pilot-2026-12-01-b"), kept / "adaptive-shards.medium.draft.json",
                         kept / "shared-gradient.medium.draft.json", out, study_from_adaptive_pilot=True)
    for name in ("adaptive-shards.medium.json", "shared-gradient.medium.json"):
        made, committed = json.loads((out / name).read_text()), json.loads((kept / name).read_text())
        assert made["pilot"].pop("draft") == f"runs/medium-superseded-seed-800112e3/contracts/{name[:-5]}.draft.json"
        assert committed["pilot"].pop("draft") == f"contracts/{name[:-5]}.draft.json"
        assert made == committed
        assert committed["seed"]["parameter_digest"].startswith("800112e3")


def test_freezing_the_e83d0af3_study_pilot_again_gives_its_kept_contract(tmp_path):
    """The study contract frozen on the seed e83d0af3 (kept with that seed's drafts when the drafts moved on
    to the next seed) is what the freeze makes of its committed pilot and its kept draft; only `pilot.draft`
    differs, the draft's place then (contracts/). The kept drafts still pin e83d0af3."""
    out = tmp_path / "contracts"
    out.mkdir()
    kept = SEED_E83D0AF3 / "contracts"
    medium_freeze.freeze(None, study_draft=kept / "shared-gradient.medium.draft.json", out_dir=out,
                         study_pilot=evidence_path("study-pilot-2026-12-01-e83d0af3"))
    made = json.loads((out / "shared-gradient.medium.json").read_text())
    committed = json.loads((kept / "shared-gradient.medium.json").read_text())
    assert made["pilot"].pop("draft") == "runs/medium-superseded-seed-e83d0af3/contracts/shared-gradient.medium.draft.json"
    assert committed["pilot"].pop("draft") == "contracts/shared-gradient.medium.draft.json"
    assert made == committed
    for name in ("adaptive-shards.medium.draft.json", "shared-gradient.medium.draft.json"):
        assert json.loads((kept / name).read_text())["seed"]["parameter_digest"].startswith("e83d0af3")


def test_freezing_the_d1749707_pilots_again_gives_its_contracts(tmp_path):
    """The contracts of the re-run on the seed d1749707 (its evidence: runs/medium-*, or its superseded folder
    once the next campaign replaces it) are what the freeze makes of its two committed pilots and the drafts
    kept when the drafts moved on to the seed af103c8d; only `pilot.draft` differs, the draft's place then."""
    out = tmp_path / "contracts"
    out.mkdir()
    kept = SEED_D1749707 / "contracts"
    medium_freeze.freeze(evidence_path("medium-pilot-2026-12-02"), kept / "adaptive-shards.medium.draft.json",
                         kept / "shared-gradient.medium.draft.json", out,
                         study_pilot=evidence_path("study-pilot-2026-12-02"))
    for name in ("adaptive-shards.medium.json", "shared-gradient.medium.json"):
        committed = json.loads((kept / name).read_text())  # the copy kept beside the drafts
        current = json.loads((REPO / "contracts" / name).read_text())
        if current["seed"]["parameter_digest"].startswith("d1749707"):  # until the next freeze replaces it
            assert current == committed
        made = json.loads((out / name).read_text())
        assert made["pilot"].pop("draft") == f"runs/medium-superseded-seed-d1749707/contracts/{name[:-5]}.draft.json"
        assert committed["pilot"].pop("draft") == f"contracts/{name[:-5]}.draft.json"
        assert made == committed
    for name in ("adaptive-shards.medium.draft.json", "shared-gradient.medium.draft.json"):
        assert json.loads((kept / name).read_text())["seed"]["parameter_digest"].startswith("d1749707")
