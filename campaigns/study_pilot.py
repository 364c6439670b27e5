"""The study pilot: fix the shared-gradient study's learning rate and warm-up on development tasks only.

Issue 26 item 3: each experiment gets its own pilot, and the study's contract no longer borrows the
adaptive pilot's rate (chosen for another microbatch and another objective). The candidates are the
product of --lr and --warmup (0: `training.lr_schedule` "constant"; N: {"warmup_updates": N, "after":
"constant", "floor_ratio": 1.0}, kit/train/schedule.py). Each candidate is the draft study contract with
those values (and a `data.dev` role when the draft has none, recorded as `dev_added`), prepared by
`kit study prepare`, trained as the single arm by `kit study arm single --until K` from the seed, and its
step-K commit scored on the development tasks by `python -m kit.study.dev`, as is the seed (once per
distinct development file). On the x2 GPU host, from the repository root:

    python -m campaigns.study_pilot --build-seed --device cuda --lr 1e-4 3e-4 --warmup 0 8 --until 32 \\
        --deadline-s 560 --out OUT --run-id study-pilot-<date>

and on 2 CPU cores (well under two minutes; the tests use it on a smaller seed):

    python -m campaigns.study_pilot --tiny --device cpu --seed DIR --out OUT

The rule that chooses, fixed here before any data (RULE, recorded verbatim in run.json). The study
contract has no development retention set (its retention probes are final-test material), so there is
no retention gate: every completed candidate is eligible, and the rule reads task accuracy and task NLL
only.

Final roles are never opened: the pilot never runs `kit study evaluate` (which freezes the candidates
and writes the ledger), and checks afterwards that no study directory holds an evaluation freeze,
an opening log or final scores, and that the exposure ledger's bytes are unchanged; any of those makes
the run "failed". Development scoring reads `prepared/dev_tasks.jsonl` only (kit/study/dev.py).

Why a campaign script (as campaigns/medium_pilot.py): it orchestrates kit commands as process groups
under a deadline and writes a kit-bench/1 record (OUT/run.json), rewritten after every step, so a
deadline leaves a "partial" record; every candidate is kept, failed ones with their error. With --parallel N up
to N candidates run at once (campaigns/pilot_run.py), in the record in their order.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shutil
import sys
from pathlib import Path

from campaigns.phases import REPO, Deadline
from campaigns.pilot_run import PilotRun, candidates_at_once, now, repo_relative, sha256_or_none
from kit.evidence.environment import code_state, device_info, versions

RECORD_FORMAT = "kit-bench/1"
SOURCE = REPO / "data" / "alpaca_5000.json"
DRAFTS = {"medium": REPO / "contracts" / "shared-gradient.medium.draft.json",
          "tiny": REPO / "contracts" / "shared-gradient.tiny.json"}
RULE = ("the study contract has no development retention set, so every completed candidate is eligible (no retention "
        "gate); chosen: the candidate with the highest development task accuracy (families pooled) of its single-arm "
        "commit at --until; ties: the lower development task NLL change against the seed (nats per assistant token), "
        "then the smaller lr, then the shorter warm-up; no completed candidate: nothing chosen")
TIMEOUTS = {"medium": {"seed": 560, "prepare": 180, "train": 360, "score": 240},
            "tiny": {"seed": 600, "prepare": 120, "train": 180, "score": 120}}
# what `kit study evaluate` writes whenever it opens (or freezes for) the final roles (kit/study/screens.py)
FINAL_FILES = ("evaluation/freeze.json", "evaluation/opened.jsonl", "evaluation/models", "screens.json")


def schedule_for(warmup: int):
    """`training.lr_schedule` of a warm-up length: linear warm-up over N updates, then the peak rate."""
    return "constant" if warmup == 0 else {"warmup_updates": warmup, "after": "constant", "floor_ratio": 1.0}


def candidate_values(lrs, warmups) -> list[dict]:
    """Every combination, in the order the tie-break prefers (smaller values first)."""
    return [{"lr": lr, "warmup_updates": w} for lr, w in itertools.product(sorted(lrs), sorted(warmups))]


def default_dev(draft: dict) -> dict:
    """The development role a draft without `data.dev` gets: the final test's count, seed and difficulty in a
    role of its own (prepare excludes every seed, training and final digest from it)."""
    f = draft["data"]["final_test"]
    return {"count": f["count"], "role": "study-dev", "seed": f["seed"], "difficulty": f["difficulty"]}


def candidate_contract(draft: dict, values: dict) -> dict:
    """The draft with one candidate's rate and schedule, and a development role when it has none."""
    c = json.loads(json.dumps(draft))
    c["training"]["optimizer"]["lr"] = values["lr"]
    c["training"]["lr_schedule"] = schedule_for(values["warmup_updates"])
    c["data"].setdefault("dev", default_dev(draft))
    return c


