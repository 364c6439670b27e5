"""The adaptive gates recomputed without the final items another contract's scoring had opened first.

    python -m campaigns.exposure_sensitivity runs/medium-superseded-seed-800112e3/medium-adaptive-final-A=runs/medium-campaign-2026-12-01/adaptive/final-A.json ...

The exposure ledger keeps a final item that one contract's scoring opened out of every later contract's
final roles (kit/evidence/ledger.py). A preparation that read an incomplete ledger can hold such items:
the medium campaign of 2026-12-01 prepared against the empty ledger beside its host runs directory, and
40 of its 512 final retention conversations had been opened by the tiny demo's scorings (of the tiny
model). This prints, per final evaluation, which of its items the repository's ledger lists under another
contract with an earlier time, and the three gates (kit.adaptive.evaluation.gates, the contract's own
bootstrap) on the evaluation without them beside the committed ones, so a reader sees whether the verdicts
depend on those items. It changes nothing: the committed verdicts stand as recorded.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    from kit.adaptive.evaluation import gates
    from kit.adaptive.schema import AdaptiveContract
    from kit.digest import load_json_strict
    from kit.evidence.archive import resolve
    from kit.evidence.ledger import read_ledger
    from kit.evidence.report.index import recorded_contract
    from kit.evidence.run_record import read_run_record
    from kit.record import build

    argv = sys.argv[1:] if argv is None else argv
    ledger = read_ledger(REPO / "ledger" / "exposed.jsonl")
    out = []
    for pair in argv:
        run_dir, _, evaluation = pair.partition("=")
        rec = read_run_record(resolve(run_dir))  # committed evidence, archived folders included
        ev = load_json_strict(resolve(evaluation))
        contract = recorded_contract(rec.contract_digest, rec.git.commit if rec.git is not None else None, run_dir)
        terms = build(contract, AdaptiveContract)  # the recorded JSON, read as the kit reads a contract
        earlier = {e["id"] for e in ledger
                   if e["contract_digest"] != rec.contract_digest and e["time"] < rec.started_at}
        kept = {part: [x for x in ev[part] if x["id"] not in earlier] for part in ("tasks", "retention")}
        both = {"recorded": gates(ev, terms), "without_them": gates({**ev, **kept}, terms)}
        out.append({"run": rec.run_id, "opened_before_by_another_contract": {
                        part: sorted(x["id"] for x in ev[part] if x["id"] in earlier) for part in ("tasks", "retention")},
                    "kept": {part: len(v) for part, v in kept.items()},
                    **{f"gates_{k}": {g["name"]: {"passed": g["passed"], **g["inputs"]} for g in v["gates"]}
                       for k, v in both.items()}})
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
