"""Issue 15 (integrity): the final-role guard, inputs bound to what ran, and the exposure ledger, each tried
the way an attacker would: an exported commit standing in for the seed, a renamed directory, an edited
record, a baseline nobody selected, an intermediate commit, another seed, a forged reference, a reused
home, and a final set reused by a later contract."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from support.adaptive import PUBLIC, TINY, private_job
from support.engine_workers import engine_config

from kit.adaptive import prepare as prep
from kit.adaptive.bindings import TrainRefused
from kit.adaptive.evaluation import EvaluateRequest, evaluate
from kit.adaptive.selection import SELECTIONS_LOG, FinalRolesRefused, access_entries, write_selection
from kit.adaptive.train import CohortRequest, train
from kit.data.conversations import read_jsonl
from kit.digest import load_json_strict, sha256_file, write_canonical_json
from kit.distributed.group import Group
from kit.engine.session import Session
from kit.evidence.ledger import read_ledger
from kit.model.shard import even_layout
from kit.store.export import export_hf
from kit.store.start import start_from_seed
from kit.train.optim import GroupConfig

A_END = {"step": 8, "cohort": 0, "cohort_step": 8}  # the tiny contract's endpoints: A = 8, B = 8
B_END = {"step": 16, "cohort": 1, "cohort_step": 8}
MAX_TOKENS = 256


def _job(prepared, tmp_path):
    return private_job(prepared["out"], tmp_path / "prepared")  # bound to this test's own ledger


def _commit(seed, home, cursor, lr=1e-3):
    """A commit of the seed's model in `home` at `cursor`."""
    opt = {"lr": lr, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.0}
    s = Session(Group(0, 1, torch.device("cpu")), str(home), even_layout(4, 1), start_from_seed(str(seed)),
                engine_config({"microbatch_size": 2, "max_grad_norm": 1.0}),
                {"default": GroupConfig(**opt)})
    root, _ = s.commit(dict(cursor))
    return root


def _final(p, seed, cand, base, sel, out):
    return evaluate(EvaluateRequest(prepared=p, candidate=cand, baseline=base, split="final", out=out,
                                    tokenizer_dir=str(seed), max_tokens=MAX_TOKENS, max_new_tokens=4,
                                    selection=str(sel) if sel else None))


@pytest.fixture
def selected(prepared, tmp_path):
    """A private prepared job with candidate A (at the contract's A endpoint) selected."""
    p = _job(prepared, tmp_path)
    home = tmp_path / "A"
    root = _commit(prepared["seed"], home, A_END)
    sel = tmp_path / "selection.json"
    write_selection(p, {"A": {"home": str(home), "root": root}}, sel)
    return {"p": p, "home": home, "root": root, "sel": sel, "seed": prepared["seed"], "tmp": tmp_path}


def _exported_commit(s, name="exported"):
    """Another commit (not selected) exported as a Hugging Face directory with the seed's tokenizer."""
    other = s["tmp"] / "other"
    root = _commit(s["seed"], other, {"step": 4, "cohort": 0, "cohort_step": 4}, )
    out = s["tmp"] / name
    export_hf(other, root, out, s["seed"])
    # its weights differ from the seed's (as any trained commit's would)
    from safetensors.torch import load_file, save_file

    t = load_file(str(out / "model.safetensors"))
    t["model.norm.weight"] = t["model.norm.weight"] * 1.5
    save_file(t, str(out / "model.safetensors"), metadata={"format": "pt"})
    return other, root, out


# -- hole 1: final roles only for what a selection record binds ---------------------------------------------------


