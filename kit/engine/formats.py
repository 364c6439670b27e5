"""The records the engine's ranks exchange over the process group while they commit, migrate or fetch:
each rank's outcome, all-gathered as canonical JSON and read back as a declared record (kit.record), so
that every rank reads the same fields by name. Nothing here is written to disk or hashed into a root.
"""

from __future__ import annotations

from dataclasses import dataclass

from kit.record import BYTES, Num, Opt, Record, Seq, spec_field
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
    manifest: Manifest | None = spec_field(Opt(Manifest), doc="the manifest, for the other stores to adopt")


COUNT = Num(0, integer=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitTransfer(Record):
    """One rank's part in bringing a commit's objects into rank 0's store (`gather_objects`); the attempt
    record lists one per commit and rank (`commit_transfers`)."""

    rank: int = spec_field(int, doc="the rank")
    host: str = spec_field(str, doc="its host")
    sent_bytes: int = spec_field(BYTES, doc="bytes it sent to rank 0")
    sent_objects: int = spec_field(COUNT, doc="objects it sent")
    received_bytes: int = spec_field(BYTES, doc="bytes rank 0 received")
    received_objects: int = spec_field(COUNT, doc="objects rank 0 installed")
    seconds: float = spec_field(float, doc="wall time of the exchange")
    errors: tuple[str, ...] = spec_field(Seq(str), doc="rank 0 only: objects not installed, naming the sender")


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchReport(Record):
    """One rank's fetch of assigned objects over the process group (`fetch_over_group`)."""

    received: int = spec_field(BYTES, doc="bytes installed in its store")
    sent: int = spec_field(BYTES, doc="bytes it sent (the holder)")
    objects: tuple[str, ...] = spec_field(Seq(str), doc="objects installed")
    errors: tuple[str, ...] = spec_field(Seq(str), doc="objects not installed, naming object and host")

    def fetched_json(self) -> dict:
        """What the attempt record keeps of a fetch that succeeded: received, sent and objects (the errors
        stopped the run otherwise)."""
        return {"received": self.received, "sent": self.sent, "objects": list(self.objects)}


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchRequest(Record):
    """What one rank asks the holder for (nothing on the holder itself)."""

    want: tuple[str, ...] = spec_field(Seq(str), doc="object digests, in the order it will receive them")


@dataclass(frozen=True, slots=True, kw_only=True)
class Peer(Record):
    """One rank's announcement before objects travel over the group: whether its host holds the commit."""

    rank: int = spec_field(int, doc="the rank")
    host: str = spec_field(str, doc="its host, as errors name it")
    holds: bool = spec_field(bool, doc="its source home holds the commit's manifest")


@dataclass(frozen=True, slots=True, kw_only=True)
class WrittenObjects(Record):
    """One rank's announcement of the objects it wrote for a commit (rank 0 asks for those it lacks)."""

    rank: int = spec_field(int, doc="the rank")
    host: str = spec_field(str, doc="its host")
    written: tuple[str, ...] = spec_field(Seq(str), doc="object digests, each once")


@dataclass(frozen=True, slots=True, kw_only=True)
class RankStatus(Record):
    """One rank's outcome of a step every rank must pass (a fetch, an adoption): one failure stops all."""

    rank: int = spec_field(int, doc="the rank")
    host: str = spec_field(str, doc="its host, as errors name it")
    ok: bool = spec_field(bool, doc="the step succeeded there")
    error: str | None = spec_field(Opt(str), doc="why not, when not ok")
