"""PowerSGD against PyTorch's own hook, before and after issue 49's orthonormalisation, in one process run.

    PYTHONPATH=. python3 bench/powersgd_oracle.py                       # CPU: the before/after table
    PYTHONPATH=. python3 bench/powersgd_oracle.py --cuda --out $OUT     # GPU host: also writes a record

"before" is the Gram-Schmidt that `kit/train/powersgd.py` used until issue 49 (two projections, divide
by norm + 1e-8, re-draw Q columns whose norm fell under 0.5), kept here as a reference copy and patched
into the compressor for the "before" rows; "after" is the module as it is. The table:
  1. orthogonality error max|Q^T Q - I| over live columns: a rank-10 512x32 matrix, and 512x32
     matrices of condition number 1e4, 1e6, 1e8 (torch.linalg.qr beside them);
  2. one process, after the dense warm-up: an exactly rank-10 512x256 gradient from one rank-32 step,
     relative error, for every power of ten from 1e-8 to 1e4 (the scale sweep);
  3. two gloo processes: the kit's PowerSGDSumReducer against torch's `powerSGD_hook` through DDP
     (rank 32, 2 warm-up steps, error feedback, warm start, Q aligned with `set_q`) on full-rank,
     rank-3, rank-3 x 1e-8 and condition-1e8 gradients: warm-up bitwise, the first compressed step's
     relative gap from torch's, bytes per rank, and where the error buffers live.
With --cuda (two processes on one GPU over gloo, error buffers pinned on the CPU) it adds the
orthonormalisation time at the SmolLM2-1.7B P and Q batch shapes against torch.linalg.qr, and with
--out it writes OUT/RUN_ID/run.json (kit-bench/1) and the raw rows beside it.
tests/test_powersgd_oracle.py runs part 3 ("after" only) and the properties of parts 1 and 2 in CI.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import kit.train.powersgd as psgd

RANK, WARMUP, SHAPE = 32, 2, (512, 256)
CASES = ("full", "rank3", "rank3_1e-8", "cond1e8")
SCALES = tuple(10.0**e for e in range(-8, 5))
# SmolLM2-1.7B (hidden 2048, MLP 8192, 24 layers, vocab 49152, tied embedding): the P and Q batches the
# kit orthonormalises at rank 32 (matrices of one shape are batched). attention 96 x (2048, 2048),
# gate/up 48 x (8192, 2048), down 24 x (2048, 8192), embedding 1 x (49152, 2048).
SMOLLM2_1_7B_BATCHES = {"P": [(120, 2048), (48, 8192), (1, 49152)], "Q": [(145, 2048), (24, 8192)]}


# -- the code before issue 49, as it was -------------------------------------------------------------

def gram_schmidt_reference_(matrices: torch.Tensor, epsilon: float = 1e-8) -> torch.Tensor:
    """The pre-#49 `orthogonalize_`: per column, two projections off the earlier ones, then / (norm + eps)."""
    for i in range(matrices.shape[2]):
        col = matrices[:, :, i : i + 1]
        if i > 0:
            done = matrices[:, :, :i]
            for _ in range(2):
                col -= done @ (done.transpose(1, 2) @ col)
        col /= torch.linalg.vector_norm(col, dim=1, keepdim=True) + epsilon
    return matrices


def _gram_schmidt_masked_(matrices: torch.Tensor) -> torch.Tensor:
    """The reference with the old dead test (a column of norm under 0.5 afterwards) as the mask."""
    gram_schmidt_reference_(matrices)
    return torch.linalg.vector_norm(matrices, dim=1) < 0.5


def _gram_schmidt_all_(mats):
    return [_gram_schmidt_masked_(m.unsqueeze(0))[0] for m in mats]


@contextlib.contextmanager
def algorithm(name: str):
    """Run the compressor with "after" (the module as it is) or "before" (the Gram-Schmidt patched in)."""
    if name == "after":
        yield
        return
    saved = psgd.orthonormalize_, psgd._orthonormalize_all_
    psgd.orthonormalize_, psgd._orthonormalize_all_ = _gram_schmidt_masked_, _gram_schmidt_all_
    try:
        yield
    finally:
        psgd.orthonormalize_, psgd._orthonormalize_all_ = saved


# -- inputs ---------------------------------------------------------------------------------------------

def _gen(*key) -> torch.Generator:
    return torch.Generator().manual_seed(int(hashlib.sha256(repr(key).encode()).hexdigest()[:15], 16))