def test_final_scoring_of_the_bound_pair_works_and_records_exposures(selected):
    s = selected
    renamed = s["tmp"] / "renamed-seed"  # the seed under another directory name is still the seed
    shutil.copytree(s["seed"], renamed)
    ev = _final(s["p"], s["seed"], f"{s['home']}:{s['root']}", f"seed:{renamed}", s["sel"], s["tmp"] / "final.json")
    assert len(ev["tasks"]) == 96 and len(ev["retention"]) == 32
    assert [e["allowed"] for e in access_entries(s["p"])] == [True]
    ledger = read_ledger()
    assert {e["kind"] for e in ledger} == {"final.task", "final.retention"} and len(ledger) == 96 + 32
    pj = load_json_strict(s["p"] / "prepared.json")
    assert {e["contract_digest"] for e in ledger} == {pj["contract"]["digest"]}
    tasks = read_jsonl(s["p"] / "roles/final.tasks.jsonl")
    assert {e["digest"] for e in ledger if e["kind"] == "final.task"} == {c.meta["digest"] for c in tasks}
    _final(s["p"], s["seed"], f"{s['home']}:{s['root']}", f"seed:{s['seed']}", s["sel"], s["tmp"] / "again.json")
    assert len(read_ledger()) == 96 + 32  # re-opening the same finals adds nothing


def test_baseline_not_bound_by_the_selection_is_refused(selected):
    s = selected
    other = s["tmp"] / "B-store"
    other_root = _commit(s["seed"], other, B_END)
    with pytest.raises(FinalRolesRefused, match=r"field 'candidates\.A\.baseline' binds the seed"):
        _final(s["p"], s["seed"], f"{s['home']}:{s['root']}", f"{other}:{other_root}", s["sel"], s["tmp"] / "f.json")
    (entry,) = access_entries(s["p"])
    assert entry["allowed"] is False and entry["baseline"] == other_root  # the log names the refused baseline
    assert not (s["tmp"] / "f.json").exists() and read_ledger() == []


def test_exported_commit_as_the_seed_baseline_is_refused(selected):
    s = selected
    _, _, exported = _exported_commit(s, name="seed")  # an exported commit in a directory named like the seed
    with pytest.raises(FinalRolesRefused, match=r"parameter digest [0-9a-f]{64}; a seed:DIR baseline on final roles "
                                                r"must have the prepared\.json field 'seed\.parameter_digest'"):
        _final(s["p"], s["seed"], f"{s['home']}:{s['root']}", f"seed:{exported}", s["sel"], s["tmp"] / "f.json")
    assert not any(e["allowed"] for e in access_entries(s["p"])) and read_ledger() == []


def test_seed_dir_candidate_on_final_roles_is_refused(selected):
    s = selected
    _, _, exported = _exported_commit(s)
    for cand in (f"seed:{exported}", f"seed:{s['seed']}"):
        with pytest.raises(FinalRolesRefused, match=r"candidate seed:.* on final roles; a candidate must be a "
                                                    r"committed endpoint"):
            _final(s["p"], s["seed"], cand, f"seed:{s['seed']}", s["sel"], s["tmp"] / "f.json")
    assert [e["allowed"] for e in access_entries(s["p"])] == [False, False] and read_ledger() == []


def test_selection_refuses_a_commit_not_at_its_contract_endpoint(prepared, tmp_path):
    p = _job(prepared, tmp_path)
    home = tmp_path / "A"
    mid = _commit(prepared["seed"], home, {"step": 4, "cohort": 0, "cohort_step": 4})
    with pytest.raises(FinalRolesRefused, match=r"candidate 'A' .* has cursor .*expected the endpoint of cohort A "
                                                r"\(contract field 'endpoints\.A' = 8\)"):
        write_selection(p, {"A": {"home": str(home), "root": mid}}, tmp_path / "sel.json")
    b_end = _commit(prepared["seed"], tmp_path / "B", B_END)  # a B endpoint offered as the A candidate
    with pytest.raises(FinalRolesRefused, match=r"candidate 'A' .*expected the endpoint of cohort A"):
        write_selection(p, {"A": {"home": str(tmp_path / "B"), "root": b_end}}, tmp_path / "sel.json")
    with pytest.raises(FinalRolesRefused, match=r"candidate 'G' .* has 4 blocks; contract field "
                                                r"'comparisons\.G\.grown' = True expects 6"):
        write_selection(p, {"G": {"home": str(tmp_path / "B"), "root": b_end}}, tmp_path / "sel.json")
    with pytest.raises(FinalRolesRefused, match=r"its baseline 'A' \(contract field 'comparisons\.B\.baseline'\) is "
                                                r"not among the selected candidates"):
        write_selection(p, {"B": {"home": str(tmp_path / "B"), "root": b_end}}, tmp_path / "sel.json")
    with pytest.raises(FinalRolesRefused, match=r"candidate name 'best' is not a comparison of the contract"):
        write_selection(p, {"best": {"home": str(home), "root": mid}}, tmp_path / "sel.json")
    assert not (tmp_path / "sel.json").exists()


