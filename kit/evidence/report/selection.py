"""The report's selection: a runs directory and, optionally, a glob over its run ids (`kit report --select
'medium-*'`), written `DIR/GLOB` where it crosses a process boundary (the report notebook's cells, the CLI).

It is parsed once, where the report receives it (`render_report`, each show_* cell, `kit results`), and passed as
this value, so no reader splits the path again. `os.fspath` of a Selection is the `DIR/GLOB` form, so the run
index's readers (kit/evidence/run_index.py), which take that form, read it unchanged.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

GLOB_CHARACTERS = "*?["


@dataclass(frozen=True, slots=True)
class Selection:
    runs_dir: Path  # the runs folder (`runs`, `demo-out/runs`)
    pattern: str | None = None  # a glob over its run ids (fnmatch, case-sensitive); None: every run

    @classmethod
    def of(cls, runs: Selection | str | os.PathLike) -> Selection:
        """`runs` as a Selection: a Selection stays itself; a path whose last part holds a glob character is
        `DIR/GLOB`; any other path is a whole runs folder."""
        if isinstance(runs, Selection):
            return runs
        path = Path(runs)
        if any(ch in path.name for ch in GLOB_CHARACTERS):
            return cls(path.parent, path.name)
        return cls(path)

    @property
    def path(self) -> Path:
        """The `DIR/GLOB` form (the folder alone for a whole folder)."""
        return self.runs_dir / self.pattern if self.pattern else self.runs_dir

    def resolved(self) -> Selection:
        """The same selection with the folder made absolute (the report's kernel runs in the report's folder)."""
        return Selection(self.runs_dir.resolve(), self.pattern)

    def __fspath__(self) -> str:
        return os.fspath(self.path)

    def __str__(self) -> str:
        return str(self.path)


# What the report's readers take: a Selection, or its `DIR/GLOB` form (the notebook's cells and the tests pass paths)
Selected = Selection | str | os.PathLike
