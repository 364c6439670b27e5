"""The communication hook of data-parallel replicas: it replaces each replica's gradient by the SUM of
every replica's gradient, densely or through PowerSGD, before clipping and AdamW.

Why a sum: each replica's loss is already divided by the assistant-token count of the whole global
batch, so the sum of the replicas' gradients is the single-worker gradient of the global objective.
`DenseSumReducer` all-reduces sorted-name buckets; `PowerSGDSumReducer` wraps kit/train/powersgd.py.
Both leave bitwise-identical gradients on every replica, which keeps the replicas' states identical.
Details: the notes below.

Notes: why the two reducers give the same sum on every replica.

The sum is a single worker's gradient over the whole batch up to float summation order. Dense buckets hold at most
`bucket_bytes`, filled in sorted name order so every replica makes the same calls. PowerSGD's `allreduce_mean` is an
all-reduce SUM divided by the world size, and the returned mean is multiplied back: with two replicas both steps are
exact, so the dense warm-up delivers exactly the dense sum. Both count their logical bytes in a `LogicalTraffic`.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from kit.distributed.traffic import LogicalTraffic
from kit.train.powersgd import PowerSGDCompressor

FP32_BYTES = 4
DEFAULT_BUCKET_BYTES = 256 * 2**20


def _grads(params: dict[str, torch.nn.Parameter], names: list[str]) -> list[torch.Tensor]:
    out = []
    for n in names:
        p = params[n]
        if p.grad is None:  # a parameter outside this update's graph still takes part: its gradient is 0
            p.grad = torch.zeros_like(p)
        out.append(p.grad)
    return out


class DenseSumReducer:
    def __init__(self, world: int, traffic: LogicalTraffic | None = None,
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES):
        if world < 2:
            raise ValueError(f"DenseSumReducer: world size {world}; data parallelism needs at least 2 replicas")
        self.world, self.traffic, self.bucket_bytes = world, traffic, int(bucket_bytes)

    def _buckets(self, names: list[str], grads: list[torch.Tensor]) -> list[list[int]]:
        buckets: list[list[int]] = []
        current: list[int] = []
        size = 0
        for i, g in enumerate(grads):
            nbytes = g.numel() * FP32_BYTES
            if current and size + nbytes > self.bucket_bytes:
                buckets.append(current)
                current, size = [], 0
            current.append(i)
            size += nbytes
        if current:
            buckets.append(current)
        return buckets

    @torch.no_grad()
    def __call__(self, params: dict[str, torch.nn.Parameter]) -> None:
        names = sorted(params)
        grads = _grads(params, names)
        for bucket in self._buckets(names, grads):
            flat = torch.cat([grads[i].reshape(-1).to(torch.float32) for i in bucket])
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
            if self.traffic is not None:
                self.traffic.add_gradient(flat.numel() * FP32_BYTES)
            offset = 0
            for i in bucket:
                g = grads[i]
                g.copy_(flat[offset:offset + g.numel()].view(g.shape))
                offset += g.numel()


class PowerSGDSumReducer:
    def __init__(self, compressor: PowerSGDCompressor, world: int, traffic: LogicalTraffic | None = None):
        if world < 2:
            raise ValueError(f"PowerSGDSumReducer: world size {world}; data parallelism needs at least 2 replicas")
        self.compressor, self.world, self.traffic = compressor, world, traffic
        self._warmup = False

    def allreduce_mean(self, tensors: list[torch.Tensor]) -> None:
        """The compressor's all-reduce: SUM over the default process group, then / world, in place."""
        for t in tensors:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
            t.div_(self.world)
            if self.traffic is not None:
                self.traffic.add_gradient(t.numel() * t.element_size(), warmup=self._warmup)

    @torch.no_grad()
    def __call__(self, params: dict[str, torch.nn.Parameter]) -> None:
        names = list(self.compressor.shapes)
        unknown = sorted(set(params) - set(names))
        if unknown:
            raise ValueError(f"PowerSGDSumReducer: parameters {unknown[:3]} were not given to the compressor")
        grads = dict(zip(names, _grads(params, names)))
        self._warmup = self.compressor.in_warmup
        mean = self.compressor.reduce(grads, self.allreduce_mean)
        for n, g in grads.items():
            g.copy_(mean[n]).mul_(self.world)

    def stats(self) -> dict:
        return self.compressor.stats()
