"""Launcher entry points and helpers that only the tests use (moved out of the kit: the kit's own
drivers are `kit.adaptive.train.adaptive_worker` and `kit.study.arms.arm_worker`).

- `train_worker` (entry `support.engine_workers:train_worker`): a worker over given record batches, optionally
  dumping gradients and state (tests/test_engine.py, tests/test_worker_faults.py).
- `session_worker` (entry `support.engine_workers:session_worker`): optional migration, updates and commits
  through `kit.engine.session.Session` (tests/test_checkpoint_training.py, tests/reliability).
- `build_engine`, `engine_config`, `records_from_json`: the test arguments' dialect, built through the
  kit's one construction function `kit.engine.worker.build_worker`.

Launched workers import this module by name, so the launch environment must put tests/ (the
parent of the `support` package) on PYTHONPATH (`launch_env()`).
"""

from __future__ import annotations

import os
from pathlib import Path

from safetensors.torch import save_file

from kit.distributed.group import Group
from kit.distributed.pipeline import EngineConfig, StageEngine
from kit.engine.migration import open_start
from kit.engine.session import Session
from kit.engine.worker import build_worker
from kit.model.shard import Layout, stage_bytes
from kit.store.start import start_from_seed
from kit.train.batch import TrainRecord
from kit.train.loss import DistillConfig
from kit.train.optim import GroupConfig

TESTS = Path(__file__).resolve().parents[1]


def launch_env(extra: dict | None = None) -> dict:
    """Environment for launched workers: tests/ importable (entries `support.engine_workers:...`)."""
    path = os.pathsep.join([str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")])
    return {"PYTHONPATH": path, **(extra or {})}


def records_from_json(rows: list[dict]) -> list[TrainRecord]:
    return [TrainRecord(r["id"], tuple(r["input_ids"]), tuple(bool(x) for x in r["target_mask"]),
                        float(r.get("weight", 1.0)), bool(r.get("replay", False))) for r in rows]


def engine_config(obj: dict) -> EngineConfig:
    """The tests' engine arguments: {microbatch_size, max_grad_norm, distill?, compute_dtype?}."""
    d = obj.get("distill", {})
    return EngineConfig(int(obj["microbatch_size"]), float(obj["max_grad_norm"]),
                        DistillConfig(float(d.get("weight", 1.0)), float(d.get("temperature", 1.0)),
                                      d.get("direction", "forward")),
                        obj.get("compute_dtype", "float32"))


def build_engine(group: Group, seed_dir: str, reference_dir: str | None, layout: Layout, engine: EngineConfig,
                 groups: dict[str, GroupConfig], group_rules=()) -> StageEngine:
    """A worker from a seed directory, without admission (the tests' tiny models)."""
    return build_worker(group, layout, start_from_seed(seed_dir), engine, groups, group_rules=group_rules,
                        reference={"seed_dir": reference_dir} if reference_dir else None).engine


def _test_fault(rank: int, step: int) -> None:
    """Test hooks: KIT_TEST_DIE / KIT_TEST_HANG = "rank:step" kill or stall that worker at that step."""
    import time

    if os.environ.get("KIT_TEST_DIE") == f"{rank}:{step}":
        os._exit(137)
    if os.environ.get("KIT_TEST_HANG") == f"{rank}:{step}":
        time.sleep(3600)


def train_worker(group: Group, args: dict, ctx) -> dict:
    """args: seed_dir, reference_dir|None, layout {blocks, embedding_owner}, engine {...},
    optimizer {group: {...}}, batches [[record, ...], ...], dump_dir|None, dump_grads_at|None."""
    layout = Layout.from_json(args["layout"])
    groups = {k: GroupConfig.from_json(v, f"optimizer.{k}") for k, v in args["optimizer"].items()}
    eng = build_engine(group, args["seed_dir"], args.get("reference_dir"), layout,
                       engine_config(args["engine"]), groups, args.get("group_rules", ()))
    dump = Path(args["dump_dir"]) if args.get("dump_dir") else None
    results = []
    for step, rows in enumerate(args["batches"], start=1):
        ctx.progress(step=step, phase="update")
        _test_fault(group.rank, step)
        eng.capture_grads = dump is not None and step == args.get("dump_grads_at")
        res = eng.update(records_from_json(rows))
        if eng.capture_grads:
            save_file({n: t.contiguous() for n, t in eng.last_grads.items()}, str(dump / f"grads-{group.rank}.safetensors"))
        results.append(res.to_json())
    if dump is not None:
        tensors = {}
        for n, st in eng.optimizer.param_states().items():
            tensors[f"param/{n}"] = st["param"].contiguous()
            tensors[f"exp_avg/{n}"] = st["exp_avg"]
            tensors[f"exp_avg_sq/{n}"] = st["exp_avg_sq"]
        save_file(tensors, str(dump / f"state-{group.rank}.safetensors"),
                  metadata={"ages": ",".join(f"{n}={st.age}" for n, st in sorted(eng.optimizer.state.items()))})
    n_params, n_bytes = stage_bytes(eng.student)
    ref_params, ref_bytes = stage_bytes(eng.reference) if eng.reference is not None else (0, 0)
    return {"rank": group.rank, "updates": results, "student_params": n_params, "student_bytes": n_bytes,
            "reference_params": ref_params, "reference_bytes": ref_bytes,
            "owned": sorted(eng.params)}


def session_worker(group: Group, args: dict, ctx) -> dict:
    """Launcher entry: optional migration, then train `batches[step]` (global step numbering from 1)
    up to `until`, committing at `commit_at` steps and at the end.

    args: home, layout, start ({"seed_dir"} or {"root"}), source_home (migrate from it first),
    reference (None, {"seed_dir"} or {"home", "root"}), engine, optimizer, group_rules, batches, until,
    commit_at, background_commits (commits before `until` in the background; the last one is synchronous)."""

    layout = Layout.from_json(args["layout"])
    start, fetched = open_start(group, args["home"], layout, args["start"], args.get("source_home"), ctx)
    groups = {k: GroupConfig.from_json(v, f"optimizer.{k}") for k, v in args["optimizer"].items()}
    session = Session(group, args["home"], layout, start, engine_config(args["engine"]), groups,
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
