"""FLOP accounting for executed MFU: what a GPU executes per token of one training update.

The convention is the usual MFU one: matrix products only (projections, the LM head, attention's two
products), elementwise work (norms, SwiGLU, softmax, loss, optimizer) not counted; a causal attention
kernel skips the masked half of the square, so attention counts half of it. Pure arithmetic over a
LlamaShape, used by the seed build's record and by bench/update_throughput.py.
"""

from __future__ import annotations

from kit.model.config import LlamaShape

H200_BF16_PEAK_FLOPS = 989e12  # dense bf16, the H100/H200 datasheet figure that executed MFU is reported over


def matmul_params(shape: LlamaShape) -> int:
    """Weights that take part in a matmul for every token: the blocks' projections and the LM head
    (vocab x hidden; with tied embeddings it is the embedding matrix, whose lookup does no FLOPs).
    Norm weights (elementwise) and the embedding lookup are not counted."""
    H, I, d = shape.hidden_size, shape.intermediate_size, shape.head_dim
    q = o = H * shape.num_attention_heads * d
    kv = 2 * H * shape.num_key_value_heads * d
    mlp = 3 * H * I
    return shape.num_hidden_layers * (q + o + kv + mlp) + shape.vocab_size * H


def attention_flops_forward(shape: LlamaShape, seq: int, causal: bool = True) -> float:
    """Per token, all layers, forward: QK^T and AV are 2 * seq * heads * head_dim each over the full
    square; a causal kernel skips the masked half, so the executed count is half of that."""
    full = 4 * seq * shape.num_attention_heads * shape.head_dim * shape.num_hidden_layers
    return full / 2 if causal else full


def executed_flops_per_token(shape: LlamaShape, seq: int, teacher_fraction: float = 0.0, causal: bool = True) -> float:
    """The student's forward + backward (3x forward: 6 * matmul params + 3x attention) and a frozen
    teacher's forward (2 * matmul params + attention) on the fraction of tokens that ran it."""
    n = matmul_params(shape)
    attn = attention_flops_forward(shape, seq, causal)
    return 6 * n + 3 * attn + teacher_fraction * (2 * n + attn)
