"""The committed GPU repeats (runs/medium-replicates-2026-12-04-b: a fresh H200's `kit verify-evidence
--replay` of committed medium runs, and a replicate run made again) are re-compared here from the records,
so the campaign README's "equal" is derived, not asserted: tools/compare_repeats.py, the comparison replay
makes (roots, every sidecar field, the notebook's output text)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDER = REPO / "runs" / "medium-replicates-2026-12-04-b"
sys.path.insert(0, str(REPO / "tools"))

from compare_repeats import compare_repeats


def test_the_committed_repeats_equal_the_runs_they_repeat_as_repeats_json_says(monkeypatch):
    monkeypatch.chdir(REPO)  # the rows name paths relative to the repository, as --write wrote them
    rows = compare_repeats(FOLDER.relative_to(REPO), Path("runs"))
    assert rows == json.loads((FOLDER / "repeats.json").read_text())["repeats"]
    assert {r["kind"] for r in rows} == {"replay", "repeat"} and all(r["equal"] for r in rows)
    adaptive = next(r for r in rows if r["committed"] == "runs/medium-adaptive-A2-to-step64")
    assert adaptive["produced_roots"] and adaptive["fields_compared"] > 100


def test_a_changed_sidecar_of_a_repeat_is_reported_by_field(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    copy = tmp_path / "campaign"
    shutil.copytree(FOLDER / "repeat", copy / "repeat")
    curves = copy / "repeat" / "medium-adaptive-B-control-r1" / "metrics" / "loss_curves.json"
    text = curves.read_text()
    digit = next(i for i, ch in enumerate(text) if ch.isdigit() and ch != "0")
    curves.write_text(text[:digit] + ("1" if text[digit] != "1" else "2") + text[digit + 1:])
    [row] = compare_repeats(copy, Path("runs"))
    assert not row["equal"] and any("loss_curves" in m for m in row["mismatches"])
