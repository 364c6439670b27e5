"""PowerSGD gradient compression on plain tensors, with the all-reduce injected as a callable.

The math (rank-r power iteration, orthogonalisation, error feedback, warm start, as torch's
`powerSGD_hook`) is testable in one process; the distributed layer supplies only
`allreduce_mean(tensors)`. The decision to know: every decision depends only on shapes, the config
and already all-reduced values, so every rank makes the same calls in the same order, and the first
Q comes from a generator seeded by (seed, name), so ranks agree without communication.
The algorithm step by step: the notes below; docs/study.md, "PowerSGD".

Notes: the step, the orthonormalisation and its numbers.

`allreduce_mean` averages contiguous FP32 tensors in place and must leave bitwise-identical values on every rank
(gloo's and NCCL's ring all-reduces do); in one process the identity is one. Per call after the warm-up, with M the
gradient as (shape[0], prod(rest)), as torch's `powerSGD_hook`:
    M += e;  Q = orth(Q);  P = M Q;  mean(P);  P = orth(P);  Q = M^T P;  mean(Q);  sent = P Q^T;  e = M - sent
every P in one flat all-reduce, every Q in another, plus one dense one for vectors and small tensors.
`orthonormalize_` is a batched Householder QR in elementwise ops and fixed-order sums (no LAPACK or BLAS: equal
bytes on every x86 CPU). The batch is scaled by a power of two; a column with |R_kk| <= 2^-24 x the Frobenius norm
is dead (zero, no reflector), and dead Q columns are re-drawn from the seeded generator. No absolute epsilon, so
gradients scaled by 10^k give outputs scaled alike; the Gram-Schmidt with `/ (norm + 1e-8)` it replaced turned
rounding noise into directions (bench/powersgd_oracle.py; tests/test_powersgd_oracle.py checks the kit against
`powerSGD_hook` through DDP). Nothing reads `orthogonalization_epsilon`: contracts carry it. Error buffers stay FP32
on the CPU (pinned with CUDA); dense tensors and the warm-up keep none. Traffic counts the FP32 bytes handed to the
all-reduce (wire bytes: kit/distributed/traffic.py).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields

import torch

from kit.digest import sha256_json
from kit.record import SEED, Num, Opt, Record, spec_field

AllreduceMean = Callable[[list[torch.Tensor]], None]

# /2: Householder orthonormalisation with relative dead columns; a /1 (Gram-Schmidt) state continued here
# would not be what the Gram-Schmidt code that wrote it goes on to compute, so it is refused.
STATE_FORMAT = "kit.powersgd/2"
FP32_BYTES = 4
# Fields that change what is computed; a resumed run must match them exactly.
_RESULT_FIELDS = (
    "rank", "warmup_updates", "min_compression_numel", "min_compression_rate", "warm_start", "seed",
)


@dataclass(frozen=True)
class PowerSGDConfig:
    rank: int = 32
    warmup_updates: int = 8
    # Tensors with fewer elements, 1-D tensors, and matrices where rank*(n+m)*rate >= n*m go dense.
    min_compression_numel: int = 1024
    # As torch's `min_compression_rate`; 1.0 is "compress only if P and Q are smaller than M".
    min_compression_rate: float = 1.0
    warm_start: bool = True
    seed: int = 0
    # Read and validated because contracts and older records carry it; since kit.powersgd/2 nothing
    # uses it: dead columns are decided relative to each matrix's norm (orthonormalize_).
    orthogonalization_epsilon: float = 1e-8
    error_feedback_device: str = "cpu"
    pin_memory: bool | None = None  # None: pinned when CUDA is available and the device is the CPU

    def __post_init__(self):
        def need(ok: bool, field: str, expected: str):
            if not ok:
                raise ValueError(f"PowerSGDConfig.{field}: expected {expected}, got {getattr(self, field)!r}")

        def is_int(v) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        need(is_int(self.rank) and self.rank >= 1, "rank", "an integer >= 1")
        need(is_int(self.warmup_updates) and self.warmup_updates >= 0, "warmup_updates", "an integer >= 0")
        need(is_int(self.min_compression_numel) and self.min_compression_numel >= 0,
             "min_compression_numel", "an integer >= 0")
        need(isinstance(self.min_compression_rate, (int, float)) and not isinstance(self.min_compression_rate, bool)
             and math.isfinite(self.min_compression_rate) and self.min_compression_rate >= 0,
             "min_compression_rate", "a finite number >= 0")
        need(isinstance(self.warm_start, bool), "warm_start", "a bool")
        need(is_int(self.seed) and self.seed >= 0, "seed", "an integer >= 0")
        need(isinstance(self.orthogonalization_epsilon, (int, float)) and not isinstance(
            self.orthogonalization_epsilon, bool) and math.isfinite(self.orthogonalization_epsilon)
             and self.orthogonalization_epsilon > 0, "orthogonalization_epsilon", "a finite number > 0")
        need(isinstance(self.error_feedback_device, str), "error_feedback_device", "a torch device string")
        need(self.pin_memory is None or isinstance(self.pin_memory, bool), "pin_memory", "a bool or None")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping, source: str = "powersgd config") -> PowerSGDConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{source}: unknown PowerSGDConfig fields {unknown}; expected a subset of {sorted(known)}")
        return cls(**dict(data))


def q_seed(seed: int, name: str, tag: str) -> int:
    """A 60-bit generator seed from (config seed, parameter name, draw tag); the same on every rank."""
    return int(sha256_json({"seed": seed, "name": name, "tag": tag})[:15], 16)


def draw_q(seed: int, name: str, tag: str, m: int, r: int) -> torch.Tensor:
    """A standard-normal (m, r) FP32 CPU matrix from a generator seeded by `q_seed`."""
    gen = torch.Generator(device="cpu").manual_seed(q_seed(seed, name, tag))
    return torch.randn(m, r, generator=gen, dtype=torch.float32)


# A column whose residual |R_kk| is at most this (float32's unit roundoff) times the matrix's Frobenius
# norm is dead: below what float32 resolves in that matrix. Why not larger: a column just above it in
# a rank-deficient P = M Q (rounding of the matmul, ~sqrt(m) ulps) still carries the correction of the
# live columns' own rounding; kept as an orthonormal direction, as torch's QR keeps it, it costs
# nothing, while dropping everything under 2^-20 took a rank-6 gradient's error from 2.5e-7 to 2.2e-6.
DEAD_COLUMN_RELATIVE = 2.0**-24


def _power_of_two_scale(matrices: torch.Tensor) -> torch.Tensor:
    """Per matrix, the power of two 2^-e that brings its largest |entry| into [0.5, 1), shape (b, 1, 1).

    Built from the exponent bits, not pow(): multiplying by it is exact (no rounding, no libm), so the
    orthonormalisation sees the same numbers for a gradient and for that gradient times any power of two.
    """
    amax = matrices.abs().amax(dim=(1, 2))
    _, exponent = torch.frexp(amax)  # amax = mantissa * 2^exponent, mantissa in [0.5, 1); 0 -> 0
    biased = (127 - exponent).clamp(1, 254).to(torch.int32)  # float32 bits of 2^-exponent
    return (biased << 23).view(torch.float32).view(-1, 1, 1)


def _reflect_(block: torch.Tensor, v: torch.Tensor, beta: torch.Tensor) -> None:
    """block <- (I - beta v v^T) block for a batch: block (b, n, c), v (b, n), beta (b,).

    Elementwise products and a sum over rows, not a matmul: ATen's reduction under the numeric profile
    rounds the same on every x86 CPU, where a BLAS call's blocking depends on the CPU's code path.
    """
    w = (v.unsqueeze(2) * block).sum(dim=1, keepdim=True)  # (b, 1, c) = v^T block
    block -= (beta.unsqueeze(1) * v).unsqueeze(2) * w


def orthonormalize_(matrices: torch.Tensor) -> torch.Tensor:
    """Orthonormalise the columns of a batch (b, n, r), n >= r, in place, FP32; return the dead mask (b, r).

    Householder QR with deflation, in plain elementwise torch ops and sums of fixed order (no LAPACK
    or BLAS, whose code paths round differently on different CPUs). Column k is reduced against the
    reflectors of the live columns before it; when what is left has norm |R_kk| <= 2^-24 * ||A||_F,
    the column is rounding noise of the earlier ones (a gradient of rank below r, or a condition
    number past float32), so it is dead: it comes out as zero and takes no reflector, so the live
    columns after it keep all of their own signal. Live columns come out orthonormal to rounding
    whatever the rank or conditioning (Gram-Schmidt's do not: it normalises the noise of a dependent
    column into a direction the earlier columns already hold). No absolute epsilon: the matrix is
    first scaled by an exact power of two and the threshold is relative, so the result does not
    depend on the gradient's magnitude. A zero matrix comes out zero with every column dead.
    """
    assert matrices.dim() == 3 and matrices.dtype == torch.float32 and matrices.shape[1] >= matrices.shape[2]
    b, n, r = matrices.shape
    a = matrices * _power_of_two_scale(matrices)
    threshold = DEAD_COLUMN_RELATIVE * torch.linalg.vector_norm(a, dim=(1, 2))  # (b,)
    rows = torch.arange(n, device=a.device)
    pivot = torch.zeros(b, dtype=torch.long, device=a.device)  # per matrix: the next row to pivot on
    dead = torch.zeros(b, r, dtype=torch.bool, device=a.device)
    pivots, reflectors, betas = [], [], []
    for k in range(r):
        below = (rows.unsqueeze(0) >= pivot.unsqueeze(1)).to(a.dtype)  # (b, n): rows not yet pivoted
        x = a[:, :, k] * below
        sigma = torch.linalg.vector_norm(x, dim=1)
        is_dead = sigma <= threshold
        lead = x.gather(1, pivot.unsqueeze(1)).squeeze(1)
        sign = torch.where(lead >= 0, 1.0, -1.0)
        # v = x - alpha e_pivot with alpha = -sign * sigma (no cancellation); v.v = 2 sigma (sigma + |lead|)
        v = x.scatter_add(1, pivot.unsqueeze(1), (sign * sigma).unsqueeze(1))
        beta = torch.where(is_dead, 0.0, 1.0 / (sigma * (sigma + lead.abs())).clamp_min(torch.finfo(a.dtype).tiny))
        if k + 1 < r:  # reflect the remaining columns: A <- A - beta v (v^T A)
            _reflect_(a[:, :, k + 1 :], v, beta)
        dead[:, k] = is_dead
        pivots.append(pivot)
        reflectors.append(v)
        betas.append(beta)
        pivot = pivot + (~is_dead).long()
    # Q's live column k is H_0 ... H_k e_pivot(k); accumulate backwards, dead columns start (and stay)
    # zero. H_k leaves the columns before k alone (e_pivot(j) with pivot(j) < pivot(k), where v_k is 0).
    q = torch.zeros_like(a)
    for k in range(r):
        q[:, :, k].scatter_(1, pivots[k].unsqueeze(1), (~dead[:, k]).to(a.dtype).unsqueeze(1))
    for k in reversed(range(r)):
        _reflect_(q[:, :, k:], reflectors[k], betas[k])
    matrices.copy_(q)
    return dead


def _orthonormalize_all_(mats: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Orthonormalise 2-D matrices in place, batching those of equal shape (fewer kernel launches);
    returns each matrix's dead-column mask (r,)."""
    by_shape: dict[tuple, list[int]] = defaultdict(list)
    for i, mat in enumerate(mats):
        by_shape[tuple(mat.shape)].append(i)
    dead: list = [None] * len(mats)
    for group in by_shape.values():
        if len(group) == 1:
            dead[group[0]] = orthonormalize_(mats[group[0]].unsqueeze(0))[0]
            continue
        stacked = torch.stack([mats[i] for i in group])
        masks = orthonormalize_(stacked)
        for j, i in enumerate(group):
            mats[i].copy_(stacked[j])
            dead[i] = masks[j]
    return dead


