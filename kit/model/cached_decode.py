"""Greedy decoding with a key/value cache: the GPU evaluation's decoder.

`kit.model.generate.greedy_batch` runs the whole sequence again for every new token. On a CPU at the
tiny scale that is cheap, and its bits are what the committed CPU evidence pins, so CPU evaluation keeps
it. At the 1.7B shape it costs a full forward of (batch x length) tokens per generated token; this
decoder runs the prompt once (prefill) and then one position per token over cached keys and values.

Prompts are grouped by exact length, so every row of a batch sits at the same position: no padding, no
attention mask, one RoPE position per step. The arithmetic per position is the model's own (same
modules, same weights, same RoPE tables, SDPA), so the replies equal `greedy_batch`'s up to the
rounding of attention over a cache instead of a full sequence (tests/test_cached_decode.py checks
equality in float64).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import torch
import torch.nn.functional as F

from kit.model.generate import _eos_set
from kit.model.llama import SDPA_GQA, Attention, LlamaCausalLM, rotate_half


def _attend(attn: Attention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    if attn.n_kv != attn.n_heads:
        if SDPA_GQA:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        rep = attn.n_heads // attn.n_kv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _block_step(block, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: list, start: int) -> torch.Tensor:
    """One block over positions [start, start + T) of x (B, T, C); appends this block's keys/values to `cache`."""
    attn = block.self_attn
    B, T, _ = x.shape
    h = block.input_layernorm(x)
    q = attn.q_proj(h).view(B, T, attn.n_heads, attn.head_dim).transpose(1, 2)  # (B, nh, T, hd)
    k = attn.k_proj(h).view(B, T, attn.n_kv, attn.head_dim).transpose(1, 2)  # (B, nkv, T, hd)
    v = attn.v_proj(h).view(B, T, attn.n_kv, attn.head_dim).transpose(1, 2)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    keys, values = cache
    keys[:, :, start:start + T] = k
    values[:, :, start:start + T] = v
    # prefill: causal over the prompt; a decode step: its one query sees every cached position
    y = _attend(attn, q, keys[:, :, :start + T], values[:, :, :start + T], causal=start == 0)
    x = x + attn.o_proj(y.transpose(1, 2).reshape(B, T, attn.n_heads * attn.head_dim))
    return x + block.mlp(block.post_attention_layernorm(x))


@torch.no_grad()
def _decode_equal_length(model: LlamaCausalLM, prompts: torch.Tensor, max_new_tokens: int,
                         stop: frozenset[int]) -> list[list[int]]:
    """Greedy replies for prompts of one length (B, T0)."""
    B, T0 = prompts.shape
    shape = model.shape
    total = min(T0 + max_new_tokens, shape.max_position_embeddings)
    steps = total - T0
    out: list[list[int]] = [[] for _ in range(B)]
    if steps <= 0:
        return out
    dev = prompts.device
    h = model.embed(prompts)
    cos_all, sin_all = model.rope_tables(total, dev, h.dtype)
    caches = [[torch.empty((B, shape.num_key_value_heads, total, shape.head_dim), dtype=h.dtype, device=dev)
               for _ in range(2)] for _ in model.layer_ids]
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    pos, x = 0, h
    for _ in range(steps):
        T = x.shape[1]
        cos, sin = cos_all[pos:pos + T], sin_all[pos:pos + T]
        for cache, i in zip(caches, model.layer_ids):
            x = _block_step(model.model.layers[str(i)], x, cos, sin, cache, pos)
        last = model.final_norm(x[:, -1])  # (B, C): only the last position's logits are needed
        nxt = F.linear(last, model.head_weight()).argmax(-1)  # (B,)
        for b, t in enumerate(nxt.tolist()):
            if not done[b]:
                out[b].append(t)
        done |= torch.tensor([t in stop for t in nxt.tolist()], device=dev)
        if bool(done.all()):
            break
        pos += T
        x = model.embed(nxt[:, None])
    return out


@torch.no_grad()
def greedy_cached(model: LlamaCausalLM, prompts: list[list[int]], max_new_tokens: int,
                  eos_id: int | Iterable[int] | None, batch_size: int = 128) -> list[list[int]]:
    """Greedy replies, in the order of `prompts`, as `greedy_batch` gives them (eos included when reached)."""
    stop = _eos_set(eos_id)
    device = next(model.parameters()).device
    by_len: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        if not p:
            raise ValueError(f"greedy_cached: prompt {i} is empty; expected at least one token id")
        by_len.setdefault(len(p), []).append(i)
    out: list[list[int] | None] = [None] * len(prompts)
    was_training = model.training
    model.eval()
    try:
        for length in sorted(by_len):
            idx = by_len[length]
            for a in range(0, len(idx), batch_size):
                rows = idx[a:a + batch_size]
                ids = torch.tensor([prompts[i] for i in rows], dtype=torch.long, device=device)
                for i, reply in zip(rows, _decode_equal_length(model, ids, max_new_tokens, stop)):
                    out[i] = reply
    finally:
        model.train(was_training)
    return cast(list[list[int]], out)  # every prompt is in one length group, so every row was filled
