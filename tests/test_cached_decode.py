"""The GPU evaluation's cached greedy decoder gives the full-sequence decoder's replies.

Oracle: kit.model.generate.greedy_batch (itself checked against one-prompt decoding in
tests/test_evaluate.py). Both run in float64 so that no argmax sits within rounding of a tie; prompts
of several lengths (several batches), a GQA model, an end token reached early and the context limit."""

import pytest
import torch

from kit.model.cached_decode import greedy_cached
from kit.model.config import LlamaShape, RopeSpec
from kit.model.generate import greedy_batch
from kit.model.llama import LlamaCausalLM, init_weights


def _model(kv_heads: int, max_pos: int = 64) -> LlamaCausalLM:
    shape = LlamaShape(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                       num_attention_heads=4, num_key_value_heads=kv_heads, head_dim=8, rms_norm_eps=1e-5,
                       max_position_embeddings=max_pos, tie_word_embeddings=True, rope=RopeSpec(theta=10000.0))
    m = LlamaCausalLM(shape)
    init_weights(m, seed=5, std=0.3)  # large weights: varied argmaxes, so the replies differ per prompt
    return m.double().eval()


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_cached_replies_equal_full_sequence_replies(kv_heads):
    model = _model(kv_heads)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, 61, (n,), generator=g).tolist() for n in (3, 9, 5, 1, 9, 3, 3, 12)]
    # an end token that some reply reaches early, so stopping per row is exercised
    full = greedy_batch(model, prompts, 10, eos_id=None)
    eos = full[0][2]
    expect = greedy_batch(model, prompts, 10, eos_id=eos)
    got = greedy_cached(model, prompts, 10, eos, batch_size=2)
    assert got == expect
    assert any(len(r) < 10 and r[-1] == eos for r in got)  # someone stopped at the end token
    assert len({tuple(r) for r in got}) > 2  # not one degenerate reply for all


def test_cached_decoder_stops_at_the_context_limit():
    model = _model(4, max_pos=16)
    prompts = [[5] * 12, [7] * 15, [9] * 16]
    assert greedy_cached(model, prompts, 8, None) == greedy_batch(model, prompts, 8, None)
    assert [len(r) for r in greedy_cached(model, prompts, 8, None)] == [4, 1, 0]


def test_empty_prompt_is_refused():
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        greedy_cached(_model(4), [[1], []], 4, None)
