"""False-pass rate and power of three decision rules on simulated replicate studies at the medium sizes
(kit/replicate_simulation.py): the replicate analysis (t bound with k - 1 df, shared item variance added),
the removed "2 sd" rule (mean difference beyond twice the replicates' sd) and a single-run verdict (one run
against its item-only bound), each with k from `kit replicates plan` for the planned effect.

    python bench/replicate_calibration.py [--sims 4000] [--json]

No GPU: numpy only, about a minute on one core at the default. The record for the issue-59 table.
"""

from __future__ import annotations

import argparse
import json
import math

from kit.replicate_simulation import BinaryStudy, NllStudy, analysis_rule, rate, single_run_rule, two_sd_rule
from kit.replicate_stats import plan

ALPHA = 0.05
CASES = (("study accuracy, +3.4 points (1,024 items)", BinaryStudy(), 1, 0.034, 0.0),
         ("growth task NLL, -0.019 nats/token (512 items)", NllStudy(), -1, -0.019, 0.0),
         ("noninferiority, 3-point margin, true difference 0", BinaryStudy(), 1, 0.0, -0.03))


def table(sims: int) -> list[dict]:
    rows = []
    for i, (name, study, direction, effect, threshold) in enumerate(CASES):
        promised = plan(study.sd_d(), abs(effect - threshold), alpha=ALPHA, power=0.8, one_sided=True)
        k = promised["k"]
        for rule_name, rule in (("replicate analysis", analysis_rule(direction, 1 - ALPHA, threshold)),
                                ("2 sd rule (removed)", two_sd_rule(direction) if threshold == 0 else
                                 (lambda x, t=threshold, s=direction: two_sd_rule(s)(x - t))),
                                ("single-run verdict", single_run_rule(direction, 1 - ALPHA) if threshold == 0 else
                                 (lambda x, t=threshold, s=direction: single_run_rule(s, 1 - ALPHA)(x - t)))):
            rows.append({"case": name, "sd_d": study.sd_d(), "k": k, "planned_power": promised["power_at_k"],
                         "rule": rule_name, "false_pass": rate(study, rule, k, threshold, sims, 100 + i),
                         "power": rate(study, rule, k, effect, sims, 200 + i)})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    p.add_argument("--sims", type=int, default=4000, help="simulated studies per rate (default 4000)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    a = p.parse_args(argv)
    rows = table(a.sims)
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    mc = 2 * math.sqrt(ALPHA * (1 - ALPHA) / a.sims)
    print(f"nominal false-pass {ALPHA:.0%} (one-sided); {a.sims} simulated studies per rate; 2 MC se at 5%: {mc:.3f}")
    for r in rows:
        print(f"{r['case']:<50} k={r['k']:<3} {r['rule']:<20} false pass {r['false_pass']:.3f}  power "
              f"{r['power']:.3f} (plan promised {r['planned_power']:.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
