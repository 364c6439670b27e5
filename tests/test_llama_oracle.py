"""The kit's Llama math equals transformers.LlamaForCausalLM with the same weights (float32)."""

import json

import pytest
import torch
from support.models import write_hf_llama
from transformers import LlamaForCausalLM

from kit.model.config import ConfigError, load_config
from kit.model.llama import LlamaCausalLM
from kit.model.shard import load_owned


@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_logits_match_transformers(tmp_path, layers, tied, kv_heads):
    d = write_hf_llama(tmp_path / "m", layers=layers, tied=tied, kv_heads=kv_heads, seed=layers)
    hf = LlamaForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
    shape = load_config(d)
    kit = LlamaCausalLM(shape)
    read = load_owned(kit, d)  # the production loader
    assert read == sum(p.numel() * 4 for p in kit.parameters())
    ids = torch.randint(0, shape.vocab_size, (3, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = hf(input_ids=ids).logits
        out = kit(ids)
    assert out.shape == ref.shape == (3, 17, shape.vocab_size)
    assert (out - ref).abs().max().item() <= 1e-5


@pytest.mark.parametrize("scaling", [
    {"rope_type": "linear", "factor": 2.0},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 16},
])
def test_rope_scaling_variants_match(tmp_path, scaling):
    d = write_hf_llama(tmp_path / "m", layers=2, rope_scaling=scaling)
    hf = LlamaForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
    kit = LlamaCausalLM(load_config(d))
    load_owned(kit, d)
    ids = torch.randint(0, 64, (2, 40), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (kit(ids) - hf(input_ids=ids).logits).abs().max().item() <= 1e-5


def test_parameter_names_are_hugging_face_names(tiny_llama):
    hf = LlamaForCausalLM.from_pretrained(tiny_llama)
    kit = LlamaCausalLM(load_config(tiny_llama))
    hf_names = {n for n, _ in hf.named_parameters()}
    assert {n for n, _ in kit.named_parameters()} == hf_names
    assert "model.layers.2.self_attn.q_proj.weight" in hf_names


def _write_cfg(tmp_path, **overrides):
    base = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 32,
            "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4}
    base.update(overrides)
    base = {k: v for k, v in base.items() if v is not ...}
    (tmp_path / "config.json").write_text(json.dumps(base))
    return tmp_path / "config.json"


@pytest.mark.parametrize("overrides, match", [
    ({"model_type": "gpt2"}, r"config.json: field 'model_type' = 'gpt2'; expected 'llama'"),
    ({"architectures": ["MistralForCausalLM"]}, r"field 'architectures'"),
    ({"hidden_size": ...}, r"field 'hidden_size' is missing; expected int"),
    ({"hidden_size": "32"}, r"field 'hidden_size' = '32'; expected int"),
    ({"num_key_value_heads": 3}, r"field 'num_key_value_heads' = 3; expected a divisor"),
    ({"hidden_size": 30}, r"not divisible"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, r"'rope_scaling.rope_type' = 'yarn' is not supported"),
    ({"hidden_act": "gelu"}, r"field 'hidden_act' = 'gelu'; expected 'silu'"),
    ({"rope_scaling": {"rope_type": "linear"}}, r"field 'factor' is missing"),
])
def test_bad_configs_are_refused_naming_file_and_field(tmp_path, overrides, match):
    path = _write_cfg(tmp_path, **overrides)
    with pytest.raises(ConfigError, match=match) as e:
        load_config(path)
    assert str(path) in str(e.value)


def test_malformed_json_config_is_refused(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "llama", "model_type": "llama"}')
    with pytest.raises(ValueError, match="duplicate key 'model_type'"):
        load_config(tmp_path)
