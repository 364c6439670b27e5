"""Frozen experiment contracts: loading, schema validation and the contract digest (layer 0, no torch).

A schema is plain data: a dict from field to spec (a type, a nested dict, or `Seq`, `OneOf`,
`Opt`, `Omittable`, `MapOf`, `Num`). The decision to know: every field is required and unknown
fields are errors, so a frozen contract says everything it means and nothing by accident; errors
name the file and the dotted path. The digest is the sha256 of the file's canonical JSON, so
reformatting does not change it and any change of value does.
A validated contract is parsed once into frozen classes built from the same schema (`Contract.terms`), so
the code reads `terms.training.max_grad_norm`, never a string key: a misspelt field is an AttributeError
where it is written, not a KeyError deep inside a run, and nothing can edit a contract after its digest.
Spec forms: the notes below.

Notes: the spec forms.

A type (`float` accepts ints); a dict (a nested object with exactly these fields); `Seq(spec, min_len=0)`;
`OneOf(*literals)`; `Opt(spec)` (null allowed, the field still required); `Omittable(spec)` (the field may be absent:
only for fields added after contracts were frozen, since a new required field changes every existing digest);
`MapOf(spec)` (arbitrary string keys); `Num(lo, hi, integer)`: an integer field without `hi` is bounded by
`MAX_COUNT` (10^6); seeds and byte sizes use `SEED` and `BYTES`.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import types
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.digest import load_json_strict, sha256_json
from kit.record import (  # noqa: F401  (the spec forms: schemas import them from here)
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
    Seq,
    _join,
    field_name,
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


# A medium-scale contract is frozen from a draft by campaigns/medium_freeze.py, which records the committed
# pilot run that fixed the draft's free choices (docs/contracts.md, "Medium scale"). Absent in drafts and
# in every contract of another scale.
# training.lr_schedule (kit/train/schedule.py): "constant", or a linear warm-up then constant or cosine
LR_SCHEDULE = Either(OneOf("constant"), {"warmup_updates": Num(1, integer=True), "after": OneOf("constant", "cosine"),
                                         "floor_ratio": Num(0, 1)})
PILOT = {"run_id": str, "record": str, "record_sha256": str, "draft": str, "draft_digest": str, "rule": str,
         "chosen": MapOf(Num(lo=0))}


def check_pilot(terms, source: str) -> None:
    """The `pilot` field of a contract's terms: only at scale "medium", with 64-hex digests."""
    pilot = terms.pilot
    if pilot is None:
        return
    if terms.scale != "medium":
        raise ContractError(f"{source}: field 'pilot' is present with scale = {terms.scale!r}; expected only "
                            "at scale 'medium' (a medium contract frozen from its draft by campaigns/medium_freeze.py)")
    for field in ("record_sha256", "draft_digest"):
        v = getattr(pilot, field)
        if len(v) != 64 or any(ch not in "0123456789abcdef" for ch in v):
            raise ContractError(f"{source}: field 'pilot.{field}' = {v!r}; expected 64 lowercase hex digits")


class ContractKeyWarning(DeprecationWarning):
    """A module of the kit read a contract field by string key; it reads attributes (`Contract.terms`).
    The test suite turns this warning into an error (pyproject.toml), so no such read survives in kit/."""


def _warn_if_kit_reads(key: str) -> None:
    caller = sys._getframe(2).f_globals.get("__name__", "")  # the module that called __getitem__ or get
    if caller == "kit" or caller.startswith("kit."):
        warnings.warn(f"{caller} reads contract field {key!r} by key; read the attribute .{field_name(key)}",
                      ContractKeyWarning, stacklevel=3)


