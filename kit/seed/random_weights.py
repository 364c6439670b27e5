"""A seed directory with random weights at a given shape, for speed measurements (no training, no network).

Benchmarks and GPU campaigns need a model of SmolLM2-1.7B's shape that the kit loads like any seed:
config.json, model.safetensors in bfloat16 (every norm weight 1, every other tensor N(0, 0.02) from a
generator seeded by the tensor's name, so the bytes do not depend on the order tensors are drawn in),
and a byte-level BPE tokenizer capped at the model's vocabulary. The tokenizer is trained on synthetic
chat, generated tasks and the public source's records between the study contract's replay and
retention ranges (text neither range uses); its ids only need to be below the vocabulary, since
nothing built from it measures quality.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from kit.contract import Contract
from kit.data.chat import load_tokenizer
from kit.data.conversations import instruction_source_range, synthetic_conversations
from kit.data.tasks import generate_set
from kit.data.tokenizer_build import SPECIAL_TOKEN_IDS, build_tokenizer
from kit.model.config import smollm2_17b, toy_shape
from kit.model.llama import LlamaCausalLM

INIT_SEED, INIT_STD = 0, 0.02
TOKENIZER_SYNTHETIC = 4000  # synthetic conversations in the tokenizer's training text
TOKENIZER_TASKS = 1000  # generated tasks of a role no study set uses
TOKENIZER_TASK_ROLE = "bench-tokenizer"
WEIGHTS_DTYPE = torch.bfloat16
TOY_POSITIONS = 2048  # the toy shape keeps the study's documents (1,024-token cap) whole


def tokenizer_texts(contract: Contract, source: Path) -> list[str]:
    """Synthetic chat, generated tasks, and the public source's records between the replay range and
    the retention range of a study contract (a loaded Contract; neither range is used to train the tokenizer)."""
    d = contract.terms.data
    rep, ret = d.replay.source, d.retention.source
    if rep.stop >= ret.start:
        raise ValueError(f"{contract.path}: replay range ends at {rep.stop}, retention starts at {ret.start}; "
                         "expected a gap between them for the tokenizer's text")
    between = instruction_source_range(source, rep.sha256, rep.stop, ret.start, rep.name)
    texts = [m.content for c in synthetic_conversations(TOKENIZER_SYNTHETIC, INIT_SEED) for m in c.messages]
    texts += [t for ex in generate_set(TOKENIZER_TASKS, INIT_SEED, TOKENIZER_TASK_ROLE, d.tasks.difficulty)
              for t in (ex.prompt, ex.answer)]
    texts += [m.content for c in between.conversations for m in c.messages]
    return texts


def seeded_normal(name: str, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """N(0, INIT_STD) from a generator seeded by (INIT_SEED, name), drawn on `device`."""
    seed = (INIT_SEED * 1_000_003 + int(hashlib.sha256(name.encode()).hexdigest()[:12], 16)) % (2**63)
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(shape, generator=gen, device=device) * INIT_STD


def build_random_seed(seed_dir: Path, contract: Contract, source: Path, device: torch.device,
                      toy_layers: int | None = None) -> dict:
    """config.json, model.safetensors (random, bfloat16) and the tokenizer files in `seed_dir`; returns
    what was built. SmolLM2-1.7B's shape, or with `toy_layers` a toy shape of that many blocks with the
    same tokenizer (a script's check on a CPU)."""
    t0 = time.perf_counter()
    full = smollm2_17b()
    build_tokenizer(tokenizer_texts(contract, source), full.vocab_size, seed_dir,
                    model_max_length=full.max_position_embeddings)
    tokenizer_vocab = len(load_tokenizer(seed_dir))  # also checks the chat template and the fast tokenizer
    t_tok = time.perf_counter() - t0
    ids: dict[str, Any] = {"bos_token_id": SPECIAL_TOKEN_IDS["<|im_start|>"], "eos_token_id": SPECIAL_TOKEN_IDS["<|im_end|>"],
           "pad_token_id": SPECIAL_TOKEN_IDS["<|endoftext|>"]}
    base = full if toy_layers is None else toy_shape(full.vocab_size, toy_layers, TOY_POSITIONS)
    shape = replace(base, **ids)
    if tokenizer_vocab > shape.vocab_size:
        raise ValueError(f"{seed_dir}: tokenizer has {tokenizer_vocab} ids; the model's vocab_size is {shape.vocab_size}")
    (seed_dir / "config.json").write_text(json.dumps(shape.to_hf_dict(), indent=2, sort_keys=True) + "\n")
    with torch.device("meta"):
        names = [(n, tuple(p.shape)) for n, p in LlamaCausalLM(shape).named_parameters()]
    tensors = {}
    for name, dims in names:  # tied embeddings: no lm_head.weight, as Hugging Face stores it
        t = torch.ones(dims, device=device) if name.endswith("norm.weight") else seeded_normal(name, dims, device)
        tensors[name] = t.to(WEIGHTS_DTYPE).cpu().contiguous()
    save_file(tensors, str(seed_dir / "model.safetensors"), metadata={"format": "pt"})
    n_params = sum(t.numel() for t in tensors.values())
    return {"dir": str(seed_dir), "shape": shape.to_hf_dict(), "params": n_params,
            "weights": {"file": "model.safetensors", "dtype": str(WEIGHTS_DTYPE).removeprefix("torch."),
                        "bytes": (seed_dir / "model.safetensors").stat().st_size,
                        "init": f"norm weights 1; every other tensor N(0, {INIT_STD}) from a torch generator on "
                                f"{device.type} seeded by ({INIT_SEED}, sha256 of its name)"},
            "tokenizer": {"vocab": tokenizer_vocab, "cap": full.vocab_size,
                          "built_by": "kit.data.tokenizer_build.build_tokenizer",
                          "text": f"{TOKENIZER_SYNTHETIC} synthetic conversations (seed {INIT_SEED}), "
                                  f"{TOKENIZER_TASKS} generated tasks (role {TOKENIZER_TASK_ROLE!r}), public source "
                                  f"records between the replay and retention ranges",
                          "note": "not SmolLM2's tokenizer: token ids only need to be < vocab_size for a "
                                  "throughput measurement; token counts per document differ from SmolLM2's",
                          "seconds": round(t_tok, 2)},
            "seconds": round(time.perf_counter() - t0, 2)}
