"""One CPU session over a 2-block seed pair and its fixed batches (the background-commit tests).

A module of its own because the SIGKILL test also drives it from a fresh interpreter.
"""

from __future__ import annotations

import torch

from kit.distributed.group import Group
from kit.engine.session import Session
from kit.model.shard import even_layout
from kit.store.start import start_from_seed
from kit.train.optim import GroupConfig
from support.engine import OPT, make_batches
from support.engine_workers import engine_config, records_from_json

LAYERS = 2
BATCHES = make_batches(6, seed=11)


def make_session(student: str, reference: str, home: str) -> Session:
    """One CPU worker over the whole model (world size 1: collectives are local)."""
    groups = {"default": GroupConfig.from_json(OPT, "optimizer.default")}
    return Session(Group(0, 1, torch.device("cpu")), str(home), even_layout(LAYERS, 1),
                   start_from_seed(str(student)), engine_config({"microbatch_size": 2, "max_grad_norm": 0.5}),
                   groups, reference={"seed_dir": str(reference)})


def update(session: Session):
    return session.update(records_from_json(BATCHES[session.step]))
