"""The notebook runtime (papermill, a Jupyter kernel) on hosts that have it, or that bring it as wheels.

The GPU hosts have neither papermill nor a package index, so `kit run` / `kit batch` look for missing
packages in the repository's git-ignored `.whl/` folder (`.whl/site/` or `.whl/*.whl`) before
failing at once with every missing module named. The other `kit` commands never import any of this.
The tested route: docs/gpu-hosts.md; details: the notes below.

Notes: the two wheel forms and the tested route.

`.whl/site/` is an unpacked install target (added to sys.path and the kernel's PYTHONPATH); `.whl/*.whl` files are
zip-import paths, which work for pure-Python wheels only. The tested route (docs/gpu-hosts.md): `make gpu-wheels`
builds the pinned wheels (requirements/gpu-notebook.txt) and `tools/gpu_wheels.py install TARGET` installs them
without an index; TARGET/env.sh sets PYTHONPATH and JUPYTER_PATH (kernelspec, nbconvert templates).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import kit

# Imported by the runner process (papermill, nbclient, nbformat, jupyter_client) or by the
# kernel it starts (ipykernel, zmq): a host missing any of them cannot execute a notebook.
RUN_MODULES = ("papermill", "nbformat", "nbclient", "jupyter_client", "ipykernel", "zmq", "yaml")
# What `kit report` needs in addition (rendering and the report's own cells).
REPORT_MODULES = ("nbconvert", "pandas", "matplotlib", "IPython")
WHEEL_DIR_NAME = ".whl"


class NotebookRuntimeMissing(ValueError):
    """The packages needed to execute or render notebooks are not importable, even from `.whl/`."""


def repository_root() -> Path:
    """The checkout holding the `kit` package (where `.whl/` and `notebooks/` live)."""
    return Path(kit.__file__).resolve().parents[1]


def wheel_paths(root: Path | None = None) -> list[Path]:
    """The import paths `.whl/` offers: its `site/` folder, then each wheel file (sorted)."""
    wheel_dir = (root or repository_root()) / WHEEL_DIR_NAME
    if not wheel_dir.is_dir():
        return []
    paths = [wheel_dir / "site"] if (wheel_dir / "site").is_dir() else []
    return paths + sorted(wheel_dir.glob("*.whl"))


def _missing(modules: tuple[str, ...]) -> list[str]:
    missing = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def ensure_runtime(modules: tuple[str, ...] | None = None, purpose: str = "execute notebooks") -> list[Path]:
    """Make `modules` (default RUN_MODULES) importable, adding `.whl/` paths to sys.path when needed;
    returns the paths added.

    Raises NotebookRuntimeMissing naming every module still missing, before any work starts.
    """
    modules = RUN_MODULES if modules is None else modules
    missing = _missing(modules)
    added: list[Path] = []
    if missing:
        for path in wheel_paths():
            if str(path) not in sys.path:
                sys.path.append(str(path))
                added.append(path)
        importlib.invalidate_caches()
        missing = _missing(modules)
    if missing:
        wheel_dir = repository_root() / WHEEL_DIR_NAME
        offered = ", ".join(p.name for p in wheel_paths()) or "nothing"
        raise NotebookRuntimeMissing(
            f"cannot {purpose}: Python modules {', '.join(missing)} are not importable by {sys.executable}, "
            f"and {wheel_dir} offers {offered}. Install them (pip install papermill ipykernel nbconvert) or "
            f"bring them as wheels into a target folder as docs/gpu-hosts.md describes (tools/gpu_wheels.py)."
        )
    return added


def kernel_pythonpath() -> str:
    """PYTHONPATH for the kernel: the repository (so `import kit` works uninstalled), the `.whl/` paths
    this process uses, then whatever the caller had."""
    in_use = [str(p) for p in wheel_paths() if str(p) in sys.path]
    parts = [str(repository_root()), *in_use]
    if os.environ.get("PYTHONPATH"):
        parts.append(os.environ["PYTHONPATH"])
    return os.pathsep.join(parts)


# Run by every kernel that executes a kit notebook, before its first cell: the notebook's digests and
# roots are then computed under the numeric profile (kit/numerics.py), whatever the cells import first.
KERNEL_PROFILE_LINE = "import kit.numerics; kit.numerics.apply()"


def profiled_command(cmd: list[str]) -> list[str]:
    """An IPython kernel's command line with the numeric profile applied at its start (IPKernelApp's
    exec_lines run before any cell and take no execution count); another kernel's, unchanged."""
    if not any("ipykernel" in part for part in cmd):
        return list(cmd)
    return [*cmd, f"--IPKernelApp.exec_lines={KERNEL_PROFILE_LINE}"]


@contextlib.contextmanager
def profiled_kernels():
    """Every Jupyter kernel started in the block applies the numeric profile before its first cell."""
    from jupyter_client.provisioning import local_provisioner  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py); the launcher every local kernel goes through

    original = local_provisioner.launch_kernel

    def launch_kernel(cmd: list[str], *args: Any, **kw: Any) -> Any:
        return original(profiled_command(cmd), *args, **kw)

    local_provisioner.launch_kernel = launch_kernel
    try:
        yield
    finally:
        local_provisioner.launch_kernel = original


KERNEL_LOG_NAME = "kernel.log"  # in a run folder (kit run, kit batch, the demo) or a report folder


@contextlib.contextmanager
def quiet_kernels(log_path: str | os.PathLike):
    """Kernel and library noise goes to `log_path`, not the user's terminal, while the block runs.

    - every Jupyter kernel started in the block (papermill's and nbclient's alike) gets `log_path` as
      its stdout and stderr: what a kernel writes outside its cells (IPKernelApp's "Kernel is running
      over TCP without encryption", fd-level library output, workers that inherit its stderr) is logged;
      what cells print still goes into the executed notebook;
    - this process's Python warnings and WARNING-or-worse log records (papermill, nbclient, traitlets,
      torch) are appended to `log_path` too.
    Progress bars of this process (tqdm on sys.stderr) and --log-output streaming are untouched.
    """
    from jupyter_client.provisioning import local_provisioner  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py); the launcher every local kernel goes through

    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a", encoding="utf-8") as log:
        original = local_provisioner.launch_kernel

        def launch_kernel(cmd: list[str], *args: Any, **kw: Any) -> Any:  # jupyter_client passes the rest by keyword
            kw["stdout"] = log if kw.get("stdout") is None else kw["stdout"]
            kw["stderr"] = log if kw.get("stderr") is None else kw["stderr"]
            return original(cmd, *args, **kw)

        def show(message, category, filename, lineno, file=None, line=None):
            log.write(warnings.formatwarning(message, category, filename, lineno, line))
            log.flush()

        handler = logging.StreamHandler(log)
        handler.setLevel(logging.WARNING)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        local_provisioner.launch_kernel = launch_kernel
        try:
            with warnings.catch_warnings():
                warnings.showwarning = show
                yield Path(log_path)
        finally:
            local_provisioner.launch_kernel = original
            root.removeHandler(handler)
