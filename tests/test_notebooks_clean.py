"""Notebooks in notebooks/ are stored without outputs or execution counts (papermill fills them in runs/)."""

from __future__ import annotations

from pathlib import Path

import nbformat
from support.notebooks import code_cells

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def notebook_problems(path: Path) -> list[str]:
    """Every code cell with outputs or an execution count, as 'file: cell i has ...' lines."""
    problems = []
    for i, cell in code_cells(path):
        if cell.get("outputs"):
            problems.append(f"{path}: cell {i} has {len(cell['outputs'])} output(s)")
        if cell.get("execution_count") is not None:
            problems.append(f"{path}: cell {i} has execution count {cell['execution_count']}")
    return problems


def test_checker_finds_outputs_and_execution_counts(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("text"), nbformat.v4.new_code_cell("x = 1"),
                nbformat.v4.new_code_cell("print(x)"), nbformat.v4.new_code_cell("y = 2")]
    nbformat.write(nb, tmp_path / "clean.ipynb")
    assert notebook_problems(tmp_path / "clean.ipynb") == []
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", name="stdout", text="1\n")]
    nb.cells[2].execution_count = 2
    nb.cells[3].execution_count = 3
    nbformat.write(nb, tmp_path / "dirty.ipynb")
    assert notebook_problems(tmp_path / "dirty.ipynb") == [
        f"{tmp_path / 'dirty.ipynb'}: cell 2 has 1 output(s)",
        f"{tmp_path / 'dirty.ipynb'}: cell 2 has execution count 2",
        f"{tmp_path / 'dirty.ipynb'}: cell 3 has execution count 3",
    ]


def test_stored_notebooks_have_no_outputs():
    assert NOTEBOOKS.is_dir(), f"{NOTEBOOKS} is missing"
    problems = [p for path in sorted(NOTEBOOKS.rglob("*.ipynb")) if ".ipynb_checkpoints" not in path.parts
                for p in notebook_problems(path)]
    assert problems == [], "clear these notebooks' outputs before committing:\n" + "\n".join(problems)
