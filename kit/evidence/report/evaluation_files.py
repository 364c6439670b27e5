"""The per-item files behind the report's evaluations, read in one place: a final evaluation's item file as
its run kept it (RUN/files/<name of the recorded path>), and the study's per-item model files beside the
screens record of a campaign folder (cost._models_dir, through the run index's evidence folders)."""

from __future__ import annotations

from pathlib import Path

from kit.digest import load_json_strict, sha256_file
from kit.evidence.report.index import IndexedRun, metric
from kit.evidence.report.sidecar_formats import EvaluationFile, sidecar


def evaluation_items(row: IndexedRun) -> dict | None:
    """The evaluation file a final evaluation run recorded (evaluation_file.json: path and sha256), from the
    copy its run folder keeps; None when the run kept none or the copy's sha256 differs from the record."""
    rec = sidecar(row, EvaluationFile) if isinstance(metric(row, EvaluationFile.NAME), dict) else None
    if rec is None or not rec.path:
        return None
    f = row.dir / "files" / Path(rec.path).name
    if not f.is_file() or (rec.sha256 and sha256_file(f) != rec.sha256):
        return None
    return load_json_strict(f)
