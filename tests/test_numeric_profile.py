"""The numeric profile (kit/numerics.py): digests and roots do not depend on the user's thread
count, the CPU's vector instruction set or MKL's branch, and in-process and launched workers agree.

Each variant runs tests/support/numeric_probe.py in a fresh interpreter with the environment changed the way
a user's machine could differ: the kit must override it before torch computes. The golden values
were computed with the pinned torch 2.13.0 CPU build on an Intel Xeon (Sapphire Rapids: AVX-512, AMX), and
the seed digest was computed again under QEMU's user-mode emulation of an AMD EPYC Rome, an Intel Haswell
and an Intel Nehalem (no AVX) with the same result (docs/engine.md, "Determinism"); CI runs on whatever x86
machine it lands on (Intel or AMD, with or without AVX-512), so equality there is the cross-machine check,
not only a same-machine one. The values before 2026-12-02 (computed on an AMD EPYC) came out otherwise on
that Xeon: the Adam denominator's square root went through MKL's vector math, whose last bit depends on the
CPU; the optimizer now rounds it correctly itself (kit.numerics.correctly_rounded_sqrt, tested below).
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
    "seed_digest": "b8a7ae360bc0c2b780cee896861defadc3833357b12986879ace846f5aaa438f",
    "in_process_root": "53a5e688fa390d953fd90692aa2747a01a05798675feff10bc698b8f5f4f3146",
    "launched_root": "53a5e688fa390d953fd90692aa2747a01a05798675feff10bc698b8f5f4f3146",
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


def _correctly_rounded_by_python(values: list[float]) -> torch.Tensor:
    """The oracle: Python's math.sqrt (IEEE-754 double square root, correctly rounded) rounded to float32,
    which is the correctly rounded float32 root (double has more than 2 * 24 + 2 bits)."""
    import math
    import struct

    return torch.tensor([struct.unpack("f", struct.pack("f", math.sqrt(v)))[0] for v in values], dtype=torch.float32)


def test_the_optimizer_square_root_is_correctly_rounded_where_torch_sqrt_need_not_be():
    """kit.numerics.correctly_rounded_sqrt against the oracle over 2^15 float32 values from about 1e-40 (subnormal)
    to 1e37, zero and infinity. torch.sqrt's MKL path differs from the oracle in the last bit for some of
    them on the CPUs measured; the kit's must match every one, whatever CPU runs the suite. The optimizer's use
    of it is what the golden values above check (their seed build and 3-update runs take Adam steps)."""
    import kit.numerics

    kit.numerics.apply()
    i = torch.arange(1 << 15, dtype=torch.int64)
    mantissa = ((i * 2654435761 + 12345) % (1 << 30)).to(torch.float64) / (1 << 30) + 1.0  # [1, 2)
    exponent = ((i * 40503) % 256).to(torch.float64) - 133  # 2^-133 .. 2^122
    x = torch.cat([(mantissa * torch.pow(2.0, exponent)).float(), torch.tensor([0.0, 1e-45, float("inf")])])
    (got,) = kit.numerics.correctly_rounded_sqrt([x])
    assert got.dtype == torch.float32 and got.shape == x.shape
    assert torch.equal(got, _correctly_rounded_by_python(x.tolist()))

