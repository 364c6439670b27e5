"""Adopt a medium campaign's returned evidence into runs/ (docs/gpu-hosts.md, "The medium campaign", "At the end").

    python -m campaigns.adopt_medium_evidence PACK --campaign-folder runs/medium-campaign-DATE

PACK is the unpacked `medium-evidence.tgz` that `campaigns/medium_campaign.sh follow` brought back
(`runs/`, `ledger/exposed.jsonl`, `work/`, beside it `campaign.log`). What it does, in this order:

1. checks, before anything is written, that
   - every step of the pack's plans (`work/medium-*-plan.json`) has a run record in `PACK/runs/`, so a
     campaign that stopped midway never replaces the top-level records (keep such a sitting in a campaign
     folder of its own, as runs/medium-campaign-2026-12-02-sitting2);
   - the returned ledger extends the committed one: the committed file's bytes are a prefix of it, ending at
     a line end, and every added line is a JSON object (scorings only append, kit/evidence/ledger.py);
   - the pack's `medium-seed` names another seed than the top-level `runs/medium-seed`, whose records move
     to `runs/medium-superseded-seed-<first 8 hex digits>/`, where none of them exists yet;
   - the campaign folder does not exist yet;
2. moves every top-level `runs/medium-seed`, `runs/medium-adaptive-*` and `runs/medium-study-*` into that
   superseded folder (a rename: the bytes stay as committed), writes its superseded.json (or adds the moved runs
   to the one there), copies the pack's runs to `runs/`, its
   `work/` and `campaign.log` into the campaign folder, and replaces the ledger with the returned one.
   A failure midway undoes what was done, in reverse order.

It renders nothing and commits nothing: run `kit verify-evidence runs` and `kit report` after it
(docs/gpu-hosts.md), then write the campaign folder's README from what the records say.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from kit.evidence.verify import SUPERSEDED_FORMAT, SUPERSEDED_NAME

REPO = Path(__file__).resolve().parents[1]
TRIAL_GLOBS = ("medium-seed", "medium-adaptive-*", "medium-study-*")


class AdoptionRefused(ValueError):
    pass


def _json(path: Path, what: str):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise AdoptionRefused(f"{path}: missing; expected {what}") from None
    except json.JSONDecodeError as e:
        raise AdoptionRefused(f"{path}: not JSON ({e}); expected {what}") from None


def planned_steps(pack: Path) -> list[str]:
    plans = sorted((pack / "work").glob("medium-*-plan.json"))
    if not plans:
        raise AdoptionRefused(f"{pack / 'work'}: no medium-*-plan.json; expected the plans `kit demo` wrote")
    steps: list[str] = []
    for plan in plans:
        for i, step in enumerate(_json(plan, "a list of steps {notebook, parameters, run_id}")):
            if not isinstance(step, dict) or not isinstance(step.get("run_id"), str):
                raise AdoptionRefused(f"{plan}: step {i}: field run_id missing; expected a string")
            if step["run_id"] not in steps:
                steps.append(step["run_id"])
    return steps


def check_complete(pack: Path, steps: list[str]) -> None:
    missing = [s for s in steps if not (pack / "runs" / s / "run.json").is_file()]
    if missing:
        raise AdoptionRefused(f"{pack / 'runs'}: no run record for {', '.join(missing)}; every planned step needs "
                              "one (a stopped sitting goes to a campaign folder of its own)")


def check_ledger_extends(committed: Path, returned: Path) -> int:
    """The number of lines the returned ledger adds to the committed one."""
    old, new = committed.read_bytes(), returned.read_bytes()
    if not new.startswith(old) or (old and not old.endswith(b"\n")):
        raise AdoptionRefused(f"{returned}: does not extend {committed} (its first {len(old)} bytes differ); "
                              "expected the committed lines, unchanged, then the campaign's")
    added = new[len(old):].decode().splitlines()
    for n, line in enumerate(added, start=old.count(b"\n") + 1):
        try:
            ok = isinstance(json.loads(line), dict)
        except json.JSONDecodeError:
            ok = False
        if not ok:
            raise AdoptionRefused(f"{returned}: line {n}: not a JSON object; expected an exposure entry")
    return len(added)


def seed_digest(run_dir: Path) -> str:
    record = _json(run_dir / "run.json", "a run record")
    digest = (record.get("input_digests") or {}).get("seed.parameter_digest")
    if not isinstance(digest, str) or len(digest) != 64:
        raise AdoptionRefused(f"{run_dir / 'run.json'}: field input_digests['seed.parameter_digest'] missing; "
                              "expected the 64-hex digest of the seed it inspected")
    return digest


def superseded_note(before: bytes | None, moved: list[str], steps: list[str], old_seed: str, new_seed: str) -> str:
    """The superseded folder's superseded.json (docs/formats/verify-evidence.md, "Superseded folders"), with the moved runs
    named in replaced_by (by the pack's run of the same id, where there is one): the re-run writes into the
    same checkpoint homes under build/medium/, so where those homes exist (the GPU host) `kit verify-evidence`
    skips the moved runs' roots as superseded instead of failing them. An existing note keeps its fields and
    gains the moved runs."""
    note = json.loads(before) if before is not None else {
        "format": SUPERSEDED_FORMAT,
        "reason": (f"the medium campaign's records on the seed {old_seed[:8]}..., moved here by "
                   f"campaigns/adopt_medium_evidence.py when the re-run on the seed {new_seed[:8]}... took "
                   "runs/medium-*; kept unchanged as the record of what ran (README.md here)"),
        "replaced_by": {}, "unreachable_commits": []}
    note["replaced_by"] = {**note["replaced_by"], **{m: m for m in moved if m in steps}}
    return json.dumps(note, indent=1) + "\n"


def trial_runs(runs: Path) -> list[Path]:
    found = {p for g in TRIAL_GLOBS for p in runs.glob(g) if p.is_dir()}
    return sorted(found)


def adopt(pack: Path, campaign_folder: Path, runs: Path, ledger: Path, log=print) -> dict:
    steps = planned_steps(pack)
    check_complete(pack, steps)
    added = check_ledger_extends(ledger, pack / "ledger" / "exposed.jsonl")
    new_seed = seed_digest(pack / "runs" / "medium-seed")
    old = trial_runs(runs)
    old_seed = seed_digest(runs / "medium-seed") if (runs / "medium-seed").is_dir() else None
    if old_seed == new_seed:
        raise AdoptionRefused(f"{pack / 'runs' / 'medium-seed'}: the same seed {new_seed[:12]}... as "
                              f"{runs / 'medium-seed'}; expected a re-run on another seed (a repeat on the same "
                              "seed is a campaign folder of its own)")
    superseded = runs / f"medium-superseded-seed-{old_seed[:8]}" if old_seed else None
    clashes = [p for p in old if superseded and (superseded / p.name).exists()]
    if clashes:
        raise AdoptionRefused(f"{superseded}: already holds {', '.join(p.name for p in clashes)}; expected none")
    extra = [p.name for p in (pack / "runs").iterdir() if p.is_dir() and p.name not in steps]
    if extra:
        raise AdoptionRefused(f"{pack / 'runs'}: {', '.join(sorted(extra))} not in the plans; expected only planned runs")
    if campaign_folder.exists():
        raise AdoptionRefused(f"{campaign_folder}: exists; expected a new campaign folder")

    undo: list = []
    try:
        if superseded:
            if not superseded.exists():
                superseded.mkdir(parents=True)
                undo.append(superseded.rmdir)  # runs last among the undos: empty by then
            for p in old:
                p.rename(superseded / p.name)
                undo.append(lambda p=p: (superseded / p.name).rename(p))
            note = superseded / SUPERSEDED_NAME
            before_note = note.read_bytes() if note.exists() else None
            note.write_text(superseded_note(before_note, [p.name for p in old], steps, old_seed, new_seed))
            undo.append(lambda: note.write_bytes(before_note) if before_note is not None else note.unlink())
        for s in steps:
            shutil.copytree(pack / "runs" / s, runs / s)
            undo.append(lambda s=s: shutil.rmtree(runs / s))
        campaign_folder.mkdir(parents=True)
        undo.append(lambda: shutil.rmtree(campaign_folder))
        shutil.copytree(pack / "work", campaign_folder / "work")
        if (pack / "campaign.log").is_file():
            shutil.copyfile(pack / "campaign.log", campaign_folder / "campaign.log")
        before = ledger.read_bytes()
        shutil.copyfile(pack / "ledger" / "exposed.jsonl", ledger)
        undo.append(lambda: ledger.write_bytes(before))
    except BaseException:
        for step in reversed(undo):
            step()
        raise
    summary = {"adopted": steps, "superseded": [p.name for p in old], "superseded_folder": str(superseded),
               "seed": new_seed, "old_seed": old_seed, "ledger_lines_added": added,
               "campaign_folder": str(campaign_folder)}
    log(json.dumps(summary, indent=1))
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    ap.add_argument("pack", type=Path, help="the unpacked medium-evidence.tgz (runs/, ledger/, work/)")
    ap.add_argument("--campaign-folder", type=Path, required=True, help="runs/medium-campaign-DATE (new)")
    ap.add_argument("--runs", type=Path, default=REPO / "runs")
    ap.add_argument("--ledger", type=Path, default=REPO / "ledger" / "exposed.jsonl")
    args = ap.parse_args(argv)
    try:
        adopt(args.pack, args.campaign_folder, args.runs, args.ledger)
    except AdoptionRefused as e:
        print(f"refused: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
