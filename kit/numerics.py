"""The kit's one numeric profile: the settings under which a digest or a root means the same number
on every x86 CPU (docs/engine.md, "Determinism").

The profile pins ATen's DEFAULT kernels, MKL's COMPATIBLE branch, one intra-op thread and no oneDNN.
The decision to know: `import kit` changes nothing; `apply()` sets the profile (overriding the
user's environment, since a digest must not depend on it) and must run before torch computes
anything. The digest-producing entry points call it, a script of one's own calls
`kit.numerics.apply()` first, and the functions that compute a digest refuse before it.
Why each setting, and the promises: docs/engine.md ("Determinism").
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from kit import NUMERIC_ENV, NUMERIC_PROFILE
from kit.digest import NumericProfileError, mark_numeric_profile

__all__ = ["NumericProfileError", "apply", "correctly_rounded_sqrt", "describe", "set_environment"]

MKL_CBWR_BRANCH = 1  # mkl_service.h: the query for the current branch
MKL_CBWR_COMPATIBLE = 3
_MKL_BRANCH_NAMES: dict[int | None, str] = {0: "off", 1: "branch off", 2: "auto", 3: "compatible", 4: "sse2", 9: "avx2"}


_applied: dict | None = None


def _mkl():
    """torch's statically linked MKL service functions, or None where the BLAS is not MKL."""
    import torch  # noqa: PLC0415 - torch loads after set_environment() (module docstring)

    lib = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    try:
        handle = ctypes.CDLL(str(lib))
        get, put = handle.mkl_serv_cbwr_get, handle.mkl_serv_cbwr_set
    except (OSError, AttributeError):
        return None
    get.restype, get.argtypes = ctypes.c_int, [ctypes.c_int]
    put.restype, put.argtypes = ctypes.c_int, [ctypes.c_int]
    return get, put


def set_environment() -> None:
    """Write the profile's environment variables (and, with KIT_GPU_DETERMINISTIC=1, cuBLAS's workspace
    setting, read when its first handle is made) into os.environ; the part of `apply()` that needs no torch."""
    os.environ.update(NUMERIC_ENV)
    if os.environ.get("KIT_GPU_DETERMINISTIC") == "1":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def apply(device=None, deterministic_gpu: bool = False, threads: int = 1) -> dict:
    """Fix this process's numerics (idempotent) and return the profile a run record carries.

    `threads` above 1 is for GPU hosts, where CPU work is elementwise (the study's offloaded error
    feedback) and does not depend on the split; the CPU promise holds for threads == 1 only, and the
    record says which was used.

    Call it before torch computes anything (importing torch first is fine). Raises NumericProfileError
    when torch already computed under other settings, because every digest made afterwards would
    depend on the CPU."""
    global _applied
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"numeric profile threads = {threads!r}; expected a positive int")
    set_environment()  # before torch's first computation: ATen and MKL read these then
    import torch  # noqa: PLC0415 - torch loads after set_environment() (module docstring)

    torch.set_num_threads(threads)
    torch.backends.mkldnn.enabled = False  # type: ignore[assignment]  # torch's stubs type the flag as its descriptor
    mkl = _mkl()
    branch = None
    if mkl is not None:
        get, put = mkl
        if get(MKL_CBWR_BRANCH) != MKL_CBWR_COMPATIBLE:
            put(MKL_CBWR_COMPATIBLE)  # succeeds only before MKL's first call; checked just below
        branch = get(MKL_CBWR_BRANCH)
        if branch != MKL_CBWR_COMPATIBLE:
            raise NumericProfileError(
                f"MKL runs its {_MKL_BRANCH_NAMES.get(branch, branch)!r} branch, not 'compatible': torch "
                f"multiplied matrices before kit.numerics.apply() set MKL_CBWR. Import kit before any torch "
                f"computation and call kit.numerics.apply() first (or start the process with MKL_CBWR=COMPATIBLE).")
    capability = torch.backends.cpu.get_cpu_capability()
    if capability != "DEFAULT":
        raise NumericProfileError(
            f"ATen dispatches its {capability} CPU kernels, not DEFAULT: torch computed before kit.numerics.apply() "
            f"set ATEN_CPU_CAPABILITY. Import kit before any torch computation and call kit.numerics.apply() "
            f"first (or start the process with ATEN_CPU_CAPABILITY=default).")
    gpu = None
    if device is not None and torch.device(device).type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        if deterministic_gpu:
            # cuBLAS reads its workspace setting when its handle is made; set here for this process's
            # first handle and by set_environment() for workers (KIT_GPU_DETERMINISTIC=1).
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True)
            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = False
        gpu = {"deterministic_algorithms": bool(deterministic_gpu),
               "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"), "tf32": False}
    _applied = {"name": NUMERIC_PROFILE, "environment": dict(NUMERIC_ENV), "intra_op_threads": torch.get_num_threads(),
                "aten_cpu_capability": capability, "mkl_cbwr_branch": _MKL_BRANCH_NAMES.get(branch, branch),
                "mkldnn_enabled": torch.backends.mkldnn.enabled, "torch": torch.__version__, "gpu": gpu}
    mark_numeric_profile(NUMERIC_PROFILE)
    return dict(_applied)


def describe() -> dict:
    """The applied profile (applying it first if nothing has yet)."""
    return dict(_applied) if _applied is not None else apply()


def correctly_rounded_sqrt(tensors: list) -> list:
    """The correctly rounded square roots of CPU float32 tensors (new tensors), the same bits on every x86 CPU.

    Why not `torch.sqrt`: for float32 and float64 CPU tensors ATen computes it (and `pow(x, 0.5)`) with MKL's
    vector math library, which MKL_CBWR does not make portable: under the COMPATIBLE branch its results are
    off by one unit in the last place for about one input in five, and which inputs differs between CPUs
    (measured: a Sapphire Rapids Xeon and an emulated EPYC Rome disagree), so every Adam step's denominator,
    and through it every digest, depended on the CPU. The library's estimate is within one unit of the true
    root; the neighbour that rounds correctly is chosen exactly: a float32 midpoint has at most 25
    significant bits, so its square is exact in float64 and comparing it with x decides the rounding.
    Ties cannot occur (a midpoint's square is not a float32)."""
    import torch  # noqa: PLC0415 - torch loads after set_environment() (module docstring)

    out = []
    for x in tensors:
        y = torch.sqrt(x)
        for _ in range(2):  # a second pass catches an estimate two units away (none measured)
            down = torch.nextafter(y, torch.zeros_like(y))
            up = torch.nextafter(y, torch.full_like(y, float("inf")))
            xd, yd = x.double(), y.double()
            below, above = (down.double() + yd) * 0.5, (yd + up.double()) * 0.5
            y = torch.where(xd < below * below, down, torch.where(xd > above * above, up, y))
        out.append(y)
    return out
