"""kit adaptive prepare and the adaptive-shards contracts: schema refusals, role files, schedule, exclusion,
ownership, no tensor reads, and refusals before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.adaptive import FULL, PUBLIC, TINY, distinct, make_seed, seed_tasks

from kit.adaptive import prepare as prep
from kit.adaptive.schema import FAMILIES, load_adaptive_contract
from kit.contract import ContractError
from kit.data.conversations import Conversation, read_jsonl, synthetic_conversations, write_jsonl
from kit.data.tasks import FAMILIES as TASK_FAMILIES
from kit.digest import load_json_strict, sha256_file
from kit.model.config import LlamaShape, RopeSpec


# --- contracts ------------------------------------------------------------------------------------
def test_both_contracts_validate_with_the_seed_numbers():
    full, tiny = load_adaptive_contract(FULL).data, load_adaptive_contract(TINY).data
    assert full["seed"]["parameter_digest"] == "ac2153f0f3e55379f72d46f4ef4a7a9a1f6b7f30a45d471cb3611c9e15a1385b"
    assert tiny["seed"]["parameter_digest"] is None
    a, b = full["cohorts"]["A"], full["cohorts"]["B"]
    assert (a["updates"], a["documents_per_update"], b["updates"], b["documents_per_update"]) == (128, 64, 128, 64)
    assert a["totals"] == {"new": 6144, "replay_a": 0, "replay_conv": 2048}
    assert b["totals"] == {"new": 4096, "replay_a": 2048, "replay_conv": 2048}
    assert (full["migration"]["from_workers"], full["migration"]["to_workers"], full["growth"]["add_blocks"]) == (2, 3, 2)
    assert full["gates"]["gain_upper_below"] == -0.001 and full["gates"]["retention_upper_at_most"] == 0.02
    assert full["evaluation"]["final"]["retention"]["sha256"] == \
        "fc1add24c93c9fbbe585a64a6c9bf6165eb110225f4470efbff382a913558ec0"
    assert set(FAMILIES) == set(TASK_FAMILIES)
    assert tiny["migration"]["at_step"] == 4 and tiny["cohorts"]["A"]["per_update"]["new"] == 12


def test_full_contract_plans_a_1_7b_llama_on_its_workers():
    """The full contract's planner settings fit a SmolLM2-1.7B-shaped seed at 2 and 3 workers and grown."""
    full = load_adaptive_contract(FULL).data
    shape = LlamaShape(vocab_size=49152, hidden_size=2048, intermediate_size=8192, num_hidden_layers=24,
                       num_attention_heads=32, num_key_value_heads=32, head_dim=64, rms_norm_eps=1e-5,
                       max_position_embeddings=8192, tie_word_embeddings=True, rope=RopeSpec())
    names = ["model.embed_tokens.weight", "model.norm.weight"] + [
        f"model.layers.{i}.{p}.weight" for i in range(24) for p in ("self_attn.q_proj", "mlp.down_proj")]
    o = prep.ownership_manifests(load_adaptive_contract(FULL).terms, shape, dict.fromkeys(names), "0" * 64)
    assert [(x["workers"], x["grown"], x["num_hidden_layers"]) for x in o["layouts"]] == \
        [(2, False, 24), (3, False, 24), (3, True, 26)]
    assert all(x["peak_utilization"] <= 1 for x in o["layouts"])
    assert full["growth"]["copy_block"] == shape.num_hidden_layers - 1


def _write_variant(tmp_path, edit) -> Path:
    data = json.loads(TINY.read_text())
    edit(data)
    path = tmp_path / "contract.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("edit, match", [
    (lambda d: d["cohorts"]["A"].update(extra=1), r"unknown field 'cohorts\.A\.extra'"),
    (lambda d: d["training"].pop("max_grad_norm"), r"missing field 'training\.max_grad_norm'"),
    (lambda d: d.update(surprise=True), r"unknown field 'surprise'"),
    (lambda d: d["cohorts"]["A"]["totals"].update(new=95), r"'cohorts\.A\.totals\.new' = 95; expected updates x"),
    (lambda d: (d["cohorts"]["B"]["per_update"].update(replay_a=0, replay_conv=0, new=16),
                d["cohorts"]["B"]["totals"].update(replay_a=0, replay_conv=0, new=128)),
     r"'cohorts\.B\.replay_every_update' = True; expected true, with per_update"),
    (lambda d: d["gates"].update(gain_upper_below=0.0), r"'gates\.gain_upper_below' = 0\.0"),
    (lambda d: d["migration"].update(at_step=3), r"'migration\.at_step' = 3; expected a commit point"),
    (lambda d: d["seed"].update(parameter_digest="abc"), r"'seed\.parameter_digest' = 'abc'"),
    (lambda d: d["tasks"].update(families=["lookup", "sorting"]), r"'tasks\.families'"),
])
def test_contract_refusals_name_the_field(tmp_path, edit, match):
    with pytest.raises(ContractError, match=match):
        load_adaptive_contract(_write_variant(tmp_path, edit))


