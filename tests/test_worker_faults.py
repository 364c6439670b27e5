"""A worker that dies or hangs ends the whole run with an error naming the rank and the step."""

from __future__ import annotations

import time

import pytest
from support.engine import OPT, make_batches
from support.engine_workers import launch_env
from support.models import write_hf_llama

from kit.distributed.launch import WorkerFailure, launch
from kit.model.shard import even_layout


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    return write_hf_llama(tmp_path_factory.mktemp("faults") / "s", layers=2)


def _args(seed, timeout_s):
    return {"seed_dir": str(seed), "reference_dir": str(seed), "layout": even_layout(2, 2).to_json(),
            "engine": {"microbatch_size": 2, "max_grad_norm": 1.0}, "optimizer": {"default": OPT},
            "batches": make_batches(3), "timeout_s": timeout_s}


def test_killed_worker_names_rank_and_step(tmp_path, seed):
    t0 = time.monotonic()
    with pytest.raises(WorkerFailure, match=r"worker rank 1 failed at step 2 \(update\): killed by signal|"
                                            r"worker rank 1 failed at step 2 \(update\): exited with code 137") as e:
        launch("support.engine_workers:train_worker", _args(seed, 20), 2, tmp_path / "run", timeout_s=120, grace_s=30,
               env=launch_env({"KIT_TEST_DIE": "1:2"}))
    assert e.value.rank == 1 and e.value.step == 2
    assert time.monotonic() - t0 < 60


def test_hung_worker_times_out_within_bound(tmp_path, seed):
    t0 = time.monotonic()
    with pytest.raises(WorkerFailure) as e:
        launch("support.engine_workers:train_worker", _args(seed, 4), 2, tmp_path / "run", timeout_s=120, grace_s=10,
               env=launch_env({"KIT_TEST_HANG": "0:2"}))
    assert e.value.step == 2
    assert "rank 0" in str(e.value) and "step 2" in str(e.value)
    assert time.monotonic() - t0 < 60
