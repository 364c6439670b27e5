"""`kit adaptive train`: one cohort arm of the adaptive experiment on owned blocks only.

The driver (this process) checks every input commitment, including the kit's own source, before
any worker starts; creates an attempt record in the home that survives every outcome; prepares the
start state (a seed, a commit to resume, a migration from another store, or the append transition);
launches the workers (local launcher, or this process is one torchrun worker); and finalises the
attempt record. Each update's CE, KL, token counts, gradient norm, clip factor, time and the ids of
its records go to `attempts/<attempt>/updates.jsonl` in the home; commits happen at the contract's
commit points and at the endpoint, and the driver prints one JSON line per commit with the step
and both roots.

Global cursor: `step` counts updates since the seed (the Adam phase), `cohort` is 0 for A and 1
for B, `cohort_step` counts updates within the cohort; cohort B starts from the committed A
endpoint (cursor cohort 0 at its endpoint) and continues the same Adam state.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from kit.adaptive.bindings import (
    TrainRefused,
    _check_bindings,
    _check_cohort,
    check_a_trained,
    check_inputs,
)
from kit.digest import canonical_json, load_json_strict, loads_strict, write_canonical_json

WORKER_TIMEOUT_S = 300  # the workers' collective timeout (a dead peer is an error within it)


def _records_for_cohort(prepared: Path, cohort: str, seed_dir: str, max_tokens: int) -> dict:
    """Encode every record the cohort's schedule names (deterministic, done on every worker)."""
    from kit.data.chat import encode_or_refuse, load_tokenizer
    from kit.data.conversations import read_jsonl

    pj = load_json_strict(prepared / "prepared.json")
    schedule = load_json_strict(prepared / pj["schedule"]["file"])
    roles = {e["role"] for step in schedule["cohorts"][cohort]["steps"] for e in step}
    tok = load_tokenizer(seed_dir)
    convs = {}
    for role in sorted(roles):
        info = pj["roles"][role]
        for c in read_jsonl(prepared / info["file"], info["sha256"]):
            convs[c.id] = c
    encoded = {}
    for cid, c in convs.items():
        encoded[cid] = encode_or_refuse(tok, c, max_tokens, TrainRefused, f"{prepared}: record")
    return {"steps": schedule["cohorts"][cohort]["steps"], "encoded": encoded,
            "pad_id": tok.pad_token_id or 0}


