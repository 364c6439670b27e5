"""Selection records and the guard on final roles.

Development checks may abort a run; they cannot select another endpoint. So the candidates are
fixed in a selection record *before* any final scoring, and final roles open only for exactly the
candidates that record binds:

- `select` writes `selection.json` binding the prepared job (sha256 of its prepared.json) and the
  candidates' checkpoint identities (full root and learned-state root per named candidate). It is
  refused once any final scoring of that prepared job has happened.
- `open_final_roles` is called before reading a final role file. It is refused without a selection
  record, when the record binds another prepared job, or when a candidate is not one the record
  binds. Every opening, allowed or refused, is appended to `final-access.jsonl` in the prepared
  directory (fsynced), which is also how a later `select` learns that scoring happened.
- `select` also appends the sha256 of every record it writes to `selections.jsonl` in the prepared
  directory, and final roles open only with a record whose bytes hash to one of those, and, once
  scoring happened, only with the record it happened under. An edited, hand-made or copied record
  (which could otherwise bind other candidates after scoring) is refused naming the digests expected.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from kit.digest import canonical_json, load_canonical_json, sha256_file, write_canonical_json

SELECTION_FORMAT = "kit-adaptive-selection/1"
ACCESS_LOG = "final-access.jsonl"
SELECTIONS_LOG = "selections.jsonl"  # sha256 of every record `select` wrote for this prepared job


class FinalRolesRefused(PermissionError):
    pass


def prepared_digest(prepared_dir: str | os.PathLike) -> str:
    return sha256_file(Path(prepared_dir) / "prepared.json")


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


def write_selection(prepared_dir: str | os.PathLike, candidates: dict[str, dict], out: str | os.PathLike,
                    development: dict | None = None) -> dict:
    """candidates: {name: {"home": H, "root": full root}}; returns the record written to `out`."""
    from kit.store.commits import read_commit

    prepared_dir = Path(prepared_dir)
    scored = [e for e in access_entries(prepared_dir) if e.get("allowed")]
    if scored:
        raise FinalRolesRefused(f"{prepared_dir / ACCESS_LOG}: final roles of this prepared job were already "
                                f"opened ({len(scored)} time(s)); a selection made after final scoring is refused")
    bound = {}
    for name, c in sorted(candidates.items()):
        m = read_commit(c["home"], c["root"])  # recomputes both roots; refuses a tampered manifest
        bound[name] = {"full_root": m["full_root"], "learned_state_root": m["learned_state_root"]}
    record = {"format": SELECTION_FORMAT, "prepared_digest": prepared_digest(prepared_dir), "candidates": bound,
              "development": development or {}}
    _log(prepared_dir, {"selection": str(out), "sha256": write_canonical_json(out, record)}, SELECTIONS_LOG)
    return record


def open_final_roles(prepared_dir: str | os.PathLike, selection_path: str | os.PathLike | None,
                     roots: list[str], purpose: str) -> dict:
    """Allow reading final roles for `roots`, or raise FinalRolesRefused; logged either way."""
    prepared_dir = Path(prepared_dir)
    entry = {"purpose": purpose, "roots": sorted(roots), "selection": str(selection_path) if selection_path else None}
    try:
        if selection_path is None or not Path(selection_path).exists():
            raise FinalRolesRefused(f"{prepared_dir}: final roles need a selection record (kit adaptive select)")
        record = load_canonical_json(selection_path)
        if not isinstance(record, dict) or record.get("format") != SELECTION_FORMAT:
            raise FinalRolesRefused(f"{selection_path}: not a selection record (format "
                                    f"{record.get('format') if isinstance(record, dict) else record!r})")
        if not (prepared_dir / "prepared.json").is_file():
            raise FinalRolesRefused(f"{prepared_dir / 'prepared.json'}: missing; the selection cannot be checked "
                                    "against the prepared job")
        if record["prepared_digest"] != prepared_digest(prepared_dir):
            raise FinalRolesRefused(f"{selection_path}: binds prepared job {record['prepared_digest']}, not "
                                    f"{prepared_dir / 'prepared.json'} ({prepared_digest(prepared_dir)})")
        bound = {c["full_root"] for c in record["candidates"].values()}
        stray = [r for r in roots if r not in bound]
        if stray:
            raise FinalRolesRefused(f"{selection_path}: candidate {stray[0]} is not bound by the selection record")
        actual = sha256_file(selection_path)
        written = [e["sha256"] for e in access_entries(prepared_dir, SELECTIONS_LOG)]
        if actual not in written:
            raise FinalRolesRefused(f"{selection_path}: sha256 {actual} is not a selection record `kit adaptive select` "
                                    f"wrote for {prepared_dir} (expected one of: {', '.join(written) or 'none'}, "
                                    f"{SELECTIONS_LOG}); an edited, hand-made or copied record is refused")
        used = sorted({e["selection_sha256"] for e in access_entries(prepared_dir) if e.get("allowed")})
        if used and actual not in used:
            raise FinalRolesRefused(f"{selection_path}: final roles were already opened under selection "
                                    f"{', '.join(used)}; another selection after scoring is refused")
    except FinalRolesRefused as e:
        _log(prepared_dir, {**entry, "allowed": False, "reason": str(e)})
        raise
    except (ValueError, KeyError, TypeError, AttributeError, OSError) as e:  # fail closed, and logged
        _log(prepared_dir, {**entry, "allowed": False, "reason": f"unreadable selection record: {e}"})
        raise FinalRolesRefused(f"{selection_path}: unreadable selection record: {e}") from None
    _log(prepared_dir, {**entry, "allowed": True, "selection_sha256": sha256_file(selection_path)})
    return record
