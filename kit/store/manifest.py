"""Commit records of the checkpoint store: validation of learned state, layout, RNG and manifests,
and the two roots (learned-state root, full root). Pure functions over JSON records; no file is
read or written here. docs/formats/checkpoint-store.md ("Checkpoint store") is the reference.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from kit.digest import require_numeric_profile, sha256_json
from kit.record import SEED, MapOf, Num, OneOf, Opt, Record, Seq, build, spec_field
from kit.store.objects import StoreError, check_digest

FORMAT = "kit-checkpoint/1"
LEARNED_DTYPE = "float32"  # master weights and both Adam moments are FP32
TENSOR_FIELDS = ("param", "exp_avg", "exp_avg_sq")
ENTRY_KEYS = frozenset({"name", "dtype", "shape", "group", "age", *TENSOR_FIELDS})
STATE_KEYS = frozenset({"group", "age", *TENSOR_FIELDS})
LAYOUT_KEYS = frozenset({"blocks", "embedding_owner", "model_config"})
MANIFEST_KEYS = frozenset(
    {"format", "learned_state", "learned_state_root", "full_root", "layout", "parent", "rng"}
)
HEAD_NAME = "HEAD"
LOCK_NAME = "HEAD.lock"
COMMITS_DIR_NAME = "commits"
HEAD_RE = re.compile(rb"[0-9a-f]{64}\n")
FAULT_ENV = "KIT_FAULT_POINT"
FAULT_POINTS = ("objects_verified", "manifest_written", "before_head")
UNREADABLE_LOCK_STALE_S = 60.0  # a lock file with no readable record older than this is a crashed writer's


class RecordError(StoreError):
    """A learned state, layout, RNG list or manifest record is malformed; the message names the field."""


class CommitError(StoreError):
    """A commit cannot be written or read; the message names the file."""


class HeadMoved(CommitError):
    """Compare-and-swap lost: HEAD no longer names the parent this commit was built on."""


class HeadLocked(CommitError):
    """Another live writer held HEAD.lock for longer than the timeout."""



def commits_dir(home: Path) -> Path:
    return home / COMMITS_DIR_NAME


# -- the declared records ------------------------------------------------------------------------
# Their specs declare the format for the docs test and the type checker; reading one validates with the
# store's own checks below (`validate_manifest`, whose messages tests pin), then builds the frozen value.

DIGEST = str  # 64 lowercase hex: `check_digest`
NON_NEGATIVE = Num(0, SEED.hi, integer=True)  # ages and cursor positions: not bounded by a count of tasks


@dataclass(frozen=True, slots=True, kw_only=True)
class ParamEntry(Record):
    """One named parameter of a learned state: its shape, optimizer group, Adam age and three FP32 objects."""

    name: str = spec_field(str, doc="Hugging Face parameter name; entries are sorted by it, unique")
    dtype: str = spec_field(OneOf(LEARNED_DTYPE), doc="always float32 (master weights and both moments)")
    shape: tuple[int, ...] = spec_field(Seq(NON_NEGATIVE), doc="the tensor's shape")
    group: str = spec_field(str, doc="optimizer-group membership")
    age: int = spec_field(NON_NEGATIVE, doc="this parameter's Adam step count")
    param: str = spec_field(DIGEST, doc="object digest of the FP32 parameter")
    exp_avg: str = spec_field(DIGEST, doc="object digest of Adam's first moment")
    exp_avg_sq: str = spec_field(DIGEST, doc="object digest of Adam's second moment")

    def tensor_digests(self) -> tuple[str, str, str]:
        """The objects of `TENSOR_FIELDS`, in that order."""
        return self.param, self.exp_avg, self.exp_avg_sq


@dataclass(frozen=True, slots=True, kw_only=True)
class LearnedState(Record):
    """What was learned, without ownership or process RNG: the same for 2 or 3 workers."""

    cursor: Mapping[str, int] = spec_field(MapOf(NON_NEGATIVE), doc="data position (step, cohort, ...)")
    params: tuple[ParamEntry, ...] = spec_field(Seq(ParamEntry), doc="one entry per parameter, sorted by name")

    @classmethod
    def from_json(cls, value: Any, source: str = "learned_state", path: str = "") -> Self:
        validate_learned_state(value, source)
        return build(value, cls)


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitLayout(Record):
    """Which worker owned which blocks when the commit was made."""

    blocks: tuple[tuple[int, int], ...] = spec_field(Seq(Seq(int)), doc="blocks[r]: rank r's [start, stop)")
    embedding_owner: int = spec_field(int, doc="rank owning embeddings, tied head and final norm")
    model_config: str = spec_field(DIGEST, doc="object digest of the model's config.json bytes")

    @classmethod
    def from_json(cls, value: Any, source: str = "layout", path: str = "") -> Self:
        validate_layout(value, source)
        return build(value, cls)


@dataclass(frozen=True, slots=True, kw_only=True)
class Manifest(Record):
    """`commits/<full_root>.json`: a commit, named by its full root."""

    FORMAT = FORMAT
    format: str = spec_field(OneOf(FORMAT), doc="the store format")
    learned_state: LearnedState = spec_field(LearnedState, doc="the learned state")
    learned_state_root: str = spec_field(DIGEST, doc="sha256 of the learned state's canonical JSON")
    full_root: str = spec_field(DIGEST, doc="sha256 of learned_state_root, layout, parent and rng")
    layout: CommitLayout = spec_field(CommitLayout, doc="block ownership")
    parent: str | None = spec_field(Opt(DIGEST), doc="full root of the parent commit, null for the first")
    rng: tuple[str, ...] = spec_field(Seq(DIGEST), doc="rng[r]: object digest of rank r's RNG state")

    @classmethod
    def from_json(cls, value: Any, source: str, path: str = "") -> Self:
        """Structure checked, both roots recomputed (`validate_manifest`), then built."""
        validate_manifest(value, source)
        return build(value, cls)


# -- validation ----------------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _exact_keys(obj: Any, keys: frozenset, source: str) -> None:
    if not isinstance(obj, dict):
        raise RecordError(f"{source}: expected a JSON object, got {type(obj).__name__}")
    if set(obj) != keys:
        raise RecordError(f"{source}: expected exactly the keys {sorted(keys)}, got {sorted(obj)}")


def validate_param_entries(entries: Any, source: str = "params") -> None:
    if not isinstance(entries, list):
        raise RecordError(f"{source}: expected a list of parameter entries, got {type(entries).__name__}")
    previous = None
    for i, entry in enumerate(entries):
        where = f"{source}[{i}]"
        _exact_keys(entry, ENTRY_KEYS, where)
        name = entry["name"]
        if not isinstance(name, str) or not name:
            raise RecordError(f"{where}.name: expected a non-empty string, got {name!r}")
        where = f"{source}[{i}] ({name!r})"
        if previous is not None and name == previous:
            raise RecordError(f"{where}.name: duplicate parameter name")
        if previous is not None and name < previous:
            raise RecordError(f"{where}.name: entries must be sorted by name; it follows {previous!r}")
        previous = name
        if entry["dtype"] != LEARNED_DTYPE:
            raise RecordError(f"{where}.dtype: expected {LEARNED_DTYPE!r}, got {entry['dtype']!r}")
        shape = entry["shape"]
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            raise RecordError(f"{where}.shape: expected a list of non-negative integers, got {shape!r}")
        if not isinstance(entry["group"], str) or not entry["group"]:
            raise RecordError(f"{where}.group: expected a non-empty string, got {entry['group']!r}")
        if not _is_int(entry["age"]) or entry["age"] < 0:
            raise RecordError(f"{where}.age: expected a non-negative integer, got {entry['age']!r}")
        for field in TENSOR_FIELDS:
            check_digest(entry[field], f"{where}.{field}")


def validate_learned_state(learned_state: Any, source: str = "learned_state") -> None:
    """Refuse anything but {"cursor": {str: non-negative int}, "params": [sorted entries]}."""
    _exact_keys(learned_state, frozenset({"cursor", "params"}), source)
    cursor = learned_state["cursor"]
    if not isinstance(cursor, dict):
        raise RecordError(f"{source}.cursor: expected a JSON object, got {type(cursor).__name__}")
    for key, value in cursor.items():
        if not _is_int(value) or value < 0:
            raise RecordError(f"{source}.cursor[{key!r}]: expected a non-negative integer, got {value!r}")
    validate_param_entries(learned_state["params"], f"{source}.params")


def validate_layout(layout: Any, source: str = "layout", num_layers: int | None = None) -> None:
    """Refuse ranges that do not tile 0..num_layers in rank order, or an out-of-range embedding owner.

    blocks[r] = [start, stop] is worker rank r's half-open block range; ranges are contiguous in
    rank order (blocks[r][0] == blocks[r-1][1]); an empty range (start == stop) is allowed.
    `num_layers` (from the config object) is checked when given.
    """
    _exact_keys(layout, LAYOUT_KEYS, source)
    blocks = layout["blocks"]
    if not isinstance(blocks, list) or not blocks:
        raise RecordError(f"{source}.blocks: expected a non-empty list of [start, stop] ranges, got {blocks!r}")
    expected_start = 0
    for rank, block in enumerate(blocks):
        where = f"{source}.blocks[{rank}]"
        if not (isinstance(block, list) and len(block) == 2 and all(_is_int(b) for b in block)):
            raise RecordError(f"{where}: expected [start, stop] integers, got {block!r}")
        start, stop = block
        if start > stop:
            raise RecordError(f"{where}: start {start} is after stop {stop}")
        if start > expected_start:
            raise RecordError(f"{where}: misses blocks {expected_start}..{start - 1} (ranges must be contiguous)")
        if start < expected_start:
            raise RecordError(f"{where}: repeats blocks {start}..{expected_start - 1} already owned by a lower rank")
        expected_start = stop
    if num_layers is not None and expected_start != num_layers:
        raise RecordError(f"{source}.blocks: cover blocks 0..{expected_start - 1} but the model has {num_layers}")
    owner = layout["embedding_owner"]
    if not _is_int(owner) or not 0 <= owner < len(blocks):
        raise RecordError(f"{source}.embedding_owner: expected a rank in 0..{len(blocks) - 1}, got {owner!r}")
    check_digest(layout["model_config"], f"{source}.model_config")


def validate_rng(rng: Any, world_size: int, source: str = "rng") -> None:
    if not isinstance(rng, list) or len(rng) != world_size:
        raise RecordError(f"{source}: expected a list of {world_size} object digests (one per rank), got {rng!r}")
    for rank, digest in enumerate(rng):
        check_digest(digest, f"{source}[{rank}]")


def _validate_parent(parent: Any, source: str) -> None:
    if parent is not None:
        check_digest(parent, source)


# -- roots ---------------------------------------------------------------------------------------


def learned_state_root(learned_state: dict) -> str:
    require_numeric_profile("learned-state root")
    return sha256_json(learned_state)


def full_root(learned_state_root: str, layout: dict, parent: str | None, rng: list[str]) -> str:
    require_numeric_profile("full root")
    return sha256_json(
        {"learned_state_root": learned_state_root, "layout": layout, "parent": parent, "rng": rng}
    )


def build_manifest(learned_state: dict, layout: dict, parent: str | None, rng: list[str]) -> dict:
    """The manifest's JSON from validated parts (JSON as `write_commit` receives them)."""
    ls_root = learned_state_root(learned_state)
    return {
        "format": FORMAT,
        "learned_state": learned_state,
        "learned_state_root": ls_root,
        "full_root": full_root(ls_root, layout, parent, rng),
        "layout": layout,
        "parent": parent,
        "rng": rng,
    }


