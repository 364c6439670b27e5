"""The exposure ledger's compact chained form, `kit-exposure/2` (docs/formats/exposure-ledger.md, "Exposure ledger").

One header line per event (a scoring's exposures, a selection, a final-role opening), followed for an
exposure event by one short line per record. Every header's `prev` is the sha256 of all the ledger's bytes
before it, so each event commits to everything written earlier: removing, editing or reordering an event
breaks the chain at the next header, and removing the last one is caught by the heads that runs recorded
(`event` digests) and by the head pinned in runs/MANIFESTS.json. Lines of the older one-line-per-record form
(`kit-exposure/1`) may precede the events; the first header's `prev` covers them.

An event's identity (`event_digest`) leaves out `prev`, so an event copied into another ledger (a demo's or a
GPU host's ledger appended to the committed one, `append_events`) keeps its digest and is re-chained there.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.digest import BoundedReadError, canonical_json, read_bounded
from kit.record import SEED, ContractError, Num, Omittable, OneOf, Opt, Record, Seq, spec_field

CHAIN_FORMAT = "kit-exposure/2"
OLD_FORMAT = "kit-exposure/1"
EVENTS = ("exposure", "selection", "final-access")
# the fields an exposure event's header holds: every /1 line's fields but kind, digest and id (its records)
EXPOSURE_FIELDS = ("contract_digest", "job", "run", "purpose", "time")
OLD_LINE_KEYS = {"format", "kind", "digest", "id", *EXPOSURE_FIELDS}


class ChainError(ValueError):
    """A ledger that is not well formed; the message names the file and line."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Rebuilt(Record):
    """A rebuilt line's marker (tools/ledger_from_evaluations.py): which tool wrote it, from which evaluation."""

    by: str = spec_field(str, doc="the tool that wrote the line")
    evaluation: str = spec_field(str, doc="the evaluation record's path, relative to the repository")
    evaluation_sha256: str = spec_field(str, doc="its sha256 (64 hex)")


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerEntry(Record):
    """One exposure: a `kit-exposure/1` line, or one record of an exposure event with its header's fields
    (`format` says which form)."""

    format: str = spec_field(OneOf(OLD_FORMAT, CHAIN_FORMAT), doc="kit-exposure/1, or /2 for an event's record")
    kind: str = spec_field(str, doc="final.task, final.retention or retention.probe")
    digest: str = spec_field(str, doc="the content digest preparation excludes by")
    id: str = spec_field(str, doc="the record's id")
    contract_digest: str | None = spec_field(Opt(str), doc="the contract whose scoring exposed it")
    job: str | None = spec_field(Opt(str), doc="the prepared job's digest")
    run: str | None = spec_field(Opt(str), doc="the run id, null outside `kit run`")
    purpose: str = spec_field(str, doc="what the scoring was for")
    time: str = spec_field(str, doc="ISO 8601 UTC with milliseconds")
    rebuilt: Rebuilt | None = spec_field(Omittable(Rebuilt), doc="on a line rebuilt after the fact only")

    def event_header(self) -> dict:
        """The header fields of the exposure event this entry belongs to (`compact` groups equal ones)."""
        head = {k: v for k, v in self.to_json().items() if k not in ("format", "kind", "digest", "id")}
        return {"event": "exposure", **head}

    def record_line(self) -> list[str]:
        """The event's record line of this entry: [kind, digest, id]."""
        return [self.kind, self.digest, self.id]


@dataclass(frozen=True, slots=True, kw_only=True)
class EventHeader(Record):
    """A `kit-exposure/2` header line without its `prev`: the fields every event has, then those of its kind
    (exposure: contract_digest, job, purpose, rebuilt; selection: job, prepared_digest, selection_sha256;
    final-access: job, prepared_digest, selection_sha256, roots, purpose)."""

    format: str = spec_field(OneOf(CHAIN_FORMAT), doc="kit-exposure/2")
    event: str = spec_field(OneOf(*EVENTS), doc="exposure, selection or final-access")
    count: int = spec_field(Num(0, SEED.hi, integer=True), doc="the record lines that follow")
    run: str | None = spec_field(Omittable(Opt(str)), doc="the run id, null outside `kit run`")
    time: str | None = spec_field(Omittable(str), doc="ISO 8601 UTC")
    contract_digest: str | None = spec_field(Omittable(Opt(str)), doc="exposure: the contract")
    job: str | None = spec_field(Omittable(Opt(str)), doc="the prepared job's digest")
    purpose: str | None = spec_field(Omittable(str), doc="exposure and final-access: what for")
    rebuilt: Rebuilt | None = spec_field(Omittable(Rebuilt), doc="exposure: a rebuilt event's marker")
    prepared_digest: str | None = spec_field(Omittable(str), doc="selection and final-access: prepared.json")
    selection_sha256: str | None = spec_field(Omittable(str), doc="selection and final-access: the selection")
    roots: tuple[str, ...] | None = spec_field(Omittable(Seq(str)), doc="final-access: the full roots opened")

    @classmethod
    def read(cls, obj: Any, where: str) -> EventHeader:
        """The header of a line already known to be one (`is_header`); a field of another shape is a ChainError."""
        try:
            return cls.from_json(obj, where)
        except ContractError as e:
            raise ChainError(str(e)) from None

    def fields(self) -> dict:
        """The header's fields but `event`, `count` and `format`: what each record of an exposure event carries."""
        return {k: v for k, v in self.to_json().items() if k not in ("event", "count", "format")}


