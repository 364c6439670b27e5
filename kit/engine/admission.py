"""Memory admission of a worker: refuse, before allocating, a worker whose planner estimate exceeds
the memory free right now (CUDA free memory on GPU, MemAvailable on CPU; never advertised totals)."""

from __future__ import annotations

import torch

from kit.distributed.group import Group
from kit.model.config import LlamaShape
from kit.model.shard import Layout


def free_memory_bytes(device: torch.device) -> int:
    """Memory actually free now: CUDA free memory on GPU, MemAvailable on CPU (never advertised totals)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/meminfo has no MemAvailable line")


def admit_worker(group: Group, shape: LlamaShape, layout: Layout, microbatch: tuple[int, int, int],
                 memory_model: dict | None = None) -> dict:
    """Refuse, before allocating, a worker whose planner estimate exceeds the memory free right now."""
    from kit.planner import MemoryModel, MicrobatchShape, admit, estimate_worker

    if memory_model is None:
        memory_model = {} if group.device.type == "cpu" else {"compute_copy_bytes": 0, "reference_bytes": 2,
                                                              "activation_bytes": 2}
    est = estimate_worker(shape, layout.blocks_of(group.rank), group.rank == layout.embedding_owner,
                          MicrobatchShape(*microbatch), MemoryModel(**memory_model))
    free = free_memory_bytes(group.device)
    admit(est, free, f"rank {group.rank} ({group.device})")
    return {"estimate": est.total, "free": free}
