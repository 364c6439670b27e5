"""`kit status PATH`: what a checkpoint home, a run folder, a campaign folder or a demo output holds, and
how far a run in progress is, read from what the kit already writes (nothing is computed or locked).

- a checkpoint home (HEAD, commits/, attempts/): HEAD with its cohort step, the commits, each attempt
  (running, completed, aborted with its signal, failed with its one-line reason; elapsed time), the last
  update's loss and tokens/s from the newest `attempts/*/updates.jsonl`;
- a run folder (run.json): its status, reason, duration, produced roots, last loss and throughput from its
  `metrics/`; a folder of `kit run` in progress (no run.json yet) is "running";
- any other folder (a campaign's, a demo output, a runs folder): every home, run folder, study arm and
  loose attempt folder below it, each as above.
The `--json` form is documented in docs/formats/kit-status.md ("kit status").
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.digest import load_json_strict
from kit.evidence.archive import resolve
from kit.evidence.run_record import refuse_links
from kit.record import Either, MapOf, Num, Omittable, OneOf, Opt, Record, Seq, spec_field
from kit.store import commits

MAX_DEPTH = 5  # a demo output's homes sit at OUT/adaptive/A2; a campaign's attempts at raw/ARM/ATTEMPT
SKIP = {"objects", "commits", "workers", ".git", "__pycache__", ".ipynb_checkpoints"}
SIGNALS = {"KeyboardInterrupt": "SIGINT"}  # how a driver records an operator's Ctrl-C in `error`
COMMITS_LOG = "commits.jsonl"  # an adaptive attempt's commits as it makes them (kit.adaptive.train.COMMITS_LOG)
RUNS_DIR = "runs"  # where a bare run id is looked for, as `kit run --runs-dir` defaults


def _read(path: Path) -> dict | list | None:
    try:
        return load_json_strict(path)
    except (OSError, ValueError):
        return None


def _last_line(path: Path) -> dict | None:
    """The last complete JSON line of a log that may still be growing (only its tail is read)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - (1 << 20)))
            lines = [line for line in f.read().split(b"\n") if line.strip()]
    except OSError:
        return None
    for line in reversed(lines):
        try:
            return json.loads(line)
        except ValueError:
            continue  # a line being written
    return None


def _lines(path: Path) -> int:
    """Complete lines of a small log (0 when absent)."""
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


