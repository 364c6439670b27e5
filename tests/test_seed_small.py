"""The small seed's code path (kit/seed/small.py) at test size on CPU: config, refusals, record, determinism."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
from support.evidence import evidence_path

from kit.data import general_text
from kit.data.tasks import generate_set
from kit.seed import small
from kit.seed.small import SmallSeedConfig, build_small_seed

ROOT = Path(__file__).resolve().parents[1]
TEST_CFG = SmallSeedConfig(
    vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, seq_len=128, max_position_embeddings=256, general_text_epochs=1, general_text_max_docs=12,
    heldout_every=4, alpaca_train_stop=60, alpaca_heldout_stop=70, alpaca_epochs=1, synthetic=100, tasks=200,
    batch_rows=8, microbatch_rows=4, max_updates=6, warmup_updates=2, lr=3e-3, dev_sample_per_family=2,
    heldout_max_rows=4, eval_batch=8, sample_max_new_tokens=8,
    # the real recipe's data multipliers and curve, at test size off (tests that need them set them)
    task_difficulty=2, task_epochs=1, dev_difficulty_tasks=0, reworded_tasks=0, practice_tasks=0, curve_every=0,
    curve_difficulty=0)


def _build(out: Path, cfg: SmallSeedConfig = TEST_CFG) -> dict:
    return build_small_seed(out, cfg, device="cpu", alpaca=ROOT / small.ALPACA_FILE,
                            text=ROOT / general_text.TEXT_FILE, contracts_dir=ROOT / "contracts", progress=False)


def test_real_config_is_in_range():
    cfg = SmallSeedConfig.small()
    assert small.VOCAB_RANGE[0] <= cfg.vocab_size <= small.VOCAB_RANGE[1]
    params = cfg.shape(cfg.vocab_size, 1, 2, 0).param_count()
    assert small.PARAM_RANGE[0] <= params <= small.PARAM_RANGE[1], params
    assert cfg.compute_dtype == "bfloat16"


def test_config_file_refusals(tmp_path):
    bad = tmp_path / "c.json"
    bad.write_text(json.dumps({"max_update": 5}))
    with pytest.raises(ValueError, match=r"c\.json: unknown field\(s\) \['max_update'\]"):
        SmallSeedConfig.from_json(bad)
    bad.write_text(json.dumps({"alpaca_heldout_stop": 3000}))
    with pytest.raises(ValueError, match="alpaca_train_stop.*2048"):
        SmallSeedConfig.from_json(bad)
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps({"max_updates": 50}))
    assert SmallSeedConfig.from_json(ok).max_updates == 50


def test_inputs_checked_before_work(tmp_path):
    wrong = tmp_path / "alpaca.json"
    wrong.write_text("[]")
    with pytest.raises(ValueError, match=r"alpaca\.json: sha256 .* expected fc1add24"):
        build_small_seed(tmp_path / "s", TEST_CFG, device="cpu", alpaca=wrong, text=ROOT / general_text.TEXT_FILE,
                         contracts_dir=ROOT / "contracts")
    with pytest.raises(ValueError, match="general text file not found"):
        build_small_seed(tmp_path / "s", TEST_CFG, device="cpu", alpaca=ROOT / small.ALPACA_FILE,
                         text=tmp_path / "missing.xz", contracts_dir=ROOT / "contracts")
    assert not (tmp_path / "s").exists()


def test_refuses_a_dev_role_task(tmp_path, monkeypatch):
    contract = json.loads((ROOT / "contracts/adaptive-shards.json").read_text())
    (dev,) = generate_set({"sorting": 1}, contract["data_seeds"]["tasks"], "dev.tasks", contract["tasks"]["difficulty"])
    trained = small.seed_train_tasks
    # the same content relabelled as a seed-train task: caught by digest, not only by role
    relabelled = replace(dev, id="sorting/seed-train/x", role="seed-train")
    monkeypatch.setattr(small, "seed_train_tasks",
                        lambda cfg, excluded: (trained(cfg, excluded)[0] + [relabelled], []))
    with pytest.raises(small.DisjointnessError, match=r"adaptive-shards\.json:dev\.tasks.*" + dev.id.replace("/", ".")):
        _build(tmp_path / "s")
    monkeypatch.setattr(small, "seed_train_tasks", lambda cfg, excluded: (trained(cfg, excluded)[0] + [dev], []))
    with pytest.raises(small.DisjointnessError, match=r"'dev\.tasks', a development or final role"):
        _build(tmp_path / "s2")
    # a reworded task whose contract-worded twin is a dev task: its own digest is new, its twin's is caught
    monkeypatch.setattr(small, "seed_train_tasks", lambda cfg, excluded: (trained(cfg, excluded)[0], [relabelled]))
    with pytest.raises(small.DisjointnessError, match=r"adaptive-shards\.json:dev\.tasks"):
        _build(tmp_path / "s3")
    assert not any((tmp_path / n).exists() for n in ("s", "s2", "s3"))


def test_build_record_and_determinism(tmp_path):
    a = _build(tmp_path / "a")
    b = _build(tmp_path / "b")
    assert a["parameter_digest"] == b["parameter_digest"]
    rec = json.loads((tmp_path / "a/seed_build.json").read_text())
    assert rec["scale"] == "medium" and rec["parameter_digest"] == a["parameter_digest"]
    gt = rec["data"]["general_text"]
    assert (gt["package"], gt["version"]) == ("python3.11-doc", "3.11.2-6+deb12u9")
    assert gt["package_sha256"] == general_text.PACKAGE_SHA256 and gt["text_sha256"] == general_text.TEXT_SHA256
    assert "PSF" in gt["licence"]
    assert rec["data"]["public_conversations"]["sha256"] == small.ALPACA_SHA256
    assert {"adaptive-shards.json:dev.tasks", "adaptive-shards.json:final.tasks",
            "shared-gradient.json:study-final"} <= set(rec["disjointness"]["checked_against"])
    for part in ("general_text", "conversations"):
        assert rec["heldout"][part]["nll_per_token"] > 0
    assert set(rec["task_accuracy"]["per_family"]) == {"lookup", "filtering", "arithmetic", "sorting"}
    assert all(v["n"] == 2 for v in rec["task_accuracy"]["per_family"].values())
    assert len(rec["chat_samples"]) == len(small.CHAT_PROMPTS)
    assert rec["updates"] == 6
    lines = [json.loads(x) for x in (tmp_path / "a/trained_conversations.jsonl").read_text().splitlines()]
    task_digests = {x["digest"] for x in lines if x.get("source") == "task"}
    assert len(task_digests) == 200
    # what the record claims, checked on what was trained: no development or final task of any contract
    # (recomputed here), and no public record at or past the held-out range's end (final retention: 4000+)
    forbidden = set().union(*(s.digests for s in small.forbidden_task_sets(ROOT / "contracts").values()))
    assert task_digests and not task_digests & forbidden
    public = [int(x["id"].rsplit(":", 1)[1]) for x in lines if x["id"].startswith("alpaca_5000:")]
    assert public and max(public) < rec["config"]["alpaca_train_stop"] <= 2048
    # the seed's description reads the small record (seconds per phase, the device instead of threads)
    from kit.seed.build import describe_seed

    assert f"{rec['device']}): 6 updates" in describe_seed(tmp_path / "a")


def test_retrieval_documents_curve_and_difficulties_in_the_record(tmp_path):
    cfg = replace(TEST_CFG, retrieval_docs=80, curve_every=4, curve_per_family=2, task_difficulty=1, dev_difficulty=2,
                  reworded_tasks=16, practice_tasks=20)
    out = _build(tmp_path / "r", cfg)
    rec = json.loads((tmp_path / "r/seed_build.json").read_text())
    assert rec["data"]["retrieval"]["documents"] == 80 and rec["data"]["retrieval"]["rows"] > 0
    assert [p["update"] for p in rec["learning_curve"]["points"]] == [4, 6]  # every 4 updates, and the last
    assert all(set(p) == {"update", "tokens", "lookup", "filtering", "arithmetic", "sorting"}
               for p in rec["learning_curve"]["points"])
    acc = rec["task_accuracy"]
    assert acc["difficulty"] == 2 and sorted(acc["at_difficulty"]) == ["1", "2"]
    assert acc["pooled"] == out["pooled_accuracy"] == sum(v["correct"] for v in acc["per_family"].values()) / 8
    reworded = acc["reworded"]  # the same dev-difficulty problems in the reworded words
    assert (reworded["wording"], reworded["difficulty"]) == ("reworded", 2)
    assert reworded["pooled"] == out["reworded_pooled_accuracy"]
    assert all(v["n"] == 2 for v in reworded["per_family"].values())
    assert rec["data"]["tasks"]["reworded"]["count"] == 16 and rec["data"]["tasks"]["count"] == 236
    practice = acc["practice"]  # the practice skill on problems of its own sample, never trained on
    assert practice["pooled"] == out["practice_pooled_accuracy"] and practice["difficulty"] == 2
    assert {f: v["n"] for f, v in practice["per_family"].items()} == dict.fromkeys(small.PRACTICE_FAMILIES, 2)
    assert len(practice["examples"]) == 4 and rec["data"]["tasks"]["practice"]["per_family"] == {
        "which_key": 5, "count_kept": 5, "plus_minus": 5, "kth": 5}
    assert rec["throughput"]["mfu_executed"] is None  # CPU: no datasheet peak applies
    assert rec["throughput"]["executed_flops_per_token"] > 0 and rec["data"]["tasks"]["difficulty"] == 1
    with pytest.raises(ValueError, match="dev_difficulty = 4"):
        replace(TEST_CFG, dev_difficulty=4)


def test_task_epochs_repeat_each_task_and_nothing_else(tmp_path):
    cfg = replace(TEST_CFG, task_epochs=3, alpaca_epochs=2)
    inputs = small._read_inputs(cfg, ROOT / small.ALPACA_FILE, ROOT / general_text.TEXT_FILE, ROOT / "contracts")
    tokenizer, ids = small._train_tokenizer(cfg, inputs, tmp_path)
    packed = small._pack(cfg, tokenizer, ids[small.PAD_TOKEN], inputs)
    times = {i: packed.conv_order.count(i) for i in set(packed.conv_order)}
    first_task = len(inputs.convs) - len(inputs.tasks)
    kept = set(times)
    assert {times[i] for i in kept if i >= first_task} == {3}
    assert {times[i] for i in kept if len(inputs.alpaca_train) <= i < first_task} == {1}  # synthetic: once
    assert {times[i] for i in kept if i < len(inputs.alpaca_train)} == {2}
    assert sum(1 for i in kept if i >= first_task) == len(inputs.tasks)  # no task is skipped at this size


def test_dev_difficulty_tasks_are_drawn_at_the_dev_difficulty_once_each(tmp_path):
    cfg = replace(TEST_CFG, task_difficulty=1, dev_difficulty=2, dev_difficulty_tasks=40, task_epochs=2)
    tasks, twins = small.seed_train_tasks(cfg, set())
    assert twins == []
    assert [t.difficulty for t in tasks] == [1] * cfg.tasks + [2] * 40
    assert len({t.digest for t in tasks}) == len(tasks)
    inputs = small._read_inputs(cfg, ROOT / small.ALPACA_FILE, ROOT / general_text.TEXT_FILE, ROOT / "contracts")
    tokenizer, ids = small._train_tokenizer(cfg, inputs, tmp_path)
    packed = small._pack(cfg, tokenizer, ids[small.PAD_TOKEN], inputs)
    first_task = len(inputs.convs) - len(inputs.tasks)
    counts = {i: packed.conv_order.count(i) for i in range(first_task, len(inputs.convs))}
    assert {counts[first_task + k] for k in range(cfg.tasks)} == {2}
    assert {counts[first_task + cfg.tasks + k] for k in range(40)} == {1}


def test_the_recipe_files_reproduce_their_recorded_configs():
    """The defaults are the recipe of the current seed (its probe file); the earlier seeds stay rebuildable
    from campaigns/seed-recipes/: small-800112e3.json gives that seed's recorded config."""
    from dataclasses import asdict
    assert SmallSeedConfig.small() == SmallSeedConfig.from_json(ROOT / "campaigns/seed-probes/q1-practice-d2.json")
    # the seed before it (d1749707, probe p10) ran before practice tasks existed: its recipe over today's
    # defaults is the config its rebuilds recorded, field for field
    recorded = json.loads((evidence_path("seed-rebuilds-2026-12-02", "rebuild7-370bb89") / "seed_build_record.json").read_text())
    p10 = asdict(SmallSeedConfig.from_json(ROOT / "campaigns/seed-recipes/small-d1749707.json"))
    assert {k: p10[k] for k in recorded["config"]} == recorded["config"] and p10["practice_tasks"] == 0
    assert "practice_tasks" not in recorded["config"] and recorded["config"]["reworded_tasks"] == 524288
    # the one before (e83d0af3, probe p8) ran before reworded tasks existed too
    p8 = SmallSeedConfig.from_json(ROOT / "campaigns/seed-probes/p8-candidate.json")
    assert SmallSeedConfig.from_json(ROOT / "campaigns/seed-recipes/small-e83d0af3.json") == replace(
        p8, reworded_tasks=0, practice_tasks=0)
    old = json.loads((ROOT / "runs/seed-small-h200-2026-11-30/seed_build-machine1.json").read_text())["config"]
    rebuilt = asdict(SmallSeedConfig.from_json(ROOT / "campaigns/seed-recipes/small-800112e3.json"))
    assert {k: rebuilt[k] for k in old} == old
    assert (rebuilt["retrieval_docs"], rebuilt["task_epochs"], rebuilt["dev_difficulty_tasks"],
            rebuilt["compile_blocks"], rebuilt["clip_on_device"], rebuilt["fast_paths"], rebuilt["reworded_tasks"],
            rebuilt["practice_tasks"]) == (0, 1, 0, "off", "off", "off", 0, 0)


