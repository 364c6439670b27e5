"""FLOP accounting (kit/flops.py) against counts derived by hand, and the benchmark rows that report MFU
from it (bench/update_throughput.py's throughput_row)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kit.flops import attention_flops_forward, executed_flops_per_token, matmul_params
from kit.model.config import LlamaShape, RopeSpec, smollm2_17b

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("update_throughput", REPO / "bench" / "update_throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shape(tied=True) -> LlamaShape:
    # vocab V=10, hidden H=4, intermediate I=6, L=2 layers, 2 query heads and 1 KV head of head_dim 2
    return LlamaShape(vocab_size=10, hidden_size=4, intermediate_size=6, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=2, rms_norm_eps=1e-5,
                      max_position_embeddings=64, tie_word_embeddings=tied, rope=RopeSpec(theta=10000.0))


def test_executed_flops_of_a_tiny_shape_by_hand():
    # Matmul weights per layer: q 4x(2*2)=16, k 4x(1*2)=8, v 8, o 16, gate/up/down 4x6=24 each (72): 120.
    # Two layers 240, plus the LM head 10x4=40 (the tied embedding matrix; its lookup does no FLOPs): 280.
    assert matmul_params(shape()) == 280
    assert matmul_params(shape(tied=False)) == 280  # the untied embedding is a lookup only
    # Attention, forward, per token and layer at seq 8: QK^T 2*8*(2 heads*2) = 64 and AV 64 over the full
    # square, 128; two layers 256; causal executes half: 128.
    assert attention_flops_forward(shape(), 8, causal=False) == 256
    assert attention_flops_forward(shape(), 8) == 128
    # Student forward + backward = 3 x forward: 6*280 + 3*128 = 1680 + 384 = 2064.
    # Teacher forward: 2*280 + 128 = 688, counted only on the tokens that ran it.
    assert executed_flops_per_token(shape(), 8, 0.0) == 2064
    assert executed_flops_per_token(shape(), 8, 1.0) == 2064 + 688
    assert executed_flops_per_token(shape(), 8, 0.5) == 2064 + 344
    assert executed_flops_per_token(shape(), 8, 1.0, causal=False) == 6 * 280 + 3 * 256 + 2 * 280 + 256


def test_matmul_params_of_the_17b_shape_leave_out_only_the_norms():
    s = smollm2_17b()
    norms = (2 * s.num_hidden_layers + 1) * s.hidden_size
    assert matmul_params(s) == s.param_count() - norms
    assert s.param_count() == 1_711_376_384  # SmolLM2-1.7B's published parameter count (tied embeddings)


def test_rows_report_mfu_over_the_datasheet_and_the_measured_ceiling(bench):
    import torch

    row = bench.throughput_row("x", shape(), micro=2, seq=8, step_s=1e-9, teacher_fraction=1.0,
                               device=torch.device("cpu"), ceiling=500e12)
    rate = (2064 + 688) * 16 / 1e-9
    assert row["mfu_executed"] == round(rate / 989e12, 4)
    assert row["mfu_executed_vs_matmul_ceiling"] == round(rate / 500e12, 4)
    assert bench.throughput_row("x", shape(), 2, 8, 1.0, 1.0, torch.device("cpu"))[
        "mfu_executed_vs_matmul_ceiling"] is None
