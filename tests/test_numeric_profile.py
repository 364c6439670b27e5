"""The numeric profile (kit/numerics.py): digests and roots do not depend on the user's thread
count, the CPU's vector instruction set or MKL's branch, and in-process and launched workers agree.

Each variant runs tests/support/numeric_probe.py in a fresh interpreter with the environment changed the way
a user's machine could differ: the kit must override it before torch computes. The golden values
were computed on an AMD EPYC (AVX-512) with the pinned torch 2.13.0 CPU build; CI runs on whatever
x86 machine it lands on (Intel or AMD, with or without AVX-512), so equality there is the
cross-machine check, not only a same-machine one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import kit.numerics

PROBE = Path(__file__).resolve().parent / "support" / "numeric_probe.py"

GOLDEN = {  # tests/support/numeric_probe.py under kit-cpu-portable/1, torch 2.13.0+cpu
    "seed_digest": "d2c0165976b894f301d73178d25c973676965a43c91ef424ab87f82d8fb8bd6a",
    "in_process_root": "36c08c2f5446e166cb8c115d95890d873273191dcf41f0027db58096c8737bfc",
    "launched_root": "36c08c2f5446e166cb8c115d95890d873273191dcf41f0027db58096c8737bfc",
}
PINNED_TORCH = "2.13.0+cpu"

VARIANTS = {
    "one-thread-default-capability": {"OMP_NUM_THREADS": "1"},
    "two-threads-avx2": {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "ATEN_CPU_CAPABILITY": "avx2",
                         "MKL_CBWR": "AUTO"},
    "two-threads-avx512": {"OMP_NUM_THREADS": "2", "ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "AVX512"},
}


def _probe(env_change: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in kit.NUMERIC_ENV}
    env.update(env_change)
    done = subprocess.run([sys.executable, str(PROBE)], env=env, capture_output=True, text=True, timeout=600, check=False,
                          cwd=PROBE.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def probes():
    return {name: _probe(change) for name, change in VARIANTS.items()}


def test_digest_and_roots_do_not_depend_on_threads_or_instruction_set(probes):
    first = probes["one-thread-default-capability"]
    for name, got in probes.items():
        assert got["profile"]["aten_cpu_capability"] == "DEFAULT", name
        assert got["profile"]["mkl_cbwr_branch"] == "compatible", name
        assert got["profile"]["intra_op_threads"] == 1, name
        for key in GOLDEN:
            assert got[key] == first[key], (name, key)


def test_in_process_and_launched_workers_agree(probes):
    for name, got in probes.items():
        assert got["in_process_root"] == got["launched_root"], name


def test_golden_values_hold_on_this_cpu(probes):
    """The cross-machine promise: the values computed on another x86 CPU come out here too."""
    assert torch.__version__ == PINNED_TORCH, "the golden values are for the pinned CPU build (Makefile)"
    got = probes["one-thread-default-capability"]
    assert {k: got[k] for k in GOLDEN} == GOLDEN


def test_profile_refuses_a_process_that_computed_first():
    code = ("import torch; a = torch.ones(8, 8); (a @ a).sum(); import kit.numerics\n"
            "try:\n    kit.numerics.apply()\nexcept kit.numerics.NumericProfileError as e:\n    print('refused:', e)\n")
    env = {k: v for k, v in os.environ.items() if k not in kit.NUMERIC_ENV}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused:" in done.stdout and "Import kit before any torch computation" in done.stdout
