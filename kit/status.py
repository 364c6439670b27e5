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

import json
import time
from pathlib import Path

from kit.digest import load_json_strict
from kit.evidence.archive import resolve
from kit.evidence.run_record import refuse_links
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


def attempt_summary(folder: Path, now: float) -> dict:
    found = _read(folder / "attempt.json")
    rec = found if isinstance(found, dict) else {}  # an attempt record is an object
    status, error = rec.get("status", "unknown"), rec.get("error")
    started, ended = rec.get("started_at"), rec.get("ended_at")
    out = {"attempt": rec.get("attempt", folder.name), "path": str(folder), "status": status,
           "cohort": rec.get("cohort"), "workers": rec.get("workers"), "resume": rec.get("resume"),
           "commits": max(len(rec.get("commits") or []), _lines(folder / COMMITS_LOG)), "elapsed_s": None,
           "reason": None, "signal": None}
    if isinstance(started, (int, float)):
        out["elapsed_s"] = round((ended if isinstance(ended, (int, float)) else now) - started, 1)
    if error:
        out["reason"] = str(error).splitlines()[0]
    if status == "aborted":
        out["signal"] = rec.get("signal") or SIGNALS.get(str(error or "").split(":")[0])
    last = _last_line(folder / "updates.jsonl")
    if last is not None:
        out["last_update"] = {"cohort": last.get("cohort"), "cohort_step": last.get("cohort_step"),
                              "step": last.get("step"), "loss": last.get("objective"),
                              "ce_per_token": last.get("ce_per_token"),
                              "tokens_per_s": _rate(last.get("tokens"), last.get("seconds"))}
    return out


def _rate(tokens, seconds) -> float | None:
    if isinstance(tokens, (int, float)) and isinstance(seconds, (int, float)) and seconds > 0:
        return round(tokens / seconds, 1)
    return None


def home_summary(home: Path, now: float) -> dict:
    """A checkpoint home: HEAD, commits and attempts (oldest first), with the newest update's numbers."""
    try:
        head = commits.read_head(home)
        cursor = commits.read_commit(home, head)["learned_state"]["cursor"] if head else None
    except ValueError as e:  # a damaged HEAD or manifest is part of the state being reported
        head, cursor = f"unreadable: {str(e).splitlines()[0]}", None
    attempts = [attempt_summary(p.parent, now) for p in sorted((home / "attempts").glob("*/attempt.json"))]
    last = next((a["last_update"] for a in reversed(attempts) if a.get("last_update")), None)
    return {"kind": "home", "path": str(home), "head": head, "head_cursor": cursor,
            "commits": len(commits.list_commits(home)), "attempts": attempts, "last_update": last}


def run_summary(run_dir: Path) -> dict:
    """A run folder: its record, or "running" while `kit run` executes it (the record is written last)."""
    refuse_links(run_dir)  # a linked run folder or run.json is refused, as by every reader of runs
    rec = _read(run_dir / "run.json")
    if not isinstance(rec, dict):
        return {"kind": "run", "path": str(run_dir), "run_id": run_dir.name, "status": "running",
                "reason": None, "elapsed_s": None, "produced": [], "last_update": None}
    curves = _read(run_dir / "metrics" / "loss_curves.json")
    throughput = _read(run_dir / "metrics" / "throughput.json")
    last = None
    if isinstance(curves, list) and curves and isinstance(curves[-1], dict):
        row = curves[-1]  # an adaptive run's rows name the update `update`, a study arm's `step`
        last = {"update": row.get("update", row.get("step")), "loss": row.get("objective"),
                "ce_per_token": row.get("ce_per_token")}
        if isinstance(throughput, dict):
            last["tokens_per_s"] = throughput.get("assistant_tokens_per_s")
    return {"kind": "run", "path": str(run_dir), "run_id": rec.get("run_id", run_dir.name),
            "status": rec.get("status"), "reason": rec.get("reason"), "elapsed_s": rec.get("duration_s"),
            "notebook": rec.get("notebook"),
            "produced": [p.get("root") for p in (rec.get("checkpoint_roots") or {}).get("produced", [])],
            "last_update": last}


def _elapsed(started: object, ended: object) -> float | None:
    """Seconds from `started` to `ended` (one decimal) where both are recorded numbers, else None."""
    if isinstance(started, (int, float)) and isinstance(ended, (int, float)):
        return round(ended - started, 1)
    return None


