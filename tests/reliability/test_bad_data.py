"""Issue 9, case 16: bad data stops the job with a clear error naming the file and the problem, before
any training.

tests/test_conversations.py and tests/test_chat.py check the readers one by one. Here the same faults
reach the entry points that would train: `kit adaptive prepare` (nothing written, no staging directory
left), the adaptive workers' encoding of a cohort's records, and a worker building its stage from a
seed (`kit.engine.session.Session`, `engine_workers.build_engine`). Faults: malformed JSONL, an empty assistant
turn, oversized examples, a tokenizer without a chat template, a seed with a missing tensor, a tensor of
the wrong shape, and a non-Llama config.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from support.adaptive import PUBLIC, TINY, distinct, make_seed, planted, seed_tasks
from support.engine import OPT
from support.engine_workers import build_engine, engine_config
from support.reliability import write_seed

from kit.adaptive import prepare as prep
from kit.adaptive.bindings import TrainRefused
from kit.adaptive.train import records_for_cohort
from kit.data.conversations import Conversation, Message, RecordError, synthetic_conversations, write_jsonl
from kit.digest import sha256_file, write_canonical_json
from kit.distributed.group import Group
from kit.engine.session import Session
from kit.model.config import ConfigError
from kit.model.shard import even_layout
from kit.store.start import start_from_seed
from kit.train.optim import GroupConfig

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A seed with a tokenizer and the replay file the tiny contract prepares from (as test_adaptive_prepare)."""
    root = tmp_path_factory.mktemp("bad-data")
    replay = distinct(synthetic_conversations(200, 11))[:29] + planted(PUBLIC) + seed_tasks()
    seed = make_seed(root, replay)
    dev = root / "dev_retention.jsonl"
    write_jsonl(dev, distinct(synthetic_conversations(300, 12), {c.digest for c in replay})[:40])
    return {"seed": seed, "replay": seed / "trained_conversations.jsonl", "dev": dev}


@pytest.fixture
def seed_copy(base, tmp_path):
    out = tmp_path / "seed"
    shutil.copytree(base["seed"], out)
    return out


def _without_tensor(seed: Path, name: str) -> None:
    tensors = load_file(str(seed / "model.safetensors"))
    del tensors[name]
    save_file(tensors, str(seed / "model.safetensors"))


def _non_llama(seed: Path) -> Path:
    config = json.loads((seed / "config.json").read_text())
    config.update(model_type="gpt2", architectures=["GPT2LMHeadModel"])
    (seed / "config.json").write_text(json.dumps(config))
    return seed / "config.json"


