"""The type checker catches a misspelt field of every declared record format (issue 62, item 3).

`make lint` runs mypy over kit/ (pyproject.toml, [tool.mypy]); a format declared as a `kit.record.Record`
subclass is then followed attribute by attribute. This test finds every such class defined in kit/ (importing
each kit module, so a format added later is covered without a list to keep), writes one snippet with two
functions per class, one reading its first field and one reading that field misspelt, and runs mypy once over
it with the repository's configuration (and a control format declared in the snippet): exactly one attr-defined
error per class, on its misspelt line, naming the class and the misspelt field; the correct reads pass. The cache is the one `make lint` fills (build/), so
after `make lint` only the snippet is checked.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re

from support.models import REPO

import kit
from kit.record import Record

MISSPELT = "_misspelt"


def _kit_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(kit.__path__, "kit.") if not m.name.endswith("__main__"))


def declared_formats() -> list[type[Record]]:
    """Every Record subclass defined in kit/ (its module imported first), by module and name."""
    for name in _kit_modules():
        importlib.import_module(name)
    seen: dict[str, type[Record]] = {}
    todo = list(Record.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        # a base that declares no field (the report's Sidecar: what its formats share) is no format of its own
        declares = any(f.name != "_present" for f in dataclasses.fields(cls))
        if cls.__module__.startswith("kit.") and "<locals>" not in cls.__qualname__ and declares:
            seen[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return [seen[k] for k in sorted(seen)]


def first_field(cls: type[Record]) -> str:
    names = [f.name for f in dataclasses.fields(cls) if f.name != "_present"]
    assert names, f"{cls.__qualname__}: a declared format without fields"
    return names[0]


# A format declared in the snippet itself: the check is shown to work before any kit/ format exists, and a
# change to kit.record that hid the fields from the type checker (a __getattr__, an untyped base) fails here.
CONTROL = """
from dataclasses import dataclass

from kit.record import Num, Record, spec_field


@dataclass(frozen=True, slots=True, kw_only=True)
class Control(Record):
    updates: int = spec_field(Num(1, integer=True))


def control_read(x: Control) -> int:
    return x.updates


def control_misspelt(x: Control) -> object:
    return x.updates_misspelt
"""


def snippet(classes: list[type[Record]]) -> tuple[str, dict[int, tuple[str, str]]]:
    """The module to check, and line -> (class, misspelt field) of each line that must fail."""
    lines = ["from __future__ import annotations", ""]
    lines += [f"from {c.__module__} import {c.__qualname__.split('.')[0]} as F{i}" for i, c in enumerate(classes)]
    lines += CONTROL.splitlines()
    expected: dict[int, tuple[str, str]] = {len(lines): ("Control", "updates_misspelt")}
    for i, cls in enumerate(classes):
        attr = f"F{i}." + ".".join(cls.__qualname__.split(".")[1:]) if "." in cls.__qualname__ else f"F{i}"
        field = first_field(cls)
        lines += ["", "", f"def read_{i}(x: {attr}) -> object:", f"    return x.{field}",
                  "", "", f"def misspelt_{i}(x: {attr}) -> object:", f"    return x.{field}{MISSPELT}"]
        expected[len(lines)] = (cls.__name__, field + MISSPELT)
    return "\n".join(lines) + "\n", expected


def run_mypy(path) -> tuple[str, int]:
    from mypy import api

    out, err, status = api.run(["--config-file", str(REPO / "pyproject.toml"),
                                "--cache-dir", str(REPO / "build" / "mypy-cache"),
                                "--no-error-summary", "--show-error-codes", "--no-warn-unused-configs", str(path)])
    assert not err, err
    return out, status


def test_every_declared_format_is_found():
    classes = declared_formats()
    # the base itself is no format; every class found is a dataclass with fields of its own
    assert Record not in classes
    for cls in classes:
        assert dataclasses.is_dataclass(cls) and first_field(cls)


def test_mypy_fails_on_a_misspelt_field_of_each_format(tmp_path, monkeypatch):
    classes = declared_formats()
    text, expected = snippet(classes)  # with no format in kit/ yet, the control alone
    path = tmp_path / "misspelt_fields.py"
    path.write_text(text)
    monkeypatch.setenv("MYPYPATH", str(REPO))  # this checkout's kit, not an installed one
    monkeypatch.chdir(REPO)
    out, status = run_mypy(path)
    errors = {}
    for line in out.splitlines():
        # by file name: mypy replays a cached module's errors under the path it first checked it at
        m = re.match(rf"(?:.*/)?{re.escape(path.name)}:(\d+): error: (.*)$", line)
        if m:
            errors.setdefault(int(m.group(1)), []).append(m.group(2))
    assert status == 1, out
    assert set(errors) == set(expected), f"errors on lines {sorted(errors)}, expected {sorted(expected)}:\n{out}"
    for line, (name, attr) in expected.items():
        # mypy adds `; maybe "a" or "b"?` where the misspelling is close to declared names (long field names)
        hint = r'; maybe "\w+"(?:(?:, | or )"\w+")*\?'
        pattern = rf'"{re.escape(name)}" has no attribute "{re.escape(attr)}"(?:{hint})?  \[attr-defined\]'
        assert len(errors[line]) == 1 and re.fullmatch(pattern, errors[line][0]), (line, errors[line])
