"""Freeze the medium contracts from their drafts and the committed pilot records (docs/contracts.md, "Medium scale").

    python -m campaigns.medium_freeze --pilot runs/medium-pilot-<date> --study-pilot runs/study-pilot-<date>

writes contracts/adaptive-shards.medium.json from the adaptive pilot (campaigns/medium_pilot.py) and
contracts/shared-gradient.medium.json from the study's own pilot (campaigns/study_pilot.py): each draft with
its pilot's chosen values and a `pilot` field (run id, record path and sha256, draft path and digest, the
rule and the chosen values). Either may be frozen alone (only --pilot, or only --study-pilot). Refused,
naming the file and the field, when a record is missing, is not committed (git: tracked and unchanged
against HEAD, so what the contract cites is what the repository holds), is not a kit-bench/1 pilot record
of its kind, is not "completed", chose nothing, opened a final role, records a positive control that does
not hold (`results.positive_control.holds`: the medium scale is a positive control, and a trial on a seed
that fails it could not tell the methods apart), or was made from a draft whose digest differs from the
draft now on disk; an existing frozen contract is never overwritten.

Where the values go: the adaptive contract is the adaptive pilot's chosen candidate contract (lr to every
optimizer group, microbatch size, token cap, learning-rate schedule). The study contract is the study
pilot's chosen candidate (its rate and `training.lr_schedule`) without the development role the pilot
added (`data.dev`): that role is the pilot's, and a contract in contracts/ with it would enter the small
seed's exclusion set (kit/seed/small.py, forbidden_task_sets), which could change the pinned seed. The
study's training draws do not depend on that role (prepare excludes training digests from it, not the
other way), so the frozen study trains on what its pilot trained on.

`--study-from-adaptive-pilot` is the first medium campaign's procedure, kept so that its committed
contracts stay reproducible from its pilot: the study's rate and token cap transferred from the adaptive
pilot. A study draft with its own development role refuses it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

OUTPUTS = {"adaptive": "adaptive-shards.medium.json", "study": "shared-gradient.medium.json"}


class FreezeRefused(ValueError):
    pass


def _committed(path: Path) -> None:
    """The record is tracked by git and its bytes equal HEAD's. A record in an archived folder (read unpacked,
    kit/evidence/archive.py) is committed when the archive and its index are: they pin its bytes."""
    from kit.evidence.archive import ARCHIVE_DIR_NAME, INDEX_NAME, origin

    stands_for = origin(path)
    if stands_for is not None:
        runs_dir = next(p for p in stands_for.parents if (p / ARCHIVE_DIR_NAME / INDEX_NAME).is_file())
        return _committed(runs_dir / ARCHIVE_DIR_NAME / INDEX_NAME)
    where = path.parent
    tracked = subprocess.run(["git", "-C", str(where), "ls-files", "--error-unmatch", path.name],
                             capture_output=True, text=True, check=False)
    if tracked.returncode != 0:
        raise FreezeRefused(f"{path}: not committed (git ls-files: {tracked.stderr.strip()}); commit the pilot run "
                            "before freezing")
    changed = subprocess.run(["git", "-C", str(where), "diff", "--quiet", "HEAD", "--", path.name], check=False)
    if changed.returncode != 0:
        raise FreezeRefused(f"{path}: differs from the committed version (git diff HEAD); commit or restore it")


# what each pilot's record carries: the parameters field that binds its draft(s), and the script that wrote it
PILOT_KINDS = {"adaptive": ("drafts", "campaigns/medium_pilot.py"), "study": ("draft", "campaigns/study_pilot.py")}


def read_pilot(run_dir: Path, kind: str = "adaptive") -> tuple[dict, str]:
    from kit.digest import load_json_strict, sha256_file

    field, script = PILOT_KINDS[kind]
    path = run_dir / "run.json"
    if not path.is_file():
        raise FreezeRefused(f"{path}: missing; expected the pilot's run record ({script})")
    _committed(path)
    rec = load_json_strict(path)
    if rec.get("format") != "kit-bench/1" or field not in rec.get("parameters", {}):
        raise FreezeRefused(f"{path}: field 'format' = {rec.get('format')!r} / no 'parameters.{field}'; expected a "
                            f"kit-bench/1 record written by {script}")
    if rec.get("status") != "completed":
        raise FreezeRefused(f"{path}: field 'status' = {rec.get('status')!r}; expected 'completed' (a partial or "
                            "failed pilot fixes nothing)")
    if rec["parameters"].get("scale") != "medium":
        raise FreezeRefused(f"{path}: field 'parameters.scale' = {rec['parameters'].get('scale')!r}; expected 'medium'")
    chosen = rec["results"].get("chosen")
    if not chosen:
        raise FreezeRefused(f"{path}: field 'results.chosen' = {chosen!r}; expected the candidate the rule chose")
    if rec["results"].get("final_roles", {}).get("opened") is not False:
        raise FreezeRefused(f"{path}: field 'results.final_roles.opened' is not false; a pilot must not open final roles")
    control = rec["results"].get("positive_control")  # the adaptive pilot's since issue 26; earlier records lack it
    if control is not None and control.get("holds") is not True:
        raise FreezeRefused(
            f"{path}: field 'results.positive_control.holds' = {control.get('holds')!r}; expected true (the seed's "
            f"pooled development accuracy {control.get('seed_pooled_dev_accuracy')!r} in {control.get('seed_band')!r} "
            f"and the best eligible candidate at cohort A's endpoint at least {control.get('min_gain')!r} above it, "
            f"measured {control.get('best_eligible_gain')!r}): the seed is not yet good enough for the trial; "
            "change the seed (or pilot other recipes), never the finals")
    return rec, sha256_file(path)


def chosen_candidate(rec: dict) -> dict:
    """The record's entry for the candidate the rule chose."""
    name = rec["results"]["chosen"]["candidate"]
    return next(c for c in rec["results"]["candidates"] if c["name"] == name)


