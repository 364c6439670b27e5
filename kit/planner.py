"""Capacity planner: which contiguous Llama blocks each worker owns, and whether a worker may start.

`plan` returns the contiguous assignment of blocks to workers in rank order that minimises the
estimated peak utilisation, by an exact search in rational arithmetic with a fixed tie-break;
`admit` then compares a worker's estimate with the memory actually free, because advertised memory
is not proof of available resources. The memory model term by term: docs/planner.md.
Layer 0: stdlib only (no torch); free memory is measured elsewhere and passed in.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from kit.model.config import LlamaShape

GIB = 1 << 30

TIE_BREAK_RULE = (
    "minimise (1) the peak memory utilisation max_w(estimate_w / memory_w), then (2) the bottleneck "
    "time max_w(blocks_w / speed_w), then (3) the sum of squared memory utilisations, then (4) take the "
    "lexicographically smallest cut positions; all comparisons in exact rational arithmetic"
)


class PlanError(ValueError):
    """No contiguous assignment fits, or the planner's inputs are inconsistent."""


class AdmissionError(ValueError):
    """A worker's estimate exceeds the memory it actually has free."""


def _gib(n: float) -> str:
    return f"{n / GIB:.3f} GiB"


def _require_int(owner: str, field: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{owner}: field {field!r} = {value!r}; expected an integer >= {minimum}")


def _require_number(owner: str, field: str, value, positive: bool = False) -> None:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    ok = ok and (value > 0 if positive else value >= 0)
    if not ok:
        expected = "a finite number > 0" if positive else "a finite number >= 0"
        raise ValueError(f"{owner}: field {field!r} = {value!r}; expected {expected}")


@dataclass(frozen=True)
class WorkerCapacity:
    name: str
    memory_bytes: int
    speed: float = 1.0  # relative compute speed; enters only as the secondary objective of `plan`

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"WorkerCapacity: field 'name' = {self.name!r}; expected a non-empty string")
        _require_int(f"WorkerCapacity {self.name!r}", "memory_bytes", self.memory_bytes, 1)
        _require_number(f"WorkerCapacity {self.name!r}", "speed", self.speed, positive=True)


@dataclass(frozen=True)
class MicrobatchShape:
    batch: int
    seq_len: int
    in_flight: int  # microbatches whose saved activations are alive at once under the schedule
    # Embedding owner: microbatches whose FP32 (batch, seq_len, hidden) lookup gradient it keeps until the
    # update's deferred embedding backward (kit/distributed/pipeline.py); 0 counts none (the planner's old model).
    lookup_grads: int = 0

    def __post_init__(self):
        for f in ("batch", "seq_len", "in_flight"):
            _require_int("MicrobatchShape", f, getattr(self, f), 1)
        _require_int("MicrobatchShape", "lookup_grads", self.lookup_grads, 0)

    @property
    def tokens(self) -> int:
        return self.batch * self.seq_len


