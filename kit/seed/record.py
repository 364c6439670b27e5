"""What every seed directory holds beside its tokenizer, written the same way at every scale.

The weights and their configs (FP32, Hugging Face names, no lm_head.weight), every conversation trained
on, and seed_build.json, whose common fields (docs/formats/seed-directory.md) each scale extends with its own.
"""

from __future__ import annotations

import json
import platform
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save as safetensors_bytes

import kit
from kit.data.conversations import Conversation, write_jsonl
from kit.digest import write_bytes_atomic
from kit.inventory import parameter_digest
from kit.model.config import LlamaShape
from kit.model.llama import LlamaCausalLM

TRAINED_CONVERSATIONS_FILE = "trained_conversations.jsonl"
SEED_BUILD_FILE = "seed_build.json"
WEIGHTS_FILE = "model.safetensors"
FINAL_LOSS_WINDOW = 10  # the final loss is the mean over the last updates (each on unseen data)


def write_model_files(staging: Path, model: LlamaCausalLM, shape: LlamaShape) -> None:
    config = json.dumps(shape.to_hf_dict(), indent=2, sort_keys=True) + "\n"
    write_bytes_atomic(staging / "config.json", config.encode("utf-8"))
    generation = {"bos_token_id": shape.bos_token_id, "eos_token_id": shape.eos_token_id,
                  "pad_token_id": shape.pad_token_id}
    write_bytes_atomic(staging / "generation_config.json",
                       (json.dumps(generation, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    # named_parameters of a tied model has no lm_head.weight: exactly what Hugging Face stores.
    tensors = {name: p.detach().to(torch.float32).contiguous().clone() for name, p in model.named_parameters()}
    # safetensors' own serialisation (the bytes save_file writes), written like every other kit
    # file: atomically, fsynced, with ordinary permissions (save_file leaves the file mode 0600).
    write_bytes_atomic(staging / WEIGHTS_FILE, safetensors_bytes(tensors, metadata={"format": "pt"}))


def write_seed_files(staging: Path, model: LlamaCausalLM, trained: list[Conversation]) -> tuple[str, str]:
    """The weights, configs and trained conversations (each once, in training order) into `staging`;
    returns (trained_conversations.jsonl's sha256, the parameter digest)."""
    write_model_files(staging, model, model.shape)
    trained_sha256 = write_jsonl(staging / TRAINED_CONVERSATIONS_FILE, trained)
    return trained_sha256, parameter_digest(staging)


def common_record(cfg, shape: LlamaShape, vocab_size: int, losses: list[float], final_lr: float,
                  profile: dict, digest: str) -> dict:
    """The fields of seed_build.json every scale writes: the kit, the config, the schedule, the losses,
    the software and the digest."""
    return {
        "kit_version": kit.__version__,
        "config": asdict(cfg),
        "params": shape.param_count(),
        "vocab_size": vocab_size,
        "updates": len(losses),
        "learning_rate": {"schedule": "linear warm-up then cosine", "peak": cfg.lr,
                          "warmup_updates": cfg.warmup_updates, "final": final_lr},
        "loss_initial": losses[0],
        "loss_final": final_loss(losses),
        "loss_every_10_updates": [round(x, 4) for x in losses[::10]],
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "machine": platform.machine(),
        "numeric_profile": profile,
        "parameter_digest": digest,
    }


def final_loss(losses: list[float]) -> float:
    """seed_build.json's `loss_final`: the mean over the last FINAL_LOSS_WINDOW updates."""
    return float(np.mean(losses[-FINAL_LOSS_WINDOW:]))


def write_record(staging: Path, record: dict) -> None:
    write_bytes_atomic(staging / SEED_BUILD_FILE, (json.dumps(record, indent=2, sort_keys=True) + "\n").encode())
