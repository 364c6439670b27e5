"""The route that brings papermill, nbconvert and ipykernel to a GPU host without an index
(tools/gpu_wheels.py, docs/gpu-hosts.md), proven here without a GPU:

- the wheel set is built for THIS interpreter's version by the same code that builds the 3.12 set;
- a simulated host (a fresh venv whose site-packages is this venv's minus the runtime's packages, so
  it has torch, numpy and the kit's other needs, like the GPU image, but no papermill) installs it
  with --no-index --target, as the host does, then executes notebooks through papermill and `kit run`
  from the target folder alone;
- the 3.12 set resolves completely over its own folder (pip install --dry-run --no-index).

Building downloads about 19 MiB from the index once per Python version; the sets are kept under
build/test-gpu-wheels/ (ignored) and reused while the requirement files are unchanged.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
import gpu_wheels  # tools/ is not a package

CACHE = REPO / "build" / "test-gpu-wheels"
MISSING_ON_HOST = "click"  # a host-role package the simulated host lacks: install must fall back to its wheel


def _wheel_set(python_version: str) -> Path:
    """The set for `python_version`, reused when its manifest matches the current requirement files."""
    out = CACHE / f"cp{''.join(python_version.split('.')[:2])}"
    try:
        gpu_wheels.verify_wheels(out, gpu_wheels.load_manifest(out))
        return out
    except gpu_wheels.RouteError:
        shutil.rmtree(out, ignore_errors=True)
    gpu_wheels.build(out, python_version)
    return out


@pytest.fixture(scope="module")
def local_set() -> Path:
    return _wheel_set(platform.python_version())  # the full version: pip honours Requires-Python >= 3.11.5


@pytest.fixture(scope="module")
def gpu_set() -> Path:
    return _wheel_set("3.12")


@pytest.fixture(scope="module")
def host_python(tmp_path_factory) -> Path:
    """A venv standing in for the GPU image: every package of this interpreter's site-packages except
    the runtime's own (requirements/gpu-notebook.txt), MISSING_ON_HOST, and the kit (it comes from the
    checkout on PYTHONPATH, as on the host). Entries are symlinked, so torch is not copied."""
    venv = tmp_path_factory.mktemp("host") / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    ours = Path(sysconfig.get_paths()["purelib"])
    left_out = set(gpu_wheels.read_pins(gpu_wheels.REQUIREMENTS)) | {MISSING_ON_HOST, "kit"}
    excluded: set[str] = set()
    for dist in metadata.distributions(path=[str(ours)]):
        if gpu_wheels.canonical(dist.metadata["Name"]) in left_out:
            excluded |= {Path(f).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
    for entry in ours.iterdir():
        if entry.name not in excluded and entry.name != "__pycache__":
            (site / entry.name).symlink_to(entry)
    probe = subprocess.run([str(python), "-c", "import torch, numpy, pip; import papermill"], check=False,
                           capture_output=True, text=True)
    assert "No module named 'papermill'" in probe.stderr, probe.stderr  # torch and pip import; papermill does not
    return python


def _env(target: Path, *extra: Path) -> dict:
    """What TARGET/env.sh exports (the test reads the file, so a change there is tested too)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JUPYTER_PATH")}
    exports = dict(line.removeprefix("export ").split("=", 1) for line in (target / "env.sh").read_text().splitlines()
                   if line.startswith("export "))
    assert exports == {"PYTHONPATH": f'"{target}${{PYTHONPATH:+:$PYTHONPATH}}"',
                       "JUPYTER_PATH": f'"{target}/share/jupyter${{JUPYTER_PATH:+:$JUPYTER_PATH}}"'}
    env["PYTHONPATH"] = os.pathsep.join([*map(str, extra), str(target)])
    env["JUPYTER_PATH"] = str(target / "share" / "jupyter")
    return env


