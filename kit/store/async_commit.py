"""Commits that do not stall training: snapshot on the training thread, hash / write / verify behind it.

As torch.distributed.checkpoint's `async_save` does, the state is staged to host memory and written
from a background thread. The decision to know: every collective stays on the training thread, at
the same point on every rank (a poll at update boundaries), and HEAD moves only inside
`write_commit`, so a crash during the background write leaves HEAD on the previous commit and the
roots equal the synchronous commit's. Background errors surface at the next poll naming the step.
Threads and stages: docs/internals.md ("kit.store.async_commit"); format: docs/formats.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from kit.digest import canonical_json, loads_strict
from kit.store import commits
from kit.store.objects import ObjectStore

WriteObjects = Callable[[ObjectStore, dict], list]  # (store, host states) -> learned-state entries
# Hosts without a shared store (kit/engine/commit_transfer.py; passed in by Session, a layer above):
Transfer = Callable[[list], dict]  # (digests this rank wrote) -> its transfer report; a collective
AdoptShard = Callable[[dict, "str | None", list], None]  # (manifest, parent, written); a collective


class Background:
    """One job on its own daemon thread; `result()` re-raises the job's exception on the caller's thread."""

    def __init__(self, fn: Callable[[], Any], name: str):
        self._value: Any = None
        self._error: BaseException | None = None
        self.started = time.perf_counter()
        self.finished: float | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), name=name, daemon=True)
        self._thread.start()

    def _run(self, fn) -> None:
        try:
            self._value = fn()
        except BaseException as e:  # noqa: BLE001 -- carried to the training thread by result()
            self._error = e
        finally:
            self.finished = time.perf_counter()

    def wait(self) -> None:
        self._thread.join()

    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def _done(value: Any = None) -> Background:
    return Background(lambda: value, "kit-commit-noop")


class HostSnapshot:
    """Host copies of each parameter's FP32 tensors, reused from one commit to the next (pinned when the
    state lives on CUDA: pinned pages are slow to allocate and fast to copy into)."""

    def __init__(self):
        self._buffers: dict[tuple[str, str], torch.Tensor] = {}
        self.bytes = 0

    def take(self, states: dict[str, dict]) -> dict[str, dict]:
        out: dict[str, dict] = {}
        cuda = None
        total = 0
        for name in sorted(states):
            snap = {}
            for key, value in states[name].items():
                if not torch.is_tensor(value):
                    snap[key] = value
                    continue
                src = value.detach()
                buf = self._buffers.get((name, key))
                if buf is None or buf.shape != src.shape or buf.dtype != src.dtype:
                    pin = src.device.type == "cuda"
                    buf = torch.empty(src.shape, dtype=src.dtype, device="cpu", pin_memory=pin)
                    self._buffers[(name, key)] = buf
                if src.device.type == "cuda":
                    cuda = src.device
                    buf.copy_(src, non_blocking=True)
                else:
                    buf.copy_(src)
                total += buf.numel() * buf.element_size()
                snap[key] = buf
            out[name] = snap
        if cuda is not None:
            torch.cuda.current_stream(cuda).synchronize()  # the copies are complete before training resumes
        self.bytes = total
        return out


@dataclass
class InFlight:
    step: int
    cursor: dict
    rng: bytes
    stage: str  # "objects" -> "install" -> complete
    job: Background
    config_digest: str | None = None
    snapshot_s: float = 0.0
    timings: dict = field(default_factory=dict)
    written: list = field(default_factory=list)  # this rank's objects of the commit
    transfer: dict | None = None  # what they cost to bring into rank 0's store


class AsyncCommitter:
    """One rank's side of background commits for a Session (see the module docstring)."""

    def __init__(self, store: ObjectStore, write_objects: WriteObjects | None = None,
                 transfer: Transfer | None = None, adopt_shard: AdoptShard | None = None):
        """`transfer` and `adopt_shard`: the route of a commit across stores that are not one directory
        (rank 0's store receives what it lacks before it installs; every other store adopts its shard
        after), run on the training thread with the other collectives. Without them every rank's store
        must be rank 0's (one host, or a shared mount)."""
        self.store = store
        self.write_objects: WriteObjects = write_objects or commits.save_param_states
        self.transfer, self.adopt_shard = transfer, adopt_shard
        self.snapshot = HostSnapshot()
        self.inflight: InFlight | None = None
        self.polls = 0  # flag all-gathers done while a commit was in flight
        self.last: dict | None = None  # {"step", "full_root", "learned_state_root", timings} of the last complete one

    # -- training thread ---------------------------------------------------------------------------
    def start(self, step: int, cursor: dict, states: dict[str, dict], rng: bytes, config_bytes: bytes) -> float:
        """Snapshot and hand the object writes to the background; returns the seconds the caller stalled."""
        assert self.inflight is None, "finish the previous commit first"
        t0 = time.perf_counter()
        host = self.snapshot.take(states)
        stall = time.perf_counter() - t0
        store, write = self.store, self.write_objects

        def objects():
            entries = write(store, host)
            return {"entries": entries, "rng": store.put_bytes(rng), "config": store.put_bytes(config_bytes)}

        self.inflight = InFlight(step, cursor, rng, "objects", Background(objects, f"kit-commit-{step}"),
                                 snapshot_s=stall)
        return stall

    def poll(self, session, block: bool = False) -> bool:
        """Advance the in-flight commit as far as every rank allows; True when none is in flight any more.

        Each round is one all-gather of done flags (every rank executes the same rounds). With `block`,
        waits for this rank's job before each round, so the commit completes before returning."""
        while self.inflight is not None:
            job = self.inflight.job
            if block:
                job.wait()
            self.polls += 1
            flags = session.group.allgather_bytes(b"1" if job.done() else b"0")
            if not all(f == b"1" for f in flags):
                return False
            self._advance(session)
            if not block:
                return self.inflight is None
        return True

    def _advance(self, session) -> None:
        f = self.inflight
        if f.stage == "objects":
            status = {"ok": True, "error": None, "entries": None, "rng": None, "config": None}
            try:
                status.update(f.job.result())
            except Exception as e:  # noqa: BLE001 -- every rank learns it from the all-gather below
                status = {"ok": False, "error": f"{type(e).__name__}: {e}", "entries": None, "rng": None,
                          "config": None}
            f.timings["objects_s"] = round(f.job.finished - f.job.started, 4)
            gathered = [loads_strict(b, "commit entries")
                        for b in session.group.allgather_bytes(canonical_json(status))]
            failed = [f"rank {r}: {g['error']}" for r, g in enumerate(gathered) if not g["ok"]]
            if failed:
                self.inflight = None
                raise commits.CommitError(f"background commit of step {f.step} failed, HEAD unchanged: "
                                          + "; ".join(failed))
            mine = gathered[session.group.rank]
            f.written = [*commits.param_digests(mine["entries"]), mine["rng"], mine["config"]]
            if self.transfer is not None:  # on the training thread: collectives, same point on every rank
                f.transfer = self.transfer(f.written)
            if session.group.rank == 0:
                params = sorted((e for g in gathered for e in g["entries"]), key=lambda e: e["name"])
                layout = {**session.layout.to_json(), "model_config": gathered[0]["config"]}
                rngs = [g["rng"] for g in gathered]
                home, parent, missing = session.home, session.parent, (f.transfer or {}).get("errors") or []

                def install():
                    if missing:
                        raise commits.CommitError(f"{len(missing)} object(s) did not reach rank 0's store {home}, "
                                                  "HEAD unchanged: " + "; ".join(missing))
                    return commits.write_commit(home, {"cursor": f.cursor, "params": params}, layout, parent, rngs)
                f.job = Background(install, f"kit-install-{f.step}")
            else:
                f.job = _done()
            f.stage = "install"
            return
        outcome = {"ok": True, "root": None, "error": None, "manifest": None}
        try:
            if session.group.rank == 0:
                outcome["root"] = f.job.result()
                outcome["manifest"] = commits.read_commit(session.home, outcome["root"])
        except Exception as e:  # noqa: BLE001
            outcome = {"ok": False, "root": None, "error": f"{type(e).__name__}: {e}", "manifest": None}
        f.timings["install_s"] = round(f.job.finished - f.job.started, 4)
        result = loads_strict(session.group.allgather_bytes(canonical_json(outcome))[0], "commit outcome")
        self.inflight = None
        if not result["ok"]:
            raise commits.CommitError(f"rank 0 could not commit step {f.step} (background): {result['error']}")
        manifest = result["manifest"]  # rank 0's: another rank's store may not hold it yet
        if self.adopt_shard is not None:
            self.adopt_shard(manifest, session.parent, f.written)
        if f.transfer is not None:
            session.transfers.append({"step": f.step, "full_root": result["root"], **f.transfer})
        session.parent = result["root"]
        self.last = {"step": f.step, "full_root": result["root"],
                     "learned_state_root": manifest["learned_state_root"], "snapshot_s": round(f.snapshot_s, 4),
                     "snapshot_bytes": self.snapshot.bytes, **f.timings}
