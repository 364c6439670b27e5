"""A tiny shared-gradient study: seed, pinned source, contract variants and an exposed ledger."""

from __future__ import annotations

import json
from pathlib import Path

from kit.data.conversations import synthetic_conversations
from kit.data.tasks import generate_set
from kit.data.tokenizer_build import build_tokenizer
from kit.digest import sha256_file
from support.models import REPO, write_hf_llama

TINY = REPO / "contracts" / "shared-gradient.tiny.json"
FULL = REPO / "contracts" / "shared-gradient.json"


def write_source(path: Path) -> Path:
    """A pinned Alpaca-format source of short records: 0..29 replay, 30..59 retention."""
    words = ["apple", "river", "stone", "cloud", "house", "tree", "bird", "light", "music", "garden"]
    records = []
    for i in range(60):
        a, b = words[i % 10], words[(i * 3 + 1) % 10]
        if i < 30:
            records.append({"instruction": f"Repeat after me: {a} {b}", "input": "", "output": f"{a} {b}"})
        else:
            records.append({"instruction": f"Count from {i % 7} to {i % 7 + 3}.", "input": "",
                            "output": " ".join(str(n) for n in range(i % 7, i % 7 + 4)) + f" {a}"})
    path.write_text(json.dumps(records))
    return path


def write_contract(tmp: Path, source: Path, **over) -> Path:
    c = json.loads(TINY.read_text())
    sha = sha256_file(source)
    c["schedule"].update(updates=4, documents_per_update=6)
    c["data"].update(max_tokens=120)
    c["data"]["tasks"].update(count=16)
    c["data"]["replay"].update(count=8, source={"name": "test-source", "sha256": sha, "start": 0, "stop": 30})
    c["data"]["final_test"].update(count=8)
    c["data"]["retention"].update(count=8, source={"name": "test-source", "sha256": sha, "start": 30, "stop": 60})
    c["training"].update(microbatch_size=2, max_grad_norm=0.05, commit_every=2)
    c["powersgd"].update(rank=1, warmup_updates=1, min_compression_numel=256)
    c["evaluation"].update(max_new_tokens=8, batch_size=4)
    c["projection"].update(startup_s=1, checkpoint_s=1)
    for key, value in over.items():
        c[key] = value
    path = tmp / f"contract-{len(list(tmp.glob('contract-*')))}.json"
    path.write_text(json.dumps(c))
    return path


def exposed_ledger(path: Path, source: Path, start: int, stop: int) -> Path:
    """A ledger in which an earlier scoring (another contract) opened records [start, stop) of the
    source as retention probes: the tiny contracts' retention is "already exposed"."""
    from kit.data.conversations import instruction_source_range
    from kit.evidence.ledger import record

    rng = instruction_source_range(source, sha256_file(source), start, stop, "test-source")
    record([("retention.probe", c.digest, c.id) for c in rng.conversations], "cd" * 32, "ef" * 32,
           "an earlier study's final scoring", path)
    return path


def make_study_env(tmp: Path) -> dict:
    """A tiny study seed (2 blocks, its own tokenizer), a pinned source, the contract and an exposed ledger."""
    seed = tmp / "seed"
    texts = [m.content for c in synthetic_conversations(200, seed=0) for m in c.messages]
    texts += [t.prompt + " " + t.answer for t in generate_set(200, 7, "tokenizer")]
    build_tokenizer(texts, 300, seed)
    write_hf_llama(seed, vocab=320, hidden=64, layers=2, heads=4, kv_heads=2, inter=128)
    source = write_source(tmp / "source.json")
    return {"tmp": tmp, "seed": seed, "source": source, "contract": write_contract(tmp, source),
            "ledger": exposed_ledger(tmp / "exposed.jsonl", source, 30, 60)}
