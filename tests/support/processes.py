"""Real processes for the crash and signal tests: a `kit` command in a process of its own, paused at a
chosen training step through the launcher's fault hook (KIT_FAULT_PAUSE=STEP:FIFO, kit/distributed/launch.py),
and waits on processes and FIFOs with timeouts, never with sleeps."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import threading
from pathlib import Path

from support.models import REPO

WAIT_S = 240  # generous: the tests share two loaded cores with other work


def kit_process(args: list[str], tmp: Path, pause: str | None = None, **popen) -> tuple[subprocess.Popen, Path]:
    """Start `python -m kit ARGS`; with `pause` ("6", "done"), rank 0 blocks there until `released`.
    Returns the process and its FIFO (stderr is piped; the caller reads it with `finish`)."""
    fifo = tmp / f"pause-{len(list(tmp.glob('pause-*')))}"
    os.mkfifo(fifo)
    env = {**os.environ, "PYTHONPATH": str(REPO), "KIT_PROGRESS": "0"}
    if pause is not None:
        env["KIT_FAULT_PAUSE"] = f"{pause}:{fifo}"
    proc = subprocess.Popen([sys.executable, "-m", "kit", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, **popen)
    return proc, fifo


def wait_paused(fifo: Path, proc: subprocess.Popen):
    """Block until rank 0 is paused (it opened the FIFO for reading); returns the writer end, whose closing
    releases it. Fails when the process ends first or nothing arrives within WAIT_S."""
    box = {}
    opener = threading.Thread(target=lambda: box.setdefault("w", open(fifo, "wb")), daemon=True)  # noqa: SIM115
    opener.start()
    opener.join(WAIT_S)
    if "w" not in box:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"rank 0 never paused (exit {proc.returncode}): {err.decode()[-2000:]}")
    return box["w"]


def finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=WAIT_S)
    return proc.returncode, out.decode(), err.decode()


def children(pid: int) -> list[int]:
    """The direct children of `pid` (Linux /proc)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def wait_gone(pids: list[int], timeout: float = 60) -> list[int]:
    """Wait (pidfd, no polling loop of sleeps) until every pid has exited; returns those still alive."""
    alive = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            if not select.select([fd], [], [], timeout)[0]:
                alive.append(pid)
        finally:
            os.close(fd)
    return alive


def one_line_error(err: str) -> str:
    """The command's last stderr line, after asserting it printed no traceback."""
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines, "no message on stderr"
    return lines[-1]
