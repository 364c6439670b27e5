"""The append transition of the adaptive experiment: a commit of the grown model (new blocks appended
after the last, copied from block `copy_from`, age 0 in their own optimizer group) whose parent is the
commit it grew from. The entry arithmetic is `kit.model.growth.grown_entries`."""

from __future__ import annotations

import json

import torch

from kit.model.config import parse_config
from kit.model.growth import grown_entries
from kit.model.shard import Layout
from kit.store import commits
from kit.store.manifest import CommitLayout, LearnedState
from kit.store.objects import ObjectStore
from kit.store.start import start_from_commit


def grow_commit(home: str, root: str, add: int, copy_from: int, group: str, layout: Layout | None = None) -> str:
    """Commit the append transition of `root` (parent = root); new blocks go to the last worker
    unless a layout is given. Returns the new full root."""
    start = start_from_commit(home, root)
    m = start.commit
    assert m is not None, "a start from a commit carries its manifest"
    store = ObjectStore(home)
    zero_cache: dict[tuple, str] = {}

    def zero(shape):
        key = tuple(shape)
        if key not in zero_cache:
            zero_cache[key] = store.put_tensor(torch.zeros(key, dtype=torch.float32))
        return zero_cache[key]

    L = start.shape.num_hidden_layers
    params = grown_entries(m.learned_state.params, L, add, copy_from, group, zero)
    cfg = json.loads(start.config_bytes)
    cfg["num_hidden_layers"] = L + add  # config.json as transformers reads it: written back with one field changed
    config_bytes = json.dumps(cfg, indent=2, sort_keys=True).encode()
    parse_config(json.loads(config_bytes), "grown config")
    if layout is None:
        blocks = [(a, b) for a, b in m.layout.blocks]
        blocks[-1] = (blocks[-1][0], blocks[-1][1] + add)
    else:
        layout.validate(L + add)
        blocks = list(layout.ranges)
    new_layout = CommitLayout(blocks=tuple(blocks), embedding_owner=m.layout.embedding_owner,
                              model_config=store.put_bytes(config_bytes))
    rng = list(m.rng)
    if len(rng) != len(blocks):
        raise ValueError(f"growth keeps the worker count ({len(rng)}); the given layout has {len(blocks)}")
    learned = LearnedState(cursor=m.learned_state.cursor, params=tuple(params))
    return commits.write_commit(home, learned.to_json(), new_layout.to_json(), root, rng)
