"""The stage schedule: one update over owned blocks only, with the frozen reference alongside.

Why not `torch.distributed.pipelining`: its schedules assume the last stage computes the loss,
and a stage is a module whose parameters belong to one rank. Here the tied output head *is* the
embedding matrix, owned by rank 0, so rank 0 is both the first stage (embedding) and the last
(final norm + head + loss), and the embedding weight receives gradient from both ends of the
pipe. Expressing that would need sharing a parameter across two pipelining stages, which the
library does not support, or untying the head, which changes the model. So the kit runs a small
GPipe-style schedule of its own over point-to-point messages:

  forward   rank 0: embed + its blocks for every microbatch -> rank 1 -> ... -> rank W-1 -> rank 0
            rank 0 then applies the final norm + head + loss to each microbatch as it returns
  backward  rank 0: loss backward for every microbatch, sends d(final hidden) to rank W-1,
            which passes gradients back down to rank 0's blocks and the embedding

Student and reference activations travel together (the reference's hidden states for the replay
rows of a microbatch only, computed without autograd). All sends are asynchronous so no rank
blocks on a send while its peer is blocked on one; a single worker sends to itself through a
loopback queue, so one worker executes exactly the same operations in the same order as many,
which is what makes the learned state bit-identical across worker counts on CPU.

Then canonical clipping (kit/train/optim.py) and the per-parameter AdamW step.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import torch

from kit.dist.group import Group
from kit.model.llama import LlamaCausalLM
from kit.model.shard import Layout
from kit.train.batch import TrainRecord, make_microbatches, validate_records
from kit.train.loss import DistillConfig, LossParts, cross_entropy_sum, gather_targets, kl_sum
from kit.train.optim import ParamAdamW, apply_clip, clip_factor


@dataclass(frozen=True)
class EngineConfig:
    microbatch_size: int
    max_grad_norm: float
    distill: DistillConfig = DistillConfig()
    compute_dtype: str = "float32"  # "bfloat16": autocast compute over FP32 master weights
    pad_id: int = 0


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


class StageEngine:
    """One worker's view of the pipeline: its student stage, its reference stage and its optimizer."""

    def __init__(self, group: Group, layout: Layout, student: LlamaCausalLM, reference: LlamaCausalLM | None,
                 optimizer: ParamAdamW, canonical_names: list[str], cfg: EngineConfig):
        if layout.workers != group.world:
            raise ValueError(f"layout has {layout.workers} workers but the group has {group.world}")
        if reference is not None:
            own = {n: tuple(p.shape) for n, p in student.named_parameters()}
            ref = {n: tuple(p.shape) for n, p in reference.named_parameters()}
            if own != ref:
                diff = sorted(set(own.items()) ^ set(ref.items()))[:3]
                raise ValueError(f"reference stage shapes differ from the student's on rank {group.rank}: {diff}")
            reference.requires_grad_(False)
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
        # Data-parallel replicas (the gradient study) reduce gradients here, before clipping.
        self.grad_reducer = None
        self.capture_grads = False  # tests compare pre-clipping gradients with the oracle's
        self.last_grads: dict[str, torch.Tensor] = {}

    def _autocast(self):
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    # --- the update -------------------------------------------------------------------------
    def update(self, records: list[TrainRecord], total_targets: int | None = None) -> UpdateResult:
        """One update over `records`. With data parallelism (the gradient study) each replica passes
        its share of the global batch and `total_targets`, the global batch's target count, so the
        objective keeps the global normalisation; `grad_reducer` then sums gradients across replicas."""
        t0 = time.perf_counter()
        local_n = validate_records(records, self.student.shape.vocab_size)
        N = local_n if total_targets is None else int(total_targets)
        if N < local_n:
            raise ValueError(f"total_targets {N} is smaller than this worker's own {local_n} target tokens")
        if any(r.replay for r in records) and self.reference is None:
            raise ValueError("the batch declares replay records but no reference model was given")
        mbs = make_microbatches(records, self.cfg.microbatch_size, self.cfg.pad_id, self.device)
        g, W, r = self.group, self.world, self.rank
        nxt, prv = (r + 1) % W, (r - 1) % W
        act = self.dtype
        saved, heads = [], []
        parts = torch.zeros(2, dtype=torch.float64, device=self.device)  # ce_sum, kl_sum
        # forward: every microbatch through this stage
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
                            th = self.reference.embed(mb.ids[mb.replay_rows])
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
        # the embedding owner is also the last stage: norm + head + loss for each returning microbatch
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
        # backward through this stage's blocks, in microbatch order
        for h_in, h_out in saved:
            grad = g.recv(tuple(h_out.shape), h_out.dtype, nxt)
            h_out.backward(grad)
            if r != 0:
                g.isend(h_in.grad, prv)
        g.wait_sends()
        if self.grad_reducer is not None:
            self.grad_reducer(self.params)
        if self.capture_grads:
            self.last_grads = {n: p.grad.detach().clone() for n, p in self.params.items() if p.grad is not None}
        norm, factor = self._clip()
        self.optimizer.step()
        self.optimizer.zero_grad()
        # rank 0 computed the loss sums; the others hold zeros, so a sum all-reduce is exact
        g.allreduce_sum_(parts)
        ce_sum, kl_sum_ = (float(x) for x in parts.cpu())
        new_tokens = sum(mb.new_tokens for mb in mbs)
        replay_tokens = sum(mb.replay_tokens for mb in mbs)
        objective = (ce_sum + self.cfg.distill.weight * kl_sum_) / N
        return UpdateResult(LossParts(ce_sum, kl_sum_, new_tokens, replay_tokens, objective),
                            norm, factor, N, time.perf_counter() - t0)

    def _head_loss(self, mb, hf, thf, N: int):
        with self._autocast():
            x = self.student.final_norm(hf)
            weight = self.student.head_weight()
            xs, tg, rows = gather_targets(x, mb.ids, mb.target_mask, mb.new_rows)
            ce = cross_entropy_sum(xs, weight, tg, mb.weights[rows])
            kl = torch.zeros((), device=self.device)
            if mb.num_replay:
                xr, _, rrows = gather_targets(x, mb.ids, mb.target_mask, mb.replay_rows)
                with torch.no_grad():
                    tx = self.reference.final_norm(thf)
                    local = torch.arange(mb.num_replay, device=self.device)
                    txr, _, _ = gather_targets(tx, mb.ids[mb.replay_rows], mb.target_mask[mb.replay_rows], local)
                kl = kl_sum(xr, weight, txr, self.reference.head_weight(), mb.weights[rrows], self.cfg.distill)
        loss = (ce + self.cfg.distill.weight * kl) / N
        return loss, ce, kl

    def _clip(self) -> tuple[float, float]:
        """Squared norms per parameter, summed in canonical order; identical on every worker."""
        sq = torch.zeros(len(self.canonical), dtype=torch.float64, device=self.device)
        names = [n for n in self.params if self.params[n].grad is not None]
        if names:
            local = torch.stack([torch.linalg.vector_norm(self.params[n].grad, dtype=torch.float64) ** 2
                                 for n in names])
            sq[torch.tensor([self.index[n] for n in names], device=self.device)] = local
        self.group.allreduce_sum_(sq)  # each entry is non-zero on exactly one rank: the sum is exact
        norm, factor = clip_factor(sq.cpu().tolist(), self.cfg.max_grad_norm)
        apply_clip(self.params.values(), factor)
        return norm, factor
