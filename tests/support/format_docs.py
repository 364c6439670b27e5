"""A format's docs page held against its declared class (kit.record.Record): the page's field table must name
exactly the class's JSON fields, nested ones dotted, as tests/test_docs_reference.py holds the CLI reference
against the parser.

A field table is the first markdown table after the heading given whose first column is headed `field`; a row's
first cell is the field in backquotes, dotted below an object (`training.max_grad_norm`), `[]` for the items of a
list (`steps[].id`), `*` for the values of a map (`roles.*.sha256`). Its other columns are free prose.
"""

from __future__ import annotations

import re
from pathlib import Path

from kit.record import Either, MapOf, Omittable, Opt, Seq, is_record_class

DOCS = Path(__file__).resolve().parents[2] / "docs"


def class_fields(cls, prefix: str = "") -> set[str]:
    """The dotted JSON fields of a declared class, nested records included."""
    out: set[str] = set()
    for key, f in cls.json_fields().items():
        name = prefix + key
        out.add(name)
        out |= _nested(f.metadata["spec"], name)
    return out


def _nested(spec, name: str) -> set[str]:
    if isinstance(spec, (Opt, Omittable)):
        return _nested(spec.spec, name)
    if isinstance(spec, Either):
        return _nested(spec.first, name) | _nested(spec.second, name)
    if isinstance(spec, Seq):
        return _nested(spec.item, name + "[]")
    if isinstance(spec, MapOf):
        return _nested(spec.spec, name + ".*")
    if is_record_class(spec):
        return class_fields(spec, name + ".")
    return set()


def docs_fields(page: str, heading: str) -> set[str]:
    """The fields of the first `field` table after `heading` (a line starting with #s and this text) in
    docs/<page>."""
    lines = (DOCS / page).read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if re.fullmatch(r"#+\s+" + re.escape(heading), line.strip())]
    assert starts, f"docs/{page}: no heading {heading!r}"
    i = starts[0] + 1
    while i < len(lines) and not re.match(r"\|\s*field\s*\|", lines[i]):
        assert not lines[i].startswith("#"), f"docs/{page}: no field table under {heading!r}"
        i += 1
    assert i < len(lines), f"docs/{page}: no field table under {heading!r}"
    out: set[str] = set()
    for line in lines[i + 2:]:
        if not line.startswith("|"):
            break
        cell = line.split("|")[1].strip()
        m = re.fullmatch(r"`([^`]+)`", cell)
        assert m, f"docs/{page} under {heading!r}: row {line!r} does not start with a field in backquotes"
        out.add(m.group(1))
    return out


def assert_docs_match(page: str, heading: str, cls) -> None:
    documented, declared = docs_fields(page, heading), class_fields(cls)
    assert documented == declared, (
        f"docs/{page}, {heading!r} against {cls.__qualname__}: documented only {sorted(documented - declared)}, "
        f"declared only {sorted(declared - documented)}")
