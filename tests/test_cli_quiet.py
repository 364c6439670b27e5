"""`kit run` keeps kernel and library noise off the terminal: it goes to RUN_DIR/kernel.log."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
NOISY = (
    "import os, subprocess, sys, warnings\n"
    "warnings.warn('a library UserWarning')\n"  # a cell's warning: into the executed notebook
    "subprocess.run([sys.executable, '-c', \"import sys; sys.stderr.write('CHILD-STDERR-NOISE\\\\n')\"])\n"
    "print('cell output')\n"
)


def test_kit_run_prints_no_kernel_warnings(tmp_path):
    pytest.importorskip("papermill")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells.append(nbformat.v4.new_code_cell(NOISY))
    path = tmp_path / "noisy.ipynb"
    nbformat.write(nb, path)
    runs = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "kit", "run", str(path), "--run-id", "noisy", "--runs-dir", str(runs)],
                          check=False, capture_output=True, text=True, env=env, timeout=110)
    assert proc.returncode == 0, proc.stderr
    # nothing but the cell bar (its frames name the run and the cell): no "Kernel is running over TCP without
    # encryption", no child noise
    frames = [f for f in proc.stderr.replace("\r", "\n").splitlines() if f.strip()]
    assert frames and all(f.startswith(("noisy", "Executing noisy cell 0")) for f in frames), proc.stderr
    assert proc.stdout.strip() == f"{runs / 'noisy' / 'run.json'}: completed"
    log = (runs / "noisy" / "kernel.log").read_text()
    assert "CHILD-STDERR-NOISE" in log  # a worker process's stderr, inherited from the kernel
    executed = (runs / "noisy" / "noisy.ipynb").read_text()
    assert "a library UserWarning" in executed and "cell output" in executed
