"""Write the medium replicate design (campaigns/medium-replicate-design.json, `kit-replicate-design/1`,
docs/formats/replicates.md): k per study arm and growth pairs chosen by `kit replicates plan` from the
spreads measured so far, the fresh final sets' pools, and the GPU time from measured durations.

    python -m campaigns.medium_replicate_design [--out campaigns/medium-replicate-design.json] [--at UTC]

Run once, before any replicate of the design trains; `kit verify-evidence runs` checks the file afterwards
(kit/evidence/replicate_design.py). Planning values (issue 59, the audit of reports/medium at 7df4281): the
study's paired replicate differences have sd 1.3-3.2 points (the upper end is used), the growth pair's task-NLL
difference 0.0155 nats/token.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from kit.digest import load_json_strict, sha256_json
from kit.evidence.replicate_design import DESIGN_FORMAT, design_problems, final_set_record
from kit.replicate_order import RULE as ORDER_RULE
from kit.replicate_stats import ANALYSIS_RULE, plan

REPO = Path(__file__).resolve().parents[1]
STUDY, ADAPTIVE = "contracts/shared-gradient.medium.json", "contracts/adaptive-shards.medium.json"
ARMS = ("single", "dense", "powersgd")
# (question, arms it sizes, plan inputs): the study's planning sd is the upper end of the measured 1.3-3.2 points
QUESTIONS = (
    ("study: detect a 3.4-point accuracy difference between two arms (PowerSGD's committed +3.4 over single)",
     [f"study/{a}" for a in ARMS], {"sd": 3.2, "effect": 3.4, "margin": 0.0, "alpha": 0.05, "power": 0.8,
                                     "one_sided": False}),
    ("study: PowerSGD noninferior to each control at the contract's 3-point margin when the true difference is 0",
     [f"study/{a}" for a in ARMS], {"sd": 3.2, "effect": 0.0, "margin": 3.0, "alpha": 0.05, "power": 0.8,
                                     "one_sided": True}),
    ("growth vs control: detect a task-NLL change of 0.019 nats/token (one-sided, the gain gate's direction)",
     ["pairs.growth_vs_control"], {"sd": 0.0155, "effect": 0.019, "margin": 0.0, "alpha": 0.05, "power": 0.8,
                                   "one_sided": True}),
)
# measured durations (seconds) and where: campaigns/logbook.md "GPU hosts: Replicates"
MEASURED = {
    "seed_rebuild": ([408, 421], "blocks of 2026-12-04 and 2026-12-04-b (about 7 min)"),
    "prepare_both_jobs": ([44, 54], "block 4 and block b"),
    "cohort_a_endpoint": ([161, 188], "A2 to step 64 then A3: 82 + 79 (block b), 113.5 + 74.5 (2026-12-04)"),
    "six_study_arms_side_by_side": ([130, 161], "the six study arms r1, r2 at once (2026-12-04)"),
    "growth_pair_side_by_side": ([123, 135], "each pair side by side (block b)"),
    "scoring": ([15, 58], "one development scoring (2026-12-04: 15-58; block b 19-24)"),
    "machine_start": ([35, 190], "a fresh machine's start (logbook)"),
}
SESSION_S = 1800  # device seconds per session (30 minutes)


def gpu_time(k_study: int, k_pairs: int) -> dict:
    """The device seconds the design needs, low and high from MEASURED, and the sessions it takes."""
    lo_hi = {}
    m = {name: v for name, (v, _) in MEASURED.items()}
    waves = math.ceil(k_study * len(ARMS) / 6)  # six study arms side by side
    study_scorings = (k_study * len(ARMS) + 1) * 2  # each endpoint and the seed: development, then the fresh final
    growth_scorings = k_pairs * 2 + (k_pairs * 2 + 1)  # dev-B, dev-G per pair; the fresh final: each endpoint and A
    parts = {"study arms": (waves, "six_study_arms_side_by_side"), "study scorings": (study_scorings, "scoring"),
             "growth pairs": (k_pairs, "growth_pair_side_by_side"), "growth scorings": (growth_scorings, "scoring")}
    for name, (n, key) in parts.items():
        lo_hi[name] = {"count": n, "seconds": [n * m[key][0], n * m[key][1]], "each": key}
    work = [sum(v["seconds"][i] for v in lo_hi.values()) for i in (0, 1)]
    fixed = [m["seed_rebuild"][i] + m["prepare_both_jobs"][i] + m["cohort_a_endpoint"][i] + m["machine_start"][i]
             for i in (0, 1)]
    per_session = [SESSION_S - fixed[1], SESSION_S - fixed[0]]  # what one session has left after its fixed part
    sessions = [math.ceil(work[0] / per_session[1]), math.ceil(work[1] / per_session[0])]
    return {"measured": {k: {"seconds": v, "where": w} for k, (v, w) in MEASURED.items()}, "parts": lo_hi,
            "work_seconds": work,
            "fixed_per_session_seconds": fixed,
            "sessions": {"count": sessions,
                         "rule": f"each {SESSION_S}-s session starts a fresh machine, rebuilds the seed, prepares both "
                                 "jobs and cohort A's endpoint (the fixed part), then runs whole replicate indexes"},
            "total_device_seconds": [work[0] + fixed[0] * sessions[0], work[1] + fixed[1] * sessions[1]]}


def build(at: str) -> dict:
    chosen, k = [], {}
    for question, arms, inputs in QUESTIONS:
        got = plan(**inputs)
        chosen.append({"question": question, "applies_to": arms, **inputs, "k": got["k"],
                       "power_at_k": got["power_at_k"]})
        for a in arms:
            k[a] = max(k.get(a, 0), got["k"])
    study_k = {a: v for a, v in k.items() if a.startswith("study/")}
    pairs_k = k["pairs.growth_vs_control"]
    ledger = REPO / "ledger" / "exposed.jsonl"
    study_terms = load_json_strict(REPO / STUDY)
    adaptive_terms = load_json_strict(REPO / ADAPTIVE)
    finals = {
        "study": final_set_record("study-replicate-final", 59, study_terms["data"]["final_test"]["difficulty"],
                                  study_terms["data"]["final_test"]["count"], 256, ledger, REPO),
        "growth": final_set_record("adaptive-replicate-final.tasks", 59, adaptive_terms["tasks"]["difficulty"],
                                   adaptive_terms["evaluation"]["final"]["tasks"], 256, ledger, REPO,
                                   adaptive_terms["tasks"]["families"]),
    }
    ks = max(study_k.values())
    return {
        "format": DESIGN_FORMAT, "name": "medium-confirmatory-replicates", "scale": "medium",
        "frozen": {"at": at, "rule": "written and committed before any run whose id begins with run_prefix trains; "
                                     "kit verify-evidence refuses such a run that started earlier"},
        "contracts": {"study": {"path": STUDY, "digest": sha256_json(study_terms)},
                      "adaptive": {"path": ADAPTIVE, "digest": sha256_json(adaptive_terms)}},
        "run_prefix": "medium-confirm-",
        "k": study_k,
        "pairs": {"growth_vs_control": {"arms": ["B-control", "B-growth"], "k": pairs_k,
                                        "start": "cohort A's committed endpoint, re-derived on the host (a replay of "
                                                 "medium-adaptive-A2-to-step64 and -A3-migrated)"}},
        "k_chosen_by": chosen,
        "replicates": {"study": list(range(ks)), "growth_vs_control": list(range(pairs_k)),
                       "replicate_zero": "re-runs the committed configuration (the committed data order) with the "
                                         "design's code and GPU mode, so every replicate is the same arm; the "
                                         "committed runs themselves are not replicates of this design"},
        "pairing": "replicate k of every arm trains on the same derived data order (kit/replicate_order.py: "
                   + ORDER_RULE + "); differences are paired by k",
        "gpu_mode": {"KIT_GPU_DETERMINISTIC": "1", "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
                     "applies_to": "every replicate, replicate 0 included, and every scoring"},
        "analysis": {"rule": ANALYSIS_RULE, "level": 0.95,
                     "questions": [("study: each pair of arms, accuracy difference on the fresh final set (t interval, "
                                   "k - 1 df, shared item variance from the per-item results)"),
                                   ("study: PowerSGD vs single and vs dense, noninferiority: the one-sided 95% t lower "
                                   "bound above -3 points"),
                                   ("growth vs control: task-NLL change on the fresh final set, the one-sided 95% t "
                                   "upper bound below -0.001 nats/token; retention on the development probes only"),
                                   "B vs A: task-NLL change and answers, as the committed gates, over the k pairs"],
                     "per_item": "every scoring's per-item correct bits and NLL committed beside its run"},
        "stopping_rule": "every index in `replicates` runs, no more: no run is added after any result of this design "
                         "is seen; a run that fails is re-run once under the same index and the same order, and an "
                         "index that still fails is reported missing (its pairs drop out of the analysis, said), "
                         "never replaced by a new index",
        "final_sets": finals,
        "gpu_time": gpu_time(ks, pairs_k),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(REPO / "campaigns" / "medium-replicate-design.json"),
                   help="the design file to write")
    p.add_argument("--at", default=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   help="the freezing time (UTC), default now")
    a = p.parse_args(argv)
    Path(a.out).write_text(json.dumps(build(a.at), indent=1, sort_keys=True) + "\n")
    problems = design_problems(a.out, REPO, REPO / "runs")
    print("\n".join(problems) or f"{a.out}: written and checked")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
