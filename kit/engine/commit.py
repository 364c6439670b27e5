"""The commit protocol of a Session, one for the synchronous and the background commit.

Every rank writes its own objects; the ranks all-gather what they wrote, rank 0's store receives the
objects it lacks, rank 0 writes the commit, every rank learns rank 0's outcome, the other stores adopt
their shards and every rank's parent becomes the new root. `Session.commit` runs the steps back to
back; `AsyncCommitter` runs the same steps at the polls of later updates while the object writes and
rank 0's install run on a background thread (kit.store.async_commit). The decision to know: every
collective runs on the training thread, in the same order on every rank (NCCL's rules), and the
storage layer is only handed what the engine decided. Threads and stages: the notes below.

Notes: the background commit's threads and stages.

As torch.distributed.checkpoint's `async_save`: snapshot to (pinned) host memory, write from a thread. Unlike it,
the thread never touches the process group, the model or the optimizer (dcp gathers metadata there over a group of
its own): an all-gather of "done" flags at each update's poll plays the part of nvidia-resiliency-ext's
`finalize_async_save`, and every rank advances on the same gathered flags, so all ranks run the same collectives.
    commit(step): snapshot params, moments, RNG bytes, cursor  ->  thread: hash, write, fsync this rank's objects
    poll, all done: `agree_on_objects` (rank 0 receives what it lacks)  ->  rank 0's thread: `write_commit`
    next poll, all done: `agree_on_root` (outcome and manifest gathered, shards adopted, parent moves)
At most one commit is in flight (the next commit, `wait` and the end of training wait for it), so nothing writes
the snapshot meanwhile. A SIGKILL anywhere in the background write leaves HEAD on the previous commit (orphans and
temporaries are gc's), and the roots equal the synchronous commit's (tests/test_async_commit.py). A background error
reaches every rank at the next poll, `commit` or `wait` as CommitError naming the step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kit.digest import canonical_json, loads_strict
from kit.engine.commit_transfer import adopt_shard, gather_objects
from kit.engine.formats import CommitOutcome, CommitTransfer, ObjectsReport
from kit.store import commits
from kit.store.async_commit import Background, HostSnapshot, WriteObjects, finished_job
from kit.store.manifest import Manifest

Install = Callable[[], str]  # rank 0's write of the commit record; returns the full root


class Commit:
    """One commit on one rank, from the objects it wrote to the root every rank agrees on.

    `session` gives the group, the stores, the layout and the parent, and learns the outcome. Both
    methods are collectives: every rank calls them in this order, at the same point."""

    def __init__(self, session, step: int, cursor: dict, background: bool = False):
        self.session, self.step, self.cursor = session, step, cursor
        self.background = background
        self.written: list[str] = []  # this rank's objects of the commit
        self.transfer: CommitTransfer | None = None  # what they cost to bring into rank 0's store

    def agree_on_objects(self, report: dict) -> Install | None:
        """All-gather every rank's objects `report` ({"ok", "error", "entries", "rng", "config"}), then
        bring them into rank 0's store. Returns rank 0's install (None on the other ranks); raises
        CommitError on every rank when one rank could not write its objects."""
        s = self.session
        gathered = [ObjectsReport.from_json(loads_strict(b, "commit entries"), "commit entries")
                    for b in s.group.allgather_bytes(canonical_json(report))]
        failed = [f"rank {r}: {g.error}" for r, g in enumerate(gathered) if not g.ok]
        if failed:
            what = "background commit" if self.background else "commit"
            raise commits.CommitError(f"{what} of step {self.step} failed, HEAD unchanged: " + "; ".join(failed))
        mine = gathered[s.group.rank]
        self.written = [*commits.param_digests(mine.entries or ()), str(mine.rng), str(mine.config)]
        # hosts without a shared mount: rank 0's store receives what it lacks (kit/engine/commit_transfer.py)
        self.transfer = gather_objects(s.group, s.store, self.written)
        if s.group.rank != 0:
            return None
        params = sorted((e for g in gathered for e in g.entries or ()), key=lambda e: e.name)
        learned = {"cursor": self.cursor, "params": [e.to_json() for e in params]}
        layout = {**s.layout.to_json(), "model_config": gathered[0].config}
        rngs = [str(g.rng) for g in gathered]
        home, parent, missing = s.home, s.parent, self.transfer.errors

        def install() -> str:
            if missing:
                raise commits.CommitError(f"{len(missing)} object(s) did not reach rank 0's store {home}, "
                                          "HEAD unchanged: " + "; ".join(missing))
            return commits.write_commit(home, learned, layout, parent, rngs)
        return install

    def agree_on_root(self, install: Install | None) -> tuple[str, Manifest]:
        """Rank 0 runs `install` (or collects the background install's root); every rank learns its
        outcome, the other stores adopt their shards, and the session's parent becomes the new root.
        Returns (full_root, manifest); CommitError on every rank when rank 0 could not commit."""
        s = self.session
        outcome: dict[str, Any] = {"ok": True, "root": None, "error": None, "manifest": None}
        try:
            if s.group.rank == 0:
                assert install is not None, "rank 0 always installs (agree_on_objects)"
                root = install()
                outcome.update(root=root, manifest=commits.read_commit(s.home, root))
        except Exception as e:  # noqa: BLE001 -- OSError too (rank 0's disk): the others wait in the all-gather
            outcome = {"ok": False, "root": None, "error": f"{type(e).__name__}: {e}", "manifest": None}
        result = CommitOutcome.from_json(
            loads_strict(s.group.allgather_bytes(canonical_json(outcome))[0], "commit outcome"), "commit outcome")
        if not result.ok or result.root is None or result.manifest is None:
            how = " (background)" if self.background else ""
            raise commits.CommitError(f"rank 0 could not commit step {self.step}{how}: {result.error}")
        manifest = result.manifest  # rank 0's: another rank's store may not hold it yet
        assert self.transfer is not None, "agree_on_objects, which every rank ran first, set it"
        adopt_shard(s.group, s.home, manifest, s.parent, self.written)
        transfer = self.transfer.to_json() if self.transfer is not None else {}  # set by agree_on_objects
        s.transfers.append({"step": self.step, "full_root": result.root, **transfer})
        s.parent = result.root
        return result.root, manifest


@dataclass
class InFlight:
    commit: Commit
    stage: str  # "objects" -> "install" -> complete
    job: Background
    snapshot_s: float = 0.0
    objects_s: float | None = None  # this rank's object writes, once done
    install_s: float | None = None  # rank 0's install of the commit, once done

    @property
    def step(self) -> int:
        return self.commit.step


class AsyncCommitter:
    """One rank's side of background commits for a Session: the commit protocol above, one step per
    poll, with the object writes and rank 0's install on background threads."""

    def __init__(self, store, write_objects: WriteObjects | None = None):
        self.store = store
        self.write_objects: WriteObjects = write_objects or commits.save_param_states
        self.snapshot = HostSnapshot()
        self.inflight: InFlight | None = None
        self.polls = 0  # flag all-gathers done while a commit was in flight
        self.last: dict | None = None  # {"step", "full_root", "learned_state_root", timings} of the last complete one

    # -- training thread ---------------------------------------------------------------------------
    def start(self, session, cursor: dict, states: dict[str, dict], rng: bytes, config_bytes: bytes) -> float:
        """Snapshot and hand the object writes to the background; returns the seconds the caller stalled."""
        assert self.inflight is None, "finish the previous commit first"
        t0 = time.perf_counter()
        host = self.snapshot.take(states)
        stall = time.perf_counter() - t0
        store, write = self.store, self.write_objects

        def objects():
            return commits.save_commit_objects(store, host, rng, config_bytes, write)

        commit = Commit(session, session.step, cursor, background=True)
        self.inflight = InFlight(commit, "objects", Background(objects, f"kit-commit-{commit.step}"),
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
            self._advance()
            if not block:
                return self.inflight is None
        return True

    def _advance(self) -> None:
        f = self.inflight
        assert f is not None, "poll advances only a commit in flight"
        if f.stage == "objects":
            report: dict[str, Any] = {"ok": True, "error": None, "entries": None, "rng": None, "config": None}
            try:
                report.update(f.job.result())
            except Exception as e:  # noqa: BLE001 -- every rank learns it from the all-gather below
                report = {"ok": False, "error": f"{type(e).__name__}: {e}", "entries": None, "rng": None,
                          "config": None}
            f.objects_s = round(f.job.seconds(), 4)
            try:
                install = f.commit.agree_on_objects(report)
            except commits.CommitError:
                self.inflight = None
                raise
            f.job = Background(install, f"kit-install-{f.step}") if install is not None else finished_job()
            f.stage = "install"
            return
        f.install_s = round(f.job.seconds(), 4)
        self.inflight = None
        root, manifest = f.commit.agree_on_root(f.job.result)
        self.last = {"step": f.step, "full_root": root, "learned_state_root": manifest.learned_state_root,
                     "snapshot_s": round(f.snapshot_s, 4), "snapshot_bytes": self.snapshot.bytes,
                     "objects_s": f.objects_s, "install_s": f.install_s}