@dataclass(frozen=True)
class MemoryModel:
    """Bytes per owned parameter, activation coefficients and the reserve; defaults are the CPU FP32 regime.

    The kit's engine on GPU: `MemoryModel.gpu_bf16()` (calibrated on an H200; docs/planner.md). The
    activation coefficients count saved tensors per token (see `activation_bytes_per_token_per_block`).
    """

    master_bytes: int = 4  # FP32 master weights
    grad_bytes: int = 4  # FP32 gradients
    adam_bytes: int = 8  # two FP32 moments
    compute_copy_bytes: int = 0  # 0 on CPU (FP32 compute uses the master); 2 with a bf16 copy
    reference_bytes: int = 4  # frozen reference share: 4 FP32, 2 bf16
    activation_bytes: int = 4  # element size of saved activations (4 FP32, 2 bf16)
    act_hidden_coeff: float = 4.0  # x h: block input, mid-block residual, both RMSNorm outputs
    act_q_coeff: float = 2.0  # x heads*head_dim: queries after RoPE, attention output (o_proj input)
    act_kv_coeff: float = 2.0  # x kv_heads*head_dim: keys after RoPE, values
    act_mlp_coeff: float = 4.0  # x intermediate: gate, up, SiLU(gate), SiLU(gate)*up (down_proj input)
    act_score_coeff: float = 0.0  # x heads*seq_len: 0 for fused attention; 1 to keep eager softmax probs
    head_act_coeff: float = 2.0  # x h, embedding owner: final-norm input and output (head input)
    logits_chunk_tokens: int = 1024  # tokens per chunk of the chunked logits/loss
    logits_elem_bytes: int = 4  # logits and loss are computed in FP32
    logits_factor: float = 4.0  # student logits, their log-softmax, reference log-probs, logits gradient
    # Per in-flight microbatch and per matmul weight of an owned block: the low-precision weight casts
    # a torch.compile'd block saves for its backward (2 in the GPU regime; 0 on CPU, where FP32 compute
    # reads the master). A fixed cost per microbatch, so it dominates when microbatches are short.
    saved_weight_bytes: int = 0
    reserve_bytes: int = 0  # fixed per-worker reserve (runtime context, allocator); from the contract
    reserve_fraction: float = 0.0  # extra margin as a fraction of the modelled subtotal

    def __post_init__(self):
        for f in (
            "master_bytes",
            "grad_bytes",
            "adam_bytes",
            "compute_copy_bytes",
            "reference_bytes",
            "saved_weight_bytes",
            "reserve_bytes",
        ):
            _require_int("MemoryModel", f, getattr(self, f), 0)
        for f in ("activation_bytes", "logits_chunk_tokens", "logits_elem_bytes"):
            _require_int("MemoryModel", f, getattr(self, f), 1)
        for f in (
            "act_hidden_coeff",
            "act_q_coeff",
            "act_kv_coeff",
            "act_mlp_coeff",
            "act_score_coeff",
            "head_act_coeff",
            "logits_factor",
            "reserve_fraction",
        ):
            _require_number("MemoryModel", f, getattr(self, f))

    @classmethod
    def gpu_bf16(cls, reserve_bytes: int = 0, reserve_fraction: float = 0.0) -> MemoryModel:
        """The kit's GPU regime (`GPU_BF16`): bf16 autocast over FP32 masters with torch.compile'd blocks
        (the engine's default on CUDA), fused attention, a bf16 reference. docs/planner.md derives it."""
        return cls(**GPU_BF16, reserve_bytes=reserve_bytes, reserve_fraction=reserve_fraction)

    @property
    def bytes_per_param(self) -> int:
        return (
            self.master_bytes
            + self.grad_bytes
            + self.adam_bytes
            + self.compute_copy_bytes
            + self.reference_bytes
        )

    def activation_bytes_per_token_per_block(self, shape: LlamaShape, seq_len: int) -> float:
        """Saved-for-backward bytes of one token in one Llama block (no recomputation).

        elements = c_h*hidden + c_q*heads*head_dim + c_kv*kv_heads*head_dim + c_mlp*intermediate
                   + c_score*heads*seq_len; bytes = elements * activation_bytes.
        """
        s = shape
        elements = (
            self.act_hidden_coeff * s.hidden_size
            + self.act_q_coeff * s.num_attention_heads * s.head_dim
            + self.act_kv_coeff * s.num_key_value_heads * s.head_dim
            + self.act_mlp_coeff * s.intermediate_size
            + self.act_score_coeff * s.num_attention_heads * seq_len
        )
        return elements * self.activation_bytes


# The GPU regime's fields (docs/planner.md, "The GPU regime"), read off the tensors a torch.compile'd
# block saves for backward under bf16 autocast (tests/test_planner_gpu_regime.py lists them on CPU):
# per token 8 hidden-sized tensors (block input, two norm outputs, q, k, v, attention output, the
# mid-block residual's norm input) and 3 intermediate-sized ones (gate, up, SiLU(gate)*up) in bf16;
# per microbatch the bf16 casts of the block's seven matmul weights. The compiled graph recomputes
# nothing of the weights, and no FP32 compute copy of the masters exists (compute_copy_bytes 0).
GPU_BF16: dict[str, Any] = {"compute_copy_bytes": 0, "reference_bytes": 2, "activation_bytes": 2, "act_mlp_coeff": 3.0,
            "saved_weight_bytes": 2}


