"""The medium pilot: fix a draft medium contract's free choices on development roles only.

Issue 17 item 2: the medium contracts keep the trial's counts and pin the small seed, but the numbers
the seed documents leave open (learning rate first; microbatch size and `max_tokens` optionally) are
chosen by a pilot that reads development roles only, is committed as its own run, and precedes the
frozen contract (campaigns/medium_freeze.py). On the x2 GPU host, from the repository root:

    python -m campaigns.medium_pilot --build-seed --device cuda --lr 3e-5 1e-4 3e-4 --until 8 \\
        --deadline-s 560 --out OUT --run-id medium-pilot-<date>

and on 2 CPU cores (minutes; the tests use it on an even smaller seed):

    python -m campaigns.medium_pilot --tiny --device cpu --seed DIR --out OUT

The rule that chooses, fixed here before any data (RULE, recorded verbatim in run.json):
  eligible   the candidate's development-retention NLL change has a one-sided upper bound (the contract's
             paired bootstrap: confidence, resamples, seed) at most the contract's retention gate
             `gates.retention_upper_at_most` (+0.02 nats per assistant token);
  best       among eligible candidates, the highest development task accuracy (all families pooled);
  ties       the lower development task NLL change (nats per assistant token; a short pilot from a seed
             at 0% accuracy often ties at 0%), then the smaller lr, microbatch size, max_tokens.
No eligible candidate: nothing is chosen, the record says so, and the freeze refuses it.

Per candidate (a product of --lr, --microbatch-size, --max-tokens) it writes the draft with those values
as a candidate contract, then `kit adaptive prepare`, `kit adaptive train --cohort A --until K` and
`kit adaptive evaluate --split dev` of the step-K commit against the seed. Why one prepare per candidate
and not one shared: prepared.json binds the contract digest and the contract holds the rate, so a shared
job would need a rate override in `kit adaptive train`, which the contract discipline (code reads numbers
only from the contract) forbids. The candidates' data are the same: the draws are pure functions of the
data seeds, and the record lists every candidate's dev role digests and says whether they agree. The
seed's scores are computed once (the evaluation score cache is keyed by weights and role digests).
With --parallel N up to N candidates run at once (campaigns/pilot_run.py), on one GPU sharing its memory;
the record keeps the candidates' order, and each candidate's results are those it gets alone.

Final roles are never opened. The pilot passes only `--split dev` (final scoring needs a selection
record, which the pilot never writes) and checks afterwards that no prepared job has a final-access,
selections or final-evaluations log and that the exposure ledger's bytes are unchanged; any of those
makes the run "failed".

Why a campaign script and not `kit adaptive pilot`: like campaigns/adaptive_gpu_campaign.py it orchestrates
CLI steps as process groups under a deadline and writes a kit-bench/1 record; each kit command stays one
step, and the kit package gains no orchestration. The record (OUT/run.json) is rewritten after every step,
so a deadline leaves a "partial" record; the seed build (about 400 s on an H200) counts against --deadline-s.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
from pathlib import Path

from campaigns.phases import REPO, Deadline, json_lines
from campaigns.pilot_run import PilotRun, candidates_at_once, now, repo_relative, sha256_or_none
from kit.evidence.environment import code_state, device_info, versions

RECORD_FORMAT = "kit-bench/1"
SOURCE = REPO / "data" / "alpaca_5000.json"
DRAFTS = {"medium": (REPO / "contracts" / "adaptive-shards.medium.draft.json",
                     REPO / "contracts" / "shared-gradient.medium.draft.json"),
          "tiny": (REPO / "contracts" / "adaptive-shards.tiny.json", REPO / "contracts" / "shared-gradient.tiny.json")}
RULE = ("eligible: the development-retention NLL change's one-sided upper bound (the contract's paired bootstrap) "
        "is at most the contract's gates.retention_upper_at_most; chosen: the eligible candidate with the highest "
        "development task accuracy (families pooled); ties: the lower development task NLL change, then the "
        "smaller lr, microbatch_size, max_tokens, warm-up; none eligible: nothing chosen")
# seconds per step before the overall deadline cuts them shorter, and the least worth starting
# (train: 128 updates by two workers sharing one GPU beside the study pilot, untimed before, at most 420 s)
TIMEOUTS = {"medium": {"seed": 560, "prepare": 180, "train": 420, "evaluate": 240},
            "tiny": {"seed": 600, "prepare": 120, "train": 180, "evaluate": 120}}
FINAL_LOGS = ("final-access.jsonl", "selections.jsonl", "final-evaluations.jsonl")  # kit/adaptive/selection.py


def candidate_overrides(lrs, microbatch_sizes, max_tokens, warmups=None) -> list[dict]:
    """Every combination, in the order the tie-break prefers (smaller values first). Without `warmups` the
    candidates keep the draft's schedule and carry no "warmup" key (the records made before it)."""
    if warmups is None:
        return [{"lr": lr, "microbatch_size": mb, "max_tokens": mt}
                for lr, mb, mt in itertools.product(sorted(lrs), sorted(microbatch_sizes), sorted(max_tokens))]
    return [{"lr": lr, "microbatch_size": mb, "max_tokens": mt, "warmup": w}
            for lr, mb, mt, w in itertools.product(sorted(lrs), sorted(microbatch_sizes), sorted(max_tokens),
                                                   sorted(warmups))]


