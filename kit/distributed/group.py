"""Joining the process group from the torchrun environment, and point-to-point messages.

A worker reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, so `torchrun` works across hosts and
the local launcher only sets the same variables; gloo on CPU, NCCL on CUDA. The decision to know:
every collective and receive has a bounded timeout, so a dead or hung peer becomes an error.
With more ranks than GPUs on a host the group falls back to gloo with messages staged through host
memory, and says so in `Group.backend`.
Details: the notes below.

Notes: interfaces, and more ranks than GPUs.

NCCL ignores GLOO_SOCKET_IFNAME; when only that is set, `join` copies it to NCCL_SOCKET_IFNAME before the
communicator exists, says so on stderr and records it in `Group.interfaces`: one setting for both backends. Two
ranks of one communicator on one GPU are refused by NCCL ("Duplicate GPU detected", since NCCL 2.5; its topology
search assumes one rank per device), so such a group runs on gloo, `staged` through host memory: the tensors stay
on the GPU, only the wire bytes pass the CPU; slower, with the same schedule and the same values.
"""

from __future__ import annotations

import datetime
import os
import sys
from collections import deque
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

DEFAULT_TIMEOUT_S = 120.0
STAGED_BACKEND = "gloo (host-staged)"  # Group.backend when ranks share a host's GPUs


class WorkerEnvError(ValueError):
    pass


def _env_int(name: str) -> int:
    value = os.environ.get(name)
    if value is None:
        raise WorkerEnvError(f"environment variable {name} is not set; launch with torchrun or `--workers N`")
    try:
        return int(value)
    except ValueError:
        raise WorkerEnvError(f"environment variable {name}={value!r}; expected an integer") from None


@dataclass
class Group:
    rank: int
    world: int
    device: torch.device
    timeout_s: float = DEFAULT_TIMEOUT_S
    _loopback: deque = field(default_factory=deque)  # messages a single worker sends to itself
    _pending: list = field(default_factory=list)  # isend handles and their tensors, kept alive
    bytes_sent: int = 0
    _p2p_ready: bool = False
    staged: bool = False  # CUDA tensors sent through host memory over gloo (more ranks than GPUs on a host)
    interfaces: dict = field(default_factory=dict)  # socket interface settings in force, and where they came from

    @property
    def backend(self) -> str:
        if not self.distributed:
            return "none"
        return STAGED_BACKEND if self.staged else ("nccl" if self.device.type == "cuda" else "gloo")

    def _wire(self, tensor: torch.Tensor) -> torch.Tensor:
        """The tensor as it goes on the wire: itself, or a host copy when the group is staged."""
        return tensor.cpu() if self.staged else tensor

    def _buffer(self, shape, dtype) -> torch.Tensor:
        return torch.empty(shape, dtype=dtype, device="cpu" if self.staged else self.device)

    @property
    def distributed(self) -> bool:
        return self.world > 1

    # --- point to point ---------------------------------------------------------------------
    def isend(self, tensor: torch.Tensor, dst: int) -> None:
        tensor = tensor.detach().contiguous()
        if dst == self.rank:
            self._loopback.append(tensor)
            return
        self.bytes_sent += tensor.numel() * tensor.element_size()
        wire = self._wire(tensor)
        self._pending.append((dist.isend(wire, dst), wire))

    def recv(self, shape, dtype, src: int) -> torch.Tensor:
        if src == self.rank:
            t = self._loopback.popleft()
            if tuple(t.shape) != tuple(shape):
                raise RuntimeError(f"loopback message shape {tuple(t.shape)} != expected {tuple(shape)}")
            return t.clone()
        buf = self._buffer(shape, dtype)
        dist.recv(buf, src)
        return buf.to(self.device) if self.staged else buf

    def wait_sends(self) -> None:
        for work, _ in self._pending:
            work.wait()
        self._pending.clear()

    def exchange(self, sends: list[tuple[torch.Tensor, int]], recvs: list[tuple[tuple, torch.dtype, int]]
                 ) -> list[torch.Tensor]:
        """One batched exchange (NCCL: one group): receives posted before sends, all waited together.

        Messages to and from this rank itself go through the loopback queue, sends first. Within an
        ordered pair, messages match in list order on both sides (NCCL matches FIFO, ignoring tags)."""
        ops, out = [], []
        for tensor, dst in sends:
            if dst == self.rank:
                self._loopback.append(tensor.detach().contiguous())
        for shape, dtype, src in recvs:
            if src == self.rank:
                out.append(self.recv(shape, dtype, src))
            else:
                buf = self._buffer(shape, dtype)
                ops.append(dist.P2POp(dist.irecv, buf, src))
                out.append(buf)
        keep = []
        for tensor, dst in sends:
            if dst != self.rank:
                tensor = self._wire(tensor.detach().contiguous())
                keep.append(tensor)
                self.bytes_sent += tensor.numel() * tensor.element_size()
                ops.append(dist.P2POp(dist.isend, tensor, dst))
        if ops:
            for work in dist.batch_isend_irecv(ops):
                work.wait()
        if self.staged:
            out = [t.to(self.device) if t.device != self.device else t for t in out]
        return out

    def ensure_p2p(self) -> None:
        """Every rank, before its first batched exchange: NCCL requires the first batched P2P call on
        a communicator to involve all ranks; a tiny all-reduce creates it with everyone present."""
        if self.distributed and not self._p2p_ready:
            self.barrier()
            self._p2p_ready = True

    # --- collectives ------------------------------------------------------------------------
    def _allreduce_(self, tensor: torch.Tensor, op) -> torch.Tensor:
        if not self.distributed:
            return tensor
        if self.staged and tensor.device.type != "cpu":
            wire = tensor.cpu()
            dist.all_reduce(wire, op=op)
            tensor.copy_(wire)
        else:
            dist.all_reduce(tensor, op=op)
        return tensor

    def allreduce_sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        return self._allreduce_(tensor, dist.ReduceOp.SUM)

    def allreduce_max_(self, tensor: torch.Tensor) -> torch.Tensor:
        return self._allreduce_(tensor, dist.ReduceOp.MAX)

    def barrier(self) -> None:
        if self.distributed:
            # A tiny all-reduce instead of dist.barrier(): it honours the group timeout on gloo and NCCL.
            self.allreduce_sum_(torch.zeros(1, device=self.device))

    def allgather_bytes(self, data: bytes) -> list[bytes]:
        """Every rank's bytes (JSON records, never pickle) in rank order."""
        if not self.distributed:
            return [data]
        device = "cpu" if self.staged else self.device
        n = torch.tensor([len(data)], dtype=torch.int64, device=device)
        sizes = [torch.zeros_like(n) for _ in range(self.world)]
        dist.all_gather(sizes, n)
        cap = int(max(int(s) for s in sizes))
        buf = torch.zeros(cap, dtype=torch.uint8, device=device)
        if data:
            buf[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)
        outs = [torch.zeros_like(buf) for _ in range(self.world)]
        dist.all_gather(outs, buf)
        return [bytes(o[: int(s)].cpu().numpy().tobytes()) for o, s in zip(outs, sizes)]


