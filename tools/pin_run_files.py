"""Pin, once, every file of the runs recorded before run manifests existed, and the exposure ledger's head,
in `runs/MANIFESTS.json` (docs/formats/run-records.md, "Run manifests"), without rewriting any record:

    python tools/pin_run_files.py [--base REPO]

Every run folder `kit verify-evidence runs` checks (kit.evidence.verify.expand_run_dirs: superseded and
campaign folders, archived runs unpacked under their old names) whose record is not `kit-run/3` (which
carries its own manifest) is pinned: its files but run.json and kernel.log (sha256, size) and its run.json.
A run already pinned keeps its entry: a pin is never re-taken, so an edit made after pinning stays visible;
`--check` only reports the runs that differ from or lack their pins. The ledger head (size and sha256 of
ledger/exposed.jsonl) is re-pinned only when the ledger still starts with the bytes pinned before.

`runs/RECORD_PINS.json` (docs/formats/run-records.md, "Run manifests") pins what no manifest holds: the run.json of
every kit-run/3 record, runs/GPU_MODES.json and every superseded note of a live folder; a record or note already
pinned keeps its pin (an edit stays visible), GPU_MODES.json, a committed index edited by hand, is re-pinned.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def pin(base: Path, check: bool = False, echo=print) -> int:
    from kit.digest import load_json_strict, sha256_file, write_canonical_json
    from kit.evidence.ledger import LEDGER_RELATIVE
    from kit.evidence.ledger_chain import has_prefix
    from kit.evidence.manifest import (
        PINS_FORMAT,
        PINS_RELATIVE,
        RECORD_PINS_RELATIVE,
        file_manifest,
        pin_entry,
        read_pins,
        run_key,
    )
    from kit.evidence.run_record import RUN_FORMAT
    from kit.evidence.verify import expand_run_dirs

    if not (base / "runs").is_dir():
        echo(f"{base / 'runs'}: no runs folder; --base names the repository holding runs/")
        return 2
    pins = read_pins(base) or {"format": PINS_FORMAT, "runs": {}, "ledger": None}
    added, differ = 0, []
    for run_dir in expand_run_dirs([str(base / "runs")]):
        record = run_dir / "run.json"
        try:
            fmt = load_json_strict(record).get("format") if record.is_file() else None
        except ValueError:
            fmt = None
        if fmt == RUN_FORMAT:
            continue  # its record carries its manifest
        key = run_key(run_dir, base)
        if key in pins["runs"]:
            entry = pins["runs"][key]
            if entry["files"] != file_manifest(run_dir) or (record.is_file() and entry["run.json"]["sha256"] != sha256_file(record)):
                differ.append(key)
            continue
        pins["runs"][key] = pin_entry(run_dir)
        added += 1
    ledger = base / LEDGER_RELATIVE
    data = ledger.read_bytes() if ledger.is_file() else b""
    old = pins.get("ledger")
    if old is not None and not has_prefix(data, old["size"], old["sha256"]):
        echo(f"{ledger}: does not start with the pinned head {old['sha256'][:12]} ({old['size']} bytes); not re-pinned")
        return 1
    for key in differ:
        echo(f"{key}: differs from its pin in {base / PINS_RELATIVE}")
    records = _record_pins(base, differ, echo)
    if check:
        return 1 if differ else 0
    import hashlib

    pins["ledger"] = {"path": LEDGER_RELATIVE.as_posix(), "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    write_canonical_json(base / PINS_RELATIVE, pins)
    write_canonical_json(base / RECORD_PINS_RELATIVE, records)
    echo(f"{base / PINS_RELATIVE}: {added} run(s) pinned now, {len(pins['runs'])} in all; ledger head "
         f"{pins['ledger']['sha256'][:12]} at {len(data)} bytes")
    return 1 if differ else 0


def _record_pins(base: Path, differ: list, echo) -> dict:
    """runs/RECORD_PINS.json as it is to be written: earlier pins kept, new kit-run/3 records and notes added."""
    from kit.digest import load_json_strict
    from kit.evidence.manifest import RECORD_PINS_FORMAT, pin_of, read_record_pins, run_key
    from kit.evidence.run_record import RUN_FORMAT
    from kit.evidence.verify import expand_run_dirs

    old = read_record_pins(base) or {"records": {}, "notes": {}}
    records, notes = dict(old["records"]), dict(old["notes"])
    for run_dir in expand_run_dirs([str(base / "runs")]):
        record = run_dir / "run.json"
        try:
            fmt = load_json_strict(record, follow_links=False).get("format") if record.is_file() else None
        except ValueError:
            fmt = None
        key = run_key(run_dir, base)
        if fmt != RUN_FORMAT:
            continue
        if key in records and records[key] != pin_of(record):
            differ.append(key)
            echo(f"{key}: its run.json differs from its pin in {base / 'runs' / 'RECORD_PINS.json'}")
        records.setdefault(key, pin_of(record))
    for note in sorted((base / "runs").rglob("superseded.json")):
        rel = note.relative_to(base).as_posix()
        if not rel.startswith("runs/archive/"):
            notes.setdefault(rel, pin_of(note))
    out = {"format": RECORD_PINS_FORMAT, "records": records, "notes": notes,
           "gpu_modes": pin_of(base / "runs" / "GPU_MODES.json")}
    if old.get("places"):  # stated by hand, never added here: a moved folder is not sanctioned by re-pinning
        out["places"] = old["places"]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--base", type=Path, default=REPO, help="the repository (default: this one)")
    p.add_argument("--check", action="store_true", help="only report runs that differ from their pins")
    a = p.parse_args(argv)
    return pin(a.base.resolve(), a.check)


if __name__ == "__main__":
    sys.exit(main())