def test_edited_record_registered_by_hand_is_still_checked(selected):
    """An attacker who can write the prepared directory edits the record to bind an intermediate commit
    and a baseline of their choosing, and registers its sha256 in selections.jsonl."""
    s = selected
    other, mid, exported = _exported_commit(s)
    record = load_json_strict(s["sel"])
    record["candidates"]["A"] = {**record["candidates"]["A"], "full_root": mid}
    edited = s["tmp"] / "edited.json"
    sha = write_canonical_json(edited, record)
    with open(s["p"] / SELECTIONS_LOG, "ab") as f:
        f.write(json.dumps({"selection": str(edited), "sha256": sha}).encode() + b"\n")
    with pytest.raises(FinalRolesRefused, match=r"candidate 'A' .* has cursor .*expected the endpoint of cohort A"):
        _final(s["p"], s["seed"], f"{other}:{mid}", f"seed:{s['seed']}", edited, s["tmp"] / "f.json")
    record = load_json_strict(s["sel"])
    record["candidates"]["A"]["baseline"] = {"kind": "seed", "parameter_digest": hashlib.sha256(b"x").hexdigest()}
    sha = write_canonical_json(edited, record)
    with open(s["p"] / SELECTIONS_LOG, "ab") as f:
        f.write(json.dumps({"selection": str(edited), "sha256": sha}).encode() + b"\n")
    with pytest.raises(FinalRolesRefused, match=r"a seed:DIR baseline on final roles must have"):
        _final(s["p"], s["seed"], f"{s['home']}:{s['root']}", f"seed:{exported}", edited, s["tmp"] / "f.json")
    assert not any(e["allowed"] for e in access_entries(s["p"])) and read_ledger() == []


# -- hole 2/3: --seed, --reference and a fresh --home -------------------------------------------------------------


def test_train_refuses_another_seed_before_anything(selected):
    s = selected
    _, _, exported = _exported_commit(s)
    home = s["tmp"] / "home"
    with pytest.raises(TrainRefused, match=r"--seed .*parameter digest [0-9a-f]{64}; .*prepared\.json field "
                                           r"'seed\.parameter_digest' expects"):
        train(CohortRequest(str(s["p"]), str(exported), str(home), "A", 1, until=1))
    assert not home.exists()
    renamed = s["tmp"] / "seed-copy"  # the same seed under another name is accepted
    shutil.copytree(s["seed"], renamed)
    (renamed / "tokenizer.json").write_text((renamed / "tokenizer.json").read_text() + " ")
    with pytest.raises(TrainRefused, match=r"tokenizer\.json: sha256 [0-9a-f]{64}; .*field 'tokenizer\.tokenizer\.json'"):
        train(CohortRequest(str(s["p"]), str(renamed), str(home), "A", 1, until=1))
    assert not home.exists()


def test_a_new_cohort_needs_a_fresh_home(selected):
    s = selected
    home = s["tmp"] / "used"
    home.mkdir()
    (home / "left-over").write_text("x")
    with pytest.raises(TrainRefused, match=r"--home .*used: not empty; cohort A starts from the seed and needs a "
                                           r"fresh --home"):
        train(CohortRequest(str(s["p"]), str(s["seed"]), str(home), "A", 1, until=1))
    assert sorted(x.name for x in home.iterdir()) == ["left-over"]


@pytest.fixture(scope="module")
def a_endpoint(prepared, tmp_path_factory):
    """Cohort A trained to its endpoint (1 worker) from a private copy of the prepared job."""
    tmp = tmp_path_factory.mktemp("a-end")
    p = tmp / "prepared"
    shutil.copytree(prepared["out"], p)
    home = tmp / "A"
    commits = train(CohortRequest(str(p), str(prepared["seed"]), str(home), "A", 1))
    by_step = {c["cohort_step"]: c["full_root"] for c in commits}
    return {"p": p, "home": home, "end": by_step[8], "mid": by_step[4], "seed": prepared["seed"], "tmp": tmp}


