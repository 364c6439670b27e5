"""The stage schedule: one update over owned blocks only, with the frozen reference alongside.

Not `torch.distributed.pipelining`: the tied head *is* the embedding owned by rank 0, so rank 0 is
both the first and the last stage, which that library cannot express without untying the head.
The decision to know: the kit runs its own schedule in lockstep ticks with one batched exchange per
tick, so that every message produced in a tick is received in that tick (NCCL sends are rendezvous),
and with the numerics of the GPipe order, so the learned state is bit-identical across worker
counts on CPU.
Ticks and memory: docs/engine.md ("The schedule"); GPU speed: docs/performance.md.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import torch

from kit import numerics
from kit.distributed.group import Group
from kit.model.llama import LlamaCausalLM
from kit.model.shard import Layout
from kit.train.batch import TrainRecord, make_microbatches, validate_records
from kit.train.device_clip import clip_on_device
from kit.train.grad_norms import squared_norms
from kit.train.loss import (
    DistillConfig,
    LossParts,
    cross_entropy_sum,
    kl_sum,
    target_positions,
    update_objective,
)
from kit.train.optim import ParamAdamW, clip_factor

# --- the tick plan: pure functions of (world W, microbatches M, rank r, tick t) ----------------------
# Microbatch i runs forward on rank r at tick i + r, its head (rank 0) at tick i + W, its backward on
# rank r at tick i + bwd_offset(W, r). A message produced at tick t is consumed at tick t + 1, and
# both ends post it in the same tick's batched exchange, in the same order per ordered pair:
# forward activations, then reference activations, then gradients. See docs/engine.md.

def bwd_offset(world: int, rank: int) -> int:
    """Ticks between a microbatch's forward on rank 0 and its backward on `rank`."""
    return 2 * world - rank if rank else 2 * world


def n_ticks(world: int, microbatches: int) -> int:
    return microbatches + 2 * world


def in_flight(world: int, microbatches: int, rank: int) -> int:
    """Microbatches whose saved activations `rank` holds at once (backward runs before forward in a tick)."""
    return min(microbatches, bwd_offset(world, rank) - rank)


def tick_receives(world: int, microbatches: int, rank: int, tick: int, replay_rows: list[int]):
    """What `rank` receives in tick `tick`'s exchange, in order: (kind, microbatch, source rank).

    kinds: "fwd"/"ref" (stage input and reference input), "head"/"href" (rank 0: the last stage's
    output coming back), "grad" (the gradient of this stage's output)."""
    W, M, r, t = world, microbatches, rank, tick
    out = []
    i = t + 1 - (W if r == 0 else r)
    if 0 <= i < M:
        a, b = ("head", "href") if r == 0 else ("fwd", "ref")
        out.append((a, i, (r - 1) % W))
        if replay_rows[i]:
            out.append((b, i, (r - 1) % W))
    i = t + 1 - bwd_offset(W, r)
    if 0 <= i < M:
        out.append(("grad", i, (r + 1) % W))
    return out


CUDA_LENGTH_BUCKET = 64


