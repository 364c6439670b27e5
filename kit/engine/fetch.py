"""Objects over the process group: a new owner fetches its assigned objects from the rank whose host
holds the committed store, with no shared filesystem.

Every rank calls `fetch_over_group` together; the holder (lowest rank holding the commit) sends the
manifest and then each requested object, and a requester installs an object only when its sha256
equals its name. The decision to know: nothing here moves HEAD; the caller (kit/engine/migration.py)
adopts the manifest only when every rank's fetch succeeded.
Protocol: the notes below; why the process group: docs/engine.md.

Notes: the message order.

Ranks announce (`allgather_bytes`) whether they hold the commit and which objects they lack (intact ones are not
asked for); every rank checks the holder's manifest (`validate_manifest`). Then per requester in rank order, per
object in its order: the size (int64, -1 when unreadable), then the bytes as on the holder's disk, point to point.
A missing or corrupt object is recorded with its digest and the holder's rank and host, and the remaining messages
are still drained so both sides stay in step. Bytes are counted as `received` and `sent`.
"""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path

import torch

from kit.digest import canonical_json, loads_strict
from kit.distributed.group import Group
from kit.engine.formats import FetchReport, FetchRequest, Peer
from kit.store import commits
from kit.store.manifest import Manifest
from kit.store.objects import ObjectStore, fetch_objects


class FetchError(RuntimeError):
    pass


def host_name() -> str:
    """This host's name in errors: KIT_HOST_NAME (emulated hosts on one machine), else the hostname."""
    return os.environ.get("KIT_HOST_NAME") or socket.gethostname()


def holds_commit(source_home: str | None, root: str) -> bool:
    return bool(source_home and (commits.commits_dir(Path(source_home)) / f"{root}.json").is_file())


def holder_home(source_home: str | None) -> str:
    """The holder's store: the holder is a rank whose holds_commit was true, which a None home never is."""
    assert source_home is not None, "only the holder of the commit reads its source store"
    return source_home


def _dev(group: Group):
    return "cpu" if group.staged else group.device


def share_commit(group: Group, source_home: str | None, root: str) -> tuple[Manifest, int, list[Peer]]:
    """The manifest of `root` on every rank, from the lowest rank holding it. Returns (manifest,
    holder rank, every rank's announcement)."""
    me = {"rank": group.rank, "host": host_name(), "holds": holds_commit(source_home, root)}
    peers = [Peer.from_json(loads_strict(b, "fetch announcement"), "fetch announcement")
             for b in group.allgather_bytes(canonical_json(me))]
    holders = [p.rank for p in peers if p.holds]
    if not holders:
        raise FetchError(f"no rank holds commit {root}: " + ", ".join(f"rank {p.rank} ({p.host})" for p in peers))
    holder = holders[0]
    payload = canonical_json(commits.read_commit(holder_home(source_home), root)) if group.rank == holder else b""
    manifest = Manifest.from_json(loads_strict(group.allgather_bytes(payload)[holder], "manifest"),
                                  f"manifest of {root} from rank {holder} ({peers[holder].host})")
    if manifest.full_root != root:
        raise FetchError(f"rank {holder} ({peers[holder].host}) sent manifest {manifest.full_root} for {root}")
    return manifest, holder, peers


def fetch_over_group(group: Group, source_home: str | None, dest_home: str, holder: int, peers: list[Peer],
                     wanted: list[str]) -> FetchReport:
    """Fetch `wanted` (this rank's assigned objects) into `dest_home` from rank `holder`'s `source_home`.
    Never raises for a bad object: the report names it (the caller reports it and keeps HEAD)."""
    dest = ObjectStore(dest_home)
    mine = []
    for d in dict.fromkeys(wanted):
        if dest.has(d):
            try:
                dest.verify(d)
                continue
            except ValueError:  # missing (StoreError) or damaged (ObjectCorrupt): fetched again
                pass
        mine.append(d)
    received = sent = 0
    objects: list[str] = []
    errors: list[str] = []
    if group.rank == holder and mine:  # the holder's own needs: a local verified copy
        try:
            received += fetch_objects(ObjectStore(holder_home(source_home)), dest, mine)
            objects += mine
        except (ValueError, OSError) as e:  # StoreError, ObjectCorrupt (a DigestMismatch): recorded, not raised,
            # so every rank still reaches the report and learns it
            errors.append(f"rank {group.rank} ({host_name()}) copying from its own store: {type(e).__name__}: {e}")
        mine = []
    asks = [FetchRequest.from_json(loads_strict(b, "fetch request"), "fetch request")
            for b in group.allgather_bytes(canonical_json({"want": mine}))]
    holder_host = peers[holder].host
    if group.rank == holder:
        src = ObjectStore(holder_home(source_home))
        for r, ask in enumerate(asks):
            if r == holder:
                continue
            for d in ask.want:
                sent += send_object(group, src, d, r)
    elif mine:
        for d in mine:
            size, error = receive_object(group, dest, d, holder, holder_host)
            received += max(size, 0)
            if error:
                errors.append(error)
            else:
                objects.append(d)
    group.wait_sends()
    return FetchReport(received=received, sent=sent, objects=tuple(objects), errors=tuple(errors))


def send_object(group: Group, store: ObjectStore, digest: str, dst: int) -> int:
    """Send one object to rank `dst` as it is on this host's disk (the receiver verifies it): its size
    (int64; -1 when it cannot be read here), then its bytes. Returns the payload bytes sent."""
    dev = _dev(group)
    try:
        data = store.path(digest).read_bytes()
        size = len(data)
    except (OSError, ValueError):
        data, size = b"", -1
    _send(group, torch.tensor([size], dtype=torch.int64, device=dev), dst)
    if size > 0:
        _send(group, torch.frombuffer(bytearray(data), dtype=torch.uint8).to(dev), dst)
    return max(size, 0)


def receive_object(group: Group, dest: ObjectStore, digest: str, src: int, src_host: str) -> tuple[int, str | None]:
    """Receive object `digest` from rank `src` (the counterpart of `send_object`) and install it in `dest`
    only when its sha256 is its name. Returns (bytes received, -1 when the sender could not read it;
    the error naming the object and the sending host, or None)."""
    size = int(group.recv((1,), torch.int64, src).item())
    if size < 0:
        return -1, f"object {digest}: rank {src} ({src_host}) cannot read it from its store"
    data = bytes(group.recv((size,), torch.uint8, src).cpu().numpy().tobytes()) if size else b""
    actual = hashlib.sha256(data).hexdigest()
    if actual != digest:
        return size, (f"object {digest} from rank {src} ({src_host}): wrong bytes, sha256 {actual} of {size} bytes; "
                      "not installed")
    try:
        dest.put_bytes(data)  # written, fsynced and renamed into place before anyone names it
    except OSError as e:  # this host's disk (full, read-only): recorded like wrong bytes, so that both sides
        # stay in step (the message was received whole) and every rank reaches the report; raising here would
        # leave the sender's next send waiting for a receive that never comes
        return size, f"object {digest} from rank {src} ({src_host}): cannot be installed here: {type(e).__name__}: {e}"
    return size, None


def _send(group: Group, tensor: torch.Tensor, dst: int) -> None:
    group.isend(tensor, dst)
    group.wait_sends()