def _roles(out: Path) -> dict[str, list[Conversation]]:
    return {role: read_jsonl(out / prep.role_file(role)) for role in prep.ROLES}


def test_prepare_writes_every_file_bound_by_digests(prepared):
    out = prepared["out"]
    p = load_json_strict(out / "prepared.json")
    assert p["contract"]["digest"] == load_adaptive_contract(TINY).digest
    from kit.inventory import inventory_digest, parameter_digest
    assert p["seed"]["parameter_digest"] == parameter_digest(prepared["seed"]) == prepared["summary"]["parameter_digest"]
    assert p["seed"]["inventory_digest"] == inventory_digest(prepared["seed"])
    assert set(p["tokenizer"]) == {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}
    expected = {"A.new": 96, "A.replay": 32, "B.new": 64, "B.replay_a": 32, "B.replay_conv": 32,
                "dev.tasks": 64, "dev.retention": 32, "final.tasks": 96, "final.retention": 32}
    assert {r: p["roles"][r]["count"] for r in prep.ROLES} == expected
    for role, info in p["roles"].items():
        assert sha256_file(out / info["file"]) == info["sha256"]
        assert all(x.meta["role"] == role for x in read_jsonl(out / info["file"]))
    assert p["roles"]["A.new"]["per_family"] == {f: 24 for f in TASK_FAMILIES}
    assert p["roles"]["final.tasks"]["per_family"] == {f: 24 for f in TASK_FAMILIES}
    task = read_jsonl(out / prep.role_file("final.tasks"))[0]
    assert {"family", "answer", "digest", "difficulty"} <= set(task.meta) and task.messages[-1].content == task.meta["answer"]
    assert sha256_file(out / "schedule.json") == p["schedule"]["sha256"]
    body = {k: v for k, v in p.items() if k not in ("job_digest", "locations", "created_at")}
    from kit.digest import sha256_json
    assert p["job_digest"] == sha256_json(body)
    commitments = load_json_strict(out / prep.COMMITMENTS_FILE)
    assert set(commitments["prepared"]) >= {"prepared", "schedule", "ownership", "A.new", "final.retention"}
    assert {"replay", "public_source", "dev_retention", "seed/model.safetensors", "seed/tokenizer.json"} \
        <= set(commitments["inputs"])


def test_roles_are_disjoint_by_id_and_digest(prepared):
    roles = _roles(prepared["out"])
    disjoint = ("A.new", "B.new", "dev.tasks", "final.tasks", "A.replay", "dev.retention", "final.retention")
    for i, r1 in enumerate(disjoint):
        for r2 in disjoint[i + 1:]:
            assert not {x.id for x in roles[r1]} & {x.id for x in roles[r2]}, (r1, r2)
            assert not {x.digest for x in roles[r1]} & {x.digest for x in roles[r2]}, (r1, r2)
    seed_digests = {x.meta["digest"] for x in prepared["replay"] if "family" in x.meta}
    for role in ("A.new", "B.new", "dev.tasks", "final.tasks"):
        assert not {x.meta["digest"] for x in roles[role]} & seed_digests
    assert {x.id for x in roles["B.replay_a"]} <= {x.id for x in roles["A.new"]}
    assert {x.id for x in roles["B.replay_conv"]} == {x.id for x in roles["A.replay"]}
    assert not any("family" in x.meta for x in roles["A.replay"])  # pool "non-task"