def block_matmul_param_count(shape: LlamaShape) -> int:
    """Weights of one block that enter a matmul (q, k, v, o, gate, up, down): what the compiled block
    casts to the compute dtype and saves per microbatch."""
    h, i, d = shape.hidden_size, shape.intermediate_size, shape.head_dim
    return (2 * h * shape.num_attention_heads * d + 2 * h * shape.num_key_value_heads * d + 3 * h * i)


@dataclass(frozen=True)
class WorkerEstimate:
    blocks: tuple[int, int]  # [start, stop)
    owns_embedding: bool
    param_count: int
    components: dict[str, int]  # bytes per component, reserve included
    total: int

    def to_json(self) -> dict:
        return {
            "blocks": list(self.blocks),
            "owns_embedding": self.owns_embedding,
            "param_count": self.param_count,
            "components": dict(self.components),
            "total": self.total,
        }


def embedding_param_count(shape: LlamaShape) -> int:
    """Parameters outside the blocks: embeddings, the untied head (0 when tied) and the final norm."""
    return shape.param_count() - shape.num_hidden_layers * shape.block_param_count()


def estimate_worker(
    shape: LlamaShape, blocks: range, owns_embedding: bool, mb: MicrobatchShape, model: MemoryModel
) -> WorkerEstimate:
    """The estimated peak bytes of a worker owning `blocks` (and the embeddings when `owns_embedding`)."""
    n_layers = shape.num_hidden_layers
    if not isinstance(blocks, range) or blocks.step != 1 or not 0 <= blocks.start <= blocks.stop <= n_layers:
        raise ValueError(
            f"estimate_worker: blocks = {blocks!r}; expected range(start, stop) within [0, {n_layers}]"
        )
    n = len(blocks)
    params = n * shape.block_param_count() + (embedding_param_count(shape) if owns_embedding else 0)
    act_per_token = n * model.activation_bytes_per_token_per_block(shape, mb.seq_len)
    if owns_embedding:
        act_per_token += model.head_act_coeff * shape.hidden_size * model.activation_bytes
    logits = 0
    if owns_embedding:
        chunk = min(model.logits_chunk_tokens, mb.tokens)
        logits = math.ceil(chunk * shape.vocab_size * model.logits_elem_bytes * model.logits_factor)
    components = {
        "master_weights": params * model.master_bytes,
        "gradients": params * model.grad_bytes,
        "adam_moments": params * model.adam_bytes,
        "compute_copy": params * model.compute_copy_bytes,
        "reference": params * model.reference_bytes,
        "activations": math.ceil(mb.in_flight * (mb.tokens * act_per_token
                                                 + n * block_matmul_param_count(shape) * model.saved_weight_bytes)),
        "logits_buffers": logits,
        "lookup_gradients": mb.lookup_grads * mb.tokens * shape.hidden_size * 4 if owns_embedding else 0,
    }
    subtotal = sum(components.values())
    components["reserve"] = model.reserve_bytes + math.ceil(model.reserve_fraction * subtotal)
    return WorkerEstimate(
        (blocks.start, blocks.stop),
        bool(owns_embedding),
        params,
        components,
        subtotal + components["reserve"],
    )