def test_rows_pack_whole_conversations_and_cut_text_exactly():
    """The packing oracles by hand: conversations whole, in order, right-padded (pad never a target); text
    documents each followed by the separator, cut into full rows, the rest dropped. Rows are tuples."""
    from types import SimpleNamespace as E

    encoded = [E(input_ids=(1, 2, 3), target_mask=(False, True, True)), E(input_ids=(4, 5), target_mask=(False, True)),
               E(input_ids=(6, 7, 8, 9), target_mask=(False, False, True, True))]
    assert small.conversation_rows(encoded, [0, 1, 2, 0], pad=0, seq_len=6) == [
        ((1, 2, 3, 4, 5, 0), (False, True, True, False, True, False)),
        ((6, 7, 8, 9, 0, 0), (False, False, True, True, False, False)),
        ((1, 2, 3, 0, 0, 0), (False, True, True, False, False, False))]
    assert small.conversation_rows(encoded, [], pad=0, seq_len=6) == []
    assert small.text_rows([[1, 2], [3, 4, 5]], [1, 0], sep=9, seq_len=3) == [(3, 4, 5), (9, 1, 2)]


def test_collection_paused_restores_the_collector():
    import gc

    assert gc.isenabled()
    with small.collection_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), small.collection_paused():
        raise RuntimeError("a failed pack")
    assert gc.isenabled()


