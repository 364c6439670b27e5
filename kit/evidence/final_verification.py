"""The verification procedure of a final evaluation (docs/formats/selection-records.md, "Selection records, the selection
ledger and the final-role access log"), run from files a reader holds rather than from the host's
prepared directory.

`verify_final_scoring(files)` runs the procedure's five steps over named files, each pass, fail or
missing; `final_scoring_files(runs_dir, run)` finds, for a committed final-evaluation run, the files it
needs by content or name in the evidence folders beside the runs.
The steps: the notes below.

Notes: the five steps.

(1) the selection record hashes to the sha256 the run recorded and is listed in `selections.jsonl`; (2) its
`prepared_digest` is the sha256 of the prepared job's `prepared.json`; (3) the evaluation record hashes to the run's
recorded sha256 and is listed in `final-evaluations.jsonl`; (4) the evaluated candidate's full root is among the
selection's candidates and its baseline is the one the selection bound; (5) `final-access.jsonl` holds an allowed
line with that selection's sha256.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from kit.digest import load_json_strict
from kit.evidence.notebook import FILES_DIR_NAME
from kit.evidence.run_index import evidence_folders, load_rows, split_selection

LOGS = ("selections.jsonl", "final-evaluations.jsonl", "final-access.jsonl")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass(frozen=True, slots=True)
class Step:
    """One step of the procedure (in memory): pass, fail or missing, and what was found."""
    step: str
    result: str
    detail: str


@dataclass(frozen=True, slots=True)
class ScoringVerification:
    """The procedure's outcome (in memory): its steps in order, whether every one passed, and the files missing."""
    steps: tuple[Step, ...]
    complete: bool
    missing: list[str]


def _step(name: str, result: str, detail: str) -> Step:
    return Step(step=name, result=result, detail=detail)


def verify_final_scoring(files: dict) -> ScoringVerification:
    """`files`: {"selection", "prepared", "evaluation", "selections.jsonl", "final-evaluations.jsonl",
    "final-access.jsonl": path or None, "selection_sha256", "evaluation_sha256": what the run recorded}.
    Every step runs (a missing file makes its step `missing`, not an early stop); `complete` is true only
    when every step passed."""
    def have(key):
        p = files.get(key)
        return Path(p) if p is not None and Path(p).is_file() else None

    steps = []
    sel, prep, ev = have("selection"), have("prepared"), have("evaluation")
    sel_sha = _sha(sel) if sel else None
    record = load_json_strict(sel) if sel else None
    listed = have("selections.jsonl")
    if sel is None or listed is None:
        steps.append(_step("selection listed", "missing", "selection record" if sel is None else "selections.jsonl"))
    elif sel_sha != files.get("selection_sha256"):
        steps.append(_step("selection listed", "fail", f"{sel}: sha256 {sel_sha} is not the run's recorded "
                                                       f"{files.get('selection_sha256')}"))
    else:
        assert sel_sha is not None, "sel is not None here, so it has a digest"
        ok = any(x.get("sha256") == sel_sha for x in _lines(listed))
        steps.append(_step("selection listed", "pass" if ok else "fail",
                           f"{listed}: {'lists' if ok else 'does not list'} {sel_sha[:12]}"))
    if record is None or prep is None:
        steps.append(_step("prepared digest", "missing", "selection record" if record is None else "prepared.json"))
    else:
        ok = record.get("prepared_digest") == _sha(prep)
        steps.append(_step("prepared digest", "pass" if ok else "fail",
                           f"{prep}: sha256 {'equals' if ok else 'differs from'} the selection's prepared_digest"))
    evaluation = load_json_strict(ev) if ev else None
    logged = have("final-evaluations.jsonl")
    if ev is None or logged is None:
        steps.append(_step("evaluation logged", "missing", "evaluation record" if ev is None
                           else "final-evaluations.jsonl"))
    else:
        ev_sha = _sha(ev)
        ok = ev_sha == files.get("evaluation_sha256") and any(x.get("sha256") == ev_sha for x in _lines(logged))
        steps.append(_step("evaluation logged", "pass" if ok else "fail",
                           f"{ev}: sha256 {ev_sha[:12]} {'is' if ok else 'is not'} the run's and listed in {logged}"))
    if record is None or evaluation is None:
        steps.append(_step("candidate bound", "missing", "selection record" if record is None else "evaluation record"))
    else:
        cands = {c.get("full_root"): c for c in (record.get("candidates") or {}).values()}
        cand = cands.get(evaluation.get("candidate"))
        base = (cand or {}).get("baseline") or {}
        bound = base.get("kind") == "seed" and str(evaluation.get("baseline", "")).startswith("seed:") or \
            base.get("kind") == "endpoint" and base.get("full_root") == evaluation.get("baseline")
        ok = cand is not None and bound
        steps.append(_step("candidate bound", "pass" if ok else "fail",
                           f"candidate {str(evaluation.get('candidate'))[:12]} "
                           + ("and its baseline are the selection's" if ok else
                              "is not among the selection's candidates" if cand is None else
                              f"has baseline {evaluation.get('baseline')!r}, the selection bound {base}")))
    access = have("final-access.jsonl")
    if access is None or sel_sha is None:
        steps.append(_step("access allowed", "missing", "final-access.jsonl" if access is None else "selection record"))
    else:
        ok = any(x.get("allowed") and x.get("selection_sha256") == sel_sha for x in _lines(access))
        steps.append(_step("access allowed", "pass" if ok else "fail",
                           f"{access}: {'an' if ok else 'no'} allowed line under selection {sel_sha[:12]}"))
    return ScoringVerification(steps=tuple(steps), complete=all(s.result == "pass" for s in steps),
                               missing=list(dict.fromkeys(s.detail for s in steps if s.result == "missing")))