def _no_chat_template(seed: Path) -> None:
    config = json.loads((seed / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (seed / "tokenizer_config.json").write_text(json.dumps(config))
    (seed / "chat_template.jinja").unlink(missing_ok=True)


# -- kit adaptive prepare ------------------------------------------------------------------------------------------


def _prepare_refuses(tmp_path: Path, base, seed: Path, replay: Path, match: str) -> None:
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=match):
        prep.prepare(TINY, seed, replay, base["dev"], PUBLIC, out)
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.preparing")]


def _replay_with_line(tmp_path: Path, base, lineno: int, line: bytes) -> Path:
    lines = base["replay"].read_bytes().splitlines(keepends=True)
    lines[lineno - 1] = line
    path = tmp_path / "replay.jsonl"
    path.write_bytes(b"".join(lines))
    return path


@pytest.mark.parametrize("line, problem", [
    (b'{"id": "x", "messages": [{"role": "user", "content": "hi"}\n', r"invalid JSON at line 1"),
    (b"\xff\xfe not utf-8\n", r"not UTF-8"),
    (b"\n", r"blank line"),
    (b'{"id": "x", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "  "}]}\n',
     r"message 1 is an empty assistant turn"),
    (b'{"id": "x", "messages": [{"role": "user", "content": "hi"}]}\n', r"no assistant turn"),
    (b'{"id": "x", "messages": [{"role": "robot", "content": "hi"}, {"role": "assistant", "content": "ok"}]}\n',
     r"message 0 has role 'robot'"),
])
def test_malformed_replay_line_stops_preparation(base, tmp_path, line, problem):
    replay = _replay_with_line(tmp_path, base, 7, line)
    _prepare_refuses(tmp_path, base, base["seed"], replay, re.escape(f"{replay}:7: ") + ".*" + problem)


def test_oversized_replay_stops_preparation(base, tmp_path):
    long = [Conversation(f"long:{i}", (Message("user", "count " * 400), Message("assistant", "ok")), "synthetic")
            for i in range(40)]
    replay = tmp_path / "replay.jsonl"
    write_jsonl(replay, long)
    _prepare_refuses(tmp_path, base, base["seed"], replay, re.escape(str(replay)) + r": only 0 usable conversations for "
                     r"role 'A.replay'.*'over_max_tokens': 40")


def test_tokenizer_without_chat_template_stops_preparation(base, seed_copy, tmp_path):
    _no_chat_template(seed_copy)
    _prepare_refuses(tmp_path, base, seed_copy, base["replay"], re.escape(str(seed_copy)) + ": tokenizer has no chat template")


def test_seed_missing_a_block_tensor_stops_preparation(base, seed_copy, tmp_path):
    _without_tensor(seed_copy, "model.layers.3.mlp.up_proj.weight")  # block 3 still has other tensors
    _without_tensor(seed_copy, "model.layers.3.mlp.down_proj.weight")
    for name in list(load_file(str(seed_copy / "model.safetensors"))):
        if name.startswith("model.layers.3."):
            _without_tensor(seed_copy, name)
    _prepare_refuses(tmp_path, base, seed_copy, base["replay"], re.escape(str(seed_copy)) + r": safetensors hold blocks "
                     r"\[0, 1, 2\]; config.json says num_hidden_layers = 4")


def test_non_llama_config_stops_preparation(base, seed_copy, tmp_path):
    config = _non_llama(seed_copy)
    _prepare_refuses(tmp_path, base, seed_copy, base["replay"],
                     re.escape(str(config)) + r": field 'model_type' = 'gpt2'; expected 'llama'")


# -- the adaptive workers' records ----------------------------------------------------------------------------------


def _prepared_with(tmp_path: Path, conversations: list[Conversation]) -> Path:
    """The part of a prepared job `records_for_cohort` reads: prepared.json, schedule.json, one role file."""
    prepared = tmp_path / "prepared"
    (prepared / "roles").mkdir(parents=True)
    sha = write_jsonl(prepared / "roles" / "A.new.jsonl", conversations)
    write_canonical_json(prepared / "prepared.json", {
        "schedule": {"file": "schedule.json"},
        "roles": {"A.new": {"file": "roles/A.new.jsonl", "sha256": sha}}})
    step = [{"id": c.id, "role": "A.new", "replay": False} for c in conversations]
    write_canonical_json(prepared / "schedule.json", {"cohorts": {"A": {"steps": [step]}}})
    return prepared


def test_oversized_record_refused_before_the_first_update(base, tmp_path):
    convs = [Conversation("short", (Message("user", "hi"), Message("assistant", "hello")), "synthetic"),
             Conversation("too-long", (Message("user", "count " * 200), Message("assistant", "ok")), "synthetic")]
    prepared = _prepared_with(tmp_path, convs)
    with pytest.raises(TrainRefused, match=re.escape(f"{prepared}: record 'too-long' exceeds max_tokens=64")):
        records_for_cohort(prepared, "A", str(base["seed"]), 64)
    assert set(records_for_cohort(prepared, "A", str(base["seed"]), 4096).encoded) == {"short", "too-long"}


def test_tokenizer_without_chat_template_refused_before_the_first_update(base, seed_copy, tmp_path):
    prepared = _prepared_with(tmp_path, [Conversation("a", (Message("user", "hi"), Message("assistant", "ok")), "s")])
    _no_chat_template(seed_copy)
    with pytest.raises(ValueError, match=re.escape(str(seed_copy)) + ": tokenizer has no chat template"):
        records_for_cohort(prepared, "A", str(seed_copy), 64)


def test_malformed_role_record_behind_a_matching_digest_is_refused(base, tmp_path):
    """A role file edited together with the digest in prepared.json still has to be a valid record."""
    prepared = _prepared_with(tmp_path, [Conversation("a", (Message("user", "hi"), Message("assistant", "ok")), "s")])
    role = prepared / "roles" / "A.new.jsonl"
    role.write_bytes(b'{"id":"a","messages":[{"content":"hi","role":"user"},{"content":"","role":"assistant"}]}\n')
    pj = json.loads((prepared / "prepared.json").read_text())
    pj["roles"]["A.new"]["sha256"] = sha256_file(role)
    write_canonical_json(prepared / "prepared.json", pj)
    with pytest.raises(RecordError, match=re.escape(f"{role}:1: message 1 is an empty assistant turn")):
        records_for_cohort(prepared, "A", str(base["seed"]), 64)


# -- a worker building its stage from a seed ------------------------------------------------------------------------


@pytest.fixture
def small_seed(tmp_path):
    return write_seed(tmp_path / "small", layers=2)


def _session(seed: Path) -> Session:
    return Session(Group(0, 1, CPU), str(seed.parent / "home"), even_layout(2, 1), start_from_seed(str(seed)),
                   engine_config({"microbatch_size": 2, "max_grad_norm": 1.0}),
                   {"default": GroupConfig(**OPT)})


def _engine(seed: Path):
    return build_engine(Group(0, 1, CPU), str(seed), None, even_layout(2, 1),
                        engine_config({"microbatch_size": 2, "max_grad_norm": 1.0}),
                        {"default": GroupConfig(**OPT)})


@pytest.mark.parametrize("missing", ["model.norm.weight", "model.layers.1.self_attn.k_proj.weight"])
def test_seed_missing_a_tensor_refused_when_the_worker_loads(small_seed, missing):
    _without_tensor(small_seed, missing)
    for build in (_session, _engine):
        with pytest.raises(ValueError, match=re.escape(f"{small_seed}: tensor {missing!r} is missing from the "
                                                       "safetensors files")):
            build(small_seed)
    assert not (small_seed.parent / "home").exists()  # nothing committed, nothing trained


def test_seed_tensor_of_the_wrong_shape_refused(small_seed):
    tensors = load_file(str(small_seed / "model.safetensors"))
    tensors["model.layers.0.mlp.up_proj.weight"] = torch.zeros(3, 3)
    save_file(tensors, str(small_seed / "model.safetensors"))
    for build in (_session, _engine):
        with pytest.raises(ValueError, match=re.escape(f"{small_seed / 'model.safetensors'}: tensor "
                                                       "'model.layers.0.mlp.up_proj.weight' has shape [3, 3]; "
                                                       "expected [24, 16] from config.json")):
            build(small_seed)


def test_non_llama_config_refused_when_the_worker_starts(small_seed):
    config = _non_llama(small_seed)
    for build in (_session, _engine):
        with pytest.raises(ConfigError, match=re.escape(f"{config}: field 'model_type' = 'gpt2'; expected 'llama'")):
            build(small_seed)
