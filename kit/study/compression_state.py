"""The complete PowerSGD state of every rank, committed next to the weights of a checkpoint.

Resuming a compressed run from weights only would restart error feedback at zero and re-draw Q,
which changes every later update. So at every commit of a PowerSGD arm each rank writes its error
buffers and warm-start Q as objects of the same store, plus a record under
`home/compression/<full_root>/` (docs/formats/study-records.md, "Compression-state record"). The decision to know:
the record is not part of the manifest, so a commit without it is a weights-only checkpoint, and
resuming a PowerSGD arm from such a commit is refused. Details: the notes below.

Notes: the record.

Its commit's full root, rank and world, `PowerSGDCompressor.state_meta()` (step, config, compressed names,
cumulative traffic) and one object digest per "error/<name>" and "q/<name>" FP32 tensor; the fields:
docs/formats/study-records.md, "Compression-state record".
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kit.digest import load_canonical_json, sha256_file, write_canonical_json
from kit.record import SEED, MapOf, Num, OneOf, Record, Seq, spec_field
from kit.store.objects import ObjectStore, check_digest
from kit.study.formats import JSON_VALUE, CompressionRecordRef, plain
from kit.train.powersgd import PowerSGDCompressor

COMPRESSION_FORMAT = "kit.study.compression/1"
COMPRESSION_DIR = "compression"
RECORD_KEYS = {"format", "full_root", "rank", "world", "meta", "tensors"}


class CompressionStateError(ValueError):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class StateTensor(Record):
    """One FP32 tensor of a rank's PowerSGD state, an object of the weights' store."""
    digest: str = spec_field(str, doc="the store object (raw little-endian FP32)")
    dtype: str = spec_field(OneOf("float32"), doc="float32")
    shape: tuple[int, ...] = spec_field(Seq(SEED), doc="error/<name>: [n, m] (the matrix as (shape[0], rest)); "
                                                       "q/<name>: [m, r]")


@dataclass(frozen=True, slots=True, kw_only=True)
class CompressionState(Record):
    """A rank's compression-state record at a commit (docs/formats/study-records.md, "Compression-state record")."""
    FORMAT = COMPRESSION_FORMAT
    format: str = spec_field(OneOf(COMPRESSION_FORMAT), doc=COMPRESSION_FORMAT)
    full_root: str = spec_field(str, doc="the commit whose weights this state belongs to")
    rank: int = spec_field(Num(0, integer=True), doc="the rank")
    world: int = spec_field(Num(1, integer=True), doc="the ranks")
    meta: Mapping[str, Any] = spec_field(MapOf(JSON_VALUE), doc="PowerSGDCompressor.state_meta()")
    tensors: Mapping[str, StateTensor] = spec_field(MapOf(StateTensor),
                                                    doc="error/<name> (once step > warm-up), q/<name> (warm start)")


def record_path(home: str | os.PathLike, full_root: str, rank: int) -> Path:
    check_digest(full_root, "compression state: full_root")
    return Path(home) / COMPRESSION_DIR / full_root / f"rank-{rank}.json"


def write_compression_state(home: str | os.PathLike, full_root: str, rank: int, world: int,
                            compressor: PowerSGDCompressor) -> CompressionRecordRef:
    """Store this rank's tensors as objects and write its record; returns where (the arm record's reference)."""
    store = ObjectStore(home)
    tensors = {name: StateTensor(digest=store.put_tensor(t), dtype="float32", shape=tuple(t.shape))
               for name, t in compressor.state_tensors().items()}
    record = CompressionState(format=COMPRESSION_FORMAT, full_root=full_root, rank=rank, world=world,
                              meta=compressor.state_meta(), tensors=tensors)
    path = record_path(home, full_root, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    digest = write_canonical_json(path, record.to_json())
    return CompressionRecordRef(path=str(path), sha256=digest)


def read_compression_record(home: str | os.PathLike, full_root: str, rank: int, world: int) -> CompressionState:
    """The rank's record at `full_root`, checked (its keys, commit, rank and world, each tensor's entry) and built."""
    path = record_path(home, full_root, rank)
    if not path.exists():
        raise CompressionStateError(f"{path}: no compression state for rank {rank} of commit {full_root}; a "
                                    "PowerSGD arm resumes only from a commit that recorded it")
    record = load_canonical_json(path)
    if not isinstance(record, dict) or set(record) != RECORD_KEYS:
        raise CompressionStateError(f"{path}: expected exactly the keys {sorted(RECORD_KEYS)}")
    expected = {"format": COMPRESSION_FORMAT, "full_root": full_root, "rank": rank, "world": world}
    for key, want in expected.items():
        if record[key] != want:
            raise CompressionStateError(f"{path}: field {key!r} is {record[key]!r}; expected {want!r}")
    for name, entry in record["tensors"].items():  # the raw JSON, checked first for this file's own messages
        if not isinstance(entry, dict) or set(entry) != set(StateTensor.json_fields()) or entry["dtype"] != "float32":
            raise CompressionStateError(f"{path}: tensors[{name!r}] expected {{digest, dtype: float32, shape}}")
    built = CompressionState.from_json(record, str(path))
    for name, tensor in built.tensors.items():
        check_digest(tensor.digest, f"{path}: tensors[{name!r}].digest")
    return built


def load_compression_state(home: str | os.PathLike, full_root: str, rank: int, world: int,
                           compressor: PowerSGDCompressor) -> CompressionState:
    """Restore this rank's compressor from the record (every object re-hashed on read); returns it."""
    record = read_compression_record(home, full_root, rank, world)
    store = ObjectStore(home)
    tensors = {name: store.get_tensor(e.digest, e.dtype, list(e.shape)).to(torch.float32)
               for name, e in record.tensors.items()}
    try:
        compressor.load_state(tensors, plain(record.meta))  # the compressor checks a plain dict
    except ValueError as e:
        raise CompressionStateError(f"{record_path(home, full_root, rank)}: {e}") from None
    return record


def record_digests(home: str | os.PathLike, full_root: str, world: int) -> list[str]:
    """sha256 of every rank's record file (equal digests: equal state, since tensors are named by digest)."""
    return [sha256_file(record_path(home, full_root, r)) for r in range(world)]
