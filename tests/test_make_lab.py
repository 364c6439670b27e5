"""`make lab` (issue 52, item 7): JupyterLab on notebooks/ with the kit importable. The test serves it as
`make lab` does after installing the `lab` extra (`make lab-serve`, headless, on a free port with a token),
reads the kernel specs from its API, checks that the kernel's Python imports this checkout's kit, and
stops it. It is skipped only when jupyterlab is not importable (the `test` extra installs it)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _wait_listening(port: int, proc: subprocess.Popen, deadline_s: float = 60.0) -> None:
    """Jupyter Server prints its URL a moment before its socket accepts (measured: the first connection
    after the banner was refused, the next one 2 s later answered), so connect until it does."""
    import time

    end = time.monotonic() + deadline_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > end:
                raise
            time.sleep(0.2)


def _server_environ(session: int) -> dict[str, str]:
    """The environment of the `python -m jupyterlab` process in the session `make lab-serve` started."""
    for proc in Path("/proc").iterdir():
        try:
            if int((proc / "stat").read_text().rsplit(")", 1)[1].split()[3]) != session:
                continue
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if argv[1:3] == [b"-m", b"jupyterlab"]:  # the server itself, not the shell make ran it in
                pairs = (proc / "environ").read_bytes().split(b"\0")
                return dict(p.decode().split("=", 1) for p in pairs if b"=" in p)
        except (OSError, ValueError, IndexError):
            continue
    raise AssertionError(f"no jupyterlab process in session {session}")


def test_make_lab_installs_the_extra_then_serves():
    p = subprocess.run(["make", "-n", "lab", "VENV=.venv"], cwd=REPO, capture_output=True, text=True, check=False,
                       timeout=60)
    lines = p.stdout.splitlines()
    install = next(i for i, line in enumerate(lines) if "pip install -q -e '.[lab]'" in line)
    assert any("lab-serve" in line for line in lines[install:]), p.stdout
    serve = subprocess.run(["make", "-n", "lab-serve"], cwd=REPO, capture_output=True, text=True, check=False,
                           timeout=60).stdout
    assert "-m jupyterlab --ServerApp.root_dir=lab" in serve and "--allow-root" in serve
    assert f"PYTHONPATH={REPO}" in serve


def test_lab_serves_the_notebooks_headless():
    pytest.importorskip("jupyterlab", reason="jupyterlab is not installed (pip install -e '.[lab]')")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(16)
    flags = f"--no-browser --ip=127.0.0.1 --port={port} --IdentityProvider.token={token} --ServerApp.port_retries=0"
    venv = Path(sys.executable).parent.parent  # the interpreter running the tests is the venv's
    lab_dir = REPO / "build" / "lab-test-copies"
    proc = subprocess.Popen(["make", "--no-print-directory", "lab-serve", f"VENV={venv}", f"LAB_FLAGS={flags}",
                             f"LAB_DIR={lab_dir}"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=dict(os.environ, JUPYTER_RUNTIME_DIR=str(REPO / "build" / "lab-test-runtime")))
    log = []
    try:
        for line in proc.stderr:  # blocks until the server says where it listens (or exits)
            log.append(line)
            if "Use Control-C to stop this server" in line:  # printed once it listens
                break
        assert proc.poll() is None, "".join(log)
        _wait_listening(port, proc)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/kernelspecs?token={token}", timeout=60) as r:
                specs = json.loads(r.read())
        except OSError as e:
            raise AssertionError(f"{e} (port {port}, {venv}); the server said:\n{''.join(log)}") from None
        assert "python3" in specs["kernelspecs"], specs
        argv = specs["kernelspecs"]["python3"]["spec"]["argv"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents?token={token}", timeout=60) as r:
            listed = {item["name"] for item in json.loads(r.read())["content"]}
        assert "11_adaptive_arm.ipynb" in listed and "kit" not in listed  # served from the copies in LAB_DIR
        # kernels inherit the server's environment: its PYTHONPATH starts with this checkout, and the kernel's
        # Python imports this checkout's kit with it
        server = _server_environ(proc.pid)
        assert server["PYTHONPATH"].split(":")[0] == str(REPO), server.get("PYTHONPATH")
        env = dict(os.environ, PYTHONPATH=server["PYTHONPATH"])
        python = str(venv / "bin" / "python") if argv[0] in ("python", "python3") else argv[0]
        where = subprocess.run([python, "-c", "import kit, pathlib; print(pathlib.Path(kit.__file__).parent)"],
                               cwd=REPO / "notebooks", env=env, capture_output=True, text=True, timeout=120,
                               check=False)
        assert where.stdout.strip() == str(REPO / "kit"), where.stderr
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert proc.returncode is not None


def _git_status(*paths) -> str:
    return subprocess.run(["git", "status", "--porcelain", "--", *map(str, paths)], cwd=REPO, capture_output=True,
                          text=True, check=True, timeout=60).stdout


def test_lab_opens_and_saves_copies_and_leaves_the_repository_clean(tmp_path):
    """Issue 64 item 6: Lab rewrites every notebook it opens (cell ids, the kernel's metadata and Python
    version) and the next `kit run` recorded `"dirty": true`. `make lab` serves copies in LAB_DIR: each
    committed notebook is copied byte for byte, a save there the way Jupyter's contents manager saves (the
    current nbformat, cell ids added, the kernel's language_info) rewrites only the copy, and a copy that
    differs is kept, never overwritten."""
    pytest.importorskip("jupyter_server", reason="jupyter_server is not installed (pip install -e '.[lab]')")
    import nbformat
    from jupyter_server.services.contents.filemanager import FileContentsManager

    notebooks = sorted((REPO / "notebooks").glob("*.ipynb"))
    before = {p.name: p.read_bytes() for p in notebooks}
    status = _git_status(REPO / "notebooks")  # "" on a clean checkout; a notebook being edited stays as it is
    lab = tmp_path / "lab"
    copy = subprocess.run(["make", "--no-print-directory", "lab-copies", f"LAB_DIR={lab}"], cwd=REPO,
                          capture_output=True, text=True, check=False, timeout=120)
    assert copy.returncode == 0, copy.stderr
    assert {p.name: p.read_bytes() for p in sorted(lab.glob("*.ipynb"))} == before
    manager = FileContentsManager(root_dir=str(lab))
    for name in before:  # open and save each, as Lab does, with what a started kernel adds to the metadata
        model = manager.get(name, content=True)
        model["content"]["metadata"]["language_info"] = {"name": "python", "version": sys.version.split()[0]}
        model["content"]["metadata"]["kernelspec"]["display_name"] = "Python 3 (ipykernel)"
        manager.save(model, name)
    saved = nbformat.read(lab / notebooks[0].name, as_version=4)
    assert all(cell.get("id") for cell in saved.cells)  # the save rewrote the copy: cell ids
    assert (lab / notebooks[0].name).read_bytes() != before[notebooks[0].name]
    assert {p.name: p.read_bytes() for p in notebooks} == before  # the committed notebooks: not a byte
    assert _git_status(REPO / "notebooks") == status
    again = subprocess.run(["make", "--no-print-directory", "lab-copies", f"LAB_DIR={lab}"], cwd=REPO,
                           capture_output=True, text=True, check=False, timeout=120)
    assert again.returncode == 0 and f"kept {lab / notebooks[0].name}" in again.stdout, again.stdout
    assert nbformat.read(lab / notebooks[0].name, as_version=4).cells[0].get("id")  # the saved copy was kept
    # the default LAB_DIR is ignored by git: copies there never dirty a run's record
    check = subprocess.run(["git", "check-ignore", "-q", "lab/11_adaptive_arm.ipynb"], cwd=REPO, check=False,
                           timeout=60)
    assert check.returncode == 0
