"""No function in kit/ is longer than MAX_LINES: a driver is a sequence of named steps, not one long body."""

from __future__ import annotations

import ast
from pathlib import Path

KIT = Path(__file__).resolve().parents[1] / "kit"
MAX_LINES = 80  # the def line through the function's last line, decorators not counted


def function_lengths(source: str) -> list[tuple[str, int, int]]:
    """(qualified name, first line, length in lines) of every function and method in `source`."""
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                found.append((name, child.lineno, child.end_lineno - child.lineno + 1))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def test_function_lengths_are_measured_from_def_to_last_line():
    source = "class C:\n    @staticmethod\n    def f():\n        x = 1\n\n        return x\n\n\ndef g(): pass\n"
    assert function_lengths(source) == [("C.f", 3, 4), ("g", 9, 1)]


def test_no_function_in_kit_is_longer_than_the_limit():
    long = [f"{path.relative_to(KIT.parent)}:{line} {name} ({n} lines)"
            for path in sorted(KIT.rglob("*.py"))
            for name, line, n in function_lengths(path.read_text()) if n > MAX_LINES]
    assert not long, f"functions over {MAX_LINES} lines; split them into named steps: {long}"
