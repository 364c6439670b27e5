"""The storage half of a background commit: the state staged to host memory, and jobs on threads.

As torch.distributed.checkpoint's `async_save` does, the state is copied to (pinned) host memory on
the training thread and its objects are hashed, written and fsynced from a background thread; rank
0's `write_commit` runs on one as well. The decision to know: nothing here runs a collective or knows
a session; the engine's commit protocol (kit.engine.commit) decides what is written and when, and
HEAD moves only inside `write_commit`, so a crash during a background write leaves HEAD on the
previous commit. Threads and stages: the notes in kit/engine/commit.py; format: docs/formats/checkpoint-store.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from kit.store.objects import ObjectStore

WriteObjects = Callable[[ObjectStore, dict], list]  # (store, host states) -> learned-state entries


class Background:
    """One job on its own daemon thread; `result()` re-raises the job's exception on the caller's thread."""

    def __init__(self, fn: Callable[[], Any], name: str):
        self._value: Any = None
        self._error: BaseException | None = None
        self.started = time.perf_counter()
        self.finished: float | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), name=name, daemon=True)
        self._thread.start()

    def _run(self, fn) -> None:
        try:
            self._value = fn()
        except BaseException as e:  # noqa: BLE001 -- carried to the training thread by result()
            self._error = e
        finally:
            self.finished = time.perf_counter()

    def wait(self) -> None:
        self._thread.join()

    def done(self) -> bool:
        return not self._thread.is_alive()

    def seconds(self) -> float:
        """How long the job ran (waits for it to end)."""
        self._thread.join()
        assert self.finished is not None, "_run sets it before its thread ends"
        return self.finished - self.started

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def finished_job(value: Any = None) -> Background:
    """A job with nothing to do (a rank that does not install), so that every rank polls a job."""
    return Background(lambda: value, "kit-commit-noop")


class HostSnapshot:
    """Host copies of each parameter's FP32 tensors, reused from one commit to the next (pinned when the
    state lives on CUDA: pinned pages are slow to allocate and fast to copy into)."""

    def __init__(self):
        self._buffers: dict[tuple[str, str], torch.Tensor] = {}
        self.bytes = 0

    def take(self, states: dict[str, dict]) -> dict[str, dict]:
        out: dict[str, dict] = {}
        cuda = None
        total = 0
        for name in sorted(states):
            snap = {}
            for key, value in states[name].items():
                if not torch.is_tensor(value):
                    snap[key] = value
                    continue
                src = value.detach()
                buf = self._buffers.get((name, key))
                if buf is None or buf.shape != src.shape or buf.dtype != src.dtype:
                    pin = src.device.type == "cuda"
                    buf = torch.empty(src.shape, dtype=src.dtype, device="cpu", pin_memory=pin)
                    self._buffers[(name, key)] = buf
                if src.device.type == "cuda":
                    cuda = src.device
                    buf.copy_(src, non_blocking=True)
                else:
                    buf.copy_(src)
                total += buf.numel() * buf.element_size()
                snap[key] = buf
            out[name] = snap
        if cuda is not None:
            torch.cuda.current_stream(cuda).synchronize()  # the copies are complete before training resumes
        self.bytes = total
        return out
