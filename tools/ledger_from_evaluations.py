"""Record in the exposure ledger the finals that committed final evaluations opened, when the ledger those
scorings wrote to was lost.

    python tools/ledger_from_evaluations.py --ledger ledger/exposed.jsonl \
        --run runs/medium-superseded-seed-800112e3/medium-adaptive-final-A=runs/medium-campaign-2026-12-01/adaptive/final-A.json ...

Why: the medium campaign of 2026-12-01 ran its notebooks with `--runs-dir build/medium/runs` on the GPU
host, so its scorings appended to `build/medium/ledger/exposed.jsonl` there (kit.evidence.ledger: the
ledger beside the runs directory), which was not brought back before the machine went. Without these
entries a later preparation could draw the exposed finals again.

How, for each RUN_DIR=EVALUATION pair (a completed final-split run and its evaluation record):
- the role files are rebuilt from the evaluation record's ids alone, in its order: a task id
  "<family>/<role>/<seed>/d<difficulty>/<index>" is kit.data.tasks.generate of those numbers, labelled as
  prepare labels it; a retention id "<source>:<index>" is that record of the contract's pinned public
  source. Each rebuilt file must hash to the sha256 the run recorded for the role (`role:tasks`,
  `role:retention`), and every rebuilt digest already in the ledger under the same id must equal the
  recorded one; otherwise nothing is written;
- the entries are those kit.adaptive.evaluation.evaluate writes (kit.evidence.ledger.record_exposures):
  contract digest and job digest from the run record, purpose "final scoring of CANDIDATE against
  BASELINE", `run` the run id and `time` the run's `started_at` (the scoring ran inside that run), and
  `rebuilt`: this tool, the evaluation record's path (relative to the repository when inside it) and its
  sha256, so a reader tells them from the lines a scoring wrote itself.
Items already in the ledger for the same contract are not written twice, as always.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

TASK_ID = re.compile(r"([a-z]+)/([a-z.]+)/(\d+)/d(\d+)/(\d+)")


class Refused(ValueError):
    pass


def rebuilt_roles(evaluation: dict, contract: dict, public_source: Path) -> tuple[list, list]:
    """The final.tasks and final.retention records the evaluation scored, rebuilt from its ids."""
    import kit.adaptive.prepare as prep
    from kit.data.conversations import instruction_source_range
    from kit.data.tasks import generate

    examples = []
    for row in evaluation["tasks"]:
        m = TASK_ID.fullmatch(row["id"])
        if m is None:
            raise Refused(f"task id {row['id']!r}: expected <family>/<role>/<seed>/d<difficulty>/<index>")
        family, role, seed, difficulty, index = m.groups()
        examples.append(generate(family, int(seed), int(index), int(difficulty), role))
    spec = contract["evaluation"]["final"]["retention"]
    source = instruction_source_range(public_source, spec["sha256"], spec["start"], spec["stop"], spec["source_name"])
    by_id = {c.id: c for c in source.conversations}
    missing = [r["id"] for r in evaluation["retention"] if r["id"] not in by_id]
    if missing:
        raise Refused(f"retention ids {missing[:3]} are not records of {public_source} [{spec['start']}, {spec['stop']})")
    return (prep._task_records(examples, "final.tasks"),
            [prep._labelled(by_id[r["id"]], "final.retention") for r in evaluation["retention"]])


def exposures(run_dir: Path, evaluation_path: Path, public_source: Path, ledger: Path) -> dict:
    from kit.data.conversations import jsonl_bytes
    from kit.digest import load_json_strict, sha256_bytes
    from kit.evidence.archive import origin, resolve
    from kit.evidence.ledger import read_ledger
    from kit.evidence.report.index import recorded_contract
    from kit.evidence.run_record import read_run_record

    # committed evidence may lie in an archived folder (runs/archive/): read it unpacked, name it by its place
    named = origin(resolve(evaluation_path)) or evaluation_path
    run_dir, evaluation_path = resolve(run_dir), resolve(evaluation_path)
    rec = read_run_record(run_dir)
    ev = load_json_strict(evaluation_path)
    if rec.status != "completed" or ev.get("split") != "final":
        raise Refused(f"{run_dir}: status {rec.status}, evaluation split {ev.get('split')!r}; expected a completed "
                      "final evaluation")
    try:
        contract = recorded_contract(rec.contract_digest, rec.git.commit, str(run_dir))
    except ValueError as e:
        raise Refused(str(e)) from None
    tasks, retention = rebuilt_roles(ev, contract, public_source)
    for role, records in (("tasks", tasks), ("retention", retention)):
        got, want = sha256_bytes(jsonl_bytes(records)), rec.input_digests.get(f"role:{role}")
        if got != want:
            raise Refused(f"{evaluation_path}: the {role} rebuilt from its ids hash to {got}, but {run_dir} recorded "
                          f"role:{role} = {want}; nothing was written")
    known = {e["id"]: e["digest"] for e in read_ledger(ledger)}
    for c in tasks + retention:
        digest = c.meta["digest"] if c.meta.get("role") == "final.tasks" else c.digest
        if c.id in known and known[c.id] != digest:
            raise Refused(f"{c.id}: rebuilt digest {digest}, the ledger {ledger} holds {known[c.id]}; nothing was written")
    shown = Path(named).absolute()
    shown = shown.relative_to(REPO).as_posix() if shown.is_relative_to(REPO) else str(shown)
    rebuilt = {"by": "tools/ledger_from_evaluations.py", "evaluation": shown,
               "evaluation_sha256": sha256_bytes(evaluation_path.read_bytes())}
    return {"run": rec.run_id, "time": rec.started_at, "contract_digest": rec.contract_digest, "rebuilt": rebuilt,
            "job": rec.input_digests["prepared.job_digest"], "tasks": tasks, "retention": retention,
            "purpose": f"final scoring of {ev['candidate']} against {ev['baseline']}"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    p.add_argument("--ledger", default=str(REPO / "ledger" / "exposed.jsonl"))
    p.add_argument("--public-source", default=str(REPO / "data" / "alpaca_5000.json"))
    p.add_argument("--run", action="append", required=True, metavar="RUN_DIR=EVALUATION_JSON")
    a = p.parse_args(argv)
    from kit.evidence.ledger import record_exposures

    ledger = Path(a.ledger)
    try:
        found = [exposures(Path(r), Path(e), Path(a.public_source), ledger)
                 for r, _, e in (x.partition("=") for x in a.run)]  # every pair checked before any write
    except Refused as e:
        print(f"ledger_from_evaluations: refused: {e}", file=sys.stderr)
        return 2
    out = []
    for f in found:
        new = record_exposures(f["tasks"], f["retention"], f["contract_digest"], f["job"], f["purpose"],
                               path=ledger, run=f["run"], time=f["time"], rebuilt=f["rebuilt"])
        out.append({"run": f["run"], "tasks": len(f["tasks"]), "retention": len(f["retention"]), "new_entries": new})
    print(json.dumps({"ledger": str(ledger), "runs": out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
