"""Where a worker is built: `build_worker` is the one function that assembles a training worker
(memory admission, the student's owned stage and its weights, the optimizer and its state, the frozen
reference) into a `kit.distributed.pipeline.StageEngine`. Every caller uses it: `Session` (adaptive
arms, study replicas), the seed build, the benchmarks and the test workers.

The order of the steps is fixed: admission first (refuse before allocating), then the student, its
weights (a seed directory, a commit's objects, or already in a module the caller built), its optimizer
groups and states, then the reference in the compute dtype, then the engine's fast paths applied to
both (kit/engine/fast_paths.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kit.distributed.group import Group
from kit.distributed.pipeline import EngineConfig, StageEngine
from kit.engine.admission import admit_worker
from kit.engine.fast_paths import apply_fast_paths
from kit.engine.reference import load_reference
from kit.model.llama import LlamaCausalLM
from kit.model.shard import Layout, build_stage, canonical_names, load_owned
from kit.store import commits
from kit.store.objects import ObjectStore
from kit.store.start import Start
from kit.train.optim import GroupConfig, ParamAdamW, assign_groups


@dataclass
class Worker:
    engine: StageEngine
    admission: dict | None  # {"estimate", "free"} when admitted, None when the caller skipped admission


def build_worker(group: Group, layout: Layout, start: Start | None, engine_cfg: EngineConfig,
                 groups: dict[str, GroupConfig], *, home: str | None = None, group_rules=(),
                 reference: dict | LlamaCausalLM | None = None, admission: dict | None = None,
                 student: LlamaCausalLM | None = None) -> Worker:
    """One worker's engine.

    start       a seed directory or a commit (`kit.store.start`) whose objects are in the store `home`;
                None when `student` already holds the weights (the seed build and the benchmarks
                initialise their own modules)
    groups      optimizer group configs; parameters get their group from the commit, else `group_rules`
    reference   None, {"seed_dir"}, {"home", "root"}, or a ready frozen module
    admission   {"microbatch": (documents, max tokens), "microbatches": per update, "memory_model": {...}}
                to admit against the memory free now (kit/engine/admission.py counts what the schedule
                keeps in flight); None skips admission (callers that own the whole device)
    """
    if start is not None:
        shape = start.shape
    else:
        assert student is not None, "without a start, the student holds the weights"
        shape = student.shape
    layout.validate(shape.num_hidden_layers)
    admitted = None
    if admission is not None:
        admitted = admit_worker(group, shape, layout,
                                tuple(admission.get("microbatch", (engine_cfg.microbatch_size, 512)))[:2],
                                int(admission.get("microbatches", 1)), admission.get("memory_model"))
    if student is None:
        student = build_stage(shape, layout, group.rank, device=group.device)
    params = dict(student.named_parameters())
    manifest = start.commit if start is not None else None
    if manifest is None:
        if start is not None:
            assert start.seed_dir is not None, "a start without a manifest is a seed directory's"
            load_owned(student, start.seed_dir)
        group_of = assign_groups(params, group_rules)
    else:
        entries = {e.name: e for e in manifest.learned_state.params}
        group_of = {n: entries[n].group for n in params}
    opt = ParamAdamW(params, groups, group_of)
    if manifest is not None:
        assert home is not None, "a commit start's objects are in the store `home`"
        states = commits.load_param_states(ObjectStore(home), manifest.learned_state.params, set(params))
        opt.load_param_states({n: {k: (v.to(group.device) if torch.is_tensor(v) else v) for k, v in s.items()}
                               for n, s in states.items()}, f"commit {manifest.full_root}")
    if isinstance(reference, torch.nn.Module):
        ref: LlamaCausalLM | None = reference
    else:
        ref = load_reference(group, layout, shape, reference, getattr(torch, engine_cfg.compute_dtype))
    paths = apply_fast_paths(student, ref, engine_cfg, group.device)  # weight cache, fused elementwise, compile
    return Worker(StageEngine(group, layout, student, ref, opt, canonical_names(shape), engine_cfg, paths), admitted)