def summarize(cand: dict, seed: dict) -> dict:
    """Development accuracy pooled and per family (candidate and seed) and the task NLL change per token."""
    if cand["dev_tasks_sha256"] != seed["dev_tasks_sha256"]:
        raise ValueError("candidate and seed were scored on different development files")
    seed_rows = {r["id"]: r for r in seed["tasks"]}
    fam: dict[str, dict] = {}
    for r in cand["tasks"]:
        f = fam.setdefault(r["family"], {"n": 0, "candidate_correct": 0, "seed_correct": 0})
        f["n"] += 1
        f["candidate_correct"] += int(r["correct"])
        f["seed_correct"] += int(seed_rows[r["id"]]["correct"])
    for f in fam.values():
        f["candidate_accuracy"] = f["candidate_correct"] / f["n"]
        f["seed_accuracy"] = f["seed_correct"] / f["n"]
    seed_nll = {r["id"]: r for r in seed["task_nll"]}
    tokens = sum(r["tokens"] for r in cand["task_nll"])
    change = sum(r["nll_sum"] - seed_nll[r["id"]]["nll_sum"] for r in cand["task_nll"]) / tokens
    n = len(cand["tasks"])
    return {"accuracy_by_family": dict(sorted(fam.items())),
            "accuracy": sum(f["candidate_correct"] for f in fam.values()) / n,
            "seed_accuracy": sum(f["seed_correct"] for f in fam.values()) / n, "n": n,
            "tasks": {"change_nats_per_token": change, "tokens": tokens,
                      "candidate_nats_per_token": sum(r["nll_sum"] for r in cand["task_nll"]) / tokens,
                      "seed_nats_per_token": sum(r["nll_sum"] for r in seed["task_nll"]) / tokens},
            "eligible": True}


def choose(candidates: list[dict]) -> dict | None:
    """RULE over completed candidates; None when none completed."""
    done = [c for c in candidates if c.get("dev")]
    if not done:
        return None
    return min(done, key=lambda c: (-c["dev"]["accuracy"], c["dev"]["tasks"]["change_nats_per_token"],
                                    c["values"]["lr"], c["values"]["warmup_updates"]))