class Section:
    """Base of the frozen classes that `parse` builds from a schema's objects: one attribute per field
    (an omitted `Omittable` field reads as None; `"field" in section` tells omitted from present).
    Item access (`section["field"]`, `get`) remains for the executed notebooks committed under runs/,
    which replay unchanged and read `c["training"]["max_tokens"]`; from a kit module it warns."""

    __slots__ = ()
    _keys: tuple[str, ...] = ()  # the object's JSON keys, in schema order

    def __contains__(self, key) -> bool:
        return key in self._present  # type: ignore[attr-defined]

    def __getitem__(self, key: str):
        _warn_if_kit_reads(key)
        if key not in self._present:  # type: ignore[attr-defined]
            raise KeyError(key)
        return getattr(self, field_name(key))

    def get(self, key: str, default=None):
        _warn_if_kit_reads(key)
        return getattr(self, field_name(key)) if key in self._present else default  # type: ignore[attr-defined]

    def to_json(self) -> dict:
        """The object as the contract file wrote it (omitted fields stay omitted): a fresh plain dict."""
        return {k: _to_json(getattr(self, field_name(k))) for k in self._keys if k in self._present}  # type: ignore[attr-defined]


def _to_json(value):
    if isinstance(value, Section):
        return value.to_json()
    if isinstance(value, types.MappingProxyType):
        return {k: _to_json(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_to_json(v) for v in value]
    return value


_CLASSES: dict[int, tuple[dict, type]] = {}  # id(schema object) -> (that object, its class)


def _class_for(spec: dict, name: str) -> type:
    # Keyed by the schema object itself (the check of identity guards against a reused id): schemas are
    # module constants, and one spec object shared by two fields (an optimizer group) is one class.
    hit = _CLASSES.get(id(spec))
    if hit is not None and hit[0] is spec:
        return hit[1]
    fields = [(field_name(k), Any) for k in spec] + [("_present", frozenset, dataclasses.field(repr=False))]
    cls = dataclasses.make_dataclass(name, fields, bases=(Section,), frozen=True, slots=True,
                                     namespace={"_keys": tuple(spec)})
    cls.__module__ = __name__  # make_dataclass names its caller's caller otherwise (3.12 has a keyword)
    _CLASSES[id(spec)] = (spec, cls)
    return cls


def _camel(path: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in path.replace("-", "_").replace(".", "_").split("_"))


def parse(value: Any, spec: Any, name: str) -> Any:
    """A validated value as frozen data: schema objects become `Section` classes, maps read-only
    mappings, lists tuples, scalars stay. `name` names the classes (the experiment, then the path)."""
    if isinstance(spec, (Opt, Omittable)):
        return None if value is None else parse(value, spec.spec, name)
    if isinstance(spec, Either):
        try:
            validate(value, spec.first, "", name)
            return parse(value, spec.first, name)
        except ContractError:
            return parse(value, spec.second, name)
    if isinstance(spec, dict):
        cls = _class_for(spec, _camel(name))
        kw = {field_name(k): parse(value[k], sub, f"{name}.{k}") if k in value else None for k, sub in spec.items()}
        return cls(**kw, _present=frozenset(value))
    if isinstance(spec, MapOf):
        return types.MappingProxyType({k: parse(v, spec.spec, name) for k, v in value.items()})
    if isinstance(spec, Seq):
        return tuple(parse(v, spec.item, name) for v in value)
    return value


@dataclass(frozen=True)
class Contract:
    """A loaded contract: `terms` is the typed, frozen reading the code uses; `data` the file's JSON as
    loaded (what the digest covers, and what a record embeds); `contract["field"]` reads `data`."""
    path: Path
    data: dict
    digest: str
    terms: Any = None

    def __getitem__(self, key):
        _warn_if_kit_reads(key)  # the same rule as a section's: kit code reads `terms`
        return self.data[key]


def load_contract(path: str | os.PathLike, schema: dict, kind: str) -> Contract:
    """Load and validate; `kind` must equal the contract's `kind` field."""
    path = Path(path)
    data = load_json_strict(path)
    validate(data, schema, "", str(path))
    if data.get("kind") != kind:
        raise ContractError(f"{path}: field 'kind' = {data.get('kind')!r}; expected {kind!r}")
    return Contract(path, data, sha256_json(data), parse(data, schema, kind + "-contract"))
