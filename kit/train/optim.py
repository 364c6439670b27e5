"""AdamW with per-named-parameter state, and clipping whose factor does not depend on the worker count.

State per parameter: FP32 moments, its own step count ("Adam age") and its group, so a block added
by growth starts its own Adam clock. The update is torch.optim.AdamW's formula written out so the
state is ours to commit (foreach on CPU, the fused kernel on CUDA). The decision to know: the global
squared norm is summed in the canonical parameter order, so the clip factor is bit-identical for
any layout (docs/engine.md, "Clipping in canonical order").
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

import torch

from kit.contract import LR_MAX, LR_MIN, WEIGHT_DECAY_MAX
from kit.numerics import correctly_rounded_sqrt
from kit.train.adam_cache import adamw_and_cast


@dataclass(frozen=True)
class GroupConfig:
    lr: float
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.0

    @staticmethod
    def from_json(obj: dict, source: str) -> GroupConfig:
        allowed = {"lr", "beta1", "beta2", "eps", "weight_decay"}
        unknown = set(obj) - allowed
        if unknown:
            raise ValueError(f"{source}: unknown optimizer field(s) {sorted(unknown)}; allowed {sorted(allowed)}")
        if "lr" not in obj:
            raise ValueError(f"{source}: optimizer group lacks 'lr'")
        g = GroupConfig(**{k: float(v) for k, v in obj.items()})
        if not (LR_MIN <= g.lr <= LR_MAX and 0 <= g.beta1 < 1 and 0 <= g.beta2 < 1 and 0 < g.eps < math.inf
                and 0 <= g.weight_decay <= WEIGHT_DECAY_MAX and math.copysign(1.0, g.weight_decay) > 0):
            raise ValueError(f"{source}: optimizer group {obj} out of range; expected lr in [{LR_MIN}, {LR_MAX}], "
                             f"beta1 and beta2 in [0, 1), eps > 0 and finite, weight_decay in [0, {WEIGHT_DECAY_MAX}]")
        return g


def assign_groups(names: Iterable[str], rules: Sequence[tuple[str, str]], default: str = "default") -> dict[str, str]:
    """First matching fnmatch pattern wins; e.g. [("*norm.weight", "no_decay")]."""
    out = {}
    for n in names:
        out[n] = next((g for pat, g in rules if fnmatch.fnmatchcase(n, pat)), default)
    return out


@dataclass(slots=True)
class AdamState:
    """One parameter's Adam state. Not frozen: the optimizer advances it in place every step (the moments are
    updated by in-place kernels, the age counts the parameter's own steps)."""

    group: str  # its optimizer group (kit/train/optim.py GroupConfig by name)
    age: int  # Adam steps this parameter took: its bias correction
    exp_avg: torch.Tensor  # FP32 first moment
    exp_avg_sq: torch.Tensor  # FP32 second moment