# --- the `--json` form (docs/formats/kit-status.md), declared ------------------------------------------
# Status reads records it does not validate (a run in progress writes them as it goes): the values it copies
# are whatever scalar the file held, so their spec is any scalar.
SCALAR = Opt(Either(str, Either(bool, float)))
Scalar = str | int | float | bool | None


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptUpdate(Record):
    """An adaptive attempt's last logged update (the last line of its `updates.jsonl`)."""
    cohort: Scalar = spec_field(SCALAR, doc="the cohort")
    cohort_step: Scalar = spec_field(SCALAR, doc="its update within the cohort")
    step: Scalar = spec_field(SCALAR, doc="the global update")
    loss: Scalar = spec_field(SCALAR, doc="the objective")
    ce_per_token: Scalar = spec_field(SCALAR, doc="cross-entropy per new token")
    tokens_per_s: float | None = spec_field(Opt(float), doc="tokens / seconds of that update")

    @property
    def number(self) -> int | None:
        """The update's number as the text names it: its cohort step, else its step."""
        return next((n for n in (self.cohort_step, self.step) if isinstance(n, int)), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunUpdate(Record):
    """A run's or a study arm's last update (a run's `metrics/`, an arm's record or its launcher's report)."""
    update: Scalar = spec_field(SCALAR, doc="the update (a study's `step`)")
    loss: Scalar = spec_field(SCALAR, doc="the objective")
    ce_per_token: Scalar = spec_field(SCALAR, doc="cross-entropy per new token")
    tokens_per_s: Scalar = spec_field(Omittable(SCALAR),
                                      doc="throughput (a run: of `metrics/throughput.json`, absent without it)")

    @property
    def number(self) -> int | None:
        return self.update if isinstance(self.update, int) else None


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptSummary(Record):
    """An adaptive attempt (`attempts/<attempt>/attempt.json` of a home)."""
    attempt: Scalar = spec_field(SCALAR, doc="its name")
    path: str = spec_field(str, doc="its folder")
    status: Scalar = spec_field(SCALAR, doc="running, completed, aborted, failed (unknown: no record)")
    cohort: Scalar = spec_field(SCALAR, doc="the cohort it trained")
    workers: Scalar = spec_field(SCALAR, doc="its workers")
    resume: Scalar = spec_field(SCALAR, doc="the commit it resumed")
    commits: int = spec_field(Num(0, integer=True), doc="count, or lines of its `commits.jsonl`")
    elapsed_s: float | None = spec_field(Opt(float), doc="to its end, or to now while it runs")
    reason: str | None = spec_field(Opt(str), doc="the first line of `error`")
    signal: Scalar = spec_field(SCALAR, doc="aborted: the record's, or `SIGINT` for a `KeyboardInterrupt`")
    last_update: AttemptUpdate | None = spec_field(Omittable(AttemptUpdate), doc="absent when none is logged")


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptEntry(AttemptSummary):
    """A copied attempt folder (a campaign's `raw/ARM/ATTEMPT`)."""
    kind: str = spec_field(OneOf("attempt"), doc="attempt")


@dataclass(frozen=True, slots=True, kw_only=True)
class HomeEntry(Record):
    """A checkpoint home (`HEAD`, `commits/` or `attempts/*/attempt.json`)."""
    kind: str = spec_field(OneOf("home"), doc="home")
    path: str = spec_field(str, doc="its folder")
    head: str | None = spec_field(Opt(str), doc='full root, null or "unreadable: ..."')
    head_cursor: Mapping[str, int] | None = spec_field(Opt(MapOf(int)), doc="HEAD's data position")
    commits: int = spec_field(Num(0, integer=True), doc="manifests present")
    attempts: tuple[AttemptSummary, ...] = spec_field(Seq(AttemptSummary), doc="oldest first")
    last_update: AttemptUpdate | None = spec_field(Opt(AttemptUpdate), doc="the newest attempt's last update")


@dataclass(frozen=True, slots=True, kw_only=True)
class RunEntry(Record):
    """A run folder (`run.json`, or `kernel.log` while `kit run` executes it: "running")."""
    kind: str = spec_field(OneOf("run"), doc="run")
    path: str = spec_field(str, doc="its folder")
    run_id: Scalar = spec_field(SCALAR, doc="the record's, else the folder's name")
    status: Scalar = spec_field(SCALAR, doc="the record's, or running")
    reason: Scalar = spec_field(SCALAR, doc="the record's")
    elapsed_s: Scalar = spec_field(SCALAR, doc="the record's `duration_s`")
    notebook: Scalar = spec_field(Omittable(SCALAR), doc="the record's (absent while running)")
    produced: tuple[Scalar, ...] = spec_field(Seq(SCALAR), doc="the produced checkpoint roots")
    last_update: RunUpdate | None = spec_field(Opt(RunUpdate), doc="`metrics/loss_curves.json`'s last row")


@dataclass(frozen=True, slots=True, kw_only=True)
class ArmAttempt(Record):
    """One attempt record of a study arm (`attempts/NNN.json`)."""
    attempt: str = spec_field(str, doc="NNN")
    status: Scalar = spec_field(SCALAR, doc="its status")
    reason: Scalar = spec_field(SCALAR, doc="why not completed")
    until: Scalar = spec_field(SCALAR, doc="the last update asked for")
    resume: Scalar = spec_field(SCALAR, doc="the commit resumed")
    commits: int = spec_field(Num(0, integer=True), doc="made")
    elapsed_s: float | None = spec_field(Opt(float), doc="its duration")


@dataclass(frozen=True, slots=True, kw_only=True)
class Unrecorded(Record):
    """The attempt a study arm's launcher started and no record closes yet (training, or stopped first)."""
    status: str = spec_field(OneOf("unrecorded"), doc="unrecorded")
    reason: str = spec_field(str, doc="why it has no record")
    elapsed_s: None = spec_field(Opt(float), doc="null")
    phase: Scalar = spec_field(SCALAR, doc="rank 0's last reported phase")
    step: Scalar = spec_field(SCALAR, doc="the update it is on")
    last_report_s: float | None = spec_field(Opt(float), doc="age of `run/status-0.json`")
    attempt_commits: int = spec_field(Num(0, integer=True), doc="commits it logged so far")
    last_update: RunUpdate | None = spec_field(Opt(RunUpdate), doc="what the bar shows")


@dataclass(frozen=True, slots=True, kw_only=True)
class ArmEntry(Record):
    """A study arm (`arm.json`, or `home/` and `run/` before its first record)."""
    kind: str = spec_field(OneOf("arm"), doc="arm")
    path: str = spec_field(str, doc="its folder")
    arm: Scalar = spec_field(SCALAR, doc="the record's arm, else the folder's name")
    status: Scalar = spec_field(SCALAR, doc="the last record's, or unrecorded")
    reason: Scalar = spec_field(SCALAR, doc="the last record's")
    elapsed_s: float | None = spec_field(Opt(float), doc="the last record's duration")
    head: str | None = spec_field(Opt(str), doc="HEAD of `home/`")
    head_cursor: Mapping[str, int] | None = spec_field(Opt(MapOf(int)), doc="its data position")
    commits: int = spec_field(Num(0, integer=True), doc="of `home/`")
    attempts: tuple[ArmAttempt, ...] = spec_field(Seq(ArmAttempt), doc="its attempt records")
    last_update: RunUpdate | None = spec_field(Opt(RunUpdate), doc="the record's last update, or the launcher's")
    phase: Scalar = spec_field(Omittable(SCALAR), doc="unrecorded: rank 0's last reported phase")
    step: Scalar = spec_field(Omittable(SCALAR), doc="unrecorded: the update it is on")
    last_report_s: float | None = spec_field(Omittable(Opt(float)), doc="unrecorded: age of `run/status-0.json`")
    attempt_commits: int | None = spec_field(Omittable(Num(0, integer=True)), doc="unrecorded: commits so far")


Entry = HomeEntry | RunEntry | ArmEntry | AttemptEntry


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusReport(Record):
    """`kit status PATH --json`: one entry per thing found."""
    path: str = spec_field(str, doc="PATH as given (an archived run: its place in the runs folder)")
    entries: tuple[Entry, ...] = spec_field(Seq(Either(HomeEntry, Either(RunEntry, Either(ArmEntry, AttemptEntry)))),
                                            doc="PATH itself, else everything below it")


def _present(cls: type[Record], *absent: str) -> frozenset[str]:
    """The JSON keys of `cls` but `absent`: where an Omittable field is present with the value null."""
    return frozenset(cls.json_fields()) - set(absent)


def attempt_summary(folder: Path, now: float) -> AttemptSummary:
    """An attempt folder of a home, summarised."""
    return AttemptSummary(**_attempt_fields(folder, now))


def attempt_entry(folder: Path, now: float) -> AttemptEntry:
    """A copied attempt folder, an entry itself."""
    return AttemptEntry(kind="attempt", **_attempt_fields(folder, now))


def _attempt_fields(folder: Path, now: float) -> dict[str, Any]:
    """What an attempt's record and logs say, as the keyword arguments of `AttemptSummary`."""
    found = _read(folder / "attempt.json")
    rec = found if isinstance(found, dict) else {}  # an attempt record is an object, read leniently here
    status, error = rec.get("status", "unknown"), rec.get("error")
    started, ended = rec.get("started_at"), rec.get("ended_at")
    elapsed = None
    if isinstance(started, (int, float)):
        elapsed = round((ended if isinstance(ended, (int, float)) else now) - started, 1)
    signal = None
    if status == "aborted":
        signal = rec.get("signal") or SIGNALS.get(str(error or "").split(":")[0])
    last = _last_line(folder / "updates.jsonl")
    update = None
    if last is not None:
        update = AttemptUpdate(cohort=last.get("cohort"), cohort_step=last.get("cohort_step"), step=last.get("step"),
                               loss=last.get("objective"), ce_per_token=last.get("ce_per_token"),
                               tokens_per_s=_rate(last.get("tokens"), last.get("seconds")))
    return {"attempt": rec.get("attempt", folder.name), "path": str(folder), "status": status,
            "cohort": rec.get("cohort"), "workers": rec.get("workers"), "resume": rec.get("resume"),
            "commits": max(len(rec.get("commits") or []), _lines(folder / COMMITS_LOG)), "elapsed_s": elapsed,
            "reason": str(error).splitlines()[0] if error else None, "signal": signal, "last_update": update}


def _rate(tokens, seconds) -> float | None:
    if isinstance(tokens, (int, float)) and isinstance(seconds, (int, float)) and seconds > 0:
        return round(tokens / seconds, 1)
    return None


def _head(home: Path) -> tuple[str | None, Mapping[str, int] | None]:
    """HEAD and its cursor; a damaged HEAD or manifest is part of the state being reported."""
    try:
        head = commits.read_head(home)
        return head, commits.read_manifest(home, head).learned_state.cursor if head else None
    except ValueError as e:
        return f"unreadable: {str(e).splitlines()[0]}", None


def home_summary(home: Path, now: float) -> HomeEntry:
    """A checkpoint home: HEAD, commits and attempts (oldest first), with the newest update's numbers."""
    head, cursor = _head(home)
    attempts = tuple(attempt_summary(p.parent, now) for p in sorted((home / "attempts").glob("*/attempt.json")))
    last = next((a.last_update for a in reversed(attempts) if a.last_update), None)
    return HomeEntry(kind="home", path=str(home), head=head, head_cursor=cursor,
                     commits=len(commits.list_commits(home)), attempts=attempts, last_update=last)


def run_summary(run_dir: Path) -> RunEntry:
    """A run folder: its record, or "running" while `kit run` executes it (the record is written last)."""
    refuse_links(run_dir)  # a linked run folder or run.json is refused, as by every reader of runs
    rec = _read(run_dir / "run.json")
    if not isinstance(rec, dict):
        return RunEntry(kind="run", path=str(run_dir), run_id=run_dir.name, status="running", reason=None,
                        elapsed_s=None, produced=(), last_update=None)
    curves = _read(run_dir / "metrics" / "loss_curves.json")
    throughput = _read(run_dir / "metrics" / "throughput.json")
    last = None
    if isinstance(curves, list) and curves and isinstance(curves[-1], dict):
        row = curves[-1]  # an adaptive run's rows name the update `update`, a study arm's `step`
        rate = throughput.get("assistant_tokens_per_s") if isinstance(throughput, dict) else None
        last = RunUpdate(update=row.get("update", row.get("step")), loss=row.get("objective"),
                         ce_per_token=row.get("ce_per_token"), tokens_per_s=rate,
                         _present=_present(RunUpdate, *(() if isinstance(throughput, dict) else ("tokens_per_s",))))
    produced = tuple(p.get("root") for p in (rec.get("checkpoint_roots") or {}).get("produced", []))
    return RunEntry(kind="run", path=str(run_dir), run_id=rec.get("run_id", run_dir.name), status=rec.get("status"),
                    reason=rec.get("reason"), elapsed_s=rec.get("duration_s"), notebook=rec.get("notebook"),
                    produced=produced, last_update=last, _present=_present(RunEntry))


def _elapsed(started: object, ended: object) -> float | None:
    """Seconds from `started` to `ended` (one decimal) where both are recorded numbers, else None."""
    if isinstance(started, (int, float)) and isinstance(ended, (int, float)):
        return round(ended - started, 1)
    return None


def arm_summary(arm_dir: Path, now: float) -> ArmEntry:
    """A study arm (STUDY/arms/<arm>): its last record (`arm.json`), the store in `home/` (HEAD, commits),
    every attempt record (`attempts/NNN.json`) and, while an attempt has no record yet (it trains, or it
    was stopped before writing one: Ctrl-C), that attempt as "unrecorded" with the launcher's last report."""
    found = _read(arm_dir / "arm.json")
    rec = found if isinstance(found, dict) else {}  # read leniently: a status of a damaged arm still shows it
    home = home_summary(arm_dir / "home", now) if is_home(arm_dir / "home") else None
    attempts: list[ArmAttempt] = []
    for path in sorted((arm_dir / "attempts").glob("*.json")):
        a = _read(path)
        if isinstance(a, dict):
            attempts.append(ArmAttempt(attempt=path.stem, status=a.get("status"), reason=a.get("reason"),
                                       until=a.get("until"), resume=a.get("resume_root"),
                                       commits=len(a.get("commits") or []),
                                       elapsed_s=_elapsed(a.get("started_at"), a.get("ended_at"))))
    last = None
    updates = rec.get("updates")
    if isinstance(updates, list) and updates and isinstance(updates[-1], dict):
        u = updates[-1]
        last = RunUpdate(update=u.get("step"), loss=u.get("objective"), ce_per_token=u.get("objective"),
                         tokens_per_s=_rate(u.get("target_tokens"), u.get("seconds")), _present=_present(RunUpdate))
    entry = ArmEntry(kind="arm", path=str(arm_dir), arm=rec.get("arm", arm_dir.name), status=rec.get("status"),
                     reason=rec.get("reason"), elapsed_s=_elapsed(rec.get("started_at"), rec.get("ended_at")),
                     head=home.head if home else None, head_cursor=home.head_cursor if home else None,
                     commits=home.commits if home else 0, attempts=tuple(attempts), last_update=last)
    launched, recorded = arm_dir / "run" / "launch-args.json", arm_dir / "arm.json"
    if launched.is_file():
        live = _unrecorded(arm_dir / "run", now)
        if not recorded.is_file() or launched.stat().st_mtime > recorded.stat().st_mtime:
            return dataclasses.replace(entry, status=live.status, reason=live.reason, elapsed_s=live.elapsed_s,
                                       last_update=live.last_update, phase=live.phase, step=live.step,
                                       last_report_s=live.last_report_s, attempt_commits=live.attempt_commits,
                                       _present=_present(ArmEntry))
        if entry.last_update is None:  # a failed attempt records no updates: the launcher's last report
            return dataclasses.replace(entry, last_update=live.last_update)
    return entry


def _unrecorded(run_dir: Path, now: float) -> Unrecorded:
    """The attempt the launcher in `run_dir` started and no record closes yet: its last report (rank 0's
    `status-0.json`: the update it is on and what the bar shows)."""
    args = _read(run_dir / "launch-args.json")
    report = run_dir / "status-0.json"
    state = _read(report)
    state = state if isinstance(state, dict) else {}
    shown = found if isinstance(found := state.get("shown"), dict) else {}
    until = args.get("until") if isinstance(args, dict) else None
    last = None
    loss = shown.get("loss")
    if isinstance(loss, (int, float)):
        done, total = shown.get("done"), shown.get("total")
        update = (until - total + done if isinstance(until, int) and isinstance(total, int) and isinstance(done, int)
                  else None)
        last = RunUpdate(update=update, loss=loss, ce_per_token=shown.get("ce"),
                         tokens_per_s=shown.get("tokens_per_s"), _present=_present(RunUpdate))
    try:
        age: float | None = round(now - report.stat().st_mtime, 1)
    except OSError:
        age = None
    return Unrecorded(status="unrecorded", reason="no record yet: training, or stopped before writing one (Ctrl-C)",
                      elapsed_s=None, phase=state.get("phase"), step=state.get("step"), last_report_s=age,
                      attempt_commits=_lines(run_dir / COMMITS_LOG), last_update=last)


def is_arm(path: Path) -> bool:
    """A study arm's folder: its record, or (before the first record is written) its store and launcher folder."""
    return (path / "arm.json").is_file() or ((path / "home").is_dir() and (path / "run").is_dir())


def is_home(path: Path) -> bool:
    """A checkpoint store: HEAD, commits/, or an adaptive attempt (`attempts/<attempt>/attempt.json`; a study
    arm's `attempts/` holds records `NNN.json` and is not a store)."""
    return (path / "HEAD").is_file() or (path / "commits").is_dir() or any((path / "attempts").glob("*/attempt.json"))


def status(path: str | Path, now: float | None = None) -> StatusReport:
    """The report (`to_json()` is the `--json` form): one entry for a home, a run folder or a study arm, else every one found
    below it. An archived run is read in place (`locate`)."""
    given, now = Path(path), time.time() if now is None else now
    path = locate(given)
    if not path.is_dir():
        raise ValueError(f"{path}: not a folder; expected a checkpoint home, a run folder, a campaign folder "
                         "or a demo output")
    entries: list[Entry] = []

    def walk(folder: Path, depth: int) -> None:
        if is_arm(folder):
            entries.append(arm_summary(folder, now))
            return  # its store is in its entry
        if is_home(folder):
            entries.append(home_summary(folder, now))
            return  # its attempts are in its entry
        if (folder / "run.json").is_file() or (folder / "kernel.log").is_file():
            entries.append(run_summary(folder))
        elif (folder / "attempt.json").is_file():  # a copied attempt (a campaign's raw/ARM/ATTEMPT)
            entries.append(attempt_entry(folder, now))
            return
        if depth < MAX_DEPTH:
            for child in sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()):
                if child.name not in SKIP:
                    walk(child, depth + 1)

    walk(path, 0)
    if not entries:
        raise ValueError(f"{path}: no checkpoint home (HEAD, commits/ or attempts/), run folder (run.json), "
                         "study arm (arm.json) or attempt (attempt.json) in it or below it")
    if path != given:  # an archived folder is read unpacked, and named by its place in the runs folder
        inner, outer = str(path), str(given if given.exists() or _archived(given) else Path(RUNS_DIR) / given)

        def moved(p: str) -> str:
            return outer + p[len(inner):] if p.startswith(inner) else p

        for i, e in enumerate(entries):
            e = dataclasses.replace(e, path=moved(e.path))
            if isinstance(e, HomeEntry):
                e = dataclasses.replace(e, attempts=tuple(dataclasses.replace(a, path=moved(a.path))
                                                          for a in e.attempts))
            entries[i] = e
        return StatusReport(path=outer, entries=tuple(entries))
    return StatusReport(path=str(path), entries=tuple(entries))


