"""Environment variables set for a block of code, then put back as they were.

Used where a child (a notebook kernel papermill starts, kit/evidence/runner.py) or a library read lazily
in this process (torch's compile caches, kit/study/measurement.py) takes its settings from os.environ."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

PROGRESS_ENV = "KIT_PROGRESS"  # "0": no progress bar anywhere (`--no-progress` sets it for the command)


def progress_on() -> bool:
    """Whether progress bars are drawn (on stderr): not when KIT_PROGRESS=0. Notebook kernels always run
    with it 0 (kit/evidence/runner.py), so no bar is ever part of an executed notebook."""
    return os.environ.get(PROGRESS_ENV, "1") != "0"


@contextmanager
def temporary_environ(values: dict[str, str | None]) -> Iterator[None]:
    """Set `values` in os.environ for the block (a None value: the variable is unset there); afterwards each
    variable has its earlier value again, or is unset if it was unset (also when the block raised)."""
    saved = {k: os.environ.get(k) for k in values}
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
