"""The chain between runs, and the exposure ledger's chain, as verification checks them.

A run's materials (what it consumed: the prepared job, the development evaluations a selection read, the
selection a final evaluation used, the commits it scored) must each be in the committed evidence with that
digest; a run's `files/` copies must be the bytes its `*_file` sidecars pin; a final evaluation's commits must
be the candidates and baselines of the selection it used; every ledger event a run appended must be in the
committed ledger, whose chain must be whole and must still hold the head pinned in runs/MANIFESTS.json.
Every function takes a run directory and the repository base (an unpacked archived run is checked alike).
docs/formats/run-records.md ("Materials and the chain"), docs/formats/exposure-ledger.md is the reference.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path

from kit.digest import BoundedReadError, load_json_strict, read_bounded, sha256_regular
from kit.evidence import run_record
from kit.evidence.checks import report_json
from kit.evidence.ledger import LEDGER_RELATIVE
from kit.evidence.ledger_chain import ChainError, has_prefix, parse
from kit.evidence.manifest import PINS_RELATIVE, run_pins
from kit.evidence.run_record import RunRecord

FILES_DIR = "files"
PREPARE_SUFFIX = "_prepare.ipynb"  # the notebooks that write a prepared job (its prepared.json is their product)


def _check(name: str, problems: list[str], ok: str) -> dict:
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return {"check": name, "result": "fail", "detail": problems[0] + more}
    return {"check": name, "result": "pass", "detail": ok}


class Evidence:
    """What the committed runs of a repository hold, by digest: file digests (kit-run/3 manifests, the pins of
    older runs, `*_file` sidecars, preparations' prepared.json) and the roots runs produced."""

    def __init__(self, base: str | os.PathLike, list_runs):
        """`list_runs`: kit.evidence.verify.expand_run_dirs (passed in: verify imports this module), which
        lists archived runs too once it is archive-aware."""
        self.base = Path(base)
        self._list_runs = list_runs

    @cached_property
    def records(self) -> list[tuple[Path, RunRecord]]:
        dirs = self._list_runs([str(self.base / "runs")])
        out = []
        for d in dirs:
            try:
                out.append((Path(d), run_record.read_run_record(d)))
            except (FileNotFoundError, ValueError):
                continue
        return out

    @cached_property
    def files(self) -> dict[str, list[str]]:
        """sha256 -> where (a path, or a description) in the committed evidence."""
        found: dict[str, list[str]] = {}

        def add(digest, where):
            if isinstance(digest, str):
                found.setdefault(digest, []).append(where)

        for d, rec in self.records:
            for rel, entry in (rec.manifest or {}).items():  # none in a kit-run/2 record
                add(entry.sha256, str(d / rel))
            for sidecar in sorted((d / "metrics").glob("*_file.json")):
                add(_load(sidecar).get("sha256"), f"{sidecar} field 'sha256'")
            if rec.notebook.endswith(PREPARE_SUFFIX):
                add(rec.input_digests.get("prepared.json"), f"{d / 'run.json'} input_digests['prepared.json']")
        pins = run_pins(self.base)
        for key, pinned_run in (pins.runs if pins is not None else {}).items():
            for rel, item in pinned_run.files.items():
                add(item.sha256, f"{self.base / key / rel}")
        return found

    @cached_property
    def produced(self) -> set[str]:
        return {e.root for _, rec in self.records for e in rec.checkpoint_roots.produced}

    def file_with(self, digest: str) -> Path | None:
        """A file of the evidence with these bytes (to read a selection a material names)."""
        for where in self.files.get(digest, []):
            p = Path(where)
            if p.is_file() and _sha(p) == digest:
                return p
        return None


def _sha(path: Path) -> str:
    try:
        return sha256_regular(path)[1]
    except (BoundedReadError, FileNotFoundError) as e:
        return f"not read: {e}"


def _read_text(path: Path) -> str:
    try:
        return read_bounded(path, follow_links=False).decode(errors="replace")
    except (ValueError, OSError):
        return ""


def _load(path: Path) -> dict:
    try:
        obj = load_json_strict(path, follow_links=False)
    except (ValueError, OSError):
        return {}
    return obj if isinstance(obj, dict) else {}


def copies_check(run_dir: Path) -> dict:
    """Each `files/` copy that a `*_file` sidecar names (its `path`'s file name) has the sidecar's sha256; and
    a kept selection log lists the selection the run pinned."""
    problems, n = [], 0
    for sidecar in sorted((run_dir / "metrics").glob("*_file.json")):
        meta = _load(sidecar)
        if not isinstance(meta.get("path"), str) or not isinstance(meta.get("sha256"), str):
            continue
        copy = run_dir / FILES_DIR / Path(meta["path"]).name
        if copy.is_file():
            n += 1
            have = _sha(copy)
            if have != meta["sha256"]:
                problems.append(f"{copy}: sha256 {have[:12]}; {sidecar} field 'sha256' pins "
                                f"{meta['sha256'][:12]}")
        log = run_dir / FILES_DIR / "selections.jsonl"
        if sidecar.name == "selection_file.json" and log.is_file() and \
                meta["sha256"] not in _read_text(log):
            problems.append(f"{log}: does not list the selection {meta['sha256'][:12]} of {sidecar}")
    return _check("copies", problems, f"{n} kept cop{'y' if n == 1 else 'ies'} equal to the bytes their sidecars pin")


def materials_checks(run_dir: Path, record: RunRecord, evidence: Evidence) -> list[dict]:
    """For a kit-run/3 record: materials present in the evidence; for one that names materials, also its used
    roots produced by a committed run, and a final evaluation's commits bound by the selection it used."""
    problems = []
    materials = record.materials or ()  # a kit-run/3 record's (verify_evidence calls this for those only)
    for m in materials:
        if m.kind == "commit":
            if m.digest not in evidence.produced:
                problems.append(f"{run_dir / 'run.json'}: material {m.role} commit {m.digest[:12]} is produced "
                                "by no committed run")
        elif m.digest not in evidence.files:
            problems.append(f"{run_dir / 'run.json'}: material {m.role} {m.kind} {m.digest[:12]} is not in "
                            "the committed evidence")
    out = [_check("materials", problems, f"{len(materials)} material(s) in the committed evidence")]
    if not materials:
        return out  # a run that names no materials (a notebook outside the kit's steps) is not chained further
    used = [e.root for e in record.checkpoint_roots.used]
    stray = [r for r in used if r not in evidence.produced]
    out.append(_check("roots used", [f"{run_dir / 'run.json'}: checkpoint_roots.used {r[:12]} is produced by no "
                                     "committed run" for r in stray], f"{len(used)} used root(s) produced by runs"))
    selections = [m.digest for m in materials if m.role == "selection"]
    if selections:
        out.append(_binding_check(run_dir, record, selections[0], evidence))
    return out


def _binding_check(run_dir: Path, record: RunRecord, selection: str, evidence: Evidence) -> dict:
    path = evidence.file_with(selection)
    if path is None:
        return _check("selection binding", [f"{run_dir / 'run.json'}: selection {selection[:12]} not found"], "")
    cands = _load(path).get("candidates") or {}
    bound = {c.get("full_root") for c in cands.values()} | \
        {(c.get("baseline") or {}).get("full_root") for c in cands.values()}
    commits = [m.digest for m in record.materials or () if m.kind == "commit"] + \
        [e.root for e in record.checkpoint_roots.used]
    stray = [r for r in commits if r not in bound]
    return _check("selection binding", [f"{run_dir / 'run.json'}: commit {r[:12]} is not bound by the selection "
                                        f"{path}" for r in stray], f"its commits are bound by {path}")


def ledger_events_check(run_dir: Path, record: RunRecord, base: Path) -> dict:
    """Every ledger event the run appended is in the committed ledger (by event digest)."""
    path = base / LEDGER_RELATIVE
    try:
        data = read_bounded(path, follow_links=False) if path.exists() or path.is_symlink() else b""
        have = {ev.digest for ev in parse(path, data).events}
    except ValueError as e:  # ChainError, or a ledger that may not be read (a link, a device, too large)
        return _check("ledger events", [str(e)], "")
    events = record.ledger_events or ()  # a kit-run/3 record's
    missing = [e for e in events if e.digest not in have]
    return _check("ledger events", [f"{path}: lacks the {e.event} event {e.digest[:12]} that "
                                    f"{run_dir / 'run.json'} records appending" for e in missing],
                  f"{len(events)} event(s) in {path}")


def ledger_order_check(ledger) -> dict:
    """The `ledger order` check: no `selection` event of a job after a `final-access` event of the same job (a
    selection made after final scoring, which `kit adaptive select` refuses, cannot stand in the chain)."""
    opened: dict[str, int] = {}
    problems = []
    for ev in ledger.events:
        job = ev.header.job
        if ev.header.event == "final-access" and job is not None:
            opened.setdefault(job, ev.line)
        elif ev.header.event == "selection" and job in opened:
            problems.append(f"{ledger.path}:{ev.line}: a selection event for job {str(job)[:12]} after its final "
                            f"access at line {opened[job]} (a selection after final scoring)")
    return _check("ledger order", problems, f"no selection after a final access of its job ({len(opened)} job(s))")


def ledger_report(base: str | os.PathLike) -> dict:
    """The committed ledger as a report of its own: its chain whole, and the head runs/MANIFESTS.json pinned
    still a prefix of it (so removing the last events, which breaks no later `prev`, fails too)."""
    base = Path(base)
    path = base / LEDGER_RELATIVE
    checks = []
    try:
        data = read_bounded(path, follow_links=False) if path.exists() or path.is_symlink() else b""
    except ValueError as e:
        data, checks = b"", [_check("ledger chain", [str(e)], "")]
    try:
        ledger = parse(path, data)
        checks.append(_check("ledger chain", ledger.broken, f"{len(ledger.events)} chained event(s) and "
                                                             f"{len(ledger.old)} earlier line(s)"))
        checks.append(ledger_order_check(ledger))
    except ChainError as e:
        checks.append(_check("ledger chain", [str(e)], ""))
    try:
        pins = run_pins(base)
        pinned = pins.ledger if pins is not None else None
    except ValueError as e:
        pinned, checks = None, checks + [_check("ledger head", [str(e)], "")]
    if pinned is not None:
        ok = has_prefix(data, pinned.size, pinned.sha256)
        checks.append(_check("ledger head", [] if ok else [
            (f"{path}: its first {pinned.size} bytes do not hash to the head {pinned.sha256[:12]} that "
            f"{base / PINS_RELATIVE} pins (entries removed or edited)")], "holds the pinned head"))
    elif data:
        checks.append({"check": "ledger head", "result": "fail",
                       "detail": f"{base / PINS_RELATIVE}: no pinned ledger head for {path} (not pinned: run "
                                 "`python tools/pin_run_files.py` once)"})
    else:
        checks.append({"check": "ledger head", "result": "skipped", "detail": f"{path}: no ledger, none pinned"})
    return report_json(str(path), None, checks)
