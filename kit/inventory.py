"""Tensor inventory of a Hugging Face directory, read from safetensors headers, and the parameter digest.

No tensor is materialised: a safetensors file is an 8-byte little-endian header length, a JSON
header `{name: {"dtype", "shape", "data_offsets": [begin, end]}}` and a byte buffer whose tensors
are already little-endian and C-contiguous, so a tensor's digest is the sha256 of its byte range.

Parameter digest (`kit digest DIR`, documented in docs/formats.md):
    rows = sorted([name, dtype, shape, sha256(tensor bytes)] for every tensor of every *.safetensors)
    digest = sha256(json.dumps(rows, separators=(",", ":")))
with dtype spelled as torch spells it without the `torch.` prefix.
"""

from __future__ import annotations

import hashlib
import json
import os
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
        try:
            dtype = SAFETENSORS_DTYPES[meta["dtype"]]
            shape = tuple(int(d) for d in meta["shape"])
            begin, end = (int(x) for x in meta["data_offsets"])
        except KeyError as e:
            raise ValueError(f"{path}: tensor {name!r} header lacks or has an unknown {e}") from None
        if not 0 <= begin <= end or base + end > size:
            raise ValueError(f"{path}: tensor {name!r} data_offsets {begin}..{end} outside the file")
        entries.append(TensorEntry(name, dtype, shape, path, base + begin, base + end))
    return entries


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
    return out


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