def join(device: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> Group:
    """Join the group described by the environment (world size 1 needs no rendezvous)."""
    rank, world = _env_int("RANK"), _env_int("WORLD_SIZE")
    if not 0 <= rank < world:
        raise WorkerEnvError(f"RANK={rank} is outside 0..WORLD_SIZE-1 (WORLD_SIZE={world})")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    staged = False
    if dev.type == "cuda":
        local = int(os.environ.get("LOCAL_RANK", rank))
        gpus = torch.cuda.device_count()
        dev = torch.device("cuda", local % gpus)
        torch.cuda.set_device(dev)
        # More ranks than GPUs on this host: NCCL would refuse the shared device (module docstring).
        staged = world > 1 and int(os.environ.get("LOCAL_WORLD_SIZE", min(world, gpus))) > gpus
    backend = "nccl" if dev.type == "cuda" and not staged else "gloo"
    interfaces = socket_interfaces(backend if world > 1 else "none")
    if world > 1 and not dist.is_initialized():
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if name not in os.environ:
                raise WorkerEnvError(f"environment variable {name} is not set for a {world}-worker group")
        dist.init_process_group(
            backend=backend,
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
    return Group(rank, world, dev, timeout_s, staged=staged, interfaces=interfaces)


def socket_interfaces(backend: str, environ=None) -> dict:
    """The socket interface settings for `backend`, completing NCCL_SOCKET_IFNAME from
    GLOO_SOCKET_IFNAME when only that one is set (NCCL ignores the gloo variable). Returns
    {"GLOO_SOCKET_IFNAME": v|None, "NCCL_SOCKET_IFNAME": v|None, "nccl_from_gloo": bool}."""
    environ = os.environ if environ is None else environ
    gloo, nccl = environ.get("GLOO_SOCKET_IFNAME"), environ.get("NCCL_SOCKET_IFNAME")
    derived = False
    if backend == "nccl" and gloo and not nccl:
        environ["NCCL_SOCKET_IFNAME"] = nccl = gloo
        derived = True
        sys.stderr.write(f"kit: NCCL_SOCKET_IFNAME was not set; using GLOO_SOCKET_IFNAME={gloo} for NCCL too "
                         "(NCCL ignores GLOO_SOCKET_IFNAME)\n")
    return {"GLOO_SOCKET_IFNAME": gloo, "NCCL_SOCKET_IFNAME": nccl, "nccl_from_gloo": derived}


def leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def under_torchrun() -> bool:
    """This process is one of torchrun's workers: torchrun sets RANK/WORLD_SIZE; the kit's own launcher
    sets them too, and KIT_RUN_DIR besides."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and "KIT_RUN_DIR" not in os.environ


def exit_torchrun_worker(code: int) -> None:
    """End a finished torchrun worker without interpreter finalization.

    Call it after every record is written and `leave()` has run. Finalization can still abort
    (SIGABRT, "terminate called without an active exception") while gloo's C++ threads are torn
    down; that was observed in about one run in three across two network namespaces
    (tests/test_adaptive_netns.py). torchrun's exit barrier then holds the other host until its
    timeout, so the worker leaves with os._exit once its output is flushed."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
