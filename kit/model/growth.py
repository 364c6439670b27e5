"""The append transition: K new residual blocks that are the identity at insertion (Net2Net-style).

Each new block copies one prior block's internal weights (norms, q/k/v, gate/up) and sets the two
projections that write into the residual stream, `self_attn.o_proj` and `mlp.down_proj`, to zero,
so the block adds exactly zero and the model's function is unchanged. Existing weights, both
moments and ages are untouched; new parameters get zero moments, their own optimizer group and
age 0, i.e. an Adam clock that starts at the current global cursor.

Growth works on learned-state entries (names, shapes and object digests), not on tensors: a copied
weight has the same bytes as its source, hence the same content address, so nothing but the zero
tensors is written. Identity at insertion says nothing about whether the capacity helps quality.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

ZEROED_AT_INSERTION = ("self_attn.o_proj.weight", "self_attn.o_proj.bias", "mlp.down_proj.weight", "mlp.down_proj.bias")


def layer_prefix(i: int) -> str:
    return f"model.layers.{i}."


class LearnedEntry(Protocol):
    """A learned-state entry as growth reads it (kit.store.manifest.ParamEntry, a frozen dataclass): its name,
    shape and parameter object; the copy also sets `group`, `age` and both moments."""

    @property
    def name(self) -> str: ...

    @property
    def shape(self) -> Sequence[int]: ...

    @property
    def param(self) -> str: ...


E = TypeVar("E", bound=LearnedEntry)


def grown_entries(entries: Sequence[E], num_layers: int, add: int, copy_from: int, group: str,
                  zero_object: Callable[[Sequence[int]], str]) -> list[E]:
    """Learned-state entries with `add` blocks appended after block `num_layers - 1`, sorted by name: each new
    entry a copy of its source block's (`dataclasses.replace`), in group `group` at age 0 with zero moments.

    `zero_object(shape)` stores an FP32 zero tensor and returns its digest.
    """
    if add < 1:
        raise ValueError(f"growth adds {add} blocks; expected at least 1")
    if not 0 <= copy_from < num_layers:
        raise ValueError(f"growth copies block {copy_from}; expected one of 0..{num_layers - 1}")
    src_prefix = layer_prefix(copy_from)
    source = [e for e in entries if e.name.startswith(src_prefix)]
    if not source:
        raise ValueError(f"learned state has no parameters of block {copy_from}")
    out = list(entries)
    for k in range(add):
        prefix = layer_prefix(num_layers + k)
        if any(e.name.startswith(prefix) for e in entries):
            raise ValueError(f"learned state already has block {num_layers + k}")
        for e in source:
            suffix = e.name[len(src_prefix):]
            zero = zero_object(e.shape)
            out.append(dataclasses.replace(e, name=prefix + suffix, group=group, age=0,  # type: ignore[type-var]
                                           param=zero if suffix in ZEROED_AT_INSERTION else e.param,
                                           exp_avg=zero, exp_avg_sq=zero))
    return sorted(out, key=lambda e: e.name)
