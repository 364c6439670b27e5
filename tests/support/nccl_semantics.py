"""A CPU transport with NCCL's point-to-point rules, for ordering tests of the stage schedule.

One thread per rank in one process, each holding a `NcclSemanticsGroup` (the interface of
`kit.distributed.group.Group` that the engine uses: isend, recv, wait_sends, exchange, ensure_p2p,
allreduce_sum_, barrier, allgather_bytes). The rules, as NCCL applies them and gloo does not:

- **rendezvous**: a send completes only when the peer has posted the matching receive;
- **strict FIFO per ordered pair** (src, dst): the k-th send from a to b matches the k-th receive
  on b from a, whatever the shapes; a size mismatch is an error here (NCCL would hang or corrupt);
- **no tags**;
- **program order per rank**, the conservative reading of NCCL streams: every operation blocks the
  rank until it completes (`isend` included: on NCCL a queued send blocks every later operation on
  its stream), except a batched `exchange`, whose operations are posted together (one NCCL group:
  receives first, then sends) and waited together.

Every blocking wait is bounded: after `timeout_s` the waiting rank raises `NcclDeadlock`, naming
itself, the operation and what every other rank is blocked in, and the other ranks stop at once.
`rendezvous=False` gives gloo's behaviour (sends buffered), to run an order that NCCL would refuse.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

import torch


class NcclDeadlock(RuntimeError):
    pass


@dataclass
class _Op:
    kind: str  # "send" | "recv"
    rank: int  # who posted it
    peer: int
    number: int  # k-th op of this kind on the ordered pair
    tensor: torch.Tensor  # data to send, or the receive buffer
    done: bool = False

    def describe(self) -> str:
        to = "to" if self.kind == "send" else "from"
        return f"{self.kind} #{self.number} {to} rank {self.peer} ({self.tensor.numel()} elements)"


@dataclass
class Fabric:
    """The shared state of one process group: channels, per-rank status, the abort flag."""

    world: int
    timeout_s: float = 10.0
    rendezvous: bool = True
    cond: threading.Condition = field(default_factory=threading.Condition)
    sends: dict = field(default_factory=dict)  # (src, dst) -> deque of unmatched send ops
    recvs: dict = field(default_factory=dict)  # (src, dst) -> deque of unmatched recv ops
    counts: dict = field(default_factory=dict)  # (kind, src, dst) -> ops posted
    status: dict = field(default_factory=dict)  # rank -> what it is blocked in (None: running)
    abort: str | None = None
    _coll: dict = field(default_factory=dict)  # collective generation -> {rank: tensor}
    _coll_gen: dict = field(default_factory=dict)  # rank -> collectives entered

    def group(self, rank: int) -> NcclSemanticsGroup:
        return NcclSemanticsGroup(rank, self.world, self)

    # all methods below hold self.cond
    def _post(self, op: _Op) -> None:
        src, dst = (op.rank, op.peer) if op.kind == "send" else (op.peer, op.rank)
        key = (op.kind, src, dst)
        self.counts[key] = self.counts.get(key, 0) + 1
        op.number = self.counts[key]
        (self.sends if op.kind == "send" else self.recvs).setdefault((src, dst), deque()).append(op)
        if op.kind == "send" and not self.rendezvous:
            op.done = True  # buffered (gloo): the data is captured now, the sender goes on
            op.tensor = op.tensor.clone()
        self._match(src, dst)

    def _match(self, src: int, dst: int) -> None:
        s, r = self.sends.get((src, dst)), self.recvs.get((src, dst))
        while s and r:
            snd, rcv = s.popleft(), r.popleft()
            if snd.tensor.numel() != rcv.tensor.numel() or snd.tensor.dtype != rcv.tensor.dtype:
                self.abort = (f"rank {src} {snd.describe()} {snd.tensor.dtype} matched rank {dst} "
                              f"{rcv.describe()} {rcv.tensor.dtype}: sizes differ (FIFO per pair, no tags)")
            else:
                rcv.tensor.copy_(snd.tensor.reshape(rcv.tensor.shape))
            snd.done = rcv.done = True
        self.cond.notify_all()

    def _wait(self, rank: int, ops: list[_Op], what: str) -> None:
        self.status[rank] = what
        deadline = time.monotonic() + self.timeout_s
        while True:
            if self.abort is not None:
                self.status[rank] = None
                raise NcclDeadlock(f"rank {rank} stopped in {what}: {self.abort}")
            if all(o.done for o in ops):
                break
            left = deadline - time.monotonic()
            if left <= 0:
                others = []
                for o in range(self.world):
                    if o != rank:
                        st = self.status.get(o, "start")
                        others.append(f"rank {o} is blocked in {st}" if st not in (None, "start", "done")
                                      else f"rank {o} is {'computing' if st is None else st}")
                msg = f"rank {rank} {what} waited {self.timeout_s:g} s; " + "; ".join(others)
                self.abort = msg
                self.cond.notify_all()
                raise NcclDeadlock(msg)
            self.cond.wait(timeout=min(left, 0.5))
        self.status[rank] = None


class NcclSemanticsGroup:
    """Group-compatible: what StageEngine calls, with NCCL's matching rules (module docstring)."""

    def __init__(self, rank: int, world: int, fabric: Fabric):
        self.rank, self.world, self.fabric = rank, world, fabric
        self.device = torch.device("cpu")
        self.staged = False  # Group's host-staging flag (kit/distributed/group.py): NCCL proper never stages
        self.timeout_s = fabric.timeout_s
        self.bytes_sent = 0
        self._loopback: deque = deque()

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def _op(self, kind: str, tensor: torch.Tensor, peer: int) -> _Op:
        op = _Op(kind, self.rank, peer, 0, tensor)
        self.fabric._post(op)
        if kind == "send":
            self.bytes_sent += tensor.numel() * tensor.element_size()
        return op

    # --- point to point ---------------------------------------------------------------------
    def isend(self, tensor: torch.Tensor, dst: int) -> None:
        tensor = tensor.detach().contiguous()
        if dst == self.rank:
            self._loopback.append(tensor)
            return
        f = self.fabric
        with f.cond:
            op = self._op("send", tensor, dst)
            f._wait(self.rank, [op], op.describe())  # program order: nothing after it runs before it completes

    def recv(self, shape, dtype, src: int) -> torch.Tensor:
        if src == self.rank:
            t = self._loopback.popleft()
            if tuple(t.shape) != tuple(shape):
                raise RuntimeError(f"loopback message shape {tuple(t.shape)} != expected {tuple(shape)}")
            return t.clone()
        buf = torch.empty(shape, dtype=dtype)
        f = self.fabric
        with f.cond:
            op = self._op("recv", buf, src)
            f._wait(self.rank, [op], op.describe())
        return buf

    def wait_sends(self) -> None:
        pass  # every send has completed by the time isend returned

    def exchange(self, sends, recvs) -> list[torch.Tensor]:
        """One NCCL group: receives posted, then sends, then all waited together."""
        for tensor, dst in sends:
            if dst == self.rank:
                self._loopback.append(tensor.detach().contiguous())
        out, ops = [], []
        f = self.fabric
        with f.cond:
            for shape, dtype, src in recvs:
                if src == self.rank:
                    out.append(self.recv(shape, dtype, src))
                    continue
                buf = torch.empty(shape, dtype=dtype)
                ops.append(self._op("recv", buf, src))
                out.append(buf)
            for tensor, dst in sends:
                if dst != self.rank:
                    ops.append(self._op("send", tensor.detach().contiguous(), dst))
            if ops:
                f._wait(self.rank, ops, "group [" + ", ".join(o.describe() for o in ops if not o.done) + "]")
        return out

    def ensure_p2p(self) -> None:
        self.barrier()

    # --- collectives (rank-order sums, bounded like everything else) --------------------------
    def _collective(self, tensor: torch.Tensor, what: str) -> list[torch.Tensor]:
        f = self.fabric
        with f.cond:
            gen = f._coll_gen.get(self.rank, 0)
            f._coll_gen[self.rank] = gen + 1
            slot = f._coll.setdefault(gen, {})
            slot[self.rank] = tensor.detach().clone()
            f.cond.notify_all()
            deadline = time.monotonic() + f.timeout_s
            while len(slot) < self.world:
                if f.abort is not None:
                    raise NcclDeadlock(f"rank {self.rank} stopped in {what} #{gen + 1}: {f.abort}")
                if time.monotonic() > deadline:
                    missing = [r for r in range(self.world) if r not in slot]
                    f.abort = (f"rank {self.rank} {what} #{gen + 1} waited {f.timeout_s:g} s; ranks {missing} "
                               f"never joined it: " + "; ".join(f"rank {r} is blocked in {f.status.get(r)}"
                                                                 for r in missing))
                    f.cond.notify_all()
                    raise NcclDeadlock(f.abort)
                f.status[self.rank] = f"{what} #{gen + 1}"
                f.cond.wait(timeout=0.5)
            f.status[self.rank] = None
            return [slot[r] for r in range(self.world)]

    def allreduce_sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.distributed:
            parts = self._collective(tensor, "all-reduce")
            total = parts[0].clone()
            for p in parts[1:]:
                total += p
            tensor.copy_(total)
        return tensor

    def barrier(self) -> None:
        if self.distributed:
            self.allreduce_sum_(torch.zeros(1))

    def allgather_bytes(self, data: bytes) -> list[bytes]:
        if not self.distributed:
            return [data]
        t = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.zeros(0, dtype=torch.uint8)
        return [bytes(p.numpy().tobytes()) for p in self._collective(t, "all-gather")]


