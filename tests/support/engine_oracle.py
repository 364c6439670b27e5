"""The independent oracle for the engine tests: the kit's full model in one process, plain autograd,
losses written with torch.nn.functional, torch's own clipping and torch.optim.AdamW."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kit.model.config import load_config
from kit.model.llama import LlamaCausalLM
from kit.model.shard import load_owned


def oracle_loss(model, ref, records, kl_weight=1.0, temperature=1.0):
    """(objective, ce_sum, kl_sum) over records, normalised by the global target count."""
    n_targets = sum(sum(r["target_mask"][1:]) for r in records)
    ce_sum = torch.zeros((), dtype=torch.float32)
    kl_sum = torch.zeros((), dtype=torch.float32)
    for r in records:
        ids = torch.tensor(r["input_ids"])[None]
        pos = torch.tensor([t for t in range(1, len(r["input_ids"])) if r["target_mask"][t]])
        if len(pos) == 0:
            continue
        logits = model(ids)[0, pos - 1]
        w = float(r.get("weight", 1.0))
        if r.get("replay"):
            with torch.no_grad():
                ref_logits = ref(ids)[0, pos - 1]
            kl = F.kl_div(F.log_softmax(logits / temperature, -1), F.log_softmax(ref_logits / temperature, -1),
                          log_target=True, reduction="none").sum(-1) * temperature**2
            kl_sum = kl_sum + w * kl.sum()
        else:
            ce_sum = ce_sum + w * F.cross_entropy(logits, ids[0, pos], reduction="sum")
    return (ce_sum + kl_weight * kl_sum) / n_targets, ce_sum, kl_sum


def run_oracle(seed_dir, ref_dir, batches, lr, betas, eps, weight_decay, max_norm, kl_weight=1.0):
    shape = load_config(seed_dir)
    model = LlamaCausalLM(shape)
    load_owned(model, seed_dir)
    ref = LlamaCausalLM(shape)
    load_owned(ref, ref_dir)
    ref.requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                            foreach=False)
    names = {p: n for n, p in model.named_parameters()}
    history = []
    for records in batches:
        opt.zero_grad()
        loss, ce, kl = oracle_loss(model, ref, records, kl_weight)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        opt.step()
        history.append({"objective": loss.item(), "ce_sum": ce.item(), "kl_sum": kl.item(),
                        "grad_norm": norm.item(), "grads": grads})
    state = {}
    for p, st in opt.state.items():
        n = names[p]
        state[n] = {"param": p.detach().clone(), "exp_avg": st["exp_avg"], "exp_avg_sq": st["exp_avg_sq"],
                    "age": int(st["step"])}
    return history, state


# --- float64 oracle with a derived float32 error bound ----------------------------------------------
# The argument (written once here, used by tests/test_engine.py):
#
# The engine computes in float32 (unit roundoff u = 2**-24); this oracle computes the same update in
# float64, whose own error (u64 = 2**-53) is negligible against u, so |engine - oracle| is the engine's
# float32 rounding error. Standard forward error analysis (Higham, "Accuracy and Stability of Numerical
# Algorithms", 2nd ed., sec. 3.1 and 4.2): a sum or inner product of n terms computed in floating point
# in any order satisfies |fl(sum x_i) - sum x_i| <= gamma_n * sum |x_i|, gamma_n = n*u / (1 - n*u).
# Every quantity compared is, to first order in u, a sum whose terms come out of chains of such sums,
# so its error is at most gamma_n * (the sum of the magnitudes of its terms), with n the length of the
# longest accumulation chain from the weights to the quantity:
#   forward per block   2H (RMSNorm's sum of squares, then a projection) + T (attention over <= T
#                       positions) + I (the down projection), for L blocks;
#   head and loss       H (final norm) + H (head) + V (log-sum-exp over the vocabulary);
#   backward            the same chain again, in reverse;
#   over tokens         + N (the sum over the N target tokens of the update).
# The magnitudes are measured here in float64: for a loss sum, sum_t w_t * (|z_t|max + log V) (the
# terms that log-softmax subtracts are bounded by the largest logit and log V; for KL both the student's
# and the reference's); for a gradient element, A = sum_t |d(w_t l_t / N)/d theta| from one backward
# per target token. AdamW then propagates an error dg in the gradient to the state, to first order:
#   dm = b1 dm + (1 - b1) dg,  dv = b2 dv + (1 - b2) (2 |g| dg + dg^2),
#   dtheta = (1 - lr wd) dtheta + lr (dm^ / (sqrt v^ + eps) + |m^| d(sqrt v^) / (sqrt v^ + eps)^2),
#   d(sqrt v^) <= min(dv^ / (2 sqrt v^), sqrt dv^),
# plus a few roundings of each stored value (4 u |x|). First order means that the amplification of an
# early rounding by later layers is taken as at most 1 (RMSNorm rescales each block's input; the
# residual stream carries the rest); that is the assumption of this bound, and why it is not tight.
U32 = 2.0**-24


def gamma(n: int) -> float:
    assert n * U32 < 0.5, n
    return n * U32 / (1 - n * U32)


def chain_length(shape, records, backward: bool) -> int:
    """n of the argument above: the forward chain, doubled when the quantity is a gradient."""
    H, I, V, L = shape.hidden_size, shape.intermediate_size, shape.vocab_size, shape.num_hidden_layers
    T = max(len(r["input_ids"]) for r in records)
    N = sum(sum(r["target_mask"][1:]) for r in records)
    forward = L * (2 * H + T + I) + 2 * H + V
    return (2 if backward else 1) * forward + N


def run_oracle64(seed_dir, ref_dir, batches, lr, betas, eps, weight_decay, max_norm, kl_weight=1.0):
    """The update of run_oracle in float64, with elementwise float32 error bounds (argument above).

    Returns history [{objective, ce_sum, kl_sum, grad_norm, grads, bounds: {objective, ce_sum,
    kl_sum, grad_norm, grads}}] and state {name: {param, exp_avg, exp_avg_sq, age, bounds: {...}}}."""
    import math

    shape = load_config(seed_dir)
    model = LlamaCausalLM(shape)
    load_owned(model, seed_dir)
    model.double()
    ref = LlamaCausalLM(shape)
    load_owned(ref, ref_dir)
    ref.double().requires_grad_(False)
    named = dict(model.named_parameters())
    opt = torch.optim.AdamW(named.values(), lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=False)
    b1, b2 = betas
    err = {n: {"param": 4 * U32 * p.detach().abs(), "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
           for n, p in named.items()}
    logV = math.log(shape.vocab_size)
    history = []
    for step, records in enumerate(batches, start=1):
        g_loss, g_n = gamma(chain_length(shape, records, False)), gamma(chain_length(shape, records, True))
        N = sum(sum(r["target_mask"][1:]) for r in records)
        grads = {n: torch.zeros_like(p) for n, p in named.items()}
        mags = {n: torch.zeros_like(p) for n, p in named.items()}
        ce_sum = kl_sum = 0.0
        m_ce = m_kl = 0.0
        per_record = {"ce_sum": [], "kl_sum": []}  # each record's weighted contribution
        for r in records:
            ids = torch.tensor(r["input_ids"])[None]
            pos = [t for t in range(1, len(r["input_ids"])) if r["target_mask"][t]]
            w = float(r.get("weight", 1.0))
            if not pos:
                continue
            logits = model(ids)[0]
            ref_logits = ref(ids)[0] if r.get("replay") else None
            before = kl_sum if ref_logits is not None else ce_sum
            for t in pos:
                z = logits[t - 1]
                if ref_logits is not None:
                    zr = ref_logits[t - 1]
                    lp, lq = F.log_softmax(z, -1), F.log_softmax(zr, -1)
                    term = (lq.exp() * (lq - lp)).sum()  # KL(reference || student), as oracle_loss
                    kl_sum += w * term.item()
                    m_kl += w * (z.abs().max().item() + zr.abs().max().item() + 2 * logV)
                    loss_t = kl_weight * w * term / N
                else:
                    term = F.cross_entropy(z[None], ids[0, t][None], reduction="sum")
                    ce_sum += w * term.item()
                    m_ce += w * (z.abs().max().item() + logV)
                    loss_t = w * term / N
                contrib = torch.autograd.grad(loss_t, list(named.values()), retain_graph=True, allow_unused=True)
                for n, c in zip(named, contrib):
                    if c is not None:
                        grads[n] += c
                        mags[n] += c.abs()
            if ref_logits is not None:
                per_record["kl_sum"].append(kl_sum - before)
            else:
                per_record["ce_sum"].append(ce_sum - before)
        norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
        grad_bounds = {n: g_n * a for n, a in mags.items()}
        d_norm = math.sqrt(sum(float((b * b).sum()) for b in grad_bounds.values())) + gamma(
            sum(p.numel() for p in named.values())) * norm
        factor = min(1.0, max_norm / (norm + 1e-6))
        d_factor = factor * (d_norm / norm + U32) if factor < 1.0 else 0.0
        history.append({"objective": (ce_sum + kl_weight * kl_sum) / N, "ce_sum": ce_sum, "kl_sum": kl_sum,
                        "grad_norm": norm, "grads": {n: g.clone() for n, g in grads.items()},
                        "per_record": per_record,
                        "bounds": {"ce_sum": g_loss * m_ce, "kl_sum": g_loss * m_kl,
                                   "objective": g_loss * (m_ce + kl_weight * m_kl) / N, "grad_norm": d_norm,
                                   "grads": grad_bounds}})
        opt.zero_grad()
        for n, p in named.items():
            p.grad = grads[n] * factor
        theta_before = {n: p.detach().clone() for n, p in named.items()}
        opt.step()
        for n, p in named.items():
            st = opt.state[p]
            g, dg = p.grad, factor * grad_bounds[n] + grads[n].abs() * d_factor + U32 * p.grad.abs()
            e = err[n]
            e["exp_avg"] = b1 * e["exp_avg"] + (1 - b1) * dg + 4 * U32 * st["exp_avg"].abs()
            e["exp_avg_sq"] = b2 * e["exp_avg_sq"] + (1 - b2) * (2 * g.abs() * dg + dg * dg) \
                + 4 * U32 * st["exp_avg_sq"].abs()
            c1, c2 = 1 - b1**step, 1 - b2**step
            v_hat, dv_hat = st["exp_avg_sq"] / c2, e["exp_avg_sq"] / c2
            root = v_hat.sqrt()
            d_root = torch.minimum(dv_hat.sqrt(), torch.where(root > 0, dv_hat / (2 * root), dv_hat.sqrt()))
            step_err = e["exp_avg"] / c1 / (root + eps) + (st["exp_avg"] / c1).abs() * d_root / (root + eps) ** 2
            e["param"] = (1 - lr * weight_decay) * e["param"] + lr * step_err + 4 * U32 * (
                p.detach().abs() + theta_before[n].abs())
    state = {}
    for n, p in named.items():
        st = opt.state[p]
        state[n] = {"param": p.detach().clone(), "exp_avg": st["exp_avg"].clone(),
                    "exp_avg_sq": st["exp_avg_sq"].clone(), "age": int(st["step"]), "bounds": err[n]}
    return history, state