@dataclass(frozen=True)
class EngineConfig:
    microbatch_size: int
    max_grad_norm: float
    distill: DistillConfig = field(default_factory=DistillConfig)
    compute_dtype: str = "float32"  # "bfloat16": autocast compute over FP32 master weights
    pad_id: int = 0
    compile_blocks: str = "auto"  # "auto": torch.compile the blocks on CUDA (never on CPU); "off": eager
    # Pad each microbatch's length up to a multiple of this (kit/train/batch.py): "auto" is 64 on CUDA,
    # where every new length costs a new attention plan, and off on CPU, so CPU results never change.
    length_bucket: str | int = "auto"
    # Where the clip factor is computed (kit/train/device_clip.py): "auto" on the device on CUDA, so an
    # update never waits for the host, and on the host on CPU, whose bits the CPU evidence pins.
    clip_on_device: str = "auto"
    # The GPU fast paths (docs/performance.md, "Fast paths"), each "auto" = on on CUDA, off on CPU (whose
    # bits the CPU evidence pins), or "on"/"off" anywhere. weight_cache: one compute-dtype copy of the
    # weights per update (kit/model/weight_cache.py; only with a compute dtype below FP32);
    # fused_elementwise: the norms and SwiGLU of kit/model/fused.py; foreach_norm: the squared gradient
    # norms in one multi-tensor call (kit/train/grad_norms.py).
    weight_cache: str = "auto"
    fused_elementwise: str = "auto"
    foreach_norm: str = "auto"
    # The update's levers as the one-GPU benchmark record decided (docs/performance.md, "Levers measured");
    # "on" runs one anywhere, "auto" on CUDA only. compiled_loss: each loss chunk as one torch.compile'd
    # function of static shape (kit/train/compiled_loss.py), +5.7% tokens/s, so "auto" (the CPU keeps the eager
    # loop and its digests). adam_steps_on_device (the fused AdamW's step counts kept on the device) and
    # graph_capture (compiled blocks as CUDA graphs, mode "reduce-overhead"): -0.5% each, noise, so off.
    compiled_loss: str = "auto"
    adam_steps_on_device: str = "off"
    graph_capture: str = "off"
    # adam_writes_cache: the AdamW step writes the weight cache's copies in the same compiled pass
    # (kit/train/adam_cache.py), instead of the cache re-reading every master after the step: +2.6% tokens/s
    # (docs/performance.md, "The AdamW step writes the weight cache"), so "auto"; a GPU run's bits differ with
    # it (inductor's rounding, not the fused kernel's), the CPU keeps the foreach AdamW and its digests.
    adam_writes_cache: str = "auto"

    def __post_init__(self):
        for name in ("clip_on_device", "weight_cache", "fused_elementwise", "foreach_norm", "compiled_loss",
                     "adam_steps_on_device", "graph_capture", "adam_writes_cache"):
            if getattr(self, name) not in ("auto", "on", "off"):
                raise ValueError(f"engine {name} {getattr(self, name)!r}; expected 'auto', 'on' or 'off'")
        if self.compile_blocks not in ("auto", "off"):
            raise ValueError(f"engine compile_blocks {self.compile_blocks!r}; expected 'auto' or 'off'")
        ok = self.length_bucket == "auto" or (isinstance(self.length_bucket, int)
                                              and not isinstance(self.length_bucket, bool) and self.length_bucket >= 0)
        if not ok:
            raise ValueError(f"engine length_bucket {self.length_bucket!r}; expected 'auto' or an integer >= 0")

    def device_clip_for(self, device: torch.device) -> bool:
        return self.enabled("clip_on_device", device)

    def enabled(self, name: str, device: torch.device) -> bool:
        """Whether the "auto"/"on"/"off" switch `name` is on for `device` ("auto": on CUDA only)."""
        value = getattr(self, name)
        return value == "on" or (value == "auto" and device.type == "cuda")

    def bucket_for(self, device: torch.device) -> int:
        if self.length_bucket == "auto":
            return CUDA_LENGTH_BUCKET if device.type == "cuda" else 0
        return int(self.length_bucket)


@dataclass
class _Targets:
    """Target tokens of some rows of a microbatch, as device index tensors built on the host."""

    local: torch.Tensor  # index into the rows given (the reference's replay-only tensors use it)
    row: torch.Tensor  # row in the microbatch
    pos: torch.Tensor  # position predicting the target (token index - 1)
    token: torch.Tensor  # target token id
    weight: torch.Tensor  # the record's weight, per target


@dataclass
class _Prepared:
    """One microbatch on the device plus host-side integers, so the schedule never asks the device."""

    ids: torch.Tensor
    replay_ids: torch.Tensor
    shape: tuple[int, int]
    num_replay: int
    new: _Targets
    replay: _Targets
    new_tokens: int
    replay_tokens: int


def _targets(mask, ids, weights, rows, move) -> _Targets:
    local, tok = target_positions(mask, rows)
    row = rows[local]
    return _Targets(move(local), move(row), move(tok - 1), move(ids[row, tok]), move(weights[row]))


@dataclass
class UpdateResult:
    parts: LossParts
    grad_norm: float
    clip_factor: float
    tokens: int  # global assistant target tokens N
    seconds: float

    def to_json(self) -> dict:
        return {**self.parts.to_json(), "grad_norm": self.grad_norm, "clip_factor": self.clip_factor,
                "tokens": self.tokens, "seconds": self.seconds}


