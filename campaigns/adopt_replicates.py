"""Adopt a replicate campaign's returned evidence (issue 51) into runs/, beside the committed medium runs.

    python -m campaigns.adopt_replicates PACK --campaign-folder runs/medium-replicates-DATE

PACK is the unpacked `medium-evidence.tgz` of `campaigns/medium_campaign.sh replicates` (`runs/`,
`ledger/exposed.jsonl`, `work/`). Unlike campaigns/adopt_medium_evidence.py nothing is superseded: the
committed `medium-*` runs stay where they are, byte for byte. What it does:

1. checks, before anything is written, that
   - the returned ledger is byte for byte the plan's prefix of the committed one (campaigns/medium-replicates-plan.json,
     `inputs.ledger`): no scoring of the campaign appended an exposure, so no final role was opened;
   - no record the pack adds already exists under runs/ (evidence is never overwritten) and the campaign folder
     does not exist yet;
   - the bytes it adds stay within `--budget` (default the plan's 2,000,000), counted file by file;
2. copies each completed replicate run (`<prefix>-study-*-r<k>`, `<prefix>-study-dev-*-r<k>`, `<prefix>-adaptive-*-r<k>`)
   to runs/, and the runs that re-derived their inputs (`<prefix>-replicates-*`: the preparations and cohort A's
   endpoint), the checks (`work/replicates-checks.json`), the parts' plans and times and the campaign's log
   into the campaign folder. Kernel logs stay behind (they are not evidence). A failure midway removes what
   it copied.

It commits nothing: run `kit verify-evidence runs` after it, then write the campaign folder's README.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLAN = REPO / "campaigns" / "medium-replicates-plan.json"
LEFT_BEHIND = {"kernel.log"}
REPLICATE_RUN = re.compile(r"^(?P<prefix>[a-z]+)-(study|adaptive)-.*-r\d+$")


class AdoptionRefused(ValueError):
    pass


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name not in LEFT_BEHIND)


def _status(run: Path) -> str | None:
    try:
        return json.loads((run / "run.json").read_text()).get("status")
    except (FileNotFoundError, json.JSONDecodeError, AttributeError):
        return None


def adoption_plan(pack: Path, campaign_folder: Path, runs: Path, plan: dict) -> list[tuple[Path, Path]]:
    """[(source file, destination)] of everything the adoption copies; refuses as the module docstring says."""
    spec = plan["inputs"]["ledger"]
    returned = pack / "ledger" / "exposed.jsonl"
    if not returned.is_file():
        raise AdoptionRefused(f"{returned}: missing; expected the campaign's ledger")
    digest = hashlib.sha256(returned.read_bytes()).hexdigest()
    if digest != spec["sha256"]:
        raise AdoptionRefused(f"{returned}: sha256 {digest}, not the plan's field 'inputs.ledger.sha256' {spec['sha256']}"
                              ": the campaign's ledger changed, so some scoring recorded an exposure (a final role)")
    if campaign_folder.exists():
        raise AdoptionRefused(f"{campaign_folder}: exists; a campaign folder is written once")
    copies: list[tuple[Path, Path]] = []
    for run in sorted(p for p in (pack / "runs").iterdir() if p.is_dir()):
        if _status(run) != "completed":
            continue  # a run the block's end cut off (or that failed) stays in the pack, never in runs/
        if REPLICATE_RUN.match(run.name):
            dest = runs / run.name
            if dest.exists():
                raise AdoptionRefused(f"{dest}: exists; evidence is never overwritten (pack run {run})")
        elif re.match(r"^[a-z]+-replicates-", run.name):
            dest = campaign_folder / run.name
        else:
            continue  # nothing else belongs to a replicate campaign
        copies += [(f, dest / f.relative_to(run)) for f in _files(run)]
    work = campaign_folder / "work"
    copies += [(f, work / f.name) for f in sorted((pack / "work").glob("replicates-*.json"))]
    log = pack / "campaign.log"
    if log.is_file():
        copies.append((log, campaign_folder / "campaign.log"))
    return copies


def adopt(pack: Path, campaign_folder: Path, runs: Path, plan_file: Path = PLAN, budget: int | None = None,
          log=print) -> dict:
    plan = json.loads(Path(plan_file).read_text())
    budget = plan["budget"]["tracked_bytes_added_at_most"] if budget is None else budget
    copies = adoption_plan(Path(pack), Path(campaign_folder), Path(runs), plan)
    added = sum(src.stat().st_size for src, _ in copies)
    if added > budget:
        raise AdoptionRefused(f"{pack}: adopting adds {added:,} bytes, over the budget of {budget:,} "
                              "(the plan's field 'budget.tracked_bytes_added_at_most')")
    done: list[Path] = []
    try:
        for src, dest in copies:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
            done.append(dest)
    except BaseException:
        for dest in reversed(done):
            dest.unlink(missing_ok=True)
        raise
    top = sorted({d.relative_to(runs).parts[0] for _, d in copies if d.is_relative_to(runs)})
    log(f"adopted {len(copies)} files, {added:,} bytes: {', '.join(top)}")
    return {"files": len(copies), "bytes": added, "folders": top}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m campaigns.adopt_replicates", description=__doc__.split("\n\n")[0])
    p.add_argument("pack", help="the unpacked medium-evidence.tgz")
    p.add_argument("--campaign-folder", required=True, help="runs/medium-replicates-DATE (created)")
    p.add_argument("--runs", default=str(REPO / "runs"))
    p.add_argument("--plan", default=str(PLAN))
    p.add_argument("--budget", type=int, help="bytes the adoption may add (default: the plan's)")
    a = p.parse_args(argv)
    try:
        adopt(Path(a.pack), Path(a.campaign_folder), Path(a.runs), Path(a.plan), a.budget)
    except AdoptionRefused as e:
        print(f"adopt_replicates: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
