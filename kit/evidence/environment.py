"""What a record says about where it ran: git state, package versions, devices and the code's digest.

Run records (kit.evidence.runner), benchmark records (bench/) and campaign records (campaigns/) all
take their `git`, `versions` and `device` fields from here, so the three read alike. Nothing here
imports torch unless asked (`versions(runtime=True)`, `device_info(torch_device)`), and nothing
creates a CUDA context: GPUs are listed through nvidia-smi.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import torch

import kit
from kit.evidence.archive import origin
from kit.provenance import kit_package_dir, source_digest

VERSIONED_PACKAGES = ("torch", "transformers", "tokenizers", "safetensors", "numpy", "papermill", "kit")
GIT_EXCLUDED_FROM_DIRTY = ("runs", "reports", "ledger")  # evidence outputs (the exposure ledger too) are not code
GPU_REFERENCE_REQUIREMENTS = Path("requirements") / "gpu-reference.txt"
# on a device host the repository arrives as a copy whose .git may be stale: the caller names the commit
GIT_COMMIT_ENV, GIT_DIRTY_ENV = "KIT_GIT_COMMIT", "KIT_GIT_DIRTY"


def utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


def iso_utc(moment: _dt.datetime) -> str:
    return moment.astimezone(_dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _git(directory: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=30,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None  # no git on this host
    return done.stdout if done.returncode == 0 else None


def git_toplevel(directory: Path) -> Path | None:
    out = _git(directory, "rev-parse", "--show-toplevel")
    return Path(out.strip()) if out else None


def evidence_base(runs_dir: Path) -> Path:
    """What paths in run records are relative to: the repository holding `runs_dir`, else its parent. For a
    folder unpacked from an archive (kit/evidence/archive.py), the repository holding the runs directory
    the archive belongs to."""
    stands_for = origin(runs_dir)
    if stands_for is not None:  # the archived folder's place in the runs directory, which no longer exists
        runs_dir = next(p for p in (stands_for, *stands_for.parents) if p.exists())
    return git_toplevel(runs_dir) or Path(runs_dir).resolve().parent


def relative_to_base(path: str | os.PathLike, base: Path) -> str:
    """`path` relative to `base` (POSIX form) when inside it, else absolute: records stay portable. A path
    inside an archived folder read unpacked (kit/evidence/archive.py) is named by its place in the runs
    directory."""
    path = origin(path) or Path(path).resolve()
    try:
        return path.relative_to(base.resolve()).as_posix()
    except ValueError:
        return str(path)


def git_state(directory: Path) -> dict:
    """{"commit", "dirty"} of the repository holding `directory`; both None outside a repository."""
    commit, dirty = git_head(directory)
    return {"commit": commit, "dirty": dirty}


def git_head(directory: Path) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the repository holding `directory` (`git_state`)."""
    commit = _git(directory, "rev-parse", "--verify", "HEAD")
    if commit is None:
        return None, None
    excludes = [f":(top,exclude){p}" for p in GIT_EXCLUDED_FROM_DIRTY]
    status = _git(directory, "status", "--porcelain", "--untracked-files=normal", "--", ":/", *excludes)
    return commit.strip(), None if status is None else bool(status.strip())


def git_commit_exists(directory: Path, commit: str) -> bool:
    return _git(directory, "cat-file", "-e", f"{commit}^{{commit}}") is not None


def git_commit_in_history(directory: Path, commit: str) -> bool:
    """`commit` is HEAD or one of its ancestors: the code that ran is in the history the evidence is read
    from (a commit kept only on a branch that was never merged, or on another host, is not)."""
    return _git(directory, "merge-base", "--is-ancestor", commit, "HEAD") is not None


def gpu_reference_requirements_sha256() -> str | None:
    """sha256 of the kit repository's requirements/gpu-reference.txt (the pinned GPU image), or None
    when the running kit is not inside a checkout that has it."""
    path = Path(kit.__file__).resolve().parents[1] / GPU_REFERENCE_REQUIREMENTS
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def versions(runtime: bool = False) -> dict:
    """Python and package versions from installed metadata (nothing is imported: torch stays unloaded),
    and `gpu_reference_requirements_sha256`, the pinned GPU requirements file this run names.

    `runtime=True` adds `triton` and what torch was built with (`cuda`, `cudnn`, `nccl`), which only an
    imported torch knows; benchmarks ask for it, run records do not (the runner's process never imports torch)."""
    out: dict[str, str | int | None] = {"python": platform.python_version()}
    for name in VERSIONED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    out["gpu_reference_requirements_sha256"] = gpu_reference_requirements_sha256()
    return {**out, **_runtime_versions()} if runtime else out


def _runtime_versions() -> dict[str, str | int | None]:
    """`triton` and what torch was built with (`versions(runtime=True)`)."""
    try:
        triton = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton = None
    try:
        nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None
    except (AttributeError, RuntimeError):  # a build without NCCL
        nccl = None
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {"triton": triton, "cuda": torch.version.cuda, "cudnn": cudnn, "nccl": nccl}


def cpu_model() -> str | None:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return platform.processor() or None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "Hardware"):
            return value.strip()
    return platform.processor() or None


