"""A worker's training loop over given record batches: build owned stages, load owned tensors,
run updates, optionally dump gradients and state. The generic entry the local launcher and
torchrun start (`kit.trainer:train_worker`); experiment drivers add data and commits around it.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from kit.distributed.group import Group
from kit.distributed.launch import WorkerContext
from kit.distributed.pipeline import EngineConfig, StageEngine
from kit.model.shard import Layout, build_stage, canonical_names, load_owned, stage_bytes
from kit.model_config import load_config
from kit.session import load_reference
from kit.train.batch import TrainRecord
from kit.train.loss import DistillConfig
from kit.train.optim import GroupConfig, ParamAdamW, assign_groups


def records_from_json(rows: list[dict]) -> list[TrainRecord]:
    return [TrainRecord(r["id"], tuple(r["input_ids"]), tuple(bool(x) for x in r["target_mask"]),
                        float(r.get("weight", 1.0)), bool(r.get("replay", False))) for r in rows]


def engine_config_from_json(obj: dict) -> EngineConfig:
    d = obj.get("distill", {})
    return EngineConfig(int(obj["microbatch_size"]), float(obj["max_grad_norm"]),
                        DistillConfig(float(d.get("weight", 1.0)), float(d.get("temperature", 1.0)),
                                      d.get("direction", "forward")),
                        obj.get("compute_dtype", "float32"))


def build_engine(group: Group, seed_dir: str, reference_dir: str | None, layout: Layout, engine: EngineConfig,
                 groups: dict[str, GroupConfig], group_rules=()) -> StageEngine:
    shape = load_config(seed_dir)
    layout.validate(shape.num_hidden_layers)
    student = build_stage(shape, layout, group.rank, device=group.device)
    load_owned(student, seed_dir)
    dtype = getattr(torch, engine.compute_dtype)
    reference = load_reference(group, layout, shape, {"seed_dir": reference_dir} if reference_dir else None, dtype)
    params = dict(student.named_parameters())
    opt = ParamAdamW(params, groups, assign_groups(params, group_rules))
    return StageEngine(group, layout, student, reference, opt, canonical_names(shape), engine)


def _test_fault(rank: int, step: int) -> None:
    """Test hooks: KIT_TEST_DIE / KIT_TEST_HANG = "rank:step" kill or stall that worker at that step."""
    import os
    import time

    if os.environ.get("KIT_TEST_DIE") == f"{rank}:{step}":
        os._exit(137)
    if os.environ.get("KIT_TEST_HANG") == f"{rank}:{step}":
        time.sleep(3600)


def train_worker(group: Group, args: dict, ctx: WorkerContext) -> dict:
    """args: seed_dir, reference_dir|None, layout {blocks, embedding_owner}, engine {...},
    optimizer {group: {...}}, batches [[record, ...], ...], dump_dir|None, dump_grads_at|None."""
    layout = Layout.from_json(args["layout"])
    groups = {k: GroupConfig.from_json(v, f"optimizer.{k}") for k, v in args["optimizer"].items()}
    eng = build_engine(group, args["seed_dir"], args.get("reference_dir"), layout,
                       engine_config_from_json(args["engine"]), groups, args.get("group_rules", ()))
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
                  metadata={"ages": ",".join(f"{n}={st['age']}" for n, st in sorted(eng.optimizer.state.items()))})
    n_params, n_bytes = stage_bytes(eng.student)
    ref_params, ref_bytes = stage_bytes(eng.reference) if eng.reference is not None else (0, 0)
    return {"rank": group.rank, "updates": results, "student_params": n_params, "student_bytes": n_bytes,
            "reference_params": ref_params, "reference_bytes": ref_bytes,
            "owned": sorted(eng.params)}
