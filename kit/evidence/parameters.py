"""A notebook's `parameters` cell and the check of the values given for it, before anything runs.

papermill injects any name it is given and only warns about unknown ones, so a misspelt parameter
would silently run the default. The decision to know: the cell is parsed with `ast` (only
`NAME = literal` statements), and a value is refused when its name is not declared or its type does
not match the default's; command-line values are parsed against the default.
Type rules and parsing: the notes below.

Notes: the type rules.

A None default accepts anything; bool only bool; int only int (not bool); float a float or an int; str, list and
dict only that type; tuple a list or a tuple. Elements are not checked; values must be JSON (they go into run.json).
`-p NAME VALUE` text is taken verbatim for a str default, else read as JSON, then as a Python literal, else kept as
a string (`-p lr 1e-3` is a float, `-p name abc` the string "abc").
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any

from kit.digest import canonical_json, loads_strict

PARAMETERS_TAG = "parameters"


class ParameterError(ValueError):
    """A parameters cell cannot be read, or a given value is unknown or of the wrong type."""


def _notebook_json(notebook: Path) -> dict:
    try:
        obj = loads_strict(notebook.read_bytes(), str(notebook))
    except FileNotFoundError:
        raise FileNotFoundError(f"{notebook}: notebook not found") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("cells"), list):
        raise ParameterError(f"{notebook}: not a Jupyter notebook (no 'cells' list)")
    return obj


def _cell_source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def parameters_cell_source(notebook: str | os.PathLike) -> str | None:
    """Source of the (single) cell tagged `parameters`, or None when the notebook has none."""
    notebook = Path(notebook)
    tagged = [c for c in _notebook_json(notebook)["cells"]
              if PARAMETERS_TAG in (c.get("metadata", {}).get("tags") or [])]
    if len(tagged) > 1:
        raise ParameterError(f"{notebook}: {len(tagged)} cells are tagged 'parameters'; expected one")
    return _cell_source(tagged[0]) if tagged else None


def parse_assignments(source: str, where: str) -> dict[str, Any]:
    """NAME -> literal value of each `NAME = literal` statement of `source` (in order)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise ParameterError(f"{where}: parameters cell is not Python ({e.msg}, line {e.lineno})") from None
    out: dict[str, Any] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            name, value = stmt.targets[0].id, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            name, value = stmt.target.id, stmt.value
        else:
            raise ParameterError(f"{where}: parameters cell line {stmt.lineno}: only `NAME = literal` "
                                 f"statements are allowed, got {ast.unparse(stmt)[:80]!r}")
        try:
            out[name] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise ParameterError(f"{where}: parameter {name!r} (line {stmt.lineno}) has a default that is not a "
                                 f"literal: {ast.unparse(value)[:80]!r}") from None
    return out


def notebook_defaults(notebook: str | os.PathLike) -> dict[str, Any]:
    """The declared parameters and their defaults ({} for a notebook without a parameters cell)."""
    source = parameters_cell_source(notebook)
    return {} if source is None else parse_assignments(source, str(notebook))


def _type_name(default: Any) -> str:
    return {bool: "bool", int: "int", float: "float (or int)", str: "str", list: "list", dict: "dict",
            tuple: "list or tuple"}.get(type(default), type(default).__name__)


def value_matches(default: Any, value: Any) -> bool:
    if default is None:
        return True
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, tuple):
        return isinstance(value, (list, tuple))
    return isinstance(value, type(default))


def check_parameters(notebook: str | os.PathLike, params: dict[str, Any]) -> dict[str, Any]:
    """Refuse unknown names and mistyped values for `notebook`; returns the notebook's defaults."""
    defaults = notebook_defaults(notebook)
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        declared = ", ".join(sorted(defaults)) or "none"
        raise ParameterError(f"{notebook}: unknown parameter(s) {', '.join(unknown)}; the parameters cell "
                             f"declares: {declared}")
    for name, value in params.items():
        if not value_matches(defaults[name], value):
            raise ParameterError(f"{notebook}: parameter {name!r} expects {_type_name(defaults[name])} "
                                 f"(default {defaults[name]!r}), got {type(value).__name__} {value!r}")
        try:
            canonical_json(value)
        except (TypeError, ValueError) as e:
            raise ParameterError(f"{notebook}: parameter {name!r} value {value!r} is not JSON ({e})") from None
    return defaults


def parse_cli_value(text: str, default: Any) -> Any:
    """A `-p NAME VALUE` string as a value, read against the parameter's default (module docstring)."""
    if isinstance(default, str):
        return text
    try:
        return loads_strict(text, "<value>")
    except ValueError:
        pass
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text
    return list(value) if isinstance(value, tuple) else value


def parse_cli_parameters(notebook: str | os.PathLike, pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Parse `-p NAME VALUE` pairs for `notebook` and check them; unknown names are refused."""
    defaults = notebook_defaults(notebook)
    params: dict[str, Any] = {}
    for name, text in pairs:
        if name in params:
            raise ParameterError(f"{notebook}: parameter {name!r} given twice")
        params[name] = parse_cli_value(text, defaults.get(name))
    check_parameters(notebook, params)
    return params
