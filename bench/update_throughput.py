"""One update of SmolLM2-1.7B's shape on one GPU: the kit's real update against plain transformers.

Run on the GPU host (one H200): `python bench/update_throughput.py` (outputs under $OUT when set,
else under --out). In ONE process, in this order, it measures

  ceiling            a bf16 8192^3 GEMM timed with CUDA events: the matmul rate this card reaches now;
  baseline           written here by the method of ../shared/bench/hf_baseline.py: transformers'
                     LlamaForCausalLM with FP32 weights, bf16 autocast, fused torch.optim.AdamW, a frozen
                     bf16 teacher forward and KL over the full logits of every token plus CE,
                     clip_grad_norm_ (eager);
  baseline_compiled  the same with the student under torch.compile (hf_baseline.py's method);
  kit                THE HEADLINE, equal work: kit.distributed.pipeline.StageEngine with one worker, FP32
                     master weights, bf16 compute, the frozen bf16 teacher forward on EVERY record, CE + KL,
                     canonical clipping, ParamAdamW; every token a target (the baselines' full-sequence loss);
  commit             the training stall of one commit at this shape: synchronous Session.commit against
                     Session.commit(background=True) (kit.store.async_commit), with bytes/s;
  checkpoint         commit of the full learned state with kit.store (write + fsync + hash), its load, and
                     a new owner's fetch + load of only half of the blocks;
  kit_mixed          a second row, NOT equal work: the teacher forward on half of the records only (KL on
                     those, CE on the others);
  planner            each worker's peak of the planner's 2-worker layout, simulated one stage at a time on
                     the one GPU (random input activations and output gradients stand in for the peers),
                     against kit.planner's estimate;
  kit_eager          the headline row without compiled blocks;
  kit_host_clip      the headline row with the clip factor computed on the host;
  norm_check         the headline engine's gradient norm both ways (per-tensor FP64 and multi-tensor): the
                     largest difference, on this device;
  kit_before         the headline row with none of the engine's GPU fast paths (weight cache, fused
                     elementwise, multi-tensor norms): the code before them;
  kit_no_weight_cache, kit_unfused, kit_per_tensor_norm
                     the headline row with ONE fast path off (its before/after against the headline);
  kit_sdpa           the headline row once per attention backend of --sdpa-backends (flash, cuDNN,
                     efficient), each compiled afresh under that backend;
  kit_compiled_loss, kit_adam_device_steps, kit_graph_capture, kit_adam_writes_cache
                     the headline row with ONE of the levers flipped from its state in the headline
                     (--levers default: as EngineConfig ships it): row kit_equal_work_<lever>_<on|off>;
  kit_levers         the headline row with every lever on (kit_equal_work_levers);

all at 4 x 2048 tokens per microbatch and one microbatch per update (equal tokens per update).

Prints one JSON line per row and writes update_throughput.jsonl and run.json (the run record).
MFU counts EXECUTED FLOPs (`executed_flops_per_token`): 6 x matmul parameters + 3 x causal attention
(half of the full square, as the causal kernels execute it) for the student, and 2 x matmul parameters +
causal attention for the teacher only on the tokens that ran it; it is reported over 989 TFLOP/s (bf16
dense, H100/H200 datasheet) and over the `ceiling` row's measured GEMM rate. `mfu_nominal_old` is the
earlier count (full attention, teacher on every token) for comparison with older records only.
`--tiny` runs every section on a toy shape (CPU works) to check the script itself; with `--fast-paths on`
the fast paths run on CPU too (tests/test_fused_paths.py runs the variants that way).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import gc
import gzip
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import kit.numerics

kit.numerics.set_environment()  # before torch computes (importing the model probes attention kernels)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from kit.digest import canonical_json  # noqa: E402
from kit.distributed.group import Group
from kit.distributed.pipeline import EngineConfig, StageEngine
from kit.engine.worker import build_worker
from kit.engine.workload import BETAS, EPS, LR, MAX_NORM, WEIGHT_DECAY, engine_config, optimizer_groups
from kit.engine.workload import random_records as make_records
from kit.evidence.environment import code_state, device_info, roomiest_directory, versions
from kit.flops import H200_BF16_PEAK_FLOPS, executed_flops_per_token
from kit.model.config import LlamaShape, smollm2_17b, toy_shape
from kit.model.llama import LlamaCausalLM
from kit.model.shard import Layout, build_stage, even_layout
from kit.planner import MemoryModel, MicrobatchShape, WorkerCapacity, estimate_worker, plan

REPO = Path(__file__).resolve().parents[1]

PEAK_FLOPS = H200_BF16_PEAK_FLOPS  # bf16 dense, datasheet
SECTIONS = ("ceiling", "baseline", "baseline_compiled", "kit", "commit", "checkpoint", "kit_mixed", "planner",
            "kit_eager", "kit_host_clip", "norm_check", "kit_before", "kit_no_weight_cache", "kit_unfused",
            "kit_per_tensor_norm", "kit_sdpa", "kit_compiled_loss", "kit_adam_device_steps", "kit_graph_capture",
            "kit_adam_writes_cache", "kit_levers")
# The engine's GPU fast paths (EngineConfig, docs/performance.md "Fast paths") and the section that turns
# each one off alone.
FAST_PATHS = {"weight_cache": "kit_no_weight_cache", "fused_elementwise": "kit_unfused",
              "foreach_norm": "kit_per_tensor_norm"}
# Issue 54's levers (EngineConfig, docs/performance.md "Levers not yet measured"), at --levers in the headline,
# and the section that flips each one alone; `kit_levers` runs the headline with all of them on.
LEVERS = {"compiled_loss": "kit_compiled_loss", "adam_steps_on_device": "kit_adam_device_steps",
          "graph_capture": "kit_graph_capture", "adam_writes_cache": "kit_adam_writes_cache"}
SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                 "math": "MATH"}
GIB = 2**30


def flops_per_token(shape: LlamaShape, seq: int, ref_fraction: float) -> float:
    """The earlier nominal count (6N + 12LHT student, 2N + 4LHT teacher: full attention, N with norms),
    kept for comparison with older records only; MFU uses `executed_flops_per_token`."""
    n, L, H = shape.param_count(), shape.num_hidden_layers, shape.hidden_size
    return 6 * n + 12 * L * H * seq + ref_fraction * (2 * n + 4 * L * H * seq)


def measure_matmul_ceiling(device, n: int = 8192, warmup: int = 5, iters: int = 50) -> dict:
    """The bf16 dense GEMM rate this card reaches now (n x n x n, timed with CUDA events): the practical
    ceiling that MFU is also reported against. None off CUDA."""
    if device.type != "cuda":
        return {"row": "ceiling", "matmul_bf16_flops": None, "note": "not measured off CUDA"}
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn_like(a)
    c = torch.empty_like(a)
    for _ in range(warmup):
        torch.mm(a, b, out=c)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        torch.mm(a, b, out=c)
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1e3
    rate = iters * 2 * n**3 / seconds
    del a, b, c
    return {"row": "ceiling", "matmul_bf16_flops": rate, "matmul_bf16_tflops": round(rate / 1e12, 1),
            "n": n, "iters": iters, "over_datasheet": round(rate / PEAK_FLOPS, 4)}


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def free(device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_gib(device) -> float | None:
    return round(torch.cuda.max_memory_allocated() / GIB, 2) if device.type == "cuda" else None


def allocated_gib(device) -> float | None:
    return round(torch.cuda.memory_allocated() / GIB, 2) if device.type == "cuda" else None


def emit(row: dict, sink) -> dict:
    line = json.dumps(row)
    print(line, flush=True)
    sink.write(line + "\n")
    sink.flush()
    return row


# --- (b) the baseline, by the method of ../shared/bench/hf_baseline.py ------------------------------
def run_baseline(shape: LlamaShape, micro: int, seq: int, warmup: int, steps: int, device, compiled: bool = False,
                 ceiling: float | None = None) -> dict:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=shape.vocab_size, hidden_size=shape.hidden_size,
                      intermediate_size=shape.intermediate_size, num_hidden_layers=shape.num_hidden_layers,
                      num_attention_heads=shape.num_attention_heads, num_key_value_heads=shape.num_key_value_heads,
                      max_position_embeddings=shape.max_position_embeddings, tie_word_embeddings=True,
                      rms_norm_eps=shape.rms_norm_eps, rope_theta=shape.rope.theta)
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    ref = LlamaForCausalLM(cfg).to(device, dtype=torch.bfloat16).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY,
                            fused=device.type == "cuda")
    x = torch.randint(0, shape.vocab_size, (micro, seq), device=device)
    fwd = torch.compile(model) if compiled else model  # as ../shared/bench/hf_baseline.py: the student only

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = fwd(input_ids=x).logits.float()
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1))
            with torch.no_grad():
                t = ref(input_ids=x).logits.float()
            loss = loss + F.kl_div(F.log_softmax(logits, -1), F.log_softmax(t, -1), log_target=True,
                                   reduction="batchmean")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        opt.step()
        opt.zero_grad(set_to_none=True)

    t_first = time.perf_counter()
    for _ in range(warmup):  # the first step compiles when `compiled`
        step()
    sync(device)
    first_s = time.perf_counter() - t_first
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync(device)
    dt_ = (time.perf_counter() - t0) / steps
    assert n_params == shape.param_count(), (n_params, shape.param_count())
    out = throughput_row("baseline_compiled" if compiled else "baseline", shape, micro, seq, dt_, 1.0, device,
                         ceiling)
    out["work"] = "equal: teacher forward on every record, CE + KL"
    out["warmup_s"] = round(first_s, 2)
    out["method"] = ("transformers LlamaForCausalLM" + (" under torch.compile (default mode)" if compiled else "")
                     + " + bf16 autocast + fused AdamW + teacher forward + full-logit KL")
    del fwd, model, ref, opt
    if compiled:
        torch._dynamo.reset()
    return out


def throughput_row(name: str, shape: LlamaShape, micro: int, seq: int, step_s: float, teacher_fraction: float,
                   device, ceiling: float | None = None) -> dict:
    """tokens/s and MFU of one row. MFU = executed FLOPs per second (executed_flops_per_token: causal
    attention at half, the teacher only where it ran) over 989 TFLOP/s and over the bf16 GEMM ceiling
    measured in the same run (`ceiling`, FLOP/s; None when not measured)."""
    toks = micro * seq
    rate = executed_flops_per_token(shape, seq, teacher_fraction) * toks / step_s
    return {
        "row": name, "micro": micro, "seq": seq, "tokens_per_update": toks, "step_s": round(step_s, 4),
        "tokens_per_s": round(toks / step_s), "n_params": shape.param_count(),
        "executed_tflops": round(rate / 1e12, 2),
        "mfu_executed": round(rate / PEAK_FLOPS, 4),
        "mfu_executed_vs_matmul_ceiling": round(rate / ceiling, 4) if ceiling else None,
        "mfu_nominal_old": round(flops_per_token(shape, seq, 1.0) * toks / step_s / PEAK_FLOPS, 4),
        "teacher_fraction": teacher_fraction, "peak_gib": peak_gib(device),
    }


# --- (a) the kit's real update ----------------------------------------------------------------------
@torch.no_grad()
def random_init(model: torch.nn.Module, seed: int) -> None:
    gen = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            p.fill_(1.0)
        else:
            p.normal_(0.0, 0.02, generator=gen)


def build_kit(shape: LlamaShape, micro: int, device, compile_blocks: str, clip_on_device: str = "auto",
              switches: dict | None = None) -> StageEngine:
    """The headline's engine; `switches`: EngineConfig fast-path fields ("auto"/"on"/"off") to override."""
    # A fresh compilation per engine: each variant traces its own block graphs (the attention backend
    # is chosen while tracing), and never runs a graph left by another variant.
    torch._dynamo.reset()
    with torch.device(device):
        student = LlamaCausalLM(shape)
        reference = LlamaCausalLM(shape)
    random_init(student, 1)
    random_init(reference, 2)
    reference.to(torch.bfloat16).requires_grad_(False)
    layout = even_layout(shape.num_hidden_layers, 1)
    cfg = dataclasses.replace(engine_config(micro, compile_blocks, clip_on_device), **(switches or {}))
    return build_worker(Group(0, 1, device), layout, None, cfg, optimizer_groups(),
                        student=student, reference=reference).engine