def low_rank(n: int, m: int, k: int, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(n, k, generator=gen) @ torch.randn(k, m, generator=gen)


def conditioned(n: int, m: int, cond: float, gen: torch.Generator) -> torch.Tensor:
    """Singular values log-spaced from 1 to 1/cond, random singular vectors (float64 QR: input data only)."""
    k = min(n, m)
    u = torch.linalg.qr(torch.randn(n, k, generator=gen, dtype=torch.float64))[0]
    v = torch.linalg.qr(torch.randn(m, k, generator=gen, dtype=torch.float64))[0]
    s = torch.logspace(0, -math.log10(cond), k, dtype=torch.float64)
    return ((u * s) @ v.T).float()


def case_gradient(case: str, rank: int, step: int) -> torch.Tensor:
    gen = _gen("powersgd-oracle", case, rank, step)
    n, m = SHAPE
    if case == "full":
        return torch.randn(n, m, generator=gen)
    if case == "rank3":
        return low_rank(n, m, 3, gen)
    if case == "rank3_1e-8":
        return low_rank(n, m, 3, gen) * 1e-8
    if case == "cond1e8":
        return conditioned(n, m, 1e8, gen)
    raise ValueError(case)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return (torch.linalg.norm(a - b) / torch.linalg.norm(b)).item()


# -- parts 1 and 2: one process ---------------------------------------------------------------------

def orthogonality_error(q: torch.Tensor, dead: torch.Tensor | None = None) -> float:
    live = q if dead is None else q[:, ~dead]
    return (live.T.double() @ live.double() - torch.eye(live.shape[1], dtype=torch.float64)).abs().max().item()


def orthogonality_rows() -> list[dict]:
    gen = _gen("orthogonality")
    inputs = {"rank10": low_rank(512, 32, 10, gen) @ torch.randn(32, 32, generator=gen)}
    inputs.update({f"cond{c:.0e}": conditioned(512, 32, c, gen) for c in (1e4, 1e6, 1e8)})
    rows = []
    for name, a in inputs.items():
        before = _gram_schmidt_masked_(q_b := a.clone().unsqueeze(0))[0]
        after = psgd.orthonormalize_(q_a := a.clone().unsqueeze(0))[0]
        rows.append({"matrix": name, "before": orthogonality_error(q_b[0]),
                     "before_dead": int(before.sum()), "after": orthogonality_error(q_a[0], after),
                     "after_dead": int(after.sum()), "torch_qr": orthogonality_error(torch.linalg.qr(a)[0])})
    return rows


def one_step_error(g: torch.Tensor, name: str = "after") -> tuple[torch.Tensor, dict]:
    """The gradient sent back by one rank-32 compressed step after one dense warm-up step (world of one)."""
    config = psgd.PowerSGDConfig(rank=RANK, warmup_updates=1, min_compression_numel=0)
    with algorithm(name):
        comp = psgd.PowerSGDCompressor(config, {"w": tuple(g.shape)})
        comp.reduce({"w": g}, lambda tensors: None)
        out = comp.reduce({"w": g}, lambda tensors: None)["w"]
    return out, comp.stats().get("columns") or {}


def scale_rows() -> list[dict]:
    g = low_rank(*SHAPE, 10, _gen("scale-sweep"))
    rows = []
    for s in SCALES:
        row = {"scale": s}
        for name in ("before", "after"):
            out, cols = one_step_error(g * s, name)
            row[name] = _rel(out, g * s)
            row[f"{name}_p_dead"] = cols.get("p_dead")
        rows.append(row)
    return rows


# -- part 3: two processes, the kit's reducer against torch's hook through DDP --------------------------

class _Linear(torch.nn.Module):
    """loss = <w, G> + <b, g>: backward leaves exactly the gradient this test chose in each parameter."""

    def __init__(self, device):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(SHAPE, device=device))
        self.b = torch.nn.Parameter(torch.zeros(SHAPE[0], device=device))

    def forward(self, gw, gb):
        return (self.w * gw).sum() + (self.b * gb).sum()


def _case_grads(case: str, rank: int, steps: int, device) -> list[dict]:
    out = []
    for step in range(steps):
        gb = torch.randn(SHAPE[0], generator=_gen("bias", case, rank, step))
        out.append({"w": case_gradient(case, rank, step).to(device), "b": gb.to(device)})
    return out


