"""Greedy decoding with the kit's own Llama (no `transformers.generate` on any kit path).

Used by the seed builder for its sample replies and by evaluation for greedy task answers, so
the answers the kit scores come from the same model code the kit trains.

No KV cache: every step runs the full forward over the prompt and the tokens generated so far.
At the tiny sizes the kit decodes on CPU (a few million parameters, prompts of tens of tokens,
replies of tens of tokens) that costs milliseconds per step and keeps this module a dozen lines
of obviously correct code; a cache belongs here only once GPU-scale evaluation needs it.

Ties in the argmax go to the lowest token id (torch.argmax's documented choice), so greedy
decoding is a deterministic function of the weights and the prompt.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from kit.model.llama import LlamaCausalLM


def _eos_set(eos_id: int | Iterable[int] | None) -> frozenset[int]:
    if eos_id is None:
        return frozenset()
    if isinstance(eos_id, int):
        return frozenset((eos_id,))
    return frozenset(int(i) for i in eos_id)


@torch.no_grad()
def greedy_generate(
    model: LlamaCausalLM,
    prompt_ids: Sequence[int],
    max_new_tokens: int,
    eos_id: int | Iterable[int] | None,
) -> list[int]:
    """The greedily generated token ids after `prompt_ids` (the prompt itself is not returned).

    Stops after the first token in `eos_id` (that token is included, so a caller sees whether the
    reply ended at a turn boundary), after `max_new_tokens` tokens, or when the context reaches
    the model's `max_position_embeddings`, whichever comes first. `eos_id` may be one id, several
    (configs may list several end tokens) or None. The model must hold every block and the
    embedding; it is run in eval mode and its previous mode is restored.
    """
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens={max_new_tokens!r}: expected a non-negative int")
    ids = [int(t) for t in prompt_ids]
    if not ids:
        raise ValueError("greedy_generate: the prompt is empty; expected at least one token id")
    shape = model.shape
    bad = [t for t in ids if not 0 <= t < shape.vocab_size]
    if bad:
        raise ValueError(f"greedy_generate: prompt token id {bad[0]} outside the vocabulary (size {shape.vocab_size})")
    if len(ids) > shape.max_position_embeddings:
        raise ValueError(
            f"greedy_generate: prompt has {len(ids)} tokens; the model's max_position_embeddings is "
            f"{shape.max_position_embeddings}"
        )
    stop = _eos_set(eos_id)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        generated: list[int] = []
        while len(generated) < max_new_tokens and len(ids) < shape.max_position_embeddings:
            context = torch.tensor([ids], dtype=torch.int64, device=device)  # (1, T)
            logits = model(context)[0, -1]  # (V,) next-token logits at the last position
            token = int(torch.argmax(logits))
            ids.append(token)
            generated.append(token)
            if token in stop:
                break
        return generated
    finally:
        model.train(was_training)