def final_scoring_files(runs_dir, run_id: str) -> dict:
    """The files `verify_final_scoring` needs for the committed final-evaluation run `run_id`: the selection
    and evaluation records found by the sha256 the runs recorded, prepared.json by the selection's
    prepared_digest, the three logs by name. Looked for first in the copies the evaluation run and then its
    selection run keep in `files/` (the logs as they stood after that evaluation), then anywhere under the
    evidence folders beside the runs (a campaign folder's files brought back from a GPU host): there, a log
    only when it names the record it must list (the selection's or the evaluation's sha256)."""
    folder, _ = split_selection(runs_dir)
    rows = {r.run_id: r for r in load_rows(folder)}
    run = rows[run_id]
    ev_meta = load_json_strict(run.dir / "metrics" / "evaluation_file.json")
    sel_param = run.parameters.get("SELECTION")
    select_run = next((r for r in rows.values() if r.parameters.get("OUT") == sel_param
                       and "selection_file" in r.metrics), None)
    sel_meta = load_json_strict(select_run.dir / "metrics" / "selection_file.json") if select_run else {}
    kept = [r.dir / FILES_DIR_NAME for r in (run, select_run) if r is not None]
    folders = [d for d in kept + evidence_folders(folder) if d.is_dir()]
    candidates = [p for d in folders for p in sorted(d.rglob("*")) if p.is_file()]

    def by_sha(sha, name=None):
        """The file with these bytes; else the runs' own copy under `name`, so that an altered copy fails
        its step instead of reading as missing."""
        found = next((p for p in candidates if sha and p.suffix in (".json", "") and _sha(p) == sha), None)
        return found or next((d / name for d in kept if name and (d / name).is_file()), None)

    def by_name(name, sha):
        """The run's own copy of log `name` (kept in files/); else one under the evidence folders that names
        `sha`: a log of another experiment (another campaign's, a superseded demo's) is not this one's."""
        own = next((d / name for d in kept if (d / name).is_file()), None)
        if own is not None:
            return own
        return next((p for p in candidates if p.name == name and sha and sha in p.read_text(errors="replace")), None)

    def named(meta):
        return Path(meta["path"]).name if meta.get("path") else None

    return {"selection": by_sha(sel_meta.get("sha256"), named(sel_meta)), "selection_sha256": sel_meta.get("sha256"),
            "prepared": by_sha(sel_meta.get("prepared_digest"), "prepared.json"),
            "evaluation": by_sha(ev_meta.get("sha256"), named(ev_meta)),
            "evaluation_sha256": ev_meta.get("sha256"),
            **{name: by_name(name, ev_meta.get("sha256") if name == "final-evaluations.jsonl" else sel_meta.get("sha256"))
               for name in LOGS}}
