"""Committed evidence by its path under runs/, archived folders included: a folder moved into
runs/archive/ (kit/evidence/archive.py) is read unpacked, under its old name."""

from __future__ import annotations

from pathlib import Path

from kit.evidence.archive import resolve
from support.models import REPO


def evidence_path(*parts: str) -> Path:
    """REPO/runs/<parts>, or the same path inside the unpacked archive that holds it."""
    return resolve(REPO.joinpath("runs", *parts))