def gpus() -> list[dict]:
    """[{"index", "name", "memory_mib", "driver"}] per NVIDIA GPU from nvidia-smi; [] without the tool or
    when it fails. nvidia-smi, not torch: listing the GPUs must not create a CUDA context."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return []
    try:
        done = subprocess.run([tool, "--query-gpu=index,name,memory.total,driver_version",
                               "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if done.returncode != 0:
        return []
    found = []
    for line in done.stdout.splitlines():
        parts = [x.strip() for x in line.rsplit(",", 3)]  # a GPU name may itself hold a comma
        if len(parts) != 4:
            continue
        index, name, memory, driver = parts
        found.append({"index": int(index) if index.isdigit() else None, "name": name,
                      "memory_mib": int(memory) if memory.isdigit() else None, "driver": driver})
    return found


def device_info(torch_device=None) -> dict:
    """{"host", "cpu", "cpu_count", "gpus", "gpu_count"} of this machine.

    With a torch device (benchmarks, which already hold a CUDA context) it adds `type` and, for a CUDA
    device, the properties torch reports for it: `name`, `capability`, `memory_bytes`, `multiprocessors`."""
    found = gpus()
    info = {"host": platform.node(), "cpu": cpu_model(), "cpu_count": os.cpu_count(), "gpus": found,
            "gpu_count": len(found)}
    return info if torch_device is None else {**info, **_torch_device(torch.device(torch_device))}


def _torch_device(device) -> dict:
    """`type` and, for a CUDA device, the properties torch reports for it (`device_info`)."""
    if device.type != "cuda":
        return {"type": device.type}
    prop = torch.cuda.get_device_properties(device)
    return {"type": device.type, "name": prop.name, "capability": f"{prop.major}.{prop.minor}",
            "memory_bytes": prop.total_memory, "multiprocessors": prop.multi_processor_count}


def code_state() -> dict:
    """{"commit", "dirty", "source", "kit_source_sha256"} of the code running now (benchmark and campaign
    records). `kit_source_sha256` is kit.provenance.source_digest of the running `kit` package, the digest
    prepared jobs commit to: it names the code independently of git, whose copy on a device host may be
    stale. KIT_GIT_COMMIT / KIT_GIT_DIRTY ("1"/"0") override the git fields when the caller knows better."""
    commit, dirty = os.environ.get(GIT_COMMIT_ENV), os.environ.get(GIT_DIRTY_ENV)
    stated = None if dirty is None else dirty == "1"
    if commit is None:  # git's, the dirty flag overridden where the caller gives it
        head, git_dirty = git_head(kit_package_dir())
        state = {"commit": head, "dirty": git_dirty if dirty is None else stated}
    else:
        state = {"commit": commit, "dirty": stated}
    return {**state, "source": f"env {GIT_COMMIT_ENV}" if commit is not None else "git rev-parse",
            "kit_source_sha256": source_digest(kit_package_dir())[0]}


def declared_numeric_profile() -> dict:
    """The profile a notebook kernel started by the runner runs under: the kernel calls
    kit.numerics.apply() before its first cell (kit/evidence/runtime.py), which sets these variables
    or refuses to compute. (torch is not imported here.)"""
    return {"name": kit.NUMERIC_PROFILE, "environment": dict(kit.NUMERIC_ENV)}


GPU_DETERMINISTIC_ENV = "KIT_GPU_DETERMINISTIC"
# the attention probe's shape: the medium seed's heads (head dim 64), bf16 as the GPU runs compute, causal
_SDPA_PROBE = """
import os, sys, torch
from torch.nn.attention import SDPBackend
if os.environ.get("KIT_GPU_DETERMINISTIC") == "1":
    torch.use_deterministic_algorithms(True)
q = torch.zeros(2, 12, 256, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
choice = torch._fused_sdp_choice(q, q, q, is_causal=True)
print(SDPBackend(choice).name)
"""


def attention_backend(environment: dict | None = None) -> str | None:
    """The scaled-dot-product attention backend torch dispatches on this GPU in the recorded mode (a probe in
    a child process, so that this one makes no CUDA context): e.g. CUDNN_ATTENTION without the deterministic
    flag and FLASH_ATTENTION with it on an H200. None when there is no GPU or the probe fails."""
    try:
        done = subprocess.run([sys.executable, "-c", _SDPA_PROBE], capture_output=True, text=True, timeout=120,
                              check=False, env={**os.environ, **(environment or {})})
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def gpu_numeric_mode(found: list[dict] | None = None, probe=attention_backend) -> dict | None:
    """What a GPU run's numbers depend on beyond the CPU profile (docs/engine.md, "Determinism"): the
    deterministic flag, cuBLAS's workspace setting, the attention backend dispatched, compile and Inductor
    settings, the driver and the GPU. None on a host without GPUs. A run record keeps it in
    numeric_profile.gpu, and a GPU replay runs again under the same flag."""
    found = gpus() if found is None else found
    if not found:
        return None
    deterministic = os.environ.get(GPU_DETERMINISTIC_ENV) == "1"
    return {
        "deterministic": deterministic,
        # kit.numerics.set_environment gives workers this value under the flag, unless one is set
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG") or (":4096:8" if deterministic else None),
        "attention_backend": probe(),
        # the engine compiles each block on CUDA (pipeline compile_blocks "auto", torch.compile's default
        # mode); Inductor's deterministic flag follows torch.use_deterministic_algorithms
        "compile": {"blocks": "torch.compile default mode (engine compile_blocks 'auto'; 'off' where a run says so)",
                    "inductor_deterministic": deterministic,
                    "inductor_environment": {k: v for k, v in sorted(os.environ.items()) if k.startswith("TORCHINDUCTOR_")}},
        "driver": found[0].get("driver"), "gpu": found[0].get("name"), "gpu_count": len(found),
    }


def roomiest_directory(*candidates: str | os.PathLike | None) -> Path:
    """Of the candidates that are existing directories (None skipped), the one with the most free disk:
    where a benchmark puts state too large for a small temporary filesystem (1.7B's is ~20 GB)."""
    found = [Path(c) for c in candidates if c is not None and Path(c).is_dir()]
    if not found:
        raise FileNotFoundError(f"none of the candidate directories exists: {[str(c) for c in candidates]}")
    return max(found, key=lambda p: shutil.disk_usage(p).free)