def adaptive_worker(group, args: dict, ctx) -> dict:
    """Launcher/torchrun entry. args: prepared, seed_dir, home, cohort, layout, start, source_home,
    reference, until, attempt_dir."""
    from kit.adaptive.continued_schema import job_contract
    from kit.adaptive.schema import commit_points, engine_config, optimizer_groups
    from kit.engine.migration import open_start, open_start_over_group, reference_over_group
    from kit.engine.session import Session
    from kit.model.shard import Layout
    from kit.train.batch import TrainRecord

    prepared = Path(args["prepared"])
    if os.environ.get("KIT_GPU_DETERMINISTIC") == "1" and group.device.type == "cuda":
        from kit import numerics

        numerics.apply(group.device, deterministic_gpu=True, threads=int(os.environ.get("KIT_THREADS", "1")))
    ctx.progress(phase="check-inputs")
    check_inputs(prepared)  # every worker: a changed byte anywhere stops the run before the first update
    contract = job_contract(load_json_strict(prepared / "prepared.json"))
    order = contract["cohort_order"]
    tr = contract["training"]
    cohort = args["cohort"]
    layout = Layout.from_json(args["layout"])
    start_spec = {"seed_dir": args["seed_dir"]} if args["start"].get("seed") else args["start"]
    fetch = reference_fetch = None
    if args.get("over_group"):  # hosts without a shared filesystem (kit/adaptive/torchrun.py)
        start, fetch = open_start_over_group(group, args["home"], layout, start_spec["root"],
                                             args["migration_source"], ctx)
        fetched = fetch["received"]
    else:
        start, fetched = open_start(group, args["home"], layout, start_spec, args.get("source_home"), ctx)
    reference = args["reference"]
    if reference.get("over_group"):
        reference, reference_fetch = reference_over_group(group, reference["source"], args["home"], layout,
                                                          reference["root"])
    data = _records_for_cohort(prepared, cohort, args["seed_dir"], tr["max_tokens"])
    from kit.adaptive.ownership import memory_model_of

    docs = contract["cohorts"][cohort]["documents_per_update"]
    # a continued-learning contract has no planner section: admission then uses the device's default model
    memory_model = memory_model_of(contract) if "planner" in contract else None
    session = Session(group, args["home"], layout, start, engine_config(contract, pad_id=data["pad_id"]),
                      optimizer_groups(contract), reference=reference,
                      admission={"microbatch": (tr["microbatch_size"], tr["max_tokens"]),
                                 "microbatches": -(-docs // tr["microbatch_size"]),
                                 "memory_model": memory_model})
    cursor = dict(start.manifest["learned_state"]["cursor"]) if start.manifest else {"step": 0}
    cohort_idx = order.index(cohort)
    if cursor.get("cohort", 0) != cohort_idx:  # the first update of cohort B (or C), from the A endpoint
        if cursor.get("cohort", 0) + 1 != cohort_idx or cursor.get("cohort_step", cursor["step"]) != \
                contract["endpoints"][order[cohort_idx - 1]]:
            raise TrainRefused(f"cohort {cohort} must start from the committed endpoint of cohort "
                               f"{order[cohort_idx - 1]}; the start commit's cursor is {cursor}")
        cohort_step = 0
    else:
        cohort_step = cursor.get("cohort_step", cursor["step"])
    until = min(int(args.get("until") or contract["endpoints"][cohort]), contract["endpoints"][cohort])
    points = set(commit_points(contract, cohort)) | {until}  # the contract's commit points, and where we stop
    log = Path(args["attempt_dir"]) / "updates.jsonl" if group.rank == 0 else None
    out = {"rank": group.rank, "fetched_bytes": fetched, "commits": [], "start_cohort_step": cohort_step,
           "admission": session.admission, "device": str(group.device), "fetch": fetch,
           "reference_fetch": reference_fetch, "commit_transfers": session.transfers}
    stats = _RankStats(group)
    while cohort_step < until:
        ctx.progress(step=session.step + 1, phase="update")
        entries = data["steps"][cohort_step]
        records = [TrainRecord(e["id"], data["encoded"][e["id"]].input_ids, data["encoded"][e["id"]].target_mask,
                               1.0, bool(e["replay"])) for e in entries]
        res = session.update(records)
        cohort_step += 1
        ranks = stats.gather()  # every rank takes part (a collective); rank 0 logs it
        if log is not None:
            with open(log, "ab") as f:
                f.write(canonical_json({"cohort": cohort, "cohort_step": cohort_step, "step": session.step,
                                        "ids": [e["id"] for e in entries], **res.to_json(), "ranks": ranks}) + b"\n")
        if cohort_step in points:
            ctx.progress(phase="commit")
            full, learned = session.commit({"cohort": cohort_idx, "cohort_step": cohort_step})
            out["commits"].append({"cohort": cohort, "cohort_step": cohort_step, "step": session.step,
                                   "full_root": full, "learned_state_root": learned})
            stats.reset()  # the commit's traffic and buffers are not the next update's
    import torch

    out["deterministic_algorithms"] = torch.are_deterministic_algorithms_enabled()
    return out


class _RankStats:
    """Per-update measurements of one rank, gathered to every rank as canonical JSON: the peak of
    allocated device memory during the update (`torch.cuda.max_memory_allocated`, reset after each
    update; None on CPU) and the point-to-point bytes this rank handed to the pipeline's sends
    (`Group.bytes_sent`; collectives are not counted)."""

    def __init__(self, group):
        self.group = group
        self.reset()

    def reset(self) -> None:
        import torch

        if self.group.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.group.device)
        self.sent = getattr(self.group, "bytes_sent", None)

    def gather(self) -> list[dict]:
        import torch

        g = self.group
        peak = int(torch.cuda.max_memory_allocated(g.device)) if g.device.type == "cuda" else None
        sent = getattr(g, "bytes_sent", None)
        mine = {"rank": g.rank, "device": str(g.device), "peak_memory_bytes": peak,
                "bytes_sent": None if sent is None or self.sent is None else sent - self.sent}
        rows = [loads_strict(b, "rank stats") for b in g.allgather_bytes(canonical_json(mine))]
        self.reset()
        return rows


def _checked_contract(prepared_p: Path, cohort: str, resume: str | None, reference: str | None,
                      grow: bool = False) -> tuple[dict, dict]:
    """Shared by the local and torchrun paths: every input commitment and the kit's source, the
    contract (adaptive or continued), the cohort name, and a later cohort's --reference/--resume.
    Returns (contract view, prepared.json)."""
    from kit.adaptive.continued_schema import job_contract

    check_inputs(prepared_p)  # before anything else: source or input changes fail here, naming the file
    pj = load_json_strict(prepared_p / "prepared.json")
    contract = job_contract(pj)
    _check_cohort(pj, contract, cohort, resume, reference, grow)
    return contract, pj


def _worker_args(prepared_p: Path, seed_dir: str, home: str, cohort: str, workers: int, start: dict,
                 source_home: str | None, reference: str | None, reference_home: str | None,
                 until: int | None, attempt_dir: Path, layers: int) -> dict:
    """The workers' arguments (`adaptive_worker`), the same for both launch paths; the layout is the
    planner's from the prepared ownership manifest (`_training_layout`)."""
    ref_spec = {"seed_dir": seed_dir} if cohort == "A" else {"home": reference_home or source_home or home,
                                                              "root": reference}
    return {"prepared": str(prepared_p), "seed_dir": seed_dir, "home": home, "cohort": cohort,
            "layout": _training_layout(prepared_p, layers, workers).to_json(), "start": start,
            "source_home": source_home, "reference": ref_spec, "until": until,
            "attempt_dir": str(attempt_dir), "timeout_s": WORKER_TIMEOUT_S}


