"""Evaluation of a committed candidate: per-example assistant-token NLL and greedy task answers.

A model under evaluation is loaded whole into one process (`load_model`), from a commit of a
checkpoint store (its parameters only) or from a seed directory: evaluation is forward-only, and a
tiny or a 1.7B model fits one device. Training never holds a full model; evaluation is a separate, read-only step.

`score_nll` returns, per conversation, the summed NLL (nats) of its assistant target tokens and
their count: exactly the tokens the training loss uses (kit/data/chat.py masks). `answer_tasks`
greedily decodes a reply to each task prompt with the kit's own decoder and checks it with the
task family's normalising checker. Both are deterministic functions of the weights.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from tqdm import tqdm

from kit import numerics
from kit.data.chat import encode_or_refuse, generation_prompt_ids
from kit.data.conversations import Conversation
from kit.data.tasks import normalize_answer
from kit.model.cached_decode import greedy_cached
from kit.model.generate import greedy_batch
from kit.model.llama import LlamaCausalLM
from kit.model.shard import load_owned
from kit.record import Omittable, Record, spec_field
from kit.store.objects import ObjectStore
from kit.store.params import load_parameters
from kit.store.start import start_from_commit, start_from_seed


def _bar(iterable, desc: str, total: int | None = None):
    """tqdm over evaluation batches; KIT_PROGRESS=0 turns every bar off."""
    return tqdm(iterable, desc=desc, total=total, unit="batch", file=sys.stderr, leave=False,
                disable=os.environ.get("KIT_PROGRESS", "1") == "0")


def eval_batch_sizes(device: str) -> tuple[int, int]:
    """(NLL rows, greedy prompts) per batch: the historical CPU sizes, larger on a GPU (per-row math is
    the same; only how many rows share a kernel changes)."""
    return (16, 32) if torch.device(device).type == "cpu" else (64, 128)


def load_model(home: str | None = None, root: str | None = None, seed_dir: str | None = None,
               device: str = "cpu") -> LlamaCausalLM:
    """The full model of a commit (`home` + `root`, its `param` objects only: no Adam moment is read)
    or of a seed directory, FP32, eval mode."""
    numerics.apply(device)  # scores are compared across machines and runs: the kit's numeric profile
    if seed_dir is not None:
        model = LlamaCausalLM(start_from_seed(seed_dir).shape)  # tensors checked against the config first
        load_owned(model, seed_dir)
        return model.to(device).eval()
    if home is None or root is None:
        raise ValueError("load_model: give a seed directory, or a commit's home and root")
    start = start_from_commit(home, root)
    model = LlamaCausalLM(start.shape)
    assert start.commit is not None, "a start from a commit carries its manifest"
    load_parameters(ObjectStore(home), start.commit.learned_state.params, model, f"commit {root} in {home}")
    return model.to(device).eval()


@dataclass(frozen=True, slots=True, kw_only=True)
class NllScore(Record):
    """One conversation's summed NLL over its assistant target tokens."""

    id: str = spec_field(str, doc="the conversation")
    nll_sum: float = spec_field(float, doc="summed NLL (nats) of its assistant target tokens")
    tokens: int = spec_field(int, doc="how many")
    family: str | None = spec_field(Omittable(str), doc="a task's family, only for task records")


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskAnswer(Record):
    """One task's greedy reply, checked against its answer."""

    id: str = spec_field(str, doc="the task record")
    family: str = spec_field(str, doc="its family")
    reply: str = spec_field(str, doc="the greedy reply, without the end-of-turn token")
    correct: bool = spec_field(bool, doc="the normalized reply equals the normalized answer")


@dataclass(frozen=True, slots=True, kw_only=True)
class FamilyAccuracy(Record):
    """One family's greedy accuracy on a sample (seed_build.json's `task_accuracy.per_family`
    values, dev-curve.json's `points[].accuracy` values)."""

    n: int = spec_field(int, doc="tasks of the family in the sample")
    correct: int = spec_field(int, doc="of them answered correctly")
    accuracy: float = spec_field(float, doc="correct / n (0 for none)")

    @classmethod
    def of(cls, answers: list[TaskAnswer]) -> FamilyAccuracy:
        correct = sum(a.correct for a in answers)
        return cls(n=len(answers), correct=correct, accuracy=correct / max(1, len(answers)))


def score_nll(model: LlamaCausalLM, tokenizer, conversations: list[Conversation], max_tokens: int,
              batch_size: int = 16) -> list[dict]:
    """`nll_scores` as the JSON the evaluation records hold: [{id, nll_sum, tokens, family?}]."""
    return [s.to_json() for s in nll_scores(model, tokenizer, conversations, max_tokens, batch_size)]


@torch.no_grad()
def nll_scores(model: LlamaCausalLM, tokenizer, conversations: list[Conversation], max_tokens: int,
               batch_size: int = 16) -> list[NllScore]:
    """The NLL of every conversation; over-long ones are refused (the evaluation set was prepared under
    the same cap, so none should be)."""
    encoded = [(c, encode_or_refuse(tokenizer, c, max_tokens, ValueError, "evaluation record")) for c in conversations]
    device = next(model.parameters()).device
    out: list[NllScore] = []
    for a in _bar(range(0, len(encoded), batch_size), "scoring NLL"):
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
            out.append(NllScore(id=c.id, nll_sum=float(nll[i][m[i]].double().sum()), tokens=int(m[i].sum()),
                                family=c.meta.get("family")))  # meta: a conversation's open extra keys
    return out


def answer_tasks(model: LlamaCausalLM, tokenizer, tasks: list[Conversation], max_new_tokens: int,
                 batch_size: int = 32) -> list[dict]:
    """`task_answers` as the JSON the evaluation records hold: [{id, family, reply, correct}]."""
    return [a.to_json() for a in task_answers(model, tokenizer, tasks, max_new_tokens, batch_size)]


def task_answers(model: LlamaCausalLM, tokenizer, tasks: list[Conversation], max_new_tokens: int,
                 batch_size: int = 32) -> list[TaskAnswer]:
    """The greedy reply to each task's prompt, checked against its answer."""
    vocab = tokenizer.get_vocab()
    eos = vocab.get("<|im_end|>", tokenizer.eos_token_id)
    for c in tasks:
        if "answer" not in c.meta or "family" not in c.meta:
            raise ValueError(f"task record {c.id!r} lacks 'answer' or 'family'")
    prompts = [generation_prompt_ids(tokenizer, list(c.messages[:-1])) for c in tasks]  # all before the answer
    replies: list[list[int]] = []
    if next(model.parameters()).device.type != "cpu":
        # GPU: prefill once, then one position per token over a key/value cache (kit/model/cached_decode.py).
        # CPU keeps the full-sequence decoder, whose bits the committed CPU evidence pins.
        replies = greedy_cached(model, prompts, max_new_tokens, eos, batch_size=batch_size)
    else:
        for a in _bar(range(0, len(prompts), batch_size), "greedy answers"):
            replies += greedy_batch(model, prompts[a:a + batch_size], max_new_tokens, eos)
    out: list[TaskAnswer] = []
    for c, gen in zip(tasks, replies):
        if gen and gen[-1] == eos:
            gen = gen[:-1]
        reply = tokenizer.decode(gen, skip_special_tokens=True)
        out.append(TaskAnswer(id=c.id, family=c.meta["family"], reply=reply,
                              correct=normalize_answer(reply) == normalize_answer(c.meta["answer"])))
    return out
