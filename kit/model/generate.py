"""Greedy decoding with the kit's own Llama (no `transformers.generate` on any kit path).

One decoder (`greedy_batch`; `greedy_generate` is its one-prompt form, with checks), used by the seed
builder for sample replies and by evaluation for task answers, so the answers the kit scores come
from the model code the kit trains. No KV cache: at the tiny CPU sizes a full forward per step costs
milliseconds and keeps this obviously correct. Ties in the argmax go to the lowest token id, so
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
    was_training = model.training
    model.eval()
    try:
        return greedy_batch(model, [ids], max_new_tokens, eos_id)[0]
    finally:
        model.train(was_training)


@torch.no_grad()
def greedy_batch(model: LlamaCausalLM, prompts: list[list[int]], max_new_tokens: int,
                 eos_id: int | Iterable[int] | None) -> list[list[int]]:
    """Greedy replies for many prompts at once, one forward per generated token for the whole batch.

    Rows are right-padded: with causal attention a position never sees the padding after it, so row
    i's next token is read at its own last position and written into its own next slot; the result
    equals decoding each prompt alone (tests/test_evaluate.py checks it). This is the kit's one greedy
    decoder: `greedy_generate` is its one-prompt form.
    """
    stop = _eos_set(eos_id)
    device = next(model.parameters()).device
    lens = [len(p) for p in prompts]
    T = min(max(lens) + max_new_tokens, model.shape.max_position_embeddings)
    buf = torch.zeros((len(prompts), T), dtype=torch.long, device=device)
    for i, p in enumerate(prompts):
        buf[i, :len(p)] = torch.tensor(p, dtype=torch.long)
    out: list[list[int]] = [[] for _ in prompts]
    done = [False] * len(prompts)
    for _ in range(max_new_tokens):
        live = [i for i in range(len(prompts)) if not done[i] and lens[i] < T]
        if not live:
            break
        width = max(lens[i] for i in live)
        logits = model(buf[live, :width])  # (B, width, V)
        rows = torch.arange(len(live), device=device)
        nxt = logits[rows, torch.tensor([lens[i] - 1 for i in live], device=device)].argmax(-1).tolist()
        for j, i in enumerate(live):
            out[i].append(nxt[j])
            buf[i, lens[i]] = nxt[j]
            lens[i] += 1
            if nxt[j] in stop:
                done[i] = True
    return out