def test_schedule_has_exact_counts_and_replay_every_update(prepared):
    s = load_json_strict(prepared["out"] / "schedule.json")
    roles = _roles(prepared["out"])
    for cohort, parts in (("A", {"A.new": 12, "A.replay": 4}), ("B", {"B.new": 8, "B.replay_a": 4, "B.replay_conv": 4})):
        steps = s["cohorts"][cohort]["steps"]
        assert len(steps) == 8
        for step in steps:
            assert len(step) == 16 and sum(e["replay"] for e in step) == 16 - parts[f"{cohort}.new"]
            assert {r: sum(e["role"] == r for e in step) for r in parts} == parts
        for role in parts:  # every record of the role is scheduled exactly once
            assert sorted(e["id"] for st in steps for e in st if e["role"] == role) == sorted(x.id for x in roles[role])
    a_step = {e["id"]: k + 1 for k, st in enumerate(s["cohorts"]["A"]["steps"]) for e in st}
    assert all(a_step[x.id] == x.meta["a_step"] for x in roles["B.replay_a"])


def test_final_retention_excludes_the_planted_overlaps(prepared):
    p = load_json_strict(prepared["out"] / "prepared.json")
    report = p["exclusions"]["final.retention"]
    assert {k: report["excluded"][k] for k in ("prompt_exact", "prompt_normalized", "document_normalized")} == \
        {"prompt_exact": 1, "prompt_normalized": 1, "document_normalized": 1}
    final = {x.id for x in _roles(prepared["out"])["final.retention"]}
    assert not final & {"alpaca_5000:4001", "alpaca_5000:4002", "alpaca_5000:4003"}
    assert "alpaca_5000:4004" in final or report["excluded"]["over_max_tokens"] > 0
    assert report["eligible"] >= 32 and report["taken"] == 32


def test_ownership_manifests_cover_the_inventory(prepared):
    o = load_json_strict(prepared["out"] / "ownership.json")
    from kit.inventory import inventory
    names = set(inventory(prepared["seed"]))
    by_workers = {(x["workers"], x["grown"]): x for x in o["layouts"]}
    assert set(by_workers) == {(2, False), (3, False), (3, True)}
    for (w, grown), layout in by_workers.items():
        owned = [n for worker in layout["per_worker"] for n in worker["tensors"]]
        assert len(owned) == len(set(owned))
        assert layout["blocks"][0][0] == 0 and layout["blocks"][-1][1] == (6 if grown else 4)
        if not grown:
            assert set(owned) == names
        else:
            assert set(owned) - names == {n.replace("layers.3.", f"layers.{k}.") for k in (4, 5)
                                          for n in names if n.startswith("model.layers.3.")}
        assert "model.embed_tokens.weight" in layout["per_worker"][0]["tensors"]


def test_prepare_draws_dev_retention_from_replay_when_absent(tmp_path):
    synthetic = distinct(synthetic_conversations(200, 21))[:70]
    seed = make_seed(tmp_path, synthetic + seed_tasks())
    prep.prepare(TINY, seed, seed / "trained_conversations.jsonl", None, PUBLIC, tmp_path / "out")
    roles = _roles(tmp_path / "out")
    pool = {x.id for x in synthetic}
    assert {x.id for x in roles["dev.retention"]} <= pool and {x.id for x in roles["A.replay"]} <= pool
    assert not {x.id for x in roles["dev.retention"]} & {x.id for x in roles["A.replay"]}
    p = load_json_strict(tmp_path / "out" / "prepared.json")
    assert p["sources"]["dev_retention"] == {"sha256": None, "drawn_from": "replay"}
    # Deterministic: the same inputs give the same job digest and byte-identical role files and schedule.
    again = prep.prepare(TINY, seed, seed / "trained_conversations.jsonl", None, PUBLIC, tmp_path / "again")
    assert again["job_digest"] == p["job_digest"]
    q = load_json_strict(tmp_path / "again" / "prepared.json")
    assert q["roles"] == p["roles"] and q["schedule"] == p["schedule"] and q["ownership"] == p["ownership"]


