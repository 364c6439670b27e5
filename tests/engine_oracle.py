"""The independent oracle for the engine tests: the kit's full model in one process, plain autograd,
losses written with torch.nn.functional, torch's own clipping and torch.optim.AdamW."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kit.model.llama import LlamaCausalLM
from kit.model.shard import load_owned
from kit.model_config import load_config


def oracle_loss(model, ref, records, kl_weight=1.0, temperature=1.0):
    """(objective, ce_sum, kl_sum) over records, normalised by the global target count."""
    n_targets = sum(sum(r["target_mask"][1:]) for r in records)
    ce_sum = torch.zeros((), dtype=torch.float32)
    kl_sum = torch.zeros((), dtype=torch.float32)
    for r in records:
        ids = torch.tensor(r["input_ids"])[None]
        pos = torch.tensor([t for t in range(1, len(r["input_ids"])) if r["target_mask"][t]])
        if len(pos) == 0:
            continue
        logits = model(ids)[0, pos - 1]
        w = float(r.get("weight", 1.0))
        if r.get("replay"):
            with torch.no_grad():
                ref_logits = ref(ids)[0, pos - 1]
            kl = F.kl_div(F.log_softmax(logits / temperature, -1), F.log_softmax(ref_logits / temperature, -1),
                          log_target=True, reduction="none").sum(-1) * temperature**2
            kl_sum = kl_sum + w * kl.sum()
        else:
            ce_sum = ce_sum + w * F.cross_entropy(logits, ids[0, pos], reduction="sum")
    return (ce_sum + kl_weight * kl_sum) / n_targets, ce_sum, kl_sum


def run_oracle(seed_dir, ref_dir, batches, lr, betas, eps, weight_decay, max_norm, kl_weight=1.0):
    shape = load_config(seed_dir)
    model = LlamaCausalLM(shape)
    load_owned(model, seed_dir)
    ref = LlamaCausalLM(shape)
    load_owned(ref, ref_dir)
    ref.requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                            foreach=False)
    names = {p: n for n, p in model.named_parameters()}
    history = []
    for records in batches:
        opt.zero_grad()
        loss, ce, kl = oracle_loss(model, ref, records, kl_weight)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        opt.step()
        history.append({"objective": loss.item(), "ce_sum": ce.item(), "kl_sum": kl.item(),
                        "grad_norm": norm.item(), "grads": grads})
    state = {}
    for p, st in opt.state.items():
        n = names[p]
        state[n] = {"param": p.detach().clone(), "exp_avg": st["exp_avg"], "exp_avg_sq": st["exp_avg_sq"],
                    "age": int(st["step"])}
    return history, state