def run_ranks(world: int, fn, timeout_s: float = 10.0, rendezvous: bool = True) -> list:
    """fn(group) on one thread per rank; results in rank order. The first failure is raised: the rank
    whose wait timed out (the deadlock's description), not the ranks it then stopped."""
    fabric = Fabric(world, timeout_s, rendezvous)
    results: list = [None] * world
    errors: list = [None] * world

    def body(rank):
        try:
            results[rank] = fn(fabric.group(rank))
        except BaseException as e:  # noqa: BLE001 - reported below with its rank
            errors[rank] = e
            with fabric.cond:
                if fabric.abort is None:
                    fabric.abort = f"rank {rank} raised {type(e).__name__}: {e}"
                fabric.cond.notify_all()
        finally:
            with fabric.cond:
                fabric.status[rank] = "done"
                fabric.cond.notify_all()

    threads = [threading.Thread(target=body, args=(r,), name=f"rank{r}", daemon=True) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout_s * 4 + 60)
    if any(t.is_alive() for t in threads):
        raise NcclDeadlock(f"ranks {[r for r, t in enumerate(threads) if t.is_alive()]} did not finish")
    failed = [e for e in errors if e is not None]
    if failed:
        origin = [e for e in failed if not (isinstance(e, NcclDeadlock) and "stopped in" in str(e))]
        raise (origin or failed)[0]
    return results