def test_cohort_b_reference_is_bound_to_the_committed_a_endpoint(a_endpoint, tmp_path):
    a = a_endpoint
    p, seed, home_a = str(a["p"]), str(a["seed"]), str(a["home"])
    fresh = tmp_path / "B"
    with pytest.raises(TrainRefused, match=r"--reference [0-9a-f]{64}: expected the committed phase-A endpoint that "
                                           r"cohort B continues from --resume [0-9a-f]{64}: [0-9a-f]{64}"):
        train(CohortRequest(p, seed, str(fresh), "B", 1, resume=a["end"], reference=a["mid"], source_home=home_a, until=1))
    with pytest.raises(TrainRefused, match=r"--reference [0-9a-f]{64}: expected .*: none found along its parents"):
        train(CohortRequest(p, seed, str(fresh), "B", 1, resume=a["mid"], reference=a["mid"], source_home=home_a, until=1))
    forged = tmp_path / "forged"  # a commit at the A endpoint's cursor that no attempt of this job trained
    root = _commit(a["seed"], forged, A_END)
    with pytest.raises(TrainRefused, match=r"not committed by an attempt of this prepared job .*field 'job_digest'"):
        train(CohortRequest(p, seed, str(fresh), "B", 1, resume=root, reference=root, source_home=str(forged), until=1))
    assert not fresh.exists()
    commits = train(CohortRequest(p, seed, str(fresh), "B", 1, resume=a["end"], reference=a["end"], source_home=home_a, until=1))
    assert commits[-1]["cohort_step"] == 1
    with pytest.raises(TrainRefused, match=r"--home .*: not empty; cohort B starts from [0-9a-f]{64} \(another "
                                           r"cohort's endpoint\) and needs a fresh --home"):
        train(CohortRequest(p, seed, str(fresh), "B", 1, resume=a["end"], reference=a["end"], source_home=home_a, until=1))


# -- the exposure ledger across two contracts ---------------------------------------------------------------------


def test_the_ledger_blocks_reuse_of_a_final_across_two_tiny_contracts(selected, prepared, tmp_path):
    s = selected
    _final(s["p"], s["seed"], f"{s['home']}:{s['root']}", f"seed:{s['seed']}", s["sel"], s["tmp"] / "final.json")
    first = {r: read_jsonl(s["p"] / f"roles/{r}.jsonl") for r in ("final.tasks", "final.retention")}
    second_contract = tmp_path / "second.json"  # the same data seeds: without the ledger, the same finals
    c = json.loads(TINY.read_text())
    c["description"] = "a later tiny contract that would draw the same final tasks and retention"
    second_contract.write_text(json.dumps(c))
    seed = prepared["seed"]
    args = (second_contract, seed, seed / "trained_conversations.jsonl", prepared["dev"], PUBLIC)
    empty = tmp_path / "empty-ledger.jsonl"
    control = prep.prepare(*args, tmp_path / "control", ledger=empty)
    ctl = read_jsonl(tmp_path / "control/roles/final.tasks.jsonl")
    assert {x.meta["digest"] for x in ctl} == {x.meta["digest"] for x in first["final.tasks"]}  # reuse, unguarded
    assert control["final_tasks_excluded"] == {"ledger": 0}
    summary = prep.prepare(*args, tmp_path / "second")  # the ledger of this process ($KIT_LEDGER)
    second = {r: read_jsonl(tmp_path / f"second/roles/{r}.jsonl") for r in ("final.tasks", "final.retention")}
    assert not {x.meta["digest"] for x in second["final.tasks"]} & {x.meta["digest"] for x in first["final.tasks"]}
    assert not {x.digest for x in second["final.retention"]} & {x.digest for x in first["final.retention"]}
    assert len(second["final.tasks"]) == 96 and len(second["final.retention"]) == 32
    assert summary["final_tasks_excluded"] == {"ledger": 96}  # every draw of the old finals was met and skipped
    pj = load_json_strict(tmp_path / "second/prepared.json")
    assert pj["exclusions"]["final.retention"]["excluded"]["ledger"] == 32
    assert pj["exclusions"]["final.tasks"]["excluded_total"] == 96
    assert pj["ledger"]["entries"] == 128 and pj["ledger"]["sha256"] == sha256_file(Path(pj["locations"]["ledger"]))


