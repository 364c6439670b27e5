"""Why an arm's first update costs what it costs: the same arm run three times on one GPU host, each in
its own copy of one prepared study, under different on-disk compile caches.

    cold    TORCHINDUCTOR_CACHE_DIR = a new, empty folder A
    warm    the same folder A, now holding what `cold` compiled
    fresh   a second new, empty folder B

If the first update's seconds fall from `cold` to `warm` and come back in `fresh`, the first update's
one-time cost is the compile of the blocks, and an arm that runs after another one with the same
shapes on the same host (the medium study's PowerSGD after dense: runs/medium-campaign-2026-12-01-b)
finds it already paid. The later updates are the control: they should not move.

    PYTHONPATH=. python3 bench/study_first_update.py --seed SEED --work /tmp/sfu --out $OUT/sfu

The seed is any built seed whose digest the contract pins (`kit seed build --scale small --device cuda`
for the medium contract). Writes RUN_DIR/run.json (kit-bench/1) and prints its results.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from kit.digest import load_json_strict
from kit.evidence.environment import code_state, device_info, versions

REPO = Path(__file__).resolve().parents[1]

RUNS = ("cold", "warm", "fresh")


def _arm(study: Path, seed: str, arm: str, until: int, cache: Path) -> dict:
    """One `kit study arm` process with its own inductor cache folder; its record's timings."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO)}
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "kit", "study", "arm", arm, "--study", str(study), "--seed", seed,
                           "--until", str(until)], env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"kit study arm {arm} in {study}: exit {done.returncode}\n{done.stderr[-3000:]}")
    rec = load_json_strict(study / "arms" / arm / "arm.json")
    m = rec.get("measurement") or {}
    seconds = [u["seconds"] for u in rec.get("updates") or rec.get("loss_curves") or []]
    return {"status": rec["status"], "process_wall_s": round(wall, 3),
            "first_update_s": m.get("first_update_seconds"), "setup_s": m.get("setup_seconds"),
            "later_update_mean_s": (m["steady_state_seconds"] / m["steady_state_updates"]
                                    if m.get("steady_state_updates") else None),
            "update_seconds": seconds, "cache_files": sum(1 for p in cache.rglob("*") if p.is_file())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--seed", required=True)
    ap.add_argument("--contract", default=str(REPO / "contracts" / "shared-gradient.medium.json"))
    ap.add_argument("--source", default=str(REPO / "data" / "alpaca_5000.json"))
    ap.add_argument("--arm", default="single", choices=["single", "dense", "powersgd"])
    ap.add_argument("--until", type=int, default=8, help="updates per run: the first, and later ones to compare")
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "build" / "study-first-update"))
    ap.add_argument("--run-id", default=None)
    a = ap.parse_args(argv)
    work = Path(a.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    started = dt.datetime.now(dt.UTC)
    prep = subprocess.run([sys.executable, "-m", "kit", "study", "prepare", "--contract", a.contract, "--seed",
                           a.seed, "--public-source", a.source, "--out", str(work / "prepared")],
                          env={**os.environ, "PYTHONPATH": str(REPO)},  # the ledger: the repository's (read only:
                          # the probes must have been exposed; preparing scores nothing)
                          capture_output=True, text=True, check=False)
    if prep.returncode != 0:
        raise SystemExit(f"kit study prepare: exit {prep.returncode}\n{prep.stderr[-3000:]}")
    caches = {"cold": work / "cache-A", "warm": work / "cache-A", "fresh": work / "cache-B"}
    results = {}
    for name in RUNS:  # in this order: warm reads what cold wrote
        study = work / f"study-{name}"
        shutil.copytree(work / "prepared", study)
        results[name] = _arm(study, a.seed, a.arm, a.until, caches[name])
        print(json.dumps({name: {k: v for k, v in results[name].items() if k != "update_seconds"}}), flush=True)
    cold, warm = results["cold"]["first_update_s"], results["warm"]["first_update_s"]
    run_id = a.run_id or f"bench-study-first-update-{started.strftime('%Y-%m-%d')}"
    run_dir = Path(a.out) / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    import torch

    record = {
        "format": "kit-bench/1", "run_id": run_id, "notebook": "(benchmark script)",
        "command": " ".join(["python", "bench/study_first_update.py", *(sys.argv[1:] if argv is None else argv)]),
        "git": code_state(),
        "versions": versions(runtime=True),
        "parameters": {"arm": a.arm, "until": a.until, "contract": Path(a.contract).name,
                       "contract_sha256": hashlib.sha256(Path(a.contract).read_bytes()).hexdigest(),
                       "caches": {k: v.name for k, v in caches.items()},
                       "script_sha256": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()},
        "status": "completed",
        "started_at": started.isoformat(timespec="seconds"),
        "ended_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": device_info(torch.device("cuda" if torch.cuda.is_available() else "cpu")),
        "results": {"runs": results,
                    "first_update_warm_over_cold": (warm / cold) if cold and warm is not None else None},
    }
    (run_dir / "run.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(json.dumps({"run_dir": str(run_dir), "first_update_s": {k: results[k]["first_update_s"] for k in RUNS},
                      "later_update_mean_s": {k: results[k]["later_update_mean_s"] for k in RUNS},
                      "first_update_warm_over_cold": record["results"]["first_update_warm_over_cold"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