@dataclass(frozen=True)
class _Matrix:
    name: str
    shape: tuple[int, ...]
    n: int
    m: int
    r: int


COUNT = Num(0, SEED.hi, integer=True)  # calls, bytes and columns over a whole run: beyond a count of tasks


@dataclass(frozen=True, slots=True, kw_only=True)
class CallColumns(Record):
    """One compressed call's orthonormalisation: dead P columns, dead Q columns, Q columns re-drawn."""

    p_dead: int = spec_field(COUNT, doc="dead columns of the all-reduced P")
    q_dead: int = spec_field(COUNT, doc="dead columns of Q")
    q_redrawn: int = spec_field(COUNT, doc="Q columns re-drawn from the seeded generator")


@dataclass(frozen=True, slots=True, kw_only=True)
class ColumnCounts(Record):
    """The orthonormalisation counters of the state (docs/formats/study-records.md, "powersgd")."""

    p_dead: int = spec_field(COUNT, doc="dead P columns (the all-reduced M Q was rank-deficient or ill-conditioned)")
    q_dead: int = spec_field(COUNT, doc="dead Q columns")
    q_redrawn: int = spec_field(COUNT, doc="Q columns re-drawn")
    calls_with_dead_p: int = spec_field(COUNT, doc="compressed calls with a dead P column")

    def plus(self, call: CallColumns) -> ColumnCounts:
        return ColumnCounts(p_dead=self.p_dead + call.p_dead, q_dead=self.q_dead + call.q_dead,
                            q_redrawn=self.q_redrawn + call.q_redrawn,
                            calls_with_dead_p=self.calls_with_dead_p + int(call.p_dead > 0))


