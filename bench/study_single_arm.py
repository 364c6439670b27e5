"""The shared-gradient study's `single` arm at full scale on one GPU, with random weights.

Run on the GPU host (one H200): `python bench/study_single_arm.py` (outputs under $OUT when set,
else under --out). In one process it

  1. builds a seed directory with SmolLM2-1.7B's shape (kit.seed.random_weights.build_random_seed) and
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
     no GPU, run_arm records them "unavailable" with that reason and never launches them. On a
     host with a GPU they can run (on one GPU their workers share it: the arm record's
     `shared_gpus`); without --pair-arms this script records them "not attempted" instead (use
     `kit study arm` there);
  5. writes run.json (format "kit-bench/1") and the raw arm records beside it.

`--tiny` swaps in a toy model shape and a copy of the contract with device "cpu" (everything else
unchanged), to check the script on a CPU; its record says so and is no evidence of speed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import kit.numerics

kit.numerics.apply()  # before torch computes: importing the model probes attention kernels with torch
import torch  # noqa: E402

from kit.digest import load_json_strict, sha256_file, write_canonical_json  # noqa: E402
from kit.evidence.environment import code_state, device_info, roomiest_directory, versions  # noqa: E402
from kit.seed.random_weights import build_random_seed  # noqa: E402
from kit.study.arms import ArmRequest, arm_dir, arm_statuses, availability, run_arm  # noqa: E402
from kit.study.prepare import PREPARED_DIR, prepare_study  # noqa: E402
from kit.study.schema import arm_spec, load_study_contract  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CONTRACT = REPO / "contracts" / "shared-gradient.json"
SOURCE_CANDIDATES = (REPO / "data" / "alpaca_5000.json",)  # carried by the repository (data/SOURCE.md)
PAIR_ARMS = ("dense", "powersgd")
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
    missing = availability(contract.terms, arm_spec(contract, arm))
    if missing is None and run_pairs:
        rec = run_arm(ArmRequest(study, arm, seed_dir, until=until, threads=threads))
        return {"arm": arm, "status": rec["status"], "reason": rec["reason"],
                "results": single_results(rec, contract.terms.schedule.updates)}
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
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
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
    work = Path(tempfile.mkdtemp(prefix="kit-study-single-", dir=a.workdir or roomiest_directory(os.environ.get("KIT_BENCH_STORE"), tempfile.gettempdir(), REPO)))
    seed_dir, study = work / "seed", work / "study"
    seed_dir.mkdir()
    errors, results, phases, raw = [], {}, {}, []
    status = "completed"
    contract_path, contract_changes = contract_for_run(a.tiny, work)
    contract = load_study_contract(contract_path)
    try:
        results["seed"] = build_random_seed(seed_dir, contract, source, device, toy_layers=2 if a.tiny else None)
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
        results["single"] = single_results(single, contract.terms.schedule.updates)
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
                           for s in arm_statuses(study, contract.terms)]
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
                       "contract_device": contract.terms.device,
                       "contract_changes": contract_changes, "until": a.until, "threads": a.threads,
                       "pair_arms": a.pair_arms,
                       "compile_blocks": "auto", "tiny": a.tiny,
                       "tiny_note": ("toy shape and a contract copy with device 'cpu': checks the script only"
                                     if a.tiny else None),
                       "source": {"name": source.name, "sha256": sha256_file(source)},
                       "script_sha256": sha256_file(Path(__file__))},
        "git": code_state(),
        "versions": versions(runtime=True),
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