def param_digests(entries: Sequence[ParamEntry | dict], names: set[str] | None = None) -> list[str]:
    """The param / exp_avg / exp_avg_sq objects of the named entries (all when `names` is None); entries
    given as the JSON `save_param_states` returns are read as declared entries."""
    typed = [e if isinstance(e, ParamEntry) else build(e, ParamEntry) for e in entries]
    return [d for e in typed if names is None or e.name in names for d in e.tensor_digests()]


def manifest_objects(manifest: Manifest) -> list[str]:
    """Every object a commit names, each once: model config, RNG states, then parameter tensors."""
    named = [manifest.layout.model_config, *manifest.rng, *param_digests(manifest.learned_state.params)]
    return list(dict.fromkeys(named))


def as_manifest(manifest: Manifest | dict) -> Manifest:
    """The declared record of a manifest, or of its JSON as `read_commit` returns it (already validated: the
    public functions that tests and not-yet-typed callers give the JSON)."""
    return manifest if isinstance(manifest, Manifest) else build(manifest, Manifest)


def object_digests(manifest: Manifest | dict) -> list[str]:
    """`manifest_objects` of a manifest or of its JSON as `read_commit` returns it."""
    return manifest_objects(as_manifest(manifest))


def validate_manifest(manifest: Any, source: str) -> None:
    """Structure, both roots recomputed and compared; objects are not read (see verify_commit)."""
    _exact_keys(manifest, MANIFEST_KEYS, source)
    if manifest["format"] != FORMAT:
        raise CommitError(f"{source}: format {manifest['format']!r}; expected {FORMAT!r}")
    validate_learned_state(manifest["learned_state"], f"{source}: learned_state")
    validate_layout(manifest["layout"], f"{source}: layout")
    _validate_parent(manifest["parent"], f"{source}: parent")
    validate_rng(manifest["rng"], len(manifest["layout"]["blocks"]), f"{source}: rng")
    ls_root = learned_state_root(manifest["learned_state"])
    if manifest["learned_state_root"] != ls_root:
        raise CommitError(
            f"{source}: learned_state_root {manifest['learned_state_root']!r} does not match the "
            f"learned state, which hashes to {ls_root}"
        )
    root = full_root(ls_root, manifest["layout"], manifest["parent"], manifest["rng"])
    if manifest["full_root"] != root:
        raise CommitError(f"{source}: full_root {manifest['full_root']!r} does not match the recomputed {root}")


