"""What `kit replicates plan|analyse` run (their parsers: kit/cli/replicates.py)."""

from __future__ import annotations

import json
from pathlib import Path

from kit.digest import load_json_strict, write_canonical_json
from kit.replicate_stats import plan


def cmd_plan(a) -> int:
    record = plan(a.sd, a.effect, margin=a.margin, alpha=a.alpha, power=a.power, one_sided=a.one_sided)
    if a.out:
        write_canonical_json(Path(a.out), record)
    if a.json:
        print(json.dumps(record, indent=1, sort_keys=True))
        return 0
    i = record["inputs"]
    test = (f"{'one' if i['one_sided'] else 'two'}-sided alpha {i['alpha']}" +
            (f", noninferiority margin {i['margin']}" if i["margin"] else ""))
    print(f"k = {record['k']}")
    print(f"per arm: {record['k']} replicates (paired differences), sd {i['sd']}, effect {i['effect']}, {test}, "
          f"power {record['power_at_k']:.3f} >= {i['power']}")
    print("power curve:")
    for row in record["curve"]:
        print(f"  k = {row['k']:>4}  power {row['power']:.3f}")
    return 0


def cmd_analyse(a) -> int:
    from kit.evidence.replicate_analysis import analyse  # noqa: PLC0415 - reads the evidence: only when run

    design = load_json_strict(Path(a.plan))
    prefix = design.get("scale") or design.get("prefix") if isinstance(design, dict) else None
    if not isinstance(prefix, str) or not prefix:
        raise ValueError(f"{a.plan}: field 'scale' = {prefix!r}; expected the runs' prefix, e.g. \"medium\"")
    print(json.dumps(analyse(a.runs_dir, prefix, design), indent=1, sort_keys=True))
    return 0
