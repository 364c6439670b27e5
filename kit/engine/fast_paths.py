"""The engine's speed choices applied to a built model, which itself holds only the plain math.

As torchtitan applies compile to a built model, `apply_fast_paths` (called by `build_worker`) turns on
what `EngineConfig` asks (docs/performance.md, "Fast paths"): the bf16 weight copy (kit/model/weight_cache.py)
in the blocks' linears, the fused norms and SwiGLU (kit/model/fused.py), then `torch.compile` of each block.
The CPU default takes none of them, so the CPU path is the model file's, bit for bit.

The decision to know: a module is changed by swapping its class for a subclass defined here (as
`torch.nn.utils.parametrize` does), so parameter names, the Parameter objects the optimizer holds and
checkpoints stay exactly the model's. The swapped modules take their fast path only while
`FastPaths.engaged()` is entered (the engine's stage forward); elsewhere (the seed build's learning
curve reads the same model) they run the model file's own forward.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
from torch import nn

from kit.distributed.pipeline import EngineConfig
from kit.model import fused as fz
from kit.model.llama import MLP, Block, LlamaCausalLM
from kit.model.weight_cache import WeightCache, cached_linear


@dataclass
class FastPaths:
    """What was applied to a stage: `weight_cache` (refreshed by the engine after each step; its `head`
    copy feeds the loss) or None, `fused` (the fused elementwise in student and reference blocks)."""

    weight_cache: WeightCache | None = None
    fused: bool = False
    graph_capture: bool = False  # the compiled blocks as CUDA graphs (EngineConfig.graph_capture)
    active: bool = field(default=False, repr=False)

    @contextlib.contextmanager
    def engaged(self):
        """The swapped modules take their fast path inside this block only."""
        before, self.active = self.active, True
        try:
            yield
        finally:
            self.active = before


class _WeightCopyLinear(nn.Linear):
    """A bias-free linear that, engaged, multiplies by its weight's compute-dtype copy `_low` (through
    kit/model/weight_cache.py's autograd function `_CachedLinear`)."""

    _paths: FastPaths
    _low: torch.Tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._paths.active:
            return cached_linear(x, self, self._low)
        return super().forward(x)


class _FusedMLP(MLP):
    _paths: FastPaths

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self._paths.active:
            return super().forward(x)
        return self.down_proj(fz.swiglu(self.gate_proj(x), self.up_proj(x)))


class _FusedBlock(Block):
    """The norms written with their residual add (the same values as the modules' up to bf16 rounding:
    tests/test_fused_paths.py derives the bounds)."""

    _paths: FastPaths

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        if not self._paths.active:
            return super().forward(x, cos, sin)
        n1, n2 = self.input_layernorm, self.post_attention_layernorm
        x, h = fz.add_rms_norm(x, self.self_attn(fz.rms_norm(x, n1.weight, n1.eps), cos, sin), n2.weight, n2.eps)
        return x + self.mlp(h)


def _swap(module: nn.Module, cls: type, paths: FastPaths, **attrs) -> None:
    if type(module) not in (cls, cls.__mro__[1]):
        raise TypeError(f"{type(module).__name__} cannot take the fast path {cls.__name__}")
    module.__class__ = cls
    # plain attributes: not a submodule, parameter or buffer, so no name changes
    for k, v in {"_paths": paths, **attrs}.items():
        setattr(module, k, v)


def apply_fast_paths(student: LlamaCausalLM, reference: LlamaCausalLM | None, cfg: EngineConfig,
                     device: torch.device) -> FastPaths:
    """Apply `cfg`'s weight cache, fused elementwise and block compilation to the stage's modules, in
    place; the returned FastPaths is what the engine engages, refreshes and reports."""
    dtype = getattr(torch, cfg.compute_dtype)
    paths = FastPaths()
    if cfg.enabled("weight_cache", device) and dtype != torch.float32:
        paths.weight_cache = WeightCache(student, dtype)
        for bid, parts in paths.weight_cache.blocks.items():
            block = student.model.layers[bid]
            for part, copies in parts.items():
                for name, low in copies.items():
                    _swap(block.get_submodule(f"{part}.{name}"), _WeightCopyLinear, paths, _low=low)
    if cfg.enabled("fused_elementwise", device):
        paths.fused = True
        for model in (student, reference):
            for block in (model.model.layers.values() if model is not None else ()):
                _swap(block, _FusedBlock, paths)
                _swap(block.get_submodule("mlp"), _FusedMLP, paths)
    if cfg.compile_blocks == "auto" and device.type == "cuda":
        paths.graph_capture = cfg.enabled("graph_capture", device)
        options = {"mode": "reduce-overhead"} if paths.graph_capture else {}
        if paths.graph_capture and paths.weight_cache is not None:
            # the copies are rewritten in place, so a graph may keep their addresses instead of copying
            # every weight into its own input buffer at each replay
            wc = paths.weight_cache
            for copy in [t for e in wc.blocks.values() for part in e.values() for t in part.values()] + [wc.head]:
                if copy is not None:
                    torch._dynamo.mark_static_address(copy)
        compile_blocks(student, **options)
        if reference is not None:
            compile_blocks(reference, **options)
    return paths


def compile_blocks(model: LlamaCausalLM, **options) -> None:
    """`torch.compile` each block in place (parameter names unchanged). The blocks share one compiled
    graph: parameters (and the weight copies) are graph inputs, so block 2..n reuse block 1's
    compilation. CUDA only; CPU runs stay eager and bit-exact."""
    for block in model.model.layers.values():
        block.compile(**options)

