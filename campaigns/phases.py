"""Running a campaign's steps: each a kit command in its own process group, under a deadline.

A campaign (the GPU campaign, the medium pilot) calls the kit's CLI step by step so that what it measures
is what a user's command does; a step that hangs is stopped with its whole group (the launcher and its
workers), and the campaign records the step as timed out and goes on with the steps that do not need it.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class Deadline:
    def __init__(self, seconds: float | None):
        self.end = None if seconds is None else time.monotonic() + seconds

    def left(self) -> float:
        return math.inf if self.end is None else self.end - time.monotonic()


def step_env(device: str) -> dict:
    """The environment of a campaign step's process: this one's, with the repository on PYTHONPATH (the
    step runs `python -m kit ...` from any folder), no progress bars in the logs, and no GPU for a CPU run."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    e["KIT_PROGRESS"] = "0"
    if device == "cpu":
        e["CUDA_VISIBLE_DEVICES"] = ""
    return e


def run_process(argv: list[str], env: dict, timeout: float, log_base: Path) -> dict:
    """Run `argv` in its own process group; on timeout the whole group (the launcher and its workers)
    is stopped. stdout/stderr go to log_base.out/.err."""
    log_base.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(f"{log_base}.out", "wb") as out, open(f"{log_base}.err", "wb") as err:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=err, start_new_session=True)
        timed_out = False
        try:
            proc.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            timed_out = True
            for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
        # workers left behind in the group (the driver died first) are ours to stop
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    stdout = Path(f"{log_base}.out").read_text(errors="replace")
    stderr = Path(f"{log_base}.err").read_text(errors="replace")
    return {"returncode": proc.returncode, "timed_out": timed_out, "seconds": round(time.perf_counter() - t0, 2),
            "stdout": stdout, "stderr_tail": stderr[-4000:]}


def json_lines(text: str) -> list[dict]:
    """The JSON objects a kit command printed one per line, other lines skipped."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    return rows
