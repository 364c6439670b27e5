"""The exposure ledger (`ledger/exposed.jsonl` in the evidence): every final task and retention probe
that a scored evaluation opened, by content digest, so that no later contract reuses it.

Events (docs/formats/exposure-ledger.md, "Exposure ledger") are appended in the chained form of kit.evidence.ledger_chain,
fsynced and never rewritten; the older one-line-per-record form is read too. An item already recorded for
the same contract is not written twice; each event a run appends is named in its run record
(`ledger_events`), so that verification finds it in the committed chain. A line written after the fact, rebuilt from a scoring's
evaluation record rather than by the scoring itself, carries `rebuilt` (REBUILT_FIELDS) saying from what.
Where (`ledger_path`): `--ledger`, then `$KIT_LEDGER`, then inside a `kit run` the `ledger/` beside the
run's `runs/`, otherwise the command's own output folder's `ledger/exposed.jsonl`: the repository's
ledger is for the committed evidence only (docs/formats/exposure-ledger.md says which command uses which).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kit.data.tasks import family_counts_for, generate_set
from kit.digest import read_bounded, sha256_file
from kit.evidence.environment import iso_utc, utc_now
from kit.evidence.ledger_chain import (
    ChainError,
    Event,
    EventHeader,
    LedgerEntry,
    append_event,
    exposure_entries,
    has_prefix,
    old_form_bytes,
    parse,
    rechained_block_with_digest,
)
from kit.evidence.notebook import current_run_dir, record_ledger_event
from kit.evidence.run_record import SHA256_RE
from kit.evidence.runtime import repository_root
from kit.record import BYTES, ContractError, MapOf, Opt, Record, build, spec_field

LEDGER_FORMAT = "kit-exposure/2"  # kit.evidence.ledger_chain; /1 lines are still read
LEDGER_ENV = "KIT_LEDGER"
LEDGER_RELATIVE = Path("ledger") / "exposed.jsonl"
KINDS = ("final.task", "final.retention", "retention.probe")
TASK_KINDS = ("final.task",)
CONVERSATION_KINDS = ("final.retention", "retention.probe")
# a rebuilt line's marker: which tool wrote it, from which evaluation record (path, and its sha256)
REBUILT_FIELDS = ("by", "evaluation", "evaluation_sha256")
# a preparation's run records the ledger it read under this input digest (the sha256 of its bytes, that of
# no bytes when it was absent), so that a replay can give it the same ledger back (kit/evidence/replay.py):
# those bytes are consecutive lines of the committed ledger (lines_with_digest)
LEDGER_INPUT = "exposure_ledger"
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


class LedgerError(ValueError):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerPin(Record):
    """A head of the ledger: its first `size` bytes hash to `sha256` (prepared.json `locations.ledger_head`,
    runs/MANIFESTS.json `ledger`)."""

    size: int = spec_field(int, doc="bytes of the ledger (0: absent)")
    sha256: str = spec_field(str, doc="sha256 of those bytes")


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerSummary(Record):
    """What a preparation read of the ledger (`ledger_summary`)."""

    path: str = spec_field(str, doc="the ledger file, absolute")
    sha256: str | None = spec_field(Opt(str), doc="sha256 of its bytes, null when absent")
    size: int = spec_field(BYTES, doc="its bytes, 0 when absent")
    entries: int = spec_field(int, doc="exposure entries")
    digests: Mapping[str, int] = spec_field(MapOf(int), doc="distinct digests per kind")


def read_digest(sha256: str | None) -> str:
    """The LEDGER_INPUT digest of a ledger summary's `sha256` (None: the ledger was absent, read as no lines;
    a replay gives such a run no ledger file, kit/evidence/replay.py)."""
    return EMPTY_SHA256 if sha256 is None else sha256


def lines_with_digest(path: str | os.PathLike, sha256: str) -> bytes | None:
    """Consecutive whole lines of the ledger at `path` whose bytes have `sha256` (b"" for EMPTY_SHA256), the
    earliest such, or None. The ledger a run read is such a block of the committed one: the committed ledger
    is append-only, and a demo run from the repository root reads a ledger of its own whose lines are then
    appended to it as one block (docs/formats/exposure-ledger.md, "Exposure ledger"); for a ledger read before the compaction,
    the block is looked for in the compacted ledger's /1 view (ledger_chain.old_form_bytes)."""

    if sha256 == EMPTY_SHA256:
        return b""
    data = read_bounded(path) if Path(path).exists() else b""
    found = _block_with_digest(data.splitlines(keepends=True), sha256)
    if found is None and data:
        # a preparation made before the ledger was compacted read /1 lines: look in the ledger's /1 view

        try:
            ledger = parse(path, data)
            found = _block_with_digest(old_form_bytes(ledger).splitlines(keepends=True), sha256)
        except ChainError:
            return None  # not a ledger the kit wrote: only its own lines can hold the block
        if found is None:  # a ledger of its own, begun empty, whose events were appended here (re-chained)
            found = rechained_block_with_digest(ledger, sha256)
    return found


