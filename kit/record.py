"""Declared record formats: the spec forms, validation against a spec, and `Record`, the base of the frozen,
slotted classes that declare one on-disk format each (layer 0, no torch).

A spec is a type (`float` accepts ints), a `Record` subclass (an object with exactly its declared fields), or one of
`Seq(spec, min_len=0)`, `OneOf(*literals)`, `Opt(spec)` (null allowed, the field still required), `Omittable(spec)`
(the field may be absent: only for fields added after records were frozen, since a new required field changes every
existing digest), `MapOf(spec)` (arbitrary string keys), `Either(first, second)`, `Num(lo, hi, integer)` (an integer
field without `hi` is bounded by `MAX_COUNT`, 10^6). A plain dict of specs is the old undeclared form, still validated.

The decision to know: every field is required and unknown fields are errors, so a record says everything it means
and nothing by accident; errors name the file and the dotted path, word for word the same for every format. A class
declares each field once, with its spec in `dataclasses.field(metadata=...)` (`spec_field`), so the type checker
follows every attribute read (`terms.training.max_grad_norm`; a misspelt field fails `make lint`, not a run) and the
validator, the writer (`to_json`) and the docs test (tests/test_format_docs.py) read the same declaration.
"""

from __future__ import annotations

import dataclasses
import keyword
import math
import types
from dataclasses import dataclass
from typing import Any, ClassVar, Self, TypeVar


class ContractError(ValueError):
    """A value that does not match its declared format (a contract, a prepared job, a record): the message names
    the file, the dotted field and what was expected."""


@dataclass(frozen=True)
class Seq:
    item: Any
    min_len: int = 0


@dataclass(frozen=True)
class OneOf:
    values: tuple

    def __init__(self, *values):
        object.__setattr__(self, "values", tuple(values))


@dataclass(frozen=True)
class Opt:
    spec: Any


@dataclass(frozen=True)
class Omittable:
    spec: Any


@dataclass(frozen=True)
class Either:
    """The value matches the first spec, or else the second (the error names both)."""
    first: Any
    second: Any


@dataclass(frozen=True)
class MapOf:
    spec: Any


@dataclass(frozen=True)
class Num:
    lo: float | None = None
    hi: float | None = None
    integer: bool = False


MAX_COUNT = 10**6  # the bound of an integer field that names none: counts of tasks, updates, tokens, steps
SEED = Num(0, 2**63 - 1, integer=True)  # random seeds and byte sizes are integers beyond MAX_COUNT
BYTES = Num(0, 2**60, integer=True)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def validate(value: Any, spec: Any, path: str, source: str) -> None:
    where = f"{source}: field {path!r}" if path else source
    if is_record_class(spec):
        spec = spec.spec()
    if isinstance(spec, Omittable):
        return validate(value, spec.spec, path, source)
    if isinstance(spec, Opt):
        if value is None:
            return
        return validate(value, spec.spec, path, source)
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            raise ContractError(f"{where}: expected an object, got {type(value).__name__}")
        unknown = sorted(set(value) - set(spec))
        if unknown:
            raise ContractError(f"{source}: unknown field {_join(path, unknown[0])!r}; "
                                f"expected only {sorted(spec)}")
        missing = sorted(k for k in set(spec) - set(value) if not isinstance(spec[k], Omittable))
        if missing:
            raise ContractError(f"{source}: missing field {_join(path, missing[0])!r}")
        for k, sub in spec.items():
            if k in value:
                validate(value[k], sub, _join(path, k), source)
        return
    if isinstance(spec, Either):
        try:
            return validate(value, spec.first, path, source)
        except ContractError as first:
            try:
                return validate(value, spec.second, path, source)
            except ContractError as second:
                raise ContractError(f"{second}; or else: {first}") from None
    if isinstance(spec, MapOf):
        if not isinstance(value, dict):
            raise ContractError(f"{where}: expected an object, got {type(value).__name__}")
        for k, v in value.items():
            validate(v, spec.spec, _join(path, k), source)
        return
    if isinstance(spec, Seq):
        if not isinstance(value, list):
            raise ContractError(f"{where}: expected a list, got {type(value).__name__}")
        if len(value) < spec.min_len:
            raise ContractError(f"{where}: expected at least {spec.min_len} items, got {len(value)}")
        for i, v in enumerate(value):
            validate(v, spec.item, f"{path}[{i}]", source)
        return
    if isinstance(spec, OneOf):
        # `in` compares with ==, and True == 1: a JSON boolean must not pass for a numeric literal
        if not any(value == v and isinstance(value, bool) == isinstance(v, bool) for v in spec.values):
            raise ContractError(f"{where} = {value!r}; expected one of {list(spec.values)}")
        return
    if isinstance(spec, Num):
        if not _is_number(value) or (spec.integer and not isinstance(value, int)):
            raise ContractError(f"{where} = {value!r}; expected {'an integer' if spec.integer else 'a number'}")
        hi = spec.hi if spec.hi is not None or not spec.integer else MAX_COUNT  # 10**12 tasks is not a count
        if (spec.lo is not None and value < spec.lo) or (hi is not None and value > hi):
            raise ContractError(f"{where} = {value!r}; expected within [{spec.lo}, {hi}]")
        if spec.lo is not None and spec.lo >= 0 and value == 0 and math.copysign(1.0, value) < 0:
            raise ContractError(f"{where} = -0.0; expected within [{spec.lo}, {hi}] (a negative zero is not a "
                                "non-negative number: write 0)")
        return
    if spec is float:
        if not _is_number(value):
            raise ContractError(f"{where} = {value!r}; expected a number")
        return
    if spec is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise ContractError(f"{where} = {value!r}; expected an integer")
        return
    if spec in (str, bool):
        if not isinstance(value, spec):
            raise ContractError(f"{where} = {value!r}; expected {spec.__name__}")
        return
    raise TypeError(f"unknown schema spec {spec!r} at {path}")