@dataclass(frozen=True)
class Plan:
    workers: tuple[WorkerCapacity, ...]
    ranges: list[tuple[int, int]]
    estimates: list[WorkerEstimate]
    utilizations: list[float]
    peak_utilization: float
    embedding_owner: int
    microbatch: MicrobatchShape
    memory_model: MemoryModel

    def to_json(self) -> dict:
        """A JSON-ready report (floats allowed: it is not a hashed record)."""
        return {
            "embedding_owner": self.embedding_owner,
            "peak_utilization": self.peak_utilization,
            "tie_break": TIE_BREAK_RULE,
            "microbatch": asdict(self.microbatch),
            "memory_model": asdict(self.memory_model),
            "workers": [
                {
                    "name": w.name,
                    "memory_bytes": w.memory_bytes,
                    "speed": w.speed,
                    "blocks": list(r),
                    "utilization": u,
                    "estimate": e.to_json(),
                }
                for w, r, e, u in zip(self.workers, self.ranges, self.estimates, self.utilizations)
            ],
        }


def _max_counts(values: list[list], threshold) -> list[int]:
    """Per worker, the largest block count whose value is <= threshold (values are nondecreasing in count)."""
    return [sum(1 for v in row if v <= threshold) for row in values]


def _min_max(values: list[list], n_layers: int):
    """The smallest T such that counts n_w >= 1 with values[w][n_w - 1] <= T can sum to n_layers.

    With at most m_w admissible counts per worker, a composition exists iff sum(m_w) >= n_layers and
    every m_w >= 1 (the counts can then be lowered one at a time to reach n_layers exactly).
    Feasibility is monotone in T, so a binary search over the candidate values is exact.
    """
    candidates = sorted({v for row in values for v in row})
    lo, hi = 0, len(candidates) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        counts = _max_counts(values, candidates[mid])
        if min(counts) >= 1 and sum(counts) >= n_layers:
            hi = mid
        else:
            lo = mid + 1
    return candidates[lo]


def _min_sum_smallest_cuts(costs: list[list], caps: list[int], n_layers: int) -> list[int]:
    """Counts n_w in [1, caps[w]] summing to n_layers that minimise sum costs[w][n_w - 1]; among optima,
    the lexicographically smallest cut positions. Backward DP, then a forward walk taking the smallest
    count that stays optimal (so each cut is as early as any optimum allows)."""
    n_workers = len(caps)
    inf = None
    # best[w][i]: minimal cost for workers w.. covering blocks [i, n_layers); None when impossible
    best: list[list[Fraction | None]] = [[inf] * (n_layers + 1) for _ in range(n_workers + 1)]
    best[n_workers][n_layers] = Fraction(0)
    for w in range(n_workers - 1, -1, -1):
        for i in range(n_layers):
            for n in range(1, min(caps[w], n_layers - i) + 1):
                rest = best[w + 1][i + n]
                if rest is None:
                    continue
                cand = costs[w][n - 1] + rest
                if best[w][i] is None or cand < best[w][i]:
                    best[w][i] = cand
    assert best[0][0] is not None, "caller guarantees a feasible composition"
    counts, i = [], 0
    for w in range(n_workers):
        for n in range(1, min(caps[w], n_layers - i) + 1):
            rest = best[w + 1][i + n]
            if rest is not None and costs[w][n - 1] + rest == best[w][i]:
                counts.append(n)
                i += n
                break
    assert i == n_layers and len(counts) == n_workers
    return counts