def _block_with_digest(lines: list[bytes], sha256: str) -> bytes | None:
    for i in range(len(lines)):
        h = hashlib.sha256()
        for j in range(i, len(lines)):
            h.update(lines[j])
            if h.hexdigest() == sha256:
                return b"".join(lines[i:j + 1])
    return None


def ledger_path(scope: str | os.PathLike | None = None, prepared_against: str | None = None) -> Path:
    """The ledger this process records to and prepares against (see the module docstring); `scope` is
    the command's own output folder (a prepared job, a study), whose ledger is used outside `kit run`;
    `prepared_against`, for a scoring, the ledger its preparation read (prepared.json), which outside
    `kit run` it records into, so that `--ledger` given at prepare time holds the job's exposures."""
    if os.environ.get(LEDGER_ENV):
        return Path(os.environ[LEDGER_ENV])
    run_dir = current_run_dir()
    if run_dir is not None:  # beside the run's runs/ directory: the repository's, or `kit demo --runs-dir`'s
        return run_dir.resolve().parent.parent / LEDGER_RELATIVE
    if prepared_against:
        return Path(prepared_against)
    if scope is not None:  # an ad-hoc command: its own folder, never the committed evidence's ledger
        return Path(scope) / LEDGER_RELATIVE

    return repository_root() / LEDGER_RELATIVE


def ledger_head(info: LedgerSummary | dict) -> dict:
    """prepared.json's `locations.ledger_head` from a ledger_summary: {"size", "sha256"} of the bytes the
    preparation read (size 0 and the empty sha256 when the ledger was absent). The final-role guard holds the
    job to that ledger (bound_guard_ledger)."""
    return ledger_pin(info if isinstance(info, LedgerSummary) else build(info, LedgerSummary)).to_json()


def ledger_pin(summary: LedgerSummary) -> LedgerPin:
    """`ledger_head` declared: the head of the ledger a preparation read."""
    return LedgerPin(size=summary.size, sha256=read_digest(summary.sha256))


def bound_guard_ledger(prepared_dir: str | os.PathLike, locations: dict) -> Path:
    """The ledger whose chain guards a prepared job's final roles (`kit adaptive select`, `evaluate --split
    final`): the one recorded in prepared.json's `locations.ledger`, which must still begin with the bytes its
    `locations.ledger_head` pins; ${LEDGER_ENV} naming another ledger is refused (LedgerError, one line). A job
    prepared before `ledger_head` was recorded (the field absent) keeps the old rule: ledger_path(prepared_dir,
    locations.ledger), where ${LEDGER_ENV} comes first."""
    recorded, head = locations.get("ledger"), locations.get("ledger_head")
    if recorded is None or head is None:
        return ledger_path(prepared_dir, recorded)
    source = f"{Path(prepared_dir) / 'prepared.json'} field 'locations.ledger'"
    env = os.environ.get(LEDGER_ENV)
    if env and os.path.realpath(env) != os.path.realpath(recorded):
        raise LedgerError(f"${LEDGER_ENV}={env}: names another ledger than the one this job was prepared against "
                          f"({source}: {recorded}); its final roles are guarded by that ledger only")
    path = Path(recorded)
    try:
        data = read_bounded(path) if path.exists() else b""
    except ValueError as e:
        raise LedgerError(f"{source}: {e}") from None
    pin = build(head, LedgerPin)
    if not has_prefix(data, pin.size, pin.sha256):
        raise LedgerError(f"{path}: does not begin with the {pin.size} bytes (sha256 {pin.sha256[:12]}) this "
                          f"job was prepared against ({source}_head); the ledger was replaced or rewritten")
    return path


def read_ledger(path: str | os.PathLike | None = None) -> list[dict]:
    """Every exposure entry (both forms, one dict per record); a malformed line is an error naming the file
    and line. The JSON of `read_entries`, for callers that still read the entries as dicts."""
    return [raw for raw, _ in _checked_entries(path)]


def read_entries(path: str | os.PathLike | None = None) -> list[LedgerEntry]:
    """Every exposure entry (both forms) as a declared `LedgerEntry`, in file order; a malformed line is an error
    naming the file and line."""
    return [entry for _, entry in _checked_entries(path)]


