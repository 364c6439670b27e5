"""The compiled loss chunk (kit/train/compiled_loss.py, EngineConfig.compiled_loss) against the eager chunked
loss of kit/train/loss.py on CPU: forward value and both gradients within a bound derived from FP32 rounding,
for CE, forward KL and reverse KL at temperatures 1 and 2, with a ragged last chunk; padding rows contribute
exactly zero; and with the switch off the eager loss's bits are the ones main computed before the lever.

The chunk functions run under CPU Inductor when a C++ compiler is present (this machine has gcc); without
one, `COMPILED` is False and the same functions run eager, which still checks the padding and the math but
not Inductor's fusion (the test id says which).

Notation: u = 2^-24, FP32's unit roundoff; gamma(k) = k u / (1 - k u), the classical bound on the relative
error of a k-term sum or dot product (Higham, Accuracy and Stability, 3.1): |fl(sum) - sum| <= gamma(k) sum|terms|.
"""

from __future__ import annotations

import hashlib
import shutil

import pytest
import torch

from kit.distributed.pipeline import EngineConfig
from kit.train import compiled_loss
from kit.train.loss import DistillConfig, cross_entropy_sum, kl_sum

pytestmark = pytest.mark.usefixtures("one_thread")

U = 2.0**-24
N, C, V, STEP = 23, 16, 37, 10  # 23 rows in chunks of 10: the last chunk has 3 rows, padded to 10
COMPILED = shutil.which("g++") is not None or shutil.which("c++") is not None
# sha256 of the eager loss's (value, d/dx, d/dW) bytes for every case of `_eager_digest`, computed by the code
# of main at 24e9ee4 (before the compiled lever existed) under the kit's CPU numeric profile
EAGER_DIGEST_MAIN = "b00dcf917e317061f120d12f398ac16d8c3c31fa3bddbedae10676dd4f497770"
CASES = [("ce", 1.0), ("forward", 1.0), ("forward", 2.0), ("reverse", 1.0), ("reverse", 2.0)]


def gamma(k: int) -> float:
    return k * U / (1 - k * U)


def _inputs():
    gen = torch.Generator().manual_seed(54)
    x = torch.randn(N, C, generator=gen)
    w = torch.randn(V, C, generator=gen) * 0.5
    rx = torch.randn(N, C, generator=gen)
    rw = torch.randn(V, C, generator=gen) * 0.5
    t = torch.randint(0, V, (N,), generator=gen)
    tw = torch.rand(N, generator=gen) + 0.5
    return x, w, rx, rw, t, tw


def _loss(case, T, x, w, rx, rw, t, tw, dtype=None, **kw):
    """(value, d/dx, d/dW) of one loss call through autograd, as the engine takes them."""
    xx, ww = x.clone().requires_grad_(), w.clone().requires_grad_()
    if case == "ce":
        out = cross_entropy_sum(xx, ww, t, tw, chunk_elements=STEP * V, compute_dtype=dtype, **kw)
    else:
        out = kl_sum(xx, ww, rx, rw, tw, DistillConfig(temperature=T, direction=case), chunk_elements=STEP * V,
                     compute_dtype=dtype, **kw)
    out.backward()
    return out.detach(), xx.grad, ww.grad


def test_switch_off_keeps_the_eager_bits_of_main():
    """Default and compiled=False both run the unchanged eager loop: FP32 and bf16 products, every case."""
    h = hashlib.sha256()
    for dtype in (None, torch.bfloat16):
        for case, T in [("ce", 1.0), ("forward", 1.0), ("forward", 2.0), ("reverse", 1.0), ("reverse", 2.0)]:
            for a in _loss(case, T, *_inputs(), dtype=dtype):
                h.update(a.contiguous().numpy().tobytes())
    assert h.hexdigest() == EAGER_DIGEST_MAIN
    x, w, rx, rw, t, tw = _inputs()
    for a, b in zip(_loss("reverse", 2.0, x, w, rx, rw, t, tw), _loss("reverse", 2.0, x, w, rx, rw, t, tw,
                                                                      compiled=False)):
        assert torch.equal(a, b)


def test_the_engine_switch_is_on_for_cuda_only_by_default_and_validated():
    cfg = EngineConfig(2, 1.0)  # "auto" since the one-GPU record (docs/performance.md, "Levers measured")
    assert cfg.compiled_loss == "auto" and cfg.enabled("compiled_loss", torch.device("cuda"))
    assert not cfg.enabled("compiled_loss", torch.device("cpu"))  # the CPU keeps the eager loop and its digests
    assert not EngineConfig(2, 1.0, compiled_loss="off").enabled("compiled_loss", torch.device("cuda"))
    assert EngineConfig(2, 1.0, compiled_loss="auto").enabled("compiled_loss", torch.device("cuda"))
    assert not EngineConfig(2, 1.0, compiled_loss="auto").enabled("compiled_loss", torch.device("cpu"))
    with pytest.raises(ValueError, match="engine compiled_loss 'yes'; expected 'auto', 'on' or 'off'"):
        EngineConfig(2, 1.0, compiled_loss="yes")


