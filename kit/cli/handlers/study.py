"""What `kit study prepare|arm|evaluate|screens|status` run (their parsers: kit/cli/study.py); the work is in
kit/study/."""

from __future__ import annotations

import json
import sys

from kit.distributed.group import exit_torchrun_worker, under_torchrun
from kit.store.commits import resolve_root
from kit.study.arms import ArmRequest, arm_dir, arm_statuses, run_arm_record
from kit.study.hosts import run_arm_torchrun_record
from kit.study.measurement import arm_summary_json
from kit.study.prepare import load_prepared_job, prepare_study_job
from kit.study.screens import score_study, write_screens


def cmd_prepare(a) -> int:
    prepared = prepare_study_job(a.contract, a.seed, a.public_source, a.out, a.ledger)
    print(json.dumps({"study": a.out, "counts": prepared.counts.to_json(), "contract_digest": prepared.contract.digest},
                     sort_keys=True))
    return 0


def cmd_arm(a) -> int:
    if a.resume:  # HEAD or a short root -> the full root in this arm's store
        a.resume = resolve_root(arm_dir(a.study, a.name) / "home", a.resume, "--resume")
    if under_torchrun():  # one process per host; rank 0 writes the records and prints
        record = run_arm_torchrun_record(ArmRequest(a.study, a.name, a.seed, resume=a.resume, until=a.until,
                                             seconds_per_update=a.seconds_per_update, compile_blocks=a.compile))

        if record is not None:
            print(arm_summary_json(record))
        exit_torchrun_worker(1 if record is not None and record.status == "failed" else 0)
    ran = run_arm_record(ArmRequest(a.study, a.name, a.seed, resume=a.resume, until=a.until,
                                seconds_per_update=a.seconds_per_update, threads=a.threads, compile_blocks=a.compile))
    print(arm_summary_json(ran))
    if ran.status == "failed":
        print(f"kit study arm: arm {a.name!r} failed: {ran.reason}", file=sys.stderr)
        return 1
    return 0


def cmd_evaluate(a) -> int:
    print(json.dumps(score_study(a.study, a.seed, device=a.device).to_json(), sort_keys=True))
    return 0


def cmd_screens(a) -> int:
    out = write_screens(a.study)
    print(json.dumps({"quality": out.screens.quality.verdict, "speed": out.screens.speed.verdict,
                      "arms": {r.arm: r.status for r in out.arms},
                      "cost_usd": out.cost.total_usd, "screens_json": f"{a.study}/screens.json"}, sort_keys=True))
    return 0


def cmd_status(a) -> int:
    _, contract, _ = load_prepared_job(a.study)
    for s in arm_statuses(a.study, contract.terms):
        print(json.dumps({"arm": s.arm, "status": s.status, "reason": s.reason, "attempts": s.attempts},
                         sort_keys=True))
    return 0
