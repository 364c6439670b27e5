"""The chunked loss with each chunk's math as one `torch.compile`d function of static shapes (CUDA lever).

kit.train.loss runs a chunk eagerly: the products, then logsumexp/softmax/KL, the gradient w.r.t. the
logits and the two products of the backward, each pass its own kernel (on the H200 profile, the FP32
`sub`/`add_` and the `.float()` copies of `_KLSum` are the 4.3 ms of FP32 adds and 4.4 ms of copies).
Here one compiled function per loss kind does a whole chunk, so Inductor fuses those passes.
The decision to know: every chunk has the same number of rows (the last one padded with zero rows of
token weight 0, whose gradient rows are exactly 0 and whose loss terms are exactly 0), so one graph serves
every chunk of every microbatch; the values equal the eager loop's up to the order of FP32 reductions
(tests/test_compiled_loss.py bounds the difference). Off by default (EngineConfig.compiled_loss); the CPU
evidence never runs it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

_COMPILED: dict[str, Callable[..., Any]] = {}  # loss kind -> its compiled chunk function (one per process)


def _products(g, xc, w):
    """(dx chunk, dw contribution) as kit.train.loss._grads_into computes them: FP32 operands stay FP32,
    else the products run in w's dtype and are widened to FP32."""
    if w.dtype == torch.float32:
        return g @ w, g.t() @ xc.float()
    gc = g.to(w.dtype)
    return (gc @ w).float(), (gc.t() @ xc.to(w.dtype)).float()


def ce_chunk(xc, w, targets, token_w, dw):
    """One chunk of kit.train.loss._CrossEntropySum: returns (sum_i w_i CE_i in FP64, dx rows); adds the
    chunk's d/dW into `dw` in place."""
    logits = (xc.to(w.dtype) @ w.t()).float()
    lse = torch.logsumexp(logits, dim=-1)
    tgt = logits.gather(1, targets[:, None]).squeeze(1)
    total = (token_w * (lse - tgt)).double().sum()
    onehot = torch.arange(logits.shape[1], device=logits.device)[None, :] == targets[:, None]
    g = (torch.softmax(logits, dim=-1) - onehot.float()) * token_w[:, None]  # p - 1 exactly where p[t] -= 1
    dx, dwc = _products(g, xc, w)
    dw.add_(dwc)
    return total, dx


def _kl_chunk(xc, w, rxc, rw, token_w, T, dw, reverse: bool):
    s = torch.log_softmax((xc.to(w.dtype) @ w.t()).float() / T, dim=-1)  # z / 1 == z: T = 1 is exact
    r = torch.log_softmax((rxc.to(rw.dtype) @ rw.t()).float() / T, dim=-1)
    if not reverse:  # KL(ref || student); d/dz_s = T * (q_s - p_r)
        pr = r.exp()
        kl = (pr * (r - s)).sum(-1)
        g = T * (s.exp() - pr)
    else:  # KL(student || ref); d/dz_s = T * q_s * (log q_s - log p_r - KL)
        qs = s.exp()
        diff = s - r
        kl = (qs * diff).sum(-1)
        g = (T * qs) * (diff - kl[:, None])
    total = (token_w * kl).double().sum()  # the caller multiplies by T^2, as the eager loop does
    dx, dwc = _products(g * token_w[:, None], xc, w)
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


def run_chunks(kind: str, x, w, dx, dw, token_w, step: int, *, targets=None, ref_x=None, ref_w=None, T=None,
               compiled: bool = True) -> torch.Tensor:
    """Every chunk of `step` rows through the chunk function; fills dx, adds into dw, returns the FP64 sum.
    Padding rows have x = 0 (and the reference's x = 0), target 0 and token weight 0: their loss terms and
    gradient rows are 0 * (finite) = 0 exactly, and they add only zeros to dw's products."""
    fn = chunk_function(kind, compiled)
    n = x.shape[0]
    rows = padded_rows(n, step)
    total = torch.zeros((), dtype=torch.float64, device=x.device)
    for a in range(0, n, rows):
        b = min(n, a + rows)
        xc, tw = _pad(x[a:b], rows), _pad(token_w[a:b], rows)
        if kind == "ce":
            part, dxc = fn(xc, w, _pad(targets[a:b], rows), tw, dw)
        else:
            part, dxc = fn(xc, w, _pad(ref_x[a:b], rows), ref_w, tw, T, dw)
        total += part
        dx[a:b] = dxc[: b - a]
    return total