def test_reworded_tasks_are_the_dev_difficulty_problems_in_other_words_packed_their_epochs(tmp_path):
    """The reworded examples: at the dev difficulty, under their own role, each the rewording of its
    contract-worded twin (same answer, other prompt), selected by that twin, packed reworded_epochs times."""
    from kit.data.tasks import CONTRACT_WORDING, REWORDED

    cfg = replace(TEST_CFG, task_difficulty=1, dev_difficulty=2, dev_difficulty_tasks=8, task_epochs=2,
                  reworded_tasks=12, reworded_epochs=3, practice_tasks=6, practice_epochs=4)
    tasks, twins = small.seed_train_tasks(cfg, set())
    practice = tasks[cfg.tasks + 8:cfg.tasks + 14]  # kit.data.practice's families, between them and the reworded
    assert {t.role for t in practice} == {small.PRACTICE_ROLE} and {t.family for t in practice} <= set(
        small.PRACTICE_FAMILIES) and {t.difficulty for t in practice} == {2}
    reworded = tasks[cfg.tasks + 14:]
    assert len(reworded) == len(twins) == 12
    assert {t.role for t in reworded} == {small.REWORDED_ROLE} and {t.difficulty for t in reworded} == {2}
    for t, twin in zip(reworded, twins):
        assert (t.family, t.answer, t.id) == (twin.family, twin.answer, twin.id + "/reworded")
        assert t.prompt != twin.prompt and t.digest != twin.digest
    assert any(t.prompt.startswith(REWORDED.sort.split("{")[0]) for t in reworded if t.family == "sorting")
    assert not any(t.prompt.startswith(CONTRACT_WORDING.sort.split("{")[0]) for t in reworded)
    # the twins avoid every earlier seed task, and the excluded digests: the first twin excluded moves the set on
    _, moved = small.seed_train_tasks(cfg, {twins[0].digest})
    assert twins[0].digest not in {t.digest for t in moved} and len(moved) == 12

    inputs = small._read_inputs(cfg, ROOT / small.ALPACA_FILE, ROOT / general_text.TEXT_FILE, ROOT / "contracts")
    tokenizer, ids = small._train_tokenizer(cfg, inputs, tmp_path)
    packed = small._pack(cfg, tokenizer, ids[small.PAD_TOKEN], inputs)
    first_task = len(inputs.convs) - len(inputs.tasks)
    counts = {i: packed.conv_order.count(i) for i in range(first_task, len(inputs.convs))}
    assert [counts[first_task + k] for k in range(len(inputs.tasks))] == [2] * cfg.tasks + [1] * 8 + [4] * 6 + [3] * 12
