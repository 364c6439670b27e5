"""A worker's training session bound to a checkpoint store: start from a seed or a commit, migrate
to another layout, train, and commit the sharded state together with the other workers.

Commit protocol (every worker, then rank 0):
  1. each worker writes its own parameters' objects (param, exp_avg, exp_avg_sq) and its RNG state
     into the run's store (`--home`, a directory every worker of the run can reach);
  2. the workers exchange their learned-state entries (canonical JSON over the process group);
  3. rank 0 writes the commit: it re-hashes every object, writes the manifest, then moves HEAD by
     compare-and-swap from the parent; every worker learns the result (or rank 0's error).

Migration (an operated membership change, restarting at a committed step): each new owner fetches
**only** its assigned objects from the source store into the run's store and verifies them; rank 0
is also assigned the commit-level objects (the model config and the old RNG states). Only when
every worker reports ready does rank 0 adopt the source manifest (HEAD moves to it); an incomplete
preparation therefore cannot advance HEAD, and a rerun fetches what is missing and continues.

The profile is dropout-free, so updates consume no random draws: RNG states are committed for
the full root, restored when the layout is unchanged and reseeded deterministically otherwise.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from kit.digest import canonical_json, loads_strict
from kit.dist.group import Group
from kit.dist.pipeline import EngineConfig, StageEngine
from kit.model.shard import Layout, build_stage, canonical_names, load_owned
from kit.model_config import LlamaShape, parse_config
from kit.store import commits
from kit.store.async_commit import AsyncCommitter
from kit.store.objects import ObjectStore, fetch_objects
from kit.train.optim import GroupConfig, ParamAdamW, assign_groups


class MigrationError(RuntimeError):
    pass


@dataclass
class Start:
    """Where a session's state comes from: a seed directory (new Adam phase) or a commit."""

    shape: LlamaShape
    config_bytes: bytes
    seed_dir: str | None = None
    manifest: dict | None = None

    @property
    def step(self) -> int:
        return 0 if self.manifest is None else int(self.manifest["learned_state"]["cursor"]["step"])


def start_from_seed(seed_dir: str) -> Start:
    path = Path(seed_dir) / "config.json"
    data = path.read_bytes()
    return Start(parse_config(loads_strict(data, str(path)), str(path)), data, seed_dir=seed_dir)


def start_from_commit(home: str, root: str) -> Start:
    manifest = commits.read_commit(home, root)
    store = ObjectStore(home)
    data = store.get_bytes(manifest["layout"]["model_config"])
    return Start(parse_config(loads_strict(data, "model config object"), f"{home} config object"), data,
                 manifest=manifest)


def assigned_objects(manifest: dict, names: set[str], rank: int) -> list[str]:
    """What a new owner must fetch: its parameters' objects, plus the commit-level ones on rank 0."""
    own = commits.param_digests(manifest["learned_state"]["params"], names)
    if rank == 0:
        own = [manifest["layout"]["model_config"], *manifest["rng"], *own]
    return list(dict.fromkeys(own))


def migrate(group: Group, source_home: str, home: str, root: str, layout: Layout) -> int:
    """Fetch this worker's assigned objects of commit `root` from `source_home`; adopt it when all are
    ready. Returns the bytes this worker read from the source."""
    manifest = commits.read_commit(source_home, root)
    shape = parse_config(loads_strict(ObjectStore(source_home).get_bytes(manifest["layout"]["model_config"]),
                                      "model config"), "model config")
    layout.validate(shape.num_hidden_layers)
    with torch.device("meta"):
        names = {n for n, _ in build_stage(shape, layout, group.rank).named_parameters()}
    status = {"rank": group.rank, "ok": True, "bytes": 0, "error": None}
    try:
        status["bytes"] = fetch_objects(ObjectStore(source_home), ObjectStore(home),
                                        assigned_objects(manifest, names, group.rank))
    except (ValueError, OSError) as e:
        status.update(ok=False, error=f"{type(e).__name__}: {e}")
    if os.environ.get("KIT_TEST_DIE_RANK") == str(group.rank):
        os._exit(137)  # test hook: a worker killed after fetching, before it reports ready
    reports = [loads_strict(b, "migration report") for b in group.allgather_bytes(canonical_json(status))]
    failed = [r for r in reports if not r["ok"]]
    if failed:
        raise MigrationError("migration preparation incomplete, HEAD unchanged: "
                             + "; ".join(f"rank {r['rank']}: {r['error']}" for r in failed))
    adopted = {"ok": True, "error": None}
    if group.rank == 0 and commits.read_head(home) != root:
        try:
            commits.adopt_commit(home, manifest, expected_head=commits.read_head(home))
        except ValueError as e:
            adopted = {"ok": False, "error": str(e)}
    result = loads_strict(group.allgather_bytes(canonical_json(adopted))[0], "adoption")
    if not result["ok"]:
        raise MigrationError(f"rank 0 could not adopt {root}: {result['error']}")
    return status["bytes"]


