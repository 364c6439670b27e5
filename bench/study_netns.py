"""The tiny shared-gradient study across two emulated hosts (network namespaces, veth, tc tbf).

Run as root on a Linux CPU host: `python bench/study_netns.py --rate 1gbit --rate 50mbit`.
For each link rate it

  1. makes two namespaces joined by a veth pair and caps each direction with tbf (kit/distributed/netns.py:
     bandwidth only; latency is not emulated, this kernel has no netem);
  2. gives each namespace's rank its OWN copy of the seed and of the prepared study (a fresh pair of
     directories per rate; each rank is told only its own paths: nothing shared on disk);
  3. runs `kit study arm single` in namespace A (torchrun, one process), then `dense` and `powersgd`
     with one torchrun per namespace (`--nnodes 2 --node-rank R`, MASTER_ADDR = A's veth address,
     GLOO_SOCKET_IFNAME = that namespace's veth), so the pair talks only over the shaped veth;
  4. reads each namespace's /proc/net/dev around every arm (the orchestrator's view: startup and
     rendezvous included) beside the arm record's own per-rank deltas (update loop only, gathered
     to rank 0 over the process group) and the logical bytes each rank handed to collectives;
  5. computes the speed screen (kit.study.screens.speed_screen on the measured active throughput)
     and the traffic table from those measurements; with --evaluate also runs `kit study evaluate`
     and `kit study screens` in A's study (the quality screen; the endpoints live on A);
  6. writes runs/study-netns-<rate>-<date>/run.json (format "kit-bench/1") and the raw outputs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kit.digest import load_json_strict, sha256_file
from kit.distributed.netns import Link, available
from kit.evidence.environment import code_state, versions
from kit.study.schema import load_study_contract
from kit.study.screens import speed_screen

REPO = Path(__file__).resolve().parents[1]

CONTRACT = REPO / "contracts" / "shared-gradient.tiny.json"
SOURCE = REPO / "data" / "alpaca_5000.json"
RATES = {"1gbit": 1_000_000_000, "50mbit": 50_000_000, "100mbit": 100_000_000, "10mbit": 10_000_000}


def parse_rate(text: str) -> int:
    if text in RATES:
        return RATES[text]
    return int(text)


def _env(dev: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "KIT_RUN_DIR", "LOCAL_RANK")}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", KIT_PROGRESS="0")
    if dev:
        env["GLOO_SOCKET_IFNAME"] = dev
    return env


def kit_argv(arm: str, host_dir: Path, nnodes: int, node_rank: int, master: str, port: int,
             extra: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes), "--node-rank", str(node_rank),
            "--nproc-per-node", "1", "--master-addr", master, "--master-port", str(port), "--max-restarts", "0",
            "-m", "kit", "study", "arm", arm, "--study", str(host_dir / "study"), "--seed", str(host_dir / "seed"), *extra]


def run_arm_across(link: Link, arm: str, hosts: list[Path], port: int, timeout_s: float = 900,
                   extra: tuple[str, ...] = ()) -> dict:
    """Run one arm: `single` in namespace A only; a pair arm with one torchrun per namespace."""
    sides = [0] if arm == "single" else [0, 1]
    master = "127.0.0.1" if arm == "single" else link.addr[0]
    before = link.counters()
    load_before = os.getloadavg()
    t0 = time.time()
    procs = []
    for side in sides:
        argv = link.exec_argv(side, kit_argv(arm, hosts[side], len(sides), side, master, port, extra))
        procs.append((argv, subprocess.Popen(argv, env=_env(None if arm == "single" else link.dev[side]),
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    outs = []
    for argv, p in procs:
        try:
            out, err = p.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        outs.append({"argv": argv, "returncode": p.returncode, "stdout": out, "stderr": err[-20000:]})
    wall = time.time() - t0
    after = link.counters()
    wire = {}
    for ns, dev in zip(link.ns, link.dev):
        wire[ns] = {"interface": dev, **{k: after[ns][dev][k] - before[ns][dev][k] for k in ("rx_bytes", "tx_bytes")},
                    "lo": {k: after[ns]["lo"][k] - before[ns]["lo"][k] for k in ("rx_bytes", "tx_bytes")}}
    rec_path = hosts[0] / "study" / "arms" / arm / "arm.json"
    record = load_json_strict(rec_path) if rec_path.exists() else None
    return {"arm": arm, "processes": outs, "wall_seconds_orchestrator": wall, "wire_orchestrator": wire,
            "record": record, "loadavg_before_after": [list(load_before), list(os.getloadavg())]}


def arm_row(arm: str, run: dict, link: Link) -> dict:
    """One row of the traffic table from the measurements."""
    rec = run["record"] or {}
    m = rec.get("measurement") or {}
    n = m.get("updates") or 0
    logical = [r["sent_bytes_total"] for r in (rec.get("traffic") or {}).get("logical_per_rank", [])]
    in_arm = {}
    for r in (rec.get("traffic") or {}).get("interfaces_per_rank", []):
        ifs = r.get("interfaces", {})
        dev = link.dev[r["rank"]]
        if dev in ifs:
            in_arm[f"rank{r['rank']}"] = ifs[dev]
    hosts = rec.get("hosts") or []
    per_update = [max(h["update_seconds"][i] for h in hosts) for i in range(n)] if hosts else []
    wire = run["wire_orchestrator"]
    return {
        "arm": arm, "status": rec.get("status"), "updates": n,
        "active_seconds": m.get("active_seconds"), "wall_seconds": m.get("wall_seconds"),
        "seconds_per_update_active": (m["active_seconds"] / n) if n else None,
        "seconds_per_update_wall": (m["wall_seconds"] / n) if n else None,
        "seconds_per_update_steady": (sum(per_update[1:]) / (n - 1)) if n > 1 else None,
        "update_seconds_max_over_ranks": per_update,
        "active_tokens_per_s": m.get("active_tokens_per_s"),
        "logical_sent_bytes_per_rank": logical,
        "logical_gradient_bytes_per_update_after_warmup":
            [r.get("gradient_bytes_per_update_after_warmup") for r in (rec.get("traffic") or {}).get("logical_per_rank", [])],
        "wire_in_arm_per_rank": in_arm,
        "wire_tx_bytes_per_namespace": {ns: wire[ns]["tx_bytes"] for ns in wire},
        "wire_rx_bytes_per_namespace": {ns: wire[ns]["rx_bytes"] for ns in wire},
        "wire_over_logical_tx": ({ns: wire[ns]["tx_bytes"] / logical[i] for i, ns in enumerate(link.ns)
                                  if i < len(logical) and logical[i]} if logical else None),
        "cost_usd": (rec.get("cost") or {}).get("total_usd"),
        "loadavg_before_after": run["loadavg_before_after"],
    }


def exposure_ledger(path: Path, contract) -> Path:
    """A ledger in which an earlier final scoring exposed the tiny contract's retention range (the
    kit demo's adaptive scoring does this before its study; this bench runs the study alone). The
    bench measures speed and traffic; its quality screen is no evidence."""
    from kit.data.conversations import instruction_source_range
    from kit.evidence.ledger import record

    r = contract.terms.data.retention.source
    rng = instruction_source_range(SOURCE, r.sha256, r.start, r.stop, r.name)
    record([("retention.probe", c.digest, c.id) for c in rng.conversations], "cd" * 32, "ef" * 32,
           "stand-in for an earlier final scoring (bench/study_netns.py)", path)
    return path


def prepare_staging(work: Path, seed_cache: Path) -> Path:
    staging = work / "staging"
    seed, study = staging / "seed", staging / "study"
    env = _env(None)
    if not (seed_cache / "config.json").exists():  # kit seed build takes about 2 minutes on 2 cores
        subprocess.run([sys.executable, "-m", "kit", "seed", "build", "--out", str(seed_cache), "--no-progress"],
                       check=True, env=env, cwd=REPO, stdout=subprocess.DEVNULL)
    shutil.copytree(seed_cache, seed)
    env["KIT_LEDGER"] = str(exposure_ledger(work / "exposed.jsonl", load_study_contract(CONTRACT)))
    subprocess.run([sys.executable, "-m", "kit", "study", "prepare", "--contract", str(CONTRACT), "--seed", str(seed),
                    "--public-source", str(SOURCE), "--out", str(study)], check=True, env=env, cwd=REPO,
                   stdout=subprocess.DEVNULL)
    return staging


def host_copies(staging: Path, base: Path) -> list[Path]:
    """Each namespace's own directory: a private copy of the seed and the prepared study."""
    hosts = []
    for name in ("hostA", "hostB"):
        d = base / name
        shutil.copytree(staging / "seed", d / "seed")
        shutil.copytree(staging / "study", d / "study")
        hosts.append(d)
    return hosts