def _archived(path: Path) -> bool:
    return resolve(path) != path


def locate(path: Path) -> Path:
    """`path`, or where it is read: inside an archived folder of the runs folder above it, unpacked
    (`runs/FOLDER` or `runs/FOLDER/runs/RUN_ID`; docs/formats/archived-evidence.md); a bare run id that is no path
    here is looked for in `runs/`."""
    if path.exists():
        return path
    found = resolve(path)
    if found.exists():
        return found
    if not path.is_absolute() and path.parts and path.parts[0] != RUNS_DIR:
        found = resolve(Path(RUNS_DIR) / path)
        if found.exists():
            return found
    return path


# --- text -----------------------------------------------------------------------------------
def _secs(s) -> str:
    if not isinstance(s, (int, float)):
        return "-"
    s = round(s)
    return f"{s // 3600}h{s // 60 % 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _loss(last: AttemptUpdate | RunUpdate | None) -> str:
    if not last or not isinstance(last.loss, (int, float)):
        return "no update logged yet"
    where = f"update {last.number}" if last.number is not None else "update"
    rate, ce = last.tokens_per_s, last.ce_per_token
    beside = "the objective" if ce == last.loss else f"objective {last.loss:.4f}"
    loss = f"ce/token {ce:.4f} ({beside})" if isinstance(ce, (int, float)) else f"objective {last.loss:.4f}"
    return f"last {where}: {loss}" + (f", {rate:,.0f} tokens/s" if rate else "")


