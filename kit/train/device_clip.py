"""The canonical clip factor computed on the device, so that an update never waits for the host.

The host path (kit.train.optim.clip_factor) ends every update with a device-to-host copy, and the
device idles until the next update (docs/performance.md). Here the same formula runs on the device,
the fused AdamW takes the factor as a device tensor, and a non-finite norm skips the step.
The decision to know: the sum's order is the device reduction's, so GPU factors may differ from the
host path's in the last bits; CPU runs keep the host path (EngineConfig.clip_on_device "auto").
Details: the notes below.

Notes: the formula, the skipped step and the cost it removes.

    norm = sqrt(sum of the squared norms, in canonical positions);  factor = min(1, max_norm / (norm + 1e-6))
(1 when max_norm is 0); the fused AdamW takes grad_scale = 1 / factor. The host path's wait cost about 22 ms of a
240 ms update on an H200 (docs/performance.md). A non-finite norm sets `found_inf`, so the fused kernel skips the
step (parameters and moments untouched, as torch's gradient scaler does) and the error is raised when the update's
numbers are read; they are copied to host asynchronously before the step and read only when asked for.
Worker-count independence holds as on the host: after the all-reduce every rank holds the same buffer, each squared
norm in its canonical position, and sums it in the same kernel.
"""

from __future__ import annotations

import math
import time

import torch


class PendingStats:
    """(norm, factor, ce_sum, kl_sum) of one update, still on their way to the host."""

    def __init__(self, host: torch.Tensor, event, start_event, t0: float):
        self._host, self._event, self._start, self._t0 = host, event, start_event, t0
        self._values: tuple[float, float, float, float] | None = None
        self.seconds: float | None = None

    def values(self) -> tuple[float, float, float, float]:
        if self._values is None:
            if self._event is not None:
                self._event.synchronize()
                # device time from the update's start marker to its gradients' end; the optimizer step is
                # queued after the end marker and before the next start marker, so no update counts it
                self.seconds = self._start.elapsed_time(self._event) / 1000.0
            else:
                self.seconds = time.perf_counter() - self._t0
            norm, factor, ce, kl = self._host.tolist()
            if not math.isfinite(norm):
                raise FloatingPointError(f"gradient norm is not finite ({norm}); the update was skipped")
            self._values = (norm, factor, ce, kl)
        return self._values


def clip_on_device(buf: torch.Tensor, n: int, max_norm: float, start_event, t0: float):
    """`buf`: the all-reduced squared norms (n, canonical positions) followed by the two loss sums.
    Returns (factor tensor, found_inf tensor, PendingStats)."""
    norm = buf[:n].sum().sqrt()
    finite = torch.isfinite(norm)
    if max_norm > 0:
        factor = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    else:
        factor = torch.ones((), dtype=buf.dtype, device=buf.device)
    factor = torch.where(finite, factor, torch.ones_like(factor))
    found_inf = (~finite).to(torch.float32)
    stats = torch.stack([norm, factor, buf[n], buf[n + 1]])
    event = None
    if buf.is_cuda:
        host = torch.empty(4, dtype=buf.dtype, pin_memory=True)
        host.copy_(stats, non_blocking=True)
        event = torch.cuda.Event(enable_timing=True)
        event.record()
    else:
        host = stats.clone()
    return factor, found_inf, PendingStats(host, event, start_event, t0)