def schedule_for(warmup: int, after: str) -> str | dict:
    """training.lr_schedule for a candidate's warm-up: "constant" for none, else a linear warm-up over
    `warmup` updates, then constant, or a half cosine to a tenth of the peak at the cohort's end."""
    if warmup == 0:
        return "constant"
    return {"warmup_updates": warmup, "after": after, "floor_ratio": 0.1 if after == "cosine" else 1.0}


def candidate_contract(draft: dict, overrides: dict, after: str = "constant") -> dict:
    """The draft with one candidate's free choices; the same rate for the grown group, so growth differs
    from its control only by the added blocks (docs/contracts.md). A "warmup" choice sets
    training.lr_schedule (schedule_for); without one the draft's schedule stays."""
    c = json.loads(json.dumps(draft))
    for group in c["training"]["optimizer"].values():
        group["lr"] = overrides["lr"]
    c["training"]["microbatch_size"] = overrides["microbatch_size"]
    c["training"]["max_tokens"] = overrides["max_tokens"]
    if "warmup" in overrides:
        c["training"]["lr_schedule"] = schedule_for(overrides["warmup"], overrides.get("after", after))
    return c


def summarize(evaluation: dict, terms) -> dict:
    """Dev accuracy per family (candidate and seed), NLL changes with their bounds, eligibility."""
    from kit.adaptive.evaluation import nll_change_bounds
    from kit.stats import gate_retention

    if evaluation["split"] != "dev":  # the pilot reads development records only
        raise AssertionError(f"evaluation record has split {evaluation['split']!r}; the pilot reads 'dev' only")
    fam: dict[str, dict] = {}
    for x in evaluation["tasks"]:
        f = fam.setdefault(x["family"], {"n": 0, "candidate_correct": 0, "seed_correct": 0})
        f["n"] += 1
        f["candidate_correct"] += int(x["cand_correct"])
        f["seed_correct"] += int(x["base_correct"])
    for f in fam.values():
        f["candidate_accuracy"] = f["candidate_correct"] / f["n"]
        f["seed_accuracy"] = f["seed_correct"] / f["n"]
    n = len(evaluation["tasks"])
    bounds = nll_change_bounds(evaluation, terms)
    threshold = terms.gates.retention_upper_at_most
    return {"accuracy_by_family": dict(sorted(fam.items())),
            "accuracy": sum(f["candidate_correct"] for f in fam.values()) / n,
            "seed_accuracy": sum(f["seed_correct"] for f in fam.values()) / n,
            "tasks": bounds["tasks"], "retention": bounds["retention"],
            "retention_threshold": threshold,
            # the contract's retention gate itself (kit.stats.gate_retention), so the pilot and the trial's
            # gate cannot disagree; a non-finite bound is refused there and fails the candidate
            "eligible": gate_retention(bounds["retention"]["bootstrap_upper"], threshold)["passed"]}