def _checked_entries(path: str | os.PathLike | None) -> list[tuple[dict, LedgerEntry]]:
    path = Path(path) if path is not None else ledger_path()
    try:
        entries = exposure_entries(parse(path))
    except ChainError as err:
        raise LedgerError(str(err)) from None
    return [(e, _entry(e, f"{path}:{n}")) for n, e in entries]


def _entry(line: dict, where: str) -> LedgerEntry:
    """One entry's JSON checked (a kind in KINDS and a digest, a well-formed `rebuilt`), then declared."""
    if line.get("kind") not in KINDS or not isinstance(line.get("digest"), str):
        raise LedgerError(f"{where}: not an entry with a kind in {list(KINDS)} and a digest")
    if "rebuilt" in line:
        check_rebuilt(line["rebuilt"], where)
    try:
        return LedgerEntry.from_json(line, where)
    except ContractError as err:
        raise LedgerError(str(err)) from None


def check_rebuilt(marker, source: str) -> dict:
    """A rebuilt line's `rebuilt` field: {"by": tool, "evaluation": path, "evaluation_sha256": 64 hex}."""
    if not isinstance(marker, dict) or sorted(marker) != sorted(REBUILT_FIELDS) \
            or not all(isinstance(marker[k], str) and marker[k] for k in REBUILT_FIELDS) \
            or not SHA256_RE.fullmatch(marker["evaluation_sha256"]):
        raise LedgerError(f"{source}: field 'rebuilt' is {marker!r}; expected an object with the strings "
                          f"{list(REBUILT_FIELDS)} (evaluation_sha256: 64 hex)")
    return marker


def exposed_digests(kinds, path: str | os.PathLike | None = None, other_than: str | None = None) -> set[str]:
    """Digests of the given kinds; `other_than` leaves out what the contract with that digest itself
    exposed (re-preparing the same contract reproduces the same trial; a *later* contract may not reuse)."""
    return {e.digest for e in read_entries(path) if e.kind in kinds and e.contract_digest != other_than}


def exposure_hint(path: str | os.PathLike, digests, other_than: str | None = None) -> str:
    """The tail of a refusal when the ledger left too few records: which ledger, which contracts (and
    runs) exposed the excluded ones (not `other_than`, the preparing contract, whose own exposures do
    not exclude), and how to choose another ledger."""
    digests = set(digests)
    by: dict[str, set[str]] = {}
    for e in read_entries(path):
        if e.digest in digests and e.contract_digest != other_than:
            by.setdefault(e.contract_digest or "?", set()).add(e.run or "no run")
    who = "; ".join(f"contract {c[:12]} (run {', '.join(sorted(r))})" for c, r in sorted(by.items())) or "none"
    return (f"the exposure ledger {path} holds them, exposed under {who}; give a ledger of your own with "
            f"--ledger FILE (or ${LEDGER_ENV}) to prepare outside the committed evidence")


def tasks_excluding(count: int, seed: int, role: str, difficulty: int, excluded: set[str],
                    exposed: set[str] | frozenset[str]) -> tuple[list, int]:
    """kit.data.tasks.generate_set(count, ..., excluded | exposed), and how many drawn examples the ledger
    excluded: per family the draw is in index order, so the ledger-free draw lists the same candidates,
    and the count is the exposed examples met before the family's quota of unexposed ones is reached."""
    skipped = 0
    for family, want in family_counts_for(count).items():
        k = want
        while want:
            drawn = generate_set({family: k}, seed, role, difficulty, excluded)
            fresh = [i for i, e in enumerate(drawn) if e.digest not in exposed]
            if len(fresh) >= want:
                skipped += fresh[want - 1] + 1 - want
                break
            k *= 2
    return generate_set(count, seed, role, difficulty, set(excluded) | set(exposed)), skipped


def ledger_summary(path: str | os.PathLike | None = None) -> dict:
    """What a preparation read: {"path", "sha256" (null when absent), "size" (its bytes, 0 when absent),
    "entries", "digests": per kind} (the JSON of `summarize_ledger`)."""
    return summarize_ledger(path).to_json()


def summarize_ledger(path: str | os.PathLike | None = None) -> LedgerSummary:
    """What a preparation read of the ledger at `path` (`ledger_summary`), declared."""
    path = Path(path) if path is not None else ledger_path()
    entries = read_entries(path)
    return LedgerSummary(path=str(path.absolute()), sha256=sha256_file(path) if path.exists() else None,
                         size=path.stat().st_size if path.exists() else 0, entries=len(entries),
                         digests={k: len({e.digest for e in entries if e.kind == k}) for k in KINDS})


