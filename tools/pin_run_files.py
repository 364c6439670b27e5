"""Pin, once, every file of the runs recorded before run manifests existed, and the exposure ledger's head,
in `runs/MANIFESTS.json` (docs/formats/run-records.md, "Run manifests"), without rewriting any record:

    python tools/pin_run_files.py [--base REPO]

Every run folder `kit verify-evidence runs` checks (kit.evidence.verify.expand_run_dirs: superseded and
campaign folders, archived runs unpacked under their old names) whose record is not `kit-run/3` (which
carries its own manifest) is pinned: its files but run.json and kernel.log (sha256, size) and its run.json.
A run already pinned keeps its entry: a pin is never re-taken, so an edit made after pinning stays visible;
`--check` only reports the runs that differ from or lack their pins. The ledger head (size and sha256 of
ledger/exposed.jsonl) is re-pinned only when the ledger still starts with the bytes pinned before.
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
    from kit.evidence.manifest import PINS_FORMAT, PINS_RELATIVE, file_manifest, pin_entry, read_pins, run_key
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
    if check:
        return 1 if differ else 0
    import hashlib

    pins["ledger"] = {"path": LEDGER_RELATIVE.as_posix(), "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    write_canonical_json(base / PINS_RELATIVE, pins)
    echo(f"{base / PINS_RELATIVE}: {added} run(s) pinned now, {len(pins['runs'])} in all; ledger head "
         f"{pins['ledger']['sha256'][:12]} at {len(data)} bytes")
    return 1 if differ else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--base", type=Path, default=REPO, help="the repository (default: this one)")
    p.add_argument("--check", action="store_true", help="only report runs that differ from their pins")
    a = p.parse_args(argv)
    return pin(a.base.resolve(), a.check)


if __name__ == "__main__":
    sys.exit(main())