@dataclass(frozen=True, slots=True, kw_only=True)
class CallRecord(Record):
    """One `reduce` call's logical traffic (FP32 bytes a rank contributes to all-reduces)."""

    step: int = spec_field(COUNT, doc="reduce() calls before this one")
    warmup: bool = spec_field(bool, doc="a dense warm-up call")
    allreduce_calls: int = spec_field(COUNT, doc="all-reduces issued")
    dense_equivalent_bytes: int = spec_field(COUNT, doc="bytes of every gradient sent dense")
    dense_sent_bytes: int = spec_field(COUNT, doc="bytes of the gradients sent dense")
    p_bytes: int = spec_field(COUNT, doc="bytes of P")
    q_bytes: int = spec_field(COUNT, doc="bytes of Q")
    compressed_bytes: int = spec_field(COUNT, doc="bytes sent: dense ones, P and Q")
    columns: CallColumns | None = spec_field(Opt(CallColumns), doc="null for a call that compressed nothing")


@dataclass(frozen=True, slots=True, kw_only=True)
class Traffic(Record):
    """The cumulative logical traffic of the state, with and without warm-up."""

    calls: int = spec_field(COUNT, doc="reduce() calls")
    warmup_calls: int = spec_field(COUNT, doc="of them dense warm-up calls")
    dense_equivalent_bytes: int = spec_field(COUNT, doc="bytes had every call been dense")
    compressed_bytes: int = spec_field(COUNT, doc="bytes sent")
    dense_equivalent_bytes_after_warmup: int = spec_field(COUNT, doc="the same, warm-up calls left out")
    compressed_bytes_after_warmup: int = spec_field(COUNT, doc="the same, warm-up calls left out")

    def plus(self, call: CallRecord) -> Traffic:
        after = 0 if call.warmup else 1
        return Traffic(calls=self.calls + 1, warmup_calls=self.warmup_calls + (1 - after),
                       dense_equivalent_bytes=self.dense_equivalent_bytes + call.dense_equivalent_bytes,
                       compressed_bytes=self.compressed_bytes + call.compressed_bytes,
                       dense_equivalent_bytes_after_warmup=self.dense_equivalent_bytes_after_warmup
                       + after * call.dense_equivalent_bytes,
                       compressed_bytes_after_warmup=self.compressed_bytes_after_warmup + after * call.compressed_bytes)


