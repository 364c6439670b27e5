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

import json
import os
import time
import uuid
from pathlib import Path

from kit.digest import canonical_json, load_json_strict, loads_strict, write_canonical_json

COHORTS = ("A", "B")
WORKER_TIMEOUT_S = 300  # the workers' collective timeout (a dead peer is an error within it)


class TrainRefused(ValueError):
    pass


def check_inputs(prepared: Path) -> dict:
    """Every digest in adaptive-shards-inputs.json against what is on disk, and the kit's source."""
    from kit.provenance import check_commitments

    commitments = load_json_strict(prepared / "adaptive-shards-inputs.json")
    check_commitments(commitments, lambda p: Path(p) if os.path.isabs(p) else prepared / p)
    return commitments


def check_seed(prepared: Path, pj: dict, seed_dir: str) -> None:
    """--seed must be the prepared seed: its parameter digest, config.json and tokenizer files (the
    committed inputs pin the directory prepare read, not the one passed now)."""
    from kit.digest import sha256_file
    from kit.inventory import parameter_digest

    seed = Path(seed_dir)
    if not (seed / "config.json").is_file():
        raise TrainRefused(f"--seed {seed}: no config.json; expected the prepared seed directory")
    actual = parameter_digest(seed)
    if actual != pj["seed"]["parameter_digest"]:
        raise TrainRefused(f"--seed {seed}: parameter digest {actual}; {prepared / 'prepared.json'} field "
                           f"'seed.parameter_digest' expects {pj['seed']['parameter_digest']}")
    files = {"config.json": pj["seed"]["config_sha256"], **pj.get("tokenizer", {})}
    for name, want in sorted(files.items()):
        got = sha256_file(seed / name) if (seed / name).is_file() else "absent"
        if got != want:
            field = "seed.config_sha256" if name == "config.json" else f"tokenizer.{name}"
            raise TrainRefused(f"--seed {seed / name}: sha256 {got}; {prepared / 'prepared.json'} field "
                               f"{field!r} expects {want}")


def check_fresh_home(home: str, cohort: str, resume: str | None, resume_cursor: dict | None,
                     order=COHORTS) -> None:
    """The trial's "fresh --home": a cohort starts in a new or empty store. Only an attempt that continues
    its own cohort from a commit (--resume with the same cohort in the cursor) may use an existing home."""
    continues = resume is not None and resume_cursor is not None and \
        resume_cursor.get("cohort", 0) == list(order).index(cohort)
    h = Path(home)
    if not continues and h.exists() and (not h.is_dir() or any(h.iterdir())):
        what = "starts from the seed" if resume is None else f"starts from {resume} (another cohort's endpoint)"
        raise TrainRefused(f"--home {h}: not empty; cohort {cohort} {what} and needs a fresh --home (a new or "
                           "empty directory); only --resume within the same cohort continues in an existing home")


def a_endpoint_of(resume_home: str, resume: str, contract: dict, depth: int) -> str | None:
    """The phase-A endpoint a cohort-B lineage continues: --resume itself at the B start, else the nearest
    ancestor (parent links in `resume_home`) at the A endpoint's cursor and the seed's depth (a growth
    commit keeps the A cursor with more blocks, so its parent is the one). None when the chain breaks."""
    from kit.store.commits import CommitError, read_commit

    want = {"step": contract["endpoints"]["A"], "cohort": 0, "cohort_step": contract["endpoints"]["A"]}
    root = resume
    for _ in range(100_000):
        try:
            m = read_commit(resume_home, root)
        except (CommitError, ValueError):
            return None
        cursor = m["learned_state"]["cursor"]
        if {k: cursor.get(k) for k in want} == want and max(b for _, b in m["layout"]["blocks"]) == depth:
            return root
        if m["parent"] is None:
            return None
        root = m["parent"]
    return None


