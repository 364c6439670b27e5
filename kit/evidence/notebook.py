"""What notebook code calls from inside its kernel: `record_roots`, `record_inputs`, `record_metric`,
`record_file`, and the exceptions `ArmUnavailable` / `ArmAborted` that end a run with that status.

The calls write into the run directory named by the environment variable KIT_RUN_DIR (the runner sets
it and merges what they wrote into run.json); outside a run they write nothing and return None, so a
notebook also runs by hand. This module imports neither torch nor papermill.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.digest import canonical_json, load_json_strict, write_canonical_json
from kit.evidence.run_record import (
    METRIC_NAME_RE,
    METRICS_DIR_NAME,
    SHA256_RE,
    CheckpointRoot,
    LedgerEvent,
    Material,
    RunRecordError,
    check_root,
    defaulted_field,
)
from kit.record import MapOf, Opt, Record, Seq, build, spec_field

RUN_DIR_ENV = "KIT_RUN_DIR"
KERNEL_ROOTS_NAME = ".kernel-roots.json"  # written by record_roots, merged into run.json, then removed
KERNEL_INPUTS_NAME = ".kernel-inputs.json"  # written by record_inputs, likewise
KERNEL_CHAIN_NAME = ".kernel-chain.json"  # written by record_materials and record_ledger_event, likewise
MATERIAL_KINDS = ("file", "evaluation", "commit")  # how verification finds a material (docs/formats/run-records.md)


class ArmSignal(Exception):
    """Raised by notebook code to end a run with a status other than `failed`; str(e) is the reason."""

    status = "failed"

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class ArmUnavailable(ArmSignal):
    """The arm cannot run here (e.g. it needs more GPUs than the host has); not a failure of the kit."""

    status = "unavailable"


class ArmAborted(ArmSignal):
    """The arm stopped itself on purpose (e.g. a gate said the rest is pointless)."""

    status = "aborted"


# The kernel reports an exception by class name only, so the runner maps names, not classes.
STATUS_OF_EXCEPTION_NAME = {cls.__name__: cls.status for cls in (ArmUnavailable, ArmAborted)}


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelRoots(Record):
    """KERNEL_ROOTS_NAME in the run folder: the roots record_roots wrote, which the runner moves into run.json's
    `checkpoint_roots` (each home then made relative like `notebook`)."""

    produced: tuple[CheckpointRoot, ...] = defaulted_field(Seq(CheckpointRoot), tuple, "roots the run committed")
    used: tuple[CheckpointRoot, ...] = defaulted_field(Seq(CheckpointRoot), tuple, "roots the run read")


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelInputs(Record):
    """KERNEL_INPUTS_NAME in the run folder (and what the runner's caller passed): the contract and named inputs
    a run was bound to."""

    contract_digest: str | None = spec_field(Opt(str), doc="sha256 of the contract")
    input_digests: Mapping[str, str] = spec_field(MapOf(str), doc="input name -> sha256")


def current_run_dir() -> Path | None:
    """The run directory of the execution this kernel belongs to, or None outside `kit run`."""
    value = os.environ.get(RUN_DIR_ENV)
    return Path(value) if value else None


def _merge_root_entries(existing: list[dict], new: list[dict]) -> list[dict]:
    out = list(existing)
    for entry in new:
        if entry not in out:
            out.append(entry)
    return out


def record_roots(produced=(), used=(), home: str | os.PathLike | None = None) -> Path | None:
    """Record checkpoint roots this run produced and used (full roots, 64 hex) in checkpoint `home`.

    Calls accumulate (duplicates are dropped); `home` is what `kit verify-evidence` re-verifies the
    roots against. Returns the file written, or None outside a run.
    """
    entries = {
        role: [{"root": check_root(r, f"record_roots({role}=...)"),
                "home": str(Path(home).resolve()) if home is not None else None} for r in roots]
        for role, roots in (("produced", list(produced)), ("used", list(used)))
    }
    run_dir = current_run_dir()
    if run_dir is None:
        return None
    path = run_dir / KERNEL_ROOTS_NAME
    old = load_json_strict(path) if path.exists() else {"produced": [], "used": []}
    merged = {role: _merge_root_entries(old[role], entries[role]) for role in ("produced", "used")}
    write_canonical_json(path, merged)
    return path


def record_inputs(contract_digest: str | None = None, input_digests: dict[str, str] | None = None) -> Path | None:
    """Record the digest of the contract and of named inputs this run was bound to (sha256 hex).

    A name recorded twice with different digests, here or by the caller of the runner, makes the
    run `failed` with an EvidenceConflict: a record must not name two inputs for one thing.
    """
    if contract_digest is not None and not (isinstance(contract_digest, str) and SHA256_RE.fullmatch(contract_digest)):
        raise RunRecordError(f"record_inputs: contract_digest {contract_digest!r} is not a sha256 hex digest")
    for name, digest in (input_digests or {}).items():
        if not isinstance(digest, str) or not SHA256_RE.fullmatch(digest):
            raise RunRecordError(f"record_inputs: input {name!r} has digest {digest!r}, not a sha256 hex digest")
    run_dir = current_run_dir()
    if run_dir is None:
        return None
    path = run_dir / KERNEL_INPUTS_NAME
    old = build(load_json_strict(path), KernelInputs) if path.exists() else \
        KernelInputs(contract_digest=None, input_digests={})
    merged = merged_inputs(old, KernelInputs(contract_digest=contract_digest, input_digests=dict(input_digests or {})),
                           str(path))
    write_canonical_json(path, merged.to_json())
    return path


def merge_inputs(a: KernelInputs | dict, b: KernelInputs | dict, source: str) -> dict:
    """Union of two {"contract_digest", "input_digests"} records; conflicting digests are an error."""
    first = a if isinstance(a, KernelInputs) else build(a, KernelInputs)
    second = b if isinstance(b, KernelInputs) else build(b, KernelInputs)
    return merged_inputs(first, second, source).to_json()


def merged_inputs(a: KernelInputs, b: KernelInputs, source: str) -> KernelInputs:
    """`merge_inputs`, declared."""
    contract = a.contract_digest
    if b.contract_digest is not None:
        if contract is not None and contract != b.contract_digest:
            raise RunRecordError(f"{source}: contract digest {b.contract_digest} conflicts with {contract}")
        contract = b.contract_digest
    inputs = dict(a.input_digests or {})
    for name, digest in (b.input_digests or {}).items():
        if inputs.get(name, digest) != digest:
            raise RunRecordError(f"{source}: input {name!r} digest {digest} conflicts with {inputs[name]}")
        inputs[name] = digest
    return KernelInputs(contract_digest=contract, input_digests=inputs)


FILES_DIR_NAME = "files"  # copies of files outside the run that a reader needs to check it


def record_file(path: str | os.PathLike, name: str | None = None) -> Path | None:
    """Copy `path`'s bytes into runs/<run-id>/files/<name> (default: its file name), so that a file the run
    read or wrote outside its directory (a selection record, a prepared job's logs) travels with the run.

    The copy is taken when called: an append-only log is kept as it stood then. A missing file is an error
    naming it; a second copy under the same name is refused (two files for one name would hide one)."""
    src = Path(path)
    if not src.is_file():
        raise RunRecordError(f"record_file: {src} is not a file")
    name = name or src.name
    if not METRIC_NAME_RE.fullmatch(name):
        raise RunRecordError(f"record_file: name {name!r} must be a plain file name")
    run_dir = current_run_dir()
    if run_dir is None:
        return None
    dest = run_dir / FILES_DIR_NAME / name
    if dest.exists():
        raise RunRecordError(f"record_file: {dest} was already recorded; give another name")
    dest.parent.mkdir(parents=True, exist_ok=True)
    data = src.read_bytes()
    with open(dest, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return dest


def record_metric(name: str, obj: Any) -> Path | None:
    """Write `obj` as the canonical-JSON sidecar runs/<run-id>/metrics/<name>.json (NaN is refused).

    Shapes the report draws (docs/formats/metric-sidecars.md): a list of records with an "update" key -> curves;
    other lists of records, {"columns", "rows"} or a dict of dicts -> a table; a flat dict -> a
    one-column table; anything else is shown as JSON.
    """
    if not isinstance(name, str) or not METRIC_NAME_RE.fullmatch(name):
        raise RunRecordError(f"record_metric: name {name!r} must match {METRIC_NAME_RE.pattern}")
    try:
        canonical_json(obj)
    except (TypeError, ValueError) as e:
        raise RunRecordError(f"record_metric({name!r}): not canonical JSON ({e}); convert NaN/arrays first") from None
    run_dir = current_run_dir()
    if run_dir is None:
        return None
    path = run_dir / METRICS_DIR_NAME / f"{name}.json"
    write_canonical_json(path, obj)
    return path


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelChain(Record):
    """KERNEL_CHAIN_NAME in the run folder: what record_materials and record_ledger_event wrote from the kernel,
    which the runner moves into run.json's chain fields."""

    materials: tuple[Material, ...] = defaulted_field(Seq(Material), tuple, "what the run consumed, in order")
    ledger_events: tuple[LedgerEvent, ...] = defaulted_field(Seq(LedgerEvent), tuple, "ledger events it appended")


def _add_to_chain(key: str, item: dict) -> Path | None:
    run_dir = current_run_dir()
    if run_dir is None:
        return None
    path = run_dir / KERNEL_CHAIN_NAME
    old = load_json_strict(path) if path.exists() else {"materials": [], "ledger_events": []}
    if item not in old[key]:
        old[key].append(item)
    write_canonical_json(path, old)
    return path


def record_materials(role: str, kind: str, digests) -> None:
    """Name what this run consumed (docs/formats/run-records.md, "Materials"): `kind` "file" (the sha256 of a file some
    committed run holds), "evaluation" (an evaluation record's sha256, pinned by a run's evaluation_file
    sidecar) or "commit" (a full root some committed run produced); `role` says what it was for."""
    if kind not in MATERIAL_KINDS:
        raise RunRecordError(f"record_materials: kind {kind!r}; expected one of {list(MATERIAL_KINDS)}")
    for digest in digests:
        if not isinstance(digest, str) or not SHA256_RE.fullmatch(digest):
            raise RunRecordError(f"record_materials({role!r}): {digest!r} is not a sha256 hex digest")
        _add_to_chain("materials", {"role": role, "kind": kind, "digest": digest})


def record_ledger_event(digest: str, head: str, event: str) -> None:
    """Name an exposure-ledger event this run appended (its digest, and the head of the ledger it wrote)."""
    _add_to_chain("ledger_events", {"event": event, "digest": digest, "head": head})