def frozen(kind: str, draft_data: dict, values: dict, pilot: dict, piloted_digest: str | None = None,
           transferred: bool = False, after: str = "constant") -> dict:
    """The frozen contract: the chosen candidate's contract rebuilt from the draft (campaigns/medium_pilot.py or
    campaigns/study_pilot.py candidate_contract), checked against the digest the pilot recorded for it, plus
    its description and `pilot` field: what was frozen is what was piloted. The study's development role is
    left out (the module docstring says why). `transferred`: the study's rate and token cap from the adaptive
    pilot, the first campaign's procedure. `after`: the adaptive pilot's --schedule-after."""
    from campaigns import medium_pilot, study_pilot
    from kit.digest import sha256_json

    def checked(c: dict) -> dict:
        if piloted_digest is not None and sha256_json(c) != piloted_digest:
            raise FreezeRefused(f"the chosen candidate's contract rebuilt from the draft has digest {sha256_json(c)}; "
                                f"the pilot recorded {piloted_digest} (field 'results.candidates[].contract_digest')")
        return c

    if kind == "adaptive":
        c = checked(medium_pilot.candidate_contract(draft_data, values, after))
        c["description"] = ("The medium adaptive-shards trial (shared/DESIGN.md, Scales): the frozen trial's structure "
                            "and counts exactly on the kit's small seed; the learning rate, microbatch size and token "
                            f"cap were fixed on development roles by pilot run {pilot['run_id']} (field 'pilot').")
    elif transferred:
        c = json.loads(json.dumps(draft_data))
        c["training"]["optimizer"]["lr"] = values["lr"]
        c["data"]["max_tokens"] = values["max_tokens"]
        c["name"] = (f"shared-gradient-study/medium (learning rate and token cap transferred from the adaptive pilot "
                     f"{pilot['run_id']}: same seed, task families and optimizer)")
    else:
        c = checked(study_pilot.candidate_contract(draft_data, values))
        if "dev" not in draft_data["data"]:
            del c["data"]["dev"]
        c["name"] = (f"shared-gradient-study/medium (learning rate and warm-up fixed on the study's development role "
                     f"by its own pilot {pilot['run_id']}, field 'pilot')")
    c["pilot"] = pilot
    return c


DRAFTS = {"adaptive": REPO / "contracts" / "adaptive-shards.medium.draft.json",
          "study": REPO / "contracts" / "shared-gradient.medium.draft.json"}


