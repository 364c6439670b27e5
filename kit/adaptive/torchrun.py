"""`kit adaptive train` under torchrun across hosts, one process per host, with nothing shared on disk.

Each host holds its own copy of the prepared job and the seed and names its own store (`--home`);
torchrun's environment forms the group and the hosts exchange everything else over it. The holder
(the lowest rank whose host holds the start commit) runs the lineage checks and serves every other
rank's assigned objects; commits are written whole into rank 0's store.
Evaluation is not sharded, so it does not run under torchrun.
Steps: docs/engine.md ("`kit adaptive train` under torchrun across hosts").
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from kit.adaptive.bindings import TrainRefused, check_a_trained, check_bindings, check_fresh_home, check_seed
from kit.adaptive.continued_schema import JobTerms
from kit.adaptive.formats import AnyPreparedJob, worker_outcome
from kit.adaptive.lineage import PortableLog, portable_logs, write_portable_logs
from kit.adaptive.train import (
    WORKER_TIMEOUT_S,
    CohortRequest,
    adaptive_worker,
    attempt_record,
    checked_job,
    grow_into,
    logged_commits,
    student_layers,
    worker_args,
)
from kit.digest import canonical_json, loads_strict, write_canonical_json
from kit.distributed.group import join, leave
from kit.distributed.launch import WorkerContext
from kit.distributed.traffic import counter_delta, interface_counters_or_none
from kit.engine.fetch import holds_commit, host_name
from kit.interrupt import interruption
from kit.record import MapOf, Opt, Record, spec_field
from kit.refs import CommitRef, PeerCommitRef, Ref, SeedRef
from kit.store.commits import read_manifest
from kit.store.in_use import held


def _agree(group, what: str, fn) -> list:
    """Run `fn` on this rank, then every rank learns every outcome: their values in rank order, or a
    TrainRefused on every rank naming each rank (and host) that failed."""
    try:
        mine = {"ok": True, "value": fn(), "error": None}
    except (ValueError, OSError) as e:
        mine = {"ok": False, "value": None, "error": f"{type(e).__name__}: {e}"}
    mine.update(rank=group.rank, host=host_name())
    rows = [loads_strict(b, what) for b in group.allgather_bytes(canonical_json(mine))]
    bad = [r for r in rows if not r["ok"]]
    if bad:
        raise TrainRefused(f"{what} refused: " + "; ".join(f"rank {r['rank']} ({r['host']}): {r['error']}"
                                                           for r in bad))
    return [r["value"] for r in rows]


def _store_of(root: str | None, *homes: str | None) -> str | None:
    """The first of `homes` on this host that holds commit `root`."""
    return next((h for h in homes if root and holds_commit(h, root)), None)


def train_torchrun(request: CohortRequest) -> list[dict]:
    """This process is one rank of a torchrun group running one cohort arm (module docstring). Returns
    the commits (on every rank)."""
    world = int(os.environ["WORLD_SIZE"])
    if request.workers != world:
        raise TrainRefused(f"--workers {request.workers} but torchrun started WORLD_SIZE={world} processes")
    request, terms, pj = checked_job(request)  # every rank, its own copy
    check_seed(Path(request.prepared), pj, request.seed_dir)
    group = join(timeout_s=min(float(request.timeout_s), WORKER_TIMEOUT_S))
    try:
        return _run(group, request, terms, pj, WorkerContext)
    finally:
        leave()


@dataclass(frozen=True, slots=True, kw_only=True)
class HolderFacts(Record):
    """What the holder of the start commit tells every rank (as JSON, over the group): its rank (-1: a seed
    start), the start commit's cursor, the student's depth and the lineage's inherited logs."""

    holder: int = spec_field(int)
    cursor: Mapping[str, int] | None = spec_field(Opt(MapOf(int)))
    layers: int = spec_field(int)
    logs: Mapping[str, PortableLog] = spec_field(MapOf(PortableLog))


def _bind(group, r: CohortRequest, terms: JobTerms, pj: AnyPreparedJob) -> HolderFacts:
    """Step 2: the holder's checks and facts, every rank's fresh-home check. Returns the holder's facts."""
    prepared_p = Path(r.prepared)
    if r.resume is None:  # a seed start reads no commit: every rank checks its own bindings
        def bindings_then_layers():
            check_bindings(prepared_p, pj, terms, r.seed_dir, r.home, r.cohort, None, r.reference, None, None)
            return student_layers(r.seed_dir, None, None)

        layers = _agree(group, "the bindings", bindings_then_layers)
        return HolderFacts(holder=-1, cursor=None, layers=layers[0], logs=MappingProxyType({}))
    here = _store_of(r.resume, r.source_home, r.home)
    holders = [i for i, h in enumerate(_agree(group, "where the start commit is", lambda: here is not None)) if h]
    if not holders:
        raise TrainRefused(f"--resume {r.resume}: no rank's --source-home or --home holds this commit")
    holder = holders[0]

    def holder_facts():
        if group.rank != holder:
            return None
        src = here if here != r.home else None
        check_bindings(prepared_p, pj, terms, r.seed_dir, r.home, r.cohort, r.resume, r.reference, src,
                       r.reference_home)
        if r.cohort == "B":
            check_a_trained(r.reference_home or src or r.home, prepared_p, terms.endpoints["A"])

        # the lineage's update logs travel with the migrated state: referenced where rank 0's host holds them
        logs = {name: log.to_json() for name, log in portable_logs(src).items()} if src else {}
        assert here is not None and r.resume is not None, "the holder holds the start commit"
        return {"holder": holder, "cursor": dict(read_manifest(here, r.resume).learned_state.cursor),
                "layers": student_layers(r.seed_dir, src or r.home, r.resume), "logs": logs}

    facts = HolderFacts.from_json(_agree(group, "the start commit's bindings", holder_facts)[holder],
                                  f"rank {holder}'s facts")
    _agree(group, "a fresh --home", lambda: None if group.rank == holder else  # the holder checked it above
           check_fresh_home(r.home, r.cohort, r.resume, dict(facts.cursor or {}), terms.cohort_order))
    return facts


