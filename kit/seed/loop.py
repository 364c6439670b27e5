"""The seed's training loop, shared by the tiny and the small seed.

One worker's engine (kit.engine.worker.build_worker: a StageEngine with the per-parameter AdamW), so a
seed is made by the same code path as every later update; the learning rate is set before each update
(linear warm-up, then cosine decay). The loop reads each update's loss one update late, so on CUDA the
host prepares update k + 1 while the device still runs update k; on CPU the numbers are the same.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, replace

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from tqdm import tqdm

from kit.distributed.group import Group
from kit.distributed.pipeline import EngineConfig
from kit.engine.worker import build_worker
from kit.model.llama import LlamaCausalLM
from kit.model.shard import even_layout
from kit.train.batch import TrainRecord
from kit.train.optim import GroupConfig

OPTIMIZER_GROUP = "default"  # every parameter of a seed is in this one optimizer group
STEADY_FROM = 10  # the steady-state rate leaves out the first updates (compilation, allocator warm-up)


def progress_enabled(progress: bool) -> bool:
    return progress and os.environ.get("KIT_PROGRESS", "1") != "0"


def warmup_cosine(update: int, updates: int, lr: float, min_lr_ratio: float, warmup_updates: int) -> float:
    """Linear warm-up over `warmup_updates`, then cosine decay to `min_lr_ratio * lr` (0-based update)."""
    if update < warmup_updates:
        return lr * (update + 1) / warmup_updates
    progress = (update - warmup_updates) / max(1, updates - 1 - warmup_updates)
    floor = lr * min_lr_ratio
    return floor + (lr - floor) * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


@dataclass
class LoopResult:
    losses: list[float]  # each update's objective, in update order
    hook_seconds: float  # time spent in `after` (the learning curve): not training time
    steady_start: float | None  # time.perf_counter() before update STEADY_FROM (device synchronised), if reached
    hook_seconds_before_steady: float  # hook_seconds at steady_start


def _attention(device: torch.device):
    """Training attention on CUDA: SDPA's FLASH_ATTENTION backend (deterministic backward under the
    deterministic flag); a hook's cached decoding picks its own kernel. The CPU's default kernels elsewhere."""
    if device.type == "cuda":
        return sdpa_kernel([SDPBackend.FLASH_ATTENTION])
    return nullcontext()


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def train_updates(model: LlamaCausalLM, rows: list[TrainRecord], device: torch.device, engine_cfg: EngineConfig,
                  optimizer: GroupConfig, learning_rate: Callable[[int], float], batch_size: int, updates: int,
                  desc: str, show: bool, every: int = 0, after: Callable[[int], None] | None = None) -> LoopResult:
    """`updates` updates of `batch_size` consecutive rows each, the learning rate `learning_rate(k)` at
    update k. `after(k)` (it only reads the model) runs after update k when `every` divides k, and after
    the last update; its time is measured apart."""
    engine = build_worker(Group(0, 1, device), even_layout(model.shape.num_hidden_layers, 1), None, engine_cfg,
                          {OPTIMIZER_GROUP: optimizer}, student=model).engine
    result = LoopResult([], 0.0, None, 0.0)
    pending = []
    bar = tqdm(range(updates), desc=desc, unit="update", disable=not show)
    for k in bar:
        if k == STEADY_FROM:
            _synchronize(device)
            result.steady_start, result.hook_seconds_before_steady = time.perf_counter(), result.hook_seconds
        engine.optimizer.groups = {OPTIMIZER_GROUP: replace(optimizer, lr=learning_rate(k))}
        with _attention(device):
            pending.append(engine.update(rows[k * batch_size:(k + 1) * batch_size]))
        if len(pending) > 1:  # the previous update's numbers: reading them waits for that update only
            result.losses.append(pending.pop(0).parts.objective)
            bar.set_postfix(loss=f"{result.losses[-1]:.3f}", refresh=False)
        if after is not None and every and ((k + 1) % every == 0 or k + 1 == updates):
            t = time.perf_counter()
            after(k + 1)
            result.hook_seconds += time.perf_counter() - t
    result.losses += [r.parts.objective for r in pending]
    bar.close()
    return result