def _attempt_line(a: AttemptSummary) -> str:
    state = f"{a.status}" + (f" ({a.signal})" if a.signal else "")
    reason = f": {a.reason}" if a.reason and a.status in ("failed", "aborted") else ""
    return (f"    {a.attempt}  {state}{reason}  cohort {a.cohort}, {a.workers} workers, "
            f"{a.commits} commit(s), {_secs(a.elapsed_s)}")


def _step(cursor: Mapping[str, int] | None) -> str:
    """HEAD's position as the text names it: cohort, cohort step (else step) and step."""
    if not cursor:
        return ""
    return (f" (cohort {cursor.get('cohort', 0)} step {cursor.get('cohort_step', cursor.get('step'))}, step "
            f"{cursor.get('step')})")


def render(report: StatusReport) -> str:
    lines = []
    for e in report.entries:
        if isinstance(e, HomeEntry):
            head = e.head or "none (no commit yet)"
            lines += [f"home {e.path}", f"  HEAD {head}{_step(e.head_cursor)}", f"  commits {e.commits}",
                      f"  attempts {len(e.attempts)}"] + [_attempt_line(a) for a in e.attempts]
            lines.append(f"  {_loss(e.last_update)}")
        elif isinstance(e, RunEntry):
            reason = f": {e.reason}" if e.reason else ""
            lines += [f"run {e.run_id}  {e.status}{reason}  {_secs(e.elapsed_s)}  ({e.path})"]
            if e.last_update:
                lines.append(f"  {_loss(e.last_update)}")
        elif isinstance(e, ArmEntry):
            reason = f": {e.reason}" if e.reason else ""
            lines.append(f"arm {e.arm}  {e.status}{reason}  {_secs(e.elapsed_s)}  ({e.path})")
            head_step = (e.head_cursor or {}).get("step")
            lines += [f"  HEAD {e.head or 'none (no commit yet)'}" + (f" (step {head_step})" if head_step is not None else ""),
                      f"  commits {e.commits}", f"  attempts {len(e.attempts)}"]
            lines += [f"    {a.attempt}  {a.status}" + (f": {a.reason}" if a.reason else "")
                      + f"  {a.commits} commit(s), {_secs(a.elapsed_s)}" for a in e.attempts]
            if e.status == "unrecorded":
                lines.append(f"    (this attempt)  {e.attempt_commits or 0} commit(s) so far, last report "
                             f"{_secs(e.last_report_s)} ago ({e.phase} at step {e.step})")
            lines.append(f"  {_loss(e.last_update)}")
        else:
            lines += [f"attempt {e.path}", _attempt_line(e)]
            if e.last_update:
                lines.append(f"  {_loss(e.last_update)}")
    return "\n".join(lines)