def _torch_hook_steps(case: str, rank: int, world: int, device, steps: int) -> tuple[list, int]:
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps

    torch.manual_seed(0)
    model = _Linear(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    state = ps.PowerSGDState(process_group=None, matrix_approximation_rank=RANK, start_powerSGD_iter=WARMUP,
                             min_compression_rate=1.0, use_error_feedback=True, warm_start=True, random_seed=0)
    ddp.register_comm_hook(state, ps.powerSGD_hook)
    outs, numel_after = [], 0
    for step, g in enumerate(_case_grads(case, rank, steps, device)):
        ddp.zero_grad()
        before = state.total_numel_after_compression
        ddp(g["w"], g["b"]).backward()
        outs.append({n: p.grad.detach().clone() for n, p in model.named_parameters()})
        if step == WARMUP:
            numel_after = state.total_numel_after_compression - before
    return outs, numel_after * 4


def _kit_steps(case: str, rank: int, world: int, device, steps: int, name: str) -> tuple[list, dict]:
    from kit.distributed.grad_reduce import PowerSGDSumReducer

    config = psgd.PowerSGDConfig(rank=RANK, warmup_updates=WARMUP, min_compression_rate=1.0, warm_start=True,
                                 seed=0, error_feedback_device="cpu", pin_memory=device.type == "cuda")
    params = {"b": torch.nn.Parameter(torch.zeros(SHAPE[0], device=device)),
              "w": torch.nn.Parameter(torch.zeros(SHAPE, device=device))}
    with algorithm(name):
        comp = psgd.PowerSGDCompressor(config, {n: tuple(p.shape) for n, p in params.items()})
        # torch's first Q: one seed from numpy's RandomState(random_seed), then randn per compressed tensor
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(np.random.RandomState(0).randint(1_000_000_000))
            comp.set_q("w", torch.randn(1, SHAPE[1], RANK)[0])
        reducer = PowerSGDSumReducer(comp, world)
        outs = []
        for step, g in enumerate(_case_grads(case, rank, steps, device)):
            for n, p in params.items():
                p.grad = g[n].clone()
            reducer(params)
            outs.append({n: p.grad.detach() / world for n, p in params.items()})
            if step == WARMUP:
                bytes_sent = comp.last_call.compressed_bytes
    err = comp._errors["w"]
    return outs, {"bytes": bytes_sent, "error_dtype": str(err.dtype), "error_device": str(err.device),
                  "error_pinned": bool(err.is_pinned()), "columns": comp.stats().get("columns")}


def oracle_worker(rank: int, world: int, init_file: str, out_dir: str, device_type: str, algorithms: list) -> None:
    """One rank: every case through torch's hook and through the kit's reducer; rows to out_dir/rankR.json."""
    import torch.distributed as dist

    import kit.numerics

    kit.numerics.apply()
    device = torch.device("cuda", 0) if device_type == "cuda" else torch.device("cpu")
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    rows = []
    try:
        steps = WARMUP + 1
        for case in CASES:
            ref, torch_bytes = _torch_hook_steps(case, rank, world, device, steps)
            exact = sum(case_gradient(case, r, WARMUP).double() for r in range(world)) / world
            for name in algorithms:
                kit_out, info = _kit_steps(case, rank, world, device, steps, name)
                rows.append({
                    "case": case, "algorithm": name,
                    "warmup_bitwise": all(torch.equal(kit_out[s][n], ref[s][n]) for s in range(WARMUP) for n in ref[0]),
                    "first_compressed_gap": _rel(kit_out[WARMUP]["w"], ref[WARMUP]["w"]),
                    "first_compressed_gap_bias": _rel(kit_out[WARMUP]["b"], ref[WARMUP]["b"]),
                    "kit_vs_exact": _rel(kit_out[WARMUP]["w"], exact), "torch_vs_exact": _rel(ref[WARMUP]["w"], exact),
                    "kit_bytes": info["bytes"], "torch_bytes": torch_bytes, **{k: info[k] for k in info if k != "bytes"},
                })
    finally:
        dist.destroy_process_group()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(rows))


