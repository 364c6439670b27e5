"""Every notebook's parameters cell documents each parameter with a comment, names the public source
PUBLIC_SOURCE everywhere, and has defaults that work from the repository root (where `kit run`,
`kit batch` and `kit demo` execute the kernels: papermill keeps the caller's working directory)."""

from __future__ import annotations

import ast
import io
import json
import tokenize
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def _parameters_source(path: Path) -> str:
    nb = json.loads(path.read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    return "".join(cell["source"])


def _assignments(source: str) -> dict[str, tuple[int, object]]:
    out = {}
    for stmt in ast.parse(source).body:
        assert isinstance(stmt, ast.Assign) and len(stmt.targets) == 1, ast.dump(stmt)
        out[stmt.targets[0].id] = (stmt.lineno, ast.literal_eval(stmt.value))
    return out


def _commented_lines(source: str) -> set[int]:
    return {tok.start[0] for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.COMMENT and tok.string.strip("# ")}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_parameter_has_a_comment(path):
    source = _parameters_source(path)
    params, commented = _assignments(source), _commented_lines(source)
    missing = sorted(name for name, (line, _) in params.items() if line not in commented)
    assert params and not missing, f"{path.name}: parameters without a comment: {missing}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_defaults_work_from_the_repository_root_and_the_source_is_public_source(path):
    params = _assignments(_parameters_source(path))
    for name, (_, value) in params.items():
        if isinstance(value, str) and value.startswith(("data/", "contracts/", "../")):
            assert (REPO / value).exists() and not value.startswith("../"), \
                f"{path.name}: {name} = {value!r} does not exist relative to the repository root"
    if "SOURCE" in params:  # only as the deprecated alias, unused by default
        assert params["SOURCE"][1] == "" and "PUBLIC_SOURCE" in params, path.name
    if "PUBLIC_SOURCE" in params:
        assert params["PUBLIC_SOURCE"][1] == "data/alpaca_5000.json", path.name


def test_the_checks_see_a_missing_comment_and_a_parent_relative_default():
    source = 'A = 1  # documented\nB = "../data/alpaca_5000.json"\n'
    params, commented = _assignments(source), _commented_lines(source)
    assert [n for n, (line, _) in params.items() if line not in commented] == ["B"]
    assert params["B"][1].startswith("../")