def _layers(seed_dir: str, home: str, source_home: str | None, resume: str | None) -> int:
    """The student's depth: the resumed commit's (a grown commit is deeper than the seed), else the seed's."""
    if resume:
        from kit.store.start import start_from_commit

        return start_from_commit(source_home or home, resume).shape.num_hidden_layers
    from kit.model.config import load_config

    return load_config(seed_dir).num_hidden_layers


def _attempt_record(attempt: str, cohort: str, workers: int, resume, reference, source_home, until, grow,
                    prepared_p: Path, pj: dict, reference_home=None) -> dict:
    return {"attempt": attempt, "cohort": cohort, "workers": workers, "resume": resume, "reference": reference,
            "source_home": source_home, "reference_home": reference_home, "until": until, "grow": grow,
            "prepared": str(prepared_p), "prepared_job_digest": pj["job_digest"],
            "started_at": time.time(), "status": "running", "error": None, "commits": []}


def train(prepared: str, seed_dir: str, home: str, cohort: str, workers: int, resume: str | None = None,
          reference: str | None = None, source_home: str | None = None, until: int | None = None,
          grow: bool = False, reference_home: str | None = None, timeout_s: float = 1800) -> list[dict]:
    """The CLI driver: checks, attempt record, optional growth, launch, finalise. Returns commits."""
    from kit.distributed.group import under_torchrun
    from kit.distributed.launch import launch

    if under_torchrun():
        raise TrainRefused("this process runs under torchrun (RANK and WORLD_SIZE are set): call "
                           "kit.adaptive.torchrun.train_torchrun (the CLI does) instead of the local launcher")
    prepared_p = Path(prepared)
    contract, pj = _checked_contract(prepared_p, cohort, resume, reference, grow)
    if cohort == "C":  # the continued cohort's start state and reference: the bound phase-A endpoint's store
        source_home = source_home or pj["start"]["home"]
        reference_home = reference_home or source_home
    _check_bindings(prepared_p, pj, contract, seed_dir, home, cohort, resume, reference, source_home,
                    reference_home)
    home_p = Path(home)
    home_p.mkdir(parents=True, exist_ok=True)
    attempt = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}"
    attempt_dir = home_p / "attempts" / attempt
    attempt_dir.mkdir(parents=True)
    record = _attempt_record(attempt, cohort, workers, resume, reference, source_home, until, grow, prepared_p,
                             pj, reference_home)
    write_canonical_json(attempt_dir / "attempt.json", record)
    try:
        if source_home:  # the lineage's update logs travel with the migrated state
            import shutil

            for log in sorted(Path(source_home).glob("attempts/*/*updates.jsonl")):
                shutil.copyfile(log, attempt_dir / f"inherited-{log.parent.name}-{log.name}")
        if cohort == "B":
            a_home = reference_home or source_home or home
            check_a_trained(a_home, prepared_p, contract["endpoints"]["A"])
        start = {"seed": True} if resume is None else {"root": resume}
        if grow:
            start = {"root": _grow_into(home, source_home, resume, contract)}
            source_home = None
            layers = _layers(seed_dir, home, None, start["root"])
        else:
            layers = _layers(seed_dir, home, source_home, resume)
        args = _worker_args(prepared_p, seed_dir, home, cohort, workers, start, source_home, reference,
                            reference_home, until, attempt_dir, layers)
        results = launch(adaptive_worker, args, workers, attempt_dir / "workers",
                         timeout_s=timeout_s, progress_total=until or contract["endpoints"][cohort],
                         desc=f"cohort {cohort} ({workers} workers)")
        record.update(status="completed", commits=results[0]["commits"],
                      fetched_bytes=[r["fetched_bytes"] for r in results])
        return results[0]["commits"]
    except BaseException as e:
        record.update(status="aborted" if isinstance(e, KeyboardInterrupt) else "failed",
                      error=f"{type(e).__name__}: {e}")
        raise
    finally:
        record["ended_at"] = time.time()
        write_canonical_json(attempt_dir / "attempt.json", record)


def _training_layout(prepared: Path, layers: int, workers: int):
    """The planner's layout from the prepared ownership manifest when it has one for (workers, depth),
    whatever split the planner chose; an even split otherwise (a worker count the contract never planned)."""
    from kit.adaptive.ownership import planned_layout
    from kit.model.shard import even_layout

    return planned_layout(prepared, layers, workers) or even_layout(layers, workers)


def _grow_into(home: str, source_home: str | None, root: str, contract: dict) -> str:
    """Bring `root` into `home` (all objects: this store grows the whole model) and append blocks."""
    from kit.adaptive.growth import grow_commit
    from kit.store import commits
    from kit.store.objects import ObjectStore, fetch_objects

    g = contract["growth"]
    if source_home and commits.read_head(home) != root:
        manifest = commits.read_commit(source_home, root)
        fetch_objects(ObjectStore(source_home), ObjectStore(home), commits.object_digests(manifest))
        commits.adopt_commit(home, manifest, expected_head=commits.read_head(home))
    return grow_commit(home, root, g["add_blocks"], g["copy_block"], g["group"])
