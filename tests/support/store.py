"""Small commits of random tensors (three parameters, distinct bytes), as the store tests write them."""

from __future__ import annotations

from pathlib import Path

import torch

from kit.digest import canonical_json
from kit.store.commits import save_param_states, write_commit
from kit.store.objects import ObjectStore


def tiny_config(num_layers: int = 2) -> bytes:
    return canonical_json(
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": 64,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": num_layers,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "max_position_embeddings": 64,
            "tie_word_embeddings": True,
        }
    )


def random_states(seed: int, names=("a.weight", "b.weight", "c.bias")) -> dict[str, dict]:
    g = torch.Generator().manual_seed(seed)
    shapes = {"a.weight": (4, 3), "b.weight": (5,), "c.bias": (2, 2)}
    return {
        name: {
            "group": "decay" if name.endswith("weight") else "no_decay",
            "age": seed + i,
            "param": torch.randn(shapes[name], generator=g),
            "exp_avg": torch.randn(shapes[name], generator=g),
            "exp_avg_sq": torch.rand(shapes[name], generator=g),
        }
        for i, name in enumerate(names)
    }


def stage_commit(home: Path, seed: int, world: int = 2) -> tuple[dict, dict, list[str]]:
    """Write a commit's objects (as the workers would) and return (learned_state, layout, rng)."""
    store = ObjectStore(home)
    entries = save_param_states(store, random_states(seed))
    rng = [store.put_bytes(f"rng state of rank {r}, seed {seed}".encode()) for r in range(world)]
    blocks = [[0, 1], [1, 2]] if world == 2 else [[0, 2]]
    layout = {"blocks": blocks, "embedding_owner": 0, "model_config": store.put_bytes(tiny_config())}
    return {"cursor": {"step": seed, "examples": 64 * seed}, "params": entries}, layout, rng


def commit(home: Path, seed: int, parent: str | None) -> str:
    ls, layout, rng = stage_commit(home, seed)
    return write_commit(home, ls, layout, parent, rng)
