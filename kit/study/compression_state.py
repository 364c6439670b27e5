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
from pathlib import Path

import torch

from kit.digest import load_canonical_json, sha256_file, write_canonical_json
from kit.store.objects import ObjectStore, check_digest
from kit.train.powersgd import PowerSGDCompressor

COMPRESSION_FORMAT = "kit.study.compression/1"
COMPRESSION_DIR = "compression"
RECORD_KEYS = {"format", "full_root", "rank", "world", "meta", "tensors"}


class CompressionStateError(ValueError):
    pass


def record_path(home: str | os.PathLike, full_root: str, rank: int) -> Path:
    check_digest(full_root, "compression state: full_root")
    return Path(home) / COMPRESSION_DIR / full_root / f"rank-{rank}.json"


def write_compression_state(home: str | os.PathLike, full_root: str, rank: int, world: int,
                            compressor: PowerSGDCompressor) -> dict:
    """Store this rank's tensors as objects and write its record; returns {"path", "sha256"}."""
    store = ObjectStore(home)
    tensors = {}
    for name, t in compressor.state_tensors().items():
        tensors[name] = {"digest": store.put_tensor(t), "dtype": "float32", "shape": list(t.shape)}
    record = {"format": COMPRESSION_FORMAT, "full_root": full_root, "rank": rank, "world": world,
              "meta": compressor.state_meta(), "tensors": tensors}
    path = record_path(home, full_root, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    digest = write_canonical_json(path, record)
    return {"path": str(path), "sha256": digest}


def read_compression_record(home: str | os.PathLike, full_root: str, rank: int, world: int) -> dict:
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
    for name, entry in record["tensors"].items():
        if not isinstance(entry, dict) or set(entry) != {"digest", "dtype", "shape"} or entry["dtype"] != "float32":
            raise CompressionStateError(f"{path}: tensors[{name!r}] expected {{digest, dtype: float32, shape}}")
        check_digest(entry["digest"], f"{path}: tensors[{name!r}].digest")
    return record


def load_compression_state(home: str | os.PathLike, full_root: str, rank: int, world: int,
                           compressor: PowerSGDCompressor) -> dict:
    """Restore this rank's compressor from the record (every object re-hashed on read); returns it."""
    record = read_compression_record(home, full_root, rank, world)
    store = ObjectStore(home)
    tensors = {name: store.get_tensor(e["digest"], e["dtype"], e["shape"]).to(torch.float32)
               for name, e in record["tensors"].items()}
    try:
        compressor.load_state(tensors, record["meta"])
    except ValueError as e:
        raise CompressionStateError(f"{record_path(home, full_root, rank)}: {e}") from None
    return record


def record_digests(home: str | os.PathLike, full_root: str, world: int) -> list[str]:
    """sha256 of every rank's record file (equal digests: equal state, since tensors are named by digest)."""
    return [sha256_file(record_path(home, full_root, r)) for r in range(world)]