def _reference_stage(group: Group, layout: Layout, student_shape: LlamaShape, ref_shape: LlamaShape, source: str):
    """The reference's blocks among this worker's: the same as the student's, except that after growth
    the reference is shallower and the appended blocks have no counterpart (the worker then only
    forwards the reference activations it receives)."""
    from dataclasses import replace

    if replace(ref_shape, num_hidden_layers=student_shape.num_hidden_layers) != student_shape:
        raise ValueError(f"{source}: the reference's shape differs from the student's beyond depth")
    if ref_shape.num_hidden_layers > student_shape.num_hidden_layers:
        raise ValueError(f"{source}: the reference has more blocks ({ref_shape.num_hidden_layers}) than the "
                         f"student ({student_shape.num_hidden_layers})")
    ids = [i for i in layout.blocks_of(group.rank) if i < ref_shape.num_hidden_layers]
    with torch.device(group.device):
        from kit.model.llama import LlamaCausalLM

        return LlamaCausalLM(ref_shape, ids, with_embedding=group.rank == layout.embedding_owner)


def load_reference(group: Group, layout: Layout, shape: LlamaShape, spec: dict | None, dtype) -> torch.nn.Module | None:
    """The frozen reference's stage: from a seed directory, or from a commit (its `param` objects only)."""
    if spec is None:
        return None
    if "seed_dir" in spec:
        path = Path(spec["seed_dir"]) / "config.json"
        ref = _reference_stage(group, layout, shape, start_from_seed(spec["seed_dir"]).shape, str(path))
        load_owned(ref, spec["seed_dir"])
    else:
        start = start_from_commit(spec["home"], spec["root"])
        ref = _reference_stage(group, layout, shape, start.shape, f"reference commit {spec['root']}")
        store = ObjectStore(spec["home"])
        entries = {e["name"]: e for e in start.manifest["learned_state"]["params"]}
        with torch.no_grad():
            for n, p in ref.named_parameters():
                if n not in entries:
                    raise ValueError(f"reference commit {spec['root']} has no parameter {n!r}")
                e = entries[n]
                p.copy_(store.get_tensor(e["param"], e["dtype"], e["shape"]))
    ref.requires_grad_(False)
    return ref.to(dtype)