# -- hole 4/5: the study's prepare commits the source and versions; run records name the GPU requirements ----------


def test_run_records_name_the_gpu_reference_requirements():
    from kit.evidence.environment import versions
    from kit.evidence.runtime import repository_root

    path = repository_root() / "requirements" / "gpu-reference.txt"
    text = path.read_text()
    assert "torch==2.11.0+cu130" in text and "transformers==5.17.0" in text and "[assumption]" in text
    assert versions()["gpu_reference_requirements_sha256"] == sha256_file(path)


def test_study_prepare_commits_the_kit_source_and_versions_and_arms_check_it(env, tmp_path, monkeypatch):
    import kit.study.prepare as study_prepare
    from kit.provenance import kit_package_dir, source_digest
    from kit.study.arms import ArmRequest, run_arm

    sdir = tmp_path / "s"
    pj = study_prepare.prepare_study(env["contract"], env["seed"], env["source"], sdir, env["ledger"])
    assert pj["kit_source"]["digest"] == source_digest(kit_package_dir())[0]
    assert dict(pj["kit_source"]["files"])["study/prepare.py"] == sha256_file(kit_package_dir() / "study/prepare.py")
    assert pj["versions"]["torch"] and pj["versions"]["python"]
    assert pj["versions"]["gpu_reference_requirements_sha256"] == sha256_file(
        Path(kit_package_dir()).parent / "requirements/gpu-reference.txt")
    fake = tmp_path / "kit"  # the kit that would train differs by one line from the one that prepared
    shutil.copytree(kit_package_dir(), fake, ignore=shutil.ignore_patterns("__pycache__"))
    (fake / "train" / "optim.py").write_text((fake / "train" / "optim.py").read_text() + "\n# changed\n")
    monkeypatch.setattr(study_prepare, "kit_package_dir", lambda: fake)
    with pytest.raises(study_prepare.PreparedError, match=r"prepared\.json: field 'kit_source\.digest' = [0-9a-f]{64}: "
                                                          r"kit source file 'train/optim\.py'"):
        run_arm(ArmRequest(sdir, "single", env["seed"]))
    assert not (sdir / "arms" / "single" / "home").exists()


def test_study_exposed_probes_come_from_the_ledger_and_finals_exclude_it(env, tmp_path):
    from kit.evidence.ledger import record
    from kit.study.prepare import PreparedError, prepare_study

    with pytest.raises(PreparedError, match=r"empty\.jsonl: 0 records of data\.retention\.source \[30, 60\) are in the "
                                            r"exposure ledger; field 'data\.retention\.count' = 8"):
        prepare_study(env["contract"], env["seed"], env["source"], tmp_path / "s0", tmp_path / "empty.jsonl")
    first = prepare_study(env["contract"], env["seed"], env["source"], tmp_path / "s1", env["ledger"])
    probes = read_jsonl(tmp_path / "s1/prepared/retention.jsonl")
    exposed = {e["digest"] for e in read_ledger(env["ledger"])}
    assert probes and {c.digest for c in probes} <= exposed
    assert first["exclusions"]["final_test"] == {"ledger": 0}
    finals = read_jsonl(tmp_path / "s1/prepared/final_tasks.jsonl")
    ledger = tmp_path / "after.jsonl"  # the first study's finals were scored under another contract
    shutil.copyfile(env["ledger"], ledger)
    record([("final.task", c.meta["digest"], c.id) for c in finals], "12" * 32, "34" * 32, "scored", ledger)
    second = prepare_study(env["contract"], env["seed"], env["source"], tmp_path / "s2", ledger)
    again = read_jsonl(tmp_path / "s2/prepared/final_tasks.jsonl")
    assert len(again) == len(finals) and not {c.meta["digest"] for c in again} & {c.meta["digest"] for c in finals}
    assert second["exclusions"]["final_test"] == {"ledger": len(finals)}