def plan(
    shape: LlamaShape,
    workers: list[WorkerCapacity] | tuple[WorkerCapacity, ...],
    mb: MicrobatchShape,
    model: MemoryModel,
    embedding_owner: int = 0,
) -> Plan:
    """The contiguous assignment minimising peak estimated utilisation (exact; ties: TIE_BREAK_RULE).

    Blocks are identical in shape, so a worker's estimate depends only on how many blocks it owns and
    whether it owns the embeddings; the search runs over block counts per worker in rank order.
    Speed does not change memory: it is the secondary objective (bottleneck blocks/speed among
    assignments with the minimal peak), so among equally tight plans faster workers get more blocks.
    """
    workers = tuple(workers)
    n_workers, n_layers = len(workers), shape.num_hidden_layers
    if n_workers == 0:
        raise PlanError("plan: no workers given; expected at least one")
    names = [w.name for w in workers]
    if len(set(names)) != n_workers:
        raise PlanError(f"plan: worker names {names!r} are not unique")
    if (
        isinstance(embedding_owner, bool)
        or not isinstance(embedding_owner, int)
        or not (0 <= embedding_owner < n_workers)
    ):
        raise PlanError(
            f"plan: embedding_owner = {embedding_owner!r}; expected a worker index in [0, {n_workers})"
        )
    if n_workers > n_layers:
        raise PlanError(
            f"plan: {n_workers} workers but the model has {n_layers} blocks; every worker needs at least "
            f"one block, so use at most {n_layers} workers"
        )
    max_count = n_layers - (n_workers - 1)
    totals = [
        [
            estimate_worker(shape, range(n), w == embedding_owner, mb, model).total
            for n in range(1, max_count + 1)
        ]
        for w in range(n_workers)
    ]
    util = [[Fraction(t, workers[w].memory_bytes) for t in totals[w]] for w in range(n_workers)]
    peak = _min_max(util, n_layers)
    mem_caps = _max_counts(util, peak)
    times = [
        [Fraction(n) / Fraction(workers[w].speed) for n in range(1, mem_caps[w] + 1)]
        for w in range(n_workers)
    ]
    bottleneck_time = _min_max(times, n_layers)
    caps = [min(m, c) for m, c in zip(mem_caps, _max_counts(times, bottleneck_time))]
    counts = _min_sum_smallest_cuts([[u * u for u in row] for row in util], caps, n_layers)

    ranges, estimates, start = [], [], 0
    for w, n in enumerate(counts):
        ranges.append((start, start + n))
        estimates.append(estimate_worker(shape, range(start, start + n), w == embedding_owner, mb, model))
        start += n
    exact_util = [Fraction(e.total, w.memory_bytes) for e, w in zip(estimates, workers)]
    assert max(exact_util) == peak
    if peak > 1:
        over = [
            f"{w.name!r} blocks [{r[0]}, {r[1]}) needs {_gib(e.total)} of {_gib(w.memory_bytes)}, "
            f"short by {_gib(e.total - w.memory_bytes)} ({e.total - w.memory_bytes} bytes)"
            for w, r, e in zip(workers, ranges, estimates)
            if e.total > w.memory_bytes
        ]
        worst = max(range(n_workers), key=lambda w: (exact_util[w], -w))
        shortfall = estimates[worst].total - workers[worst].memory_bytes
        raise PlanError(
            f"plan: unsatisfiable; the best achievable peak utilisation is {float(peak):.4f} "
            f"(worker {workers[worst].name!r}, short by {_gib(shortfall)}); "
            f"over capacity in that assignment: {'; '.join(over)}"
        )
    return Plan(
        workers, ranges, estimates, [float(u) for u in exact_util], float(peak), embedding_owner, mb, model
    )


def admit(estimate: WorkerEstimate, free_bytes: int, worker_name: str) -> None:
    """Refuse to start a worker whose estimate exceeds the memory measured free on it right now."""
    _require_int(f"admit {worker_name!r}", "free_bytes", free_bytes, 0)
    if estimate.total > free_bytes:
        raise AdmissionError(
            f"worker {worker_name!r} refused admission: estimated peak {_gib(estimate.total)} "
            f"({estimate.total} bytes) for blocks [{estimate.blocks[0]}, {estimate.blocks[1]})"
            f"{' plus embeddings' if estimate.owns_embedding else ''} exceeds the {_gib(free_bytes)} "
            f"({free_bytes} bytes) actually free, short by {_gib(estimate.total - free_bytes)}"
        )


def shape_with_growth(shape: LlamaShape, extra_blocks: int) -> LlamaShape:
    """The shape after appending `extra_blocks` blocks (the grown depth the planner must place)."""
    _require_int("shape_with_growth", "extra_blocks", extra_blocks, 0)
    return shape.with_layers(shape.num_hidden_layers + extra_blocks)
