"""Owned blocks only: the layout of blocks over workers, building a worker's stage, and loading
only its tensors from a Hugging Face directory (`safetensors.safe_open` by name).

A layout is one contiguous half-open block range per worker, in rank order; rank 0 owns block 0
and is the embedding owner, which also holds the (tied) output head and the final norm. The
canonical parameter order is the full model's `named_parameters()` order; clipping sums in it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from kit.inventory import inventory
from kit.model.config import LlamaShape
from kit.model.llama import LlamaCausalLM

EMBEDDING_OWNER = 0


class LayoutError(ValueError):
    pass


@dataclass(frozen=True)
class Layout:
    ranges: tuple[tuple[int, int], ...]
    embedding_owner: int = EMBEDDING_OWNER

    @property
    def workers(self) -> int:
        return len(self.ranges)

    @property
    def num_layers(self) -> int:
        return self.ranges[-1][1] if self.ranges else 0

    def blocks_of(self, rank: int) -> range:
        a, b = self.ranges[rank]
        return range(a, b)

    def validate(self, num_layers: int, source: str = "layout") -> Layout:
        if not self.ranges:
            raise LayoutError(f"{source}: no worker ranges")
        if len(self.ranges) > num_layers:
            raise LayoutError(f"{source}: {len(self.ranges)} workers but only {num_layers} blocks; "
                              "each worker needs at least one block")
        if self.embedding_owner != EMBEDDING_OWNER:
            raise LayoutError(f"{source}: embedding_owner = {self.embedding_owner}; expected 0 "
                              "(the worker holding block 0 embeds and therefore owns the tied head)")
        expect = 0
        for rank, (a, b) in enumerate(self.ranges):
            if a != expect:
                what = "misses" if a > expect else "repeats"
                raise LayoutError(f"{source}: worker {rank} range [{a}, {b}) {what} block "
                                  f"{min(a, expect)}; ranges must be contiguous from 0")
            if b <= a:
                raise LayoutError(f"{source}: worker {rank} range [{a}, {b}) is empty")
            expect = b
        if expect != num_layers:
            raise LayoutError(f"{source}: ranges end at block {expect}; the model has {num_layers} blocks")
        return self

    def to_json(self) -> dict:
        return {"blocks": [list(r) for r in self.ranges], "embedding_owner": self.embedding_owner}

    @staticmethod
    def from_json(obj: dict, source: str = "layout") -> Layout:
        try:
            return Layout(tuple((int(a), int(b)) for a, b in obj["blocks"]), int(obj["embedding_owner"]))
        except (KeyError, TypeError, ValueError) as e:
            raise LayoutError(f"{source}: expected {{'blocks': [[a, b], ...], 'embedding_owner': 0}} ({e})") from None


def even_layout(num_layers: int, workers: int) -> Layout:
    """Contiguous split with the remainder going to the later workers (rank 0 also holds the head)."""
    if workers > num_layers:
        raise LayoutError(f"{workers} workers but only {num_layers} blocks; each worker needs a block")
    base, extra = divmod(num_layers, workers)
    sizes = [base + (1 if r >= workers - extra else 0) for r in range(workers)]
    ranges, a = [], 0
    for s in sizes:
        ranges.append((a, a + s))
        a += s
    return Layout(tuple(ranges))


def build_stage(shape: LlamaShape, layout: Layout, rank: int, device="cpu") -> LlamaCausalLM:
    """Allocate only `rank`'s blocks (and the embedding/head/norm on the embedding owner)."""
    layout.validate(shape.num_hidden_layers)
    with torch.device(device):
        return LlamaCausalLM(shape, layout.blocks_of(rank), with_embedding=rank == layout.embedding_owner)


def canonical_names(shape: LlamaShape) -> list[str]:
    """The full model's parameter names in `named_parameters()` order, without allocating it."""
    with torch.device("meta"):
        full = LlamaCausalLM(shape)
    return [n for n, _ in full.named_parameters()]


def load_owned(model: LlamaCausalLM, seed_dir: str | os.PathLike, dtype=torch.float32) -> int:
    """Copy this stage's tensors from the directory's safetensors files; returns bytes read.

    Only the owned names are opened (`safe_open(...).get_tensor(name)`), so no worker ever
    materialises a full model. A missing tensor or a shape mismatch is refused naming the file.
    """
    seed_dir = Path(seed_dir)
    inv = inventory(seed_dir)
    wanted = dict(model.named_parameters())
    for name, p in wanted.items():
        if name not in inv:
            raise ValueError(f"{seed_dir}: tensor {name!r} is missing from the safetensors files")
        if tuple(inv[name].shape) != tuple(p.shape):
            raise ValueError(f"{inv[name].file}: tensor {name!r} has shape {list(inv[name].shape)}; "
                             f"expected {list(p.shape)} from config.json")
    by_file: dict[Path, list[str]] = {}
    for name in wanted:
        by_file.setdefault(inv[name].file, []).append(name)
    read = 0
    with torch.no_grad():
        for file, names in sorted(by_file.items()):
            with safe_open(str(file), framework="pt") as f:
                for name in names:
                    t = f.get_tensor(name)
                    wanted[name].copy_(t.to(dtype))
                    read += inv[name].nbytes
    return read


def stage_bytes(model: torch.nn.Module) -> tuple[int, int]:
    """(parameter count, bytes) held by a stage."""
    n = sum(p.numel() for p in model.parameters())
    b = sum(p.numel() * p.element_size() for p in model.parameters())
    return n, b
