"""Compact Llama math with exactly the Hugging Face parameter names.

One readable file in the nanoGPT habit. A `LlamaCausalLM` may hold any subset of the decoder
blocks and optionally the embedding + final norm + output head, so that a worker builds only
what it owns; which subset is a decision made outside (kit/model/shard.py), never here. With all
blocks and the embedding it is the full model, checked against `transformers.LlamaForCausalLM`
(tests/test_llama_oracle.py).

Names: `model.embed_tokens.weight`, `model.layers.{i}.input_layernorm.weight`,
`model.layers.{i}.self_attn.{q,k,v,o}_proj.weight`, `model.layers.{i}.post_attention_layernorm.weight`,
`model.layers.{i}.mlp.{gate,up,down}_proj.weight`, `model.norm.weight`, `lm_head.weight` (untied only).
Plain math only: speed choices (weight cache, fused elementwise, compile) are kit/engine/fast_paths.py's.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from kit.model.config import LlamaShape, RopeSpec


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in FP32 as Hugging Face does, then cast back before the weight multiply.
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def _building_on_meta() -> bool:
    """Whether modules are being built under `torch.device("meta")` (names and shapes only, as
    kit.model.shard.canonical_names and the migration's planning do). There a value-computing op such as the
    embedding's N(0, 1) fill or the rotary table's division runs torch's Python reference kernel, whose first
    call imports torch._dynamo: over a second of every worker's start. A meta tensor holds no values and draws
    from no generator, so building those two as empty tensors of the same shape changes nothing."""
    return torch.empty(0).device.type == "meta"


def rope_inv_freq(rope: RopeSpec, head_dim: int) -> torch.Tensor:
    """Inverse frequencies for the supported `rope_type`s (default, linear, llama3)."""
    inv_freq = 1.0 / (rope.theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    if rope.rope_type == "linear":
        inv_freq = inv_freq / rope.factor
    elif rope.rope_type == "llama3":
        # Llama 3.1 frequency-dependent scaling: long wavelengths are divided by `factor`,
        # short ones kept, and the band between interpolated smoothly.
        low_wavelen = rope.original_max_position_embeddings / rope.low_freq_factor
        high_wavelen = rope.original_max_position_embeddings / rope.high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / rope.factor, inv_freq)
        smooth = (rope.original_max_position_embeddings / wavelen - rope.low_freq_factor) / (
            rope.high_freq_factor - rope.low_freq_factor
        )
        smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled
        is_medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        inv_freq = torch.where(is_medium, smoothed, scaled)
    return inv_freq


class Rotary(nn.Module):
    """cos/sin tables for positions 0..T-1, computed in FP32 (a non-persistent buffer, not a parameter)."""

    inv_freq: torch.Tensor  # the buffer, declared for the type checker (nn.Module's __getattr__ is untyped)

    def __init__(self, shape: LlamaShape):
        super().__init__()
        inv_freq = (torch.empty(len(range(0, shape.head_dim, 2))) if _building_on_meta()
                    else rope_inv_freq(shape.rope, shape.head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, seq_len: int, device: torch.device, dtype: torch.dtype):
        pos = torch.arange(seq_len, device=device, dtype=torch.float32)
        freqs = torch.outer(pos, self.inv_freq.to(device=device, dtype=torch.float32))  # (T, hd/2)
        emb = torch.cat((freqs, freqs), dim=-1)  # (T, hd)
        return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _sdpa_supports_gqa() -> bool:
    try:
        q = torch.zeros(1, 2, 1, 2)
        kv = torch.zeros(1, 1, 1, 2)
        F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
        return True
    except TypeError:
        return False


SDPA_GQA = _sdpa_supports_gqa()


class Attention(nn.Module):
    def __init__(self, shape: LlamaShape):
        super().__init__()
        h, nh, nkv, hd = shape.hidden_size, shape.num_attention_heads, shape.num_key_value_heads, shape.head_dim
        self.n_heads, self.n_kv, self.head_dim = nh, nkv, hd
        self.q_proj = nn.Linear(h, nh * hd, bias=shape.attention_bias)
        self.k_proj = nn.Linear(h, nkv * hd, bias=shape.attention_bias)
        self.v_proj = nn.Linear(h, nkv * hd, bias=shape.attention_bias)
        self.o_proj = nn.Linear(nh * hd, h, bias=shape.attention_bias)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if self.n_kv != self.n_heads:
            if SDPA_GQA:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            else:  # older torch: repeat the key/value heads explicitly
                rep = self.n_heads // self.n_kv
                k = k.repeat_interleave(rep, dim=1)
                v = v.repeat_interleave(rep, dim=1)
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)  # (B, T, nh*hd)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, shape: LlamaShape):
        super().__init__()
        h, i = shape.hidden_size, shape.intermediate_size
        self.gate_proj = nn.Linear(h, i, bias=shape.mlp_bias)
        self.up_proj = nn.Linear(h, i, bias=shape.mlp_bias)
        self.down_proj = nn.Linear(i, h, bias=shape.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = self.gate_proj(x)
        up = self.up_proj(x)
        return self.down_proj(F.silu(gate) * up)  # SwiGLU


class Block(nn.Module):
    def __init__(self, shape: LlamaShape):
        super().__init__()
        self.input_layernorm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)
        self.self_attn = Attention(shape)
        self.post_attention_layernorm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)
        self.mlp = MLP(shape)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class _Trunk(nn.Module):
    """Holds `embed_tokens`, `layers` and `norm` so that names read `model.<...>` as in Hugging Face."""

    # declared for the type checker (nn.Module's __getattr__ says only "Tensor | Module"); a stage without the
    # embedding has no embed_tokens and norm
    embed_tokens: nn.Embedding
    layers: nn.ModuleDict
    norm: RMSNorm


class LlamaCausalLM(nn.Module):
    """A Llama causal LM holding `layer_ids` blocks and, when `with_embedding`, the embedding, final
    norm and output head (tied to the embedding when the config says so)."""

    def __init__(self, shape: LlamaShape, layer_ids: Iterable[int] | None = None, with_embedding: bool = True):
        super().__init__()
        self.shape = shape
        ids = list(range(shape.num_hidden_layers)) if layer_ids is None else sorted(layer_ids)
        if any(not 0 <= i < shape.num_hidden_layers for i in ids) or len(set(ids)) != len(ids):
            raise ValueError(f"layer ids {ids} must be distinct and within 0..{shape.num_hidden_layers - 1}")
        self.layer_ids = ids
        self.with_embedding = with_embedding
        self.model = _Trunk()
        if with_embedding:
            # on the meta device the N(0, 1) fill is skipped (_building_on_meta says why)
            self.model.embed_tokens = nn.Embedding(
                shape.vocab_size, shape.hidden_size,
                _weight=torch.empty(shape.vocab_size, shape.hidden_size) if _building_on_meta() else None)
        # ModuleDict keyed by the global block index keeps Hugging Face names for any subset.
        self.model.layers = nn.ModuleDict({str(i): Block(shape) for i in ids})
        if with_embedding:
            self.model.norm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)
            if not shape.tie_word_embeddings:
                self.lm_head = nn.Linear(shape.hidden_size, shape.vocab_size, bias=False)
        self.rotary = Rotary(shape)

    # --- pieces used by the stage schedule -------------------------------------------------
    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(input_ids)  # (B, T, C)

    def rope_tables(self, seq_len: int, device: torch.device, dtype: torch.dtype):
        return self.rotary(seq_len, device, dtype)

    def run_blocks(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """The owned blocks in order."""
        for i in self.layer_ids:
            h = self.model.layers[str(i)](h, cos, sin)
        return h

    def final_norm(self, h: torch.Tensor) -> torch.Tensor:
        return self.model.norm(h)

    def head_weight(self) -> torch.Tensor:
        return self.model.embed_tokens.weight if self.shape.tie_word_embeddings else self.lm_head.weight

    # --- the full model ---------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, V); only for a model holding every block and the embedding."""
        if not self.with_embedding or len(self.layer_ids) != self.shape.num_hidden_layers:
            raise ValueError("forward() needs the full model; stages use embed/run_blocks/final_norm")
        h = self.embed(input_ids)
        cos, sin = self.rope_tables(input_ids.shape[1], h.device, h.dtype)
        h = self.final_norm(self.run_blocks(h, cos, sin))
        return F.linear(h, self.head_weight())


def init_weights(model: LlamaCausalLM, seed: int, std: float = 0.02) -> None:
    """Deterministic initialisation by parameter name, so any subset of blocks gets the same values
    it would get inside the full model (each tensor draws from a generator seeded by its name)."""
    for name, p in model.named_parameters():
        g = torch.Generator().manual_seed(
            (seed * 1_000_003 + int(hashlib.sha256(name.encode()).hexdigest()[:12], 16)) % (2**63)
        )
        with torch.no_grad():
            if name.endswith("layernorm.weight") or name == "model.norm.weight":
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            else:
                p.copy_(torch.randn(p.shape, generator=g) * std)