def run_kit(name: str, eng: StageEngine, shape: LlamaShape, micro: int, seq: int, replay: tuple[bool, ...],
            warmup: int, steps: int, device, ceiling: float | None = None) -> dict:
    records = make_records(shape, micro, seq, replay, seed=3)
    t_first = time.perf_counter()
    first = eng.update(records)  # includes torch.compile of the blocks on CUDA
    first_s = time.perf_counter() - t_first
    for _ in range(warmup - 1):
        eng.update(records)
    sync(device)
    t0 = time.perf_counter()
    last = None
    for _ in range(steps):
        last = eng.update(records)
    sync(device)
    dt_ = (time.perf_counter() - t0) / steps
    ref_fraction = sum(replay) / len(replay)  # records are of equal length, so also the fraction of tokens
    out = throughput_row(name, shape, micro, seq, dt_, ref_fraction, device, ceiling)
    out["work"] = ("equal: teacher forward on every record, CE + KL" if all(replay) else
                   f"mixed: teacher forward on {sum(replay)} of {len(replay)} records (KL there, CE on the rest)")
    out.update({"first_update_s": round(first_s, 2), "compile_blocks": eng.cfg.compile_blocks, "clip_on_device": eng.cfg.clip_on_device,
                "replay_records": sum(replay), "records": micro, "objective_first": first.parts.objective,
                "objective_last": last.parts.objective, "grad_norm_last": last.grad_norm,
                "clip_factor_last": last.clip_factor, "optimizer_fused": eng.optimizer.fused,
                "weight_cache": eng.weight_cache is not None, "fused_elementwise": eng.fused,
                "foreach_norm": eng.foreach_norm, "compiled_loss": eng.compiled_loss,
                "adam_steps_on_device": eng.optimizer.device_steps is not None, "graph_capture": eng.graph_capture,
                "adam_writes_cache": eng.adam_writes_cache,
                "weight_cache_gib": round(eng.weight_cache.nbytes() / GIB, 3) if eng.weight_cache else None})
    return out