def is_header(obj: Any) -> bool:
    """Whether a parsed line has a header's `format`, an `event` in EVENTS and a non-negative integer `count`."""
    match obj:
        case {"format": "kit-exposure/2", "event": str(event), "count": int(count)}:
            return event in EVENTS and count >= 0
    return False


@dataclass
class Event:
    header: EventHeader
    records: list = field(default_factory=list)  # [kind, digest, id] of an exposure event
    line: int = 0  # 1-based line of the header
    prev: str | None = None
    digest: str = ""  # event_digest
    head: str = ""  # sha256 of the ledger up to the end of this event


@dataclass
class Ledger:
    path: Path
    old: list = field(default_factory=list)  # kit-exposure/1 lines, as dicts
    old_lines: list = field(default_factory=list)  # their 1-based line numbers
    events: list = field(default_factory=list)
    broken: list = field(default_factory=list)  # chain breaks: "file:line: why"
    head: str = hashlib.sha256(b"").hexdigest()


def event_bytes(header: dict, records: list) -> bytes:
    """The bytes of an event without its `prev`: what `event_digest` hashes and what a re-chained copy keeps."""
    return canonical_json(header) + b"\n" + b"".join(canonical_json(r) + b"\n" for r in records)


def event_digest(header: dict, records: list) -> str:
    return hashlib.sha256(event_bytes(header, records)).hexdigest()


def _header_line(header: dict, records: list, prev: str) -> bytes:
    return canonical_json({**header, "prev": prev}) + b"\n" + b"".join(canonical_json(r) + b"\n" for r in records)


def parse(path: str | os.PathLike, data: bytes | None = None) -> Ledger:
    """Read a ledger (either form, or both: /1 lines before /2 events). A malformed line raises ChainError; a
    header whose `prev` is not the running sha256 is listed in `broken` (verification fails on it, reading
    for exposures goes on)."""
    path = Path(path)
    if data is None:
        try:
            data = read_bounded(path) if path.exists() else b""  # a regular file of at most MAX_EVIDENCE_BYTES
        except BoundedReadError as e:
            raise ChainError(str(e)) from None
    out, running = Ledger(path), hashlib.sha256()
    lines = data.splitlines(keepends=True)
    n = 0
    while n < len(lines):
        raw, where = lines[n], f"{path}:{n + 1}"
        n += 1
        if not raw.strip():
            running.update(raw)
            continue
        obj = _json(raw, where)
        if isinstance(obj, dict) and obj.get("format") == OLD_FORMAT:
            out.old.append(obj)
            out.old_lines.append(n)
            running.update(raw)
            continue
        if not is_header(obj):
            raise ChainError(f"{where}: expected a {OLD_FORMAT} line or a {CHAIN_FORMAT} header with 'event' in "
                             f"{list(EVENTS)} and an integer 'count'")
        prev = obj.pop("prev", None)
        header = EventHeader.read(obj, where)
        if prev != running.hexdigest():
            out.broken.append(f"{where}: field 'prev' is {prev!r}; the sha256 of the ledger before this line is "
                              f"{running.hexdigest()} (an event before it was removed, edited or reordered)")
        running.update(raw)
        records = []
        for _ in range(header.count):
            if n >= len(lines):
                raise ChainError(f"{where}: header announces {header.count} record lines; the file ends first")
            rec = _json(lines[n], f"{path}:{n + 1}")
            if not (isinstance(rec, list) and len(rec) == 3 and all(isinstance(x, str) for x in rec)):
                raise ChainError(f"{path}:{n + 1}: expected a record line [kind, digest, id] of strings")
            records.append(rec)
            running.update(lines[n])
            n += 1
        out.events.append(Event(header, records, line=int(where.rsplit(":", 1)[1]), prev=prev,
                                digest=event_digest(obj, records), head=running.hexdigest()))
    out.head = running.hexdigest()
    return out


def rechained_block_with_digest(ledger: Ledger, sha256: str) -> bytes | None:
    """Consecutive events of `ledger` that, chained again from an empty ledger, have bytes with `sha256`: the
    ledger a run read when it began empty (a demo's own) and its events were appended here since, each `prev`
    then recomputed for its new place (append_events). The earliest such block, or None."""
    for i in range(len(ledger.events)):
        running, out = hashlib.sha256(), []
        for ev in ledger.events[i:]:
            line = _header_line(ev.header.to_json(), ev.records, running.hexdigest())
            running.update(line)
            out.append(line)
            if running.hexdigest() == sha256:
                return b"".join(out)
    return None


