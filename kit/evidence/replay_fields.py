"""What `--replay` compares beyond digests and roots: every metric sidecar the re-run recomputed, field by
field, and the text of the executed notebook's outputs, leaving out what measures the machine or the clock.

Exactness is the numeric profile's promise (equal bytes on any x86 CPU), so floats are compared exactly
too; a GPU run replayed in its recorded mode repeats bit for bit as well (docs/engine.md). The list of what
is left out, and why, is in the notes of kit/evidence/replay.py: keep the two in step.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

# a field whose name says it measures time or what is derived from time (throughput, GPU hours, cost), an
# instant (`*_at`, `now`, the deadline) or a time-stamped attempt id; nested fields under it too
TIMING_FIELD = re.compile(r"seconds|(^|_)s$|_per_s($|_)|per_second|hours|usd|(^|_)at$|^now$|deadline|utilization"
                          r"|throughput|^attempts?$|^clock_|mfu")
# digests of prepared.json, which holds absolute locations and a creation time (replay.NON_IDENTITY_INPUTS),
# and of what holds that digest (a selection record: `selection_file`'s sha256); the job's identity is
# its job_digest, compared where a sidecar records it
NON_IDENTITY_FIELDS = frozenset({"prepared_sha256", "prepared_digest"})
# and what a sidecar derives from throughput alone: the speed screen's ratio of two measured rates and the
# verdict on it (its inputs, `*_per_s`, are timing fields already)
NON_IDENTITY_SIDECAR_FIELDS = {"selection_file": frozenset({"sha256"}), "screen_speed": frozenset({"ratio", "verdict"})}
# output text that carries the clock: time stamps, attempt ids, ISO instants, durations and rates, and a printed
# mapping's item whose key is a timing field ('seconds': 177.17)
# an absolute path into the run's own folder (`.../runs/<run id>/.kernel-inputs.json`): where it ran, not what
RUN_FOLDER_TEXT = re.compile(r"(?<![\w.-])/[^\s'\"]*/runs/")
TIMING_TEXT = re.compile(r"\d{8}T\d{6}\S*|\d{4}-\d\d-\d\dT[\d:.]+Z?|\d+(\.\d+)?\s*(s|ms|min|sec|seconds|tokens/s|it/s)\b"
                         r"|(['\"])\w*(seconds|_s|_per_s|hours|usd|_at|throughput|utilization|mfu)\3\s*:\s*[^,}\]\n]+")
# the speed screen's verdict printed as text (notebooks/21's "speed screen: pass"): derived from two measured
# rates alone, like its sidecar's `verdict` above, so a replay on a busier or faster machine may print the other one
SPEED_VERDICT_TEXT = re.compile(r"(speed screen: )[^\n]*")


def _walk(old, new, path: str, out: list[str], fields: list[str], skip=NON_IDENTITY_FIELDS) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        if set(old) == {"columns", "rows"} and isinstance(old["columns"], list) and old.get("columns") == new.get("columns"):
            skip = {i for i, c in enumerate(old["columns"]) if isinstance(c, str) and TIMING_FIELD.search(c)}
            rows_old, rows_new = old["rows"], new.get("rows")
            if not isinstance(rows_new, list) or len(rows_old) != len(rows_new):
                out.append(f"{path}.rows: {len(rows_old)} rows committed, {rows_new if not isinstance(rows_new, list) else len(rows_new)} replayed")
                return
            for r, (a, b) in enumerate(zip(rows_old, rows_new)):
                for i, (x, y) in enumerate(zip(a, b)):
                    if i not in skip:
                        _walk(x, y, f"{path}.rows[{r}][{old['columns'][i]}]", out, fields, skip)
            return
        for key in sorted(set(old) | set(new)):
            if TIMING_FIELD.search(str(key)) or key in skip:
                continue
            if key not in old or key not in new:
                out.append(f"{path}.{key}: {'absent' if key not in old else repr(old[key])[:80]} committed, "
                           f"{'absent' if key not in new else repr(new[key])[:80]} replayed")
            else:
                _walk(old[key], new[key], f"{path}.{key}", out, fields, skip)
        return
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            out.append(f"{path}: {len(old)} items committed, {len(new)} replayed")
            return
        for i, (x, y) in enumerate(zip(old, new)):
            _walk(x, y, f"{path}[{i}]", out, fields, skip)
        return
    fields.append(path)
    # exact, type included: 1 and 1.0, True and 1 differ (canonical JSON writes them differently)
    if type(old) is not type(new) or old != new:
        out.append(f"{path}: committed {old!r}, replayed {new!r}")


def compare_sidecar(committed_dir: Path, replayed_dir: Path, name: str) -> tuple[list[str], list[str]]:
    """(fields compared, mismatches) of metric sidecar `name` in the two run folders; a sidecar whose name is
    a timing (throughput) is left out whole."""
    if TIMING_FIELD.search(name):
        return [], []
    old_path, new_path = committed_dir / "metrics" / f"{name}.json", replayed_dir / "metrics" / f"{name}.json"
    if not new_path.is_file():
        return [], [f"{old_path}: the replay recorded no sidecar {name!r}"]
    out: list[str] = []
    fields: list[str] = []
    _walk(json.loads(old_path.read_bytes()), json.loads(new_path.read_bytes()), "", out, fields,
          NON_IDENTITY_FIELDS | NON_IDENTITY_SIDECAR_FIELDS.get(name, frozenset()))
    return [f"metrics/{name}.json{f}" for f in fields], [f"{old_path}: field {m}" for m in out]


def output_texts(notebook: Path) -> list[str]:
    """Per code cell, the text of its outputs (stdout streams, text/plain results and displays, errors), with
    the clock's marks masked (TIMING_TEXT), the run folder's absolute path and the speed screen's printed verdict
    too; figures and displayed tables (outputs with text/html) are left
    out."""
    nb = json.loads(notebook.read_bytes())
    texts = []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        parts = []
        for o in cell.get("outputs", []):
            text = o.get("text") if o.get("output_type") == "stream" else \
                (o.get("data") or {}).get("text/plain") if o.get("output_type") in ("execute_result", "display_data") \
                else o.get("ename", "") + ": " + o.get("evalue", "")
            if o.get("output_type") == "stream" and o.get("name") == "stderr":
                continue  # warnings and progress bars
            if "text/html" in (o.get("data") or {}):
                continue  # a displayed table (its timing columns unmasked in text); its rows are sidecar data
            parts.append("".join(text) if isinstance(text, list) else text or "")
        text = TIMING_TEXT.sub("<clock>", "".join(parts))
        texts.append(SPEED_VERDICT_TEXT.sub(r"\1<throughput>", RUN_FOLDER_TEXT.sub("<runs>/", text)))
    return texts


def compare_outputs(committed: Path, replayed: Path) -> tuple[list[str], list[str]]:
    if not committed.is_file() or not replayed.is_file():
        return [], [f"{committed}: executed notebook missing on one side"]
    old, new = output_texts(committed), output_texts(replayed)
    if len(old) != len(new):
        return ["notebook outputs"], [f"{committed}: {len(old)} code cells committed, {len(new)} replayed"]
    found = [f"{committed}: cell {i} output text differs: committed {a[:120]!r}, replayed {b[:120]!r}"
             for i, (a, b) in enumerate(zip(old, new)) if a != b]
    return [f"notebook output cell {i}" for i in range(len(old))], found