def check_reference(prepared: Path, pj: dict, contract: dict, reference: str, resume: str, ref_home: str,
                    resume_home: str | None = None) -> dict:
    """Cohort B's --reference is the committed phase-A endpoint the B lineage continues: --resume at the B
    start (or the A-endpoint ancestor of a --resume inside B), at the contract's A endpoint, and committed
    by an attempt of this prepared job."""
    from kit.store.commits import read_commit

    endpoint = a_endpoint_of(resume_home or ref_home, resume, contract, pj["seed"]["num_hidden_layers"])
    if reference != endpoint:
        raise TrainRefused(f"--reference {reference}: expected the committed phase-A endpoint that cohort B "
                           f"continues from --resume {resume}: {endpoint or 'none found along its parents'} "
                           f"(contract field 'cohorts.B.reference' = {contract['cohorts']['B']['reference']!r})")
    manifest = read_commit(ref_home, reference)
    cursor = manifest["learned_state"]["cursor"]
    want = {"step": contract["endpoints"]["A"], "cohort": 0, "cohort_step": contract["endpoints"]["A"]}
    if {k: cursor.get(k) for k in want} != want:
        raise TrainRefused(f"--reference {ref_home}:{reference}: cursor {cursor}; expected the phase-A endpoint "
                           f"{want} (contract field 'endpoints.A' = {contract['endpoints']['A']})")
    made = []
    for path in sorted(Path(ref_home).glob("attempts/*/attempt.json")):
        rec = load_json_strict(path)
        if any(c.get("full_root") == reference for c in rec.get("commits", [])) and rec.get("status") == "completed":
            made.append((path, rec.get("prepared_job_digest")))
    if not any(job == pj["job_digest"] for _, job in made):
        found = ", ".join(f"{p} (prepared_job_digest {j})" for p, j in made) or "no completed attempt committed it"
        raise TrainRefused(f"--reference {ref_home}:{reference}: not committed by an attempt of this prepared job "
                           f"({prepared / 'prepared.json'} field 'job_digest' = {pj['job_digest']}); found: {found}")
    return manifest


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
    from kit.engine.migration import open_start
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
    start, fetched = open_start(group, args["home"], layout, start_spec, args.get("source_home"), ctx)
    data = _records_for_cohort(prepared, cohort, args["seed_dir"], tr["max_tokens"])
    from kit.adaptive.prepare import memory_model_of

    docs = contract["cohorts"][cohort]["documents_per_update"]
    # a continued-learning contract has no planner section: admission then uses the device's default model
    memory_model = memory_model_of(contract) if "planner" in contract else None
    session = Session(group, args["home"], layout, start, engine_config(contract, pad_id=data["pad_id"]),
                      optimizer_groups(contract), reference=args["reference"],
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
           "admission": session.admission, "device": str(group.device)}
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


def check_a_trained(a_home: str, prepared: Path, a_endpoint: int) -> int:
    """Phase B replays examples *actually trained* in phase A: every B.replay_a id must appear in an
    update of A's logs at a step within A's endpoint. Returns how many were checked."""
    from kit.data.conversations import read_jsonl

    pj = load_json_strict(prepared / "prepared.json")
    info = pj["roles"]["B.replay_a"]
    wanted = {c.id for c in read_jsonl(prepared / info["file"], info["sha256"])}
    seen = set()
    for log in Path(a_home).glob("attempts/*/*updates.jsonl"):
        for line in log.read_text().splitlines():
            row = json.loads(line)
            if row["cohort"] == "A" and row["cohort_step"] <= a_endpoint:
                seen.update(row["ids"])
    missing = sorted(wanted - seen)
    if missing:
        raise TrainRefused(f"{a_home}: {len(missing)} B.replay_a record(s) were never trained in phase A "
                           f"(e.g. {missing[0]!r}); phase B replays only examples actually trained")
    return len(wanted)


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


def _check_cohort(pj: dict, contract: dict, cohort: str, resume: str | None, reference: str | None,
                  grow: bool) -> None:
    order = contract["cohort_order"]
    if cohort not in order:
        raise TrainRefused(f"--cohort {cohort!r}; this prepared job ({pj['contract']['kind']}) has cohorts {order}")
    if cohort != order[0] and (not reference or not resume):
        raise TrainRefused(f"cohort {cohort} needs --reference (the committed phase-A endpoint) and --resume")
    if grow and contract["growth"].get("cohort") != cohort:
        raise TrainRefused(f"--grow: the contract grows cohort {contract['growth'].get('cohort')!r} only "
                           f"(growth forbidden in cohort {cohort})")