NO_TRAFFIC = Traffic(calls=0, warmup_calls=0, dense_equivalent_bytes=0, compressed_bytes=0,
                     dense_equivalent_bytes_after_warmup=0, compressed_bytes_after_warmup=0)
NO_COLUMNS = ColumnCounts(p_dead=0, q_dead=0, q_redrawn=0, calls_with_dead_p=0)


class PowerSGDCompressor:
    """Compresses named gradients; one instance per rank, all built from the same config and shapes."""

    def __init__(self, config: PowerSGDConfig, named_shapes: Mapping[str, Sequence[int]]):
        self.config = config
        self.shapes = {name: tuple(int(d) for d in shape) for name, shape in sorted(named_shapes.items())}
        self.error_device = torch.device(config.error_feedback_device)
        pin = torch.cuda.is_available() and self.error_device.type == "cpu" if config.pin_memory is None \
            else config.pin_memory
        if pin and (self.error_device.type != "cpu" or not torch.cuda.is_available()):
            raise ValueError("PowerSGDConfig.pin_memory: True needs error_feedback_device 'cpu' and CUDA present")
        self.pin_memory = pin
        self.matrices: dict[str, _Matrix] = {}
        self.dense_names: list[str] = []
        for name, shape in self.shapes.items():
            matrix = self._plan(name, shape)
            if matrix is None:
                self.dense_names.append(name)
            else:
                self.matrices[name] = matrix
        self.step = 0  # reduce() calls completed, warm-up included
        self._errors: dict[str, torch.Tensor] = {}  # allocated at the first compressed call
        self._q: dict[str, torch.Tensor] = {}
        if config.warm_start:
            for mat in self.matrices.values():
                self._q[mat.name] = draw_q(config.seed, mat.name, "init", mat.m, mat.r)
        self.traffic = NO_TRAFFIC
        self.last_call: CallRecord | None = None
        self.columns = NO_COLUMNS
        self._last_columns: CallColumns | None = None

    def _plan(self, name: str, shape: tuple[int, ...]) -> _Matrix | None:
        if any(d < 0 for d in shape):
            raise ValueError(f"named_shapes[{name!r}]: expected non-negative sizes, got {shape}")
        numel = math.prod(shape)
        if len(shape) < 2 or numel == 0 or numel < self.config.min_compression_numel:
            return None
        n, m = shape[0], numel // shape[0]
        r = min(n, m, self.config.rank)
        if r * (n + m) * self.config.min_compression_rate >= n * m:
            return None
        return _Matrix(name, shape, n, m, r)

    @property
    def in_warmup(self) -> bool:
        return self.step < self.config.warmup_updates

    def reduce(self, named_grads: Mapping[str, torch.Tensor], allreduce_mean: AllreduceMean) -> dict[str, torch.Tensor]:
        """The averaged (approximated) gradient per name, in each gradient's dtype; updates the state."""
        grads = self._checked(named_grads)
        calls = 0
        out: dict[str, torch.Tensor] = {}
        warmup = self.in_warmup
        dense_names = list(self.shapes) if warmup else self.dense_names
        calls += self._dense_mean_into(out, dense_names, grads, allreduce_mean)
        p_numel = q_numel = 0
        self._last_columns = None
        if not warmup and self.matrices:
            p_numel, q_numel = self._compress_into(out, grads, allreduce_mean)
            calls += 2
        dense_bytes = sum(math.prod(s) for s in self.shapes.values()) * FP32_BYTES
        dense_sent = sum(math.prod(self.shapes[n]) for n in dense_names) * FP32_BYTES
        record = CallRecord(
            step=self.step, warmup=warmup, allreduce_calls=calls,
            dense_equivalent_bytes=dense_bytes, dense_sent_bytes=dense_sent,
            p_bytes=p_numel * FP32_BYTES, q_bytes=q_numel * FP32_BYTES,
            compressed_bytes=dense_sent + (p_numel + q_numel) * FP32_BYTES,
            columns=self._last_columns,
        )
        self.traffic = self.traffic.plus(record)
        self.last_call = record
        self.step += 1
        return {name: out[name] for name in self.shapes}

    def _checked(self, named_grads: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if set(named_grads) != set(self.shapes):
            missing, extra = sorted(set(self.shapes) - set(named_grads)), sorted(set(named_grads) - set(self.shapes))
            raise ValueError(f"PowerSGD reduce: gradient names differ from named_shapes (missing {missing}, "
                             f"unexpected {extra})")
        devices = set()
        for name, shape in self.shapes.items():
            g = named_grads[name]
            if tuple(g.shape) != shape or not g.is_floating_point():
                raise ValueError(f"PowerSGD reduce: gradient {name!r} expected floating shape {shape}, "
                                 f"got {g.dtype} {tuple(g.shape)}")
            devices.add(g.device)
        if len(devices) > 1:
            raise ValueError(f"PowerSGD reduce: gradients must share one device, got {sorted(map(str, devices))}")
        return {name: named_grads[name].detach() for name in self.shapes}

    @staticmethod
    def _dense_mean_into(out: dict, names: list[str], grads: dict, allreduce_mean: AllreduceMean) -> int:
        """One flat FP32 all-reduce for `names`; returns the number of all-reduce calls made."""
        if not names:
            return 0
        flat = torch.cat([grads[n].reshape(-1).to(torch.float32) for n in names])
        allreduce_mean([flat])
        offset = 0
        for n in names:
            g = grads[n]
            out[n] = flat[offset : offset + g.numel()].view(g.shape).to(g.dtype)
            offset += g.numel()
        return 1

    def _compress_into(self, out: dict, grads: dict, allreduce_mean: AllreduceMean) -> tuple[int, int]:
        mats = list(self.matrices.values())
        device = grads[mats[0].name].device
        ms = []
        for mat in mats:
            # Copy even for FP32 grads: M becomes the new error buffer and must not alias the input.
            m_ = grads[mat.name].reshape(mat.n, mat.m).to(torch.float32, copy=True)
            if mat.name in self._errors:
                m_ += self._errors[mat.name].to(device, non_blocking=self.pin_memory)
            ms.append(m_)
        qs, q_dead, q_redrawn = self._prepared_qs(mats, device)
        p_flat = torch.empty(sum(mat.n * mat.r for mat in mats), dtype=torch.float32, device=device)
        q_flat = torch.empty(sum(mat.m * mat.r for mat in mats), dtype=torch.float32, device=device)
        ps, new_qs, p_off, q_off = [], [], 0, 0
        for mat in mats:
            ps.append(p_flat[p_off : p_off + mat.n * mat.r].view(mat.n, mat.r))
            new_qs.append(q_flat[q_off : q_off + mat.m * mat.r].view(mat.m, mat.r))
            p_off, q_off = p_off + mat.n * mat.r, q_off + mat.m * mat.r
        for m_, q, p in zip(ms, qs, ps):
            torch.matmul(m_, q, out=p)
        allreduce_mean([p_flat])
        p_dead = _orthonormalize_all_(ps)
        for m_, p, q in zip(ms, ps, new_qs):
            torch.matmul(m_.T, p, out=q)
        allreduce_mean([q_flat])
        for mat, m_, p, q in zip(mats, ms, ps, new_qs):
            g = grads[mat.name]
            sent = (p @ q.T).to(g.dtype)
            out[mat.name] = sent.view(mat.shape)
            m_ -= sent.to(torch.float32)  # the local error: what this rank meant to send but did not
            self._store_error(mat, m_)
            if self.config.warm_start:
                self._q[mat.name] = q
        # One host sync per compressed call; P's dead columns are the same on every rank (P is all-reduced).
        self._count_columns(int(torch.stack([d.sum() for d in p_dead]).sum().item()), q_dead, q_redrawn)
        return p_off, q_off

    def _count_columns(self, p_dead: int, q_dead: int, q_redrawn: int) -> None:
        self._last_columns = CallColumns(p_dead=p_dead, q_dead=q_dead, q_redrawn=q_redrawn)
        self.columns = self.columns.plus(self._last_columns)

    def _prepared_qs(self, mats: list[_Matrix], device: torch.device) -> tuple[list[torch.Tensor], int, int]:
        """Orthonormal Q per matrix (warm-started with dead columns re-drawn, or freshly drawn), the
        number of dead columns found and the number re-drawn."""
        seed = self.config.seed
        tag = f"step{self.step}"
        if self.config.warm_start:
            qs = [self._q[mat.name].to(device, torch.float32, copy=True) for mat in mats]
        else:
            qs = [draw_q(seed, mat.name, tag, mat.m, mat.r).to(device) for mat in mats]
        dead = _orthonormalize_all_(qs)
        counts = torch.stack([d.sum() for d in dead]).tolist()  # Q is all-reduced: every rank agrees
        if not self.config.warm_start:
            return qs, sum(counts), 0
        # A zero or low-rank gradient leaves dead columns in Q = M^T P, and warm start would keep them
        # dead (newly grown blocks start exactly so). Re-draw them from the seeded generator and
        # orthonormalise again; every rank takes the same branch and draws the same values.
        for mat, q, mask, count in zip(mats, qs, dead, counts):
            if count:
                cols = mask.nonzero().flatten().cpu()
                q[:, cols.to(device)] = draw_q(seed, mat.name, tag, mat.m, mat.r)[:, cols].to(device)
                orthonormalize_(q.unsqueeze(0))
        return qs, sum(counts), sum(counts)

    def _store_error(self, mat: _Matrix, error: torch.Tensor) -> None:
        buf = self._errors.get(mat.name)
        if buf is None:
            buf = torch.empty((mat.n, mat.m), dtype=torch.float32, device=self.error_device,
                              pin_memory=self.pin_memory)
            self._errors[mat.name] = buf
        buf.copy_(error)  # device -> host copy is synchronous, so `error` may be freed afterwards

    def stats(self) -> dict:
        """Cumulative logical traffic (with and without warm-up), ratios and the last call's record: JSON for
        the study's records."""
        t = self.traffic
        after = t.compressed_bytes_after_warmup
        return {
            **t.to_json(),
            "compression_ratio_after_warmup": t.dense_equivalent_bytes_after_warmup / after if after else None,
            "compression_ratio_overall": t.dense_equivalent_bytes / t.compressed_bytes if t.compressed_bytes else None,
            "step": self.step, "compressed_names": len(self.matrices), "dense_names": len(self.dense_names),
            "last_call": self.last_call.to_json() if self.last_call else None, "columns": self.columns.to_json(),
        }

    def set_q(self, name: str, q: torch.Tensor) -> None:
        """Replace the warm-start Q of `name` (tests align it with another implementation's draw)."""
        mat = self.matrices.get(name)
        if mat is None:
            raise ValueError(f"PowerSGD set_q: {name!r} is not a compressed matrix")
        if tuple(q.shape) != (mat.m, mat.r):
            raise ValueError(f"PowerSGD set_q: {name!r} expected shape {(mat.m, mat.r)}, got {tuple(q.shape)}")
        self._q[name] = q.detach().to("cpu", torch.float32, copy=True)

    # -- checkpoint state ------------------------------------------------------------------------

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """CPU FP32 copies: "error/<name>" (n, m) once compression has started, "q/<name>" (m, r).

        No generator state is needed: every draw uses a fresh generator seeded by (seed, name, tag),
        with the tag derived from the step in `state_meta`.
        """
        out = {f"error/{n}": e.detach().to("cpu", copy=True) for n, e in self._errors.items()}
        out.update({f"q/{n}": q.detach().to("cpu", torch.float32, copy=True) for n, q in self._q.items()})
        return dict(sorted(out.items()))

    def state_meta(self) -> dict:
        """JSON-ready: format, step, config, compressed names, cumulative traffic and column counters."""
        return {
            "format": STATE_FORMAT, "step": self.step, "config": self.config.to_dict(),
            "compressed": sorted(self.matrices), "traffic": self.traffic.to_json(), "columns": self.columns.to_json(),
        }

    def load_state(self, tensors: Mapping[str, torch.Tensor], meta: Mapping) -> None:
        """Restore `state_tensors()`/`state_meta()` exactly; refuses anything that does not fit."""
        src = "powersgd state"
        if meta.get("format") != STATE_FORMAT:
            raise ValueError(f"{src}: field 'format' expected {STATE_FORMAT!r}, got {meta.get('format')!r}")
        saved = PowerSGDConfig.from_dict(meta.get("config", {}), f"{src} field 'config'")
        for field in _RESULT_FIELDS:
            if getattr(saved, field) != getattr(self.config, field):
                raise ValueError(f"{src}: config field {field!r} is {getattr(saved, field)!r} in the checkpoint "
                                 f"but {getattr(self.config, field)!r} here")
        step = meta.get("step")
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ValueError(f"{src}: field 'step' expected an integer >= 0, got {step!r}")
        if meta.get("compressed") != sorted(self.matrices):
            raise ValueError(f"{src}: field 'compressed' lists {meta.get('compressed')!r}, "
                             f"but these shapes compress {sorted(self.matrices)!r}")
        traffic = meta.get("traffic")
        if not isinstance(traffic, Mapping) or set(traffic) != set(Traffic.json_fields()) or not all(
                isinstance(v, int) and v >= 0 for v in traffic.values()):
            raise ValueError(f"{src}: field 'traffic' expected integer counters {sorted(Traffic.json_fields())}")
        columns = meta.get("columns")
        if not isinstance(columns, Mapping) or set(columns) != set(ColumnCounts.json_fields()) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in columns.values()):
            raise ValueError(f"{src}: field 'columns' expected integer counters {sorted(ColumnCounts.json_fields())}")
        has_errors = step > self.config.warmup_updates
        expected = {f"error/{n}": (m.n, m.m) for n, m in self.matrices.items()} if has_errors else {}
        if self.config.warm_start:
            expected.update({f"q/{n}": (m.m, m.r) for n, m in self.matrices.items()})
        if set(tensors) != set(expected):
            raise ValueError(f"{src}: tensors expected keys {sorted(expected)} at step {step}, "
                             f"got {sorted(tensors)}")
        for key, shape in expected.items():
            t = tensors[key]
            if t.dtype != torch.float32 or tuple(t.shape) != shape:
                raise ValueError(f"{src}: tensor {key!r} expected float32 {shape}, got {t.dtype} {tuple(t.shape)}")
        self._errors = {}
        for key, t in tensors.items():
            kind, name = key.split("/", 1)
            if kind == "error":
                self._store_error(self.matrices[name], t)
            else:
                self._q[name] = t.detach().to("cpu", copy=True)
        self.step = step
        self.traffic = Traffic(**traffic)
        self.columns = ColumnCounts(**columns)
        self.last_call = None
