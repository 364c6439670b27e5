"""The shared-gradient study's `single` arm at full scale on one GPU, with random weights.

Run on the GPU host (one H200): `python bench/study_single_arm.py` (outputs under $OUT when set,
else under --out). In one process it

  1. builds a seed directory with SmolLM2-1.7B's shape (bench/update_throughput.py's values) and
     random weights under a temporary directory: every norm weight 1, every other tensor
     N(0, 0.02) from a generator seeded by (seed, tensor name), stored in bfloat16 as SmolLM2's
     own safetensors are; the tokenizer is a byte-level BPE built by kit.data.tokenizer_build
     (capped at the model's 49,152 ids) on synthetic conversations, generated tasks and records
     2048-3999 of the pinned public source (a range neither the replay 0-2047 nor the retention
     4000-4999 uses), so documents get English-like token counts. Its ids only need to be below
     the vocabulary; nothing here measures quality;
  2. prepares a study from the FULL contract contracts/shared-gradient.json, unchanged (3,072 tasks
     + 1,024 replay documents, 128 updates of 32 documents, 1,024-token cap, microbatch 4);
  3. runs the `single` arm through kit.study.arms.run_arm with `until` = --until (default 6): the
     worker process, torch.compile of the blocks on CUDA, bfloat16 autocast over FP32 master
     weights and the commit at the stop, exactly as `kit study arm single --until K` does; the arm
     is recorded "partial";
  4. attempts `dense` and `powersgd` through the same run_arm: with contract device "cuda" and
     torch.cuda.device_count() below 2, run_arm records them "unavailable" with that reason and
     never launches them. This script never launches a pair arm: on a host with enough GPUs it
     records them "not attempted" instead (use `kit study arm` there);
  5. writes run.json (format "kit-bench/1") and the raw arm records beside it.

`--tiny` swaps in a toy model shape and a copy of the contract with device "cpu" (everything else
unchanged), to check the script on a CPU; its record says so and is no evidence of speed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.update_throughput import device_info, git_commit, smollm2_17b, store_base, versions
from kit.data.chat import load_tokenizer
from kit.data.conversations import instruction_source_range, synthetic_conversations
from kit.data.tasks import generate_set
from kit.data.tokenizer_build import SPECIAL_TOKEN_IDS, build_tokenizer
from kit.digest import load_json_strict, sha256_file, write_canonical_json
from kit.model.config import LlamaShape, RopeSpec
from kit.model.llama import LlamaCausalLM
from kit.study.arms import ArmRequest, arm_dir, arm_statuses, availability, run_arm
from kit.study.prepare import PREPARED_DIR, prepare_study
from kit.study.schema import arm_spec, load_study_contract

CONTRACT = REPO / "contracts" / "shared-gradient.json"
SOURCE_CANDIDATES = (REPO / "data" / "alpaca_5000.json",)  # carried by the repository (data/SOURCE.md)
PAIR_ARMS = ("dense", "powersgd")
INIT_SEED, INIT_STD = 0, 0.02
TOKENIZER_SYNTHETIC = 4000  # synthetic conversations in the tokenizer's training text
TOKENIZER_TASKS = 1000  # generated tasks of a role no study set uses
TOKENIZER_TASK_ROLE = "bench-tokenizer"
WEIGHTS_DTYPE = torch.bfloat16


def tiny_shape(vocab: int) -> LlamaShape:
    """A toy shape with the full tokenizer's vocabulary (the prepared token ids must fit it)."""
    return LlamaShape(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, head_dim=16, rms_norm_eps=1e-5,
                      max_position_embeddings=2048, tie_word_embeddings=True, rope=RopeSpec(theta=130000.0))