def _json(raw: bytes, where: str):
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ChainError(f"{where}: not UTF-8 (byte {e.start}: {e.reason}); expected JSON lines of a ledger") from None
    except json.JSONDecodeError as e:
        raise ChainError(f"{where}: not JSON ({e})") from None


def exposure_entries(ledger: Ledger) -> list[tuple[int, dict]]:
    """Every exposure, both forms, as (line, one-line-per-record dict with the /1 fields; `format` says which
    form), in file order."""
    out = list(zip(ledger.old_lines, ledger.old))
    for ev in ledger.events:
        if ev.header.event == "exposure":
            base = {"format": ev.header.format, **ev.header.fields()}
            out += [(ev.line + 1 + j, {**base, "kind": k, "digest": d, "id": i}) for j, (k, d, i) in enumerate(ev.records)]
    return out


def old_entry(line: dict, where: str) -> LedgerEntry:
    """A `kit-exposure/1` line as its declared entry; a field of another shape is a ChainError naming `where`."""
    try:
        return LedgerEntry.from_json(line, where)
    except ContractError as e:
        raise ChainError(str(e)) from None


def old_form_bytes(ledger: Ledger) -> bytes:
    """The ledger as /1 lines (each exposure event expanded back, field for field): what a preparation made
    before the compaction read, so that its recorded ledger digest still names consecutive lines of it."""
    lines = [canonical_json(e) for e in ledger.old]
    for ev in ledger.events:
        if ev.header.event == "exposure":
            base = ev.header.fields()
            lines += [canonical_json({**base, "format": OLD_FORMAT, "kind": k, "digest": d, "id": i})
                      for k, d, i in ev.records]
    return b"".join(line + b"\n" for line in lines)


def append_event(path: str | os.PathLike, header: dict, records: list, lock=None) -> Event:
    """Append one event, chained to the bytes already there; the caller holds the ledger's lock when others
    may write (kit.evidence.ledger.record). Returns the event with its digest and the head it wrote."""
    path = Path(path)
    if header.get("event") not in EVENTS:
        raise ChainError(f"event {header.get('event')!r}; expected one of {list(EVENTS)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        if lock is not None:
            lock(f)  # it may still fill `records` (what is new is known only under the lock)
        header = {"format": CHAIN_FORMAT, **header, "count": len(records)}
        typed = EventHeader.read(header, f"{path}: the event to append")
        before = path.read_bytes()
        prev = hashlib.sha256(before).hexdigest()
        if before and not before.endswith(b"\n"):
            raise ChainError(f"{path}: does not end with a newline; a partly written line cannot be chained to")
        data = _header_line(header, records, prev)
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return Event(typed, records, prev=prev, digest=event_digest(header, records),
                 head=hashlib.sha256(before + data).hexdigest())


def compact(data: bytes, source: str = "<ledger>") -> bytes:
    """The ledger in the chained form: consecutive /1 lines with equal header fields (contract, job, run,
    purpose, time, `rebuilt`) become one exposure event; events already chained are re-chained in order.
    Lossless: old_form_bytes(parse(compact(x))) == x for a /1 ledger in canonical lines."""
    ledger = parse(source, data)
    groups: list[tuple[dict, list]] = []
    for line, e in zip(ledger.old_lines, ledger.old):
        if set(e) - OLD_LINE_KEYS - {"rebuilt"}:
            raise ChainError(f"{source}: a {OLD_FORMAT} line with fields {sorted(set(e) - OLD_LINE_KEYS)}")
        entry = old_entry(e, f"{source}:{line}")
        header = entry.event_header()
        if groups and groups[-1][0] == header:
            groups[-1][1].append(entry.record_line())
        else:
            groups.append((header, [entry.record_line()]))
    groups += [(ev.header.to_json(), ev.records) for ev in ledger.events]
    out = b""
    for header, records in groups:
        header = {k: v for k, v in header.items() if k not in ("format", "count")}
        out += _header_line({"format": CHAIN_FORMAT, **header, "count": len(records)}, records,
                            hashlib.sha256(out).hexdigest())
    return out


def append_events(source: str | os.PathLike, dest: str | os.PathLike) -> int:
    """Append to `dest` the events of `source` (its /1 lines compacted) whose digests `dest` lacks, in order,
    re-chained: how a demo's or a GPU host's ledger joins the committed one. Returns how many."""
    src = parse(source, compact(Path(source).read_bytes(), str(source)))
    have = {ev.digest for ev in parse(dest).events}
    n = 0
    for ev in src.events:
        if ev.digest not in have:
            append_event(dest, {"event": ev.header.event, **ev.header.fields()}, ev.records)
            n += 1
    return n


def has_prefix(data: bytes, size: int, sha256: str) -> bool:
    """Whether the first `size` bytes of `data` hash to `sha256` (an append-only ledger keeps a pinned head)."""
    return len(data) >= size and hashlib.sha256(data[:size]).hexdigest() == sha256
