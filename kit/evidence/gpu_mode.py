"""The GPU numeric mode a run ran in: what its GPU numbers depend on beyond the CPU profile (docs/engine.md,
"Determinism"). A record made since the mode was recorded keeps it in `numeric_profile.gpu`
(kit.evidence.environment.gpu_numeric_mode). The GPU runs recorded before that are not rewritten: their
mode is stated once in the committed index `runs/GPU_MODES.json`, with the evidence for it (the campaign
script's environment at the run's commit, and a replay on a fresh host that re-derived the run's roots in
that mode). `kit verify-evidence` fails a current GPU run whose mode is in neither place, and a GPU replay
runs under the mode found here. docs/formats/gpu-modes.md ("GPU numeric modes") is the reference.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kit.digest import load_json_strict
from kit.evidence.manifest import run_key
from kit.record import MapOf, Omittable, OneOf, Opt, Record, build, spec_field

if TYPE_CHECKING:  # annotations only
    from kit.evidence.run_record import RunRecord
    from kit.evidence.superseded import SupersededNote

MODES_RELATIVE = Path("runs") / "GPU_MODES.json"
MODES_FORMAT = "kit-gpu-modes/1"
_ENTRY_FIELDS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "deterministic": (bool, "true or false"), "cublas_workspace_config": ((str, type(None)), "a string or null"),
    "evidence": (str, "a string")}


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuMode(Record):
    """What a GPU replay needs of a run's numeric mode: the fields `numeric_profile.gpu` (which holds more: the
    attention backend, compile settings, driver and GPU) and a GPU_MODES.json entry share."""

    deterministic: bool = spec_field(bool, doc="KIT_GPU_DETERMINISTIC was 1")
    cublas_workspace_config: str | None = spec_field(Opt(str), doc="CUBLAS_WORKSPACE_CONFIG as the run had it")


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuModeEntry(GpuMode):
    """runs/GPU_MODES.json `runs[KEY]`: the mode of a GPU run recorded before `numeric_profile.gpu`."""

    evidence: str = spec_field(str, doc="why this is the mode it ran in")


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuModes(Record):
    """runs/GPU_MODES.json."""

    format: str = spec_field(OneOf(MODES_FORMAT), doc=MODES_FORMAT)
    why: str | None = spec_field(Omittable(str), doc="what the file is for")
    runs: Mapping[str, GpuModeEntry] = spec_field(MapOf(GpuModeEntry), doc="run key -> its mode")


def read_modes(base: str | os.PathLike) -> Mapping[str, GpuModeEntry]:
    """{run key: entry} of `base`/runs/GPU_MODES.json, checked; {} when absent."""
    path = Path(base) / MODES_RELATIVE
    if not path.exists() and not path.is_symlink():
        return {}
    data = load_json_strict(path, follow_links=False)
    if not isinstance(data, dict) or data.get("format") != MODES_FORMAT or not isinstance(data.get("runs"), dict):
        raise ValueError(f"{path}: field 'format' must be {MODES_FORMAT!r}, with an object 'runs'")
    for key, entry in data["runs"].items():
        for field, (kind, words) in _ENTRY_FIELDS.items():
            if not isinstance(entry, dict) or not isinstance(entry.get(field), kind):
                # ValueError, as every malformed-evidence refusal: verify-evidence reports it as a failed check
                raise ValueError(f"{path}: runs[{key!r}] field {field!r} must be {words}")  # noqa: TRY004
    return build(data, GpuModes).runs  # checked above: the format, and each entry's fields


def run_mode(run_dir: str | os.PathLike, record: RunRecord, base: str | os.PathLike) -> tuple[GpuMode | None, str]:
    """(mode, where it is stated) of a GPU run: its record's numeric_profile.gpu, else its entry in
    runs/GPU_MODES.json, else (None, why)."""
    stated = record.numeric_profile.gpu
    if stated:
        return build(stated, GpuMode), f"{Path(run_dir) / 'run.json'} field 'numeric_profile.gpu'"
    key = run_key(run_dir, base)
    entry = read_modes(base).get(key)
    if entry is not None:
        return entry, f"{Path(base) / MODES_RELATIVE} runs[{key!r}]"
    return None, (f"{run_dir}: states no GPU numeric mode: no field 'numeric_profile.gpu' in its record and no "
                  f"entry {key!r} in {Path(base) / MODES_RELATIVE}")


def gpu_mode_check(run_dir: str | os.PathLike, record: RunRecord, base: str | os.PathLike, superseded: SupersededNote | None) -> dict | None:
    """The `gpu_mode` check of a GPU run (None for a CPU run): pass where its mode is stated; fail for a current
    run (runs/<id>) that states none; a superseded run or an attempt kept in a campaign folder that states none
    is skipped (kept as the record of what ran, not a current result)."""
    if not record.device.get("gpu_count"):
        return None
    try:
        mode, where = run_mode(run_dir, record, base)
    except ValueError as e:
        return {"check": "gpu_mode", "result": "fail", "detail": str(e)}
    if mode is not None:
        flag = "on" if mode.deterministic else "off"
        return {"check": "gpu_mode", "result": "pass", "detail": f"deterministic flag {flag}, stated in {where}"}
    if superseded is not None:
        return {"check": "gpu_mode", "result": "skipped", "detail": f"superseded; {where}"}
    if run_key(run_dir, base).count("/") > 1:  # runs/<campaign or superseded folder>/.../<id>
        return {"check": "gpu_mode", "result": "skipped",
                "detail": f"an attempt kept in a campaign folder, not a current run; {where}"}
    return {"check": "gpu_mode", "result": "fail", "detail": where}
