"""Evaluation of a committed candidate: per-example assistant-token NLL and greedy task answers.

A model under evaluation is loaded whole into one process (`load_model`), from a commit of a
checkpoint store or from a seed directory: evaluation is forward-only, and a tiny or a 1.7B model
fits one device. Training never holds a full model; evaluation is a separate, read-only step.

`score_nll` returns, per conversation, the summed NLL (nats) of its assistant target tokens and
their count: exactly the tokens the training loss uses (kit/data/chat.py masks). `answer_tasks`
greedily decodes a reply to each task prompt with the kit's own decoder and checks it with the
task family's normalising checker. Both are deterministic functions of the weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from kit.data.chat import encode_conversation, generation_prompt_ids
from kit.data.conversations import Conversation
from kit.data.tasks import normalize_answer
from kit.model.generate import greedy_generate
from kit.model.llama import LlamaCausalLM
from kit.model.shard import load_owned
from kit.model_config import load_config


def load_model(home: str | None = None, root: str | None = None, seed_dir: str | None = None,
               device: str = "cpu") -> LlamaCausalLM:
    """The full model of a commit (`home` + `root`) or of a seed directory, FP32, eval mode."""
    if seed_dir is not None:
        model = LlamaCausalLM(load_config(seed_dir))
        load_owned(model, seed_dir)
        return model.to(device).eval()
    from kit.session import start_from_commit
    from kit.store.commits import load_param_states
    from kit.store.objects import ObjectStore

    start = start_from_commit(home, root)
    model = LlamaCausalLM(start.shape)
    states = load_param_states(ObjectStore(home), start.manifest["learned_state"]["params"])
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n not in states:
                raise ValueError(f"commit {root} in {home} has no parameter {n!r}")
            p.copy_(states[n]["param"])
    return model.to(device).eval()


@dataclass(frozen=True)
class _Answer:
    answer: str


@torch.no_grad()
def score_nll(model: LlamaCausalLM, tokenizer, conversations: list[Conversation], max_tokens: int,
              batch_size: int = 16) -> list[dict]:
    """[{id, nll_sum, tokens, family?}] for every conversation; over-long ones are refused (the
    evaluation set was prepared under the same cap, so none should be)."""
    encoded = []
    for c in conversations:
        e = encode_conversation(tokenizer, c, max_tokens, overflow="reject")
        if e is None:
            raise ValueError(f"evaluation record {c.id!r} exceeds max_tokens={max_tokens}")
        encoded.append((c, e))
    device = next(model.parameters()).device
    out = []
    for a in range(0, len(encoded), batch_size):
        chunk = encoded[a:a + batch_size]
        T = max(len(e.input_ids) for _, e in chunk)
        ids = torch.zeros((len(chunk), T), dtype=torch.long)
        mask = torch.zeros((len(chunk), T), dtype=torch.bool)
        for i, (_, e) in enumerate(chunk):
            ids[i, :len(e.input_ids)] = torch.tensor(e.input_ids)
            mask[i, :len(e.target_mask)] = torch.tensor(e.target_mask)
        mask[:, 0] = False
        logits = model(ids.to(device)).float()  # (B, T, V); causal, so right padding never leaks left
        logp = F.log_softmax(logits[:, :-1], dim=-1)
        nll = -logp.gather(2, ids[:, 1:].to(device)[..., None]).squeeze(-1)  # (B, T-1): predicts token t+1
        m = mask[:, 1:].to(device)
        for i, (c, _) in enumerate(chunk):
            row = {"id": c.id, "nll_sum": float(nll[i][m[i]].double().sum()), "tokens": int(m[i].sum())}
            if "family" in c.meta:
                row["family"] = c.meta["family"]
            out.append(row)
    return out


def answer_tasks(model: LlamaCausalLM, tokenizer, tasks: list[Conversation], max_new_tokens: int) -> list[dict]:
    """[{id, family, reply, correct}]: greedy reply to each task's user turn, checked against its answer."""
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tokenizer.get_vocab() else tokenizer.eos_token_id
    out = []
    for c in tasks:
        if "answer" not in c.meta or "family" not in c.meta:
            raise ValueError(f"task record {c.id!r} lacks 'answer' or 'family'")
        prompt = generation_prompt_ids(tokenizer, list(c.messages[:-1]))  # everything before the answer
        gen = greedy_generate(model, prompt, max_new_tokens, eos)
        if gen and gen[-1] == eos:
            gen = gen[:-1]
        reply = tokenizer.decode(gen, skip_special_tokens=True)
        out.append({"id": c.id, "family": c.meta["family"], "reply": reply,
                    "correct": normalize_answer(reply) == normalize_answer(c.meta["answer"])})
    return out


def write_records(path: str | Path, rows: list[dict]) -> str:
    from kit.digest import write_canonical_json

    return write_canonical_json(path, rows)
