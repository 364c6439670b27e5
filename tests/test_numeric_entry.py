"""The numeric profile is applied by entry points, never by `import kit`: importing changes nothing,
digests and roots refuse before `kit.numerics.apply()`, and apply() works after `import torch` as long
as torch has not computed (kit/numerics.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import kit

REPO = Path(__file__).resolve().parents[1]


def _python(code: str, **env_change) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in kit.NUMERIC_ENV}
    env.update(PYTHONPATH=str(REPO), **env_change)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          check=False)


def test_import_kit_leaves_the_process_alone():
    code = ("import os, sys; e = dict(os.environ); import kit; assert dict(os.environ) == e, 'environ changed'\n"
            "assert 'torch' not in sys.modules, 'import kit imported torch'\n"
            "assert set(kit.__all__) >= {'Session', 'build_worker', 'LlamaShape'}\n"
            "assert 'torch' not in sys.modules, 'reading kit.__all__ imported torch'\nprint('ok')")
    done = _python(code, OMP_NUM_THREADS="2", ATEN_CPU_CAPABILITY="avx2")
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_digests_and_roots_refuse_before_the_profile(tmp_path):
    code = ("import sys\nfrom kit.digest import NumericProfileError\n"
            "from kit.inventory import parameter_digest\nfrom kit.store.manifest import learned_state_root\n"
            "for f, a in ((parameter_digest, sys.argv[1]), (learned_state_root, {'cursor': {}, 'params': []})):\n"
            "    try:\n        f(a)\n    except NumericProfileError as e:\n        print('refused:', e)\n")
    env = {k: v for k, v in os.environ.items() if k not in kit.NUMERIC_ENV}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("refused:") and "kit.numerics.apply()" in line for line in lines)
    assert str(tmp_path) in lines[0] and "learned-state root" in lines[1]


def test_apply_after_import_torch_overrides_the_users_environment():
    """A user's script may import torch first; apply() before the first computation still pins the kernels."""
    code = ("import os, torch, kit.numerics\np = kit.numerics.apply()\n"
            "a = torch.ones(8, 8); (a @ a).sum()\n"
            "print(p['aten_cpu_capability'], p['mkl_cbwr_branch'], p['intra_op_threads'], "
            "torch.backends.cpu.get_cpu_capability(), os.environ['ATEN_CPU_CAPABILITY'])")
    done = _python(code, OMP_NUM_THREADS="2", ATEN_CPU_CAPABILITY="avx2", MKL_CBWR="AUTO")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["DEFAULT", "compatible", "1", "DEFAULT", "default"]


def test_the_notebook_kernel_applies_the_profile_before_its_first_cell():
    from jupyter_client.manager import start_new_kernel

    from kit.evidence.runtime import kernel_pythonpath, profiled_command, profiled_kernels

    assert profiled_command(["tool", "-f", "x"]) == ["tool", "-f", "x"]  # not an IPython kernel: unchanged
    out = []
    env = {k: v for k, v in os.environ.items() if k not in kit.NUMERIC_ENV}
    env["PYTHONPATH"] = kernel_pythonpath()
    with profiled_kernels():
        km, kc = start_new_kernel(kernel_name="python3", env=env)
    try:
        kc.execute_interactive("import os, kit.digest; print(kit.digest._profile_in_force, "
                               "os.environ.get('ATEN_CPU_CAPABILITY'))", timeout=120,
                               output_hook=lambda m: out.append(m["content"].get("text", "")))
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert "".join(out).split() == [kit.NUMERIC_PROFILE, "default"]
