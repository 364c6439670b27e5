"""Pipeline throughput and memory admission on GPUs: the same update on one GPU, on two pipeline stages
(two GPUs) and on three ranks over two GPUs, side by side in one run.

Run on the two-GPU host: `PYTHONPATH=. python3 bench/pipeline_throughput.py --out $OUT` (the
record lands in OUT/RUN_ID/run.json, format "kit-bench/1"). `--tiny` checks the script on a CPU
(toy shape, gloo); its record says so and is no evidence of speed.

Every section launches its ranks with the kit's own launcher (kit.distributed.launch) and builds each
worker with kit.engine.worker.build_worker, exactly as `kit adaptive train` does: admission first (the
planner's estimate for what the tick schedule keeps in flight, against the memory free now), then the
owned stage, its FP32 master weights, the per-parameter AdamW and a bf16 frozen reference stage.
Weights are random but the same in every section: each tensor is drawn from a generator seeded by
(seed, sha256 of its name), so one GPU and two stages start from the same model and run the same
records; the first update's objective must agree across sections (a check the record carries).

Work per update: `microbatches` x `micro` records of `seq` random tokens, each a replay record (the
teacher forward on every record, KL on every target: the equal-work row of bench/update_throughput.py).
Throughput counts input tokens per second over the timed updates (after `warmup` updates that include
torch.compile and the attention plans). The 2-stage layout is chosen by compute balance (`balanced_split`),
not by the memory planner: rank 0 also runs the head, the loss and the reference's head.

Memory: per rank, `torch.cuda.max_memory_allocated` over the timed updates against the estimate that
admission computed (kit.engine.admission.worker_estimate: the schedule's in-flight microbatches, the
head's buffers; the reserve is reported apart since the allocator counts no reserve).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import torch

from kit.distributed.launch import launch
from kit.distributed.pipeline import in_flight
from kit.engine.worker import build_worker
from kit.engine.workload import engine_config, optimizer_groups
from kit.engine.workload import random_records as make_records
from kit.evidence.environment import code_state, device_info, versions
from kit.model.config import LlamaShape, smollm2_17b, toy_shape
from kit.model.shard import Layout, build_stage, even_layout
from kit.planner import GPU_BF16
from kit.train.batch import TrainRecord

REPO = Path(__file__).resolve().parents[1]

SECTIONS = ("one", "two", "three")
INIT_SEED, INIT_STD = 17, 0.02


def shape_of(is_tiny: bool) -> LlamaShape:
    return toy_shape() if is_tiny else smollm2_17b()


def balanced_split(shape: LlamaShape, seq: int) -> int:
    """Blocks for rank 0 of two stages so both do about the same work per token. Rank 0 also runs the
    head: the student's logits forward and their two backward products (3 x 2HV), and the reference's
    logits forward (2HV); a block costs its student forward and backward (3 x 2P) plus the reference
    forward (2P), plus attention (4 x seq x H per token forward, causal half, same factors)."""
    H, V, L = shape.hidden_size, shape.vocab_size, shape.num_hidden_layers
    block = (3 + 1) * (2 * shape.block_param_count() + 2 * seq * H)
    head = (3 + 1) * 2 * H * V
    k = (L * block - head) / (2 * block)
    return max(1, min(L - 1, round(k)))


@torch.no_grad()
def seeded_init(model: torch.nn.Module, seed: int) -> None:
    """Each tensor from its own generator seeded by (seed, its name): the same values whichever stage holds it."""
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            p.fill_(1.0)
            continue
        s = int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little")
        gen = torch.Generator(device=p.device).manual_seed(s)
        p.normal_(0.0, INIT_STD, generator=gen)


def _frame_key(frames: list[dict]) -> str:
    """Where an allocation came from: its innermost frame in the kit or this bench, else its innermost frame."""
    for f in frames or []:
        fn = f.get("filename", "")
        if ("/kit/" in fn or "/bench/" in fn) and "pipeline_throughput" not in fn:
            return f"{fn.split('/kit/')[-1] if '/kit/' in fn else fn.split('/')[-1]}:{f.get('line')} {f.get('name')}"
    f = (frames or [{}])[0]
    return f"{f.get('filename', '?').split('/')[-1]}:{f.get('line')} {f.get('name')}"


def peak_breakdown(snapshot: dict, device_index: int, before: int, top: int = 25) -> dict:
    """Replay the allocator trace of one update: the bytes alive at its peak, grouped by the code that
    allocated them (`_frame_key`). `before` is what was allocated when recording started (the static state)."""
    trace = snapshot["device_traces"][device_index]
    live, total, best, best_i = {}, 0, 0, -1
    for i, ev in enumerate(trace):
        if ev["action"] == "alloc":
            live[ev["addr"]] = ev["size"]
            total += ev["size"]
            if total > best:
                best, best_i = total, i
        elif ev["action"] == "free_completed" and ev["addr"] in live:
            total -= live.pop(ev["addr"])
    live_at_peak = {}
    for ev in trace[:best_i + 1]:
        if ev["action"] == "alloc":
            live_at_peak[ev["addr"]] = ev
        elif ev["action"] == "free_completed":
            live_at_peak.pop(ev["addr"], None)
    groups: dict[str, int] = {}
    for ev in live_at_peak.values():
        k = _frame_key(ev.get("frames"))
        groups[k] = groups.get(k, 0) + ev["size"]
    peak_frames = trace[best_i].get("frames") if best_i >= 0 else []
    return {"allocated_before_bytes": before, "peak_above_before_bytes": best, "events": len(trace),
            "peak_at": _frame_key(peak_frames),
            "peak_stack": [f"{f.get('filename', '').split('/')[-1]}:{f.get('line')} {f.get('name')}"
                           for f in (peak_frames or [])[:12]],
            "live_at_peak": sorted(groups.items(), key=lambda kv: -kv[1])[:top]}


def bench_records(shape: LlamaShape, n: int, seq: int, replay: str, lengths: str):
    """`n` records of `seq` tokens, every one a replay record ("all": the equal-work row) or every other
    one ("half": CE on the rest, as a cohort mixes new and replay records); with lengths "varied" each
    record keeps a seeded random 70-100% of its tokens, so microbatches differ in padded length as
    real documents do."""
    recs = make_records(shape, n, seq, (True,) if replay == "all" else (True, False), seed=3)
    if lengths == "fixed":
        return recs
    gen = torch.Generator().manual_seed(4)
    out = []
    for r in recs:
        k = int(seq * (0.7 + 0.3 * torch.rand((), generator=gen).item()))
        out.append(TrainRecord(r.id, r.input_ids[:k], r.target_mask[:k], r.weight, r.replay))
    return out


def stage_worker(group, args: dict, ctx) -> dict:
    """One rank: build its worker as `kit adaptive train` does, run warm-up and timed updates."""
    shape = shape_of(args["tiny"])
    layout = Layout.from_json(args["layout"])
    dev = group.device
    cuda = dev.type == "cuda"
    micro, seq, M = args["micro"], args["seq"], args["microbatches"]
    student = build_stage(shape, layout, group.rank, device=dev)
    seeded_init(student, INIT_SEED)
    reference = build_stage(shape, layout, group.rank, device=dev)
    seeded_init(reference, INIT_SEED)  # the reference starts equal to the student, as in a cohort
    reference.to(torch.bfloat16 if cuda else torch.float32).requires_grad_(False)
    memory_model = args["memory_model"]
    worker = build_worker(group, layout, None, engine_config(micro, "auto" if cuda else "off"), optimizer_groups(),
                          student=student, reference=reference,
                          admission={"microbatch": (micro, seq), "microbatches": M, "memory_model": memory_model})
    eng = worker.engine
    records = bench_records(shape, micro * M, seq, args.get("replay", "all"), args.get("lengths", "fixed"))
    objectives, seconds = [], []
    breakdown = None
    last = args["warmup"] + args["steps"] - 1
    t_first = time.perf_counter()
    for step in range(args["warmup"] + args["steps"]):
        ctx.progress(step=step, phase="update")
        if cuda and args.get("snapshot") and step == last:
            # the last update under the allocator's recorder: where this rank's peak comes from
            torch.cuda.synchronize(dev)
            before = torch.cuda.memory_allocated(dev)
            torch.cuda.memory._record_memory_history(max_entries=500_000)
        if step == args["warmup"] and cuda:
            torch.cuda.synchronize(dev)
            torch.cuda.reset_peak_memory_stats(dev)
        t0 = time.perf_counter()
        res = eng.update(records)
        if cuda:
            torch.cuda.synchronize(dev)
        seconds.append(time.perf_counter() - t0)
        objectives.append(res.parts.objective)
        if cuda and args.get("snapshot") and step == last:
            try:
                breakdown = peak_breakdown(torch.cuda.memory._snapshot(), dev.index, before)
            except Exception as e:  # noqa: BLE001 -- a diagnostic: never lose the section for it
                breakdown = {"error": f"{type(e).__name__}: {e}"[:500]}
            torch.cuda.memory._record_memory_history(enabled=None)
        if step == 0:
            first_s = time.perf_counter() - t_first
    timed = seconds[args["warmup"]:]
    est = worker.admission or {}
    comps = dict(est.get("components") or {})
    reserve = comps.get("reserve", 0)
    return {
        "rank": group.rank, "device": str(dev), "blocks": list(layout.ranges[group.rank]), "backend": "gloo (host-staged)" if getattr(group, "staged", False) else
        ("nccl" if cuda and group.world > 1 else ("gloo" if group.world > 1 else "none")),
        "in_flight_microbatches": in_flight(group.world, M, group.rank),
        "first_update_s": first_s, "seconds": seconds, "timed_mean_s": sum(timed) / len(timed),
        "objectives": objectives, "input_tokens_per_update": sum(len(r.input_ids) for r in records),
        "bytes_sent": getattr(group, "bytes_sent", None),
        "peak_memory_bytes": torch.cuda.max_memory_allocated(dev) if cuda else None,
        "estimate_bytes": est.get("estimate"), "estimate_components": comps,
        "estimate_without_reserve_bytes": (est["estimate"] - reserve) if est else None,
        "free_at_admission_bytes": est.get("free"),
        "peak_breakdown_last_update": breakdown,
    }


def run_section(name: str, workers: int, layout: Layout, a, base: Path, memory_model: dict) -> dict:
    args = {"tiny": a.tiny, "layout": layout.to_json(), "micro": a.micro, "seq": a.seq,
            "microbatches": a.microbatches, "warmup": a.warmup, "steps": a.steps, "memory_model": memory_model,
            "snapshot": a.snapshot, "replay": a.replay, "lengths": a.lengths,
            "timeout_s": 300}
    t0 = time.perf_counter()
    ranks = launch("bench.pipeline_throughput:stage_worker", args, workers, base / name, timeout_s=a.timeout,
                   env={"PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])})
    wall = time.perf_counter() - t0
    # lockstep ranks: an update takes as long as its slowest rank
    step_s = [max(r["seconds"][i] for r in ranks) for i in range(len(ranks[0]["seconds"]))]
    timed = step_s[a.warmup:]
    tokens = ranks[0]["input_tokens_per_update"]
    for r in ranks:
        pk, est = r["peak_memory_bytes"], r["estimate_without_reserve_bytes"]
        r["estimate_error"] = (est / pk - 1) if pk and est else None
    return {"section": name, "workers": workers, "layout": layout.to_json(), "wall_s": round(wall, 2),
            "update_seconds": step_s, "timed_mean_s": sum(timed) / len(timed),
            "tokens_per_update": tokens, "tokens_per_s": tokens * len(timed) / sum(timed),
            "first_update_s": max(r["first_update_s"] for r in ranks), "objectives": ranks[0]["objectives"],
            "ranks": ranks}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--tiny", action="store_true", help="toy shape on CPU: checks the script")
    ap.add_argument("--micro", type=int, default=4, help="records per microbatch")
    ap.add_argument("--seq", type=int, default=None, help="tokens per record (default 2048; 32 with --tiny)")
    ap.add_argument("--microbatches", type=int, default=8, help="microbatches per update")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--split", type=int, default=None, help="rank 0's blocks of two stages (default balanced_split)")
    ap.add_argument("--sections", default=",".join(SECTIONS), help="comma list of " + ", ".join(SECTIONS))
    ap.add_argument("--timeout", type=float, default=480.0, help="seconds per section")
    ap.add_argument("--replay", choices=["all", "half"], default="all",
                    help="replay records: all (equal work, the default) or every other one (a cohort's mix)")
    ap.add_argument("--lengths", choices=["fixed", "varied"], default="fixed",
                    help="record lengths: all --seq, or a seeded 70-100%% of it")
    ap.add_argument("--snapshot", action="store_true",
                    help="record the allocator during the last update: what is alive at each rank's peak")
    ap.add_argument("--run-id", default=None)
    ap.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "build" / "pipeline-throughput"))
    a = ap.parse_args(argv)
    a.seq = a.seq or (32 if a.tiny else 2048)
    started = dt.datetime.now(dt.UTC)
    run_id = a.run_id or f"bench-pipeline-{started.strftime('%Y-%m-%d')}" + ("-tiny" if a.tiny else "")
    run_dir = Path(a.out) / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    shape = shape_of(a.tiny)
    L = shape.num_hidden_layers
    split = a.split or balanced_split(shape, a.seq)
    gpus = torch.cuda.device_count()
    memory_model = {} if a.tiny else dict(GPU_BF16)
    layouts = {"one": (1, even_layout(L, 1)), "two": (2, Layout(((0, split), (split, L)))),
               "three": (3, even_layout(L, 3))}
    sections, errors = {}, []
    for name in [s for s in a.sections.split(",") if s]:
        if name not in layouts:
            raise SystemExit(f"--sections: unknown section {name!r}; expected some of {', '.join(SECTIONS)}")
        workers, layout = layouts[name]
        if not a.tiny and gpus < min(workers, 2):
            errors.append({"section": name, "error": f"needs {min(workers, 2)} GPUs; this host has {gpus}"})
            continue
        try:
            sections[name] = run_section(name, workers, layout, a, run_dir / "raw", memory_model)
            s = sections[name]
            print(json.dumps({"section": name, "tokens_per_s": round(s["tokens_per_s"]),
                              "timed_mean_s": round(s["timed_mean_s"], 3),
                              "ranks": [(r["rank"], r["peak_memory_bytes"], r["estimate_without_reserve_bytes"],
                                         r["estimate_error"]) for r in s["ranks"]]}), flush=True)
        except Exception as e:  # noqa: BLE001 -- the record names the failure and keeps the other sections
            errors.append({"section": name, "error": f"{type(e).__name__}: {e}"[:3000]})
    ratio = None
    if "one" in sections and "two" in sections:
        ratio = sections["two"]["tokens_per_s"] / sections["one"]["tokens_per_s"]
    checks = {}
    objs = {n: s["objectives"][0] for n, s in sections.items()}
    if len(objs) > 1:
        vals = list(objs.values())
        checks["first_objective_spread"] = max(vals) - min(vals)
    ended = dt.datetime.now(dt.UTC)
    record = {
        "format": "kit-bench/1", "run_id": run_id, "notebook": None,
        "command": " ".join(["python", "bench/pipeline_throughput.py", *(sys.argv[1:] if argv is None else argv)]),
        "parameters": {"tiny": a.tiny, "micro": a.micro, "seq": a.seq, "microbatches": a.microbatches,
                       "warmup": a.warmup, "steps": a.steps, "split": split, "memory_model": memory_model,
                       "replay": a.replay, "lengths": a.lengths,
                       "work": ("equal: every record a replay record (teacher forward on every record, KL on every target)"
                                if a.replay == "all" else "mixed: every other record a replay record (KL), CE on the rest"),
                       "script_sha256": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()},
        "git": code_state(), "versions": versions(runtime=True), "device": device_info(torch.device("cuda" if gpus else "cpu")),
        "host_cuda_devices": gpus, "status": "completed" if not errors else "failed", "errors": errors,
        "started_at": started.isoformat(timespec="seconds"), "ended_at": ended.isoformat(timespec="seconds"),
        "results": {"sections": sections, "two_stage_over_one_gpu": ratio, "target_ratio": 1.6, "checks": checks},
    }
    (run_dir / "run.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(json.dumps({"run_dir": str(run_dir), "status": record["status"], "two_stage_over_one_gpu": ratio,
                      "split": split, "errors": errors, "checks": checks}))
    return 0 if not errors else 1


if __name__ == "__main__":
    raise SystemExit(main())