def spec_field(spec: Any, *, key: str | None = None, doc: str = "") -> Any:
    """A declared field of a `Record`: its spec (what `validate` checks), its JSON key where that is not the
    attribute's name (a Python keyword: `from` is the attribute `from_`) and a one-line description. An `Omittable`
    field defaults to None (absent); every other field is required."""
    metadata = {"spec": spec, "key": key, "doc": doc}
    if isinstance(spec, Omittable):
        return dataclasses.field(default=None, metadata=metadata)
    return dataclasses.field(metadata=metadata)


def field_name(key: str) -> str:
    """The attribute of a JSON key: the key, with a trailing underscore where it is a Python keyword."""
    return key + "_" if keyword.iskeyword(key) else key


R = TypeVar("R", bound="Record")


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """Base of the declared formats. A subclass is `@dataclass(frozen=True, slots=True, kw_only=True)` with each
    field declared by `spec_field`. `from_json` validates (the messages of `validate`) and builds the frozen value:
    nested records become instances, maps read-only mappings, lists tuples. `to_json` gives back the plain JSON
    (omitted `Omittable` fields stay omitted), so canonical bytes and digests are the file's own."""

    # The JSON keys present in the value read (an Omittable field absent from it is None and stays absent in
    # to_json); None where the instance was built by the code, which then writes every field that is not None
    # among the Omittable ones.
    _present: frozenset[str] | None = dataclasses.field(default=None, repr=False, compare=False)
    FORMAT: ClassVar[str] = ""  # the format's name in messages and docs, where it has one

    @classmethod
    def json_fields(cls) -> dict[str, dataclasses.Field]:
        """JSON key -> the declared field, in declaration order (the `_present` bookkeeping field excluded)."""
        out = {}
        for f in dataclasses.fields(cls):
            if f.name == "_present":
                continue
            key = f.metadata.get("key") or (f.name[:-1] if f.name.endswith("_") and keyword.iskeyword(f.name[:-1])
                                             else f.name)
            out[key] = f
        return out

    @classmethod
    def spec(cls) -> dict[str, Any]:
        """The declared fields as the dict form `validate` reads: JSON key -> spec."""
        return {k: f.metadata["spec"] for k, f in cls.json_fields().items()}

    @classmethod
    def from_json(cls, value: Any, source: str, path: str = "") -> Self:
        """`value` checked against the declared fields (a ContractError naming `source` and the dotted field
        otherwise), then built."""
        validate(value, cls, path, source)
        return build(value, cls)

    def __contains__(self, key: str) -> bool:
        """Whether the JSON key is present (an Omittable field may be absent)."""
        fields = type(self).json_fields()
        if key not in fields:
            return False
        if self._present is not None:
            return key in self._present
        return getattr(self, fields[key].name) is not None or not isinstance(fields[key].metadata["spec"], Omittable)

    def to_json(self) -> dict:
        """The plain JSON object (a fresh dict), omitted fields omitted."""
        return {k: to_json(getattr(self, f.name)) for k, f in type(self).json_fields().items() if k in self}


def is_record_class(spec: Any) -> bool:
    return isinstance(spec, type) and issubclass(spec, Record)


def to_json(value: Any) -> Any:
    """Plain JSON of a built value: records, read-only mappings and tuples back to dicts and lists."""
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, (dict, types.MappingProxyType)):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [to_json(v) for v in value]
    return value


def build(value: Any, spec: Any) -> Any:
    """A validated value as frozen data: records become instances of their class, maps read-only mappings, lists
    tuples; scalars stay; an object of the undeclared dict form stays a plain dict (copied)."""
    if isinstance(spec, (Opt, Omittable)):
        return None if value is None else build(value, spec.spec)
    if isinstance(spec, Either):
        try:
            validate(value, spec.first, "", "")
            return build(value, spec.first)
        except ContractError:
            return build(value, spec.second)
    if is_record_class(spec):
        fields = spec.json_fields()
        kw = {f.name: build(value[k], f.metadata["spec"]) if k in value else None for k, f in fields.items()}
        return spec(**kw, _present=frozenset(value))
    if isinstance(spec, dict):
        return {k: build(value[k], sub) if k in value else None for k, sub in spec.items() if k in value}
    if isinstance(spec, MapOf):
        return types.MappingProxyType({k: build(v, spec.spec) for k, v in value.items()})
    if isinstance(spec, Seq):
        return tuple(build(v, spec.item) for v in value)
    return value


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
