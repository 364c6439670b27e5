"""Admission counts what the schedule keeps alive; training uses the planner's layout (issue 14, item 6)."""

from __future__ import annotations

import math

import pytest
import torch
from support.models import write_hf_llama

import kit.engine.admission as admission_mod
import kit.engine.worker as worker_mod
from kit.adaptive.ownership import OWNERSHIP_FILE, planned_layout
from kit.adaptive.train import training_layout
from kit.digest import write_canonical_json
from kit.distributed.group import Group
from kit.distributed.pipeline import EngineConfig
from kit.engine.admission import worker_estimate
from kit.engine.session import Session
from kit.model.config import smollm2_17b
from kit.model.shard import Layout, even_layout
from kit.planner import AdmissionError
from kit.store.start import start_from_seed
from kit.train.optim import GroupConfig

SHAPE = smollm2_17b()
GPU = {"compute_copy_bytes": 0, "reference_bytes": 2, "activation_bytes": 2, "act_mlp_coeff": 3.0,
       "saved_weight_bytes": 2, "reserve_bytes": 6 << 30}


def _expected(layout, rank, batch, seq, n_mb, mm):
    """The estimate written out from docs/planner.md and docs/engine.md, independently of the code."""
    s, W = SHAPE, layout.workers
    h, inter, q, kv = s.hidden_size, s.intermediate_size, s.num_attention_heads * s.head_dim, \
        s.num_key_value_heads * s.head_dim
    block = 2 * h + h * q + 2 * h * kv + q * h + 3 * h * inter  # 2 norms, q, k, v, o, gate/up/down
    owner = rank == 0
    blocks = layout.ranges[rank][1] - layout.ranges[rank][0]
    params = blocks * block + (s.vocab_size * h + h if owner else 0)
    per_param = 4 + 4 + 8 + mm["compute_copy_bytes"] + mm["reference_bytes"]
    live = min(n_mb, 2 * W if owner else 2 * (W - rank))  # the tick schedule's in-flight microbatches
    tokens = batch * seq
    act_tok = blocks * (4 * h + 2 * q + 2 * kv + mm["act_mlp_coeff"] * inter) * mm["activation_bytes"]
    act_tok += (2 * h * mm["activation_bytes"]) if owner else 0  # final-norm input and output
    weights_per_mb = blocks * (block - 2 * h) * mm["saved_weight_bytes"]  # the compiled blocks' bf16 weight casts
    head = min(1024, tokens) * s.vocab_size * 4 * 4 if owner else 0  # chunked logits and loss buffers
    lookup = n_mb * tokens * h * 4 if owner else 0  # deferred embedding-lookup gradients, FP32
    return params * per_param + math.ceil(live * (tokens * act_tok + weights_per_mb)) + head + lookup + mm["reserve_bytes"]


@pytest.mark.parametrize("workers", [2, 3])
def test_estimate_counts_in_flight_microbatches_head_lookup_grads_and_reserve(workers):
    layout = Layout(((0, 10), (10, 24))) if workers == 2 else Layout(((0, 7), (7, 15), (15, 24)))
    for rank in range(workers):
        est = worker_estimate(SHAPE, layout, rank, (4, 512), 8, GPU)
        assert est.total == _expected(layout, rank, 4, 512, 8, GPU), rank
        assert est.components["reserve"] == GPU["reserve_bytes"]
        # more than the old admission's single microbatch, unless the schedule holds only one
        from kit.planner import MemoryModel, MicrobatchShape, estimate_worker

        old = estimate_worker(SHAPE, layout.blocks_of(rank), rank == 0, MicrobatchShape(4, 512, 1),
                              MemoryModel(**{**GPU, "reserve_bytes": 0}))
        assert est.total - old.total >= GPU["reserve_bytes"] + (est.components["activations"] // 2)


def _session(tmp_path, rank, world, free, monkeypatch, microbatches=8):
    seed = write_hf_llama(tmp_path / "seed")
    monkeypatch.setattr(admission_mod, "free_memory_bytes", lambda device: free)

    def no_alloc(*a, **k):
        raise AssertionError("a stage was built before admission")

    monkeypatch.setattr(worker_mod, "build_stage", no_alloc)
    layout = even_layout(3, world)
    return Session(Group(rank, world, torch.device("cpu")), str(tmp_path / "home"), layout, start_from_seed(str(seed)),
                   EngineConfig(2, 1.0), {"default": GroupConfig(1e-3, 0.9, 0.95, 1e-8, 0.0)},
                   admission={"microbatch": (2, 64), "microbatches": microbatches,
                              "memory_model": {"reserve_bytes": 1 << 20}})


def test_an_over_full_worker_is_refused_before_allocation_naming_rank_estimate_and_free(tmp_path, monkeypatch):
    from kit.model.config import load_config

    seed = write_hf_llama(tmp_path / "probe")
    shape = load_config(seed)
    est = worker_estimate(shape, even_layout(3, 3), 1, (2, 64), 8, {"reserve_bytes": 1 << 20})
    with pytest.raises(AdmissionError) as info:
        _session(tmp_path, 1, 3, est.total - 1, monkeypatch)
    msg = str(info.value)
    assert "rank 1 (cpu)" in msg and f"({est.total} bytes)" in msg and f"({est.total - 1} bytes) actually free" in msg
    # exactly enough passes admission and goes on to build the stage (which the test forbids)
    with pytest.raises(AssertionError, match="built before admission"):
        _session(tmp_path, 1, 3, est.total, monkeypatch)


def test_training_uses_the_prepared_planner_layout(tmp_path):
    write_canonical_json(tmp_path / OWNERSHIP_FILE, {"layouts": [
        {"workers": 2, "num_hidden_layers": 4, "blocks": [[0, 1], [1, 4]], "embedding_owner": 0},
        {"workers": 3, "num_hidden_layers": 6, "blocks": [[0, 1], [1, 3], [3, 6]], "embedding_owner": 0}]})
    assert training_layout(tmp_path, 4, 2) == Layout(((0, 1), (1, 4)))
    assert training_layout(tmp_path, 6, 3) == Layout(((0, 1), (1, 3), (3, 6)))
    assert planned_layout(tmp_path, 4, 3) is None
    assert training_layout(tmp_path, 4, 3) == even_layout(4, 3)  # a count the contract never planned