def _start_and_reference(group, r: CohortRequest, terms: JobTerms, facts: HolderFacts) -> tuple:
    """Every rank's start and reference (kit.refs) and the student's depth, after step 3's growth."""
    rank = group.rank
    start: SeedRef | PeerCommitRef = SeedRef(r.seed_dir)
    layers = facts.layers
    if r.resume is not None:  # fetched over the group from the holder (step 4)
        source = _store_of(r.resume, r.source_home, r.home)
        start = PeerCommitRef(r.resume, source)
        if r.grow:  # step 3: the holder grows in its own home, which then holds the grown commit whole
            grown = _agree(group, "the append transition", lambda: grow_into(
                r.home, source if source != r.home else None, r.resume, terms)
                if rank == facts.holder else None)[facts.holder]
            start = PeerCommitRef(grown, r.home if rank == facts.holder else None)
            layers = facts.layers + terms.growth.add_blocks
    reference: Ref = r.reference_ref()
    if r.cohort != "A":  # B and C train against a committed reference: fetched where a host lacks it
        assert r.reference is not None, "check_cohort refuses cohorts B and C without --reference"
        ref_here = _store_of(r.reference, r.reference_home, r.source_home, r.home)
        everywhere = all(_agree(group, "where the reference is", lambda: ref_here is not None))
        reference = (CommitRef(ref_here, r.reference) if everywhere and ref_here is not None
                     else PeerCommitRef(r.reference, ref_here))
    return start, reference, layers


def _run(group, r: CohortRequest, terms: JobTerms, pj: AnyPreparedJob, WorkerContext) -> list[dict]:
    rank, world = group.rank, group.world
    facts = _bind(group, r, terms, pj)
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "none")
    attempt = f"torchrun-{run_id}-{os.environ.get('MASTER_PORT', '0')}"
    attempt_dir = Path(r.home) / "attempts" / attempt
    record = {**attempt_record(r, attempt, pj), "launcher": "torchrun", "holder": facts.holder}
    (attempt_dir / "workers").mkdir(parents=True, exist_ok=True)  # every host: its own status files
    if rank == 0:
        write_canonical_json(attempt_dir / "attempt.json", record)

        write_portable_logs(facts.logs, attempt_dir)
    with held(r.home):  # as the local launcher: gc --objects is refused and a second trainer told who holds it
        try:
            start, reference, layers = _start_and_reference(group, r, terms, facts)
            plan = worker_args(r, start, reference, layers, attempt_dir)
            group.barrier()
            before, started = interface_counters_or_none(), time.time()
            out = adaptive_worker(group, plan, WorkerContext(rank, world, attempt_dir / "workers"))
            after, ended = interface_counters_or_none(), time.time()
            # every rank's own interface counters (its host), times, fetches and commit transfers, into rank 0's record
            mine = {"rank": rank, "host": host_name(), "hostname": socket.gethostname(), "started_at": started,
                    "ended_at": ended, "wall_seconds": ended - started, "group_bytes_sent": group.bytes_sent,
                    "socket_interfaces": group.interfaces,
                    "interfaces": counter_delta(before, after) if before and after else None,
                    "fetch": out.get("fetch"), "reference_fetch": out.get("reference_fetch"),
                    "commit_transfers": out["commit_transfers"]}
            record.update(hosts=[loads_strict(b, "rank report") for b in group.allgather_bytes(canonical_json(mine))])
            made = [c.to_json() for c in worker_outcome(out, f"rank {rank}'s result").commits]
            record.update(status="completed", commits=made, start_root=getattr(start, "root", None))
            return made
        except KeyboardInterrupt as e:  # SIGINT, or SIGTERM from torchrun's agent (kit.interrupt)
            name = interruption(e)[0]
            record.update(status="aborted", signal=name, error=f"rank {rank} ({host_name()}): interrupted by {name}",
                          commits=logged_commits(attempt_dir))
            raise
        except BaseException as e:
            record.update(status="failed", error=f"rank {rank} ({host_name()}): {type(e).__name__}: {e}",
                          commits=logged_commits(attempt_dir))
            raise
        finally:
            record.update(ended_at=time.time())
            if rank == 0 or record["status"] in ("failed", "aborted"):
                name = "attempt.json" if rank == 0 else f"attempt-rank{rank}.json"
                write_canonical_json(attempt_dir / name, record)
