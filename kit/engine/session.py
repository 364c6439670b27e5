"""A worker's training session bound to a checkpoint store: built from a seed or a commit
(`kit.engine.worker.build_worker`), it runs updates (the schedule is
`kit.distributed.pipeline.StageEngine.update`) and commits the sharded state with the other workers.

The decision to know: each worker writes its own objects into its own home, rank 0 writes the commit
(re-hashing every object, HEAD by compare-and-swap), and every worker learns the result, through the
one commit protocol of kit.engine.commit. The profile is dropout-free, so RNG states are committed
only for the full root. Commit protocol: the notes in kit/engine/commit.py; format: docs/formats/checkpoint-store.md.

Notes: homes and RNG states.

A worker's `--home` is one directory on one host, or one per host without a shared mount; with one directory rank
0's store lacks no object and nothing is transferred (kit/engine/commit_transfer.py). Updates consume no random
draws, so RNG states are restored when the layout is unchanged and reseeded deterministically otherwise. Migration
before a session is `kit.engine.migration`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal, overload

import torch

from kit.distributed.group import Group
from kit.distributed.pipeline import EngineConfig, PendingUpdateResult
from kit.engine.commit import AsyncCommitter, Commit
from kit.engine.worker import build_worker
from kit.model.shard import Layout
from kit.store import commits
from kit.store.objects import ObjectStore
from kit.store.params import NonFiniteState
from kit.store.start import Start
from kit.train.optim import GroupConfig


class Session:
    def __init__(self, group: Group, home: str, layout: Layout, start: Start, engine_cfg: EngineConfig,
                 groups: dict[str, GroupConfig], group_rules=(), reference: dict | None = None,
                 admission: dict | None = None):
        self.group, self.home, self.layout, self.start = group, home, layout, start
        self.store = ObjectStore(home)
        worker = build_worker(group, layout, start, engine_cfg, groups, home=home, group_rules=group_rules,
                              reference=reference, admission=admission or {})
        self.engine, self.admission = worker.engine, worker.admission
        self.peak_groups = dict(self.engine.optimizer.groups)  # the contract's rates; a schedule scales them
        self.step = start.step
        self.parent = start.commit.full_root if start.commit is not None else commits.read_head(home)
        self.committer: AsyncCommitter | None = None  # created by the first commit(background=True)
        self.transfers: list[dict] = []  # per commit: this rank's objects sent to / received by rank 0's store
        self._restore_rng()

    def _restore_rng(self) -> None:
        m = self.start.commit
        if m is not None and m.layout.blocks == self.layout.ranges:
            # A commit's RNG objects are in its store (write_commit and adoption re-hash them), so a missing
            # one is damage: refused (ObjectMissing) like a corrupt one, never silently reseeded.
            state = self.store.get_bytes(m.rng[self.group.rank])
            torch.set_rng_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))
            return
        torch.manual_seed(self.step * 1009 + self.group.rank)

    def set_lr_factor(self, factor: float) -> None:
        """Every group's learning rate becomes its peak rate times `factor` (kit.train.schedule) for the
        next updates; nothing of it is committed, so the schedule is a function of the cursor alone."""
        self.engine.optimizer.groups = {name: replace(g, lr=g.lr * factor) for name, g in self.peak_groups.items()}

    def update(self, records, total_targets: int | None = None):
        if self.committer is not None:
            self.committer.poll(self)  # advance a background commit (collective: every rank, same point)
        res = self.engine.update(records, total_targets)
        self.step += 1
        # Every rank reads the update's numbers (with the clip factor computed on the device they are still
        # on their way): a non-finite gradient norm then raises on all ranks at this update. A rank that did
        # not read would go on into the next update's collectives and wait there for ranks that stopped.
        return res.resolve() if isinstance(res, PendingUpdateResult) else res

    @overload
    def commit(self, extra_cursor: dict | None = None, background: Literal[False] = False) -> tuple[str, str]: ...

    @overload
    def commit(self, extra_cursor: dict | None = None, background: bool = False) -> tuple[str, str] | None: ...

    def commit(self, extra_cursor: dict | None = None, background: bool = False) -> tuple[str, str] | None:
        """All workers together; returns (full_root, learned_state_root). With `background`, snapshots the
        state and returns None at once; the commit completes during later updates (kit.engine.commit)
        and `wait_commit` returns its roots. Either way a commit still in flight completes first."""
        self.wait_commit()
        cursor = {"step": self.step, **(extra_cursor or {})}
        rng = torch.get_rng_state().numpy().tobytes()
        if background:
            self.committer = self.committer or AsyncCommitter(self.store)
            self.committer.start(self, cursor, self.engine.optimizer.param_states(), rng, self.start.config_bytes)
            return None
        report: dict[str, Any] = {"ok": True, "error": None}
        try:
            report.update(commits.save_commit_objects(self.store, {
                n: {k: (v.detach().cpu() if torch.is_tensor(v) else v) for k, v in s.items()}
                for n, s in self.engine.optimizer.param_states().items()}, rng, self.start.config_bytes))
        except NonFiniteState as e:  # every rank refuses this commit together (HEAD unchanged)
            report = {"ok": False, "error": f"{type(e).__name__}: {e}", "entries": None, "rng": None, "config": None}
        # a rank that cannot write its objects (OSError) raises here, as before the protocol's first collective
        commit = Commit(self, self.step, cursor)
        install = commit.agree_on_objects(report)
        full_root, manifest = commit.agree_on_root(install)
        return full_root, manifest.learned_state_root

    def wait_commit(self) -> tuple[str, str] | None:
        """Complete the background commit in flight (all workers together); its roots, None if none was."""
        if self.committer is None or self.committer.inflight is None:
            return None
        self.committer.poll(self, block=True)
        last = self.committer.last
        assert last is not None, "a blocking poll completes the commit in flight"
        return last["full_root"], last["learned_state_root"]

