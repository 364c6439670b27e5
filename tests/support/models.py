"""Tiny Hugging Face Llama directories written by transformers itself, and the repository's paths."""

from __future__ import annotations

from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
PUBLIC_SOURCE = REPO / "data" / "alpaca_5000.json"  # in the repository (data/SOURCE.md)


def write_hf_llama(out: Path, *, vocab=64, hidden=32, layers=3, heads=4, kv_heads=2, inter=48, tied=True,
                   seed=0, rope_scaling=None) -> Path:
    """A random LlamaForCausalLM saved with save_pretrained (safetensors); transformers is the oracle."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=128,
                      tie_word_embeddings=tied, rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=rope_scaling)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # non-trivial norms so that a missed norm weight shows up
        for n, p in model.named_parameters():
            if "norm" in n:
                p.uniform_(0.5, 1.5)
    model.save_pretrained(out, safe_serialization=True)
    return out