def test_install_without_index_then_papermill_and_kit_run(local_set, host_python, tmp_path):
    target = tmp_path / "target"
    done = subprocess.run([str(host_python), str(REPO / "tools" / "gpu_wheels.py"), "install", str(target),
                           "--wheels", str(local_set)], check=False, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"host's copy was missing or too old: {MISSING_ON_HOST}" in done.stdout
    record = json.loads((target / gpu_wheels.MARKER_NAME).read_text())
    assert [u["package"] for u in record["fallback"]] == [MISSING_ON_HOST]
    assert "papermill==2.7.0" in record["installed"]
    # host-role packages the host has are NOT copied into the target (they would shadow torch's)
    assert not (target / "jinja2").exists() and not (target / "typing_extensions.py").exists()
    assert (target / "click").is_dir()
    # the left-out wheels are neither carried nor installed, and their absence is recorded, not hidden:
    # the smoke and `kit run` below then prove that notebooks execute and render without them
    assert {u["package"] for u in record["left_out"]} == set(gpu_wheels.LEFT_OUT)
    assert not (target / "debugpy").exists() and not (target / "jedi").exists()

    # papermill executes a parameterised notebook on the python3 kernel, nbconvert renders it
    smoke = subprocess.run([str(host_python), str(REPO / "tools" / "gpu_wheels.py"), "smoke", str(tmp_path / "smoke"),
                            "--target", str(target)], check=False, capture_output=True, text=True, cwd=tmp_path, env=_env(target))
    assert smoke.returncode == 0, smoke.stderr
    checked = json.loads(smoke.stdout)
    assert checked["answer"] == f"answer 42 ({sys.version_info.major}, {sys.version_info.minor})"
    assert checked["kernelspec"] == str(target / "share" / "jupyter" / "kernels" / "python3")
    assert "answer 42" in (tmp_path / "smoke" / "smoke.html").read_text()

    # the kit's own runner on the same route: `kit run` records a completed run
    runs = tmp_path / "runs"
    run = subprocess.run([str(host_python), "-m", "kit", "run", str(tmp_path / "smoke" / "smoke.ipynb"), "-p", "factor",
                          "7", "--run-id", "route", "--runs-dir", str(runs)], check=False, capture_output=True, text=True,
                         cwd=tmp_path, env=_env(target, REPO))
    assert run.returncode == 0, run.stdout + run.stderr
    run_record = json.loads((runs / "route" / "run.json").read_text())
    assert run_record["status"] == "completed"
    assert run_record["versions"]["papermill"] == "2.7.0"
    executed = json.loads((runs / "route" / "smoke.ipynb").read_text())
    answer = next(c for c in executed["cells"] if c.get("id") == "answer")
    assert "".join(answer["outputs"][0]["text"]).startswith("answer 42 ")


def test_gpu_set_resolves_completely_for_312(gpu_set, tmp_path):
    """The check docs/gpu-hosts.md gives: the 3.12 set installs from its own folder and the left-out
    one beside it, no index; the carried folder holds every wheel but the left-out ones."""
    report = tmp_path / "report.json"
    aside = gpu_wheels.left_out_dir(gpu_set)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--isolated", "install", "--dry-run", "--quiet", "--ignore-installed",
         "--no-index", "--find-links", str(gpu_set), "--find-links", str(aside), *gpu_wheels.target_flags("3.12"),
         "--target", str(tmp_path / "x"), "--report", str(report), "-r", str(gpu_wheels.REQUIREMENTS)],
        check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    resolved = {gpu_wheels.canonical(i["metadata"]["name"]): i["metadata"]["version"]
                for i in json.loads(report.read_text())["install"]}
    pins = {**gpu_wheels.read_pins(gpu_wheels.REQUIREMENTS), **gpu_wheels.read_pins(gpu_wheels.HOST_REQUIREMENTS)}
    assert resolved == pins
    manifest = gpu_wheels.load_manifest(gpu_set)
    carried = {gpu_wheels.wheel_name_version(f.name)[0] for f in gpu_set.glob("*.whl")}
    assert carried == set(pins) - set(gpu_wheels.LEFT_OUT) == {w["name"] for w in manifest["wheels"]}
    assert {w["name"] for w in manifest["left_out"]} == set(gpu_wheels.LEFT_OUT)
    for w in manifest["left_out"]:
        assert gpu_wheels.sha256_file(aside / w["file"]) == w["sha256"]
    assert {w["file"].split("-")[2] for w in manifest["wheels"]} <= {"py2.py3", "py3", "cp312", "cp36", "cp310",
                                                                   "cp311"}  # no wheel for another Python
    assert manifest["total_bytes"] < 32 * 2**20  # half the device tool's 64 MiB carry, with the repository's share


