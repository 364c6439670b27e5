"""`kit run` on a disk that a notebook fills (issue #64): a real 2 MiB tmpfs (root only, else skipped) holds the
runs folder; the notebook's cell fills it, so papermill cannot write the executed notebook. The run is recorded
`failed` with "the disk is full" (not "invalid JSON"), and no truncated notebook is left without a record. The
same cases without root, with a patched `open`: tests/reliability/test_hostile_use.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.notebooks import write_notebook

FILL = ("import os\n"
        "with open(os.path.join(os.environ['KIT_RUN_DIR'], 'big.bin'), 'wb') as f:\n"
        "    f.write(b'x' * (3 << 20))\n")


@pytest.fixture
def tiny_tmpfs(tmp_path):
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()})")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_notebook_that_fills_the_disk_is_recorded_as_such(tmp_path, tiny_tmpfs):
    nb = write_notebook(tmp_path / "fill.ipynb", FILL, "print('after')")
    runs = tiny_tmpfs / "runs"
    done = subprocess.run([sys.executable, "-m", "kit", "run", str(nb), "--runs-dir", str(runs), "--run-id", "r1",
                           "--no-progress"], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "disk is full" in done.stdout and "invalid JSON" not in done.stdout + done.stderr, done
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    record = json.loads((runs / "r1" / "run.json").read_text())
    assert record["status"] == "failed" and "disk is full" in record["reason"]
    json.loads((runs / "r1" / "fill.ipynb").read_text())  # a whole notebook, not the truncated one
    assert not (runs / "r1" / ".disk-reserve").exists()
