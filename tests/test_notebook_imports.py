"""The notebooks of notebooks/ use the kit's public API only: `import kit` and names of `kit.__all__`.

Internal modules stay free to move (an executed notebook committed under runs/ that imports one re-runs at the
commit its record names: `kit verify-evidence --replay --at-recorded-commit`); a notebook that reaches into them
fails here, naming the notebook, the cell and the name."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from support.notebooks import code_cells

import kit

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
PUBLIC = frozenset(kit.__all__)


def _kit_module(name: str) -> bool:
    return name == "kit" or name.startswith("kit.")


def private_imports(source: str) -> list[str]:
    """What one cell's code takes from the kit beyond its public API: `import kit.x`, `from kit.x import y`,
    `from kit import y` (y not in kit.__all__), `importlib.import_module("kit.x")` / `__import__("kit.x")`
    and `kit.y` attribute reads (y not in kit.__all__); in the order they appear in the source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        where = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
        if isinstance(node, ast.Import):
            found += [(where, f"import {a.name}") for a in node.names if _kit_module(a.name) and a.name != "kit"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and _kit_module(node.module):
            if node.module != "kit":
                found += [(where, f"from {node.module} import {a.name}") for a in node.names]
            else:
                found += [(where, f"from kit import {a.name}") for a in node.names if a.name not in PUBLIC]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and _kit_module(node.args[0].value) \
                and node.args[0].value != "kit" and (
                    (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                    or (isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__"))):
            found.append((where, f"import_module({node.args[0].value!r})"))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "kit" \
                and node.attr not in PUBLIC:
            found.append((where, f"kit.{node.attr}"))
    return [name for _, name in sorted(found)]


def notebook_problems(path: Path) -> list[str]:
    """'NOTEBOOK: cell I (id ID): NAME is not kit's public API' for every private use in its code cells."""
    problems = []
    for i, cell in code_cells(path):
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        where = f"{path.name}: cell {i} (id {cell.get('id')})"
        try:
            names = private_imports(source)
        except SyntaxError as e:
            problems.append(f"{where}: does not parse ({e.msg}, line {e.lineno})")
            continue
        problems += [f"{where}: {name} is not kit's public API (import kit or a name of kit.__all__)"
                     for name in names]
    return problems


def test_checker_names_the_notebook_the_cell_and_the_name(tmp_path):
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": ["from kit.digest import x\n"]},
        {"cell_type": "code", "id": "ok", "metadata": {}, "outputs": [], "execution_count": None,
         "source": ["import json\n", "import kit\n", "from kit import record_metric, CohortRequest\n",
                    "kit.record_roots(used=[])\n"]},
        {"cell_type": "code", "id": "bad", "metadata": {}, "outputs": [], "execution_count": None,
         "source": ["import importlib\n", "import kit.digest\n", "from kit.evidence.records import record_inputs\n",
                    "from kit import numerics, scale_name, _API\n",
                    "def f():\n", "    from kit.adaptive.train import train\n",
                    "    return importlib.import_module('kit.study.arms'), __import__('kit.refs')\n",
                    "kit.evidence.records.record_inputs()\n"]},
        {"cell_type": "code", "id": "broken", "metadata": {}, "outputs": [], "execution_count": None,
         "source": "from kit import (\n"},
    ]
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    tail = "is not kit's public API (import kit or a name of kit.__all__)"
    assert notebook_problems(path) == [
        f"nb.ipynb: cell 2 (id bad): {name} {tail}" for name in (
            "import kit.digest", "from kit.evidence.records import record_inputs", "from kit import _API",
            "from kit.adaptive.train import train", "import_module('kit.study.arms')", "import_module('kit.refs')",
            "kit.evidence")
    ] + ["nb.ipynb: cell 3 (id broken): does not parse ('(' was never closed, line 1)"]


def test_every_notebook_uses_only_the_public_api():
    paths = sorted(NOTEBOOKS.glob("*.ipynb"))
    assert len(paths) >= 13
    problems = [p for path in paths for p in notebook_problems(path)]
    assert not problems, "\n".join(problems)


def test_every_public_name_a_notebook_imports_resolves():
    imported = set()
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code":
                for node in ast.walk(ast.parse("".join(cell["source"]))):
                    if isinstance(node, ast.ImportFrom) and node.module == "kit":
                        imported |= {a.name for a in node.names}
    assert "record_metric" in imported and "curves_figure" in imported
    import kit.api

    assert sorted(name for name in imported if getattr(kit, name) is not getattr(kit.api, name)) == []