def _bounds(case, T, x, w, rx, rw, t, tw):
    """Componentwise error bounds (value, d/dx, d/dW) for the difference of two FP32 evaluations of the loss.

    Each output is at most three chained reductions: a logit (a C-term dot product), a softmax/logsumexp/KL
    row (V terms), and d/dW's sum over rows (n terms), plus a few elementwise roundings (exp, log, sub, div,
    mul: 8 ulps, which also covers Inductor's and ATen's exp/log differing by an ulp or two). With
    L = C + V + n + 8 every evaluation is within gamma(L) * A of the exact value, A the first-order
    magnitude of the computation on absolute values (the running-error bound); two evaluations differ by at
    most twice that. The logits' error (<= gamma(C) Z per row, Z = max |x||W|^T / T) reaches a log-probability
    twice (through z and through lse): an absolute error coefficient a = 2 Z (+ 1 for its own rounding),
    and a probability p = exp(log p) the relative coefficient a. First order: a product p d has magnitude
    p (|d| + a + a_d), without the second-order a a_d."""
    d = torch.float64
    x, w, rx, rw, tw = x.to(d), w.to(d), rx.to(d), rw.to(d), tw.to(d)
    z = x @ w.t() / T
    a_s = 2 * (x.abs() @ w.abs().t() / T).max(dim=1, keepdim=True).values + 1
    p = torch.softmax(z, dim=-1)
    if case == "ce":
        lse = torch.logsumexp(z, dim=-1)
        gmag = tw[:, None] * (p * (1 + a_s) + torch.nn.functional.one_hot(t, V).to(d))
        vmag = (tw * (lse.abs() + z.gather(1, t[:, None]).squeeze(1).abs() + a_s.squeeze(1))).sum()
    else:
        zr = rx @ rw.t() / T
        a_r = 2 * (rx.abs() @ rw.abs().t() / T).max(dim=1, keepdim=True).values + 1
        s, r = torch.log_softmax(z, dim=-1), torch.log_softmax(zr, dim=-1)
        diff = (s - r).abs()  # |log q - log p|, with absolute error coefficient a_s + a_r
        if case == "forward":  # KL = sum p_r (r - s); g = T (q_s - p_r)
            pr = r.exp()
            vmag = T * T * (tw[:, None] * pr * (diff + a_s + 2 * a_r)).sum()
            gmag = T * tw[:, None] * (p * (1 + a_s) + pr * (1 + a_r))
        else:  # KL = sum q_s (s - r); g = T q_s (s - r - KL)
            row = (p * (diff + 2 * a_s + a_r)).sum(-1, keepdim=True)  # a row's KL and its magnitude
            kl = (p * (s - r)).sum(-1, keepdim=True).abs()
            vmag = T * T * (tw[:, None] * row).sum()
            gmag = T * tw[:, None] * p * (diff + kl + 2 * a_s + a_r + row)
    tol = 2 * gamma(C + V + N + 8)
    return tol * vmag, tol * (gmag @ w.abs()), tol * (gmag.t() @ x.abs())


@pytest.mark.parametrize("case,T", CASES, ids=[f"{c}-T{T:g}-{'inductor' if COMPILED else 'eager'}" for c, T in CASES])
def test_compiled_chunk_matches_the_eager_loss_within_fp32_rounding(case, T):
    inputs = _inputs()
    eager = _loss(case, T, *inputs)
    got = _loss(case, T, *inputs, compiled=True) if COMPILED else _uncompiled(case, T, *inputs)
    bounds = _bounds(case, T, *inputs)
    for name, a, b, bound in zip(("value", "d/dx", "d/dW"), got, eager, bounds):
        err = (a.double() - b.double()).abs()
        assert bool((err <= bound).all()), (name, float((err - bound).max()))
        # the bound is not vacuous: below 1% of the values' scale (a wrong or missing term would exceed it)
        assert float(bound.max()) < 1e-2 * float(b.abs().max()), (name, float(bound.max()))


def _uncompiled(case, T, *inputs):
    saved = dict(compiled_loss._COMPILED)
    compiled_loss._COMPILED.update(compiled_loss.CHUNK_FUNCTIONS)  # the same functions, eager
    try:
        return _loss(case, T, *inputs, compiled=True)
    finally:
        compiled_loss._COMPILED.clear()
        compiled_loss._COMPILED.update(saved)


def test_padding_rows_contribute_exactly_zero():
    """A chunk of padding only (x = 0, target 0, weight 0) gives a zero sum, zero gradient rows and adds
    exact zeros to d/dW; a ragged chunk's padding rows of d/dx are exactly zero."""
    x, w, rx, rw, t, tw = _inputs()
    T = torch.full((), 2.0)
    zeros_x, zeros_w, zeros_t = torch.zeros(STEP, C), torch.zeros(STEP), torch.zeros(STEP, dtype=torch.long)
    for kind in ("ce", "kl_forward", "kl_reverse"):
        fn = compiled_loss.chunk_function(kind, compiled=COMPILED)
        dw = w.clone()
        if kind == "ce":
            total, dx = fn(zeros_x, w, zeros_t, zeros_w, dw)
            ragged, dxr = fn(compiled_loss._pad(x[:3], STEP), w, compiled_loss._pad(t[:3], STEP),
                             compiled_loss._pad(tw[:3], STEP), w.clone())
        else:
            total, dx = fn(zeros_x, w, zeros_x, rw, zeros_w, T, dw)
            ragged, dxr = fn(compiled_loss._pad(x[:3], STEP), w, compiled_loss._pad(rx[:3], STEP), rw,
                             compiled_loss._pad(tw[:3], STEP), T, w.clone())
        assert float(total) == 0.0 and not dx.any() and torch.equal(dw, w), kind
        assert not dxr[3:].any() and dxr[:3].abs().sum() > 0 and float(ragged) != 0.0, kind


def test_chunk_rows_are_static():
    """One graph per kind serves every chunk: `step` rows once a batch has that many, else a power of two."""
    assert [compiled_loss.padded_rows(n, 1365) for n in (1, 3, 100, 1365, 8188)] == [1, 4, 128, 1365, 1365]