def choose(candidates: list[dict]) -> dict | None:
    """RULE over completed candidates; None when none is eligible."""
    eligible = [c for c in candidates if c.get("dev") and c["dev"]["eligible"]]
    if not eligible:
        return None
    def rank(c: dict) -> tuple:
        o = c["overrides"]
        return (-c["dev"]["accuracy"], c["dev"]["tasks"]["change_nats_per_token"], o["lr"], o["microbatch_size"],
                o["max_tokens"], o.get("warmup", 0))
    return min(eligible, key=rank)


# The medium scale is a positive control (issue 26, Deliver 3): the seed must sit inside this band of pooled
# development accuracy, and some eligible candidate trained to cohort A's endpoint must gain this much over it.
SEED_BAND = (0.05, 0.40)
MIN_GAIN = 0.15


def positive_control(candidates: list[dict], until: int, cohort_updates: int) -> dict | None:
    """Whether the pilot shows the medium scale can learn: the seed in SEED_BAND, and an eligible candidate
    at cohort A's endpoint (`until` == its updates) at least MIN_GAIN above the seed, pooled dev accuracy."""
    done = [c for c in candidates if c.get("dev")]
    if not done:
        return None
    seed = done[0]["dev"]["seed_accuracy"]  # every candidate scores the same seed on the same dev role
    eligible = [c for c in done if c["dev"]["eligible"]]
    best = max(eligible, key=lambda c: c["dev"]["accuracy"], default=None)
    gain = None if best is None else best["dev"]["accuracy"] - seed
    in_band = SEED_BAND[0] <= seed <= SEED_BAND[1]
    at_endpoint = until == cohort_updates
    return {"seed_pooled_dev_accuracy": seed, "seed_band": list(SEED_BAND), "seed_in_band": in_band,
            "until": until, "cohort_A_updates": cohort_updates, "at_cohort_endpoint": at_endpoint,
            "best_eligible": None if best is None else best["name"], "best_eligible_gain": gain,
            "min_gain": MIN_GAIN, "holds": bool(in_band and at_endpoint and gain is not None and gain >= MIN_GAIN)}


