"""A tiny adaptive-shards seed and one preparation of the tiny contract, as the adaptive tests use them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from kit.adaptive import prepare as prep
from kit.data.conversations import Conversation, Message, synthetic_conversations, write_jsonl
from kit.data.tasks import generate_set
from kit.data.tokenizer_build import build_tokenizer
from kit.model.config import LlamaShape, RopeSpec
from support.models import REPO

FULL = REPO / "contracts" / "adaptive-shards.json"
TINY = REPO / "contracts" / "adaptive-shards.tiny.json"
PUBLIC = REPO / "data/alpaca_5000.json"


def distinct(convs, avoid=frozenset()):
    seen, out = set(avoid), []
    for c in convs:
        if c.digest not in seen:
            seen.add(c.digest)
            out.append(c)
    return out


def planted(public: Path) -> list[Conversation]:
    """Training conversations that collide with public records 4001 (exact prompt), 4003 (normalised
    prompt) and 4002 (normalised document, different prompt)."""
    rec = json.loads(public.read_text())
    exact = Conversation("planted:exact", (Message("user", rec[4001]["instruction"]), Message("assistant", "Sure.")),
                         "planted")
    user = f"{rec[4003]['instruction']}\n\n{rec[4003]['input']}" if rec[4003]["input"] else rec[4003]["instruction"]
    norm = Conversation("planted:norm", (Message("user", "  " + user.upper().replace("\n\n", " \t ") + " !"),
                                         Message("assistant", "Fine.")), "planted")
    r = rec[4002]
    doc = Conversation("planted:doc", (Message("user", r["instruction"]),
                                       Message("assistant", f"{r['input']} {r['output']}")), "planted")
    return [exact, norm, doc]


def make_seed(root: Path, replay_convs: list[Conversation], layers: int = 4) -> Path:
    seed = root / "seed"
    seed.mkdir(parents=True)
    texts = [m.content for c in synthetic_conversations(200, 5) for m in c.messages]
    texts += [e.prompt + " " + e.answer for e in generate_set(40, 5, "tok")]
    build_tokenizer(texts, 400, seed, model_max_length=512)
    shape = LlamaShape(vocab_size=400, hidden_size=16, intermediate_size=32, num_hidden_layers=layers,
                       num_attention_heads=2, num_key_value_heads=1, head_dim=8, rms_norm_eps=1e-5,
                       max_position_embeddings=512, tie_word_embeddings=True, rope=RopeSpec(),
                       bos_token_id=1, eos_token_id=2, pad_token_id=0)
    (seed / "config.json").write_text(json.dumps(shape.to_hf_dict(), indent=2, sort_keys=True))
    from kit.model.llama import LlamaCausalLM

    with torch.device("meta"):
        names = {n: tuple(p.shape) for n, p in LlamaCausalLM(shape).named_parameters()}
    gen = torch.Generator().manual_seed(0)
    save_file({n: torch.randn(s, generator=gen) for n, s in names.items()}, str(seed / "model.safetensors"))
    write_jsonl(seed / "trained_conversations.jsonl", replay_convs)
    return seed


def seed_tasks() -> list[Conversation]:
    from kit.data.conversations import conversation_from_json

    return [conversation_from_json(e.to_conversation(), e.id, "task") for e in generate_set(8, 0, "seed-train")]


def prepare_tiny(root: Path) -> dict:
    """One preparation of the tiny contract: replay = 29 synthetic + 3 planted overlaps (exactly the 32
    A.replay needs) + 8 seed tasks; dev retention given as its own file. No tensor may be read."""
    synthetic = distinct(synthetic_conversations(200, 11))
    replay = synthetic[:29] + planted(PUBLIC) + seed_tasks()
    seed = make_seed(root, replay)
    dev = root / "dev_retention.jsonl"
    write_jsonl(dev, distinct(synthetic_conversations(300, 12), {c.digest for c in replay})[:40])

    def refuse(*a, **k):
        raise AssertionError("prepare must not load tensors")

    import safetensors
    import safetensors.torch
    with pytest.MonkeyPatch.context() as mp:
        for mod, name in ((safetensors, "safe_open"), (safetensors.torch, "load_file"), (safetensors.torch, "load"),
                          (torch, "load")):
            mp.setattr(mod, name, refuse)
        summary = prep.prepare(TINY, seed, seed / "trained_conversations.jsonl", dev, PUBLIC, root / "out")
    return {"root": root, "seed": seed, "dev": dev, "out": root / "out", "summary": summary, "replay": replay}


def private_job(prepared_out: Path, dest: Path) -> Path:
    """A copy of a shared prepared job bound to this test's own exposure ledger ($KIT_LEDGER, tests/conftest.py).

    A prepared job's final roles are guarded by the ledger it was prepared against (prepared.json
    `locations.ledger` and `locations.ledger_head`; kit.evidence.ledger.bound_guard_ledger), and `select` refuses
    a $KIT_LEDGER naming another. The shared preparation read an empty ledger (the session's or its file's, tests/conftest.py); its copy is re-bound
    to the test's ledger, as a preparation against that (empty) ledger would have written it, and prepared.json's
    commitment re-pinned, so that each test's selections and final accesses stay in its own ledger."""
    import os
    import shutil

    from kit.digest import load_json_strict, write_canonical_json

    shutil.copytree(prepared_out, dest)
    pj_path = dest / "prepared.json"
    pj = load_json_strict(pj_path)
    assert pj["locations"]["ledger_head"]["size"] == 0, "the shared preparation read an empty ledger"
    pj["locations"]["ledger"] = str(Path(os.environ["KIT_LEDGER"]).absolute())
    sha = write_canonical_json(pj_path, pj)
    commitments = load_json_strict(dest / "adaptive-shards-inputs.json")
    commitments["prepared"]["prepared"].update(sha256=sha, bytes=pj_path.stat().st_size)
    write_canonical_json(dest / "adaptive-shards-inputs.json", commitments)
    return dest