def legacy_update(engine, records, total_targets=None):
    """A faithful copy of the send/recv order of the GPipe schedule that deadlocked on two H200s
    (kit/distributed/pipeline.py before issue 14): every forward isend (activations, then reference
    activations) before any receive, and rank 0 exchanging with rank W-1 both ways. Numerics as
    they were, so with buffered sends it also pins today's learned state."""
    from kit.distributed.pipeline import UpdateResult
    from kit.train.batch import make_microbatches, validate_records
    from kit.train.loss import LossParts

    self = engine
    t0 = time.perf_counter()
    local_n = validate_records(records, self.student.shape.vocab_size)
    N = local_n if total_targets is None else int(total_targets)
    mbs = [self._prepare(mb) for mb in make_microbatches(records, self.cfg.microbatch_size, self.cfg.pad_id)]
    g, W, r = self.group, self.world, self.rank
    nxt, prv = (r + 1) % W, (r - 1) % W
    act = self.dtype
    saved, heads = [], []
    parts = torch.zeros(2, dtype=torch.float64, device=self.device)
    for mb in mbs:
        B, T = mb.shape
        R = mb.num_replay
        with self._autocast():
            if r == 0:
                h_in = None
                h = self.student.embed(mb.ids)
                th = None
                if R:
                    with torch.no_grad():
                        th = self.reference.embed(mb.replay_ids)
            else:
                h = g.recv((B, T, self.hidden), act, prv).requires_grad_()
                th = g.recv((R, T, self.hidden), act, prv) if R else None
                h_in = h
            cos, sin = self.student.rope_tables(T, self.device, act)
            h_out = self.student.run_blocks(h.to(act), cos, sin)
            if R:
                with torch.no_grad():
                    th = self.reference.run_blocks(th.to(act), cos, sin)
        g.isend(h_out, nxt)
        if R:
            g.isend(th, nxt)
        saved.append((h_in, h_out))
    if r == 0:
        for mb in mbs:
            B, T = mb.shape
            hf = g.recv((B, T, self.hidden), act, W - 1).requires_grad_()
            thf = g.recv((mb.num_replay, T, self.hidden), act, W - 1) if mb.num_replay else None
            loss, ce, kl = self._head_loss(mb, hf, thf, N)
            parts[0] += ce.detach().double()
            parts[1] += kl.detach().double()
            heads.append((hf, loss))
        for hf, loss in heads:
            loss.backward()
            g.isend(hf.grad, W - 1)
    for h_in, h_out in saved:
        grad = g.recv(tuple(h_out.shape), h_out.dtype, nxt)
        h_out.backward(grad)
        if r != 0:
            g.isend(h_in.grad, prv)
    g.wait_sends()
    norm, factor, (ce_sum, kl_sum_) = self._clip(parts)
    self.optimizer.step(grad_factor=factor)
    self.optimizer.zero_grad()
    new_tokens = sum(mb.new_tokens for mb in mbs)
    replay_tokens = sum(mb.replay_tokens for mb in mbs)
    objective = (ce_sum + self.cfg.distill.weight * kl_sum_) / N
    return UpdateResult(LossParts(ce_sum, kl_sum_, new_tokens, replay_tokens, objective),
                        norm, factor, N, time.perf_counter() - t0)
