"""Assistant-token cross entropy on new records and KL toward the frozen reference on replay records.

Only positions that predict an assistant target reach the output head, in chunks inside a custom
autograd function, so full-vocabulary logits are never materialised for a whole microbatch.
The decision to know: the update's loss is divided by N, the GLOBAL count of assistant targets of the
whole update, known before the first microbatch, so the sum of per-microbatch contributions is the
same however the update is split across microbatches and workers (docs/engine.md, "Loss").
KL directions, temperature and precision: the notes below.

Notes: the objective, the KL and the precision.

    L = ( sum_{new targets} w_d * CE(t)  +  kl_weight * sum_{replay targets} w_d * KL(t) ) / N
w_d the document's weight, N the update's global count of assistant targets (new and replay, unweighted).
KL (default "forward", T = 1): forward = KL(p_ref || p_student), reverse = KL(p_student || p_ref), both on
softmax(logits / T) and scaled by T^2 (Hinton et al.) so gradient magnitudes do not shrink with T.
With `compute_dtype` bfloat16 a chunk's three products (logits, d/dx, d/dW) run in bf16 whatever autocast says, the
head weight cast once per call; logits, softmax, loss sums and accumulated gradients stay FP32. Without it the path
is plain FP32 (the CPU bit-identity tests). Target positions come from CPU masks, so gathering them on a GPU needs
no `nonzero` and no device-to-host synchronisation inside the update.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kit.train import compiled_loss

DEFAULT_CHUNK_ELEMENTS = 1 << 26  # positions x vocab per chunk (256 MiB of FP32 logits)


@dataclass(frozen=True)
class DistillConfig:
    weight: float = 1.0
    temperature: float = 1.0
    direction: str = "forward"

    def __post_init__(self):
        if self.direction not in ("forward", "reverse"):
            raise ValueError(f"distillation direction {self.direction!r}; expected 'forward' or 'reverse'")
        if not self.temperature > 0 or not self.weight >= 0:
            raise ValueError(f"distillation temperature {self.temperature} must be > 0 and weight {self.weight} >= 0")


def _low(weight, weight_low, dtype):
    """The head weight in the products' dtype: its cached copy (kit/model/weight_cache.py, the same bits
    as the cast) when given, else one cast per call."""
    if weight_low is None:
        return weight.to(dtype)
    if weight_low.dtype != dtype or weight_low.shape != weight.shape:
        raise ValueError(f"head weight copy {weight_low.dtype} {tuple(weight_low.shape)}; expected {dtype} "
                         f"{tuple(weight.shape)}")
    return weight_low


def _step(vocab: int, chunk_elements: int) -> int:
    return max(1, chunk_elements // max(1, vocab))


def _finish(ctx, x, weight, dx, dw, total):
    ctx.save_for_backward(dx, dw)
    ctx.x_dtype, ctx.w_dtype = x.dtype, weight.dtype
    return total.float()


class _CrossEntropySum(torch.autograd.Function):
    """sum_i w_i * CE(x_i W^T, y_i), with d/dx and d/dW computed chunk by chunk in forward (the chunk loop
    and its math: kit/train/compiled_loss.py, eager or compiled)."""

    @staticmethod
    def forward(ctx, x, weight, targets, token_w, chunk_elements, compute_dtype, weight_low, compiled=False):
        w = _low(weight, weight_low, compute_dtype or x.dtype)  # once per call, not per chunk
        dx = torch.empty_like(x, dtype=torch.float32)
        dw = torch.zeros_like(weight, dtype=torch.float32)
        total = compiled_loss.run_chunks("ce", x, w, dx, dw, token_w, _step(weight.shape[0], chunk_elements),
                                         targets=targets, compiled=compiled)
        return _finish(ctx, x, weight, dx, dw, total)

    @staticmethod
    def backward(ctx, grad_out):
        dx, dw = ctx.saved_tensors
        return (dx * grad_out).to(ctx.x_dtype), (dw * grad_out).to(ctx.w_dtype), None, None, None, None, None, None


class _KLSum(torch.autograd.Function):
    """sum_i w_i * T^2 * KL between softmax(student/T) and softmax(reference/T) at each position (the chunk
    loop and its math: kit/train/compiled_loss.py, eager or compiled)."""

    @staticmethod
    def forward(ctx, x, weight, ref_x, ref_weight, token_w, temperature, reverse, chunk_elements, compute_dtype,
                weight_low, compiled=False):
        w = _low(weight, weight_low, compute_dtype or x.dtype)
        rw = ref_weight.to(compute_dtype or ref_x.dtype)
        dx = torch.empty_like(x, dtype=torch.float32)
        dw = torch.zeros_like(weight, dtype=torch.float32)
        total = compiled_loss.run_chunks("kl_reverse" if reverse else "kl_forward", x, w, dx, dw, token_w,
                                         _step(weight.shape[0], chunk_elements), ref_x=ref_x, ref_w=rw,
                                         T=float(temperature), compiled=compiled)
        return _finish(ctx, x, weight, dx, dw, total)

    @staticmethod
    def backward(ctx, grad_out):
        dx, dw = ctx.saved_tensors
        return ((dx * grad_out).to(ctx.x_dtype), (dw * grad_out).to(ctx.w_dtype),
                None, None, None, None, None, None, None, None, None)


def cross_entropy_sum(x, weight, targets, token_w, chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
                      compute_dtype: torch.dtype | None = None, weight_low: torch.Tensor | None = None,
                      compiled: bool = False):
    """x: (n, C) final-normed hidden at target positions; weight: (V, C); targets: (n,); token_w: (n,).
    `compute_dtype` (e.g. torch.bfloat16): dtype of the matrix products; None: x's dtype. `weight_low`:
    weight already in that dtype (the weight cache), used instead of casting it. `compiled`: each chunk
    as one torch.compile'd function (kit/train/compiled_loss.py; EngineConfig.compiled_loss)."""
    if x.shape[0] == 0:
        return (x.sum() * 0 + weight.sum() * 0).float()
    return _CrossEntropySum.apply(x, weight, targets, token_w, chunk_elements, compute_dtype, weight_low, compiled)