def test_install_refuses_other_python_and_damaged_wheels(gpu_set, local_set, tmp_path):
    with pytest.raises(gpu_wheels.RouteError, match=r"manifest.json: field 'python_version' is 3\.12"):
        gpu_wheels.install(tmp_path / "t", gpu_set)
    damaged = tmp_path / "set"
    damaged.mkdir()
    manifest = gpu_wheels.load_manifest(local_set)
    for w in manifest["wheels"]:
        (damaged / w["file"]).symlink_to(local_set / w["file"])
    manifest["wheels"][0]["sha256"] = "0" * 64
    (damaged / gpu_wheels.MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(gpu_wheels.RouteError, match=rf"{manifest['wheels'][0]['file']}: sha256 [0-9a-f]{{64}} differs"):
        gpu_wheels.install(tmp_path / "t", damaged)
    assert not (tmp_path / "t").exists()  # nothing installed before the check


def test_without_fallbacks_the_host_role_wheels_stay_behind_and_a_host_lacking_one_is_refused(
        local_set, host_python, tmp_path):
    """build --without-fallbacks (for a call with little room): the host-role wheels are left out with their
    reason, and an install on a host that lacks one of them (click, here) stops and says how to get it."""
    lean = tmp_path / "lean"
    lean.mkdir()
    for folder in (local_set, gpu_wheels.left_out_dir(local_set)):  # already downloaded: pip reuses them
        for wheel in folder.glob("*.whl"):
            shutil.copy(wheel, lean / wheel.name)
    manifest = gpu_wheels.build(lean, platform.python_version(), fallbacks=False)
    host_role = set(gpu_wheels.read_pins(gpu_wheels.HOST_REQUIREMENTS))
    assert {w["name"] for w in manifest["wheels"]} == set(gpu_wheels.read_pins(gpu_wheels.REQUIREMENTS)) - set(gpu_wheels.LEFT_OUT)
    assert {w["name"] for w in manifest["left_out"]} == host_role | set(gpu_wheels.LEFT_OUT)
    assert {w["reason"] for w in manifest["left_out"] if w["role"] == "host"} == {gpu_wheels.FALLBACK_LEFT_OUT}
    assert {gpu_wheels.wheel_name_version(f.name)[0] for f in lean.glob("*.whl")} == {w["name"] for w in manifest["wheels"]}
    done = subprocess.run([str(host_python), str(REPO / "tools" / "gpu_wheels.py"), "install", str(tmp_path / "t"),
                           "--wheels", str(lean)], check=False, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2
    assert f"requires {MISSING_ON_HOST}" in done.stderr and "found nothing" in done.stderr
    assert f"the fallback wheels of {MISSING_ON_HOST} were left out (build --without-fallbacks)" in done.stderr
    assert "debugpy" not in done.stderr and "jedi" not in done.stderr  # those two stay accepted


def test_pins_are_exact_and_roles_disjoint(tmp_path):
    bring, host = gpu_wheels.read_pins(gpu_wheels.REQUIREMENTS), gpu_wheels.read_pins(gpu_wheels.HOST_REQUIREMENTS)
    assert set(gpu_wheels.ROOTS) <= set(bring) and not set(bring) & set(host)
    loose = tmp_path / "r.txt"
    loose.write_text("# fine\npapermill>=2.5\n")
    with pytest.raises(gpu_wheels.RouteError, match=r"r\.txt:2: 'papermill>=2.5' is not an exact pin"):
        gpu_wheels.read_pins(loose)
