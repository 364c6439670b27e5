"""The synthetic update that the throughput benchmarks measure: random tokens of a fixed length, the engine
in bf16 with CE + KL, and torch.optim.AdamW's defaults in one optimizer group.

An update's cost depends on shapes, lengths and settings, not on which tokens it sees, so the benchmarks
(bench/update_throughput.py, bench/pipeline_throughput.py) draw tokens at random; defining the workload
once keeps their rows comparable with each other and with the plain-transformers baseline.
"""

from __future__ import annotations

import torch

from kit.distributed.pipeline import EngineConfig
from kit.model.config import LlamaShape
from kit.train.batch import TrainRecord
from kit.train.loss import DistillConfig
from kit.train.optim import GroupConfig

# torch.optim.AdamW's defaults (the baseline uses torch's own optimizer with these)
LR, BETAS, EPS, WEIGHT_DECAY, MAX_NORM = 1e-5, (0.9, 0.999), 1e-8, 0.01, 1.0


def random_records(shape: LlamaShape, n: int, seq: int, replay_every: tuple[bool, ...], seed: int) -> list[TrainRecord]:
    """`n` records of `seq` uniformly random token ids, every token a target; record i is a replay record
    (KL toward the reference) when `replay_every[i % len(replay_every)]`."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, shape.vocab_size, (n, seq), generator=gen)
    mask = (True,) * seq
    return [TrainRecord(f"r{i}", tuple(ids[i].tolist()), mask, 1.0, replay_every[i % len(replay_every)])
            for i in range(n)]


def engine_config(micro: int, compile_blocks: str, clip_on_device: str = "auto") -> EngineConfig:
    return EngineConfig(microbatch_size=micro, max_grad_norm=MAX_NORM, distill=DistillConfig(),
                        compute_dtype="bfloat16", compile_blocks=compile_blocks, clip_on_device=clip_on_device)


def optimizer_groups() -> dict[str, GroupConfig]:
    return {"default": GroupConfig(lr=LR, beta1=BETAS[0], beta2=BETAS[1], eps=EPS, weight_decay=WEIGHT_DECAY)}