def _now() -> str:
    return iso_utc(utc_now())


def _run_id() -> str | None:
    run_dir = current_run_dir()
    return run_dir.name if run_dir is not None else None


def record(items: list[tuple[str, str, str]], contract_digest: str, job: str, purpose: str,
           path: str | os.PathLike | None = None, *, run: str | None = None, time: str | None = None,
           rebuilt: dict | None = None, check=None) -> int:
    """Append (kind, digest, id) items not yet in the ledger for this contract; returns how many were new.
    `run` and `time` default to the current run and now; tools/ledger_from_evaluations.py gives a past
    scoring's, and `rebuilt` (check_rebuilt), which every line it writes carries. `check(entries)`, when
    given, runs under the lock on the ledger's entries before anything is written; what it raises stops it."""
    path = Path(path) if path is not None else ledger_path()
    now, run = time or _now(), run or _run_id()
    marker = {} if rebuilt is None else {"rebuilt": check_rebuilt(rebuilt, "record(rebuilt=...)")}
    for kind, _, _ in items:
        if kind not in KINDS:
            raise LedgerError(f"exposure kind {kind!r}; expected one of {list(KINDS)}")
    if not items:
        return 0

    # Two scorings may record at once (the campaign's two trials share a host's ledger): under the lock,
    # what is already recorded is read and the new event appended, chained to the bytes before it, so
    # events never interleave and an item is never written twice for one contract.
    new: list = []

    def locked(f) -> None:
        _lock(f)
        entries = _checked_entries(path)
        if check is not None:
            check([raw for raw, _ in entries])
        seen = {(e.kind, e.digest) for _, e in entries if e.contract_digest == contract_digest}
        for kind, digest, rid in items:
            if (kind, digest) not in seen:
                seen.add((kind, digest))
                new.append([kind, digest, rid])
        if not new:
            raise _NothingNew

    header = {"event": "exposure", "contract_digest": contract_digest, "job": job, "run": run, "purpose": purpose,
              "time": now, **marker}
    try:
        event = append_event(path, header, new, lock=locked)
    except _NothingNew:
        return 0
    note_event(event, path)
    return len(new)


def append_guard_event(path: str | os.PathLike, header: dict):
    """Append a `selection` or `final-access` event (kit.adaptive.selection) under the ledger's lock and name
    it in the current run's record; returns the event."""
    event = append_event(Path(path), {**header, "run": header.get("run", _run_id()), "time": _now()}, [], lock=_lock)
    note_event(event, Path(path))
    return event


def chain_events(path: str | os.PathLike, kind: str) -> list[dict]:
    """The headers of the chained events of `kind` in the ledger at `path` (none when it is absent), as JSON
    (`chain_headers` declared)."""
    return [header.to_json() for header in chain_headers(path, kind)]


def chain_headers(path: str | os.PathLike, kind: str) -> list[EventHeader]:
    """The declared headers of the chained events of `kind` in the ledger at `path` (none when it is absent)."""
    try:
        return [ev.header for ev in parse(path).events if ev.header.event == kind]
    except ChainError as e:
        raise LedgerError(str(e)) from None


class _NothingNew(Exception):
    """Raised inside the lock when every item is already recorded: no event is appended."""


def note_event(event: Event, path: Path) -> None:
    """Name an appended event in the current run's record (`ledger_events`), with the head it wrote."""
    record_ledger_event(event.digest, event.head, event.header.event)


def _lock(f) -> None:
    """An exclusive advisory lock on the open ledger, released when it closes (POSIX; elsewhere none)."""
    try:
        import fcntl  # noqa: PLC0415 - optional: POSIX only (below)
    except ImportError:  # not POSIX: one writer at a time is the caller's to ensure
        return
    fcntl.flock(f.fileno(), fcntl.LOCK_EX)


def record_exposures(tasks, retention, contract_digest: str, job: str, purpose: str,
                     retention_kind: str = "final.retention", path: str | os.PathLike | None = None, *,
                     run: str | None = None, time: str | None = None, rebuilt: dict | None = None) -> int:
    """Final task conversations (by task digest) and retention conversations (by content digest)."""
    items = []
    for c in tasks:
        if "digest" not in c.meta:
            raise LedgerError(f"final task {c.id!r} has no task content digest (meta.digest)")
        items.append(("final.task", c.meta["digest"], c.id))
    items += [(retention_kind, c.digest, c.id) for c in retention]
    return record(items, contract_digest, job, purpose, path, run=run, time=time, rebuilt=rebuilt)