class Pilot(PilotRun):
    ROW_VALUES = "overrides"

    def __init__(self, a, argv):
        from kit.adaptive.schema import load_adaptive_contract
        from kit.evidence.ledger import LEDGER_ENV, ledger_path
        from kit.study.schema import load_study_contract

        self.a, self.scale = a, "tiny" if a.tiny else "medium"
        self.out = Path(a.out).resolve()
        self.work = Path(a.work).resolve() if a.work else REPO / "build" / "medium-pilot-work" / self.out.name
        if self.work == self.out or self.out in self.work.parents:
            raise SystemExit(f"--work {self.work} must not lie under --out {self.out} (stores and prepared jobs stay out of the record)")
        for d in (self.out, self.work):
            d.mkdir(parents=True, exist_ok=True)
        self.deadline = Deadline(a.deadline_s)
        self.timeouts = TIMEOUTS[self.scale]
        draft_path, study_path = (Path(a.draft) if a.draft else DRAFTS[self.scale][0],
                                  Path(a.study_draft) if a.study_draft else DRAFTS[self.scale][1])
        self.draft = load_adaptive_contract(draft_path)
        study = load_study_contract(study_path)
        self.ledger = ledger_path()
        # its preparations read (and must leave unchanged) this same ledger, the committed one unless
        # KIT_LEDGER names another: outside kit run a prepare would otherwise keep a ledger of its own
        os.environ.setdefault(LEDGER_ENV, str(self.ledger))
        self.seed_scored: set[str] = set()  # the score-cache keys whose seed entry an evaluation has written
        self.record = {
            "format": RECORD_FORMAT, "run_id": a.run_id or self.out.name, "notebook": None,
            "command": " ".join(["python", "-m", "campaigns.medium_pilot", *argv]), "started_at": now(), "ended_at": None,
            "duration_s": None, "status": "running", "errors": [], "git": code_state(), "versions": versions(runtime=True),
            "device": {**device_info(), "type": a.device},
            "parameters": {
                "scale": self.scale, "rule": RULE, "until": a.until, "device": a.device,
                "drafts": {"adaptive": {"path": repo_relative(draft_path), "digest": self.draft.digest},
                           "study": {"path": repo_relative(study_path), "digest": study.digest}},
                "candidates": candidate_overrides(a.lr, a.microbatch_size or [self.draft.terms.training.microbatch_size],
                                                  a.max_tokens or [self.draft.terms.training.max_tokens], a.warmup),
                "schedule_after": a.schedule_after, "parallel": a.parallel,
                "ledger": {"path": str(self.ledger), "sha256_before": sha256_or_none(self.ledger)},
                "public_source": repo_relative(SOURCE),
            },
            "results": {"seed": None, "candidates": [], "chosen": None, "final_roles": None},
            "raw_output": [],
        }
        self.start()

    def step(self, kind: str, args: list, log: str, deterministic: bool = False) -> dict:
        return self.run_module(kind, ["kit", *args], log, deterministic)

    # -- one candidate -------------------------------------------------------------------------------
    def candidate(self, i: int, overrides: dict, seed: Path, row: dict) -> None:
        """Candidate i's steps; what they give goes on its `row` (results.candidates[i]) under the lock."""
        from kit.adaptive.schema import load_adaptive_contract
        from kit.digest import load_json_strict

        name = row["name"]
        cdir = self.out / "contracts"
        cdir.mkdir(exist_ok=True)
        path = cdir / f"{name}.json"
        path.write_text(json.dumps(candidate_contract(self.draft.data, overrides, self.a.schedule_after), indent=2)
                        + "\n")
        contract = load_adaptive_contract(path)
        self.save(row, contract_digest=contract.digest)
        prepared, home = self.work / name / "prepared", self.work / name / "home"
        for d in (prepared, home):
            if d.exists():
                shutil.rmtree(d)
        r = self.step("prepare", [
            "adaptive", "prepare", "--contract", path, "--seed", seed, "--replay", seed / "trained_conversations.jsonl",
            "--public-source", SOURCE, "--out", prepared], f"{name}-prepare")
        roles = load_json_strict(prepared / "prepared.json")["roles"]
        with self.lock:
            row["seconds"]["prepare"] = r["seconds"]
            self.save(row, dev_role_sha256={k: roles[k]["sha256"] for k in ("dev.tasks", "dev.retention")})
        workers = self.a.workers or contract.terms.cohorts.A.workers
        r = self.step("train", ["adaptive", "train", "--prepared", prepared, "--seed", seed, "--home", home,
                                "--cohort", "A", "--workers", workers, "--until", self.a.until], f"{name}-train")
        with self.lock:
            row["seconds"]["train"] = r["seconds"]
        commits = [c for c in json_lines(r["stdout"]) if "full_root" in c]
        if not commits or commits[-1].get("cohort_step") != self.a.until:
            raise RuntimeError(f"{name}: kit adaptive train printed no commit at cohort step {self.a.until}: {commits}")
        self.save(row, commit=commits[-1], updates=_update_rows(home))
        ev = self.work / "evals" / f"{name}.json"  # the shared folder: one score cache, the seed scored once

        def evaluate() -> dict:
            return self.step("evaluate", [
                "adaptive", "evaluate", "--prepared", prepared, "--candidate", f"{home}:{commits[-1]['full_root']}",
                "--baseline", f"seed:{seed}", "--split", "dev", "--device", self.a.device, "--out", ev],
                f"{name}-evaluate")

        # The seed's cache entry depends on the dev role files and the scoring settings (kit/adaptive/evaluation.py
        # `cached_scores`); the first evaluation of each such key runs alone, so concurrent candidates read its entry.
        key = json.dumps([row["dev_role_sha256"], contract.terms.training.max_tokens,
                          contract.terms.evaluation.max_new_tokens], sort_keys=True)
        with self.gate(key):
            scored = key in self.seed_scored
            if not scored:
                r = evaluate()
                self.seed_scored.add(key)
        if scored:
            r = evaluate()
        with self.lock:
            row["seconds"]["evaluate"] = r["seconds"]
        evaluation = load_json_strict(ev)
        (self.out / "evals").mkdir(exist_ok=True)
        shutil.copyfile(ev, self.out / "evals" / f"{name}.json")
        self.save(row, dev=summarize(evaluation, contract.terms), status="completed")

    def final_roles_check(self) -> dict:
        """What kit writes whenever final roles are opened (or refused) must be absent; the ledger unchanged."""
        logs = sorted(str(p) for p in self.work.glob("c*/prepared/*") if p.name in FINAL_LOGS)
        return self.final_roles_result(logs, FINAL_LOGS, "final_logs_found")

    def run(self) -> int:
        res = self.record["results"]
        self.run_candidates(self.a.parallel)
        self.settle(lambda c: json.dumps(c["dev_role_sha256"], sort_keys=True) if c.get("dev_role_sha256") else None)
        res["positive_control"] = positive_control(res["candidates"], self.a.until,
                                                   self.draft.terms.cohorts.A.updates)
        if self.record["status"] == "completed":
            best = choose(res["candidates"])
            res["chosen"] = None if best is None else {"candidate": best["name"], "values": best["overrides"],
                                                       "rule": RULE}
            if best is None:
                res["no_choice"] = "no candidate met the retention threshold; the freeze refuses this record"
        self.record["ended_at"] = now()
        self.save()
        print(json.dumps({"status": self.record["status"], "chosen": res["chosen"], "out": str(self.out)}, sort_keys=True))
        return {"completed": 0, "partial": 2}.get(self.record["status"], 1)