def norm_check(eng: StageEngine, shape: LlamaShape, micro: int, seq: int, replay) -> dict:
    """One more update's pre-clip gradients, their squared norms both ways (kit/train/grad_norms.py) in
    canonical order: the largest relative difference per parameter and of the global norm, on this device."""
    from kit.train.grad_norms import squared_norms

    eng.capture_grads = True
    try:
        eng.update(make_records(shape, micro, seq, replay, seed=6))
        names = [n for n in eng.canonical if n in eng.last_grads]
        grads = [eng.last_grads[n] for n in names]
        per_tensor = squared_norms(grads, multi_tensor=False).cpu()
        multi = squared_norms(grads, multi_tensor=True).cpu()
    finally:
        eng.capture_grads, eng.last_grads = False, {}
    rel = ((multi - per_tensor).abs() / per_tensor.clamp_min(1e-300)).max().item()
    total_a, total_b = 0.0, 0.0
    for a, b in zip(per_tensor.tolist(), multi.tolist()):  # canonical order, as kit.train.optim.clip_factor
        total_a += a
        total_b += b
    return {"row": "grad_norm_check", "params": len(names), "max_rel_diff_squared_norm": rel,
            "params_differing": int((multi != per_tensor).sum()), "grad_norm_per_tensor": total_a ** 0.5,
            "grad_norm_multi_tensor": total_b ** 0.5,
            "rel_diff_grad_norm": abs(total_a ** 0.5 - total_b ** 0.5) / total_a ** 0.5 if total_a else 0.0}


