"""`kit verify-evidence --replay RUN`: re-execute a committed CPU run and compare what it produced.

A hash alone proves only that bytes did not change; replay shows that the recorded computation, run
again from the recorded parameters on this machine, produces the same digests and roots (on any x86
CPU, through the kit's numeric profile). The decision to know: a run's data paths are moved under the
replay's work directory, and the runs that produced them are replayed first; a preparation that read the
exposure ledger reads again the committed ledger's lines it recorded reading (by digest).
How a run is replayed and compared: the notes below.

Notes: the rules behind the replay and the comparison.

- Data roots: the first folders (outside the repository's own) of relative paths in `*_DIR`, `HOME`, `*_HOME`
  parameters; every value below one (plain, `seed:PATH`, `PATH:ROOT`, in lists, dicts) moves under the work directory.
- The earliest run (by `started_at`) naming a data location is its producer, replayed first and once; a folder
  replays in `started_at` order (the study's evaluation reads arm stores no parameter names). A completed replay
  with the same parameters is compared from its record (an interrupted replay resumes).
- Replayed runs write the replay's own ledger (`WORK/ledger/exposed.jsonl` as `$KIT_LEDGER`), never another. A
  preparation that recorded the sha256 of the ledger it read gets the committed ledger's earliest block of
  consecutive whole lines with that digest (the ledger is append-only; a demo appends its lines as one block), or is
  refused: the study draws its retention probes from it.
- Compared exactly (floats too: the numeric profile promises equal bytes): status, identity input digests, roots in
  order, pinned sidecars field by field, per-cell output text. What is left out (`NON_IDENTITY_INPUTS`,
  `TIMING_FIELD`, `TIMING_TEXT`, ledger heads, stderr, figures, HTML tables) measures the machine, the clock or the
  place, not the computation. GPU runs replay in their recorded mode: docs/formats/gpu-modes.md.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from importlib import metadata
from pathlib import Path

from tqdm import tqdm

import kit
from kit.environ import progress_on, temporary_environ
from kit.evidence import run_record
from kit.evidence.archive import origin
from kit.evidence.checks import ReplayResult
from kit.evidence.environment import GPU_DETERMINISTIC_ENV, gpus
from kit.evidence.gpu_mode import GpuMode, run_mode
from kit.evidence.ledger import LEDGER_ENV, LEDGER_INPUT, LEDGER_RELATIVE, lines_with_digest
from kit.evidence.replay_fields import compare_outputs, compare_sidecar
from kit.evidence.run_record import RunRecord
from kit.evidence.runner import run_notebook
from kit.evidence.runtime import repository_root
from kit.record import build

# input digests that are not identities of the computation (the module docstring's notes:
# prepared.json holds absolute locations and a creation time; a selection record holds prepared.json's
# sha256 (`prepared_digest`), so its bytes change with them, while what it decides rests on the
# development evaluations' digests, which the selection's own replay compares; the study's screens.json
# holds each arm's measured seconds and throughput (the speed screen), which no replay repeats, while its
# arms' endpoint roots are compared by the arms' own replays
NON_IDENTITY_INPUTS = frozenset({"prepared.json", "selection.json", "screens.json"})
# a study model's evaluation file (evaluation/models/<label>.json) holds its scoring's `seconds`, so its digest
# differs on every run; the scores in it reach the sidecars, which are compared field by field
NON_IDENTITY_INPUT_PREFIXES = ("evaluation/models/",)
REPOSITORY_FOLDERS = ("contracts", "data", "notebooks", "kit")


class ReplayError(ValueError):
    """A run cannot be replayed here (not a completed CPU run, other profile or torch build)."""


# A model reference as the evaluation notebooks take it: `seed:PATH` (a seed folder) or `PATH:ROOT` (a
# checkpoint home at a commit root); plain `PATH` otherwise. Only PATH is a location. The grammar is
# kit.adaptive.evaluation.model_spec's; matched here, not imported, since a parameter need not be a model
# reference at all (model_spec refuses such a value) and the evidence layer sits below kit.adaptive.
_REFERENCE = re.compile(r"^(?P<kind>seed:)?(?P<path>[^:]+)(?P<root>:[0-9a-f]{64})?$")


def _is_folder_parameter(name: str, value) -> bool:
    """A parameter that names a data folder by its name (`*_DIR`, `HOME`, `*_HOME`)."""
    if not isinstance(value, str) or not value or os.path.isabs(value):
        return False
    if not (name.endswith(("_DIR", "_HOME")) or name == "HOME"):
        return False
    return Path(value).parts[0] not in REPOSITORY_FOLDERS


def _data_location(name: str, value, data_roots: frozenset) -> str | None:
    """The relative data location a parameter value names, or None. A location is one under a data root
    (the first folder of some run's `*_DIR`/`*_HOME` parameter, e.g. `demo-out`), written plainly or as a
    model reference; so `OUT`, `SELECTION`, `CANDIDATE`, `BASELINE` and `START*` are moved with the folders
    (before 2026-12-03 only the folder-named ones were, and the evaluations then read or missed the paths
    relative to the working directory)."""
    if _is_folder_parameter(name, value):
        return value
    if not isinstance(value, str):
        return None
    m = _REFERENCE.match(value)
    if m is None or os.path.isabs(m["path"]):
        return None
    parts = Path(m["path"]).parts
    # a path below a root, not a root's bare name (the seed notebook's MODE = 'build' is a word)
    return m["path"] if len(parts) > 1 and parts[0] in data_roots else None


def _replayable(record: RunRecord, run_dir: Path) -> None:
    if record.status != "completed":
        raise ReplayError(f"{run_dir}: status {record.status!r}; only completed runs are replayed")
    if record.device.get("gpu_count"):
        _gpu_replayable(record, run_dir)
    profile = record.numeric_profile.name
    if profile != kit.NUMERIC_PROFILE:
        raise ReplayError(f"{run_dir}: field numeric_profile.name = {profile!r}; this kit computes under "
                          f"{kit.NUMERIC_PROFILE!r}, so its digests are not comparable")
    torch_version = record.versions.get("torch")

    here = metadata.version("torch")
    if torch_version != here:
        raise ReplayError(f"{run_dir}: field versions.torch = {torch_version!r}, installed {here!r}; the numeric "
                          "profile promises equal digests for one torch build (make test pins it)")


def _gpu_replayable(record: RunRecord, run_dir: Path) -> None:
    """A GPU run replays only on a host with as many GPUs of the recorded model (GPU roots repeat on the same
    layout and hardware, in the same mode: docs/engine.md 'Determinism')."""
    here = gpus()
    want = [g.get("name") for g in record.device.get("gpus") or []]
    if len(here) < record.device["gpu_count"] or (want and here[0].get("name") != want[0]):
        raise ReplayError(f"{run_dir}: ran on a GPU host ({record.device['gpu_count']} x {want[:1]}), this host has "
                          f"{len(here)} GPU(s); GPU roots repeat only on the same layout and hardware, in the "
                          "recorded mode (docs/engine.md 'Determinism')")


def gpu_mode_environment(record: RunRecord, log=print, run_dir: Path | None = None, base: Path | None = None) -> dict:
    """The environment a GPU run is replayed under: its recorded deterministic flag (numeric_profile.gpu, or
    for a run recorded before that field its entry in runs/GPU_MODES.json, kit/evidence/gpu_mode.py, when
    `run_dir` and `base` are given); a run whose mode is stated nowhere is replayed in this environment's mode,
    and the log says so."""
    if not record.device.get("gpu_count"):
        return {}
    stated = record.numeric_profile.gpu
    mode = build(stated, GpuMode) if stated is not None else None
    if mode is None and run_dir is not None and base is not None:
        mode, where = run_mode(run_dir, record, base)
        if mode is not None:
            log(f"{record.run_id}: replaying in the mode {where} states (deterministic flag "
                f"{'on' if mode.deterministic else 'off'})")
    if mode is None:
        log(f"{record.run_id}: its record states no GPU numeric mode; replaying with {GPU_DETERMINISTIC_ENV}="
            f"{os.environ.get(GPU_DETERMINISTIC_ENV, '')!r} as this environment has it")
        return {}
    env = {GPU_DETERMINISTIC_ENV: "1" if mode.deterministic else "0"}  # "0": off (only "1" turns it on)
    if "cublas_workspace_config" in mode:  # as recorded; None: unset, as the run had it
        env |= {"CUBLAS_WORKSPACE_CONFIG": mode.cublas_workspace_config}
    return env


class Replayer:
    """Replays runs of one runs directory into `work` (work/runs: the new records, work/data: their data)."""

    def __init__(self, runs_dir: Path, work: Path, log=print):
        # absolute: the notebooks run in WORK/root, not in the caller's directory
        self.runs_dir, self.work, self.log = Path(runs_dir).resolve(), Path(work).resolve(), log
        self.records: dict[str, tuple[Path, RunRecord]] = {}
        for d in run_record.list_run_dirs(self.runs_dir):
            try:
                self.records[d.name] = (d, run_record.read_run_record(d))
            except (FileNotFoundError, ValueError):
                continue  # benchmark records (kit-bench/1) and damaged runs are not producers
        self.done: dict[str, ReplayResult] = {}
        self.data_roots = frozenset(Path(v).parts[0] for _, r in self.records.values()
                                    for k, v in r.parameters.items() if _is_folder_parameter(k, v))

    def _locations(self, record: RunRecord) -> dict[str, str]:
        """{parameter (with the key or index inside a dict or list parameter): the data location it names}."""
        found: dict[str, str] = {}

        def walk(label: str, name: str, value) -> None:
            if isinstance(value, dict):
                for key, item in value.items():
                    walk(f"{label}[{key!r}]", name, item)
            elif isinstance(value, list):
                for index, item in enumerate(value):
                    walk(f"{label}[{index}]", name, item)
            elif (location := _data_location(name, value, self.data_roots)) is not None:
                found[label] = location

        for name, value in record.parameters.items():
            walk(name, name, value)
        return found

    def _root_producers(self, consumer: RunRecord) -> list[RunRecord]:
        """The runs that produced the checkpoint roots `consumer` used (checkpoint_roots.used), each the earliest
        to produce it: an evaluation's arms, a comparison's two trajectories. A location names a folder, which
        several runs write into; a used root names exactly the commit read."""
        out: dict[str, RunRecord] = {}
        for used in consumer.checkpoint_roots.used:
            makers = [r for _, r in self.records.values() if r.run_id != consumer.run_id
                      and any(p.root == used.root for p in r.checkpoint_roots.produced)]
            first = min(makers, key=lambda r: (r.started_at, r.run_id), default=None)
            if first is not None and first.started_at <= consumer.started_at:
                out.setdefault(first.run_id, first)
        return sorted(out.values(), key=lambda r: (r.started_at, r.run_id))

    def _producer(self, location: str, consumer: RunRecord) -> RunRecord | None:
        named = [r for _, r in self.records.values() if location in self._locations(r).values()]
        first = min(named, key=lambda r: (r.started_at, r.run_id), default=None)
        return None if first is None or first.run_id == consumer.run_id else first

    def root(self) -> Path:
        """The working directory the replayed notebooks run in: WORK/root, where each data root (`demo-out`,
        `build`) is a link to WORK/data/<root> and every other entry of the repository a link to it. So the
        recorded relative parameters are replayed unchanged and name the replay's data, and what a run writes
        about them (an evaluation's `baseline: seed:demo-out/seed`, whose bytes the selection digests) is
        byte for byte what the committed run wrote."""
        root = self.work / "root"
        if not root.is_dir():
            root.mkdir(parents=True)
            repo = repository_root()
            for entry in sorted(repo.iterdir()):
                if entry.name not in self.data_roots and entry.name != ".git":
                    (root / entry.name).symlink_to(entry)
            for name in sorted(self.data_roots):
                (self.work / "data" / name).mkdir(parents=True, exist_ok=True)
                (root / name).symlink_to(self.work / "data" / name)
        return root

    def why_not_replayable(self, run_id: str) -> str | None:
        """Why this run cannot be replayed here (the refusal replay() would raise), or None."""
        if run_id not in self.records:
            return "no kit run record (a benchmark record, kit-bench/1, or a damaged run: `kit verify-evidence` checks it)"
        run_dir, record = self.records[run_id]
        try:
            _replayable(record, run_dir)
        except ReplayError as e:
            return str(e)
        return None

    def replay(self, run_id: str) -> ReplayResult:
        """The run replayed and compared (dependencies replayed first)."""
        if run_id in self.done:
            return self.done[run_id]
        if run_id not in self.records:
            raise ReplayError(f"{self.runs_dir / run_id}: no run record there")
        run_dir, record = self.records[run_id]
        _replayable(record, run_dir)
        for name, location in sorted(self._locations(record).items()):
            producer = self._producer(location, record)
            if producer is not None:
                dep = self.replay(producer.run_id)
                if not dep.ok:
                    raise ReplayError(f"{run_dir}: its input {name} = {location!r} comes from "
                                      f"{producer.run_id}, whose replay did not match: {dep.mismatches[0]}")
        for producer in self._root_producers(record):
            dep = self.replay(producer.run_id)
            if not dep.ok:
                raise ReplayError(f"{run_dir}: a checkpoint root it used comes from {producer.run_id}, whose "
                                  f"replay did not match: {dep.mismatches[0]}")

        earlier = self.work / "runs" / run_id
        before = run_record.read_run_record(earlier) if (earlier / run_record.RUN_RECORD_NAME).is_file() else None
        if before is not None and before.status == "completed" and before.parameters == record.parameters:
            # replayed before into this work directory (an interrupted replay, or a second check of the same
            # evidence): its record is compared again, nothing is re-executed; a failed one runs again
            new = before
        else:
            self._restore_ledger(record, run_dir)
            self.log(f"replaying {run_id} ({record.notebook})")
            # every replayed run reads and records to the replay's own ledger, whatever $KIT_LEDGER names
            # outside: a replayed scoring must not write exposures into someone's ledger
            # in WORK/root (root()): the recorded relative data paths name the replay's data there
            with temporary_environ({LEDGER_ENV: str(self.work / LEDGER_RELATIVE), **gpu_mode_environment(record, self.log, run_dir, self.runs_dir.parent)}), \
                    contextlib.chdir(self.root()):
                new = run_notebook(repository_root() / record.notebook, record.parameters, run_id,
                                   self.work / "runs")
        result = compare_runs(record, new, str(run_dir), run_dir, self.work / "runs" / run_id)
        self.done[run_id] = result
        return result


    def _restore_ledger(self, record: RunRecord, run_dir: Path) -> None:
        """A run that read the exposure ledger (a preparation: input digest LEDGER_INPUT) reads it again as it
        was: the committed ledger's consecutive lines with that digest (lines_with_digest), written as the
        replay's own ledger (work/ledger/exposed.jsonl, which every replayed run is given as $KIT_LEDGER).
        Refused when no such lines exist."""
        want = record.input_digests.get(LEDGER_INPUT)
        if want is None:
            return  # recorded before preparations named their ledger: it runs on the replay's ledger as it is
        committed = self.runs_dir.parent / LEDGER_RELATIVE
        block = lines_with_digest(committed, want)
        if block is None:
            raise ReplayError(f"{run_dir}: input_digests[{LEDGER_INPUT!r}] = {want}: no consecutive lines of "
                              f"{committed} have that sha256 (the ledger the run read is not in the committed one)")
        target = self.work / LEDGER_RELATIVE
        if block == b"":
            # no lines read: the ledger was absent (read_digest), which a preparation records differently from
            # an empty file (its summary's sha256 is null), so it is absent again
            target.unlink(missing_ok=True)
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(block)


def compare(committed: RunRecord, replayed: RunRecord, where: str, committed_dir: Path | None = None,
            replayed_dir: Path | None = None) -> dict:
    """`compare_runs` as JSON: {"run_id", "ok", "mismatches": [...], "compared": [...]}."""
    return compare_runs(committed, replayed, where, committed_dir, replayed_dir).to_json()


def compare_runs(committed: RunRecord, replayed: RunRecord, where: str, committed_dir: Path | None = None,
                 replayed_dir: Path | None = None) -> ReplayResult:
    """Status, identity input digests and produced roots; with the two run folders also every metric sidecar
    the replay recomputed, field by field (exactly: integers, strings, roots and, as the numeric profile
    promises, floats), and the text of the notebook's outputs; timings excepted (kit.evidence.replay_fields)."""
    mismatches, compared = [], []

    def check(field: str, old, new) -> None:
        compared.append(field)
        if old != new:
            mismatches.append(f"{where}: field {field}: committed {old!r}, replayed {new!r}")

    check("status", committed.status, replayed.status)
    for name, digest in sorted(committed.input_digests.items()):
        if name not in NON_IDENTITY_INPUTS and not name.startswith(NON_IDENTITY_INPUT_PREFIXES):
            check(f"input_digests[{name!r}]", digest, replayed.input_digests.get(name))
    old_roots = [e.root for e in committed.checkpoint_roots.produced]
    new_roots = [e.root for e in replayed.checkpoint_roots.produced]
    check("checkpoint_roots.produced", old_roots, new_roots)
    if committed_dir is not None and replayed_dir is not None and replayed.status == "completed":
        for name in sorted(committed.metrics):
            fields, found = compare_sidecar(Path(committed_dir), Path(replayed_dir), name)
            compared += fields
            mismatches += found
        fields, found = compare_outputs(Path(committed_dir) / committed.executed_notebook,
                                        Path(replayed_dir) / replayed.executed_notebook)
        compared += fields
        mismatches += found
    if replayed.status != "completed" and replayed.error:
        error = replayed.error
        mismatches.append(f"{where}: the replay failed: {error.ename}: "
                          f"{error.evalue.splitlines()[0] if error.evalue else ''}")
    return ReplayResult(run_id=committed.run_id, ok=not mismatches, mismatches=tuple(mismatches),
                        compared=tuple(compared))


def replay_runs(run_dirs: list[Path], work: Path, log=print, whole_folder: bool = False) -> list[dict]:
    """`replay_results` as JSON: {"run_id", "ok", "mismatches", "compared"}, and "not_replayed" where ok is null."""
    return [r.to_json() for r in replay_results(run_dirs, work, log, whole_folder)]


def replay_results(run_dirs: list[Path], work: Path, log=print, whole_folder: bool = False) -> list[ReplayResult]:
    """Replay each run directory (all from one runs directory) into `work`. Runs kept in folders nested in
    that runs directory (superseded attempts, campaign folders: `kit verify-evidence runs` lists them too)
    are the record of earlier attempts, not inputs of a replay: they are left out, and the log says so.

    A run named on its own that cannot be replayed here is refused (ReplayError). With `whole_folder` (the
    runs came from a folder, `kit verify-evidence --replay runs`), such a run is listed instead, as
    {"run_id", "ok": None, "not_replayed": reason}: a runs directory also holds benchmark records and GPU
    runs, which say what they are but are no CPU computation to re-derive."""
    resolved = [Path(d).resolve() for d in run_dirs]
    # archived runs (unpacked from runs/archive/) are earlier attempts too when a whole folder is replayed;
    # named on their own they replay like any run
    current = [d for d in resolved if origin(d) is None] or resolved
    top = min((d.parent for d in current), key=lambda p: len(p.parts), default=None)
    nested = [d for d in resolved if top is not None and d.parent != top and (d.is_relative_to(top) or d not in current)]
    if nested:
        log(f"replay: {len(nested)} run(s) kept in folders under {top} (superseded or campaign records) are not "
            "replayed")
        run_dirs = [d for d in resolved if d not in nested]
    parents = {Path(d).resolve().parent for d in run_dirs}
    if len(parents) != 1:
        raise ReplayError(f"replay takes runs of one runs directory; got {sorted(map(str, parents))}")
    replayer = Replayer(parents.pop(), work, log)
    # in the order they ran (started_at): a run's inputs that no parameter names (the study's arms, whose
    # stores live under the STUDY_DIR its preparation named) are then there before it, as they were
    def ran_at(d) -> tuple:
        found = replayer.records.get(Path(d).name)
        return (found[1].started_at if found else "", Path(d).name)
    results: list[ReplayResult] = []
    bar = _runs_bar(len(run_dirs))
    if bar is not None:  # the log's lines above the bar, not through it
        replayer.log = lambda message: bar.write(str(message), file=sys.stderr)
    for d in sorted(run_dirs, key=ran_at):
        if bar is not None:
            bar.set_description(f"replay {Path(d).name}")
            bar.update(0)
        reason = replayer.why_not_replayable(Path(d).name) if whole_folder else None
        if reason is None and whole_folder:
            try:  # a run whose input's producer did not replay is that run's mismatch; the others go on
                results.append(replayer.replay(Path(d).name))
            except ReplayError as e:
                results.append(ReplayResult(run_id=Path(d).name, ok=False, mismatches=(str(e),), compared=()))
        elif reason is None:
            results.append(replayer.replay(Path(d).name))
        else:
            results.append(ReplayResult(run_id=Path(d).name, ok=None, not_replayed=reason, mismatches=(),
                                        compared=()))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return results


def _runs_bar(total: int):
    """A bar over the runs to replay on stderr (each run's cell bar below it); None when KIT_PROGRESS=0."""
    if not progress_on():
        return None

    return tqdm(total=total, desc="replay", unit="run", file=sys.stderr, dynamic_ncols=True)