def free_memory_bytes(device: torch.device) -> int:
    """Memory actually free now: CUDA free memory on GPU, MemAvailable on CPU (never advertised totals)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/meminfo has no MemAvailable line")


def admit_worker(group: Group, shape: LlamaShape, layout: Layout, microbatch: tuple[int, int, int],
                 memory_model: dict | None = None) -> dict:
    """Refuse, before allocating, a worker whose planner estimate exceeds the memory free right now."""
    from kit.planner import MemoryModel, MicrobatchShape, admit, estimate_worker

    if memory_model is None:
        memory_model = {} if group.device.type == "cpu" else {"compute_copy_bytes": 0, "reference_bytes": 2,
                                                              "activation_bytes": 2}
    est = estimate_worker(shape, layout.blocks_of(group.rank), group.rank == layout.embedding_owner,
                          MicrobatchShape(*microbatch), MemoryModel(**memory_model))
    free = free_memory_bytes(group.device)
    admit(est, free, f"rank {group.rank} ({group.device})")
    return {"estimate": est.total, "free": free}


class Session:
    def __init__(self, group: Group, home: str, layout: Layout, start: Start, engine_cfg: EngineConfig,
                 groups: dict[str, GroupConfig], group_rules=(), reference: dict | None = None,
                 admission: dict | None = None):
        self.group, self.home, self.layout, self.start = group, home, layout, start
        shape = start.shape
        layout.validate(shape.num_hidden_layers)
        adm = admission or {}
        self.admission = admit_worker(group, shape, layout,
                                      tuple(adm.get("microbatch", (engine_cfg.microbatch_size, 512, 1))),
                                      adm.get("memory_model"))
        self.store = ObjectStore(home)
        student = build_stage(shape, layout, group.rank, device=group.device)
        params = dict(student.named_parameters())
        if start.manifest is None:
            load_owned(student, start.seed_dir)
            group_of = assign_groups(params, group_rules)
        else:
            entries = {e["name"]: e for e in start.manifest["learned_state"]["params"]}
            group_of = {n: entries[n]["group"] for n in params}
        opt = ParamAdamW(params, groups, group_of)
        if start.manifest is not None:
            states = commits.load_param_states(self.store, start.manifest["learned_state"]["params"], set(params))
            opt.load_param_states({n: {k: (v.to(group.device) if torch.is_tensor(v) else v) for k, v in s.items()}
                                   for n, s in states.items()}, f"commit {start.manifest['full_root']}")
        ref_dtype = torch.float32 if engine_cfg.compute_dtype == "float32" else getattr(torch, engine_cfg.compute_dtype)
        ref = load_reference(group, layout, shape, reference, ref_dtype)
        self.engine = StageEngine(group, layout, student, ref, opt, canonical_names(shape), engine_cfg)
        self.step = start.step
        self.parent = start.manifest["full_root"] if start.manifest is not None else commits.read_head(home)
        self.committer: AsyncCommitter | None = None  # created by the first commit(background=True)
        self._restore_rng()

    def _restore_rng(self) -> None:
        m = self.start.manifest
        if m is not None and m["layout"]["blocks"] == self.layout.to_json()["blocks"]:
            # A commit's RNG objects are in its store (write_commit and adoption re-hash them), so a missing
            # one is damage: refused (ObjectMissing) like a corrupt one, never silently reseeded.
            state = self.store.get_bytes(m["rng"][self.group.rank])
            torch.set_rng_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))
            return
        torch.manual_seed(self.step * 1009 + self.group.rank)

    def update(self, records, total_targets: int | None = None):
        if self.committer is not None:
            self.committer.poll(self)  # advance a background commit (collective: every rank, same point)
        res = self.engine.update(records, total_targets)
        self.step += 1
        return res

    def commit(self, extra_cursor: dict | None = None, background: bool = False) -> tuple[str, str] | None:
        """All workers together; returns (full_root, learned_state_root). With `background`, snapshots the
        state and returns None at once; the commit completes during later updates (kit.store.async_commit)
        and `wait_commit` returns its roots. Either way a commit still in flight completes first."""
        self.wait_commit()
        if background:
            self.committer = self.committer or AsyncCommitter(self.store)
            self.committer.start(self.step, {"step": self.step, **(extra_cursor or {})},
                                 self.engine.optimizer.param_states(), torch.get_rng_state().numpy().tobytes(),
                                 self.start.config_bytes)
            return None
        entries = commits.save_param_states(self.store, {
            n: {k: (v.detach().cpu() if torch.is_tensor(v) else v) for k, v in s.items()}
            for n, s in self.engine.optimizer.param_states().items()})
        rng = self.store.put_bytes(torch.get_rng_state().numpy().tobytes())
        config_digest = self.store.put_bytes(self.start.config_bytes)
        mine = canonical_json({"entries": entries, "rng": rng})
        gathered = [loads_strict(b, "commit entries") for b in self.group.allgather_bytes(mine)]
        outcome = {"ok": True, "root": None, "error": None}
        if self.group.rank == 0:
            try:
                params = sorted((e for g in gathered for e in g["entries"]), key=lambda e: e["name"])
                cursor = {"step": self.step, **(extra_cursor or {})}
                layout = {**self.layout.to_json(), "model_config": config_digest}
                outcome["root"] = commits.write_commit(self.home, {"cursor": cursor, "params": params}, layout,
                                                       self.parent, [g["rng"] for g in gathered])
            except ValueError as e:
                outcome = {"ok": False, "root": None, "error": f"{type(e).__name__}: {e}"}
        result = loads_strict(self.group.allgather_bytes(canonical_json(outcome))[0], "commit outcome")
        if not result["ok"]:
            raise commits.CommitError(f"rank 0 could not commit step {self.step}: {result['error']}")
        self.parent = result["root"]
        manifest = commits.read_commit(self.home, self.parent)
        return self.parent, manifest["learned_state_root"]

    def wait_commit(self) -> tuple[str, str] | None:
        """Complete the background commit in flight (all workers together); its roots, None if none was."""
        if self.committer is None or self.committer.inflight is None:
            return None
        self.committer.poll(self, block=True)
        return self.committer.last["full_root"], self.committer.last["learned_state_root"]


def grow_commit(home: str, root: str, add: int, copy_from: int, group: str, layout: Layout | None = None) -> str:
    """Commit the append transition of `root` (parent = root); new blocks go to the last worker
    unless a layout is given. Returns the new full root."""
    from kit.model.growth import grown_entries

    start = start_from_commit(home, root)
    m = start.manifest
    store = ObjectStore(home)
    zero_cache: dict[tuple, str] = {}

    def zero(shape):
        key = tuple(shape)
        if key not in zero_cache:
            zero_cache[key] = store.put_tensor(torch.zeros(key, dtype=torch.float32))
        return zero_cache[key]

    L = start.shape.num_hidden_layers
    params = grown_entries(m["learned_state"]["params"], L, add, copy_from, group, zero)
    cfg = json.loads(start.config_bytes)
    cfg["num_hidden_layers"] = L + add
    config_bytes = json.dumps(cfg, indent=2, sort_keys=True).encode()
    parse_config(json.loads(config_bytes), "grown config")
    if layout is None:
        blocks = [list(b) for b in m["layout"]["blocks"]]
        blocks[-1][1] += add
    else:
        layout.validate(L + add)
        blocks = layout.to_json()["blocks"]
    new_layout = {"blocks": blocks, "embedding_owner": m["layout"]["embedding_owner"],
                  "model_config": store.put_bytes(config_bytes)}
    rng = list(m["rng"])
    if len(rng) != len(blocks):
        raise ValueError(f"growth keeps the worker count ({len(rng)}); the given layout has {len(blocks)}")
    return commits.write_commit(home, {"cursor": m["learned_state"]["cursor"], "params": params}, new_layout,
                                root, rng)


def open_start(group: Group, home: str, layout: Layout, start: dict, source_home: str | None, ctx) -> tuple[Start, int]:
    """Where a worker's state comes from, after an optional migration: `start` is {"seed_dir": DIR} or
    {"root": FULL_ROOT} (in `home`, fetched from `source_home` first when given). Returns the start and
    the bytes this worker fetched."""
    fetched = 0
    if source_home:
        ctx.progress(phase="migrate")
        fetched = migrate(group, source_home, home, start["root"], layout)
    ctx.progress(phase="load")
    if "seed_dir" in start:
        return start_from_seed(start["seed_dir"]), fetched
    return start_from_commit(home, start["root"]), fetched


def session_worker(group: Group, args: dict, ctx) -> dict:
    """Launcher entry: optional migration, then train `batches[step]` (global step numbering from 1)
    up to `until`, committing at `commit_at` steps and at the end.

    args: home, layout, start ({"seed_dir"} or {"root"}), source_home (migrate from it first),
    reference (None, {"seed_dir"} or {"home", "root"}), engine, optimizer, group_rules, batches, until,
    commit_at, background_commits (commits before `until` in the background; the last one is synchronous)."""
    from kit.trainer import engine_config_from_json, records_from_json

    layout = Layout.from_json(args["layout"])
    start, fetched = open_start(group, args["home"], layout, args["start"], args.get("source_home"), ctx)
    groups = {k: GroupConfig.from_json(v, f"optimizer.{k}") for k, v in args["optimizer"].items()}
    session = Session(group, args["home"], layout, start, engine_config_from_json(args["engine"]), groups,
                      [tuple(r) for r in args.get("group_rules", [])], args.get("reference"))
    out = {"rank": group.rank, "fetched_bytes": fetched, "updates": [], "commits": [], "start_step": session.step}
    commit_at = set(args.get("commit_at", []))
    until = int(args["until"])
    background = bool(args.get("background_commits", False))  # commits at commit_at complete behind updates
    seen = []

    def completed_background_commits():
        last = session.committer.last if session.committer is not None else None
        if last is not None and (not seen or seen[-1] is not last):
            seen.append(last)
            out["commits"].append({k: last[k] for k in ("step", "full_root", "learned_state_root")})

    while session.step < until:
        ctx.progress(step=session.step + 1, phase="update")
        res = session.update(records_from_json(args["batches"][session.step]))
        completed_background_commits()
        out["updates"].append({"step": session.step, **{k: v for k, v in res.to_json().items() if k != "seconds"}})
        if session.step in commit_at or session.step == until:
            ctx.progress(phase="commit")
            if background and session.step != until:
                session.commit(background=True)
                continue
            session.wait_commit()  # the end of training waits for a background commit in flight
            completed_background_commits()
            full, learned = session.commit()
            out["commits"].append({"step": session.step, "full_root": full, "learned_state_root": learned})
    return out