def arm_summary(arm_dir: Path, now: float) -> dict:
    """A study arm (STUDY/arms/<arm>): its last record (`arm.json`), the store in `home/` (HEAD, commits),
    every attempt record (`attempts/NNN.json`) and, while an attempt has no record yet (it trains, or it
    was stopped before writing one: Ctrl-C), that attempt as "unrecorded" with the launcher's last report."""
    rec = _read(arm_dir / "arm.json")
    rec = rec if isinstance(rec, dict) else {}
    started, ended = rec.get("started_at"), rec.get("ended_at")
    elapsed = _elapsed(started, ended)
    home = home_summary(arm_dir / "home", now) if is_home(arm_dir / "home") else None
    attempts = []
    for path in sorted((arm_dir / "attempts").glob("*.json")):
        a = _read(path)
        if isinstance(a, dict):
            a_start, a_end = a.get("started_at"), a.get("ended_at")
            attempts.append({"attempt": path.stem, "status": a.get("status"), "reason": a.get("reason"),
                             "until": a.get("until"), "resume": a.get("resume_root"),
                             "commits": len(a.get("commits") or []),
                             "elapsed_s": _elapsed(a_start, a_end)})
    out = {"kind": "arm", "path": str(arm_dir), "arm": rec.get("arm", arm_dir.name), "status": rec.get("status"),
           "reason": rec.get("reason"), "elapsed_s": elapsed, "head": home and home["head"],
           "head_cursor": home and home["head_cursor"], "commits": home["commits"] if home else 0,
           "attempts": attempts, "last_update": None}
    updates = rec.get("updates")
    if isinstance(updates, list) and updates and isinstance(updates[-1], dict):
        u = updates[-1]
        out["last_update"] = {"update": u.get("step"), "loss": u.get("objective"), "ce_per_token": u.get("objective"),
                              "tokens_per_s": _rate(u.get("target_tokens"), u.get("seconds"))}
    launched, recorded = arm_dir / "run" / "launch-args.json", arm_dir / "arm.json"
    if launched.is_file():
        live = _unrecorded(arm_dir / "run", now)
        if not recorded.is_file() or launched.stat().st_mtime > recorded.stat().st_mtime:
            out.update(live)
        elif out["last_update"] is None:  # a failed attempt records no updates: the launcher's last report
            out["last_update"] = live["last_update"]
    return out


def _unrecorded(run_dir: Path, now: float) -> dict:
    """The attempt the launcher in `run_dir` started and no record closes yet: its last report (rank 0's
    `status-0.json`: the update it is on and what the bar shows)."""
    args = _read(run_dir / "launch-args.json")
    report = run_dir / "status-0.json"
    state = _read(report)
    state = state if isinstance(state, dict) else {}
    shown = found if isinstance(found := state.get("shown"), dict) else {}
    until = args.get("until") if isinstance(args, dict) else None
    last = None
    if isinstance(shown.get("loss"), (int, float)):
        done, total = shown.get("done"), shown.get("total")
        update = (until - total + done if isinstance(until, int) and isinstance(total, int) and isinstance(done, int)
                  else None)
        last = {"update": update, "loss": shown["loss"], "ce_per_token": shown.get("ce"),
                "tokens_per_s": shown.get("tokens_per_s")}
    try:
        age = round(now - report.stat().st_mtime, 1)
    except OSError:
        age = None
    return {"status": "unrecorded", "reason": "no record yet: training, or stopped before writing one (Ctrl-C)",
            "elapsed_s": None, "phase": state.get("phase"), "step": state.get("step"), "last_report_s": age,
            "attempt_commits": _lines(run_dir / COMMITS_LOG), "last_update": last or None}


def is_arm(path: Path) -> bool:
    """A study arm's folder: its record, or (before the first record is written) its store and launcher folder."""
    return (path / "arm.json").is_file() or ((path / "home").is_dir() and (path / "run").is_dir())


def is_home(path: Path) -> bool:
    """A checkpoint store: HEAD, commits/, or an adaptive attempt (`attempts/<attempt>/attempt.json`; a study
    arm's `attempts/` holds records `NNN.json` and is not a store)."""
    return (path / "HEAD").is_file() or (path / "commits").is_dir() or any((path / "attempts").glob("*/attempt.json"))


