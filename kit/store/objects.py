"""Immutable content-addressed objects: `home/objects/<first two hex digits>/<sha256>`.

An object's name is the sha256 of its bytes, so every read is checked against the name and nothing
corrupted, truncated or substituted is returned. A tensor object is the tensor's raw little-endian
C-contiguous bytes (its name is the per-tensor digest of `kit digest`); dtype and shape live in the
manifest, and objects never hold pickles. Writes go through an fsynced temporary and a rename, so an
object path either does not exist or holds complete bytes. `ObjectStore.bytes_read` counts reads.
"""

from __future__ import annotations

import errno
import hashlib
import math
import os
import re
import socket
import stat
import sys
import threading
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch

from kit.digest import HASH_CHUNK, DigestMismatch, fsync_dir
from kit.publish import pid_alive

DIGEST_RE = re.compile(r"[0-9a-f]{64}")
TMP_DIR_NAME = "tmp"
OBJECTS_DIR_NAME = "objects"

# dtype names as torch spells them without the "torch." prefix (same spelling as kit.inventory)
TENSOR_DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}


class StoreError(ValueError):
    """A store file is missing, malformed or inconsistent; the message names the file."""


class ObjectMissing(StoreError):
    """An object a record names is not in the store."""


class ObjectCorrupt(DigestMismatch):
    """An object's bytes do not hash to its name (bit flip, truncation, substitution)."""


class ObjectWrongSize(ObjectCorrupt, StoreError):
    """An object's length is not the one its record implies; refused before a byte is read."""


def open_regular(path: Path, what: str = "store file"):
    """Open a file inside a store for reading, never through a symbolic link and never a special file.

    A store copied from someone else may hold `HEAD -> /dev/zero`, an object that is a FIFO or a link
    out of the store: O_NOFOLLOW refuses the link, O_NONBLOCK keeps a FIFO from blocking the open, and
    fstat must say "regular file". FileNotFoundError passes through."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise StoreError(f"{path}: {what} is a symbolic link; expected a regular file "
                             "(the kit never follows links inside a store)") from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise StoreError(f"{path}: {what} is not a regular file (mode {stat.filemode(mode)}); expected a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_regular(path: Path, what: str, limit: int) -> bytes:
    """The bytes of a regular store file (see `open_regular`) of at most `limit` bytes."""
    with open_regular(path, what) as f:
        n = os.fstat(f.fileno()).st_size
        if n > limit:
            raise StoreError(f"{path}: {what} holds {n} bytes; expected at most {limit}")
        return f.read(limit)


def check_real_dir(path: Path, what: str) -> bool:
    """Whether `path` is a directory (False when absent); a symbolic link or other file is refused."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory"
        raise StoreError(f"{path}: {what} is {kind}; expected a directory (the kit never follows links inside a store)")
    return True


def check_digest(value: object, what: str) -> str:
    """Return `value` if it is 64 lowercase hex characters, else a ValueError naming `what`."""
    if not isinstance(value, str) or not DIGEST_RE.fullmatch(value):
        raise StoreError(f"{what}: expected a sha256 digest (64 lowercase hex characters), got {value!r}")
    return value


