"""Frozen experiment contracts: loading, validation against a declared class and the contract digest (layer 0,
no torch).

Each experiment declares its contract as `kit.record.Record` classes, one per object of the file
(kit/adaptive/schema.py, kit/study/schema.py, kit/adaptive/continued_schema.py); this module holds what they
share: the scales, the optimizer-rate bounds, the learning-rate schedule (`LrWarmup`), the medium pilot (`Pilot`),
and `load_contract`, which validates a file against its class (every field required, unknown fields refused,
errors naming the file and the dotted field) and builds the frozen, typed `Contract.terms` the code reads
(`terms.training.max_grad_norm`: a misspelt field fails the type checker, and nothing can edit a contract after its
digest). The digest is the sha256 of the file's canonical JSON, so reformatting does not change it and any change of
value does; `terms.to_json()` is that JSON again. The spec forms are kit/record.py's.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from kit.digest import load_json_strict, sha256_json
from kit.record import (  # noqa: F401  (the spec forms: the contract modules import them from here)
    BYTES,
    MAX_COUNT,
    SEED,
    ContractError,
    Either,
    MapOf,
    Num,
    Omittable,
    OneOf,
    Opt,
    Record,
    Seq,
    spec_field,
    validate,
)

# One vocabulary of scales for contracts, seeds, the demo and the campaigns (docs/contracts.md, "Scales").
SCALES = ("tiny", "medium", "full")
OLD_SCALE_NAMES = {"small": "medium"}  # `kit seed build --scale small`, the notebook's SIZE "small": deprecated


def scale_name(value: str, where: str = "scale") -> str:
    """`value` as the kit's scale name: an old spelling maps to its new name with a DeprecationWarning
    (attributed to the caller's caller: a notebook cell or the command line shows it); others pass as
    they are, for the caller's own check of which scales it supports."""
    if value in OLD_SCALE_NAMES:
        new = OLD_SCALE_NAMES[value]
        warnings.warn(f"{where} {value!r} is deprecated; use {new!r} (the scales are {', '.join(SCALES)})",
                      DeprecationWarning, stacklevel=3)
        return new
    return value


# An optimizer group's rates (docs/contracts.md, "Learning rate and weight decay"). lr: Adam moves a parameter by about
# lr per update, and an FP32 parameter of magnitude 1e-2 does not change under a step below 2^-24 x 1e-2 (~6e-10), so
# an lr under 1e-10 trains nothing (5e-324 is 0 in FP32; -0.0 is no rate); above 1 a single update moves every weight
# by more than the weights' own scale. weight_decay: 0 is "no decay" (every committed contract); at most 1, so that
# AdamW's factor 1 - lr x weight_decay stays in [0, 1) and never flips or grows a weight.
LR_MIN, LR_MAX, WEIGHT_DECAY_MAX = 1e-10, 1.0, 1.0
LR = Num(LR_MIN, LR_MAX)
WEIGHT_DECAY = Num(0, WEIGHT_DECAY_MAX)


@dataclass(frozen=True, slots=True, kw_only=True)
class LrWarmup(Record):
    """`training.lr_schedule` when not "constant" (kit/train/schedule.py): a linear warm-up, then constant or a
    cosine decay to `floor_ratio` of the rate."""
    warmup_updates: int = spec_field(Num(1, integer=True), doc="updates of the linear warm-up")
    after: str = spec_field(OneOf("constant", "cosine"), doc="the rate after the warm-up")
    floor_ratio: float = spec_field(Num(0, 1), doc="the cosine's last factor")


# training.lr_schedule: "constant", or a linear warm-up then constant or cosine
LR_SCHEDULE = Either(OneOf("constant"), LrWarmup)
LrSchedule = str | LrWarmup  # "constant" or the warm-up


@dataclass(frozen=True, slots=True, kw_only=True)
class Pilot(Record):
    """A medium-scale contract is frozen from a draft by campaigns/medium_freeze.py, which records the committed
    pilot run that fixed the draft's free choices (docs/contracts.md, "Medium scale"). Absent in drafts and in every
    contract of another scale."""
    run_id: str = spec_field(str, doc="the pilot run")
    record: str = spec_field(str, doc="its run record")
    record_sha256: str = spec_field(str, doc="the record's sha256")
    draft: str = spec_field(str, doc="the draft contract frozen")
    draft_digest: str = spec_field(str, doc="the draft's contract digest")
    rule: str = spec_field(str, doc="the rule that chose")
    chosen: Any = spec_field(MapOf(Num(lo=0)), doc="the chosen values by field")


class PilotedTerms(Protocol):
    """The terms of a contract that may be a frozen medium one (the adaptive and the study contracts)."""
    @property
    def scale(self) -> str: ...
    @property
    def pilot(self) -> Pilot | None: ...


def check_pilot(terms: PilotedTerms, source: str) -> None:
    """The `pilot` field of a contract's terms: only at scale "medium", with 64-hex digests."""
    pilot = terms.pilot
    if pilot is None:
        return
    if terms.scale != "medium":
        raise ContractError(f"{source}: field 'pilot' is present with scale = {terms.scale!r}; expected only "
                            "at scale 'medium' (a medium contract frozen from its draft by campaigns/medium_freeze.py)")
    for field, v in (("record_sha256", pilot.record_sha256), ("draft_digest", pilot.draft_digest)):
        if len(v) != 64 or any(ch not in "0123456789abcdef" for ch in v):
            raise ContractError(f"{source}: field 'pilot.{field}' = {v!r}; expected 64 lowercase hex digits")


T = TypeVar("T", bound=Record)


@dataclass(frozen=True, slots=True)
class Contract(Generic[T]):
    """A loaded contract: `terms` is the typed, frozen reading the code uses (its class declares the contract);
    `data` the file's JSON as loaded (what the digest covers, and what a record embeds; `terms.to_json()` equals
    it)."""
    path: Path
    data: dict
    digest: str
    terms: T


def load_contract(path: str | os.PathLike, cls: type[T], kind: str) -> Contract[T]:
    """Load and validate against the declared class `cls`; `kind` must equal the contract's `kind` field."""
    path = Path(path)
    data = load_json_strict(path)
    terms = cls.from_json(data, str(path))
    if data.get("kind") != kind:
        raise ContractError(f"{path}: field 'kind' = {data.get('kind')!r}; expected {kind!r}")
    return Contract(path, data, sha256_json(data), terms)
