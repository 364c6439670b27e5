"""The chunked loss's one chunk loop and its chunk math: eager (the default, the CPU evidence) or each chunk's
math as one `torch.compile`d function of static shapes (CUDA lever, EngineConfig.compiled_loss).

Eager, each pass of a chunk (products, logsumexp/softmax/KL, the gradient w.r.t. the logits, the two
products of the backward) is its own kernel (on the H200 profile, the FP32 `sub`/`add_` and `.float()`
copies of the KL chunk are 4.3 ms of adds and 4.4 ms of copies); compiled, Inductor fuses them.
The decision to know: compiled, every chunk has the same number of rows (the last one padded with zero
rows of token weight 0, whose gradient rows and loss terms are exactly 0), so one graph serves every
chunk; the values equal the eager loop's up to the order of FP32 reductions. Eager, the same functions
give the bits of the eager loop before the lever (T = 1 skips its divide and multiply; each chunk's KL
sum is scaled by T^2 before it is added): tests/test_compiled_loss.py bounds the one and pins the other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

_COMPILED: dict[str, Callable[..., Any]] = {}  # loss kind -> its compiled chunk function (one per process)


def _products(g, xl, w):
    """(dx chunk, dw contribution): FP32 operands stay FP32, else the products run in w's (compute) dtype
    and are widened to FP32. `xl` is the chunk's input already in w's dtype."""
    if w.dtype == torch.float32:
        return g @ w, g.t() @ xl
    gc = g.to(w.dtype)
    return (gc @ w).float(), (gc.t() @ xl).float()


def _scaled(z: torch.Tensor, T) -> torch.Tensor:
    """z / T; eager at T = 1.0 (a Python float) z itself, exactly, without a pass over chunk x vocab."""
    return z if isinstance(T, float) and T == 1.0 else z / T


def _times(T, z: torch.Tensor) -> torch.Tensor:
    return z if isinstance(T, float) and T == 1.0 else T * z  # likewise exact


def ce_chunk(xc, w, targets, token_w, dw):
    """One chunk of sum_i w_i * CE(x_i W^T, y_i): returns (the sum in FP64, dx rows); adds the chunk's d/dW
    into `dw` in place."""
    xl = xc.to(w.dtype)
    logits = (xl @ w.t()).float()  # (n, V)
    lse = torch.logsumexp(logits, dim=-1)
    tgt = logits.gather(1, targets[:, None]).squeeze(1)
    total = (token_w * (lse - tgt)).double().sum()
    g = torch.softmax(logits, dim=-1)  # d CE / d logits = softmax - onehot
    del logits
    g[torch.arange(g.shape[0], device=g.device), targets] -= 1.0
    g *= token_w[:, None]
    dx, dwc = _products(g, xl, w)
    dw.add_(dwc)
    return total, dx


def _kl_chunk(xc, w, rxc, rw, token_w, T, dw, reverse: bool):
    xl = xc.to(w.dtype)
    s = torch.log_softmax(_scaled((xl @ w.t()).float(), T), dim=-1)  # student log-probs
    r = torch.log_softmax(_scaled((rxc.to(rw.dtype) @ rw.t()).float(), T), dim=-1)  # reference
    if not reverse:  # KL(ref || student); d/dz_s = T * (q_s - p_r)
        pr = r.exp()
        kl = (pr * (r - s)).sum(-1)
        g = _times(T, s.exp() - pr)
    else:  # KL(student || ref); d/dz_s = T * q_s * (log q_s - log p_r - KL)
        qs = s.exp()
        diff = s - r
        kl = (qs * diff).sum(-1)
        g = _times(T, qs) * (diff - kl[:, None])
    total = (token_w * kl).double().sum()  # the loop multiplies by T^2
    del s, r
    g *= token_w[:, None]
    dx, dwc = _products(g, xl, w)
    dw.add_(dwc)
    return total, dx


def kl_forward_chunk(xc, w, rxc, rw, token_w, T, dw):
    return _kl_chunk(xc, w, rxc, rw, token_w, T, dw, reverse=False)


def kl_reverse_chunk(xc, w, rxc, rw, token_w, T, dw):
    return _kl_chunk(xc, w, rxc, rw, token_w, T, dw, reverse=True)


CHUNK_FUNCTIONS: dict[str, Callable[..., Any]] = {"ce": ce_chunk, "kl_forward": kl_forward_chunk, "kl_reverse": kl_reverse_chunk}


def chunk_function(kind: str, compiled: bool = True):
    """The chunk function of `kind` ("ce", "kl_forward", "kl_reverse"), compiled once per process with
    static shapes (`compiled=False`: the same function eager, for tests without a compiler)."""
    if not compiled:
        return CHUNK_FUNCTIONS[kind]
    if kind not in _COMPILED:
        _COMPILED[kind] = torch.compile(CHUNK_FUNCTIONS[kind], dynamic=False, fullgraph=True)
    return _COMPILED[kind]


def padded_rows(n: int, step: int) -> int:
    """Rows of every chunk: `step` when there are at least that many, else the next power of two above n
    (a few graphs for small batches instead of padding 100 rows to thousands)."""
    if n >= step:
        return step
    return min(step, 1 << max(0, (n - 1).bit_length()))


def _pad(t: torch.Tensor, rows: int) -> torch.Tensor:
    if t.shape[0] == rows:
        return t
    pad = torch.zeros((rows - t.shape[0], *t.shape[1:]), dtype=t.dtype, device=t.device)
    return torch.cat([t, pad])


def run_chunks(kind: str, x, w, dx, dw, token_w, step: int, *, targets=None, ref_x=None, ref_w=None,
               T: float = 1.0, compiled: bool = False) -> torch.Tensor:
    """Every chunk of at most `step` rows through the chunk function of `kind` ("ce", "kl_forward",
    "kl_reverse"); fills dx, adds into dw, returns the FP64 sum (a KL chunk's scaled by T^2). Compiled,
    every chunk has `padded_rows` rows: padding rows have x = 0 (and the reference's x = 0), target 0 and
    token weight 0, so their loss terms and gradient rows are 0 * (finite) = 0 exactly, and they add only
    zeros to dw's products; T goes in as a tensor (a fill: no host-to-device copy, one graph whatever T)."""
    fn = chunk_function(kind, compiled)
    n = x.shape[0]
    rows = padded_rows(n, step) if compiled else step

    def fit(t: torch.Tensor) -> torch.Tensor:
        return _pad(t, rows) if compiled else t

    t = torch.full((), T, dtype=torch.float32, device=x.device) if compiled else T
    total = torch.zeros((), dtype=torch.float64, device=x.device)
    for a in range(0, n, rows):
        b = min(n, a + rows)
        xc, tw = fit(x[a:b]), fit(token_w[a:b])
        if kind == "ce":
            part, dxc = fn(xc, w, fit(targets[a:b]), tw, dw)
        else:
            part, dxc = fn(xc, w, fit(ref_x[a:b]), ref_w, tw, t, dw)
            part = part * (T * T)  # per chunk, as the eager loop always did (T = 1: exact)
        total += part
        dx[a:b] = dxc[: b - a]
    return total