def dtype_name(dtype: torch.dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in TENSOR_DTYPES:
        raise ValueError(f"tensor dtype {name} cannot be stored; supported: {sorted(TENSOR_DTYPES)}")
    return name


def torch_dtype(name: object, source: str) -> torch.dtype:
    if name not in TENSOR_DTYPES:
        raise ValueError(f"{source}: dtype {name!r} is not one of {sorted(TENSOR_DTYPES)}")
    return TENSOR_DTYPES[name]


def _require_little_endian() -> None:
    # Objects are defined as little-endian bytes; a big-endian host would need byte swapping
    # that nothing in the kit exercises, so it is refused rather than silently mis-hashed.
    if sys.byteorder != "little":
        raise RuntimeError("kit.store objects are little-endian; big-endian hosts are not supported")


# ---------------------------------------------------------------------------------------------
# temporary files: home/tmp/<purpose>.<host>.<pid>.<random>.tmp


def host_tag() -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "host"


def new_temp_path(home: str | os.PathLike, purpose: str) -> Path:
    """A fresh path under `home/tmp/`; its name records host and pid so gc can tell live writers."""
    assert re.fullmatch(r"[a-z-]+", purpose), purpose
    directory = Path(home) / TMP_DIR_NAME
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"{purpose}.{host_tag()}.{os.getpid()}.{uuid.uuid4().hex}.tmp"


def process_alive_here(host: str, pid: int) -> bool:
    """True if `pid` runs on this host (a process on another host is assumed alive)."""
    return host != host_tag() or pid_alive(pid)


TEMP_NAME_RE = re.compile(r"([a-z-]+)\.([A-Za-z0-9-]+)\.([0-9]+)\.[0-9a-f]{32}\.tmp")  # new_temp_path's names


def remove_stale_temps(home: str | os.PathLike, force: bool = False) -> list[str]:
    """Delete temporaries under `home/tmp/` whose writer is gone (all of them with `force`).

    Only the kit's own temporaries are deleted, by exact name (`new_temp_path`'s pattern, a regular
    file); anything else is left alone, and a `tmp` that is a link (e.g. `tmp -> ~`) is refused."""
    directory = Path(home) / TMP_DIR_NAME
    removed: list[str] = []
    if not check_real_dir(directory, "the temporaries folder"):
        return removed
    for path in sorted(directory.iterdir()):
        match = TEMP_NAME_RE.fullmatch(path.name)
        try:
            regular = stat.S_ISREG(os.lstat(path).st_mode)
        except FileNotFoundError:  # its writer installed or removed it meanwhile
            continue
        if match is None or not regular:
            continue
        if not force and process_alive_here(match[2], int(match[3])):
            continue
        path.unlink(missing_ok=True)
        removed.append(str(path))
    return removed


def write_durably(temp: Path, chunks: Iterable) -> None:
    try:
        with open(temp, "xb") as f:
            f.writelines(chunks)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:  # a write's error (a full disk) names no file by itself
        raise OSError(e.errno, e.strerror, str(temp)) from e


def install(temp: Path, final: Path) -> None:
    """Rename a complete, fsynced temporary into place and make the rename durable."""
    created_parent = not final.parent.is_dir()
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(temp, final)
    fsync_dir(final.parent)
    if created_parent:
        fsync_dir(final.parent.parent)


# ---------------------------------------------------------------------------------------------


class ObjectStore:
    """The objects of one store directory `home`; reads re-hash, writes are atomic and durable."""

    def __init__(self, home: str | os.PathLike):
        self.home = Path(home)
        self.objects_dir = self.home / OBJECTS_DIR_NAME
        self.bytes_read = 0  # every byte read from this store's objects, for traffic accounting
        self._count_lock = threading.Lock()  # objects are written and verified from several threads

    def _count(self, n: int) -> None:
        with self._count_lock:
            self.bytes_read += n

    def path(self, digest: str) -> Path:
        check_digest(digest, f"{self.objects_dir}: object name")
        return self.objects_dir / digest[:2] / digest

    def has(self, digest: str) -> bool:
        """Whether the object file exists (its content is not checked; use `verify`)."""
        return self.path(digest).is_file()

    def digests(self) -> Iterator[str]:
        """Names of every object file present, in sorted order."""
        if not check_real_dir(self.objects_dir, "the objects folder"):
            return
        for sub in sorted(self.objects_dir.iterdir()):
            if not re.fullmatch(r"[0-9a-f]{2}", sub.name) or not check_real_dir(sub, "an objects folder"):
                continue
            for path in sorted(sub.iterdir()):
                if DIGEST_RE.fullmatch(path.name) and path.name[:2] == sub.name:
                    yield path.name

    # -- writing ------------------------------------------------------------------------------

    def put_bytes(self, data: bytes | bytearray | memoryview) -> str:
        """Store `data`; returns its sha256. An existing verified copy is left untouched."""
        view = memoryview(data).cast("B")
        digest = hashlib.sha256(view).hexdigest()
        final = self.path(digest)
        if final.is_file():
            try:
                self.verify(digest)
                return digest
            except ObjectCorrupt:
                pass  # a damaged copy: the bytes in hand hash to the name, so rewriting repairs it
        temp = new_temp_path(self.home, "object")
        try:
            write_durably(temp, [view])
            install(temp, final)
        finally:
            temp.unlink(missing_ok=True)
        return digest

    def put_tensor(self, tensor: torch.Tensor) -> str:
        """Store a tensor's raw little-endian C-contiguous bytes; returns their sha256."""
        _require_little_endian()
        dtype_name(tensor.dtype)
        flat = tensor.detach().to("cpu").contiguous().reshape(-1)
        return self.put_bytes(flat.view(torch.uint8).numpy().data)  # the array's buffer, as a memoryview

    # -- reading ------------------------------------------------------------------------------

    def _open(self, digest: str):
        path = self.path(digest)
        check_real_dir(self.objects_dir, "the objects folder")
        check_real_dir(path.parent, "an objects folder")
        try:
            return path, open_regular(path, f"object {digest}")
        except FileNotFoundError:
            raise ObjectMissing(f"{path}: object {digest} is missing from the store") from None

    def _corrupt(self, path: Path, digest: str, actual: str, size: int) -> ObjectCorrupt:
        return ObjectCorrupt(
            f"{path}: object is corrupt: expected sha256 {digest} (its name), "
            f"actual sha256 {actual} of its {size} bytes"
        )

    @staticmethod
    def _check_size(path: Path, f, digest: str, size: int | None, needs: str) -> None:
        """Reads are bounded by the length the record implies: an object of another length is refused unread."""
        actual = os.fstat(f.fileno()).st_size
        if size is not None and actual != size:
            f.close()
            raise ObjectWrongSize(f"{path}: object holds {actual} bytes but {needs} needs {size} bytes "
                                  f"(expected sha256 {digest}, its name; not read)")

    def _read_verified(self, digest: str, size: int | None = None, needs: str = "") -> bytearray:
        path, f = self._open(digest)
        self._check_size(path, f, digest, size, needs)
        with f:
            buf = bytearray(os.fstat(f.fileno()).st_size)
            view, filled = memoryview(buf), 0
            while filled < len(buf):
                n = f.readinto(view[filled:])
                if not n:
                    break  # shrank while reading: the hash check below refuses it
                filled += n
        del view
        del buf[filled:]
        self._count(filled)
        actual = hashlib.sha256(buf).hexdigest()
        if actual != digest:
            raise self._corrupt(path, digest, actual, filled)
        return buf

    def get_bytes(self, digest: str) -> bytes:
        """The object's bytes after re-hashing them; ObjectMissing / ObjectCorrupt name the file."""
        return bytes(self._read_verified(digest))

    def get_tensor(self, digest: str, dtype: str, shape: Iterable[int]) -> torch.Tensor:
        """A tensor built (torch.frombuffer, no pickle) from a verified object of exact length."""
        _require_little_endian()
        path = self.path(digest)
        tdtype = torch_dtype(dtype, f"{path}: requested")
        shape = tuple(int(d) for d in shape)
        needed = math.prod(shape) * tdtype.itemsize
        buf = self._read_verified(digest, needed, f"{dtype}{list(shape)}")
        if len(buf) != needed:  # it changed length while being read
            raise ObjectWrongSize(f"{path}: object holds {len(buf)} bytes but {dtype}{list(shape)} needs {needed} bytes")
        if needed == 0:
            return torch.empty(shape, dtype=tdtype)
        return torch.frombuffer(buf, dtype=tdtype).reshape(shape)

    def verify(self, digest: str, fsync: bool = False, size: int | None = None) -> int:
        """Re-hash the object by streaming it (optionally fsync it first); returns its size. With
        `size` (what the manifest implies), an object of another length is refused unread."""
        path, f = self._open(digest)
        self._check_size(path, f, digest, size, "the manifest")
        h, size = hashlib.sha256(), 0
        with f:
            if fsync:
                os.fsync(f.fileno())
            while chunk := f.read(HASH_CHUNK):
                h.update(chunk)
                size += len(chunk)
        self._count(size)
        if h.hexdigest() != digest:
            raise self._corrupt(path, digest, h.hexdigest(), size)
        return size


def fetch_objects(source: ObjectStore, dest: ObjectStore, digests: Iterable[str]) -> int:
    """Copy exactly the named objects from `source` into `dest`, verifying each from the bytes read.

    No other source object is opened. An object `dest` already holds intact is skipped (so a rerun
    after an interrupted preparation is cheap); a damaged copy in `dest` is replaced. A source
    object that does not hash to its name is refused with ObjectCorrupt naming the source file,
    and nothing is installed for it. Returns the number of bytes read from `source`.
    """
    total = 0
    for digest in dict.fromkeys(digests):  # each object once, in the order given
        check_digest(digest, "fetch_objects: requested object")
        if dest.has(digest):
            try:
                dest.verify(digest)
                continue
            except ObjectCorrupt:
                pass
        total += _copy_verified(source, dest, digest)
    return total


def _copy_verified(source: ObjectStore, dest: ObjectStore, digest: str) -> int:
    path, f = source._open(digest)
    h, size = hashlib.sha256(), 0

    def chunks():
        nonlocal size
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
            size += len(chunk)
            yield chunk

    temp = new_temp_path(dest.home, "fetch")
    try:
        with f:
            write_durably(temp, chunks())
        source.bytes_read += size
        if h.hexdigest() != digest:
            raise ObjectCorrupt(
                f"{path}: refusing to fetch object {digest}: expected sha256 {digest}, "
                f"actual sha256 {h.hexdigest()} of its {size} bytes"
            )
        install(temp, dest.path(digest))
    finally:
        temp.unlink(missing_ok=True)
    return size
