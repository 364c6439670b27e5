"""What every kit process and worker pays before its first step: building the model on the meta device (names and
shapes) must not import torch._dynamo, and a kit-built seed's tokenizer loads without AutoTokenizer's config
resolution yet is the tokenizer AutoTokenizer gives (kit/model/llama.py, kit/data/chat.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kit.model.config import LlamaShape, RopeSpec
from kit.model.llama import LlamaCausalLM

SHAPES = {
    "tied": LlamaShape(vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=3, num_attention_heads=2,
                       num_key_value_heads=1, head_dim=8, rms_norm_eps=1e-5, max_position_embeddings=64,
                       tie_word_embeddings=True, rope=RopeSpec(), bos_token_id=1, eos_token_id=2, pad_token_id=0),
    "untied-llama3-rope": LlamaShape(
        vocab_size=40, hidden_size=24, intermediate_size=24, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, head_dim=12, rms_norm_eps=1e-5, max_position_embeddings=64, tie_word_embeddings=False,
        rope=RopeSpec(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                      original_max_position_embeddings=32), bos_token_id=1, eos_token_id=2, pad_token_id=0),
}


def _tensors(model: LlamaCausalLM) -> list[tuple[str, tuple[int, ...], torch.dtype, bool]]:
    return [(n, tuple(t.shape), t.dtype, getattr(t, "requires_grad", False))
            for n, t in [*model.named_parameters(), *model.named_buffers()]]


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("layers, with_embedding", [(None, True), ([1], False), ([0], True)])
def test_a_meta_build_has_the_names_shapes_and_dtypes_of_a_real_one(name, layers, with_embedding):
    shape = SHAPES[name]
    real = LlamaCausalLM(shape, layers, with_embedding=with_embedding)
    with torch.device("meta"):
        meta = LlamaCausalLM(shape, layers, with_embedding=with_embedding)
    assert _tensors(meta) == _tensors(real)
    assert all(t.device.type == "meta" for t in [*meta.parameters(), *meta.buffers()])


def test_a_real_build_draws_from_the_generator_as_before():
    """Only the meta build skips the fills: on CPU the embedding is still N(0, 1) from the global generator."""
    shape = SHAPES["tied"]
    torch.manual_seed(3)
    model = LlamaCausalLM(shape)
    torch.manual_seed(3)
    expected = torch.nn.Embedding(shape.vocab_size, shape.hidden_size).weight
    assert torch.equal(model.model.embed_tokens.weight, expected)


def test_a_meta_build_in_a_fresh_process_does_not_import_dynamo():
    code = ("import sys, torch\nfrom kit.model.shard import canonical_names\nfrom kit.model.config import LlamaShape, RopeSpec\n"
            "names = canonical_names(LlamaShape(vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=2, "
            "num_attention_heads=2, num_key_value_heads=1, head_dim=8, rms_norm_eps=1e-5, max_position_embeddings=64, "
            "tie_word_embeddings=True, rope=RopeSpec(), bos_token_id=1, eos_token_id=2, pad_token_id=0))\n"
            "print(len(names), 'torch._dynamo' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == ["20", "False"]  # embedding, final norm, 2 blocks x (4 attention, 3 MLP, 2 norms)


def test_a_kit_seed_tokenizer_is_the_one_autotokenizer_loads(tmp_path):
    from transformers import AutoTokenizer

    from kit.data.chat import _tokenizer_class, load_tokenizer
    from kit.data.tokenizer_build import build_tokenizer

    seed = tmp_path / "seed"
    build_tokenizer(["hello there 12 + 3 = 15", "sort: 4 2 9", "a list in Python"] * 20, 300, seed,
                    model_max_length=128)
    assert json.loads((seed / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    ours, auto = load_tokenizer(seed), AutoTokenizer.from_pretrained(seed, local_files_only=True)
    assert type(ours) is type(auto) and ours.backend_tokenizer.to_str() == auto.backend_tokenizer.to_str()
    assert ours.init_kwargs == auto.init_kwargs and ours.chat_template == auto.chat_template
    chat = [{"role": "user", "content": "total of 12 + 3?"}, {"role": "assistant", "content": "15"}]
    assert ours.apply_chat_template(chat) == auto.apply_chat_template(chat)
    # a seed naming another class goes through AutoTokenizer
    other = tmp_path / "other"
    other.mkdir()
    (other / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "LlamaTokenizerFast"}))
    assert _tokenizer_class(other) is AutoTokenizer and _tokenizer_class(Path(tmp_path / "none")) is AutoTokenizer