# -- the continued-learning contract ---------------------------------------------------------------------------------

CONTINUED_TINY = Path(__file__).resolve().parents[1] / "contracts" / "continued-learning.tiny.json"


def test_continued_learning_starts_only_from_a_passing_a_endpoint_unless_exploratory(a_endpoint, tmp_path):
    from kit.adaptive.continued import (
        ContinuedRefused,
        continued_gates,
        load_continued_contract,
        prepare_continued,
    )
    from kit.adaptive.evaluation import gates
    from kit.adaptive.schema import load_adaptive_contract

    a = a_endpoint
    p = private_job(a["p"], tmp_path / "start")  # bound to this test's own ledger
    sel = tmp_path / "selection.json"
    write_selection(p, {"A": {"home": str(a["home"]), "root": a["end"]}}, sel)
    ev_path = tmp_path / "final-A.json"
    ev = _final(p, a["seed"], f"{a['home']}:{a['end']}", f"seed:{a['seed']}", sel, ev_path)
    passed = gates(ev, load_adaptive_contract(TINY).terms)["passed"]
    args = (a["seed"], PUBLIC)
    edited = tmp_path / "final-A-edited.json"  # an edited evaluation (numbers changed) is not the bound one
    write_canonical_json(edited, {**ev, "tasks": [{**x, "cand_nll": x["cand_nll"] - 1.0} for x in ev["tasks"]]})
    with pytest.raises(ContinuedRefused, match=r"final-A-edited\.json: sha256 [0-9a-f]{64} is not a final evaluation "
                                               r"record `kit adaptive evaluate` wrote"):
        prepare_continued(CONTINUED_TINY, p, str(a["home"]), a["end"], edited, *args, tmp_path / "refused")
    failing = ev_path
    if passed:  # make the failing case: the bound evaluation, with every generated answer lost, re-registered
        failing = tmp_path / "final-A-failing.json"
        sha = write_canonical_json(failing, {**ev, "tasks": [{**x, "cand_correct": False, "base_correct": True}
                                                            for x in ev["tasks"]]})
        with open(p / "final-evaluations.jsonl", "ab") as f:
            f.write(json.dumps({"evaluation": str(failing), "sha256": sha}).encode() + b"\n")
    strict = tmp_path / "continued-strict.json"  # the tiny contract is exploratory; the strict variant is not
    c = json.loads(CONTINUED_TINY.read_text())
    assert c["start"]["exploratory"] is True
    c["start"]["exploratory"] = False
    strict.write_text(json.dumps(c))
    with pytest.raises(ContinuedRefused, match=r"gates did not pass .*contract field 'start\.exploratory' = false"):
        prepare_continued(strict, p, str(a["home"]), a["end"], failing, *args, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    with pytest.raises(ContinuedRefused, match=r"has cursor .*expected the endpoint of cohort A"):
        prepare_continued(strict, p, str(a["home"]), a["mid"], ev_path, *args, tmp_path / "refused")
    exploratory = CONTINUED_TINY
    out = tmp_path / "C"
    summary = prepare_continued(exploratory, p, str(a["home"]), a["end"], failing, *args, out)
    assert summary["start"]["exploratory"] is True and summary["start"]["gates_passed"] is False
    pj = load_json_strict(out / "prepared.json")
    start_digests = {x.digest for f in (p / "roles").glob("*.jsonl") for x in read_jsonl(f)}
    exposed = {e["digest"] for e in read_ledger()}
    for role in ("final.tasks", "final.retention"):
        convs = read_jsonl(out / f"roles/{role}.jsonl")
        assert not {x.digest for x in convs} & start_digests
        assert not ({x.meta.get("digest") for x in convs} | {x.digest for x in convs}) & exposed
    assert pj["ledger"]["entries"] == 96 + 32
    # the same job from a copy of the A store in another folder: another location, the same job digest
    # (the store's path once sat inside the digest, so each checkout prepared another job)
    moved = tmp_path / "elsewhere" / "A-home"
    shutil.copytree(a["home"], moved)
    again = load_json_strict(Path(prepare_continued(exploratory, p, str(moved), a["end"], failing, *args,
                                                    tmp_path / "C-again")["out"]) / "prepared.json")
    assert pj["locations"]["start_home"] == str(Path(a["home"]).absolute()) != again["locations"]["start_home"]
    assert again["job_digest"] == pj["job_digest"] and "home" not in pj["start"]
    # cohort C trains from the bound A endpoint, in a fresh home, with no growth
    home = tmp_path / "C-home"
    with pytest.raises(TrainRefused, match=r"--resume [0-9a-f]{64}: .*field 'start\.full_root' expects"):
        train(CohortRequest(str(out), str(a["seed"]), str(home), "C", 1, resume=a["mid"], reference=a["mid"], until=1))
    with pytest.raises(TrainRefused, match=r"--grow: the contract grows cohort None only"):
        train(CohortRequest(str(out), str(a["seed"]), str(home), "C", 1, resume=a["end"], reference=a["end"], grow=True, until=1))
    commits = train(CohortRequest(str(out), str(a["seed"]), str(home), "C", 1, resume=a["end"], reference=a["end"],
                    source_home=str(a["home"]), until=1))
    assert commits[-1]["cohort_step"] == 1 and commits[-1]["step"] == 9
    verdict = continued_gates(ev, load_continued_contract(exploratory).terms, True)
    assert verdict["exploratory"] and verdict["note"].startswith("EXPLORATORY")
    assert verdict["gates"][0]["name"] == "generated"


# -- replay of an update window ---------------------------------------------------------------------------------------


def test_replay_reproduces_a_window_and_catches_a_tampered_parent(a_endpoint, tmp_path):
    from kit.adaptive.replay import ReplayRefused, replay
    from kit.store.commits import load_param_states, read_commit, save_param_states, write_commit
    from kit.store.objects import ObjectStore

    a = a_endpoint
    rec = replay(str(a["home"]), a["end"], scratch=str(tmp_path / "r1"))
    assert rec["equal"] and rec["from"] == a["mid"] and rec["cohort_steps"] == [5, 8] and rec["updates"] == 4
    assert load_json_strict(a["home"] / "replays" / f"{a['end']}-from-{a['mid']}.json") == rec
    with pytest.raises(ReplayRefused, match=r"--from [0-9a-f]{64}: not an ancestor"):
        replay(str(a["home"]), a["mid"], a["end"], scratch=str(tmp_path / "r2"))
    # A forged lineage: the parent's weights altered and re-committed (every hash consistent), the child
    # re-pointed at it with its learned state unchanged, and an attempt record edited to claim the child.
    forged = tmp_path / "forged"
    shutil.copytree(a["home"], forged)
    mid, end = read_commit(forged, a["mid"]), read_commit(forged, a["end"])
    store = ObjectStore(forged)
    (forged / "HEAD").unlink()  # the forger rewrites the lineage from its root (mid has no parent)
    assert mid["parent"] is None
    states = load_param_states(store, mid["learned_state"]["params"])
    states["model.norm.weight"]["param"] = states["model.norm.weight"]["param"] * 1.01
    bad_mid = write_commit(forged, {"cursor": mid["learned_state"]["cursor"], "params": save_param_states(store, states)},
                           mid["layout"], mid["parent"], mid["rng"])
    bad_end = write_commit(forged, end["learned_state"], end["layout"], bad_mid, end["rng"])
    assert read_commit(forged, bad_end)["learned_state_root"] == end["learned_state_root"]  # the hash alone is fine
    path = next(p for p in forged.glob("attempts/*/attempt.json") if load_json_strict(p)["commits"])
    attempt = load_json_strict(path)
    attempt["commits"] = [{**attempt["commits"][-1], "full_root": bad_end}]
    write_canonical_json(path, attempt)
    rec = replay(str(forged), bad_end, scratch=str(tmp_path / "r3"))
    assert rec["equal"] is False and rec["from"] == bad_mid and rec["max_abs_parameter_difference"] > 0