def freeze(run_dir=None, adaptive_draft=None, study_draft=None, out_dir=None, study_pilot=None,
           study_from_adaptive_pilot: bool = False) -> dict:
    """Write the frozen contracts that the given pilots fix: the adaptive one from `run_dir`, the study one
    from `study_pilot` (or, with `study_from_adaptive_pilot`, transferred from `run_dir`)."""
    from campaigns.medium_pilot import repo_relative
    from kit.adaptive.schema import load_adaptive_contract
    from kit.study.schema import load_study_contract

    out_dir = Path(out_dir) if out_dir else REPO / "contracts"
    drafts = {"adaptive": Path(adaptive_draft or DRAFTS["adaptive"]), "study": Path(study_draft or DRAFTS["study"])}
    loaders = {"adaptive": load_adaptive_contract, "study": load_study_contract}
    if study_from_adaptive_pilot and study_pilot is not None:
        raise FreezeRefused("give the study's own pilot or --study-from-adaptive-pilot, not both")
    sources = {}  # kind -> (record directory, record kind)
    if run_dir is not None:
        sources["adaptive"] = (Path(run_dir).resolve(), "adaptive")
        if study_from_adaptive_pilot:
            sources["study"] = (Path(run_dir).resolve(), "adaptive")
    elif study_from_adaptive_pilot:
        raise FreezeRefused("--study-from-adaptive-pilot needs the adaptive pilot (--pilot)")
    if study_pilot is not None:
        sources["study"] = (Path(study_pilot).resolve(), "study")
    if not sources:
        raise FreezeRefused("nothing to freeze: give --pilot (the adaptive pilot) and/or --study-pilot")
    for kind in sources:
        if (out_dir / OUTPUTS[kind]).exists():
            raise FreezeRefused(f"{out_dir / OUTPUTS[kind]}: exists; a frozen contract is never rewritten")
    staged = {}
    try:  # every check and every validation before any file is written; any failure removes what was staged
        for kind, (run, record_kind) in sources.items():
            rec, sha = read_pilot(run, record_kind)
            draft = loaders[kind](drafts[kind])
            transferred = kind == "study" and record_kind == "adaptive"
            if transferred and "dev" in draft.terms.data:
                raise FreezeRefused(f"{drafts[kind]}: field 'data.dev' is present: a study draft with its own "
                                    "development role is frozen from its own pilot (--study-pilot)")
            bound = (rec["parameters"]["drafts"][kind] if record_kind == "adaptive" else rec["parameters"]["draft"])
            field = f"parameters.drafts.{kind}" if record_kind == "adaptive" else "parameters.draft"
            if bound["digest"] != draft.digest:
                raise FreezeRefused(f"{run / 'run.json'}: field '{field}.digest' = {bound['digest']}; the draft "
                                    f"{drafts[kind]} now has digest {draft.digest} (the pilot ran on another draft: "
                                    "run it again)")
            # the values as the chosen candidate's row gives them: numbers only (the study's row holds its warm-up
            # length, its `chosen` the schedule made of it), which the contracts' `pilot.chosen` requires
            values = (chosen_candidate(rec)["values"] if record_kind == "study" and not transferred
                      else rec["results"]["chosen"]["values"])
            pilot = {"run_id": rec["run_id"], "record": repo_relative(run / "run.json"), "record_sha256": sha,
                     "draft": repo_relative(drafts[kind]), "draft_digest": draft.digest,
                     "rule": rec["results"]["chosen"]["rule"], "chosen": values}
            contract = frozen(kind, draft.data, values, pilot,
                              None if transferred else chosen_candidate(rec)["contract_digest"], transferred,
                              rec["parameters"].get("schedule_after", "constant"))
            staged[kind] = out_dir / (OUTPUTS[kind] + ".tmp")
            staged[kind].write_text(json.dumps(contract, indent=2) + "\n")
            loaders[kind](staged[kind])  # the frozen contract passes its schema and rules, or nothing is written
    except BaseException:
        for tmp in staged.values():
            tmp.unlink(missing_ok=True)
        raise
    written = {}
    for kind, tmp in staged.items():
        target = out_dir / OUTPUTS[kind]
        tmp.replace(target)
        written[kind] = {"path": str(target), "digest": loaders[kind](target).digest}
    return written


def main(argv=None) -> int:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    p.add_argument("--pilot", help="the committed adaptive pilot run directory (campaigns/medium_pilot.py)")
    p.add_argument("--study-pilot", help="the committed study pilot run directory (campaigns/study_pilot.py)")
    p.add_argument("--study-from-adaptive-pilot", action="store_true",
                   help="the first campaign's procedure: the study's rate and token cap from the adaptive pilot")
    p.add_argument("--adaptive-draft", help="default contracts/adaptive-shards.medium.draft.json")
    p.add_argument("--study-draft", help="default contracts/shared-gradient.medium.draft.json")
    p.add_argument("--out-dir", help="default contracts/")
    a = p.parse_args(argv)
    try:
        print(json.dumps(freeze(a.pilot, a.adaptive_draft, a.study_draft, a.out_dir, a.study_pilot,
                                a.study_from_adaptive_pilot), sort_keys=True))
    except FreezeRefused as e:
        print(f"medium_freeze: refused: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