def oracle_rows(device_type: str = "cpu", algorithms=("before", "after"), world: int = 2) -> list[list[dict]]:
    """Spawn `world` gloo processes running `oracle_worker`; each rank's rows."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="powersgd-oracle-") as tmp:
        mp.spawn(oracle_worker, args=(world, str(Path(tmp, "pg")), tmp, device_type, list(algorithms)),
                 nprocs=world, join=True)
        return [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(world)]


# -- --cuda: the orthonormalisation's time at the SmolLM2-1.7B shapes -------------------------------------

def timing_rows(device: torch.device, repeats: int = 5) -> list[dict]:
    def timed(fn, x) -> float:
        best = math.inf
        for _ in range(repeats):
            y = x.clone()
            torch.cuda.synchronize(device) if device.type == "cuda" else None
            t0 = time.perf_counter()
            fn(y)
            torch.cuda.synchronize(device) if device.type == "cuda" else None
            best = min(best, time.perf_counter() - t0)
        return best

    rows = []
    for kind, batches in SMOLLM2_1_7B_BATCHES.items():
        for b, n in batches:
            x = torch.randn(b, n, RANK, generator=_gen("timing", kind, b, n)).to(device)
            rows.append({"matrix": kind, "batch": [b, n, RANK], "kit_s": timed(psgd.orthonormalize_, x),
                         "torch_qr_s": timed(lambda y: torch.linalg.qr(y), x)})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    ap.add_argument("--cuda", action="store_true", help="run the oracle's processes and the timing on cuda:0")
    ap.add_argument("--out", help="write OUT/RUN_ID/run.json (kit-bench/1) and the rows beside it")
    ap.add_argument("--run-id", default=None)
    a = ap.parse_args(argv)
    import kit.numerics

    kit.numerics.apply()
    if a.cuda and not torch.cuda.is_available():
        print("bench/powersgd_oracle.py: --cuda: no CUDA device here", file=sys.stderr)
        return 2
    device = torch.device("cuda", 0) if a.cuda else torch.device("cpu")
    started = dt.datetime.now(dt.UTC)
    results = {"orthogonality": orthogonality_rows(), "scale_sweep": scale_rows()}
    per_rank = oracle_rows(device.type)
    results["oracle"] = per_rank[0]
    results["oracle_ranks_agree"] = all(
        r0["first_compressed_gap"] == r1["first_compressed_gap"] for r0, r1 in zip(per_rank[0], per_rank[1]))
    if a.cuda:
        results["timing"] = timing_rows(device)
    print("orthogonality error max|Q^T Q - I| (live columns)")
    for r in results["orthogonality"]:
        print(f"  {r['matrix']:>10}  before {r['before']:.2e}  after {r['after']:.2e} ({r['after_dead']} dead)"
              f"  torch.linalg.qr {r['torch_qr']:.2e}")
    print("rank-10 512x256 gradient, one rank-32 step after warm-up: relative error")
    for r in results["scale_sweep"]:
        print(f"  scale {r['scale']:.0e}  before {r['before']:.2e}  after {r['after']:.2e} ({r['after_p_dead']} dead P)")
    print("two gloo processes, first compressed step: relative gap from torch's powerSGD_hook")
    for r in results["oracle"]:
        print(f"  {r['case']:>10} {r['algorithm']:>6}  gap {r['first_compressed_gap']:.2e}  warm-up bitwise "
              f"{r['warmup_bitwise']}  bytes {r['kit_bytes']}/{r['torch_bytes']}  error {r['error_dtype']} "
              f"{r['error_device']} pinned={r['error_pinned']}  vs exact kit {r['kit_vs_exact']:.2e} "
              f"torch {r['torch_vs_exact']:.2e}")
    for r in results.get("timing", []):
        print(f"  {r['matrix']} {tuple(r['batch'])}: kit {r['kit_s'] * 1e3:.1f} ms, torch.linalg.qr {r['torch_qr_s'] * 1e3:.1f} ms")
    if results.get("timing"):
        total = {k: sum(r[k] for r in results["timing"]) for k in ("kit_s", "torch_qr_s")}
        results["timing_total_s"] = total
        print(f"  all P and Q batches: kit {total['kit_s'] * 1e3:.1f} ms, torch.linalg.qr {total['torch_qr_s'] * 1e3:.1f} ms")
    if a.out:
        from kit.evidence.environment import code_state, device_info, versions

        run_id = a.run_id or f"bench-powersgd-oracle-{device.type}-{started.strftime('%Y-%m-%d')}"
        run_dir = Path(a.out) / run_id
        run_dir.mkdir(parents=True, exist_ok=False)
        (run_dir / "rows.json").write_text(json.dumps({"per_rank": per_rank, **results}, indent=1) + "\n")
        ended = dt.datetime.now(dt.UTC)
        record = {
            "format": "kit-bench/1", "run_id": run_id, "notebook": None,
            "command": " ".join(["python", "bench/powersgd_oracle.py", *(sys.argv[1:] if argv is None else argv)]),
            "parameters": {"rank": RANK, "warmup": WARMUP, "shape": list(SHAPE), "cases": list(CASES),
                           "world": 2, "backend": "gloo", "device": device.type,
                           "script_sha256": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()},
            "git": code_state(), "versions": versions(runtime=True), "device": device_info(device),
            "status": "completed", "errors": [],
            "started_at": started.isoformat(timespec="seconds"), "ended_at": ended.isoformat(timespec="seconds"),
            "duration_s": round((ended - started).total_seconds(), 1),
            "results": results, "raw_output": "rows.json",
        }
        (run_dir / "run.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        print(f"wrote {run_dir / 'run.json'}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("KIT_PROGRESS", "0")
    raise SystemExit(main())