class ParamAdamW:
    def __init__(self, params: dict[str, torch.nn.Parameter], groups: dict[str, GroupConfig],
                 group_of: dict[str, str], fused: bool | None = None):
        """`fused`: None picks the fused kernel when every parameter is an FP32 CUDA tensor."""
        missing = [n for n in params if group_of.get(n) not in groups]
        if missing:
            raise ValueError(f"parameters without a configured optimizer group: {missing[:5]}")
        self.params = params
        self.groups = groups
        self.state: dict[str, AdamState] = {}
        for n, p in params.items():
            self.state[n] = AdamState(
                group=group_of[n],
                age=0,
                exp_avg=torch.zeros_like(p, dtype=torch.float32, memory_format=torch.contiguous_format),
                exp_avg_sq=torch.zeros_like(p, dtype=torch.float32, memory_format=torch.contiguous_format),
            )
        fusable = bool(params) and all(p.is_cuda and p.dtype == torch.float32 for p in params.values())
        if fused and not fusable:
            raise ValueError("ParamAdamW(fused=True) needs every parameter to be an FP32 CUDA tensor")
        self.fused = fusable if fused is None else bool(fused)
        # name -> 0-d FP32 view of one device buffer holding the parameter's age (keep_steps_on_device);
        # None: the fused path builds each bucket's step values afresh (torch.full) every step
        self.device_steps: dict[str, torch.Tensor] | None = None
        # name -> the weight cache's compute-dtype copy that the step writes (write_copies); None: the cache
        # refreshes itself after the step
        self.copies: dict[str, torch.Tensor] | None = None

    def write_copies(self, copies: dict[str, torch.Tensor]) -> None:
        """The step writes each named parameter's new value into its compute-dtype copy too, in the same compiled
        pass (kit/train/adam_cache.py, `EngineConfig.adam_writes_cache`)."""
        unknown = sorted(set(copies) - set(self.params))
        if unknown:
            raise ValueError(f"weight copies for parameters the optimizer does not hold: {unknown[:5]}")
        self.copies = dict(copies)

    def keep_steps_on_device(self) -> None:
        """The fused path's step counts live on the device, one FP32 buffer for all parameters, advanced
        by one multi-tensor add per step instead of one `torch.full` per (group, age) bucket. The kernel
        reads the same values (the ages, exact in FP32 below 2^24), so the update is bit-identical. The
        foreach path (CPU) has no step tensors: there it changes nothing."""
        if self.fused:
            self._load_device_steps()

    def _load_device_steps(self) -> None:
        """The device buffer from the host ages (at start and after a checkpoint load: one copy, not per step)."""
        names = sorted(self.params)
        device = self.params[names[0]].device
        ages = torch.tensor([float(self.state[n].age) for n in names], dtype=torch.float32)
        self.device_steps = dict(zip(names, ages.to(device).unbind()))

    def zero_grad(self) -> None:
        for p in self.params.values():
            p.grad = None

    @torch.no_grad()
    def step(self, grad_factor: float | torch.Tensor = 1.0, found_inf: torch.Tensor | None = None) -> None:
        """One AdamW step. `grad_factor` (the canonical clip factor, <= 1) scales every gradient first:
        in place on the foreach path (exactly `apply_clip`), inside the fused kernel on CUDA (as its
        grad_scale = 1 / factor, which saves a pass over the gradients). A device tensor factor and
        `found_inf` (kit/train/device_clip.py) keep the step free of host synchronisation: a non-zero
        `found_inf` makes the fused kernel leave parameters and moments untouched."""
        if found_inf is not None and not self.fused and bool(found_inf):
            return  # the foreach path checks on the host (CPU): the same skip
        if not self.fused:
            if torch.is_tensor(grad_factor):
                grads = [p.grad for p in self.params.values() if p.grad is not None]
                if grads:
                    torch._foreach_mul_(grads, grad_factor.to(torch.float32))
            else:
                apply_clip(self.params.values(), grad_factor)
        grad_scale = None
        if self.fused and torch.is_tensor(grad_factor):
            grad_scale = (1.0 / grad_factor).to(torch.float32)
        elif self.fused and grad_factor < 1.0:
            device = next(iter(self.params.values())).device
            grad_scale = torch.full((), 1.0 / float(grad_factor), dtype=torch.float32, device=device)  # not a tensor here
        buckets: dict[tuple[str, int], list[str]] = {}
        for n in sorted(self.params):
            if self.params[n].grad is None:
                continue  # no gradient: the parameter's Adam clock does not advance
            st = self.state[n]
            st.age += 1
            buckets.setdefault((st.group, st.age), []).append(n)
        if self.fused and self.device_steps is not None and buckets:
            torch._foreach_add_([self.device_steps[n] for names in buckets.values() for n in names], 1.0)
        for (group, age), names in sorted(buckets.items()):
            g = self.groups[group]
            if self.copies is not None:
                names = self._step_writing_copies(g, age, names, grad_factor, found_inf)
                if not names:
                    continue
            ps: list[torch.Tensor] = [self.params[n] for n in names]
            grads = cast(list[torch.Tensor], [p.grad for p in ps])  # a bucket holds only parameters with a grad
            m = [self.state[n].exp_avg for n in names]
            v = [self.state[n].exp_avg_sq for n in names]
            if self.fused:
                steps = [self.device_steps[n] for n in names] if self.device_steps is not None else None
                self._fused_step(g, age, ps, grads, m, v, grad_scale, found_inf, steps)
                continue
            if g.weight_decay:
                torch._foreach_mul_(ps, 1 - g.lr * g.weight_decay)
            torch._foreach_lerp_(m, grads, 1 - g.beta1)
            torch._foreach_mul_(v, g.beta2)
            torch._foreach_addcmul_(v, grads, grads, value=1 - g.beta2)
            step_size = g.lr / (1 - g.beta1**age)
            bc2_sqrt = math.sqrt(1 - g.beta2**age)
            # on the CPU, not torch's sqrt, whose bits depend on the CPU (kit.numerics.correctly_rounded_sqrt)
            denom = torch._foreach_sqrt(v) if v[0].is_cuda else correctly_rounded_sqrt(v)
            torch._foreach_div_(denom, bc2_sqrt)
            torch._foreach_add_(denom, g.eps)
            torch._foreach_addcdiv_(ps, m, denom, value=-step_size)

    def _step_writing_copies(self, g: GroupConfig, age: int, names: list[str], grad_factor, found_inf) -> list[str]:
        """The bucket's parameters that have a compute-dtype copy stepped by the compiled pass that writes it; the
        others' names returned for the usual step. The foreach path scaled the gradients and checked `found_inf`
        on the host already; the fused path leaves both to the step."""
        copies = self.copies
        assert copies is not None  # the caller steps this way only with copies to write
        cached = [n for n in names if n in copies]
        if cached:
            ps = [self.params[n] for n in cached]
            adamw_and_cast(ps, [p.grad for p in ps], [self.state[n].exp_avg for n in cached],
                           [self.state[n].exp_avg_sq for n in cached], [copies[n] for n in cached], age=age,
                           lr=g.lr, beta1=g.beta1, beta2=g.beta2, eps=g.eps, weight_decay=g.weight_decay,
                           factor=grad_factor if self.fused else 1.0, found_inf=found_inf if self.fused else None,
                           compiled=ps[0].is_cuda)  # on a CPU ("on" there) inductor would only add compile time
        return [n for n in names if n not in copies]

    @staticmethod
    def _fused_step(g: GroupConfig, age: int, ps, grads, m, v, grad_scale, found_inf=None, steps=None) -> None:
        # The kernel reads each tensor's step from a device scalar (no host sync); one buffer of
        # `age` values, unbound into per-parameter views, serves the whole bucket (or the persistent
        # per-parameter steps, keep_steps_on_device, which hold the same values).
        if steps is None:
            steps = torch.full((len(ps),), float(age), dtype=torch.float32, device=ps[0].device).unbind()
        torch._fused_adamw_(ps, grads, m, v, [], list(steps), amsgrad=False, lr=g.lr, beta1=g.beta1,
                            beta2=g.beta2, weight_decay=g.weight_decay, eps=g.eps, maximize=False,
                            grad_scale=grad_scale, found_inf=found_inf)

    # --- state for checkpoints --------------------------------------------------------------
    def param_states(self) -> dict[str, dict]:
        return {
            n: {"group": st.group, "age": st.age, "param": self.params[n].detach(),
                "exp_avg": st.exp_avg, "exp_avg_sq": st.exp_avg_sq}
            for n, st in self.state.items()
        }

    @torch.no_grad()
    def load_param_states(self, states: dict[str, dict], source: str = "checkpoint") -> None:
        missing = sorted(set(self.params) - set(states))
        if missing:
            raise ValueError(f"{source}: no state for owned parameter(s) {missing[:5]}")
        for n, p in self.params.items():
            s = states[n]
            for key in ("param", "exp_avg", "exp_avg_sq"):
                if tuple(s[key].shape) != tuple(p.shape):
                    raise ValueError(f"{source}: {n}.{key} has shape {list(s[key].shape)}; expected {list(p.shape)}")
            if s["group"] not in self.groups:
                raise ValueError(f"{source}: {n} is in group {s['group']!r}, which the contract does not configure")
            p.copy_(s["param"])
            st = self.state[n]
            st.exp_avg.copy_(s["exp_avg"])
            st.exp_avg_sq.copy_(s["exp_avg_sq"])
            st.age = int(s["age"])
            st.group = s["group"]
        if self.device_steps is not None:
            self._load_device_steps()


# --- canonical clipping --------------------------------------------------------------------
def clip_factor(sq_norms_in_canonical_order: Sequence[float], max_norm: float) -> tuple[float, float]:
    """(global norm, factor): the sum runs in canonical order, so it is the same on every worker."""
    total = 0.0
    for s in sq_norms_in_canonical_order:
        total += s
    norm = math.sqrt(total)
    if not math.isfinite(norm):
        raise FloatingPointError(f"gradient norm is not finite ({norm}); refusing to update")
    factor = min(1.0, max_norm / (norm + 1e-6)) if max_norm > 0 else 1.0
    return norm, factor


@torch.no_grad()
def apply_clip(params: Iterable[torch.nn.Parameter], factor: float) -> None:
    if factor < 1.0:
        grads = [p.grad for p in params if p.grad is not None]
        if grads:
            torch._foreach_mul_(grads, factor)  # the same elementwise product as p.grad.mul_(factor)
