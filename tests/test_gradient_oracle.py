"""An oracle for the model part that shares no code with the kit: transformers.LlamaForCausalLM,
given the same weights, computes the same loss (CE on new records, KL toward the reference on replay
records, normalised by the global target count) in float64; its gradients must equal the kit
engine's float32 gradients of one update within the float32 bound derived in tests/support/engine_oracle.py."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from support.engine import OPT, make_batches, single_engine
from support.engine_oracle import run_oracle64
from support.engine_workers import records_from_json


def _hf_gradients(seed_dir, ref_dir, rows):
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(seed_dir, torch_dtype=torch.float64, attn_implementation="eager")
    ref = LlamaForCausalLM.from_pretrained(ref_dir, torch_dtype=torch.float64, attn_implementation="eager")
    ref.requires_grad_(False)
    n_targets = sum(sum(r["target_mask"][1:]) for r in rows)
    loss = torch.zeros((), dtype=torch.float64)
    for r in rows:
        ids = torch.tensor(r["input_ids"])[None]
        pos = torch.tensor([t for t in range(1, len(r["input_ids"])) if r["target_mask"][t]])
        logits = model(input_ids=ids).logits[0, pos - 1]
        if r["replay"]:
            with torch.no_grad():
                q = F.log_softmax(ref(input_ids=ids).logits[0, pos - 1], -1)
            loss = loss + r["weight"] * (q.exp() * (q - F.log_softmax(logits, -1))).sum()
        else:
            loss = loss + r["weight"] * F.cross_entropy(logits, ids[0, pos], reduction="sum")
    (loss / n_targets).backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    if "lm_head.weight" in grads and model.config.tie_word_embeddings:  # tied: one tensor, HF lists it once
        grads.pop("lm_head.weight")
    return grads


def test_engine_gradients_equal_transformers_gradients(dirs):
    rows = make_batches(1, seed=3)[0]
    assert any(r["replay"] for r in rows) and not all(r["replay"] for r in rows)
    eng = single_engine(dirs)
    eng.capture_grads = True
    eng.update(records_from_json(rows))
    kit_grads = eng.last_grads
    hf = _hf_gradients(str(dirs[0]), str(dirs[1]), rows)
    history, _ = run_oracle64(*dirs, [rows], OPT["lr"], (OPT["beta1"], OPT["beta2"]), OPT["eps"],
                              OPT["weight_decay"], 1.0)
    bounds = history[0]["bounds"]["grads"]
    assert set(kit_grads) == set(hf) == set(bounds)
    for n, g in hf.items():
        assert g.abs().max().item() > 0, n  # every parameter takes part in the loss
        excess = (kit_grads[n].double() - g).abs() - bounds[n]
        assert excess.max().item() <= 0, (n, excess.max().item())
