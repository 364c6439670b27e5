"""Tensor inventory of a Hugging Face directory, read from safetensors headers, and the parameter digest.

No tensor is materialised: a safetensors file is an 8-byte little-endian header length, a JSON
header `{name: {"dtype", "shape", "data_offsets": [begin, end]}}` and a byte buffer whose tensors
are already little-endian and C-contiguous, so a tensor's digest is the sha256 of its byte range.

Parameter digest (`kit digest DIR`, documented in docs/formats/parameter-digest.md):
    rows = sorted([name, dtype, shape, sha256(tensor bytes)] for every tensor of every *.safetensors)
    digest = sha256(json.dumps(rows, separators=(",", ":")))
with dtype spelled as torch spells it without the `torch.` prefix.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from kit.digest import HASH_CHUNK, loads_strict, require_numeric_profile

# safetensors dtype codes -> torch names (without the "torch." prefix)
SAFETENSORS_DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
}
MAX_HEADER_BYTES = 100 * 1024 * 1024
ITEM_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
              "F8_E4M3": 1, "F8_E5M2": 1}
MAX_DIMS = 8


@dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: str  # torch name, e.g. "float32"
    shape: tuple[int, ...]
    file: Path
    begin: int  # absolute byte offset of the tensor's data in `file`
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


def read_header(path: str | os.PathLike) -> list[TensorEntry]:
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: truncated safetensors file (no 8-byte header length)")
        (n,) = struct.unpack("<Q", raw)
        if n > MAX_HEADER_BYTES or 8 + n > size:
            raise ValueError(f"{path}: safetensors header length {n} exceeds the file size {size}")
        header = loads_strict(f.read(n), f"{path} (safetensors header)")
    if not isinstance(header, dict):  # a malformed file, not a caller's type error: ValueError as above
        raise ValueError(f"{path}: safetensors header is not a JSON object")  # noqa: TRY004
    base = 8 + n
    entries = []
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        dtype, begin, end, shape = _check_entry(path, name, meta, size - base)
        entries.append(TensorEntry(name, SAFETENSORS_DTYPES[dtype], shape, path, base + begin, base + end))
    # tensors must not share or overlap bytes: two names over one range would digest as two tensors
    spans = sorted((e.begin, e.end, e.name) for e in entries if e.end > e.begin)
    for (_, end_a, name_a), (begin_b, _, name_b) in itertools.pairwise(spans):
        if begin_b < end_a:
            raise ValueError(f"{path}: tensors {name_a!r} and {name_b!r} overlap in the data buffer; "
                             "expected disjoint data_offsets")
    return entries


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_entry(path: Path, name: str, meta: object, buffer: int) -> tuple[str, int, int, tuple[int, ...]]:
    """One header entry, validated completely before anything trusts it: (dtype, begin, end, shape)."""
    where = f"{path}: tensor {name!r}"
    match meta:
        case {"dtype": dtype, "shape": shape, "data_offsets": offsets} if isinstance(meta, dict) and len(meta) == 3:
            pass
        case _:
            raise ValueError(f"{where}: expected an object with exactly dtype, shape and data_offsets, "
                             f"got {meta!r:.80}")
    if dtype not in ITEM_SIZES:
        raise ValueError(f"{where}: dtype {dtype!r:.40}; expected one of {sorted(ITEM_SIZES)}")
    if not isinstance(shape, list) or len(shape) > MAX_DIMS or not all(_is_count(d) for d in shape):
        raise ValueError(f"{where}: shape {shape!r:.80}; expected a list of at most {MAX_DIMS} non-negative integers")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(x) for x in offsets) \
            or offsets[0] > offsets[1] or offsets[1] > buffer:
        raise ValueError(f"{where}: data_offsets {offsets!r:.80} outside the file; expected [begin, end] with "
                         f"0 <= begin <= end <= {buffer} (the data buffer's size)")
    nbytes = ITEM_SIZES[dtype]
    for d in shape:
        nbytes *= d
    if nbytes != offsets[1] - offsets[0]:
        raise ValueError(f"{where}: {dtype}{shape} needs {nbytes} bytes but data_offsets "
                         f"{offsets} span {offsets[1] - offsets[0]}")
    return dtype, offsets[0], offsets[1], tuple(shape)


def check_shapes(directory: str | os.PathLike, expected: dict[str, tuple[int, ...]]) -> None:
    """Refuse a model directory whose tensors (read from the headers only) are not the ones `config`
    implies, by name and shape, before any model is allocated for it (the messages of
    `kit.model.shard.load_owned`, which checks the same after allocating)."""
    inv = inventory(directory)
    missing = sorted(expected.keys() - inv.keys())
    if missing:
        raise ValueError(f"{directory}: tensor {missing[0]!r} is missing from the safetensors files "
                         f"({len(missing)} missing)")
    for name, want in expected.items():
        if inv[name].shape != want:
            raise ValueError(f"{inv[name].file}: tensor {name!r} has shape {list(inv[name].shape)}; "
                             f"expected {list(want)} from config.json")


def inventory(directory: str | os.PathLike) -> dict[str, TensorEntry]:
    """Every tensor of every *.safetensors file in `directory`, by name; duplicates are refused."""
    directory = Path(directory)
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{directory}: no *.safetensors files")
    out: dict[str, TensorEntry] = {}
    for file in files:
        for entry in read_header(file):
            if entry.name in out:
                raise ValueError(f"{file}: tensor {entry.name!r} also stored in {out[entry.name].file}")
            out[entry.name] = entry
    check_shards(directory, files, out)
    return out


INDEX_NAME = "model.safetensors.index.json"  # transformers' index of a sharded model
SHARD_RE = re.compile(r"(.+)-(\d+)-of-(\d+)\.safetensors")


def check_shards(directory: Path, files: list[Path], inv: dict[str, TensorEntry]) -> None:
    """A sharded model is whole: with an index, every shard it names is present and every tensor is in the
    file the index says, and no tensor or file is outside it; without one, shards named NAME-i-of-N are all
    there: a digest of a partial model would be pinned as if it were the model."""
    index_path = directory / INDEX_NAME
    if index_path.exists():
        try:
            weight_map = json.loads(index_path.read_text())["weight_map"]
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{index_path}: expected a JSON object with a 'weight_map' of tensor name -> "
                             f"shard file ({type(e).__name__}: {e})") from None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise ValueError(f"{index_path}: field 'weight_map' must be an object of tensor name -> shard file")
        missing = sorted({f for f in weight_map.values() if not (directory / f).is_file()})
        if missing:
            raise ValueError(f"{index_path}: field 'weight_map' names shard(s) not in {directory}: "
                             f"{', '.join(missing)}")
        for name, file in sorted(weight_map.items()):
            if name not in inv or inv[name].file.name != file:
                where = inv[name].file.name if name in inv else "no shard"
                raise ValueError(f"{index_path}: field 'weight_map' puts tensor {name!r} in {file}; found in {where}")
        unlisted = sorted(set(inv) - set(weight_map))
        if unlisted:
            raise ValueError(f"{inv[unlisted[0]].file}: tensor {unlisted[0]!r} is not in {INDEX_NAME}'s weight_map "
                             f"({len(unlisted)} such tensor(s))")
        return
    groups: dict[tuple[str, int], set[int]] = {}
    for f in files:
        m = SHARD_RE.fullmatch(f.name)
        if m:
            groups.setdefault((m.group(1), int(m.group(3))), set()).add(int(m.group(2)))
    for (stem, total), seen in sorted(groups.items()):
        absent = sorted(set(range(1, total + 1)) - seen)
        if absent:
            width = len(f"{total:05d}")
            names = ", ".join(f"{stem}-{i:0{width}d}-of-{total:0{width}d}.safetensors" for i in absent)
            raise ValueError(f"{directory}: shard(s) {names} missing (and no {INDEX_NAME})")


def tensor_sha256(entry: TensorEntry) -> str:
    h = hashlib.sha256()
    with open(entry.file, "rb") as f:
        f.seek(entry.begin)
        left = entry.nbytes
        while left:
            chunk = f.read(min(HASH_CHUNK, left))
            if not chunk:
                raise ValueError(f"{entry.file}: tensor {entry.name!r} truncated")
            h.update(chunk)
            left -= len(chunk)
    return h.hexdigest()


def digest_rows(directory: str | os.PathLike) -> list[list]:
    inv = inventory(directory)
    return [[e.name, e.dtype, list(e.shape), tensor_sha256(e)] for _, e in sorted(inv.items())]


def parameter_digest(directory: str | os.PathLike) -> str:
    require_numeric_profile(f"parameter digest of {directory}")
    rows = digest_rows(directory)
    return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode("utf-8")).hexdigest()


def inventory_digest(directory: str | os.PathLike) -> str:
    """Digest of names, dtypes and shapes only (headers, no tensor bytes read): the seed's shape identity."""
    inv = inventory(directory)
    rows = [[e.name, e.dtype, list(e.shape)] for _, e in sorted(inv.items())]
    return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode("utf-8")).hexdigest()
