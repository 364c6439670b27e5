"""Training records and their microbatches.

A `TrainRecord` is an encoded conversation: token ids, the mask of target tokens (assistant
content and its end-of-turn token; token t is predicted from position t - 1), a document weight
and whether it is a declared replay record (distilled toward the reference) or new data (cross
entropy). An update's records are split into consecutive microbatches of `microbatch_size`
documents (the last one may be partial); each is right-padded to its longest record, and padding
is never a target. The split depends on the contract only, never on the number of workers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TrainRecord:
    id: str
    input_ids: tuple[int, ...]
    target_mask: tuple[bool, ...]
    weight: float = 1.0
    replay: bool = False

    @property
    def num_targets(self) -> int:
        return sum(self.target_mask[1:])  # token 0 has no predecessor, so it is never a target


@dataclass
class Microbatch:
    ids: torch.Tensor  # (B, T) int64
    target_mask: torch.Tensor  # (B, T) bool
    weights: torch.Tensor  # (B,) float32
    replay: torch.Tensor  # (B,) bool
    replay_rows: torch.Tensor  # (R,) int64, rows of replay records
    new_rows: torch.Tensor  # (B - R,) int64
    new_tokens: int  # target tokens of new records
    replay_tokens: int  # target tokens of replay records

    @property
    def shape(self) -> tuple[int, int]:
        rows, columns = self.ids.shape  # ids is 2-D: (rows, columns)
        return rows, columns

    @property
    def num_replay(self) -> int:
        return int(self.replay_rows.numel())


def validate_records(records: list[TrainRecord], vocab_size: int, source: str = "batch") -> int:
    """Refuse bad records before any work; returns the global target-token count N."""
    if not records:
        raise ValueError(f"{source}: an update needs at least one record")
    total = 0
    for r in records:
        if len(r.input_ids) != len(r.target_mask):
            raise ValueError(f"{source}: record {r.id!r} has {len(r.input_ids)} tokens but "
                             f"{len(r.target_mask)} mask entries")
        if len(r.input_ids) < 2:
            raise ValueError(f"{source}: record {r.id!r} has fewer than 2 tokens")
        if not (math.isfinite(r.weight) and r.weight >= 0):
            raise ValueError(f"{source}: record {r.id!r} weight {r.weight}; expected a finite number >= 0")
        bad = [t for t in r.input_ids if not 0 <= t < vocab_size]
        if bad:
            raise ValueError(f"{source}: record {r.id!r} has token id {bad[0]} outside the vocabulary (size {vocab_size})")
        total += r.num_targets
    if total == 0:
        raise ValueError(f"{source}: no assistant target tokens in the {len(records)} records of this update")
    return total


def make_microbatches(records: list[TrainRecord], microbatch_size: int, pad_id: int = 0,
                      device: torch.device | str = "cpu", length_bucket: int = 0) -> list[Microbatch]:
    """Consecutive groups of `microbatch_size` records, right-padded to the group's longest record, or,
    with `length_bucket` > 0, up to the next multiple of it (so a GPU sees few distinct lengths and
    reuses its attention plans). Padding is never a target and, attention being causal, no real
    position sees it: the loss is the same function of the real tokens either way."""
    if microbatch_size < 1:
        raise ValueError(f"microbatch_size {microbatch_size}; expected >= 1")
    if length_bucket < 0:
        raise ValueError(f"length_bucket {length_bucket}; expected >= 0 (0: no bucketing)")
    out = []
    for a in range(0, len(records), microbatch_size):
        chunk = records[a:a + microbatch_size]
        T = max(len(r.input_ids) for r in chunk)
        if length_bucket:
            T = -(-T // length_bucket) * length_bucket
        ids = torch.full((len(chunk), T), pad_id, dtype=torch.int64)
        mask = torch.zeros((len(chunk), T), dtype=torch.bool)
        for i, r in enumerate(chunk):
            ids[i, :len(r.input_ids)] = torch.tensor(r.input_ids, dtype=torch.int64)
            mask[i, :len(r.target_mask)] = torch.tensor(r.target_mask, dtype=torch.bool)
        mask[:, 0] = False
        replay = torch.tensor([r.replay for r in chunk], dtype=torch.bool)
        out.append(Microbatch(
            ids=ids.to(device), target_mask=mask.to(device),
            weights=torch.tensor([r.weight for r in chunk], dtype=torch.float32).to(device),
            replay=replay.to(device),
            replay_rows=replay.nonzero().flatten().to(device),
            new_rows=(~replay).nonzero().flatten().to(device),
            new_tokens=sum(r.num_targets for r in chunk if not r.replay),
            replay_tokens=sum(r.num_targets for r in chunk if r.replay),
        ))
    return out
