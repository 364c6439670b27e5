"""Selection records and the guard on final roles.

Development checks may abort a run; they cannot select another endpoint. So the candidates are
fixed in a selection record *before* any final scoring, and `open_final_roles` opens final roles
only for exactly the candidates (and baselines) that a record listed in `selections.jsonl` binds.
Every opening, allowed or refused, is appended to `final-access.jsonl`. The authority is the exposure
ledger's chain (kit.evidence.ledger_chain), outside the prepared folder: `select` appends a `selection`
event, an allowed opening a `final-access` event; final roles open only for a selection whose event is in
the chain, and never under another selection once the chain holds a final access for the job, and `select`
refuses once it holds one. Editing or deleting the prepared folder's logs reopens nothing.
Rules: the notes below; files: docs/formats/selection-records.md, "Selection records".

Notes: what the record binds and what each refusal protects.

- `select` binds the prepared job (sha256 of prepared.json) and each candidate's full and learned-state roots, and
  appends the record's sha256 to `selections.jsonl`: an edited, hand-made or copied record (which could bind other
  candidates after scoring) matches no listed digest and is refused, naming the digests expected.
- A candidate is a commit at its comparison's endpoint (cursor cohort, cohort_step and step; the grown depth for a
  grown comparison): intermediate and wrong-cohort commits are refused. Its baseline is bound too: the seed by
  parameter digest, or the candidate the contract names as baseline (which must then be selected as well).
- On final roles a `seed:DIR` baseline passes only when the directory's parameter digest is the contract's seed
  digest (a tiny contract's: the one recorded at prepare), so an exported commit or a renamed directory cannot stand
  in for the seed. `final-access.jsonl` is fsynced line by line.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kit.adaptive.continued_schema import JobTerms, job_contract
from kit.adaptive.formats import (
    PREPARED_FILE,
    SELECTION_FORMAT,
    AnyPreparedJob,
    BoundCandidate,
    CommitSpec,
    ContinuedPreparedJob,
    EndpointBaseline,
    SeedBaseline,
    SelectionRecord,
    load_prepared,
)
from kit.contract import ContractError
from kit.digest import (
    canonical_json,
    load_canonical_json,
    load_json_strict,
    sha256_file,
    write_canonical_json,
)
from kit.evidence.ledger import LedgerError, append_guard_event, bound_guard_ledger, chain_headers
from kit.evidence.ledger_chain import EventHeader
from kit.evidence.notebook import record_materials
from kit.inventory import parameter_digest
from kit.refs import CommitRef, SeedRef
from kit.store.commits import read_manifest
from kit.store.manifest import Manifest

ACCESS_LOG = "final-access.jsonl"
SELECTIONS_LOG = "selections.jsonl"  # sha256 of every record `select` wrote for this prepared job
EVALUATIONS_LOG = "final-evaluations.jsonl"  # sha256 of every final evaluation record `evaluate` wrote


COHORTS = ("A", "B")


class FinalRolesRefused(PermissionError):
    pass


@dataclass(frozen=True, slots=True)
class ModelPair:
    """The pair `evaluate` scores, as it asks the final-role guard to open final roles for it: each model a
    seed directory or a commit of a store (kit.adaptive.evaluation.model_spec)."""

    candidate: SeedRef | CommitRef
    baseline: SeedRef | CommitRef


def prepared_contract(prepared_dir: str | os.PathLike) -> tuple[AnyPreparedJob, Any]:
    """(prepared.json, the job's contract view: `job_contract`) of a prepared job; the contract file must
    still have the digest prepared.json records (else FinalRolesRefused naming both)."""
    path = Path(prepared_dir) / PREPARED_FILE
    pj = load_prepared(prepared_dir)
    try:
        return pj, job_contract(pj)
    except ContractError as e:
        raise FinalRolesRefused(f"{path}: {e}") from None


def seed_digest(pj: AnyPreparedJob, terms: JobTerms) -> tuple[str, str]:
    """(the seed's parameter digest, where it is stated): the contract's pin, else the prepared one."""
    pinned = terms.seed.parameter_digest
    if pinned is not None:
        return pinned, "contract field 'seed.parameter_digest'"
    return pj.seed.parameter_digest, "prepared.json field 'seed.parameter_digest' (recorded at prepare)"


def endpoint_cursor(terms: JobTerms, cohort: str) -> dict:
    """The cursor of a cohort's contract endpoint: {"step", "cohort", "cohort_step"}."""
    order = terms.cohort_order
    i = order.index(cohort)
    return {"step": sum(terms.endpoints[c] for c in order[: i + 1]), "cohort": i,
            "cohort_step": terms.endpoints[cohort]}


def check_endpoint(manifest: Manifest, name: str, pj: AnyPreparedJob, terms: JobTerms, source: str) -> None:
    """Refuse a commit that is not at comparison `name`'s endpoint (cursor and depth)."""
    comps = terms.comparisons
    if name not in comps:
        raise FinalRolesRefused(f"{source}: candidate name {name!r} is not a comparison of the contract (field "
                                f"'comparisons'); expected one of {sorted(comps)}")
    comp = comps[name]
    cursor = dict(manifest.learned_state.cursor)
    want = endpoint_cursor(terms, comp.cohort)
    got = {k: cursor.get(k) for k in want}
    if got != want:
        raise FinalRolesRefused(f"{source}: candidate {name!r} (commit {manifest.full_root}) has cursor {cursor}; "
                                f"expected the endpoint of cohort {comp.cohort} (contract field 'endpoints."
                                f"{comp.cohort}' = {terms.endpoints[comp.cohort]}): {want}")
    layers = max(b for _, b in manifest.layout.blocks)
    depth = pj.seed.num_hidden_layers + (terms.growth.add_blocks if comp.grown else 0)
    if layers != depth:
        raise FinalRolesRefused(f"{source}: candidate {name!r} (commit {manifest.full_root}) has {layers} blocks; "
                                f"contract field 'comparisons.{name}.grown' = {comp.grown} expects {depth}")


def prepared_digest(prepared_dir: str | os.PathLike) -> str:
    return sha256_file(Path(prepared_dir) / "prepared.json")


def selection_evidence(prepared_dir: str | os.PathLike, out: str | os.PathLike) -> list[Path]:
    """What a reader needs, beside a final evaluation's, to verify it (docs/formats/selection-records.md, "Selection records"):
    the selection record, the prepared job's prepared.json and the selection ledger as it stands after `out`
    was written; the selection notebook copies them into its run directory (kit.evidence.notebook.record_file)."""
    p = Path(prepared_dir)
    return [Path(out), p / "prepared.json", p / SELECTIONS_LOG]


def final_evaluation_evidence(prepared_dir: str | os.PathLike, out: str | os.PathLike) -> list[Path]:
    """The final evaluation record `out` and the access and final-evaluation logs as they stand after it
    was written: the evaluation's half of the verification procedure's files."""
    p = Path(prepared_dir)
    return [Path(out), p / ACCESS_LOG, p / EVALUATIONS_LOG]


def _log(prepared_dir: Path, entry: dict, name: str = ACCESS_LOG) -> None:
    path = prepared_dir / name
    with open(path, "ab") as f:
        f.write(canonical_json({**entry, "time": round(time.time(), 3)}) + b"\n")
        f.flush()
        os.fsync(f.fileno())


def access_entries(prepared_dir: str | os.PathLike, name: str = ACCESS_LOG) -> list[dict]:
    path = Path(prepared_dir) / name
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def guard_ledger(prepared_dir: Path, pj: AnyPreparedJob) -> Path:
    """The ledger whose chain guards this job's final roles: the one it was prepared against, bound by its
    recorded head (kit.evidence.ledger.bound_guard_ledger; a job prepared before the head was recorded: the one
    its scorings record exposures into, $KIT_LEDGER first)."""
    try:
        return bound_guard_ledger(prepared_dir, pj.locations.to_json())
    except LedgerError as e:
        raise FinalRolesRefused(str(e)) from None


def chained_accesses(prepared_dir: Path, pj: AnyPreparedJob) -> list[EventHeader]:
    digest = prepared_digest(prepared_dir)
    return [e for e in chain_headers(guard_ledger(prepared_dir, pj), "final-access") if e.prepared_digest == digest]


def write_selection(prepared_dir: str | os.PathLike, candidates: dict[str, dict], out: str | os.PathLike,
                    development: dict | None = None) -> dict:
    """candidates: {name: {"home": H, "root": full root}}; returns the record written to `out`."""
    prepared_dir = Path(prepared_dir)
    scored = [e for e in access_entries(prepared_dir) if e.get("allowed")]
    if scored:
        raise FinalRolesRefused(f"{prepared_dir / ACCESS_LOG}: final roles of this prepared job were already "
                                f"opened ({len(scored)} time(s)); a selection made after final scoring is refused")
    pj, terms = prepared_contract(prepared_dir)
    chained = chained_accesses(prepared_dir, pj)
    if chained:
        raise FinalRolesRefused(f"{guard_ledger(prepared_dir, pj)}: its chain holds {len(chained)} final access(es) "
                                f"for this prepared job (run {chained[0].run}); a selection made after final "
                                "scoring is refused")
    roots = {}
    for name, spec in sorted(candidates.items()):
        c = CommitSpec.from_json(spec, "candidates", name)
        m = read_manifest(c.home, c.root)  # recomputes both roots; refuses a tampered manifest
        check_endpoint(m, name, pj, terms, f"{c.home}:{c.root}")
        roots[name] = (m.full_root, m.learned_state_root)
    bound = {}
    for name, (full_root, learned_state_root) in sorted(roots.items()):
        base = terms.comparisons[name].baseline
        baseline: SeedBaseline | EndpointBaseline
        if base == "seed":
            baseline = SeedBaseline(kind="seed", parameter_digest=seed_digest(pj, terms)[0])
        elif base == "start":  # a continued-learning job: the phase-A endpoint it started from
            if not isinstance(pj, ContinuedPreparedJob):  # an adaptive contract never names "start"
                raise FinalRolesRefused(f"candidate {name!r}: baseline 'start' needs a continued-learning job")
            baseline = EndpointBaseline(kind="endpoint", name="start", full_root=pj.start.full_root)
        elif base in roots:
            baseline = EndpointBaseline(kind="endpoint", name=base, full_root=roots[base][0])
        else:
            raise FinalRolesRefused(f"candidate {name!r}: its baseline {base!r} (contract field 'comparisons.{name}."
                                    f"baseline') is not among the selected candidates {sorted(roots)}; select it too")
        bound[name] = BoundCandidate(full_root=full_root, learned_state_root=learned_state_root, baseline=baseline)
    record = SelectionRecord(format=SELECTION_FORMAT, prepared_digest=prepared_digest(prepared_dir),
                             contract_digest=pj.contract.digest, candidates=MappingProxyType(bound),
                             development=MappingProxyType(development or {}))
    sha = write_canonical_json(out, record.to_json())
    _log(prepared_dir, {"selection": str(out), "sha256": sha}, SELECTIONS_LOG)

    append_guard_event(guard_ledger(prepared_dir, pj), {"event": "selection", "job": pj.job_digest,
                                                        "prepared_digest": record.prepared_digest,
                                                        "selection_sha256": sha})
    record_materials("prepared", "file", [record.prepared_digest])
    record_materials("development", "evaluation", sorted(set((development or {}).get("dev_evaluations", {}).values())))
    record_materials("candidate", "commit", sorted(c.full_root for c in bound.values()))
    return record.to_json()  # the record as written: notebook 14 and `kit adaptive select` show it


def replicate_index(home: str | os.PathLike, root: str) -> int:
    """The replicate index of the attempt in `home` that committed `root` (0: a committed-order run, or no
    attempt of this home names it): replicates never open final roles (open_final_roles)."""
    for path in sorted(Path(home).glob("attempts/*/attempt.json")):
        record = load_json_strict(path)
        if any(c.get("full_root") == root for c in record.get("commits") or []):
            return (record.get("replicate") or {}).get("index", 0)
    return 0


def open_final_roles(prepared_dir: str | os.PathLike, selection_path: str | os.PathLike | None,
                     roots: list[str], purpose: str, models: ModelPair | None = None) -> SelectionRecord:
    """Allow reading final roles for `roots`, or raise FinalRolesRefused; logged either way.

    models (what `evaluate` passes): the candidate and the baseline, each a commit or a seed; the pair must be
    one the record binds (see the module docstring)."""
    prepared_dir = Path(prepared_dir)
    entry = {"purpose": purpose, "roots": sorted(roots), "selection": str(selection_path) if selection_path else None}
    if models is not None:
        entry["baseline"] = _model_name(models.baseline)
    try:
        candidate = models.candidate if models is not None else None
        if isinstance(candidate, CommitRef) and replicate_index(candidate.home, candidate.root):
            raise FinalRolesRefused(f"{candidate.home}: commit {candidate.root} was trained as replicate "
                                    f"{replicate_index(candidate.home, candidate.root)}; a replicate is "
                                    "scored on development roles only, never on final roles")
        if selection_path is None or not Path(selection_path).exists():
            raise FinalRolesRefused(f"{prepared_dir}: final roles need a selection record (kit adaptive select)")
        record = load_canonical_json(selection_path)
        if not isinstance(record, dict) or record.get("format") != SELECTION_FORMAT:
            raise FinalRolesRefused(f"{selection_path}: not a selection record (format "
                                    f"{record.get('format') if isinstance(record, dict) else record!r})")
        selection = SelectionRecord.from_json(record, str(selection_path))  # a ContractError: unreadable, below
        if not (prepared_dir / "prepared.json").is_file():
            raise FinalRolesRefused(f"{prepared_dir / 'prepared.json'}: missing; the selection cannot be checked "
                                    "against the prepared job")
        if selection.prepared_digest != prepared_digest(prepared_dir):
            raise FinalRolesRefused(f"{selection_path}: binds prepared job {selection.prepared_digest}, not "
                                    f"{prepared_dir / 'prepared.json'} ({prepared_digest(prepared_dir)})")
        bound = {c.full_root for c in selection.candidates.values()}
        stray = [r for r in roots if r not in bound]
        if stray:
            raise FinalRolesRefused(f"{selection_path}: candidate {stray[0]} is not bound by the selection record")
        if models is not None:
            _check_models(prepared_dir, selection, models, str(selection_path))
        actual = sha256_file(selection_path)
        _check_chain(prepared_dir, str(selection_path), actual)
    except FinalRolesRefused as e:
        _log(prepared_dir, {**entry, "allowed": False, "reason": str(e)})
        raise
    except (ValueError, KeyError, TypeError, AttributeError, OSError) as e:  # fail closed, and logged
        _log(prepared_dir, {**entry, "allowed": False, "reason": f"unreadable selection record: {e}"})
        raise FinalRolesRefused(f"{selection_path}: unreadable selection record: {e}") from None
    _log(prepared_dir, {**entry, "allowed": True, "selection_sha256": actual})

    pj, _ = prepared_contract(prepared_dir)
    append_guard_event(guard_ledger(prepared_dir, pj), {"event": "final-access", "job": pj.job_digest,
                                                        "prepared_digest": selection.prepared_digest,
                                                        "selection_sha256": actual, "roots": sorted(roots),
                                                        "purpose": purpose})
    record_materials("selection", "file", [actual])
    return selection


def _check_chain(prepared_dir: Path, source: str, actual: str) -> None:
    """The selection's event is in the ledger chain, and no final access under another selection is."""
    pj, _ = prepared_contract(prepared_dir)
    ledger, digest = guard_ledger(prepared_dir, pj), prepared_digest(prepared_dir)
    written = [e.selection_sha256 for e in chain_headers(ledger, "selection")
               if e.prepared_digest == digest and e.selection_sha256 is not None]
    if actual not in written:
        raise FinalRolesRefused(f"{source}: sha256 {actual} is not a selection record `kit adaptive select` wrote for "
                                f"{prepared_dir} (the selection events of {ledger} name: {', '.join(written) or 'none'}); "
                                "an edited, hand-made or copied record is refused")
    used = sorted({e.selection_sha256 for e in chained_accesses(prepared_dir, pj) if e.selection_sha256 is not None}
                  | {e["selection_sha256"] for e in access_entries(prepared_dir) if e.get("allowed")})
    if used and actual not in used:
        raise FinalRolesRefused(f"{source}: final roles were already opened under selection {', '.join(used)} "
                                f"({ledger}); another selection after scoring is refused")


def _model_name(model: SeedRef | CommitRef) -> str:
    """A model as the access log names it: its full root, or seed:DIR."""
    return model.root if isinstance(model, CommitRef) else f"seed:{model.seed_dir}"


def _check_models(prepared_dir: Path, record: SelectionRecord, models: ModelPair, source: str) -> None:
    """The evaluated pair is a bound (candidate, baseline): see the module docstring."""
    cand, base = models.candidate, models.baseline
    base_root = base.root if isinstance(base, CommitRef) else None
    if not isinstance(cand, CommitRef):
        raise FinalRolesRefused(f"{source}: candidate seed:{cand.seed_dir} on final roles; a candidate must be "
                                "a committed endpoint bound by field 'candidates' (HOME:FULL_ROOT)")
    names = [n for n, c in record.candidates.items() if c.full_root == cand.root]
    if not names:
        raise FinalRolesRefused(f"{source}: candidate {cand.root} is not bound by the selection record "
                                "(field 'candidates')")
    pj, terms = prepared_contract(prepared_dir)
    name = names[0]
    check_endpoint(read_manifest(cand.home, cand.root), name, pj, terms, f"{cand.home}:{cand.root}")
    bound = record.candidates[name].baseline  # present: the record's class requires it
    want_base = terms.comparisons[name].baseline
    if isinstance(bound, SeedBaseline) != (want_base == "seed") or \
            (isinstance(bound, EndpointBaseline) and bound.name != want_base):
        raise FinalRolesRefused(f"{source}: field 'candidates.{name}.baseline' = {bound.to_json()}; the contract's "
                                f"comparisons.{name}.baseline is {want_base!r}")
    if isinstance(bound, SeedBaseline):
        digest, where = seed_digest(pj, terms)
        if not isinstance(base, SeedRef):
            raise FinalRolesRefused(f"{source}: baseline {base_root} for candidate {name!r}; field "
                                    f"'candidates.{name}.baseline' binds the seed (seed:DIR with parameter digest "
                                    f"{digest})")
        actual = parameter_digest(base.seed_dir)
        if actual != digest or bound.parameter_digest != digest:
            raise FinalRolesRefused(f"{base.seed_dir}: parameter digest {actual}; a seed:DIR baseline on final roles "
                                    f"must have the {where} = {digest} (an exported commit or another directory is "
                                    "not the seed)")
    else:
        if base_root != bound.full_root:
            raise FinalRolesRefused(f"{source}: baseline {_model_name(base)} "
                                    f"for candidate {name!r}; field 'candidates.{name}.baseline.full_root' binds "
                                    f"{bound.full_root} (the {want_base!r} endpoint)")
