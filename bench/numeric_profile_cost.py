"""What the numeric profile (kit/numerics.py) costs, and why its MKL branch is COMPATIBLE.

    python bench/numeric_profile_cost.py [--updates 150]

Side by side in fresh processes on this CPU, the test-size seed build (SeedBuildConfig.test(), the
tiny seed's code path) under three settings, each timed the same way:
  native       the CPU's own ATen kernels and MKL's automatic branch, one thread (the profile bypassed:
               a benchmark-only switch below, never offered by the kit)
  avx2         ATEN_CPU_CAPABILITY=avx2 + MKL_CBWR=COMPATIBLE, one thread
  profile      the kit's profile: ATEN_CPU_CAPABILITY=default + MKL_CBWR=COMPATIBLE, one thread
and, for each, the ATen capability and MKL branch the process really ran. It also asks MKL for its
AVX2 branch (MKL_CBWR=AVX2) and prints the branch MKL reports: on AMD CPUs it falls back to AUTO,
which is why the profile pins COMPATIBLE. Prints one JSON line per setting and a summary line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, sys, tempfile, time
from dataclasses import replace
from pathlib import Path
setting, updates = sys.argv[1], int(sys.argv[2])
import kit.numerics
kit.numerics.set_environment()  # the profile's environment ...
if setting != "profile":  # ... which this benchmark (only) overrides before torch computes
    for k, v in json.loads(sys.argv[3]).items():  # "" removes the variable: the library's own choice
        os.environ.pop(k, None) if v == "" else os.environ.__setitem__(k, v)
import torch
import kit.digest
if setting != "profile":
    torch.set_num_threads(1)
    kit.numerics.apply = lambda *a, **k: {"name": setting, "intra_op_threads": 1}  # benchmark-only: no profile
    kit.digest.mark_numeric_profile(setting)  # benchmark-only: let the build hash its (non-portable) result
from kit.seed import build
build.numerics.apply = kit.numerics.apply
t0 = time.perf_counter()
info = build.build_seed(Path(tempfile.mkdtemp()) / "s", replace(build.SeedBuildConfig.test(), updates=updates),
                        progress=False)
seconds = time.perf_counter() - t0
lib = kit.numerics._mkl()
print(json.dumps({"setting": setting, "seconds": round(seconds, 2), "digest": info["parameter_digest"],
                  "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
                  "mkl_cbwr_branch": kit.numerics._MKL_BRANCH_NAMES.get(lib[0](1)) if lib else None}))
"""

SETTINGS = {"native": {"ATEN_CPU_CAPABILITY": "", "MKL_CBWR": ""},
            "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"},
            "profile": {}}


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    ap.add_argument("--updates", type=int, default=150, help="updates of the test-size seed build")
    a = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    rows = {}
    for name, change in SETTINGS.items():
        done = subprocess.run([sys.executable, "-c", CHILD, name, str(a.updates), json.dumps(change)], env=env,
                              capture_output=True, text=True, check=True)
        rows[name] = json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps(rows[name]))
    probe = ("import os; os.environ['MKL_CBWR']='AVX2'; import torch, kit.numerics as n; "
             "os.environ['MKL_CBWR']='AVX2'; a=torch.ones(8,8); (a@a).sum(); "
             "print(n._MKL_BRANCH_NAMES.get(n._mkl()[0](1)))")
    asked = subprocess.run([sys.executable, "-c", probe], env={**env, "MKL_CBWR": "AVX2"}, capture_output=True,
                           text=True, check=True).stdout.strip()
    print(json.dumps({"summary": True, "cpu": cpu_model(),
                      "profile_over_native": round(rows["profile"]["seconds"] / rows["native"]["seconds"], 2),
                      "profile_over_avx2": round(rows["profile"]["seconds"] / rows["avx2"]["seconds"], 2),
                      "mkl_branch_when_avx2_is_asked": asked}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
