"""Compare runs made again on a GPU host with the committed runs they repeat, with the comparison
`kit verify-evidence --replay` makes (kit.evidence.replay.compare: status, identity input digests, produced
roots, every metric sidecar field by field, the text of the notebook's outputs; timings excepted).

    python tools/compare_repeats.py runs/medium-replicates-2026-12-04-b [--write]

Every run folder under FOLDER/replay/ and FOLDER/repeat/ is compared with runs/<its run id>. The result is
printed; with --write it is also written to FOLDER/repeats.json (canonical JSON), which a test recomputes
against the committed folders, so the campaign README's statement of equality is re-derived from the records.
Exit status 0 when every repeat is equal, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kit.digest import write_canonical_json
from kit.evidence import run_record
from kit.evidence.replay import compare

SUBFOLDERS = ("replay", "repeat")  # the GPU replay of committed runs; a replicate run made again


def compare_repeats(folder: Path, runs_dir: Path) -> list[dict]:
    rows = []
    for sub in SUBFOLDERS:
        for again in run_record.list_run_dirs(folder / sub) if (folder / sub).is_dir() else []:
            committed = runs_dir / again.name
            old, new = run_record.read_run_record(committed), run_record.read_run_record(again)
            result = compare(old, new, committed.as_posix(), committed, again)
            roots = [e.root for e in new.checkpoint_roots.produced]
            rows.append({"committed": committed.as_posix(), "again": again.as_posix(), "kind": sub,
                         "equal": result["ok"], "fields_compared": len(result["compared"]),
                         "mismatches": result["mismatches"], "produced_roots": roots,
                         "gpu_mode": (new.numeric_profile.gpu or {}).get("deterministic")})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path, help="a campaign folder under runs/ with replay/ or repeat/ runs")
    p.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where the committed runs are (runs)")
    p.add_argument("--write", action="store_true", help="also write FOLDER/repeats.json")
    a = p.parse_args(argv)
    rows = compare_repeats(a.folder, a.runs_dir)
    if not rows:
        print(f"{a.folder}: no run folders under {' or '.join(SUBFOLDERS)}/", file=sys.stderr)
        return 2
    for r in rows:
        print(f"{r['again']}: {'equal' if r['equal'] else 'DIFFERS'} to {r['committed']} "
              f"({r['fields_compared']} fields compared, {len(r['produced_roots'])} produced roots)")
        for m in r["mismatches"][:5]:
            print(f"  {m}")
    if a.write:
        write_canonical_json(a.folder / "repeats.json", {"format": "kit-repeats/1", "repeats": rows})
    return 0 if all(r["equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