def status(path: str | Path, now: float | None = None) -> dict:
    """{"path", "entries": [...]}: one entry for a home, a run folder or a study arm, else every one found
    below it. An archived run is read in place (`locate`)."""
    given, now = Path(path), time.time() if now is None else now
    path = locate(given)
    if not path.is_dir():
        raise ValueError(f"{path}: not a folder; expected a checkpoint home, a run folder, a campaign folder "
                         "or a demo output")
    entries: list[dict] = []

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
            entries.append({"kind": "attempt", **attempt_summary(folder, now)})
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
        for e in entries:
            for item in [e, *e.get("attempts", [])]:
                if isinstance(item.get("path"), str) and item["path"].startswith(inner):
                    item["path"] = outer + item["path"][len(inner):]
        return {"path": outer, "entries": entries}
    return {"path": str(path), "entries": entries}


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


def _loss(last: dict | None) -> str:
    if not last or not isinstance(last.get("loss"), (int, float)):
        return "no update logged yet"
    number = next((last[k] for k in ("cohort_step", "update", "step") if isinstance(last.get(k), int)), None)
    where = f"update {number}" if number is not None else "update"
    rate, ce = last.get("tokens_per_s"), last.get("ce_per_token")
    beside = "the objective" if ce == last["loss"] else f"objective {last['loss']:.4f}"
    loss = f"ce/token {ce:.4f} ({beside})" if isinstance(ce, (int, float)) else f"objective {last['loss']:.4f}"
    return f"last {where}: {loss}" + (f", {rate:,.0f} tokens/s" if rate else "")


def _attempt_line(a: dict) -> str:
    state = a["status"] + (f" ({a['signal']})" if a.get("signal") else "")
    reason = f": {a['reason']}" if a.get("reason") and a["status"] in ("failed", "aborted") else ""
    return (f"    {a['attempt']}  {state}{reason}  cohort {a.get('cohort')}, {a.get('workers')} workers, "
            f"{a['commits']} commit(s), {_secs(a['elapsed_s'])}")


def render(report: dict) -> str:
    lines = []
    for e in report["entries"]:
        if e["kind"] == "home":
            cur = e["head_cursor"] or {}
            head = e["head"] or "none (no commit yet)"
            step = f" (cohort {cur.get('cohort', 0)} step {cur.get('cohort_step', cur.get('step'))}, step " \
                   f"{cur.get('step')})" if cur else ""
            lines += [f"home {e['path']}", f"  HEAD {head}{step}", f"  commits {e['commits']}",
                      f"  attempts {len(e['attempts'])}"] + [_attempt_line(a) for a in e["attempts"]]
            lines.append(f"  {_loss(e['last_update'])}")
        elif e["kind"] == "run":
            reason = f": {e['reason']}" if e.get("reason") else ""
            lines += [f"run {e['run_id']}  {e['status']}{reason}  {_secs(e['elapsed_s'])}  ({e['path']})"]
            if e.get("last_update"):
                lines.append(f"  {_loss(e['last_update'])}")
        elif e["kind"] == "arm":
            reason = f": {e['reason']}" if e.get("reason") else ""
            lines.append(f"arm {e['arm']}  {e['status']}{reason}  {_secs(e['elapsed_s'])}  ({e['path']})")
            head_step = (e.get("head_cursor") or {}).get("step")
            lines += [f"  HEAD {e['head'] or 'none (no commit yet)'}" + (f" (step {head_step})" if head_step is not None else ""),
                      f"  commits {e['commits']}", f"  attempts {len(e['attempts'])}"]
            lines += [f"    {a['attempt']}  {a['status']}" + (f": {a['reason']}" if a.get("reason") else "")
                      + f"  {a['commits']} commit(s), {_secs(a['elapsed_s'])}" for a in e["attempts"]]
            if e["status"] == "unrecorded":
                lines.append(f"    (this attempt)  {e.get('attempt_commits', 0)} commit(s) so far, last report "
                             f"{_secs(e.get('last_report_s'))} ago ({e.get('phase')} at step {e.get('step')})")
            lines.append(f"  {_loss(e['last_update'])}")
        else:
            lines += [f"attempt {e['path']}", _attempt_line(e)]
            if e.get("last_update"):
                lines.append(f"  {_loss(e['last_update'])}")
    return "\n".join(lines)
