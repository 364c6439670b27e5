"""Inherited update logs are referenced, not copied (kit/adaptive/lineage.py): readers see the same rows in
the same order as with the old copies, references resolve across a chain of homes, and a referenced log
whose bytes changed is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kit.adaptive.compare import update_log
from kit.adaptive.lineage import INHERITED_NAME, LineageError, inherit_logs, lineage_logs


def _log(home: Path, attempt: str, rows: list[dict]) -> None:
    d = home / "attempts" / attempt
    d.mkdir(parents=True, exist_ok=True)
    (d / "updates.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _row(step: int, objective: float) -> dict:
    return {"cohort": "A", "cohort_step": step, "objective": objective, "ids": [f"id{step}"]}


def _copy_like_before(source: Path, attempt_dir: Path) -> None:
    """What kit/adaptive/train.py did before: copy every log of the source home into the attempt folder."""
    for log in sorted(source.glob("attempts/*/*updates.jsonl")):
        shutil.copyfile(log, attempt_dir / f"inherited-{log.parent.name}-{log.name}")


def _lineage(tmp_path: Path, by_reference: bool) -> Path:
    """h1 (two attempts, the second re-doing step 2) -> h2 (steps 3-4) -> h3 (step 5): each migration
    inherits the source's logs, by reference or by copy."""
    root = tmp_path / ("ref" if by_reference else "copy")
    h1, h2, h3 = root / "h1", root / "h2", root / "h3"
    _log(h1, "20260101T000000-aaaa", [_row(1, 1.0), _row(2, 0.9)])
    _log(h1, "20260101T000100-bbbb", [_row(2, 0.8)])
    _log(h2, "20260101T000200-cccc", [_row(3, 0.7), _row(4, 0.6)])
    (inherit_logs if by_reference else _copy_like_before)(h1, h2 / "attempts" / "20260101T000200-cccc")
    _log(h3, "20260101T000300-dddd", [_row(5, 0.5)])
    (inherit_logs if by_reference else _copy_like_before)(h2, h3 / "attempts" / "20260101T000300-dddd")
    return h3


def test_references_give_the_rows_and_order_the_copies_gave(tmp_path):
    by_copy, by_ref = _lineage(tmp_path, False), _lineage(tmp_path, True)
    copied = [(a, n, t) for a, n, t in lineage_logs(by_copy)]
    referenced = [(a, n, t) for a, n, t in lineage_logs(by_ref)]
    assert copied == referenced and len(copied) == 4
    assert update_log(str(by_ref), "A") == update_log(str(by_copy), "A")
    assert [r["objective"] for r in update_log(str(by_ref), "A")] == [1.0, 0.8, 0.7, 0.6, 0.5]
    # no log bytes were copied: h3's attempt holds its own log and one reference file
    attempt = by_ref / "attempts" / "20260101T000300-dddd"
    assert sorted(p.name for p in attempt.iterdir()) == [INHERITED_NAME, "updates.jsonl"]
    entries = json.loads((attempt / INHERITED_NAME).read_text())["logs"]
    assert {e["home"] for e in entries} == {"../h1", "../h2"}  # the chain resolved to the homes holding bytes


def test_a_referenced_log_whose_bytes_changed_is_refused(tmp_path):
    h3 = _lineage(tmp_path, True)
    log = h3.parent / "h1" / "attempts" / "20260101T000000-aaaa" / "updates.jsonl"
    log.write_text(log.read_text().replace("0.9", "0.1"))
    with pytest.raises(LineageError, match=r"h1/attempts/20260101T000000-aaaa/updates.jsonl no longer has"):
        update_log(str(h3), "A")


def test_a_missing_source_home_is_named(tmp_path):
    h3 = _lineage(tmp_path, True)
    shutil.rmtree(h3.parent / "h1")
    with pytest.raises(LineageError, match=r"inherited.json: log .* cannot be read"):
        list(lineage_logs(h3))
