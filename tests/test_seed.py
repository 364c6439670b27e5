"""The seed builder: an ordinary Hugging Face directory, trained deterministically by the kit's engine.

The test-size seed (SeedBuildConfig.test(), same code path as the tiny seed) is built once per module.
transformers is the oracle for loading, logits and greedy decoding; the kit never calls it in the build.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
from safetensors import safe_open
from transformers import AutoTokenizer, LlamaForCausalLM

from kit.data.chat import generation_prompt_ids
from kit.data.conversations import Message, read_jsonl
from kit.data.tasks import FAMILIES, generate_set
from kit.digest import sha256_file
from kit.inventory import parameter_digest
from kit.model.config import load_config
from kit.model.generate import greedy_generate
from kit.model.llama import LlamaCausalLM
from kit.model.shard import load_owned
from kit.seed.build import (
    SAMPLE_CHAT_PROMPT,
    SEED_SAMPLE_ROLE,
    SEED_TRAIN_ROLE,
    SeedBuildConfig,
    build_seed,
    describe_seed,
    length_sorted_batches,
)

CFG = SeedBuildConfig.test()
IM_START, IM_END = "<|im_start|>", "<|im_end|>"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("seeds") / "seed"
    summary = build_seed(out, CFG, progress=False)
    return out, summary


@pytest.fixture(scope="module")
def record(built):
    return json.loads((built[0] / "seed_build.json").read_text())


@pytest.fixture(scope="module")
def kit_model(built):
    model = LlamaCausalLM(load_config(built[0]))
    load_owned(model, built[0])  # the production loader
    return model.eval()


@pytest.fixture(scope="module")
def hf_model(built):
    return LlamaForCausalLM.from_pretrained(built[0], dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def hf_tokenizer(built):
    return AutoTokenizer.from_pretrained(built[0])


def test_directory_is_an_ordinary_hugging_face_seed(built, hf_tokenizer, hf_model):
    out, _ = built
    eos = hf_tokenizer.convert_tokens_to_ids(IM_END)
    assert hf_tokenizer.eos_token == IM_END and eos == 2
    assert hf_tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False,
                                            add_generation_prompt=True) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    config = json.loads((out / "config.json").read_text())
    assert (config["eos_token_id"], config["bos_token_id"], config["pad_token_id"]) == (
        eos, hf_tokenizer.convert_tokens_to_ids(IM_START), hf_tokenizer.convert_tokens_to_ids("<|endoftext|>"))
    assert config["vocab_size"] == len(hf_tokenizer)
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["tie_word_embeddings"]) == (4, 2, True)
    assert config["rope_theta"] == 10000.0 and config["max_position_embeddings"] == 512
    generation = json.loads((out / "generation_config.json").read_text())
    assert (generation["eos_token_id"], generation["pad_token_id"]) == (eos, 0)
    assert hf_model.config.num_key_value_heads == 2 and hf_model.config.tie_word_embeddings
    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        assert f.metadata() == {"format": "pt"}
        names = set(f.keys())
        assert all(f.get_tensor(n).dtype == torch.float32 for n in names)
    assert "lm_head.weight" not in names  # tied: the head is the embedding
    assert names == {n for n, _ in hf_model.named_parameters()} - {"lm_head.weight"}


def test_hf_logits_equal_the_kits(hf_tokenizer, hf_model, kit_model):
    text = hf_tokenizer.apply_chat_template(
        [{"role": "user", "content": "Count from 3 to 6."}, {"role": "assistant", "content": "3 4 5 6"}], tokenize=False)
    ids = torch.tensor([hf_tokenizer(text, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        ref = hf_model(input_ids=ids).logits
        out = kit_model(ids)
    assert out.shape == ref.shape == (1, ids.shape[1], kit_model.shape.vocab_size)
    assert (out - ref).abs().max().item() <= 1e-5


def test_greedy_reply_is_well_formed_and_matches_transformers(hf_tokenizer, hf_model, kit_model):
    eos = kit_model.shape.eos_token_id
    prompt = generation_prompt_ids(hf_tokenizer, [Message("user", SAMPLE_CHAT_PROMPT)])
    max_new = 24
    ids = greedy_generate(kit_model, prompt, max_new, eos)
    assert ids[-1] == eos or len(ids) == max_new
    assert eos not in ids[:-1]  # decoding stops at the first end of turn
    reply = hf_tokenizer.decode(ids, skip_special_tokens=False)
    assert IM_START not in reply  # it stopped at a turn boundary, never opened another turn
    with torch.no_grad():
        ref = hf_model.generate(torch.tensor([prompt]), max_new_tokens=max_new, do_sample=False,
                                eos_token_id=eos, pad_token_id=0)[0, len(prompt):].tolist()
    assert ids == ref


def test_greedy_generate_limits_and_refusals(kit_model):
    prompt = [1, 5, 6, 7]
    assert greedy_generate(kit_model, prompt, 0, 2) == []
    free = greedy_generate(kit_model, prompt, 5, None)  # no end token: exactly max_new_tokens
    assert len(free) == 5
    assert greedy_generate(kit_model, prompt, 5, [free[0]]) == free[:1]  # several end tokens accepted
    limit = kit_model.shape.max_position_embeddings
    assert len(greedy_generate(kit_model, [5] * (limit - 3), 50, None)) == 3  # stops at the context limit
    assert kit_model.training is False
    with pytest.raises(ValueError, match="prompt is empty"):
        greedy_generate(kit_model, [], 4, 2)
    with pytest.raises(ValueError, match="max_new_tokens=-1"):
        greedy_generate(kit_model, prompt, -1, 2)
    with pytest.raises(ValueError, match="token id 100000 outside the vocabulary"):
        greedy_generate(kit_model, [100000], 4, 2)
    with pytest.raises(ValueError, match="max_position_embeddings is 512"):
        greedy_generate(kit_model, [5] * (limit + 1), 4, 2)


def test_trained_conversations_are_recorded_in_training_order(built, record):
    out, summary = built
    conversations = read_jsonl(out / "trained_conversations.jsonl")
    total = CFG.updates * CFG.batch_size
    assert len(conversations) == record["data"]["trained_conversations"] == summary["trained_conversations"] == total
    assert record["data"]["trained_conversations_sha256"] == sha256_file(out / "trained_conversations.jsonl")
    tasks = [c for c in conversations if c.source == "task"]
    assert len(tasks) == record["data"]["tasks"]["count"] == round(CFG.task_share * total)
    assert record["data"]["synthetic"]["count"] == total - len(tasks)
    assert all(f"/{SEED_TRAIN_ROLE}/" in c.id and c.meta["family"] in FAMILIES for c in tasks)
    # the seed-train set is exactly the generated role set, so later roles can exclude it by digest
    expected = generate_set(len(tasks), CFG.seed, SEED_TRAIN_ROLE, CFG.task_difficulty)
    assert sorted(c.meta["digest"] for c in tasks) == sorted(t.digest for t in expected)
    # each update's batch is length-sorted: token counts never decrease inside a batch
    tokenizer = AutoTokenizer.from_pretrained(out)
    texts = [tokenizer.apply_chat_template([m.to_json() for m in c.messages], tokenize=False)
             for c in conversations[: 2 * CFG.batch_size]]
    lengths = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    for start in (0, CFG.batch_size):
        batch = lengths[start:start + CFG.batch_size]
        assert batch == sorted(batch)


def test_length_sorted_batches():
    assert length_sorted_batches([5, 3, 3, 9, 1, 2, 7], 3) == [1, 2, 0, 4, 5, 3, 6]


def test_loss_decreased_from_chance(record):
    vocab = record["vocab_size"]
    assert abs(record["loss_initial"] - math.log(vocab)) < 0.3  # small init: near-uniform predictions
    assert record["loss_final"] < 0.6 * record["loss_initial"]


def test_summary_digest_and_samples(built, record):
    out, summary = built
    digest = parameter_digest(out)
    assert summary["parameter_digest"] == record["parameter_digest"] == digest
    assert summary["params"] == record["params"] == load_config(out).param_count()
    assert summary["out"] == str(out) and summary["seconds"] > 0
    assert record["threads"] == 1 and record["numeric_profile"]["name"] == "kit-cpu-portable/1" and record["config"]["hidden_size"] == CFG.hidden_size
    assert sorted(summary["samples"]) == sorted(FAMILIES)
    for family, sample in summary["samples"].items():
        (example,) = generate_set({family: 1}, CFG.seed, SEED_SAMPLE_ROLE, CFG.task_difficulty)
        assert (sample["prompt"], sample["expected"]) == (example.prompt, example.answer)
        assert isinstance(sample["reply"], str) and isinstance(sample["correct"], bool)
        assert IM_START not in sample["reply"]
    assert summary["chat_sample"]["prompt"] == SAMPLE_CHAT_PROMPT


def test_describe_seed(built):
    out, summary = built
    text = describe_seed(out)
    assert f"parameter digest: {summary['parameter_digest']}" in text
    assert f"trained conversations: {CFG.updates * CFG.batch_size:,}" in text
    assert "2 layers, hidden 64, 4 heads (2 key/value)" in text
    assert repr(summary["chat_sample"]["reply"]) in text


def test_build_is_deterministic(built, tmp_path):
    out, summary = built
    again = build_seed(tmp_path / "again", CFG, progress=False)
    assert again["parameter_digest"] == summary["parameter_digest"]
    for name in ("tokenizer.json", "trained_conversations.jsonl", "config.json"):
        assert (tmp_path / "again" / name).read_bytes() == (out / name).read_bytes()
    assert again["samples"] == summary["samples"]


def test_refusals(tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("x")
    with pytest.raises(ValueError, match="not an empty directory"):
        build_seed(tmp_path / "taken", CFG, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]  # no staging directory left behind
    with pytest.raises(ValueError, match="num_key_value_heads = 3; expected a divisor"):
        replace(CFG, num_key_value_heads=3)
    with pytest.raises(ValueError, match="task_share = 1.0"):
        replace(CFG, task_share=1.0)


def test_learning_rate_schedule():
    cfg = replace(CFG, lr=1e-3, warmup_updates=4, updates=14, min_lr_ratio=0.1)
    assert [cfg.learning_rate(k) for k in range(4)] == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3])
    assert cfg.learning_rate(9) == pytest.approx(1e-4 + 0.9e-3 * 0.5 * (1 + math.cos(math.pi * 5 / 9)))
    assert cfg.learning_rate(13) == pytest.approx(1e-4)