def run_rate(label: str, rate: int, staging: Path, work: Path, out_root: Path, evaluate: bool, date: str,
             port: int) -> Path:
    started = dt.datetime.now(dt.UTC)
    link = Link(tag="kxs", net=232).create()
    errors = []
    try:
        shaping = link.shape(rate)
        hosts = host_copies(staging, work / label)
        runs = {}
        for i, arm in enumerate(("single", "dense", "powersgd")):
            runs[arm] = run_arm_across(link, arm, hosts, port + i)
            if any(p["returncode"] != 0 for p in runs[arm]["processes"]):
                errors.append(f"{arm}: " + " | ".join(p["stderr"][-600:] for p in runs[arm]["processes"]
                                                      if p["returncode"] != 0))
        qdisc = link.qdisc_stats()
        screens_out = None
        if evaluate and not errors:
            study = hosts[0] / "study"
            for cmd in (["evaluate", "--study", str(study), "--seed", str(hosts[0] / "seed")],
                        ["screens", "--study", str(study)]):
                # final scoring records its exposures: into this bench's own ledger, not the repository's
                subprocess.run([sys.executable, "-m", "kit", "study", *cmd],
                               env={**_env(None), "KIT_LEDGER": str(work / "exposed.jsonl")}, cwd=REPO, check=True,
                               stdout=subprocess.DEVNULL)
            screens_out = load_json_strict(study / "screens.json")
        commands = list(link.commands)
    finally:
        link.delete()
    contract = load_study_contract(CONTRACT)
    rows = {arm: arm_row(arm, r, link) for arm, r in runs.items()}

    def tput(arm):
        return rows[arm]["active_tokens_per_s"] if rows[arm]["status"] == "completed" else None

    sc = contract.terms.screens
    speed = {"powersgd_vs_single": speed_screen(tput("powersgd"), tput("single"), sc),
             "dense_vs_single": speed_screen(tput("dense"), tput("single"), sc),
             "powersgd_vs_dense_ratio": (tput("powersgd") / tput("dense")) if tput("powersgd") and tput("dense") else None}
    run_dir = out_root / f"study-netns-{label}-{date}"
    (run_dir / "raw").mkdir(parents=True)  # refused up front (main) when it exists: no record is overwritten
    raw = []
    for arm, r in runs.items():
        for side, p in enumerate(r["processes"]):
            for stream in ("stdout", "stderr"):
                path = run_dir / "raw" / f"{arm}-{link.ns[side]}.{stream}.txt"
                path.write_text(p[stream])
                raw.append(str(path.relative_to(run_dir)))
        if r["record"] is not None:
            path = run_dir / "raw" / f"{arm}.arm.json"
            path.write_text(json.dumps(r["record"], indent=1, sort_keys=True) + "\n")
            raw.append(str(path.relative_to(run_dir)))
    (run_dir / "raw" / "tc-qdisc-after.txt").write_text(json.dumps(qdisc, indent=1) + "\n")
    raw.append("raw/tc-qdisc-after.txt")
    if screens_out is not None:
        (run_dir / "raw" / "screens.json").write_text(json.dumps(screens_out, indent=1, sort_keys=True) + "\n")
        raw.append("raw/screens.json")
    ended = dt.datetime.now(dt.UTC)
    record = {
        "format": "kit-bench/1",
        "run_id": run_dir.name,
        "notebook": None,
        "command": " ".join(["python", "bench/study_netns.py", *sys.argv[1:]]),
        "parameters": {"contract": str(CONTRACT.relative_to(REPO)), "contract_digest": contract.digest,
                       "link": {"label": label, **shaping}, "namespaces": list(link.ns), "veth": list(link.dev),
                       "addresses": list(link.addr), "setup_commands": commands,
                       "shared_on_disk": "nothing: each namespace's rank has its own seed and study copy "
                                         "(hostA/, hostB/ under a private work directory)",
                       "source": {"name": SOURCE.name, "sha256": sha256_file(SOURCE)},
                       "script_sha256": sha256_file(Path(__file__))},
        "git": code_state(),
        "versions": versions(runtime=True),
        "device": {"type": "cpu", "cores": os.cpu_count(), "note": "2 CPU cores shared by both namespaces"},
        "status": "ok" if not errors else "failed",
        "errors": errors,
        "started_at": started.isoformat(timespec="seconds"),
        "ended_at": ended.isoformat(timespec="seconds"),
        "duration_s": round((ended - started).total_seconds(), 1),
        "results": {"traffic_table": rows, "speed_screen": speed,
                    "quality_screen": (screens_out or {}).get("screens", {}).get("quality"),
                    "wire_orchestrator": {arm: r["wire_orchestrator"] for arm, r in runs.items()},
                    "notes": ["wire_orchestrator: each namespace's veth counters around the whole torchrun "
                              "invocation (startup, rendezvous, the arm, the record gather)",
                              "wire_in_arm_per_rank: each rank's own /proc/net/dev delta around its update loop "
                              "and commits, gathered into the arm record over the process group",
                              "both ranks share the machine's 2 CPU cores (with other users' jobs: see "
                              "loadavg_before_after per arm): the pair arms' compute time per update includes that "
                              "contention; latency is not emulated"]},
        "raw_output": raw,
    }
    (run_dir / "run.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    write_sidecars(run_dir)
    return run_dir


def write_sidecars(run_dir: Path) -> list[str]:
    """Metric sidecars of a run (kit report draws them): the traffic table and the speed screen."""
    from kit.digest import write_canonical_json

    rec = load_json_strict(run_dir / "run.json")
    res, link = rec["results"], rec["parameters"]["link"]
    rows = []
    for arm, row in res["traffic_table"].items():
        logical = row["logical_sent_bytes_per_rank"]
        tx = row["wire_tx_bytes_per_namespace"]
        rows.append({"arm": arm, "link": link["label"], "status": row["status"], "updates": row["updates"],
                     "s_per_update_active": row["seconds_per_update_active"],
                     "s_per_update_wall": row["seconds_per_update_wall"],
                     "s_per_update_steady": row["seconds_per_update_steady"],
                     "active_tokens_per_s": row["active_tokens_per_s"],
                     "logical_bytes_rank0": logical[0] if logical else 0,
                     "logical_bytes_rank1": logical[1] if len(logical) > 1 else None,
                     "wire_tx_bytes_ns_a": list(tx.values())[0], "wire_tx_bytes_ns_b": list(tx.values())[1],
                     "wire_over_logical_ns_a": (list(row["wire_over_logical_tx"].values()) or [None])[0]
                     if row["wire_over_logical_tx"] else None})
    speed = [{"comparison": k, "ratio": v.get("ratio"), "verdict": v.get("verdict"),
              "min_speedup": v.get("thresholds", {}).get("min_speedup")}
             for k, v in res["speed_screen"].items() if isinstance(v, dict)]
    write_canonical_json(run_dir / "metrics" / "traffic_table.json", rows)
    write_canonical_json(run_dir / "metrics" / "speed_screen.json", speed)
    return ["metrics/traffic_table.json", "metrics/speed_screen.json"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    ap.add_argument("--rate", action="append", help="link rate: 1gbit, 100mbit, 50mbit, 10mbit or bits/s")
    ap.add_argument("--out", default=str(REPO / "runs"))
    ap.add_argument("--evaluate", action="store_true", help="also run kit study evaluate + screens in A's study")
    ap.add_argument("--port", type=int, default=29611)
    ap.add_argument("--seed-cache", default="/tmp/kit-study-netns-seed",
                    help="where the tiny seed is built once (kit seed build) and copied from")
    ap.add_argument("--sidecars", metavar="RUN_DIR", help="only (re)write RUN_DIR/metrics/ from its run.json")
    a = ap.parse_args(argv)
    if a.sidecars:
        print(write_sidecars(Path(a.sidecars)))
        return 0
    why = available()
    if why:
        print(f"study_netns: {why}", file=sys.stderr)
        return 2
    date = dt.date.today().isoformat()
    labels = a.rate or ["1gbit", "50mbit"]
    taken = [str(Path(a.out) / f"study-netns-{label}-{date}") for label in labels
             if (Path(a.out) / f"study-netns-{label}-{date}").exists()]
    if taken:  # a record is evidence: a re-run gets a new name (or --out), never the old one's place
        print(f"study_netns: {', '.join(taken)}: run directory exists; move it aside or pass --out", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="study-netns-") as tmp:
        work = Path(tmp)
        staging = prepare_staging(work, Path(a.seed_cache))
        for i, label in enumerate(labels):
            d = run_rate(label, parse_rate(label), staging, work, Path(a.out), a.evaluate, date, a.port + 10 * i)
            res = load_json_strict(d / "run.json")
            print(json.dumps({"run": str(d), "status": res["status"], "errors": res["errors"],
                              "speed": {k: (v.get("ratio") if isinstance(v, dict) else v)
                                        for k, v in res["results"]["speed_screen"].items()}}, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