# --- 1. the seed directory ----------------------------------------------------------------------
def tokenizer_texts(contract, source: Path) -> list[str]:
    """Synthetic chat, generated tasks, and the public source's records between the replay range and
    the retention range (neither is used to train the tokenizer)."""
    d = contract["data"]
    rep, ret = d["replay"]["source"], d["retention"]["source"]
    if rep["stop"] >= ret["start"]:
        raise ValueError(f"{contract.path}: replay range ends at {rep['stop']}, retention starts at {ret['start']}; "
                         "expected a gap between them for the tokenizer's text")
    between = instruction_source_range(source, rep["sha256"], rep["stop"], ret["start"], rep["name"])
    texts = [m.content for c in synthetic_conversations(TOKENIZER_SYNTHETIC, INIT_SEED) for m in c.messages]
    texts += [t for ex in generate_set(TOKENIZER_TASKS, INIT_SEED, TOKENIZER_TASK_ROLE, d["tasks"]["difficulty"])
              for t in (ex.prompt, ex.answer)]
    texts += [m.content for c in between.conversations for m in c.messages]
    return texts


def seeded_normal(name: str, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """N(0, INIT_STD) from a generator seeded by (INIT_SEED, name), drawn on `device`."""
    seed = (INIT_SEED * 1_000_003 + int(hashlib.sha256(name.encode()).hexdigest()[:12], 16)) % (2**63)
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(shape, generator=gen, device=device) * INIT_STD


def build_seed_dir(seed_dir: Path, contract, source: Path, tiny: bool, device: torch.device) -> dict:
    """config.json, model.safetensors (random, bfloat16) and the tokenizer files; returns what was built."""
    from safetensors.torch import save_file

    t0 = time.perf_counter()
    full = smollm2_17b()
    build_tokenizer(tokenizer_texts(contract, source), full.vocab_size, seed_dir,
                    model_max_length=full.max_position_embeddings)
    tokenizer_vocab = len(load_tokenizer(seed_dir))  # also checks the chat template and the fast tokenizer
    t_tok = time.perf_counter() - t0
    ids = {"bos_token_id": SPECIAL_TOKEN_IDS["<|im_start|>"], "eos_token_id": SPECIAL_TOKEN_IDS["<|im_end|>"],
           "pad_token_id": SPECIAL_TOKEN_IDS["<|endoftext|>"]}
    shape = replace(tiny_shape(full.vocab_size) if tiny else full, **ids)
    if tokenizer_vocab > shape.vocab_size:
        raise ValueError(f"{seed_dir}: tokenizer has {tokenizer_vocab} ids; the model's vocab_size is {shape.vocab_size}")
    (seed_dir / "config.json").write_text(json.dumps(shape.to_hf_dict(), indent=2, sort_keys=True) + "\n")
    with torch.device("meta"):
        names = [(n, tuple(p.shape)) for n, p in LlamaCausalLM(shape).named_parameters()]
    tensors = {}
    for name, dims in names:  # tied embeddings: no lm_head.weight, as Hugging Face stores it
        t = torch.ones(dims, device=device) if name.endswith("norm.weight") else seeded_normal(name, dims, device)
        tensors[name] = t.to(WEIGHTS_DTYPE).cpu().contiguous()
    save_file(tensors, str(seed_dir / "model.safetensors"), metadata={"format": "pt"})
    n_params = sum(t.numel() for t in tensors.values())
    return {"dir": str(seed_dir), "shape": shape.to_hf_dict(), "params": n_params,
            "weights": {"file": "model.safetensors", "dtype": str(WEIGHTS_DTYPE).removeprefix("torch."),
                        "bytes": (seed_dir / "model.safetensors").stat().st_size,
                        "init": f"norm weights 1; every other tensor N(0, {INIT_STD}) from a torch generator on "
                                f"{device.type} seeded by ({INIT_SEED}, sha256 of its name)"},
            "tokenizer": {"vocab": tokenizer_vocab, "cap": full.vocab_size,
                          "built_by": "kit.data.tokenizer_build.build_tokenizer",
                          "text": f"{TOKENIZER_SYNTHETIC} synthetic conversations (seed {INIT_SEED}), "
                                  f"{TOKENIZER_TASKS} generated tasks (role {TOKENIZER_TASK_ROLE!r}), public source "
                                  f"records between the replay and retention ranges",
                          "note": "not SmolLM2's tokenizer: token ids only need to be < vocab_size for a "
                                  "throughput measurement; token counts per document differ from SmolLM2's",
                          "seconds": round(t_tok, 2)},
            "seconds": round(time.perf_counter() - t0, 2)}


# --- 2-4. prepare, the single arm, the pair arms -------------------------------------------------
def contract_for_run(tiny: bool, work: Path) -> tuple[Path, list[str]]:
    """A copy of the full contract with the changes this speed measurement needs, and those changes:
    the retention probes are not required to be already exposed (`data.retention.exposed` false), since a
    fresh GPU host's exposure ledger is empty (this run uses its own, under the work directory) and the
    probes' quality is not measured here; with --tiny also device "cpu"."""
    data = load_json_strict(CONTRACT)
    changes = []
    if data["data"]["retention"].get("exposed"):
        data["data"]["retention"]["exposed"] = False
        changes.append("data.retention.exposed: true -> false (empty exposure ledger of the run's own; "
                       "speed only, probes never scored)")
    if tiny:
        data["device"] = "cpu"
        changes.append(f"device: {load_json_strict(CONTRACT)['device']!r} -> 'cpu' (--tiny: checks the script)")
    path = work / ("shared-gradient.cpu-debug.json" if tiny else "shared-gradient.speed.json")
    write_canonical_json(path, data)
    return path, changes


def attempt_pair_arm(study: Path, contract, arm: str, seed_dir: Path, until: int, run_pairs: bool = False,
                     threads: int = 1) -> dict:
    """run_arm for a pair arm where availability() says it cannot run here (recorded unavailable, never
    launched); where it can, run it with `run_pairs` (--pair-arms), else leave it ("not attempted")."""
    missing = availability(contract, arm_spec(contract, arm))
    if missing is None and run_pairs:
        rec = run_arm(ArmRequest(study, arm, seed_dir, until=until, threads=threads))
        return {"arm": arm, "status": rec["status"], "reason": rec["reason"],
                "results": single_results(rec, contract["schedule"]["updates"])}
    if missing is None:
        return {"arm": arm, "status": "not attempted",
                "reason": "this host can run it; bench/study_single_arm.py runs only the single arm "
                          f"(use `kit study arm {arm}`)"}
    rec = run_arm(ArmRequest(study, arm, seed_dir, until=until))
    if rec["status"] != "unavailable":
        raise RuntimeError(f"arm {arm!r}: expected status 'unavailable' from run_arm, got {rec['status']!r}")
    return {"arm": arm, "status": rec["status"], "reason": rec["reason"]}


def single_results(rec: dict, contract_updates: int, warmup: int = 2) -> dict:
    """One arm's numbers. Steady state: the updates after the first `warmup` (compilation and the
    attention plans of new lengths land there), reported apart from the first update."""
    m = rec.get("measurement") or {}
    ups = rec.get("updates") or []
    secs = [u["seconds"] for u in ups]
    later = secs[1:]
    steady = ups[warmup:]
    steady_s = sum(u["seconds"] for u in steady)
    return {
        "warmup_updates": warmup, "steady_updates": len(steady),
        "steady_seconds_per_update": steady_s / len(steady) if steady else None,
        "steady_input_tokens_per_s": (sum(u["input_tokens"] for u in steady) / steady_s) if steady_s else None,
        "steady_target_tokens_per_s": (sum(u["target_tokens"] for u in steady) / steady_s) if steady_s else None,
        "status": rec["status"], "reason": rec["reason"], "until": rec["until"], "contract_updates": contract_updates,
        "updates_run": len(ups), "device": m.get("device"), "devices": m.get("devices"),
        "input_tokens": m.get("input_tokens"), "target_tokens": m.get("target_tokens"),
        "active_seconds": m.get("active_seconds"),
        "active_tokens_per_s": m.get("active_tokens_per_s"),
        "active_tokens_per_s_after_first_update": m.get("active_tokens_per_s_after_first_update"),
        "active_target_tokens_per_s": m.get("active_target_tokens_per_s"),
        "first_update_seconds": secs[0] if secs else None,
        "mean_update_seconds_after_first": sum(later) / len(later) if later else None,
        "checkpoint_seconds": m.get("checkpoint_seconds"),
        "setup_seconds": m.get("setup_seconds"),
        "wall_seconds": m.get("wall_seconds"),
        "gpu_seconds_per_update": m.get("gpu_seconds_per_update"),
        "active_gpu_seconds_per_update": m.get("active_gpu_seconds_per_update"),
        "rule": m.get("rule"),
        "per_update": [{k: u[k] for k in ("step", "seconds", "input_tokens", "target_tokens", "documents",
                                          "objective", "grad_norm", "clip_factor")} for u in ups],
        "commits": [{"step": c["step"], "seconds": c["seconds"], "full_root": c["full_root"],
                     "learned_state_root": c["learned_state_root"]} for c in rec.get("commits") or []],
    }


def copy_raw(study: Path, run_dir: Path) -> list[str]:
    """The raw records beside run.json: each arm's record (per update, per commit), prepared.json and
    the single worker's log."""
    names = []
    for arm in ("single", *PAIR_ARMS):
        src = arm_dir(study, arm) / "arm.json"
        if src.exists():
            shutil.copyfile(src, run_dir / f"{arm}_arm.json")
            names.append(f"{arm}_arm.json")
    logs = [(arm_dir(study, arm) / "run" / "worker-0.log", f"{arm}_worker-0.log") for arm in ("single", *PAIR_ARMS)]
    for src, name in ((study / PREPARED_DIR / "prepared.json", "prepared.json"), *logs):
        if src.exists():
            shutil.copyfile(src, run_dir / name)
            names.append(name)
    return names


def main(argv=None) -> int:
    from kit import numerics

    numerics.apply()  # this process hashes seeds and reads roots: under the kit's numeric profile
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiny", action="store_true", help="toy shape and a CPU copy of the contract: checks the script")
    ap.add_argument("--until", type=int, default=6, help="updates of the single arm (recorded partial)")
    ap.add_argument("--pair-arms", action="store_true",
                    help="also run the dense and powersgd arms where this host has the GPUs for them")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the arm's worker (the study's default)")
    ap.add_argument("--source", default=os.environ.get("KIT_STUDY_SOURCE"),
                    help="the pinned public source alpaca_5000.json (default: data/alpaca_5000.json in the repository)")
    ap.add_argument("--workdir", default=None, help="where the temporary seed and study go (default: most free disk)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary seed and study")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "build" / "study-single-arm"))
    a = ap.parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    t_start = time.perf_counter()
    run_id = f"study-single-arm-{started.strftime('%Y-%m-%d')}" + ("-tiny" if a.tiny else "")
    run_dir = Path(a.out) / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    source = Path(a.source) if a.source else next((p for p in SOURCE_CANDIDATES if p.is_file()), None)
    if source is None or not source.is_file():
        raise SystemExit(f"public source not found (tried {a.source or [str(p) for p in SOURCE_CANDIDATES]}); "
                         "pass --source")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    work = Path(tempfile.mkdtemp(prefix="kit-study-single-", dir=a.workdir or store_base()))
    seed_dir, study = work / "seed", work / "study"
    seed_dir.mkdir()
    errors, results, phases, raw = [], {}, {}, []
    status = "completed"
    contract_path, contract_changes = contract_for_run(a.tiny, work)
    contract = load_study_contract(contract_path)
    try:
        results["seed"] = build_seed_dir(seed_dir, contract, source, a.tiny, device)
        phases["seed_build"] = results["seed"]["seconds"]
        t0 = time.perf_counter()
        prepared = prepare_study(contract_path, seed_dir, source, study, ledger=work / "exposed.jsonl")
        phases["prepare"] = round(time.perf_counter() - t0, 2)
        results["prepare"] = {"counts": prepared["counts"], "exclusions": prepared["exclusions"],
                              "contract_digest": prepared["contract"]["digest"], "seconds": phases["prepare"]}
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the worker process needs the GPU, not this one
        t0 = time.perf_counter()
        single = run_arm(ArmRequest(study, "single", seed_dir, until=a.until, threads=a.threads))
        phases["single_arm_call"] = round(time.perf_counter() - t0, 2)
        results["single"] = single_results(single, contract["schedule"]["updates"])
        if single["status"] != "partial" or len(single.get("updates") or []) != a.until:
            status = "failed"
            errors.append({"phase": "single", "error": f"status {single['status']!r}: {single['reason']}"})
        t0 = time.perf_counter()
        results["pair_arm_attempts"] = [attempt_pair_arm(study, contract, arm, seed_dir, a.until, a.pair_arms, a.threads)
                                        for arm in PAIR_ARMS]
        base = results["single"].get("steady_seconds_per_update")
        for att in results["pair_arm_attempts"]:
            r = att.get("results") or {}
            if base and r.get("steady_seconds_per_update"):
                # the study's speed ratio: single's seconds per update over the pair arm's, steady state
                att["speed_ratio_vs_single"] = base / r["steady_seconds_per_update"]
                att["link"] = ("NVLink between two GPUs of one host (NCCL); not the seed's cross-zone network"
                               if device.type == "cuda" else "loopback (gloo)")
        phases["pair_arm_calls"] = round(time.perf_counter() - t0, 3)
        results["arms"] = [{k: s[k] for k in ("arm", "workers", "reduction", "status", "reason", "attempts")}
                           for s in arm_statuses(study, contract)]
        for s in results["arms"]:  # arms run() refused stay visible with their reason, never as run
            ok = ("unavailable", "not run") + (("partial",) if a.pair_arms else ())
            if s["arm"] in PAIR_ARMS and s["status"] not in ok:
                status = "failed"
                errors.append({"phase": s["arm"], "error": f"pair arm status {s['status']!r}; expected one of {ok}"})
    except Exception as e:  # noqa: BLE001 -- the record must still be written, naming the failure
        status = "failed"
        errors.append({"phase": "script", "error": f"{type(e).__name__}: {e}"[:4000]})
    finally:
        if study.exists():
            raw = copy_raw(study, run_dir)
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    phases["script_wall"] = round(time.perf_counter() - t_start, 2)
    results["phases_seconds"] = phases
    results["host_cuda_devices"] = torch.cuda.device_count()
    ended = dt.datetime.now(dt.UTC)
    record = {
        "format": "kit-bench/1",
        "run_id": run_id,
        "notebook": None,
        "command": " ".join(["python", "bench/study_single_arm.py", *(sys.argv[1:] if argv is None else argv)]),
        "parameters": {"contract": str(CONTRACT.relative_to(REPO)), "contract_digest": contract.digest,
                       "contract_device": contract["device"],
                       "contract_changes": contract_changes, "until": a.until, "threads": a.threads,
                       "pair_arms": a.pair_arms,
                       "compile_blocks": "auto", "tiny": a.tiny,
                       "tiny_note": ("toy shape and a contract copy with device 'cpu': checks the script only"
                                     if a.tiny else None),
                       "source": {"name": source.name, "sha256": sha256_file(source)},
                       "script_sha256": sha256_file(Path(__file__))},
        "git": git_commit(),
        "versions": versions(),
        "device": device_info(device),
        "status": status,
        "errors": errors,
        "started_at": started.isoformat(timespec="seconds"),
        "ended_at": ended.isoformat(timespec="seconds"),
        "duration_s": round((ended - started).total_seconds(), 1),
        "results": results,
        "raw_output": raw,
    }
    (run_dir / "run.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    s = results.get("single") or {}
    print(json.dumps({"run_dir": str(run_dir), "run_status": status, "errors": errors,
                      **{k: s.get(k) for k in ("status", "active_tokens_per_s", "active_tokens_per_s_after_first_update",
                                               "checkpoint_seconds", "wall_seconds", "gpu_seconds_per_update")},
                      "arms": [(r["arm"], r["status"]) for r in results.get("arms", [])],
                      "steady_s_per_update": {"single": s.get("steady_seconds_per_update"),
                                              **{p["arm"]: (p.get("results") or {}).get("steady_seconds_per_update")
                                                 for p in results.get("pair_arm_attempts", [])}},
                      "speed_ratios": {p["arm"]: p.get("speed_ratio_vs_single")
                                       for p in results.get("pair_arm_attempts", [])},
                      "phases_seconds": phases}, default=str))
    return 0 if status == "completed" else 1


if __name__ == "__main__":
    raise SystemExit(main())
