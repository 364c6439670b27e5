"""Fixture notebooks written with nbformat (a tagged parameters cell, then the given code cells), and the
code cells of a stored notebook as its JSON holds them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import nbformat

PARAMS_CELL = "count = 2\nratio = 0.5\nname = 'default'\nflag = False\nitems = []\nmapping = {}\nanything = None\n"


def write_notebook(path: Path, *cells: str, parameters: str | None = PARAMS_CELL) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells.append(nbformat.v4.new_markdown_cell("A fixture notebook."))
    if parameters is not None:
        cell = nbformat.v4.new_code_cell(parameters)
        cell.metadata["tags"] = ["parameters"]
        nb.cells.append(cell)
    nb.cells += [nbformat.v4.new_code_cell(src) for src in cells]
    nbformat.write(nb, path)
    return path


def code_cells(path: Path) -> Iterator[tuple[int, dict]]:
    """(index among all cells, cell) of each code cell of the notebook file, read as plain JSON (what is
    stored, not what nbformat would normalise)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") == "code":
            yield i, cell
