"""The exposure ledger in its compact chained form (`kit-exposure/2`, docs/formats/exposure-ledger.md "Exposure ledger"):

    python tools/compact_ledger.py compact [LEDGER] [--out FILE]   # /1 lines -> chained events (lossless)
    python tools/compact_ledger.py append SOURCE [--to LEDGER]      # join another ledger's events, re-chained
    python tools/compact_ledger.py verify [LEDGER]                  # the chain, event by event

`compact` writes FILE (default: LEDGER itself, replaced atomically) and checks, before replacing anything,
that expanding the result gives back the input's bytes (kit.evidence.ledger_chain.old_form_bytes), so every
preparation's recorded ledger digest still names lines of it. LEDGER defaults to ledger/exposed.jsonl.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
DEFAULT = REPO / "ledger" / "exposed.jsonl"


def compact_file(src: Path, out: Path) -> tuple[int, int]:
    from kit.digest import write_bytes_atomic
    from kit.evidence.ledger_chain import compact, old_form_bytes, parse

    data = src.read_bytes()
    new = compact(data, str(src))
    before = parse(src, data)
    if not before.events and old_form_bytes(parse(out, new)) != data:
        raise ValueError(f"{src}: its compact form does not expand back to the same bytes (non-canonical lines?); "
                         "nothing written")
    write_bytes_atomic(out, new)
    return len(data), len(new)


def main(argv=None) -> int:
    from kit.evidence.ledger_chain import ChainError, append_events, parse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compact", allow_abbrev=False)
    c.add_argument("ledger", nargs="?", type=Path, default=DEFAULT)
    c.add_argument("--out", type=Path)
    ap = sub.add_parser("append", allow_abbrev=False)
    ap.add_argument("source", type=Path)
    ap.add_argument("--to", type=Path, default=DEFAULT)
    v = sub.add_parser("verify", allow_abbrev=False)
    v.add_argument("ledger", nargs="?", type=Path, default=DEFAULT)
    a = p.parse_args(argv)
    try:
        if a.cmd == "compact":
            old, new = compact_file(a.ledger, a.out or a.ledger)
            print(f"{a.out or a.ledger}: {old} -> {new} bytes")
        elif a.cmd == "append":
            print(f"{a.to}: {append_events(a.source, a.to)} event(s) appended from {a.source}")
        else:
            ledger = parse(a.ledger)
            for line in ledger.broken:
                print(line)
            print(f"{a.ledger}: {len(ledger.events)} event(s), {len(ledger.old)} earlier line(s), head {ledger.head}; "
                  + ("chain whole" if not ledger.broken else f"{len(ledger.broken)} break(s)"))
            return 1 if ledger.broken else 0
    except (ChainError, ValueError, OSError) as e:
        print(e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
