"""`kit adaptive train` under torchrun across hosts, one process per host, with nothing shared on disk.

Each host holds its own copy of the prepared job and of the seed, and names its own store with `--home`
(and, on the host that has them, `--source-home` / `--reference-home`). torchrun's environment (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT, GLOO_SOCKET_IFNAME; NCCL_SOCKET_IFNAME is completed from it by
kit/distributed/group.py when NCCL runs) forms the group, and the hosts exchange everything else over it:

  1. every rank checks its own prepared copy and the kit's source (`check_inputs`) and its own seed,
     then joins;
  2. the **holder** is the lowest rank whose host holds the start commit (`--resume` in its
     `--source-home`, else in its `--home`). Only the holder reads the commit: the lineage checks (cohort
     B's reference, the phase-A records B replays), the cursor, the depth and the inherited update logs;
     it sends the results, and every other rank checks its own home is fresh against that cursor. Any
     refusal stops every rank before anything trains, naming the rank and host;
  3. `--grow`: the holder performs the append transition in its own home (`_grow_into`), which then holds
     the grown commit whole; it becomes the start commit;
  4. every rank starts from the commit by `open_start_over_group`: it fetches only its assigned objects
     from the holder over the group, verified by hash and counted, and each host adopts the manifest as
     its shard (HEAD unchanged everywhere when any fetch fails). A reference commit a host does not hold
     is fetched the same way (its stage's `param` objects only, `reference_over_group`);
  5. commits during training are written whole into rank 0's store (kit/engine/commit_transfer.py);
  6. rank 0 writes the attempt record; every rank's times, interface counters, fetches and commit
     transfers are gathered into it (`hosts`, docs/formats.md). A rank that fails and is not rank 0
     writes `attempt-rank<r>.json` in its own home.

Evaluation is not part of this: `kit adaptive evaluate` loads the whole model into one process
(kit/evaluation/scoring.py `load_model`), it is not sharded, so there is nothing to run under torchrun.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from kit.adaptive.bindings import TrainRefused, _check_bindings, check_a_trained, check_fresh_home, check_seed
from kit.adaptive.train import (
    WORKER_TIMEOUT_S,
    _attempt_record,
    _checked_contract,
    _grow_into,
    _layers,
    _worker_args,
    adaptive_worker,
)
from kit.digest import canonical_json, loads_strict, write_canonical_json
from kit.distributed.traffic import counter_delta, interface_counters_or_none
from kit.engine.fetch import holds_commit, host_name


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


def train_torchrun(prepared, seed_dir, home, cohort, workers, resume=None, reference=None, source_home=None,
                   until=None, grow=False, reference_home=None, timeout_s=1800) -> list[dict]:
    """This process is one rank of a torchrun group running one cohort arm (module docstring). Returns
    the commits (on every rank)."""
    from kit.distributed.group import join, leave
    from kit.distributed.launch import WorkerContext

    world = int(os.environ["WORLD_SIZE"])
    if workers != world:
        raise TrainRefused(f"--workers {workers} but torchrun started WORLD_SIZE={world} processes")
    prepared_p = Path(prepared)
    contract, pj = _checked_contract(prepared_p, cohort, resume, reference, grow)  # every rank, its own copy
    if cohort == "C":
        source_home = source_home or pj["start"]["home"]
        reference_home = reference_home or source_home
    check_seed(prepared_p, pj, seed_dir)
    group = join(timeout_s=min(float(timeout_s), WORKER_TIMEOUT_S))
    try:
        return _run(group, prepared_p, contract, pj, seed_dir, home, cohort, workers, resume, reference,
                    source_home, until, grow, reference_home, WorkerContext)
    finally:
        leave()


def _bind(group, prepared_p, contract, pj, seed_dir, home, cohort, resume, reference, source_home,
          reference_home) -> dict:
    """Step 2: the holder's checks and facts, every rank's fresh-home check. Returns the holder's facts:
    {"holder", "cursor", "layers", "logs": {name: text}} (holder -1 for a seed start)."""
    if resume is None:  # a seed start reads no commit: every rank checks its own bindings
        layers = _agree(group, "the bindings", lambda: (
            _check_bindings(prepared_p, pj, contract, seed_dir, home, cohort, None, reference, None, None),
            _layers(seed_dir, home, None, None))[1])
        return {"holder": -1, "cursor": None, "layers": layers[0], "logs": {}}
    here = _store_of(resume, source_home, home)
    holders = [i for i, h in enumerate(_agree(group, "where the start commit is", lambda: here is not None)) if h]
    if not holders:
        raise TrainRefused(f"--resume {resume}: no rank's --source-home or --home holds this commit")
    holder = holders[0]

    def holder_facts():
        if group.rank != holder:
            return None
        src = here if here != home else None
        _check_bindings(prepared_p, pj, contract, seed_dir, home, cohort, resume, reference, src, reference_home)
        if cohort == "B":
            check_a_trained(reference_home or src or home, prepared_p, contract["endpoints"]["A"])
        from kit.store.commits import read_commit

        logs = {}
        if src:  # the lineage's update logs travel with the migrated state (as the local driver copies them)
            for log in sorted(Path(src).glob("attempts/*/*updates.jsonl")):
                logs[f"inherited-{log.parent.name}-{log.name}"] = log.read_text()
        return {"holder": holder, "cursor": read_commit(here, resume)["learned_state"]["cursor"],
                "layers": _layers(seed_dir, home, src, resume), "logs": logs}

    facts = _agree(group, "the start commit's bindings", holder_facts)[holder]
    _agree(group, "a fresh --home", lambda: None if group.rank == holder else  # the holder checked it above
           check_fresh_home(home, cohort, resume, facts["cursor"], contract["cohort_order"]))
    return facts


def _run(group, prepared_p, contract, pj, seed_dir, home, cohort, workers, resume, reference, source_home, until,
         grow, reference_home, WorkerContext) -> list[dict]:
    rank, world = group.rank, group.world
    facts = _bind(group, prepared_p, contract, pj, seed_dir, home, cohort, resume, reference, source_home,
                  reference_home)
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "none")
    attempt = f"torchrun-{run_id}-{os.environ.get('MASTER_PORT', '0')}"
    attempt_dir = Path(home) / "attempts" / attempt
    record = {**_attempt_record(attempt, cohort, workers, resume, reference, source_home, until, grow, prepared_p,
                                pj, reference_home), "launcher": "torchrun", "holder": facts["holder"]}
    (attempt_dir / "workers").mkdir(parents=True, exist_ok=True)  # every host: its own status files
    if rank == 0:
        write_canonical_json(attempt_dir / "attempt.json", record)
        for name, text in facts["logs"].items():
            (attempt_dir / name).write_text(text)
    try:
        start, layers, migration_source = {"seed": True}, facts["layers"], None
        if resume is not None:
            start = {"root": resume}
            migration_source = _store_of(resume, source_home, home)
        if grow:  # step 3: the holder grows in its own home, which then holds the grown commit whole
            grown = _agree(group, "the append transition", lambda: _grow_into(
                home, migration_source if migration_source != home else None, resume, contract)
                if rank == facts["holder"] else None)[facts["holder"]]
            start = {"root": grown}
            migration_source = home if rank == facts["holder"] else None
            layers = facts["layers"] + contract["growth"]["add_blocks"]
        args = _worker_args(prepared_p, seed_dir, home, cohort, workers, start, None, reference, reference_home,
                            until, attempt_dir, layers)
        args.update(over_group=resume is not None, migration_source=migration_source)
        if cohort != "A":  # B and C train against a committed reference (`_worker_args`)
            ref_here = _store_of(reference, reference_home, source_home, home)
            everywhere = all(_agree(group, "where the reference is", lambda: ref_here is not None))
            args["reference"] = {"home": ref_here, "root": reference} if everywhere else \
                {"over_group": True, "source": ref_here, "root": reference}
        group.barrier()
        before, started = interface_counters_or_none(), time.time()
        out = adaptive_worker(group, args, WorkerContext(rank, world, attempt_dir / "workers"))
        after, ended = interface_counters_or_none(), time.time()
        # every rank's own interface counters (its host), times, fetches and commit transfers, into rank 0's record
        mine = {"rank": rank, "host": host_name(), "hostname": socket.gethostname(), "started_at": started,
                "ended_at": ended, "wall_seconds": ended - started, "group_bytes_sent": group.bytes_sent,
                "socket_interfaces": group.interfaces,
                "interfaces": counter_delta(before, after) if before and after else None,
                "fetch": out.get("fetch"), "reference_fetch": out.get("reference_fetch"),
                "commit_transfers": out["commit_transfers"]}
        record["hosts"] = [loads_strict(b, "rank report") for b in group.allgather_bytes(canonical_json(mine))]
        record.update(status="completed", commits=out["commits"], start_root=start.get("root"))
        return out["commits"]
    except BaseException as e:
        record.update(status="failed", error=f"rank {rank} ({host_name()}): {type(e).__name__}: {e}")
        raise
    finally:
        record["ended_at"] = time.time()
        if rank == 0 or record["status"] == "failed":
            name = "attempt.json" if rank == 0 else f"attempt-rank{rank}.json"
            write_canonical_json(attempt_dir / name, record)