def test_commitments_of_a_prepared_job_are_checked_before_training(prepared, tmp_path):
    import shutil

    from kit.provenance import CommitmentMismatch, check_commitments

    out, seed = prepared["out"], prepared["seed"]
    commitments = load_json_strict(out / prep.COMMITMENTS_FILE)
    check_commitments(commitments, lambda p: out / p)  # the running kit, the recorded inputs: all unchanged
    # A copy of the job and of the seed; one byte of the copied tokenizer changes.
    job, seed_copy = tmp_path / "job", tmp_path / "seed"
    shutil.copytree(out, job)
    shutil.copytree(seed, seed_copy)

    def relocate(recorded: str) -> Path:  # seed inputs -> the copied seed; prepared files -> the copied job
        return Path(recorded.replace(str(seed), str(seed_copy), 1)) if recorded.startswith(str(seed)) else job / recorded

    check_commitments(commitments, relocate)
    data = bytearray((seed_copy / "tokenizer.json").read_bytes())
    data[-2] ^= 1
    (seed_copy / "tokenizer.json").write_bytes(bytes(data))
    with pytest.raises(CommitmentMismatch, match=r"input 'seed/tokenizer\.json' .*sha256 mismatch: expected "):
        check_commitments(commitments, relocate)
    with open(job / "schedule.json", "ab") as f:
        f.write(b" ")
    with pytest.raises(CommitmentMismatch, match=r"prepared file 'schedule'"):
        check_commitments(commitments, lambda p: job / p)


# --- refusals before anything is written ----------------------------------------------------------
def test_refusals_write_nothing(prepared, tmp_path):
    seed, dev = prepared["seed"], prepared["dev"]
    replay = seed / "trained_conversations.jsonl"
    out = tmp_path / "out"
    pinned = _write_variant(tmp_path, lambda d: d["seed"].update(parameter_digest="0" * 64))
    with pytest.raises(prep.PrepareError, match=r"parameter digest [0-9a-f]{64} does not match .*seed\.parameter_digest"):
        prep.prepare(pinned, seed, replay, dev, PUBLIC, out)
    wrong_public = tmp_path / "public.json"
    wrong_public.write_bytes(PUBLIC.read_bytes() + b" ")
    with pytest.raises(prep.PrepareError, match=r"public\.json: sha256 .* evaluation\.final\.retention\.sha256"):
        prep.prepare(TINY, seed, replay, dev, wrong_public, out)
    pinned_replay = _write_variant(tmp_path, lambda d: d["inputs"].update(replay_sha256="1" * 64))
    with pytest.raises(prep.PrepareError, match=r"inputs\.replay_sha256"):
        prep.prepare(pinned_replay, seed, replay, dev, PUBLIC, out)
    short = tmp_path / "short.jsonl"
    write_jsonl(short, read_jsonl(replay)[:20])
    with pytest.raises(prep.PrepareError, match=r"short\.jsonl: 20 non-task conversations; the contract needs 32"):
        prep.prepare(TINY, seed, short, dev, PUBLIC, out)
    bad = _write_variant(tmp_path, lambda d: d["cohorts"]["B"].update(workers="3"))
    with pytest.raises(ContractError, match=r"'cohorts\.B\.workers'"):
        prep.prepare(bad, seed, replay, dev, PUBLIC, out)
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]
    with pytest.raises(prep.PrepareError, match=r"already exists and is not an empty directory"):
        prep.prepare(TINY, seed, replay, dev, PUBLIC, prepared["out"])


def test_cli_registration_adds_kit_adaptive_prepare(tmp_path):
    import argparse

    from support.models import write_hf_llama

    from kit.cli import adaptive as adaptive_cli
    from kit.cli import command_handler
    from kit.cli.handlers import adaptive as handlers

    seed = write_hf_llama(tmp_path / "seed")
    (seed / "tokenizer.json").write_text("{}")  # the seed checker wants a fast tokenizer's file; parsing loads none
    replay = tmp_path / "replay.jsonl"
    replay.write_text("")
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    adaptive_cli.register_prepare(sub)
    adaptive_cli.adaptive_subparsers(sub).add_parser("other")  # a second adaptive command shares the group
    out = tmp_path / "out"
    a = parser.parse_args(["adaptive", "prepare", "--contract", str(TINY), "--seed", str(seed), "--replay", str(replay),
                           "--public-source", str(PUBLIC), "--out", str(out)])
    assert (a.handler, a.dev_retention, str(a.out)) == ("kit.cli.handlers.adaptive:cmd_prepare", None, str(out))
    assert command_handler(argparse.Namespace(handler=a.handler)) is handlers.cmd_prepare


def test_tiny_contract_fits_the_tiny_seed():
    from kit.seed.build import SeedBuildConfig

    tiny = load_adaptive_contract(TINY).data
    cfg = SeedBuildConfig.tiny()
    assert tiny["growth"]["copy_block"] == cfg.num_hidden_layers - 1  # the last block, as in the full contract
    assert tiny["training"]["max_tokens"] == cfg.max_tokens
    assert tiny["migration"]["to_workers"] <= cfg.num_hidden_layers
