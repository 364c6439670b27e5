"""The adaptive-shards campaign of issue 14 (items 3, 4, 6) on two GPUs, through the kit's own CLI.

Run on the x2 GPU host (two H200s) from the repository root:

    python -m campaigns.adaptive_gpu_campaign --out build/agc --run-id adaptive-gpu-campaign-<date>

and check it on a CPU with `--scale tiny --device cpu` (minutes on 2 cores). In order it

  seed        builds a seed directory: SmolLM2-1.7B's shape with random weights (bf16, as
              kit.seed.random_weights.build_random_seed writes them, with its byte-level BPE
              tokenizer; no network) at --scale full, a 4-block toy shape with the same tokenizer at
              --scale tiny; writes trained_conversations.jsonl (synthetic conversations: the replay
              pool) and a contract derived from contracts/adaptive-shards(.tiny).json with the seed's
              digest and shortened cohorts (contract_changes.json lists every changed field and why);
  prepare     `kit adaptive prepare`;
  a2          `kit adaptive train --cohort A --workers 2 --until M` (M = the migration step, a commit);
  resume      `kit adaptive train --workers 2 --resume ROOT_M --source-home A2 --until M+2` into a
              fresh home, in deterministic GPU mode (KIT_GPU_DETERMINISTIC=1);
  rerun       the same again into another fresh home: same commit, same layout, same mode;
  determinism `kit adaptive compare` of resume and rerun: both learned-state roots, whether they
              repeat, the maximum absolute parameter difference;
  control     the uninterrupted 2-worker control: `--resume ROOT_M` in the A2 home to the A endpoint;
  migrated    3 ranks from ROOT_M, fetching their assigned objects from the A2 home into a fresh home
              (`--source-home`), to the A endpoint;
  migration   `kit adaptive compare` of migrated vs control (roots, max |difference|); on CPU it must
              be bit-identical (`--require-equal`);
  growth      cohort B with `--grow` (+2 blocks) from the control's A endpoint, reference = that
              endpoint, a few updates.

Per update it records, from the attempt logs (HOME/attempts/<attempt>/updates.jsonl, whose `ranks`
field carries each rank's peak allocated device memory and pipeline bytes sent) and the launcher's
worker results: seconds, input/padded/target tokens per second, per rank the measured peak, the bytes
sent, the admission estimate the worker ran with and the planner's estimate (kit.planner) for the
layout and microbatches that ran.

Everything goes to --out: run.json (kit-bench/1), campaign.jsonl (the raw rows), phases.json,
updates.json, comparisons/, contract.json, contract_changes.json, raw/<phase>/ (attempt records,
update logs, worker results and logs) and summary.md. Stores (tens of GB at 1.7B) live in --work,
never under --out; homes no later phase needs are deleted as the campaign goes (--keep-work keeps
them). The state of a campaign is kept in --out/state.json: the same command again reruns only the
phases that are not done (so a campaign can span two device calls on a warm machine).

Each phase runs as its own process group with a deadline (per phase and overall, --deadline-s): a
hung phase is killed and recorded as timed out. A failed phase is named on stderr and in run.json,
phases that depend on it are skipped, the others still run, and the exit status is 1 (2 when
phases were left for lack of time).
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import shutil
import sys
import time
from pathlib import Path

from campaigns.phases import REPO, Deadline, json_lines, run_process, step_env
from kit.evidence.environment import code_state, device_info, versions

CONTRACTS = {"full": REPO / "contracts" / "adaptive-shards.json", "tiny": REPO / "contracts" / "adaptive-shards.tiny.json"}
SOURCE = REPO / "data" / "alpaca_5000.json"
REPLAY_CONVERSATIONS = 3000  # synthetic conversations in the seed's trained_conversations.jsonl
REPLAY_SEED = 7  # distinct from the tokenizer's synthetic text (seed 0)
PHASES = ("seed", "prepare", "a2", "resume", "rerun", "determinism", "control", "migrated", "migration", "growth")
DEPS = {"seed": (), "prepare": ("seed",), "a2": ("prepare",), "resume": ("a2",), "rerun": ("a2",),
        "determinism": ("resume", "rerun"), "control": ("a2",), "migrated": ("a2",),
        "migration": ("control", "migrated"), "growth": ("control",)}
# homes, and the phases that still read them: deleted once all of those are done (unless --keep-work)
HOME_READERS = {"R1": ("determinism",), "R2": ("determinism",), "A3": ("migration",), "G": ("growth",),
                "A2": ("resume", "rerun", "control", "migrated", "migration", "growth")}
# per-phase timeouts (seconds) before the overall deadline cuts them shorter
TIMEOUTS = {"full": {"seed": 420, "prepare": 300, "train": 300, "compare": 240},
            "tiny": {"seed": 300, "prepare": 300, "train": 300, "compare": 120}}
MIN_START_S = {"train": 60, "compare": 20, "prepare": 30, "seed": 60}


# --- the seed (runs in a child process: this process never touches the GPU) -------------------------
def build_seed(seed_dir: Path, scale: str, device: str) -> dict:
    import torch

    from kit.data.conversations import synthetic_conversations, write_jsonl
    from kit.seed.random_weights import build_random_seed
    from kit.study.schema import load_study_contract

    study_contract = load_study_contract(REPO / "contracts" / "shared-gradient.json")  # tokenizer text ranges
    seed_dir.mkdir(parents=True, exist_ok=True)
    # at --scale tiny a toy shape of 4 blocks: migration to 3 ranks and growth need them
    info = build_random_seed(seed_dir, study_contract, SOURCE, torch.device(device),
                             toy_layers=4 if scale == "tiny" else None)
    t0 = time.perf_counter()
    sha = write_jsonl(seed_dir / "trained_conversations.jsonl",
                      synthetic_conversations(REPLAY_CONVERSATIONS, REPLAY_SEED))
    info["replay"] = {"file": "trained_conversations.jsonl", "sha256": sha, "conversations": REPLAY_CONVERSATIONS,
                      "made_by": f"kit.data.conversations.synthetic_conversations({REPLAY_CONVERSATIONS}, "
                                 f"{REPLAY_SEED}): the replay pool (random weights were never trained on them)",
                      "seconds": round(time.perf_counter() - t0, 2)}
    return info


# --- the contract -------------------------------------------------------------------------------------
def derive_contract(base: dict, digest: str, a_updates: int, b_updates: int, migration_step: int,
                    commit_every: int) -> tuple[dict, list[dict]]:
    c = copy.deepcopy(base)
    changes = []

    def put(path: str, value, why: str) -> None:
        node = c
        keys = path.split(".")
        for k in keys[:-1]:
            node = node[k]
        if node[keys[-1]] != value:
            changes.append({"field": path, "from": node[keys[-1]], "to": value, "why": why})
            node[keys[-1]] = value

    short = ("shortened so that the whole GPU campaign (every phase restarts workers and commits "
             "~20 GB of learned state at 1.7B) fits a few minutes of device time and the host's disk")
    put("seed.parameter_digest", digest, "the digest of this campaign's random-weight seed")
    put("description", f"issue-14 GPU campaign: {base['description']}", "marks the copy")
    for name, n in (("A", a_updates), ("B", b_updates)):
        co = c["cohorts"][name]
        put(f"cohorts.{name}.updates", n, short)
        for part, per in co["per_update"].items():
            put(f"cohorts.{name}.totals.{part}", n * per, f"= updates x per_update.{part} (schema rule)")
        put(f"endpoints.{name}", n, f"= cohorts.{name}.updates (schema rule)")
    put("training.commit_every", commit_every, "a commit every few updates: the migration, resume and rerun start "
                                               "from a committed step early in cohort A")
    put("migration.at_step", migration_step, "an early commit point, so the control and the migrated run both "
                                             "have updates to measure")
    return c, changes


class PhaseError(RuntimeError):
    pass


# --- the campaign -----------------------------------------------------------------------------------
class Campaign:
    def __init__(self, a, argv):
        self.a = a
        self.argv = argv
        self.out = Path(a.out).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = Path(a.work).resolve() if a.work else REPO / "build" / "adaptive-gpu-campaign-work" / self.out.name
        if self.work == self.out or self.out in self.work.parents:
            raise SystemExit(f"--work {self.work} must not lie under --out {self.out} (the stores are tens of GB)")
        self.work.mkdir(parents=True, exist_ok=True)
        self.state_path = self.out / "state.json"
        self.state = json.loads(self.state_path.read_text()) if self.state_path.exists() else {}
        if self.state and (self.state.get("scale"), self.state.get("device")) != (a.scale, a.device):
            raise SystemExit(f"{self.state_path}: a {self.state.get('scale')}/{self.state.get('device')} campaign; "
                             f"use another --out for {a.scale}/{a.device}")
        self.state.update(scale=a.scale, device=a.device)
        self.state.setdefault("phases", {})
        self.state.setdefault("updates", [])
        self.deadline = Deadline(a.deadline_s)
        self.timeouts = TIMEOUTS[a.scale]
        self.seed_dir = self.work / "seed"
        self.prepared = self.work / "prepared"
        self.homes = {h: self.work / h for h in ("A2", "A3", "R1", "R2", "G")}
        self.errors: list[dict] = []

    # -- bookkeeping
    def save(self) -> None:
        self.state_path.write_text(json.dumps(self.state, indent=1, sort_keys=True) + "\n")

    def env(self, deterministic: bool = False) -> dict:
        e = step_env(self.a.device)
        if self.a.device != "cpu":
            e.setdefault("NCCL_DEBUG", "WARN")  # NCCL's own reason (e.g. a duplicate GPU) lands in the worker logs
        if deterministic:
            e["KIT_GPU_DETERMINISTIC"] = "1"
        else:
            e.pop("KIT_GPU_DETERMINISTIC", None)
        return e

    def kit(self, *args) -> list[str]:
        return [sys.executable, "-m", "kit", *map(str, args)]

    def timeout(self, kind: str) -> float:
        left = self.deadline.left() - 5
        if left < MIN_START_S[kind]:
            raise TimeoutError(f"{left:.0f}s left before --deadline-s; a {kind} phase needs at least "
                               f"{MIN_START_S[kind]}s to be worth starting")
        return min(self.timeouts[kind], left)

    def contract_data(self) -> dict:
        return json.loads((self.out / "contract.json").read_text())

    def learned_state_bytes(self, extra_blocks: int = 0) -> int:
        from kit.model.config import load_config

        shape = load_config(self.seed_dir)
        return (shape.param_count() + extra_blocks * shape.block_param_count()) * 12  # param + 2 moments, FP32

    def check_disk(self, phase: str, copies: float) -> dict:
        need = int(copies * self.learned_state_bytes(2 if phase == "growth" else 0)) + 2 * 2**30
        free = shutil.disk_usage(self.work).free
        if free < need:
            raise PhaseError(f"only {free / 1e9:.1f} GB free under {self.work}; the phase writes about "
                             f"{need / 1e9:.1f} GB ({copies} copies of the learned state + 2 GiB)")
        return {"free_bytes": free, "need_bytes_estimate": need}

    # -- phases
    def phase_seed(self) -> dict:
        if self.seed_dir.exists():
            shutil.rmtree(self.seed_dir)
        info_path = self.work / "seed-info.json"
        build_device = "cuda" if self.a.device == "cuda" else "cpu"
        r = run_process([sys.executable, "-m", "campaigns.adaptive_gpu_campaign", "--internal-build-seed", str(self.seed_dir),
                         "--internal-info", str(info_path), "--scale", self.a.scale, "--device", build_device],
                        self.env(), self.timeout("seed"), self.out / "logs" / "seed-build")
        if r["returncode"] != 0:
            raise PhaseError(f"seed build exited {r['returncode']}{' (timed out)' if r['timed_out'] else ''}: "
                             f"{r['stderr_tail'][-1500:]}")
        info = json.loads(info_path.read_text())
        d = run_process(self.kit("digest", self.seed_dir), self.env(), self.timeout("seed"), self.out / "logs" / "digest")
        if d["returncode"] != 0:
            raise PhaseError(f"kit digest exited {d['returncode']}: {d['stderr_tail'][-1500:]}")
        digest = d["stdout"].strip().splitlines()[-1]
        base = json.loads(CONTRACTS[self.a.scale].read_text())
        contract, changes = derive_contract(base, digest, self.a.a_updates, self.a.b_updates, self.a.migration_step,
                                            self.a.commit_every)
        (self.out / "contract.json").write_text(json.dumps(contract, indent=2, sort_keys=True) + "\n")
        fixed = [{"field": f, "value": v} for f, v in (
            ("cohorts.*.documents_per_update / per_update", "unchanged"), ("training", "unchanged but commit_every"),
            ("planner", "unchanged"), ("evaluation", "unchanged (prepare draws the full evaluation roles)"))]
        (self.out / "contract_changes.json").write_text(json.dumps(
            {"base": str(CONTRACTS[self.a.scale].relative_to(REPO)), "changed": changes, "kept": fixed}, indent=1) + "\n")
        (self.out / "seed.json").write_text(json.dumps({**info, "parameter_digest": digest}, indent=1) + "\n")
        return {"seconds_build": info.get("seconds"), "parameter_digest": digest, "params": info.get("params"),
                "build_seconds": r["seconds"], "digest_seconds": d["seconds"], "contract_changes": len(changes)}

    def phase_prepare(self) -> dict:
        if self.prepared.exists():
            shutil.rmtree(self.prepared)
        r = run_process(self.kit("adaptive", "prepare", "--contract", self.out / "contract.json", "--seed", self.seed_dir,
                                 "--replay", self.seed_dir / "trained_conversations.jsonl", "--public-source", SOURCE,
                                 "--out", self.prepared), self.env(), self.timeout("prepare"),
                        self.out / "logs" / "prepare")
        self._raise_if_failed(r, "kit adaptive prepare")
        for name in ("prepared.json", "ownership.json"):
            shutil.copyfile(self.prepared / name, self.out / f"prepared-{name}")
        summary = json_lines(r["stdout"])
        return {"cli_seconds": r["seconds"], "summary": summary[-1] if summary else None}

    def _raise_if_failed(self, r: dict, what: str) -> None:
        if r["timed_out"]:
            raise PhaseError(f"{what} timed out after {r['seconds']:.0f}s (process group stopped); "
                             f"stderr tail: {r['stderr_tail'][-1500:]}")
        if r["returncode"] != 0:
            raise PhaseError(f"{what} exited {r['returncode']}: {r['stderr_tail'][-2000:]}")

    def train(self, phase: str, home: str, workers: int, *, cohort: str = "A", resume: str | None = None,
              source_home: str | None = None, until: int | None = None, grow: bool = False,
              reference: str | None = None, reference_home: str | None = None, deterministic: bool = False,
              fresh: bool = False, copies: float = 1.0) -> dict:
        h = self.homes[home]
        if fresh and h.exists():
            shutil.rmtree(h)
        if home in self.state.get("deleted_homes", []):
            self.state["deleted_homes"].remove(home)
        disk = self.check_disk(phase, copies)
        before = set((h / "attempts").iterdir()) if (h / "attempts").exists() else set()
        args = ["adaptive", "train", "--prepared", self.prepared, "--seed", self.seed_dir, "--home", h,
                "--cohort", cohort, "--workers", workers]
        for flag, v in (("--resume", resume), ("--source-home", source_home and self.homes[source_home]),
                        ("--until", until), ("--reference", reference),
                        ("--reference-home", reference_home and self.homes[reference_home])):
            if v is not None:
                args += [flag, v]
        if grow:
            args.append("--grow")
        cmd = self.kit(*args)
        rec = {"command": " ".join(map(str, cmd[1:])).replace(str(REPO) + "/", ""), "home": home, "workers": workers,
               "deterministic_env": deterministic, "disk": disk}
        self.current = rec
        if self.a.device == "cuda":
            import torch

            n = torch.cuda.device_count()
            rec["rank_devices"] = {r: f"cuda:{r % n}" for r in range(workers)} if n else None
            if n and workers > n:
                rec["note"] = (f"{workers} ranks on {n} GPUs: kit.distributed.group.join puts rank r on cuda:(LOCAL_RANK % "
                               f"{n}), so ranks share GPUs; NCCL refuses two ranks of one communicator on one GPU "
                               f"('Duplicate GPU detected'), so the group runs on gloo with host-staged messages")
        r = run_process(cmd, self.env(deterministic), self.timeout("train"), self.out / "logs" / phase)
        rec.update(cli_seconds=r["seconds"], returncode=r["returncode"], timed_out=r["timed_out"])
        attempts = sorted(set((h / "attempts").iterdir()) - before) if (h / "attempts").exists() else []
        rec["attempts"] = [p.name for p in attempts]
        rec["commits"] = [c for c in json_lines(r["stdout"]) if "full_root" in c]
        self._collect(phase, h, attempts, rec, workers)
        self._raise_if_failed(r, f"kit adaptive train ({phase})")
        if not rec["commits"]:
            raise PhaseError(f"{phase}: the driver printed no commit")
        return rec

    def _collect(self, phase: str, home: Path, attempts: list[Path], rec: dict, workers: int) -> None:
        """Copy the attempt's records into --out and turn its update log into table rows."""
        raw = self.out / "raw" / phase
        if raw.exists():
            shutil.rmtree(raw)
        results = {}
        for att in attempts:
            dst = raw / att.name
            dst.mkdir(parents=True, exist_ok=True)
            for f in ("attempt.json", "updates.jsonl"):
                if (att / f).exists():
                    shutil.copyfile(att / f, dst / f)
            wdir = att / "workers"
            if wdir.exists():
                (dst / "workers").mkdir(exist_ok=True)
                for f in sorted(wdir.iterdir()):
                    if f.suffix in (".json", ".log") and f.stat().st_size < 20 * 2**20:
                        shutil.copyfile(f, dst / "workers" / f.name)
                for rank in range(workers):
                    p = wdir / f"result-{rank}.json"
                    if p.exists():
                        results[rank] = json.loads(p.read_text())
            if (att / "attempt.json").exists():
                a = json.loads((att / "attempt.json").read_text())
                rec["attempt_status"] = a.get("status")
                rec["attempt_error"] = a.get("error")
                rec["fetched_bytes"] = a.get("fetched_bytes")
        rec["worker_results"] = {r: {k: v for k, v in res.items() if k != "commits"} for r, res in results.items()}
        rows = []
        for att in attempts:
            log = att / "updates.jsonl"
            if log.exists():
                rows += [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
        self.state["updates"] = [u for u in self.state["updates"] if u["phase"] != phase]
        for row in rows:
            self.state["updates"].append(self._update_row(phase, row, workers, results))

    # -- per-update table
    def _encoded_lengths(self) -> dict:
        if getattr(self, "_lengths", None) is None:
            from kit.data.chat import encode_conversation, load_tokenizer
            from kit.data.conversations import read_jsonl

            pj = json.loads((self.prepared / "prepared.json").read_text())
            tok = load_tokenizer(self.seed_dir)
            tok.model_max_length = 1 << 62
            max_tokens = self.contract_data()["training"]["max_tokens"]
            self._lengths = {}
            for role in ("A.new", "A.replay", "B.new", "B.replay_a", "B.replay_conv"):
                info = pj["roles"][role]
                for conv in read_jsonl(self.prepared / info["file"], info["sha256"]):
                    if conv.id not in self._lengths:
                        e = encode_conversation(tok, conv, max_tokens, overflow="reject")
                        self._lengths[conv.id] = len(e.input_ids)
        return self._lengths

    def _update_row(self, phase: str, row: dict, workers: int, results: dict) -> dict:
        c = self.contract_data()
        mb = c["training"]["microbatch_size"]
        out = {"phase": phase, "workers": workers, **{k: row.get(k) for k in (
            "cohort", "cohort_step", "step", "seconds", "tokens", "objective", "ce_per_token", "kl_per_token",
            "grad_norm", "clip_factor", "new_tokens", "replay_tokens")}}
        out["target_tokens"] = out.pop("tokens")
        try:
            lengths = [self._encoded_lengths()[i] for i in row["ids"]]
            groups = [lengths[k:k + mb] for k in range(0, len(lengths), mb)]
            out["input_tokens"] = sum(lengths)
            out["padded_tokens"] = sum(len(g) * max(g) for g in groups)
            out["microbatch_lengths"] = [max(g) for g in groups]
        except Exception as e:  # noqa: BLE001 -- the table still has the log's own numbers
            out["input_tokens"] = out["padded_tokens"] = None
            out["token_count_error"] = repr(e)[:300]
        s = out["seconds"] or 0
        for k in ("input_tokens", "padded_tokens", "target_tokens"):
            out[f"{k}_per_s"] = round(out[k] / s, 1) if out.get(k) and s > 0 else None
        est = self._estimates(out, workers, row)
        ranks = []
        for i, rk in enumerate(row.get("ranks") or [{"rank": r} for r in range(workers)]):
            r = rk["rank"]
            res = results.get(r) or results.get(str(r)) or {}
            adm = res.get("admission") or {}
            e = est[i] if i < len(est) else {}
            peak = rk.get("peak_memory_bytes")
            d = {**rk, "admission_estimate_bytes": adm.get("estimate"), "free_bytes_at_admission": adm.get("free"),
                 **e}
            for key in ("planner_estimate_bytes", "planner_estimate_run_seq_no_reserve_bytes",
                        "admission_estimate_bytes"):
                if peak and d.get(key):
                    d[key.replace("_bytes", "_error")] = round((d[key] - peak) / peak, 4)
            ranks.append(d)
        out["ranks"] = ranks
        return out

    def _estimates(self, upd: dict, workers: int, row: dict) -> list[dict]:
        """The planner's estimate for the layout that ran (the prepared ownership manifest's, else even, as
        `kit adaptive train` chooses it): once with the contract's max_tokens and reserve (what prepare plans
        with), once as admission computes it (kit.engine.admission.worker_estimate: the microbatches the tick
        schedule keeps in flight on that rank) for this update's longest microbatch padded to the CUDA length
        bucket, without the reserve (comparable with torch.cuda.max_memory_allocated)."""
        try:
            from kit.adaptive.schema import REGIMES
            from kit.adaptive.train import training_layout
            from kit.distributed.pipeline import CUDA_LENGTH_BUCKET
            from kit.engine.admission import worker_estimate
            from kit.model.config import load_config
            from kit.planner import MemoryModel, MicrobatchShape, estimate_worker, shape_with_growth

            c = self.contract_data()
            t, p = c["training"], c["planner"]
            shape = load_config(self.seed_dir)
            if upd["phase"] == "growth":
                shape = shape_with_growth(shape, c["growth"]["add_blocks"])
            docs = len(row["ids"])
            n_micro = -(-docs // t["microbatch_size"])
            layout = training_layout(self.prepared, shape.num_hidden_layers, workers)
            regime = REGIMES[p["regime"]]
            longest = max(upd.get("microbatch_lengths") or [t["max_tokens"]])
            bucket = CUDA_LENGTH_BUCKET if self.a.device == "cuda" else 1
            seq_run = -(-longest // bucket) * bucket
            out = []
            for r, (a, b) in enumerate(layout.ranges):
                full = estimate_worker(shape, range(a, b), r == 0, MicrobatchShape(t["microbatch_size"], t["max_tokens"],
                                       n_micro), MemoryModel(reserve_bytes=p["reserve_bytes"], **regime))
                run = worker_estimate(shape, layout, r, (t["microbatch_size"], seq_run), n_micro, dict(regime))
                out.append({"blocks": [a, b], "planner_estimate_bytes": full.total,
                            "planner_estimate_run_seq_no_reserve_bytes": run.total,
                            "planner_run_seq": seq_run, "planner_components_run_seq": run.components})
            return out
        except Exception as e:  # noqa: BLE001
            return [{"planner_error_message": repr(e)[:300]}] * workers

    # -- comparisons
    def compare(self, phase: str, a_home: str, a_root: str, b_home: str, b_root: str, cohort: str,
                require_equal: bool) -> dict:
        out = self.out / "comparisons" / f"{phase}.json"
        out.parent.mkdir(exist_ok=True)
        args = ["adaptive", "compare", "--a", f"{self.homes[a_home]}:{a_root}", "--b", f"{self.homes[b_home]}:{b_root}",
                "--cohort", cohort, "--out", out]
        if require_equal:
            args.append("--require-equal")
        r = run_process(self.kit(*args), self.env(), self.timeout("compare"), self.out / "logs" / phase)
        res = json.loads(out.read_text()) if out.exists() else None
        rec = {"cli_seconds": r["seconds"], "file": f"comparisons/{phase}.json", "require_equal": require_equal}
        self.current = rec
        if res is not None:
            rec.update({"a": {k: res["a"][k] for k in ("full_root", "learned_state_root", "layout")} | {"home": a_home},
                        "b": {k: res["b"][k] for k in ("full_root", "learned_state_root", "layout")} | {"home": b_home},
                        "learned_state_equal": res["learned_state_equal"],
                        "parameters_differing": res["parameters_differing"],
                        "max_abs_parameter_difference": res["max_abs_parameter_difference"]})
        if r["returncode"] != 0 and res is not None and require_equal and not res["learned_state_equal"]:
            raise PhaseError(f"learned states differ ({res['parameters_differing']} parameters, max |diff| "
                             f"{res['max_abs_parameter_difference']}): the CPU promise is bit-identity")
        self._raise_if_failed(r, "kit adaptive compare")
        return rec

    def root(self, phase: str, cohort_step: int | None = None, key: str = "full_root") -> str:
        commits = self.state["phases"][phase]["commits"]
        if cohort_step is None:
            return commits[-1][key]
        return next(c[key] for c in commits if c["cohort_step"] == cohort_step)

    def commits_between(self, cohort: str, start: int, until: int) -> int:
        """How many commits a run from cohort step `start` to `until` writes (the contract's points, and `until`)."""
        c = self.contract_data()
        every, end = c["training"]["commit_every"], c["endpoints"][cohort]
        points = set(range(every, end + 1, every)) | {end, until}
        return len([p for p in points if start < p <= until])

    def run_phase(self, name: str) -> dict:
        a, c = self.a, None
        m = a.migration_step
        if name not in ("seed",):
            c = self.contract_data()
        cpu = a.device == "cpu"
        if name == "seed":
            return self.phase_seed()
        if name == "prepare":
            return self.phase_prepare()
        if name == "a2":
            return self.train(name, "A2", 2, until=m, fresh=True, deterministic=a.deterministic == "all")
        if name in ("resume", "rerun"):
            home = "R1" if name == "resume" else "R2"
            if name == "rerun" and not a.keep_work and self.homes["R1"].exists():
                need = 2 * self.learned_state_bytes() + 2 * 2**30
                if shutil.disk_usage(self.work).free < need:  # the pair is compared by roots only then
                    shutil.rmtree(self.homes["R1"])
                    self.state["r1_deleted_for_disk"] = True
            return self.train(name, home, 2, resume=self.root("a2", m), source_home="A2",
                              until=min(m + a.resume_updates, c["endpoints"]["A"]), fresh=True,
                              copies=1 + self.commits_between("A", m, min(m + a.resume_updates, c["endpoints"]["A"])),
                              deterministic=a.deterministic in ("all", "rerun"))
        if name == "determinism":
            if not self.homes["R1"].exists():  # deleted before the rerun for lack of disk: roots only
                ra, rb = (self.state["phases"][p]["commits"][-1] for p in ("resume", "rerun"))
                equal = ra["learned_state_root"] == rb["learned_state_root"]
                if cpu and not equal:
                    raise PhaseError("learned-state roots of resume and rerun differ on CPU")
                return {"a": {**ra, "home": "R1"}, "b": {**rb, "home": "R2"}, "learned_state_equal": equal,
                        "parameters_differing": None, "max_abs_parameter_difference": None,
                        "note": "the resume's home was deleted before the rerun for lack of disk: roots compared, "
                                "no parameter difference"}
            return self.compare(name, "R1", self.root("resume"), "R2", self.root("rerun"), "A", require_equal=cpu)
        if name == "control":
            return self.train(name, "A2", 2, resume=self.root("a2", m), copies=self.commits_between("A", m, c["endpoints"]["A"]),
                              deterministic=a.deterministic == "all")
        if name == "migrated":
            return self.train(name, "A3", a.migrated_workers, resume=self.root("a2", m), source_home="A2", fresh=True,
                              copies=1 + self.commits_between("A", m, c["endpoints"]["A"]), deterministic=a.deterministic == "all")
        if name == "migration":
            return self.compare(name, "A3", self.root("migrated"), "A2", self.root("control"), "A", require_equal=cpu)
        if name == "growth":
            end = self.root("control")
            until = min(a.growth_updates, c["endpoints"]["B"])
            return self.train(name, "G", a.growth_workers, cohort="B", resume=end, reference=end,
                              reference_home="A2", source_home="A2", grow=True, until=until, fresh=True,
                              copies=1.1 + self.commits_between("B", 0, until), deterministic=a.deterministic == "all")
        raise ValueError(name)

    def cleanup(self) -> None:
        """Delete a home (tens of GB at 1.7B) once no later phase reads it: A2 when all its readers completed;
        the others once their reader has ended either way (their logs and records are already in --out)."""
        if self.a.keep_work:
            return
        status = {p: s.get("status") for p, s in self.state["phases"].items()}
        ok, ended = ("completed", "reused"), ("completed", "reused", "failed", "skipped")
        for home, readers in HOME_READERS.items():
            final = ok if home == "A2" else ended
            if all(status.get(r) in final for r in readers) and self.homes[home].exists():
                shutil.rmtree(self.homes[home])
                deleted = self.state.setdefault("deleted_homes", [])
                if home not in deleted:
                    deleted.append(home)

    def outputs_exist(self, name: str) -> bool:
        need = {"seed": [self.seed_dir / "config.json", self.out / "contract.json"],
                "prepare": [self.prepared / "prepared.json"], "a2": [self.homes["A2"]], "control": [self.homes["A2"]],
                "resume": [self.homes["R1"]], "rerun": [self.homes["R2"]], "migrated": [self.homes["A3"]],
                "growth": [self.homes["G"]], "determinism": [], "migration": []}[name]
        deleted = {self.homes[h] for h in self.state.get("deleted_homes", [])}
        return all(p.exists() or p in deleted for p in need)

    def missing_homes(self, name: str) -> list[str]:
        """Homes a phase reads that an earlier call deleted (then: --redo)."""
        reads = {"resume": ["A2"], "rerun": ["A2"], "control": ["A2"], "migrated": ["A2"], "migration": ["A2", "A3"],
                 "growth": ["A2"], "determinism": ["R2"]}.get(name, [])
        return [h for h in reads if not self.homes[h].exists()]

    def run(self, wanted: list[str]) -> int:
        failed = incomplete = False
        for name in PHASES:
            if name not in wanted:
                continue
            prev = self.state["phases"].get(name, {})
            if prev.get("status") in ("completed", "reused") and self.outputs_exist(name) and not self.a.redo:
                prev["status"] = "reused"
                self.log(f"phase {name}: reused from an earlier call ({self.state_path.name})")
                continue
            bad = [d for d in DEPS[name] if self.state["phases"].get(d, {}).get("status") not in ("completed", "reused")]
            rec = {"phase": name, "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
            self.current = {}  # what a phase learned before it failed (attempt, logs, roots) is kept
            t0 = time.perf_counter()
            if bad and all(self.state["phases"].get(d, {}).get("status") in ("not_started", None) for d in bad):
                rec.update(status="not_started", error=f"needs phase(s) {bad}, left for lack of time")
                incomplete = True
            elif bad:
                rec.update(status="skipped", error=f"needs phase(s) {bad}, which did not complete")
                failed = True
            elif self.missing_homes(name):
                rec.update(status="failed", error=f"home(s) {self.missing_homes(name)} under {self.work} are gone "
                                                  "(deleted by an earlier call or removed): rerun with --redo")
                failed = True
            else:
                self.log(f"phase {name}: start" + (f" ({self.deadline.left():.0f}s left)" if self.deadline.end else ""))
                try:
                    rec.update(self.run_phase(name))
                    rec["status"] = "completed"
                except TimeoutError as e:
                    rec.update(status="not_started", error=str(e))
                    incomplete = True
                except Exception as e:  # noqa: BLE001 -- every failure is recorded, named and the rest goes on
                    rec.update({k: v for k, v in self.current.items() if k not in rec})
                    rec.update(status="failed", error=f"{type(e).__name__}: {e}"[:6000])
                    failed = True
            rec["seconds"] = round(time.perf_counter() - t0, 2)
            self.state["phases"][name] = rec
            if rec["status"] in ("failed", "skipped", "not_started"):
                self.errors.append({"phase": name, "status": rec["status"], "error": rec.get("error")})
                print(f"PHASE {name} {rec['status'].upper()}: {rec.get('error')}", file=sys.stderr, flush=True)
            else:
                self.log(f"phase {name}: {rec['status']} in {rec['seconds']:.1f}s")
            self.cleanup()
            self.save()
        return 1 if failed else (2 if incomplete else 0)

    def log(self, msg: str) -> None:
        print(f"[{dt.datetime.now().strftime('%H:%M:%S')}] {msg}", flush=True)


# --- outputs ----------------------------------------------------------------------------------------------
def phase_rows(state: dict) -> list[dict]:
    rows = []
    for name in PHASES:
        p = state["phases"].get(name)
        if p is None:
            continue
        row = {"row": "phase", "phase": name, **{k: v for k, v in p.items() if k not in ("worker_results",)}}
        rows.append(row)
    return rows


def summary_md(state: dict, record: dict) -> str:
    ph = state["phases"]
    lines = [f"# Adaptive GPU campaign `{record['run_id']}`", "",
             (f"status **{record['status']}**, scale {state['scale']}, device {state['device']}, "
              f"git {record['git']['commit']}, {record['duration_s']} s"), "",
             "| phase | status | seconds | commits | note |", "|---|---|---|---|---|"]
    for name in PHASES:
        p = ph.get(name)
        if p is None:
            continue
        commits = ", ".join(f"{c['cohort']}{c['cohort_step']}:{c['learned_state_root'][:12]}" for c in p.get("commits") or [])
        note = (p.get("error") or p.get("note") or "").replace("\n", " ").replace("|", "/")[:200]
        lines.append(f"| {name} | {p.get('status')} | {p.get('seconds')} | {commits} | {note} |")
    for name, what in (("determinism", "rerun from the same commit on the same layout"),
                       ("migration", "3 ranks (migrated) vs the uninterrupted 2-worker control")):
        p = ph.get(name) or {}
        if "learned_state_equal" in p:
            lines += ["", (f"**{name}** ({what}): learned-state roots `{p['a']['learned_state_root']}` vs "
                           f"`{p['b']['learned_state_root']}`; equal: **{p['learned_state_equal']}**; parameters "
                           f"differing {p['parameters_differing']}; max |difference| "
                           f"{p['max_abs_parameter_difference']}")]
    lines += ["", ("| phase | step | workers | s | input tok/s | padded tok/s | per rank: peak GiB / planner GiB "
                   "(run seq, no reserve) / sent MB |"), "|---|---|---|---|---|---|---|"]
    gib = 2**30

    def g(v):
        return "-" if v is None else f"{v / gib:.2f}"

    for u in state["updates"]:
        ranks = "; ".join(
            f"r{r['rank']}: {g(r.get('peak_memory_bytes'))} / "
            f"{g(r.get('planner_estimate_run_seq_no_reserve_bytes'))} / "
            f"{(r.get('bytes_sent') or 0) / 1e6:.1f}" for r in u.get("ranks") or [])
        lines.append(f"| {u['phase']} | {u['cohort']}{u['cohort_step']} | {u['workers']} | {u['seconds']:.2f} | "
                     f"{u.get('input_tokens_per_s')} | {u.get('padded_tokens_per_s')} | {ranks} |")
    lines += ["", ("Peak memory is `torch.cuda.max_memory_allocated` of the rank's device during the update (- "
                   "on CPU); sent is the pipeline's point-to-point bytes from the rank (collectives excluded). "
                   "Planner: kit.engine.admission.worker_estimate (the in-flight microbatches of the schedule) for the layout that ran, at the longest microbatch of the update padded to the length bucket, no reserve. "
                   "Files: run.json, phases.json, updates.json, comparisons/, raw/, contract_changes.json.")]
    return "\n".join(lines) + "\n"


def write_outputs(camp: Campaign, started: dt.datetime, argv: list[str], status_code: int) -> None:
    state, out = camp.state, camp.out
    phases = phase_rows(state)
    (out / "phases.json").write_text(json.dumps(phases, indent=1, sort_keys=True) + "\n")
    (out / "updates.json").write_text(json.dumps(state["updates"], indent=1, sort_keys=True) + "\n")
    rows = phases + [{"row": "update", **u} for u in state["updates"]]
    with open(out / "campaign.jsonl", "w") as f:
        f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in rows)
    ended = dt.datetime.now(dt.UTC)
    all_done = all(state["phases"].get(p, {}).get("status") in ("completed", "reused") for p in PHASES)
    record = {
        "format": "kit-bench/1",
        "run_id": camp.a.run_id or f"adaptive-gpu-campaign-{started.strftime('%Y-%m-%d')}-{camp.a.scale}",
        "notebook": None,
        "command": " ".join(["python", "-m", "campaigns.adaptive_gpu_campaign", *argv]),
        "parameters": {"scale": camp.a.scale, "device": camp.a.device, "contract_base": str(
            CONTRACTS[camp.a.scale].relative_to(REPO)), "contract_changes": "contract_changes.json",
            "a_updates": camp.a.a_updates, "b_updates": camp.a.b_updates, "migration_step": camp.a.migration_step,
            "commit_every": camp.a.commit_every, "resume_updates": camp.a.resume_updates,
            "migrated_workers": camp.a.migrated_workers, "growth_workers": camp.a.growth_workers,
            "growth_updates": camp.a.growth_updates, "deterministic": camp.a.deterministic,
            "deadline_s": camp.a.deadline_s, "phase_timeouts_s": camp.timeouts, "work": str(camp.work),
            "script_sha256": _sha256(Path(__file__))},
        "git": code_state(),
        "versions": versions(runtime=True),
        "device": {**device_info(), "type": camp.a.device},  # nvidia-smi: this process holds no CUDA context
        "status": "completed" if status_code == 0 and all_done else ("incomplete" if status_code == 2 else "failed"),
        "errors": camp.errors,
        "started_at": started.isoformat(timespec="seconds"),
        "ended_at": ended.isoformat(timespec="seconds"),
        "duration_s": round((ended - started).total_seconds(), 1),
        "results": rows,
        "raw_output": sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.name != "run.json"),
    }
    if state.get("history"):
        record["earlier_calls"] = state["history"]
    (out / "run.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    (out / "summary.md").write_text(summary_md(state, record))


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv=None) -> int:
    from kit import numerics

    numerics.apply()  # this process hashes seeds and reads roots: under the kit's numeric profile
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="the campaign's record directory (small: bring it back as a tar)")
    ap.add_argument("--work", default=None, help="where the seed, prepared job and stores go (tens of GB at 1.7B; "
                                                   "default build/adaptive-gpu-campaign-work/<out name>)")
    ap.add_argument("--scale", choices=["full", "tiny"], default="full")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--run-id", default=None)
    ap.add_argument("--phases", default=None, help=f"comma list of {','.join(PHASES)} (default: all; missing "
                                                    "dependencies are added)")
    ap.add_argument("--redo", action="store_true", help="rerun phases an earlier call completed")
    ap.add_argument("--deadline-s", type=float, default=None,
                    help="overall wall-clock budget: no phase starts or runs past it (default: 570 at full scale)")
    ap.add_argument("--a-updates", type=int, default=4, help="cohort A endpoint")
    ap.add_argument("--b-updates", type=int, default=4, help="cohort B endpoint")
    ap.add_argument("--migration-step", type=int, default=2)
    ap.add_argument("--commit-every", type=int, default=2)
    ap.add_argument("--resume-updates", type=int, default=2)
    ap.add_argument("--migrated-workers", type=int, default=3)
    ap.add_argument("--growth-workers", type=int, default=2, help="ranks of the growth run (default 2: one per GPU)")
    ap.add_argument("--growth-updates", type=int, default=2,
                    help="updates of the growth run (one commit at 1.7B: ~22 GB of disk per commit)")
    ap.add_argument("--deterministic", choices=["rerun", "all", "none"], default="rerun",
                    help="phases run with KIT_GPU_DETERMINISTIC=1: resume+rerun (default), all, or none")
    ap.add_argument("--keep-work", action="store_true", help="keep every home (no deletion as the campaign goes)")
    ap.add_argument("--internal-build-seed", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--internal-info", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.internal_build_seed:
        info = build_seed(Path(a.internal_build_seed), a.scale, a.device)
        Path(a.internal_info).write_text(json.dumps(info, indent=1) + "\n")
        return 0
    if not a.out:
        ap.error("--out is required")
    if a.deadline_s is None and a.scale == "full":
        a.deadline_s = 570.0
    if a.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("--device cuda but torch sees no GPU")
    wanted = list(PHASES) if not a.phases else [p.strip() for p in a.phases.split(",") if p.strip()]
    unknown = [p for p in wanted if p not in PHASES]
    if unknown:
        raise SystemExit(f"--phases: unknown {unknown}; expected some of {list(PHASES)}")
    stack = list(wanted)
    while stack:  # add dependencies
        for d in DEPS[stack.pop()]:
            if d not in wanted:
                wanted.append(d)
                stack.append(d)
    started = dt.datetime.now(dt.UTC)
    camp = Campaign(a, argv)
    camp.state.setdefault("history", []).append({"started_at": started.isoformat(timespec="seconds"), "argv": argv})
    camp.save()
    code = 1
    try:
        code = camp.run(wanted)
        if a.device == "cpu" and code == 0:  # the CPU promise, asserted here as well as by --require-equal
            for name in ("determinism", "migration"):
                p = camp.state["phases"].get(name, {})
                if name in wanted and p.get("learned_state_equal") is not True:
                    camp.errors.append({"phase": name, "status": "failed", "error": "CPU roots differ"})
                    print(f"PHASE {name} FAILED: learned-state roots differ on CPU", file=sys.stderr)
                    code = 1
    except BaseException as e:  # noqa: BLE001 -- write the record whatever happens
        camp.errors.append({"phase": "script", "status": "failed", "error": f"{type(e).__name__}: {e}"[:4000]})
        print(f"PHASE script FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        code = 1
    finally:
        camp.save()
        write_outputs(camp, started, argv, code)
    print(json.dumps({"out": str(camp.out), "status": code, "phases": {p: camp.state["phases"].get(p, {}).get("status") for p in PHASES}}), flush=True)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