def profile_update(eng: StageEngine, shape: LlamaShape, micro: int, seq: int, replay, out_dir: Path,
                   trace: bool = False) -> dict:
    """One profiled kit update: the kernels by device time, written to kit_profile.txt; with `trace`, also
    its timeline (kit_trace.json.gz, chrome://tracing or Perfetto), where the device's idle gaps show."""
    from torch.profiler import ProfilerActivity, profile

    records = make_records(shape, micro, seq, replay, seed=3)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if eng.device.type == "cuda" else [])
    sync(eng.device)
    t0 = time.perf_counter()
    with profile(activities=acts) as prof:
        eng.update(records)
        sync(eng.device)
    wall = time.perf_counter() - t0
    key = "self_device_time_total" if eng.device.type == "cuda" else "self_cpu_time_total"
    averages = prof.key_averages()
    try:
        table = averages.table(sort_by=key, row_limit=45, max_name_column_width=90)
    except (KeyError, AttributeError, ValueError):  # older spelling of the device-time column
        key = "self_cuda_time_total"
        table = averages.table(sort_by=key, row_limit=45, max_name_column_width=90)
    (out_dir / "kit_profile.txt").write_text(table)
    busy_us = sum(getattr(e, key, 0) or 0 for e in averages
                  if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA)
    out = {"row": "profile", "wall_s": round(wall, 4), "device_busy_s": round(busy_us / 1e6, 4),
           "file": "kit_profile.txt"}
    if trace:
        raw = out_dir / "kit_trace.json"
        prof.export_chrome_trace(str(raw))
        with open(raw, "rb") as src, gzip.open(out_dir / "kit_trace.json.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        raw.unlink()
        out["trace"] = "kit_trace.json.gz"
    return out


def sdpa_rows(kit_section, backends: list[str], replay, device) -> list[dict]:
    """The headline row once per attention backend, each engine built and compiled under it; a backend
    this build or shape cannot run gives a row saying so instead of a number."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = []
    for b in backends:
        name = f"kit_equal_work_sdpa_{b}"
        free(device)
        try:
            with sdpa_kernel(getattr(SDPBackend, SDPA_BACKENDS[b])):
                row = kit_section("auto", name, replay)
            rows.append({**row, "sdpa_backend": b})
        except Exception as e:  # noqa: BLE001 -- "no viable backend", a failed compile: this backend, not the run
            rows.append({"row": name, "sdpa_backend": b, "unavailable": repr(e)[:1000]})
    torch._dynamo.reset()  # later engines trace under the default backend choice again
    return rows


# --- (c) checkpoint throughput ------------------------------------------------------------------------
def drop_page_cache() -> bool:
    """Make the next reads come from disk (root only; False where the kernel refuses)."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def checkpoint_bench(eng: StageEngine, shape: LlamaShape, base: Path) -> dict:
    from kit.store.commits import load_param_states, param_digests, save_param_states, write_commit
    from kit.store.objects import ObjectStore, fetch_objects

    states = eng.optimizer.param_states()
    total = sum(st["param"].numel() * 4 * 3 for st in states.values())
    usage = shutil.disk_usage(base)
    out = {"row": "checkpoint", "store_dir": str(base), "learned_state_bytes": total,
           "disk_free_before_gb": round(usage.free / 1e9, 1)}
    if usage.free < 1.1 * total:
        out["skipped"] = f"only {usage.free / 1e9:.1f} GB free under {base}; need {1.1 * total / 1e9:.1f}"
        return out
    home = Path(tempfile.mkdtemp(prefix="kit-bench-store-", dir=base))
    home2 = Path(tempfile.mkdtemp(prefix="kit-bench-owner-", dir=base))
    try:
        store = ObjectStore(home)
        sync(eng.device)
        t0 = time.perf_counter()
        entries = save_param_states(store, states)  # device -> host, sha256, write, fsync, rename
        t1 = time.perf_counter()
        rng = [store.put_bytes(b"benchmark rng state of rank 0")]
        layout = {"blocks": [[0, shape.num_hidden_layers]], "embedding_owner": 0,
                  "model_config": store.put_bytes(canonical_json(shape.to_hf_dict()))}
        learned = {"cursor": {"update": 1}, "params": entries}
        root = write_commit(home, learned, layout, None, rng)  # fsync + re-hash of every object, manifest, HEAD
        t2 = time.perf_counter()
        out.update({"commit_s": round(t2 - t0, 2), "commit_gb_per_s": round(total / 1e9 / (t2 - t0), 3),
                    "save_param_states_s": round(t1 - t0, 2), "write_commit_verify_s": round(t2 - t1, 2),
                    "root": root})
        del states
        out["load_cold"] = drop_page_cache()
        t0 = time.perf_counter()
        loaded = load_param_states(store, entries)  # read + re-hash + tensors, on the host
        t1 = time.perf_counter()
        n_loaded = sum(st[k].numel() * 4 for st in loaded.values() for k in ("param", "exp_avg", "exp_avg_sq"))
        del loaded
        out.update({"load_s": round(t1 - t0, 2), "load_gb_per_s": round(n_loaded / 1e9 / (t1 - t0), 3)})
        half = set(range(shape.num_hidden_layers // 2, shape.num_hidden_layers))
        names = {e["name"] for e in entries if e["name"].startswith("model.layers.")
                 and int(e["name"].split(".")[2]) in half}
        wanted = param_digests(entries, names)
        want_bytes = sum(store.path(d).stat().st_size for d in set(wanted))
        if shutil.disk_usage(base).free < 1.1 * want_bytes:
            out["owner_skipped"] = "not enough disk for the new owner's store"
            return out
        out["owner_load_cold"] = drop_page_cache()
        before = store.bytes_read
        t0 = time.perf_counter()
        fetched = fetch_objects(store, ObjectStore(home2), wanted)
        t1 = time.perf_counter()
        mine = load_param_states(ObjectStore(home2), entries, names)
        t2 = time.perf_counter()
        out.update({"owner_blocks": [min(half), max(half) + 1], "owner_params": len(names),
                    "owner_bytes": want_bytes, "owner_source_bytes_read": store.bytes_read - before,
                    "owner_reads_only_its_objects": store.bytes_read - before == fetched == want_bytes,
                    "owner_fetch_s": round(t1 - t0, 2), "owner_load_s": round(t2 - t1, 2),
                    "owner_total_gb_per_s": round(want_bytes / 1e9 / (t2 - t0), 3)})
        del mine
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(home2, ignore_errors=True)
        out["disk_free_after_gb"] = round(shutil.disk_usage(base).free / 1e9, 1)
    return out


def bench_session(eng: StageEngine, shape: LlamaShape, home: Path):
    """A kit.engine.session.Session over the benchmark's engine (built without a seed directory), so that
    the commit section times Session.commit itself, synchronous and background."""
    from kit.engine.session import Session
    from kit.store.objects import ObjectStore
    from kit.store.start import Start

    sess = object.__new__(Session)
    sess.group, sess.home, sess.layout = eng.group, str(home), eng.layout
    sess.start = Start(shape, canonical_json(shape.to_hf_dict()))
    sess.store, sess.engine, sess.step, sess.parent, sess.committer = ObjectStore(home), eng, 0, None, None
    return sess


def commit_bench(eng: StageEngine, shape: LlamaShape, micro: int, seq: int, replay, base: Path, step_s: float,
                 max_updates: int = 400) -> dict:
    """The training stall of one commit at the benchmark's shape: synchronous Session.commit (all of it
    stalls training) against Session.commit(background=True) (the snapshot to pinned host memory, plus
    whatever the background write takes from the updates that run meanwhile, measured as their time
    above `step_s`, the update time measured without a commit in flight)."""
    states = eng.optimizer.param_states()
    total = sum(st["param"].numel() * 4 * 3 for st in states.values())
    del states
    usage = shutil.disk_usage(base)
    out = {"row": "commit", "store_dir": str(base), "learned_state_bytes": total, "baseline_step_s": round(step_s, 4)}
    if usage.free < 1.1 * total:
        out["skipped"] = f"only {usage.free / 1e9:.1f} GB free under {base}; need {1.1 * total / 1e9:.1f}"
        return out
    records = make_records(shape, micro, seq, replay, seed=5)
    home = Path(tempfile.mkdtemp(prefix="kit-bench-commit-", dir=base))
    try:
        sess = bench_session(eng, shape, home / "sync")
        sess.update(records)
        sync(eng.device)
        t0 = time.perf_counter()
        sess.commit()
        sync_s = time.perf_counter() - t0
        out.update({"sync_commit_s": round(sync_s, 3), "sync_bytes_per_s": round(total / sync_s)})
        shutil.rmtree(home / "sync")
        sess = bench_session(eng, shape, home / "async")
        sess.update(records)
        sync(eng.device)
        # The pinned host buffers are allocated once per session and reused by every later commit:
        # allocate them outside the timed commit (reported apart) so that the stall is a steady-state one.
        from kit.engine.commit import AsyncCommitter

        sess.committer = AsyncCommitter(sess.store)
        t0 = time.perf_counter()
        sess.committer.snapshot.take(eng.optimizer.param_states())
        out["pinned_alloc_and_first_copy_s"] = round(time.perf_counter() - t0, 3)
        t0 = time.perf_counter()
        sess.commit(background=True)  # returns after the snapshot
        snapshot_s = time.perf_counter() - t0
        overlapped, n = 0.0, 0
        while sess.committer.inflight is not None and n < max_updates:
            t1 = time.perf_counter()
            sess.update(records)  # polls the background commit first
            sync(eng.device)
            overlapped += time.perf_counter() - t1
            n += 1
        t1 = time.perf_counter()
        blocked = sess.wait_commit() is not None  # only if max_updates did not cover the write
        wait_s = time.perf_counter() - t1
        last = sess.committer.last
        stall = snapshot_s + max(0.0, overlapped - n * step_s) + wait_s
        background_s = (last.get("objects_s") or 0) + (last.get("install_s") or 0)
        out.update({"async_snapshot_s": round(snapshot_s, 3), "async_updates_during_commit": n,
                    "async_updates_s": round(overlapped, 3), "async_blocking_wait_s": round(wait_s, 3),
                    "async_had_to_block": blocked, "async_stall_s": round(stall, 3),
                    "async_stall_over_sync": round(stall / sync_s, 4),
                    "async_background_objects_s": last.get("objects_s"), "async_background_install_s": last.get("install_s"),
                    "async_background_bytes_per_s": round(total / background_s) if background_s else None,
                    "snapshot_bytes_per_s": round(last["snapshot_bytes"] / snapshot_s) if snapshot_s else None,
                    "async_full_root": last["full_root"], "target_stall_over_sync": 0.10})
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return out


def store_base() -> Path:
    """The candidate directory with the most free disk (the learned state is ~20 GB at 1.7B)."""
    return roomiest_directory(os.environ.get("KIT_BENCH_STORE"), tempfile.gettempdir(), REPO)


# --- (3) the planner's estimate against measurement ----------------------------------------------------
class SimulatedPeers(Group):
    """Stands in for the other ranks on one device: a receive yields a random tensor of the expected
    shape (input activations or output gradients), a send is held until `wait_sends` as an NCCL
    isend buffer would be, collectives are the identity. Records allocated bytes at each receive."""

    def __init__(self, rank: int, world: int, device):
        super().__init__(rank, world, device)
        self.allocated_at_recv: list[int] = []

    def isend(self, tensor, dst):
        self._pending.append((None, tensor.detach().contiguous()))

    def recv(self, shape, dtype, src):
        if self.device.type == "cuda":
            self.allocated_at_recv.append(torch.cuda.memory_allocated())
        return torch.randn(shape, device=self.device).to(dtype)

    def wait_sends(self):
        self._pending.clear()

    def allreduce_sum_(self, tensor):
        return tensor


def planner_check(shape: LlamaShape, micro: int, seq: int, n_micro: int, device, capacity: int,
                  compile_blocks: str) -> list[dict]:
    model = MemoryModel.gpu_bf16()
    mb = MicrobatchShape(batch=micro, seq_len=seq, in_flight=n_micro)
    p = plan(shape, [WorkerCapacity("gpu0", capacity), WorkerCapacity("gpu1", capacity)], mb, model)
    layout = Layout(tuple(p.ranges)).validate(shape.num_hidden_layers)
    records = make_records(shape, micro * n_micro, seq, (False, False, True, True), seed=4)
    rows = []
    for rank in range(layout.workers):
        free(device)
        student = build_stage(shape, layout, rank, device=device)
        reference = build_stage(shape, layout, rank, device=device)
        random_init(student, 10 + rank)
        random_init(reference, 20 + rank)
        reference.to(torch.bfloat16).requires_grad_(False)
        group = SimulatedPeers(rank, layout.workers, device)
        eng = build_worker(group, layout, None, engine_config(micro, compile_blocks), optimizer_groups(),
                           student=student, reference=reference).engine
        static = torch.cuda.memory_allocated() if device.type == "cuda" else None
        for _ in range(2):
            eng.update(records)
        sync(device)
        est = p.estimates[rank]
        measured = torch.cuda.max_memory_allocated() if device.type == "cuda" else None
        row = {"row": "planner", "workers": layout.workers, "rank": rank, "blocks": list(layout.ranges[rank]),
               "owns_embedding": rank == layout.embedding_owner, "microbatch": [micro, seq],
               "in_flight": n_micro, "estimate_bytes": est.total, "estimate_components": est.components,
               "measured_peak_bytes": measured, "static_bytes": static,
               "max_allocated_at_recv_bytes": max(group.allocated_at_recv, default=None)}
        if measured:
            row["error"] = round((est.total - measured) / measured, 4)
        rows.append(row)
        del eng, student, reference, group
    free(device)
    return rows


def single_worker_estimate(shape: LlamaShape, micro: int, seq: int) -> dict:
    est = estimate_worker(shape, range(shape.num_hidden_layers), True, MicrobatchShape(micro, seq, 1),
                          MemoryModel.gpu_bf16())
    return {"estimate_bytes": est.total, "estimate_components": est.components}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--tiny", action="store_true", help="toy shape: checks the script (CPU works)")
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--seq", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--run-id", default=None, help="run id of the record (default bench-update-<date>)")
    ap.add_argument("--sections", default=",".join(SECTIONS), help="comma list of " + ", ".join(SECTIONS))
    ap.add_argument("--planner-microbatches", type=int, default=2)
    ap.add_argument("--profile", action="store_true", help="profile one kit update (kit_profile.txt)")
    ap.add_argument("--trace", action="store_true", help="with --profile: also its timeline (kit_trace.json.gz)")
    ap.add_argument("--fast-paths", choices=("auto", "on"), default="auto",
                    help="the engine's fast paths in the kit rows: auto (on CUDA only, the engine default) or on")
    ap.add_argument("--levers", choices=("default", "off", "on"), default="default",
                    help="issue 54's levers (compiled loss, Adam steps on the device, graph capture) in the headline: "
                         "as EngineConfig ships them (default), all off or all on")
    ap.add_argument("--sdpa-backends", default="flash,cudnn,efficient",
                    help="kit_sdpa: comma list of " + ", ".join(SDPA_BACKENDS))
    ap.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "build" / "bench-update"))
    a = ap.parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    kit.numerics.apply(device)  # the kit's update commits and hashes: under the profile `kit adaptive train` uses
    shape = toy_shape() if a.tiny else smollm2_17b()
    seq = a.seq or (64 if a.tiny else 2048)
    sections = [s for s in a.sections.split(",") if s] + (["profile"] if a.profile else [])
    unknown = sorted(set(sections) - set(SECTIONS) - {"profile"})
    if unknown:
        ap.error(f"--sections: unknown {unknown}; choose from {', '.join(SECTIONS)}")
    backends = [b for b in a.sdpa_backends.split(",") if b]
    if sorted(set(backends) - set(SDPA_BACKENDS)) or not backends:
        ap.error(f"--sdpa-backends: {a.sdpa_backends!r}; expected a comma list of {', '.join(SDPA_BACKENDS)}")
    fast = {k: a.fast_paths for k in FAST_PATHS}  # the headline's switches
    # --levers default: each lever as the engine ships it (compiled_loss "auto")
    shipped = {f.name: f.default for f in dataclasses.fields(EngineConfig)}
    fast.update({k: shipped[k] if a.levers == "default" else a.levers for k in LEVERS})
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    results, status, errors = [], "completed", []
    half = (False, False, True, True) if a.micro == 4 else tuple(i >= a.micro // 2 for i in range(a.micro))
    with open(out_dir / "update_throughput.jsonl", "w") as sink:
        emit({"row": "environment", "versions": versions(runtime=True), "device": device_info(device),
              "shape": shape.to_hf_dict()}, sink)
        baseline = kit_row = None

        def section(name, fn):
            nonlocal status
            if name not in sections:
                return None
            free(device)
            try:
                rows = fn()
            except Exception as e:  # noqa: BLE001 -- record and go on: one failing section must not hide the others
                status = "failed"
                errors.append({"section": name, "error": repr(e)[:2000]})
                emit({"row": name, "error": repr(e)[:2000]}, sink)
                return None
            for r in rows if isinstance(rows, list) else [rows]:
                results.append(emit(r, sink))
            return rows

        ceiling_row = section("ceiling", lambda: measure_matmul_ceiling(device))
        ceiling = (ceiling_row or {}).get("matmul_bf16_flops")
        baseline = section("baseline", lambda: run_baseline(shape, a.micro, seq, a.warmup, a.steps, device,
                                                            ceiling=ceiling))
        compiled = section("baseline_compiled", lambda: run_baseline(shape, a.micro, seq, a.warmup, a.steps, device,
                                                                     compiled=True, ceiling=ceiling))
        holder = {}

        def kit_section(compile_blocks, name, replay, keep=False, clip_on_device="auto", switches=None):
            eng = build_kit(shape, a.micro, device, compile_blocks, clip_on_device, fast if switches is None else switches)
            static = allocated_gib(device)
            row = run_kit(name, eng, shape, a.micro, seq, replay, a.warmup, a.steps, device, ceiling)
            row["static_gib"] = static
            if keep:
                row.update({"planner_" + k: v for k, v in single_worker_estimate(shape, a.micro, seq).items()})
                if device.type == "cuda":
                    row["planner_error"] = round((row["planner_estimate_bytes"] - torch.cuda.max_memory_allocated())
                                                 / torch.cuda.max_memory_allocated(), 4)
                    row["peak_bytes"] = torch.cuda.max_memory_allocated()
                holder.update(eng=eng, step_s=row["step_s"])
            return row

        # The headline: equal work (a teacher forward on every record, CE + KL), as both baselines do.
        kit_row = section("kit", lambda: kit_section("auto", "kit_equal_work", (True,) * a.micro, keep=True))
        if kit_row:
            head = {"row": "headline", "work": kit_row["work"], "kit_tokens_per_s": kit_row["tokens_per_s"],
                    "kit_mfu_executed": kit_row["mfu_executed"],
                    "kit_mfu_executed_vs_matmul_ceiling": kit_row["mfu_executed_vs_matmul_ceiling"],
                    "targets": {"over_compiled": 1.30, "mfu_executed": 0.55, "peak": "<= eager baseline"}}
            for label, ref in (("eager", baseline), ("compiled", compiled)):
                if ref:
                    head[f"kit_over_{label}_baseline"] = round(kit_row["tokens_per_s"] / ref["tokens_per_s"], 3)
                    head[f"kit_peak_over_{label}_peak"] = (round(kit_row["peak_gib"] / ref["peak_gib"], 3)
                                                           if ref["peak_gib"] else None)
            results.append(emit(head, sink))
        if "eng" in holder:
            if a.profile:
                section("profile", lambda: profile_update(holder["eng"], shape, a.micro, seq, (True,) * a.micro,
                                                          out_dir, a.trace))
            section("norm_check", lambda: norm_check(holder["eng"], shape, a.micro, seq, (True,) * a.micro))
            section("commit", lambda: commit_bench(holder["eng"], shape, a.micro, seq, (True,) * a.micro,
                                                   store_base(), holder["step_s"]))
            section("checkpoint", lambda: checkpoint_bench(holder["eng"], shape, store_base()))
            holder.clear()
        # A second row, NOT equal work: the teacher runs on half of the records only.
        section("kit_mixed", lambda: kit_section("auto", "kit_mixed_work", half))
        capacity = (torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else 64 * GIB)
        section("planner", lambda: planner_check(shape, a.micro, seq, a.planner_microbatches, device, capacity,
                                                 "auto"))
        section("kit_eager", lambda: kit_section("off", "kit_eager_equal_work", (True,) * a.micro))
        # Before/after of the device-side clip factor (kit/train/device_clip.py): the headline's engine
        # with the factor computed on the host, one sync per update (the code before issue 18's change).
        section("kit_host_clip", lambda: kit_section("auto", "kit_equal_work_host_clip", (True,) * a.micro,
                                                     clip_on_device="off"))
        # Before/after of the fast paths, in this process: all off (the code before them), then each alone off.
        every = (True,) * a.micro
        section("kit_before", lambda: kit_section("auto", "kit_equal_work_before", every,
                                                  switches={k: "off" for k in FAST_PATHS}))
        for piece, name in FAST_PATHS.items():
            section(name, lambda piece=piece, name=name: kit_section(
                "auto", name.replace("kit_", "kit_equal_work_", 1), every, switches={**fast, piece: "off"}))
        section("kit_sdpa", lambda: sdpa_rows(kit_section, backends, every, device))
        # Issue 54's levers, each flipped alone against the headline, then all on, in this process.
        for lever, name in LEVERS.items():  # flipped from its state in the headline on this device
            flip = "off" if fast[lever] == "on" or (fast[lever] == "auto" and device.type == "cuda") else "on"
            section(name, lambda lever=lever, flip=flip: kit_section(
                "auto", f"kit_equal_work_{lever}_{flip}", every, switches={**fast, lever: flip}))
        section("kit_levers", lambda: kit_section("auto", "kit_equal_work_levers", every,
                                                  switches={**fast, **{k: "on" for k in LEVERS}}))
    ended = dt.datetime.now(dt.UTC)
    record = {
        "format": "kit-bench/1",
        "run_id": a.run_id or f"bench-update-{started.strftime('%Y-%m-%d')}",
        "notebook": None,
        "command": " ".join(["python", *([sys.argv[0]] if argv is None else ["bench/update_throughput.py"]),
                             *(sys.argv[1:] if argv is None else argv)]),
        "parameters": {"shape": shape.to_hf_dict(), "micro": a.micro, "seq": seq, "warmup": a.warmup,
                       "steps": a.steps, "sections": sections, "planner_microbatches": a.planner_microbatches,
                       "lr": LR, "betas": list(BETAS), "eps": EPS, "weight_decay": WEIGHT_DECAY,
                       "max_grad_norm": MAX_NORM, "peak_flops": PEAK_FLOPS, "tiny": a.tiny,
                       "matmul_ceiling_flops": ceiling, "fast_paths": a.fast_paths, "levers": a.levers, "sdpa_backends": backends,
                       "trace": a.trace},
        "git": code_state(),
        "versions": versions(runtime=True),
        "device": device_info(device),
        "status": status,
        "errors": errors,
        "started_at": started.isoformat(timespec="seconds"),
        "ended_at": ended.isoformat(timespec="seconds"),
        "duration_s": round((ended - started).total_seconds(), 1),
        "results": results,
        "raw_output": "update_throughput.jsonl",
    }
    (out_dir / "run.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return 0 if status == "completed" else 1


if __name__ == "__main__":
    raise SystemExit(main())