def kl_sum(x, weight, ref_x, ref_weight, token_w, cfg: DistillConfig, chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
           compute_dtype: torch.dtype | None = None, weight_low: torch.Tensor | None = None, compiled: bool = False):
    if x.shape[0] == 0:
        return (x.sum() * 0 + weight.sum() * 0).float()
    if ref_x.shape != x.shape or ref_weight.shape != weight.shape:
        raise ValueError(f"reference shapes {tuple(ref_x.shape)}/{tuple(ref_weight.shape)} differ from the "
                         f"student's {tuple(x.shape)}/{tuple(weight.shape)}")
    return _KLSum.apply(x, weight, ref_x, ref_weight, token_w, cfg.temperature, cfg.direction == "reverse",
                        chunk_elements, compute_dtype, weight_low, compiled)


def update_objective(ce_sum, kl_sum, kl_weight: float, total_targets: int):
    """The update's objective, L = (sum CE + kl_weight * sum KL) / N, with N the global count of
    assistant target tokens of the whole update (docs/engine.md, "Loss and normalisation"). Works on
    tensors (a microbatch's differentiable part) and on floats (the update's reported value) alike."""
    return (ce_sum + kl_weight * kl_sum) / total_targets


@dataclass
class LossParts:
    """Sums over one microbatch or a whole update (add them); `objective` is already divided by N."""

    ce_sum: float = 0.0
    kl_sum: float = 0.0
    new_tokens: int = 0
    replay_tokens: int = 0
    objective: float = 0.0

    def __add__(self, other: LossParts) -> LossParts:
        return LossParts(self.ce_sum + other.ce_sum, self.kl_sum + other.kl_sum,
                         self.new_tokens + other.new_tokens, self.replay_tokens + other.replay_tokens,
                         self.objective + other.objective)

    def to_json(self) -> dict:
        return {
            "ce_sum": self.ce_sum, "kl_sum": self.kl_sum,
            "new_tokens": self.new_tokens, "replay_tokens": self.replay_tokens,
            "ce_per_token": self.ce_sum / self.new_tokens if self.new_tokens else None,
            "kl_per_token": self.kl_sum / self.replay_tokens if self.replay_tokens else None,
            "objective": self.objective,
        }


def target_positions(target_mask: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(local, token) index pairs of the target tokens of `rows`, row-major; `rows[local]` is the row.

    target_mask[b, t] marks token t as a target; it is predicted from position t - 1, so token 0
    is never a target. Call it on CPU tensors and move the result: `nonzero` on a GPU tensor
    would synchronise the host with the device.
    """
    mask = target_mask[rows].clone()
    mask[:, 0] = False
    local, t = mask.nonzero(as_tuple=True)
    return local, t
