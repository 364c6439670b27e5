"""Tests share support, not each other: no module under tests/ imports a test module or conftest.

Shared helpers live in the `support` package (tests/support/), fixtures in tests/conftest.py, which
pytest loads itself; importing a test module would run its collection-time code twice under two names.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):  # nested imports too (inside functions and fixtures)
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
    return out


def _forbidden(module: str, test_modules: set[str]) -> bool:
    top = module.split(".")[0]
    return top == "conftest" or top in test_modules


def layout_violations(root: Path) -> list[str]:
    """'file:line imports module' for every import, anywhere under `root`, of a test module or conftest."""
    files = sorted(root.rglob("*.py"))
    test_modules = {p.stem for p in files if p.stem.startswith("test_")}
    bad = []
    for path in files:
        for line, module in _imported_modules(ast.parse(path.read_text(), str(path))):
            if _forbidden(module, test_modules):
                bad.append(f"{path.relative_to(root)}:{line} imports {module}")
    return bad


def test_no_test_module_imports_another_test_module_or_conftest():
    assert layout_violations(TESTS) == []


def test_helpers_live_in_the_support_package():
    loose = sorted(p.name for p in TESTS.rglob("*.py")
                   if p.parent != TESTS / "support" and not p.name.startswith("test_") and p.name != "conftest.py")
    assert loose == []


def test_the_check_sees_imports_of_test_modules_at_any_depth(tmp_path):
    (tmp_path / "test_a.py").write_text("X = 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "test_b.py").write_text("def f():\n    from test_a import X\n")
    (tmp_path / "sub" / "test_c.py").write_text("import conftest\nfrom support.engine import OPT\n")
    assert layout_violations(tmp_path) == ["sub/test_b.py:2 imports test_a", "sub/test_c.py:1 imports conftest"]


def test_every_file_the_xdist_schedule_starts_with_exists():
    from support.schedule import LONGEST_FIRST

    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    assert [name for name in LONGEST_FIRST if not (TESTS / name).is_file()] == []


def test_the_schedule_moves_the_longest_files_first_and_keeps_every_other_order(tmp_path):
    from types import SimpleNamespace

    from support.schedule import LONGEST_FIRST, longest_first

    def item(rel):
        return SimpleNamespace(path=tmp_path / rel, name=rel)

    collected = [item("test_a.py"), item(LONGEST_FIRST[1]), item("test_b.py"), item(LONGEST_FIRST[0]),
                 item(LONGEST_FIRST[1]), item("sub/test_c.py")]
    got = [i.name for i in longest_first(collected, tmp_path)]
    assert got == [LONGEST_FIRST[0], LONGEST_FIRST[1], LONGEST_FIRST[1], "test_a.py", "test_b.py", "sub/test_c.py"]
    assert [id(i) for i in longest_first(collected, tmp_path) if i.name == LONGEST_FIRST[1]] == \
        [id(collected[1]), id(collected[4])]  # stable: a file's own tests keep their order
