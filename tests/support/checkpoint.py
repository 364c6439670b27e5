"""Session workers over a 4-block seed pair: their arguments and one launch (checkpoint and fetch tests)."""

from __future__ import annotations

from kit.distributed.launch import launch
from kit.model.shard import even_layout
from support.engine import OPT, make_batches
from support.engine_workers import launch_env

LAYERS = 4


def session_args(seeds, home, workers, until, start=None, source_home=None, commit_at=(), batches=None):
    return {"home": str(home), "layout": even_layout(LAYERS, workers).to_json(),
            "start": start or {"seed_dir": str(seeds[0])}, "source_home": source_home and str(source_home),
            "reference": {"seed_dir": str(seeds[1])},
            "engine": {"microbatch_size": 2, "max_grad_norm": 0.5},
            "optimizer": {"default": OPT, "grown": OPT}, "batches": batches or make_batches(6, seed=7),
            "until": until, "commit_at": list(commit_at), "timeout_s": 60}


def run_sessions(tmp_path, name, args, workers, env=None, **kw):
    kw["env"] = launch_env(env)
    return launch("support.engine_workers:session_worker", args, workers, tmp_path / f"run-{name}", timeout_s=300, **kw)
