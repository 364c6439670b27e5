"""Run by tests/test_numeric_profile.py as a script in a subprocess whose environment the test changes (thread
count, ATen CPU capability, MKL branch): prints, as one JSON line, the digests and roots the numeric
profile promises to keep equal on any x86 CPU.

- `seed_digest`: the parameter digest of a short build of the test-size seed (the tiny seed's code
  path, SeedBuildConfig.test() with 20 updates);
- `in_process_root`: the learned-state root after 3 updates of a 3-block model, one worker in this
  process;
- `launched_root`: the same 3 updates on 2 launched worker processes (kit's local launcher, gloo).
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])  # tests/, so that `support` is a package here too

import torch

import kit.numerics

kit.numerics.apply()  # as every kit entry point does, and as tests/conftest.py does for the test process

from kit.distributed.group import Group
from kit.distributed.launch import launch
from kit.model.shard import even_layout
from kit.seed.build import SeedBuildConfig, build_seed
from support.engine import OPT, make_batches
from support.engine_workers import launch_env, session_worker
from support.models import write_hf_llama


class _Quiet:
    def progress(self, step=None, phase=None):
        pass


def main() -> None:
    out = Path(tempfile.mkdtemp(prefix="numeric-probe-"))
    seed = build_seed(out / "seed", replace(SeedBuildConfig.test(), updates=20, warmup_updates=5), progress=False)
    student, reference = write_hf_llama(out / "student", seed=0), write_hf_llama(out / "reference", seed=1)

    def args(home, workers):
        return {"home": str(home), "layout": even_layout(3, workers).to_json(), "start": {"seed_dir": str(student)},
                "reference": {"seed_dir": str(reference)}, "engine": {"microbatch_size": 2, "max_grad_norm": 0.5},
                "optimizer": {"default": OPT}, "batches": make_batches(3, seed=5), "until": 3, "commit_at": [],
                "timeout_s": 60}


    here = session_worker(Group(0, 1, torch.device("cpu")), args(out / "one", 1), _Quiet())
    launched = launch("support.engine_workers:session_worker", args(out / "two", 2), 2, out / "run", timeout_s=240,
                      env=launch_env())
    import kit.numerics

    print(json.dumps({"seed_digest": seed["parameter_digest"],
                      "in_process_root": here["commits"][-1]["learned_state_root"],
                      "launched_root": launched[0]["commits"][-1]["learned_state_root"],
                      "profile": kit.numerics.describe()}))


if __name__ == "__main__":
    main()
