"""Memory admission of a worker: refuse, before allocating, a worker whose planner estimate exceeds
the memory free right now (CUDA free memory on GPU, MemAvailable on CPU; never advertised totals)."""

from __future__ import annotations

import torch

from kit.distributed.group import Group
from kit.distributed.pipeline import in_flight
from kit.model.config import LlamaShape
from kit.model.shard import Layout
from kit.planner import GPU_BF16, MemoryModel, MicrobatchShape, admit, estimate_worker


def free_memory_bytes(device: torch.device) -> int:
    """Memory actually free now: CUDA free memory on GPU, MemAvailable on CPU (never advertised totals)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/meminfo has no MemAvailable line")


def worker_estimate(shape: LlamaShape, layout: Layout, rank: int, microbatch: tuple[int, int],
                    microbatches: int, memory_model: dict):
    """The planner's estimate for `rank` under the schedule that runs: its in-flight microbatches
    (kit/distributed/pipeline.in_flight), the head and loss buffers and, on the embedding owner, the
    deferred lookup gradients of every microbatch of the update; plus the memory model's reserve."""
    batch, seq_len = int(microbatch[0]), int(microbatch[1])
    owner = rank == layout.embedding_owner
    mb = MicrobatchShape(batch, seq_len, in_flight(layout.workers, microbatches, rank),
                         lookup_grads=microbatches if owner else 0)
    return estimate_worker(shape, layout.blocks_of(rank), owner, mb, MemoryModel(**memory_model))


def default_memory_model(device: torch.device) -> dict:
    return {} if device.type == "cpu" else dict(GPU_BF16)


def admit_worker(group: Group, shape: LlamaShape, layout: Layout, microbatch: tuple[int, int],
                 microbatches: int = 1, memory_model: dict | None = None) -> dict:
    """Refuse, before allocating, a worker whose planner estimate exceeds the memory free right now.

    `microbatch` is (documents, max tokens) of one microbatch, `microbatches` how many an update has;
    `memory_model` the planner's MemoryModel fields, the contract's reserve included."""
    if memory_model is None:
        memory_model = default_memory_model(group.device)
    est = worker_estimate(shape, layout, group.rank, microbatch, microbatches, memory_model)
    free = free_memory_bytes(group.device)
    admit(est, free, f"rank {group.rank} ({group.device})")
    return {"estimate": est.total, "free": free, "components": est.components}
