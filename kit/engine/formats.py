"""The records the engine's ranks exchange over the process group while they commit, migrate or fetch:
each rank's outcome, all-gathered as canonical JSON and read back as a declared record (kit.record), so
that every rank reads the same fields by name. Nothing here is written to disk or hashed into a root.
"""

from __future__ import annotations

from dataclasses import dataclass

from kit.record import Opt, Record, Seq, spec_field
from kit.store.manifest import Manifest, ParamEntry


@dataclass(frozen=True, slots=True, kw_only=True)
class ObjectsReport(Record):
    """One rank's objects of a commit (`save_commit_objects`), or why it could not write them."""

    ok: bool = spec_field(bool, doc="the objects are written")
    error: str | None = spec_field(Opt(str), doc="why not, when not ok")
    entries: tuple[ParamEntry, ...] | None = spec_field(Opt(Seq(ParamEntry)), doc="its learned-state entries")
    rng: str | None = spec_field(Opt(str), doc="object digest of its RNG state")
    config: str | None = spec_field(Opt(str), doc="object digest of the model config")


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitOutcome(Record):
    """Rank 0's outcome of writing a commit, which every rank learns."""

    ok: bool = spec_field(bool, doc="the commit is written and HEAD moved in rank 0's store")
    root: str | None = spec_field(Opt(str), doc="its full root")
    error: str | None = spec_field(Opt(str), doc="why not, when not ok")
    manifest: Manifest | None = spec_field(Opt(Manifest), doc="the manifest, for the other stores to adopt")  # noqa: RUF009


@dataclass(frozen=True, slots=True, kw_only=True)
class Peer(Record):
    """One rank's announcement before objects travel over the group: whether its host holds the commit."""

    rank: int = spec_field(int, doc="the rank")
    host: str = spec_field(str, doc="its host, as errors name it")
    holds: bool = spec_field(bool, doc="its source home holds the commit's manifest")


@dataclass(frozen=True, slots=True, kw_only=True)
class RankStatus(Record):
    """One rank's outcome of a step every rank must pass (a fetch, an adoption): one failure stops all."""

    rank: int = spec_field(int, doc="the rank")
    host: str = spec_field(str, doc="its host, as errors name it")
    ok: bool = spec_field(bool, doc="the step succeeded there")
    error: str | None = spec_field(Opt(str), doc="why not, when not ok")
