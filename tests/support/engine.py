"""The engine tests' common arguments: optimizer settings, record batches, a one-worker engine."""

from __future__ import annotations

import random

import torch

from kit.distributed.group import Group
from kit.model.shard import even_layout
from kit.train.optim import GroupConfig
from support.engine_workers import build_engine, engine_config

OPT = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1}


def make_batches(n_updates=3, per_update=5, vocab=64, seed=0):
    """Records of varied length, unequal weights, replay declared on some; 5 docs in microbatches of 2
    gives a partial last microbatch."""
    rng = random.Random(seed)
    batches = []
    for u in range(n_updates):
        rows = []
        for i in range(per_update):
            n = rng.randint(6, 14)
            ids = [rng.randrange(1, vocab) for _ in range(n)]
            start = rng.randint(2, n - 2)  # the "assistant" part is a suffix, like a chat reply
            mask = [t >= start for t in range(n)]
            rows.append({"id": f"u{u}r{i}", "input_ids": ids, "target_mask": mask,
                         "weight": [1.0, 0.5, 2.0, 1.0, 1.5][i % 5], "replay": i % 3 == 1})
        batches.append(rows)
    return batches


def single_engine(dirs, ref_dir=None, kl_weight=1.0):
    seed_dir, other = dirs

    cfg = engine_config({"microbatch_size": 2, "max_grad_norm": 1.0, "distill": {"weight": kl_weight}})
    return build_engine(Group(0, 1, torch.device("cpu")), str(seed_dir), str(ref_dir or other),
                        even_layout(3, 1), cfg, {"default": GroupConfig(**OPT)})