def _check_bindings(prepared: Path, pj: dict, contract: dict, seed_dir: str, home: str, cohort: str,
                    resume: str | None, reference: str | None, source_home: str | None,
                    reference_home: str | None) -> None:
    """Inputs bound to the prepared job, before anything is created: the seed, cohort B's reference, a
    fresh home for a new cohort."""
    from kit.store.commits import read_commit

    check_seed(prepared, pj, seed_dir)
    if cohort == "B":
        check_reference(prepared, pj, contract, reference, resume, reference_home or source_home or home,
                        source_home or home)
    if cohort == "C":  # continued learning: the prepared job names its start endpoint
        want = pj["start"]["full_root"]
        for flag, value in (("--resume", resume), ("--reference", reference)):
            if value != want:
                raise TrainRefused(f"{flag} {value}: {prepared / 'prepared.json'} field 'start.full_root' expects "
                                   f"{want} (the phase-A endpoint this continued job starts from)")
    cursor = read_commit(source_home or home, resume)["learned_state"]["cursor"] if resume else None
    check_fresh_home(home, cohort, resume, cursor, contract["cohort_order"])




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
    from kit.distributed.launch import launch

    if _under_torchrun():
        return _train_as_torchrun_worker(prepared, seed_dir, home, cohort, workers, resume, reference,
                                         source_home, until, grow, reference_home, timeout_s)
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
    from kit.adaptive.prepare import planned_layout
    from kit.model.shard import even_layout

    return planned_layout(prepared, layers, workers) or even_layout(layers, workers)


def _under_torchrun() -> bool:
    """torchrun sets RANK/WORLD_SIZE (and TORCHELASTIC_RUN_ID); the kit's own launcher sets KIT_RUN_DIR."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and "KIT_RUN_DIR" not in os.environ


def _train_as_torchrun_worker(prepared, seed_dir, home, cohort, workers, resume, reference, source_home, until,
                              grow, reference_home, timeout_s) -> list[dict]:
    """This process is one worker of a torchrun group (one per host or GPU, across hosts): the same
    checks, arguments and worker body as the local launcher, with the attempt record kept by rank 0.
    `timeout_s` bounds the run here too: it is the group's collective timeout of every worker."""
    from kit.distributed.group import join, leave
    from kit.distributed.launch import WorkerContext

    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    if workers != world:
        raise TrainRefused(f"--workers {workers} but torchrun started WORLD_SIZE={world} processes")
    if grow:
        raise TrainRefused("--grow under torchrun: run the append transition first with the local launcher "
                           "(kit adaptive train --grow ...), then resume its root under torchrun")
    prepared_p = Path(prepared)
    contract, pj = _checked_contract(prepared_p, cohort, resume, reference)  # every rank, before joining
    if cohort == "C":
        source_home = source_home or pj["start"]["home"]
        reference_home = reference_home or source_home
    _check_bindings(prepared_p, pj, contract, seed_dir, home, cohort, resume, reference, source_home,
                    reference_home)
    if cohort == "B":
        check_a_trained(reference_home or source_home or home, prepared_p, contract["endpoints"]["A"])
    group = join(timeout_s=min(float(timeout_s), WORKER_TIMEOUT_S))
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "none")
    attempt = f"torchrun-{run_id}-{os.environ.get('MASTER_PORT', '0')}"
    attempt_dir = Path(home) / "attempts" / attempt
    record = {**_attempt_record(attempt, cohort, workers, resume, reference, source_home, until, False, prepared_p,
                                pj, reference_home), "launcher": "torchrun"}
    if rank == 0:
        (attempt_dir / "workers").mkdir(parents=True, exist_ok=True)
        write_canonical_json(attempt_dir / "attempt.json", record)
    group.barrier()
    args = _worker_args(prepared_p, seed_dir, home, cohort, workers,
                        {"seed": True} if resume is None else {"root": resume}, source_home, reference,
                        reference_home, until, attempt_dir, _layers(seed_dir, home, source_home, resume))
    try:
        out = adaptive_worker(group, args, WorkerContext(rank, world, attempt_dir / "workers"))
        record.update(status="completed", commits=out["commits"])
        return out["commits"]
    except BaseException as e:
        record.update(status="failed", error=f"rank {rank}: {type(e).__name__}: {e}")
        raise
    finally:
        record["ended_at"] = time.time()
        if rank == 0 or record["status"] == "failed":
            name = "attempt.json" if rank == 0 else f"attempt-rank{rank}.json"
            write_canonical_json(attempt_dir / name, record)
        leave()


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