def _update_rows(home: Path) -> list[dict]:
    """Per update: objective, CE and KL per token, gradient norm (the attempt's updates.jsonl)."""
    rows = []
    for f in sorted(home.glob("attempts/*/updates.jsonl")):
        for line in f.read_text().splitlines():
            u = json.loads(line)
            rows.append({k: u.get(k) for k in ("cohort_step", "objective", "ce_per_token", "kl_per_token", "grad_norm")})
    return rows


def main(argv=None) -> int:
    from kit import numerics

    numerics.apply()  # this process hashes seeds and reads roots: under the kit's numeric profile
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", action="store_true", help="the tiny contracts and seed (CPU-size check)")
    p.add_argument("--draft", help="the draft adaptive contract (default: the medium draft, or the tiny contract)")
    p.add_argument("--study-draft", help="the draft study contract, bound by digest for the freeze")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--seed", help="an existing seed directory (with trained_conversations.jsonl)")
    src.add_argument("--build-seed", action="store_true", help="build the seed first (kit seed build)")
    p.add_argument("--lr", type=float, nargs="+", default=None, help="candidate learning rates")
    p.add_argument("--microbatch-size", type=int, nargs="+", help="candidate microbatch sizes (default: the draft's)")
    p.add_argument("--max-tokens", type=int, nargs="+", help="candidate token caps (default: the draft's)")
    p.add_argument("--warmup", type=int, nargs="+", help="candidate warm-up lengths in updates (0: constant "
                   "rate); default: the draft's training.lr_schedule")
    p.add_argument("--schedule-after", choices=["constant", "cosine"], default="constant",
                   help="with --warmup: the rate after the warm-up (cosine: to a tenth of the peak at the end)")
    p.add_argument("--until", type=int, default=None, help="cohort-A updates per candidate (default 8; tiny 2)")
    p.add_argument("--workers", type=int, help="training ranks (default: the contract's cohorts.A.workers)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--deadline-s", type=float, help="overall deadline, seed build included")
    p.add_argument("--parallel", type=candidates_at_once, default=1, metavar="N",
                   help="candidates run at once (default 1: one after another); the record keeps their order")
    p.add_argument("--out", required=True, help="the run directory (run.json, logs, dev evaluations)")
    p.add_argument("--work", help="seed, prepared jobs and stores (default build/medium-pilot-work/<out name>)")
    p.add_argument("--run-id")
    a = p.parse_args(argv)
    a.lr = a.lr or ([1e-4, 1e-3] if a.tiny else [3e-5, 1e-4, 3e-4])
    a.until = a.until or (2 if a.tiny else 8)
    if a.warmup and any(w < 0 or w >= a.until for w in a.warmup):
        p.error(f"--warmup {a.warmup}: expected lengths in [0, --until = {a.until}) updates")
    return Pilot(a, argv).run()


if __name__ == "__main__":
    sys.exit(main())
