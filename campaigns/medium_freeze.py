"""Freeze the medium contracts from their drafts and the committed pilot record (docs/contracts.md, "Medium scale").

    python -m campaigns.medium_freeze --pilot runs/medium-pilot-<date>

writes contracts/adaptive-shards.medium.json and contracts/shared-gradient.medium.json: each draft with
the pilot's chosen values and a `pilot` field (run id, record path and sha256, draft path and digest,
the rule and the chosen values). Refused, naming the file and the field, when the record is missing, is
not committed (git: tracked and unchanged against HEAD, so what the contract cites is what the
repository holds), is not a kit-bench/1 pilot record, is not "completed", chose nothing, or was made from
a draft whose digest differs from the draft now on disk; an existing frozen contract is never
overwritten. Where the values go: lr to every adaptive optimizer group and to the study's optimizer;
max_tokens to both; microbatch_size to the adaptive contract only (the study's 32-document updates keep
their draft value: the pilot measured 64-document adaptive updates). The study's rate is transferred
from the adaptive pilot (same seed, task families and optimizer), which the frozen contract says.
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
    """The record is tracked by git and its bytes equal HEAD's."""
    where = path.parent
    tracked = subprocess.run(["git", "-C", str(where), "ls-files", "--error-unmatch", path.name],
                             capture_output=True, text=True, check=False)
    if tracked.returncode != 0:
        raise FreezeRefused(f"{path}: not committed (git ls-files: {tracked.stderr.strip()}); commit the pilot run "
                            "before freezing")
    changed = subprocess.run(["git", "-C", str(where), "diff", "--quiet", "HEAD", "--", path.name], check=False)
    if changed.returncode != 0:
        raise FreezeRefused(f"{path}: differs from the committed version (git diff HEAD); commit or restore it")


def read_pilot(run_dir: Path) -> tuple[dict, str]:
    from kit.digest import load_json_strict, sha256_file

    path = run_dir / "run.json"
    if not path.is_file():
        raise FreezeRefused(f"{path}: missing; expected the pilot's run record (campaigns/medium_pilot.py)")
    _committed(path)
    rec = load_json_strict(path)
    if rec.get("format") != "kit-bench/1" or "drafts" not in rec.get("parameters", {}):
        raise FreezeRefused(f"{path}: field 'format' = {rec.get('format')!r} / no 'parameters.drafts'; expected a "
                            "kit-bench/1 record written by campaigns/medium_pilot.py")
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
    return rec, sha256_file(path)


def chosen_candidate(rec: dict) -> dict:
    """The record's entry for the candidate the rule chose."""
    name = rec["results"]["chosen"]["candidate"]
    return next(c for c in rec["results"]["candidates"] if c["name"] == name)


def frozen(kind: str, draft_data: dict, values: dict, pilot: dict, piloted_digest: str | None = None) -> dict:
    """The frozen contract. The adaptive one is the pilot's own candidate contract (campaigns/medium_pilot.py
    candidate_contract), checked against the digest the pilot recorded for the chosen candidate, plus its
    description and `pilot` field: what was frozen is what was piloted."""
    from campaigns.medium_pilot import candidate_contract
    from kit.digest import sha256_json

    if kind == "adaptive":
        c = candidate_contract(draft_data, values)
        if piloted_digest is not None and sha256_json(c) != piloted_digest:
            raise FreezeRefused(f"the chosen candidate's contract rebuilt from the draft has digest {sha256_json(c)}; "
                                f"the pilot recorded {piloted_digest} (field 'results.candidates[].contract_digest')")
        c["description"] = ("The medium adaptive-shards trial (shared/DESIGN.md, Scales): the frozen trial's structure "
                            "and counts exactly on the kit's small seed; the learning rate, microbatch size and token "
                            f"cap were fixed on development roles by pilot run {pilot['run_id']} (field 'pilot').")
    else:
        c = json.loads(json.dumps(draft_data))
        c["training"]["optimizer"]["lr"] = values["lr"]
        c["data"]["max_tokens"] = values["max_tokens"]
        c["name"] = (f"shared-gradient-study/medium (learning rate and token cap transferred from the adaptive pilot "
                     f"{pilot['run_id']}: same seed, task families and optimizer)")
    c["pilot"] = pilot
    return c


def freeze(run_dir, adaptive_draft=None, study_draft=None, out_dir=None) -> dict:
    from campaigns.medium_pilot import repo_relative
    from kit.adaptive.schema import load_adaptive_contract
    from kit.study.schema import load_study_contract

    run_dir = Path(run_dir).resolve()
    out_dir = Path(out_dir) if out_dir else REPO / "contracts"
    drafts = {"adaptive": Path(adaptive_draft or REPO / "contracts" / "adaptive-shards.medium.draft.json"),
              "study": Path(study_draft or REPO / "contracts" / "shared-gradient.medium.draft.json")}
    loaders = {"adaptive": load_adaptive_contract, "study": load_study_contract}
    rec, sha = read_pilot(run_dir)
    for kind, path in drafts.items():
        if (out_dir / OUTPUTS[kind]).exists():
            raise FreezeRefused(f"{out_dir / OUTPUTS[kind]}: exists; a frozen contract is never rewritten")
    staged = {}
    try:  # every check and both validations before either file is written; any failure removes what was staged
        for kind, path in drafts.items():
            draft = loaders[kind](path)
            want = rec["parameters"]["drafts"][kind]["digest"]
            if draft.digest != want:
                raise FreezeRefused(f"{run_dir / 'run.json'}: field 'parameters.drafts.{kind}.digest' = {want}; the "
                                    f"draft {path} now has digest {draft.digest} (the pilot ran on another draft: run "
                                    "it again)")
            pilot = {"run_id": rec["run_id"], "record": repo_relative(run_dir / "run.json"), "record_sha256": sha,
                     "draft": repo_relative(path), "draft_digest": draft.digest, "rule": rec["results"]["chosen"]["rule"],
                     "chosen": rec["results"]["chosen"]["values"]}
            contract = frozen(kind, draft.data, rec["results"]["chosen"]["values"], pilot,
                              chosen_candidate(rec)["contract_digest"] if kind == "adaptive" else None)
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
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pilot", required=True, help="the committed pilot run directory (run.json)")
    p.add_argument("--adaptive-draft", help="default contracts/adaptive-shards.medium.draft.json")
    p.add_argument("--study-draft", help="default contracts/shared-gradient.medium.draft.json")
    p.add_argument("--out-dir", help="default contracts/")
    a = p.parse_args(argv)
    try:
        print(json.dumps(freeze(a.pilot, a.adaptive_draft, a.study_draft, a.out_dir), sort_keys=True))
    except FreezeRefused as e:
        print(f"medium_freeze: refused: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
