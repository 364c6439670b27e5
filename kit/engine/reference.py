"""The frozen reference's stage of one worker: the same blocks as the student's, from a seed
directory or from a commit (its `param` objects only, never the Adam moments)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from kit.distributed.group import Group
from kit.model.config import LlamaShape
from kit.model.llama import LlamaCausalLM
from kit.model.shard import Layout, load_owned
from kit.store.objects import ObjectStore
from kit.store.params import load_parameters
from kit.store.start import start_from_commit, start_from_manifest, start_from_seed


def _reference_stage(group: Group, layout: Layout, student_shape: LlamaShape, ref_shape: LlamaShape,
                     source: str) -> LlamaCausalLM:
    """The reference's blocks among this worker's: the same as the student's, except that after growth
    the reference is shallower and the appended blocks have no counterpart (the worker then only
    forwards the reference activations it receives)."""
    if replace(ref_shape, num_hidden_layers=student_shape.num_hidden_layers) != student_shape:
        raise ValueError(f"{source}: the reference's shape differs from the student's beyond depth")
    if ref_shape.num_hidden_layers > student_shape.num_hidden_layers:
        raise ValueError(f"{source}: the reference has more blocks ({ref_shape.num_hidden_layers}) than the "
                         f"student ({student_shape.num_hidden_layers})")
    ids = [i for i in layout.blocks_of(group.rank) if i < ref_shape.num_hidden_layers]
    with torch.device(group.device):
        return LlamaCausalLM(ref_shape, ids, with_embedding=group.rank == layout.embedding_owner)


def load_reference(group: Group, layout: Layout, shape: LlamaShape, spec: dict | None, dtype) -> LlamaCausalLM | None:
    """The frozen reference's stage: from a seed directory, or from a commit (its `param` objects only)."""
    if spec is None:
        return None
    if "seed_dir" in spec:
        path = Path(spec["seed_dir"]) / "config.json"
        ref = _reference_stage(group, layout, shape, start_from_seed(spec["seed_dir"]).shape, str(path))
        load_owned(ref, spec["seed_dir"])
    else:
        # "manifest": fetched over the group into this host's store, never adopted (kit/engine/migration.py)
        start = start_from_manifest(spec["home"], spec["manifest"]) if "manifest" in spec else \
            start_from_commit(spec["home"], spec["root"])
        ref = _reference_stage(group, layout, shape, start.shape, f"reference commit {spec['root']}")
        assert start.commit is not None, "a start from a commit carries its manifest"
        load_parameters(ObjectStore(spec["home"]), start.commit.learned_state.params, ref,
                        f"reference commit {spec['root']}")
    ref.requires_grad_(False)
    return ref.to(dtype)
