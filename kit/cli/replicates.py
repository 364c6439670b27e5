"""`kit replicates ...` subcommands: plan (how many replicates a question needs) and analyse (what the committed
replicates say). Their handlers are in kit/cli/handlers/replicates.py (each leaf names its `handler`); the statistics in
kit/replicate_stats.py, the analysis in kit/evidence/replicate_analysis.py.
"""

from __future__ import annotations

import argparse
import math

from kit.cli.args import EvidenceDir, File, OutFile


def _number(kind: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number; expected {kind}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r}; expected {kind} (a finite number)")
        return value
    return parse


def register(sub) -> None:
    rep = sub.add_parser("replicates", help="replicate design: how many training runs per arm, and the analysis "
                                            "of the committed replicates")
    actions = rep.add_subparsers(dest="action", required=True)

    s = actions.add_parser("plan", help="the smallest k per arm for a paired t-test over k replicate differences "
                                        "(noncentral t), with the power curve")
    s.add_argument("--sd", required=True, type=_number("the sd of one paired replicate difference, > 0"),
                   help="standard deviation of one replicate difference (the measure's units, e.g. points)")
    s.add_argument("--effect", required=True, type=_number("the true difference to detect"),
                   help="the true mean difference to detect (same units as --sd)")
    s.add_argument("--margin", type=_number("a noninferiority margin >= 0"), default=0.0,
                   help="noninferiority margin: test d > -MARGIN (default 0: a test of d = 0)")
    s.add_argument("--alpha", type=_number("a level in (0, 1)"), default=0.05, help="test level (default 0.05)")
    s.add_argument("--power", type=_number("a probability in (0, 1)"), default=0.8, help="power wanted (default 0.8)")
    s.add_argument("--one-sided", action="store_true", help="a one-sided test at ALPHA (default two-sided)")
    s.add_argument("--json", action="store_true", help="print the whole plan record as JSON")
    s.add_argument("--out", type=OutFile("a file for the plan record (JSON)"), help="also write the record here")
    s.set_defaults(handler="kit.cli.handlers.replicates:cmd_plan")

    s = actions.add_parser("analyse", help="the replicate analysis of committed runs (JSON): per question the "
                                           "paired differences, a t interval with k - 1 df and a reading")
    s.add_argument("plan", type=File("a replicate plan (campaigns/medium-replicates-plan.json or a "
                                     "kit-replicate-design/1 file)", fmt="json"),
                   help="the replicate plan whose runs are analysed (its scale names the runs' prefix)")
    s.add_argument("--runs-dir", default="runs", type=EvidenceDir("a runs folder", "kit run"),
                   help="the committed runs (default runs)")
    s.set_defaults(handler="kit.cli.handlers.replicates:cmd_analyse")