def positive_lr(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive finite learning rate")
    return v


def warmup_updates(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = -1
    if v < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number of warm-up updates (0: constant)")
    return v


class StudyPilot(PilotRun):
    def __init__(self, a, argv):
        from kit.evidence.ledger import LEDGER_ENV, ledger_path
        from kit.study.schema import load_study_contract

        self.a, self.scale = a, "tiny" if a.tiny else "medium"
        draft_path = Path(a.draft) if a.draft else DRAFTS[self.scale]
        self.draft = load_study_contract(draft_path)
        check_arguments(a, self.draft)  # before anything is written
        self.out = Path(a.out).resolve()
        self.work = Path(a.work).resolve() if a.work else REPO / "build" / "study-pilot-work" / self.out.name
        if self.work == self.out or self.out in self.work.parents:
            raise SystemExit(f"--work {self.work} must not lie under --out {self.out} (studies stay out of the record)")
        for d in (self.out, self.work):
            d.mkdir(parents=True, exist_ok=True)
        self.deadline, self.timeouts = Deadline(a.deadline_s), TIMEOUTS[self.scale]
        self.source = Path(a.public_source) if a.public_source else SOURCE
        self.ledger = Path(a.ledger) if a.ledger else ledger_path()
        os.environ[LEDGER_ENV] = str(self.ledger)  # every step reads (and must leave unchanged) this ledger
        self.seed_scores: dict[str, dict] = {}
        self.record = {
            "format": RECORD_FORMAT, "run_id": a.run_id or self.out.name, "notebook": None,
            "command": " ".join(["python", "-m", "campaigns.study_pilot", *argv]), "started_at": now(),
            "ended_at": None, "duration_s": None, "status": "running", "errors": [], "git": code_state(),
            "versions": versions(runtime=True), "device": {**device_info(), "type": a.device},
            "parameters": {
                "scale": self.scale, "rule": RULE, "until": a.until, "device": a.device, "arm": "single",
                "parallel": a.parallel,
                "draft": {"path": repo_relative(draft_path), "digest": self.draft.digest},
                "dev_added": None if "dev" in self.draft.terms.data else default_dev(self.draft.data),
                "candidates": candidate_values(a.lr, a.warmup),
                "ledger": {"path": str(self.ledger), "sha256_before": sha256_or_none(self.ledger)},
                "public_source": repo_relative(self.source),
            },
            "results": {"seed": None, "candidates": [], "chosen": None, "final_roles": None},
            "raw_output": [],
        }
        self.start()

    # -- one candidate -------------------------------------------------------------------------------
    def candidate(self, i: int, values: dict, seed: Path, row: dict) -> None:
        """Candidate i's steps; what they give goes on its `row` (results.candidates[i]) under the lock."""
        from kit.digest import load_json_strict
        from kit.study.prepare import DEV_FILE, PREPARED_DIR
        from kit.study.schema import load_study_contract

        name = row["name"]
        (self.out / "contracts").mkdir(exist_ok=True)
        path = self.out / "contracts" / f"{name}.json"
        path.write_text(json.dumps(candidate_contract(self.draft.data, values), indent=2) + "\n")
        self.save(row, contract_digest=load_study_contract(path).digest)
        study = self.work / name / "study"
        if study.exists():
            shutil.rmtree(study)
        r = self.run_module("prepare", [
            "kit", "study", "prepare", "--contract", path, "--seed", seed, "--public-source", self.source,
            "--out", study, "--ledger", self.ledger], f"{name}-prepare")
        with self.lock:
            row["seconds"]["prepare"] = r["seconds"]
            self.save(row, dev_tasks_sha256=load_json_strict(study / PREPARED_DIR / "prepared.json")["files"][DEV_FILE])
        r = self.run_module("train", ["kit", "study", "arm", "single", "--study", study, "--seed", seed,
                                      "--until", self.a.until], f"{name}-train")
        with self.lock:
            row["seconds"]["train"] = r["seconds"]
        arm = load_json_strict(study / "arms" / "single" / "arm.json")
        last = arm["commits"][-1] if arm.get("commits") else None
        if last is None or last["step"] != self.a.until:
            raise RuntimeError(f"{name}: the single arm ({arm['status']}: {arm['reason']}) has no commit at update "
                               f"{self.a.until}")
        self.save(row, commit={"home": arm["home"], "full_root": last["full_root"], "step": last["step"]},
                  updates=[{k: u[k] for k in ("step", "objective", "grad_norm", "clip_factor")} for u in arm["updates"]])
        seed_eval = self.seed_evaluation(row["dev_tasks_sha256"], study, seed)
        ev = self.out / "evals" / f"{name}.json"
        r = self.run_module("score", [
            "kit.study.dev", "--study", study, "--seed", seed, "--home", arm["home"], "--root", last["full_root"],
            "--out", ev, "--device", self.a.device], f"{name}-score")
        with self.lock:
            row["seconds"]["score"] = r["seconds"]
        self.save(row, dev=summarize(load_json_strict(ev), seed_eval), status="completed")

    def seed_evaluation(self, dev_sha: str, study: Path, seed: Path) -> dict:
        """The seed's development scores, once per development file (the candidates' files agree when the
        draws do: they are pure functions of the data seeds and the excluded digests); concurrent candidates
        wait on the file's gate while the first scores it."""
        from kit.digest import load_json_strict

        with self.gate(dev_sha):
            if dev_sha not in self.seed_scores:
                ev = self.out / "evals" / f"seed-{dev_sha[:12]}.json"
                self.run_module("score", ["kit.study.dev", "--study", study, "--seed", seed, "--out", ev,
                                          "--device", self.a.device], f"seed-{dev_sha[:12]}-score")
                self.seed_scores[dev_sha] = load_json_strict(ev)
            return self.seed_scores[dev_sha]

    def final_roles_check(self) -> dict:
        """What `kit study evaluate` writes whenever final roles are opened must be absent; the ledger unchanged."""
        found = sorted(str(p) for f in FINAL_FILES for p in self.work.glob(f"c*/study/{f}"))
        return self.final_roles_result(found, FINAL_FILES, "final_files_found")

    def run(self) -> int:
        res = self.record["results"]
        self.run_candidates(self.a.parallel)
        self.settle(lambda c: c.get("dev_tasks_sha256"))
        if self.record["status"] == "completed":
            best = choose(res["candidates"])
            res["chosen"] = None if best is None else {
                "candidate": best["name"], "rule": RULE,
                "values": {"lr": best["values"]["lr"], "lr_schedule": schedule_for(best["values"]["warmup_updates"])}}
        self.record["ended_at"] = now()
        self.save()
        print(json.dumps({"status": self.record["status"], "chosen": res["chosen"], "out": str(self.out)}, sort_keys=True))
        return {"completed": 0, "partial": 2}.get(self.record["status"], 1)


def check_arguments(a, draft) -> None:
    """Refusals that need the draft: every warm-up shorter than the arm's updates, --until inside them."""
    updates = draft.terms.schedule.updates
    if not 1 <= a.until <= updates:
        raise SystemExit(f"study_pilot: --until {a.until}: expected 1..{updates} ({draft.path}: field "
                         "'schedule.updates')")
    long = [w for w in a.warmup if w >= updates]
    if long:
        raise SystemExit(f"study_pilot: --warmup {long[0]}: expected fewer than {updates} updates ({draft.path}: "
                         "field 'schedule.updates'; training.lr_schedule.warmup_updates must be below it)")


def main(argv=None) -> int:
    from kit import numerics

    numerics.apply()  # this process hashes seeds and reads roots: under the kit's numeric profile
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m campaigns.study_pilot", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", action="store_true", help="the tiny study contract (CPU-size check)")
    p.add_argument("--draft", help="the draft study contract (default: the medium draft, or the tiny contract)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--seed", help="an existing seed directory")
    src.add_argument("--build-seed", action="store_true", help="build the seed first (kit seed build)")
    p.add_argument("--lr", type=positive_lr, nargs="+", default=None, help="candidate peak learning rates")
    p.add_argument("--warmup", type=warmup_updates, nargs="+", default=[0],
                   help="candidate linear warm-up lengths in updates (0: constant; default 0)")
    p.add_argument("--until", type=int, default=None, help="single-arm updates per candidate (default 32; tiny 2)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--deadline-s", type=float, help="overall deadline, seed build included")
    p.add_argument("--parallel", type=candidates_at_once, default=1, metavar="N",
                   help="candidates run at once (default 1: one after another); the record keeps their order")
    p.add_argument("--public-source", help="the pinned public conversation source (default data/alpaca_5000.json)")
    p.add_argument("--ledger", help="the exposure ledger prepare reads (default: the kit's, $KIT_LEDGER)")
    p.add_argument("--out", required=True, help="the run directory (run.json, logs, contracts, dev evaluations)")
    p.add_argument("--work", help="seed and prepared studies (default build/study-pilot-work/<out name>)")
    p.add_argument("--run-id")
    a = p.parse_args(argv)
    a.lr = a.lr or ([1e-4, 1e-3] if a.tiny else [1e-4, 3e-4])
    a.until = a.until or (2 if a.tiny else 32)
    return StudyPilot(a, argv).run()


if __name__ == "__main__":
    sys.exit(main())