class PendingUpdateResult:
    """An UpdateResult whose numbers are still on the device (kit/train/device_clip.py): reading any of
    them (`parts`, `grad_norm`, `clip_factor`, `seconds`, `to_json()`) waits for them, once."""

    def __init__(self, pending, new_tokens: int, replay_tokens: int, tokens: int, kl_weight: float):
        self._pending, self._counts, self._kl_weight = pending, (new_tokens, replay_tokens, tokens), kl_weight
        self._result: UpdateResult | None = None

    def resolve(self) -> UpdateResult:
        if self._result is None:
            norm, factor, ce, kl = self._pending.values()
            new, replay, N = self._counts
            self._result = UpdateResult(LossParts(ce, kl, new, replay, update_objective(ce, kl, self._kl_weight, N)),
                                        norm, factor, N, self._pending.seconds)
        return self._result

    def __getattr__(self, name):
        return getattr(self.resolve(), name)


class StageEngine:
    """One worker's view of the pipeline: its student stage, its reference stage and its optimizer."""

    def __init__(self, group: Group, layout: Layout, student: LlamaCausalLM, reference: LlamaCausalLM | None,
                 optimizer: ParamAdamW, canonical_names: list[str], cfg: EngineConfig, fast_paths=None):
        """`fast_paths`: what kit/engine/fast_paths.py applied to the student and reference (its
        `weight_cache`, `fused` and `engaged()`), or None: the model file's own forward."""
        if layout.workers != group.world:
            raise ValueError(f"layout has {layout.workers} workers but the group has {group.world}")
        if reference is not None:
            # The reference holds the same blocks, or (after growth) a prefix of them.
            own = {n: tuple(p.shape) for n, p in student.named_parameters()}
            ref = {n: tuple(p.shape) for n, p in reference.named_parameters()}
            diff = sorted((n, s) for n, s in ref.items() if own.get(n) != s)[:3]
            missing = sorted(n for n in own if n not in ref and ".layers." not in n)[:3]
            if diff or missing:
                raise ValueError(f"reference stage shapes differ from the student's on rank {group.rank}: "
                                 f"{diff or missing}")
            reference.requires_grad_(False)
        numerics.apply(group.device)  # idempotent; in-process engines get the launched workers' numerics
        self.group, self.layout, self.cfg = group, layout, cfg
        self.student, self.reference, self.optimizer = student, reference, optimizer
        self.rank, self.world = group.rank, group.world
        self.canonical = canonical_names
        self.index = {n: i for i, n in enumerate(canonical_names)}
        self.params = dict(student.named_parameters())
        unknown = [n for n in self.params if n not in self.index]
        if unknown:
            raise ValueError(f"stage parameters not in the model's canonical names: {unknown[:3]}")
        self.hidden = student.shape.hidden_size
        self.dtype = getattr(torch, cfg.compute_dtype)
        self.device = group.device
        self.loss_dtype = None if self.dtype == torch.float32 else self.dtype
        self._index_cache: dict[tuple[str, ...], torch.Tensor] = {}
        self.foreach_norm = cfg.enabled("foreach_norm", self.device)
        # The weight cache and the fused elementwise were applied to the modules before (build_worker);
        # the engine engages them in its stage forward and refreshes the cache after each step.
        self.fast_paths = fast_paths
        self.fused = bool(fast_paths is not None and fast_paths.fused)
        self.weight_cache = fast_paths.weight_cache if fast_paths is not None else None
        self.graph_capture = bool(fast_paths is not None and fast_paths.graph_capture)
        self.compiled_loss = cfg.enabled("compiled_loss", self.device)
        if cfg.enabled("adam_steps_on_device", self.device):
            optimizer.keep_steps_on_device()
        # The optimizer writes the cache's copies: the cache's own refresh after the step is then left out.
        self.adam_writes_cache = self.weight_cache is not None and cfg.enabled("adam_writes_cache", self.device)
        if self.adam_writes_cache and self.weight_cache is not None:
            optimizer.write_copies(self.weight_cache.copies_of(optimizer.params))
        # Data-parallel replicas (the gradient study) reduce gradients here, before clipping.
        self.grad_reducer: Callable[[dict[str, torch.nn.Parameter]], None] | None = None
        self.capture_grads = False  # tests compare pre-clipping gradients with the oracle's
        self.last_grads: dict[str, torch.Tensor] = {}

    def _autocast(self):
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def _engaged(self):
        """The applied fast paths, taken inside the stage forward only."""
        return self.fast_paths.engaged() if self.fast_paths is not None else contextlib.nullcontext()

    # --- the update -------------------------------------------------------------------------
    def update(self, records: list[TrainRecord], total_targets: int | None = None
               ) -> UpdateResult | PendingUpdateResult:
        """One update over `records`. With data parallelism (the gradient study) each replica passes
        its share of the global batch and `total_targets`, the global batch's target count, so the
        objective keeps the global normalisation; `grad_reducer` then sums gradients across replicas."""
        t0 = time.perf_counter()
        start = None
        if self.device.type == "cuda" and self.cfg.device_clip_for(self.device):
            start = torch.cuda.Event(enable_timing=True)  # the update's device-time origin
            start.record()
        local_n = validate_records(records, self.student.shape.vocab_size)
        N = local_n if total_targets is None else int(total_targets)
        if N < local_n:
            raise ValueError(f"total_targets {N} is smaller than this worker's own {local_n} target tokens")
        if any(r.replay for r in records) and self.reference is None:
            raise ValueError("the batch declares replay records but no reference model was given")
        if self.weight_cache is not None:
            self.weight_cache.ensure_fresh()  # a no-op unless a master changed in place since the last step
        if self.graph_capture:
            torch.compiler.cudagraph_mark_step_begin()  # a new iteration: the last update's graph outputs are free
        mbs = [self._prepare(mb) for mb in make_microbatches(records, self.cfg.microbatch_size, self.cfg.pad_id,
                                                             length_bucket=self.cfg.bucket_for(self.device))]
        parts = self._run_schedule(mbs, N)
        if self.grad_reducer is not None:
            self.grad_reducer(self.params)
        if self.capture_grads:
            self.last_grads = {n: p.grad.detach().clone() for n, p in self.params.items() if p.grad is not None}
        new_tokens = sum(mb.new_tokens for mb in mbs)
        replay_tokens = sum(mb.replay_tokens for mb in mbs)
        if self.cfg.device_clip_for(self.device):
            factor_t, found_inf, pending = clip_on_device(self._clip_buffer(parts), len(self.canonical),
                                                          self.cfg.max_grad_norm, start, t0)
            self._step(factor_t, found_inf)
            return PendingUpdateResult(pending, new_tokens, replay_tokens, N, self.cfg.distill.weight)
        norm, factor, (ce_sum, kl_sum_) = self._clip(parts)
        # No wait for the step: the next update's host-side preparation overlaps it on the device.
        self._step(factor)
        objective = update_objective(ce_sum, kl_sum_, self.cfg.distill.weight, N)
        return UpdateResult(LossParts(ce_sum, kl_sum_, new_tokens, replay_tokens, objective),
                            norm, factor, N, time.perf_counter() - t0)

    def _step(self, factor, found_inf=None) -> None:
        """The optimizer step, then (with the weight cache) the one compute-dtype copy of the new weights
        that every block and microbatch of the next update reads."""
        self.optimizer.step(grad_factor=factor, found_inf=found_inf)
        self.optimizer.zero_grad()
        if self.adam_writes_cache and self.weight_cache is not None:
            self.weight_cache.mark_fresh()  # a parameter without a gradient kept its value, and so its copy
        elif self.weight_cache is not None:
            self.weight_cache.refresh()

    def _run_schedule(self, mbs: list[_Prepared], N: int) -> torch.Tensor:
        """Forward, loss and backward of every microbatch over the ring, in lockstep ticks (the tick
        plan: `bwd_offset`, `tick_receives`). Returns the (ce_sum, kl_sum) partial sums; gradients are left in `.grad`.

        Per-parameter gradient accumulation order is that of the GPipe schedule this replaced: on every
        rank the blocks accumulate microbatch by microbatch in order; on rank 0 the tied embedding
        receives all head gradients (microbatch order) before any embedding-lookup gradient (deferred
        to the end, microbatch order). So the learned state is bit-identical on CPU."""
        g, W, r, M = self.group, self.world, self.rank, len(mbs)
        nxt, prv = (r + 1) % W, (r - 1) % W
        act = self.dtype
        parts = torch.zeros(2, dtype=torch.float64, device=self.device)  # ce_sum, kl_sum
        saved: dict[int, tuple] = {}  # i -> (h_in, h_out): this stage's graph of microbatch i
        deferred: list[tuple] = []  # rank 0: (embedding output, its gradient) per microbatch, in order
        inbox: dict[tuple[str, int], torch.Tensor] = {}  # ("fwd"|"ref"|"head"|"href"|"grad", i) -> tensor
        g.ensure_p2p()
        for t in range(n_ticks(W, M)):
            # 1) backward of the microbatch whose output gradient arrived last tick
            sends_bwd = []
            i = t - bwd_offset(W, r)
            if 0 <= i < M:
                h_in, h_out = saved.pop(i)
                h_out.backward(inbox.pop(("grad", i)))
                if r != 0:
                    sends_bwd = [(h_in.grad, prv)]
                else:
                    emb, h_leaf = h_in
                    deferred.append((emb, h_leaf.grad))
            # 2) rank 0 (the last stage too): norm + head + loss of the microbatch that came back, and its backward
            sends_head = []
            i = t - W
            if r == 0 and 0 <= i < M:
                hf = inbox.pop(("head", i)).requires_grad_()
                thf = inbox.pop(("href", i), None)
                loss, ce, kl = self._head_loss(mbs[i], hf, thf, N)
                parts[0] += ce.detach().double()
                parts[1] += kl.detach().double()
                loss.backward()
                sends_head = [(hf.grad, W - 1)]
                del hf, thf, loss
            # 3) forward of the microbatch that reaches this stage now
            sends_fwd = []
            i = t - r
            if 0 <= i < M:
                h_in, h_out, th = self._stage_forward(mbs[i], i, inbox)
                sends_fwd = [(h_out, nxt)] + ([(th, nxt)] if mbs[i].num_replay else [])
                saved[i] = (h_in, h_out)
            # 4) one batched exchange: this tick's outputs, next tick's inputs (see tick_receives)
            recvs = self._tick_receives(mbs, t)
            if sends_fwd or sends_head or sends_bwd or recvs:
                got = g.exchange(sends_fwd + sends_head + sends_bwd, [(shape, act, src) for _, shape, src in recvs])
                inbox.update({key: x for (key, _, _), x in zip(recvs, got)})
        assert not saved and not inbox, (sorted(saved), sorted(inbox))
        # rank 0: the embedding lookup's gradients, after every head gradient, in microbatch order
        for emb, grad in deferred:
            emb.backward(grad)
        return parts

    def _stage_forward(self, mb: _Prepared, i: int, inbox: dict) -> tuple:
        """This stage's forward of microbatch `i` (step 3 of a tick): (h_in, h_out, the reference's output
        or None). Rank 0 embeds; every other rank takes its input (and the reference's) from `inbox`."""
        act = self.dtype
        _, T = mb.shape
        R = mb.num_replay
        with self._autocast(), self._engaged():
            if self.rank == 0:
                # The lookup's output is a leaf for the blocks, so the blocks' backward can run early
                # (1F1B memory) while the embedding's own backward waits for every head gradient.
                emb = self.student.embed(mb.ids)
                h = emb.detach().requires_grad_()
                h_in = (emb, h)
                th = None
                if R:
                    assert self.reference is not None, "update refuses replay records without a reference"
                    with torch.no_grad():
                        th = self.reference.embed(mb.replay_ids)
            else:
                h = inbox.pop(("fwd", i)).requires_grad_()
                th = inbox.pop(("ref", i), None)
                h_in = h
            cos, sin = self.student.rope_tables(T, self.device, act)
            h_out = self.student.run_blocks(h.to(act), cos, sin)
            if R:
                assert self.reference is not None and th is not None, "replay records: the reference's input"
                with torch.no_grad():  # the reference is already in the compute dtype: no copy to keep
                    th = self.reference.run_blocks(th.to(act), cos, sin)
        return h_in, h_out, th

    def _tick_receives(self, mbs: list[_Prepared], t: int) -> list:
        """What this rank receives at the end of tick `t`: ((kind, i), shape, source) per tensor, in the
        order tick_receives gives (every rank's sends and receives pair in that order)."""
        recvs = []
        for kind, i, src in tick_receives(self.world, len(mbs), self.rank, t, [mb.num_replay for mb in mbs]):
            B, T = mbs[i].shape
            rows = mbs[i].num_replay if kind in ("ref", "href") else B
            recvs.append(((kind, i), (rows, T, self.hidden), src))
        return recvs

    def _prepare(self, mb) -> _Prepared:
        """Host-side bookkeeping of a CPU microbatch, then one move of what the device needs."""
        move = self._to_device
        new = _targets(mb.target_mask, mb.ids, mb.weights, mb.new_rows, move)
        replay = _targets(mb.target_mask, mb.ids, mb.weights, mb.replay_rows, move)
        return _Prepared(move(mb.ids), move(mb.ids[mb.replay_rows]), tuple(mb.ids.shape), mb.num_replay,
                         new, replay, mb.new_tokens, mb.replay_tokens)

    def _to_device(self, t: torch.Tensor) -> torch.Tensor:
        # Pinned + non_blocking: a pageable host-to-device copy would wait for the device to drain
        # (the previous update's optimizer step), which is exactly the overlap we want to keep.
        if self.device.type == "cuda":
            return t.pin_memory().to(self.device, non_blocking=True)
        return t.to(self.device)

    def _head_loss(self, mb: _Prepared, hf, thf, N: int):
        with self._autocast():
            x = self.student.final_norm(hf)
            weight = self.student.head_weight()
            low = self.weight_cache.head if self.weight_cache is not None else None
            t = mb.new
            ce = cross_entropy_sum(x[t.row, t.pos], weight, t.token, t.weight, compute_dtype=self.loss_dtype,
                                   weight_low=low, compiled=self.compiled_loss)
            kl = torch.zeros((), device=self.device)
            if mb.num_replay:
                assert self.reference is not None, "update refuses replay records without a reference"
                t = mb.replay
                with torch.no_grad():
                    txr = self.reference.final_norm(thf)[t.local, t.pos]
                kl = kl_sum(x[t.row, t.pos], weight, txr, self.reference.head_weight(), t.weight,
                            self.cfg.distill, compute_dtype=self.loss_dtype, weight_low=low,
                            compiled=self.compiled_loss)
        loss = update_objective(ce, kl, self.cfg.distill.weight, N)
        return loss, ce, kl

    def _clip(self, parts: torch.Tensor) -> tuple[float, float, list[float]]:
        """(norm, factor, loss sums): squared norms per parameter, summed in canonical order, so the
        factor is identical on every worker. The loss sums ride in the same all-reduce and the same
        device-to-host copy: the one synchronisation of an update. The factor is applied by the
        optimizer step."""
        n = len(self.canonical)
        host = self._clip_buffer(parts).cpu().tolist()
        norm, factor = clip_factor(host[:n], self.cfg.max_grad_norm)
        return norm, factor, host[n:]

    def _clip_buffer(self, parts: torch.Tensor) -> torch.Tensor:
        """Every canonical parameter's squared gradient norm (FP64, in its canonical position; 0 where
        another rank owns it), then the loss sums, all-reduced: the same buffer on every rank."""
        n = len(self.canonical)
        buf = torch.zeros(n + parts.numel(), dtype=torch.float64, device=self.device)
        # canonical order (each tensor's norm depends on it alone, so the order only fixes the buffer's layout)
        names = sorted((n_ for n_ in self.params if self.params[n_].grad is not None), key=self.index.__getitem__)
        if names:
            # `names` holds only parameters with a gradient
            local = squared_norms(cast(list[torch.Tensor], [self.params[n_].grad for n_ in names]), self.foreach_norm)
            buf[self._canonical_index(names)] = local
        buf[n:] = parts
        # each squared norm is non-zero on exactly one rank and the loss sums only on rank 0: the sum is exact
        self.group.allreduce_sum_(buf)
        return buf

    def _canonical_index(self, names: list[str]) -> torch.Tensor:
        key = tuple(names)
        if key not in self._index_cache:  # built once per set of names: no host-to-device copy per update
            self._index_cache[key] = torch.tensor([self.index[n] for n in names]).to(self.device)
        return self._index_cache[key]
