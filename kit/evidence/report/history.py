"""Every seed each contract ran on, with its verdicts: the current runs and every kept folder of superseded
runs (read only through kit.evidence.run_index.kept_runs, which also sees archived folders), one row per folder
of finals, each with why it was superseded (the folder's superseded.json, beside its runs)."""

from __future__ import annotations

import html
from pathlib import Path

from kit.digest import load_json_strict
from kit.evidence.report.format import fmt, fmt_iso, is_number, records_table
from kit.evidence.report.index import index, metric, run_contract
from kit.evidence.report.verdict_rows import verdict_rows
from kit.evidence.run_index import kept_runs

COMPARISONS = ("A_vs_seed", "B_vs_A", "growth_vs_control")


def _cell(rows: list[dict]) -> str:
    if not rows:
        return "\u2014"
    failed = [r for r in rows if r["verdict"] not in ("pass", "n/a")]
    if not failed:
        return "pass"
    parts = []
    for r in failed:
        v = r.get("value")
        label = f"{r['check']}: lost" if r["check"] == "generated" else r["check"]
        parts.append(f"{label} {fmt(v)}" if is_number(v) else r["check"])
    return "fail (" + "; ".join(parts) + ")"


def _why(folder: Path) -> str:
    f = folder / "superseded.json"
    try:
        return str(load_json_strict(f).get("reason") or "")
    except (FileNotFoundError, ValueError):
        return ""


def history_rows(runs_dir) -> list[dict]:
    """One row per folder of finals: the current selection, then each kept folder, oldest finals first."""
    groups = [("current", runs_dir, None)]
    seen = set()
    for r in kept_runs(runs_dir):
        d = Path(r["dir"]).parent
        if d not in seen and ("gates" in (r.get("metrics") or {}) or "screen_quality" in (r.get("metrics") or {})):
            seen.add(d)
            groups.append((r["kept_in"], d, d))
    out = []
    for where, d, folder in groups:
        idx, rows = index(d), verdict_rows(d)
        finals = [r for r in idx["runs"] if metric(r, "gates") is not None or metric(r, "screen_quality") is not None]
        if not finals:
            continue
        seeds = {(run_contract(r) or {}).get("seed", {}).get("parameter_digest") for r in finals} - {None}
        quality = [r for r in rows["study"] if r["comparison"] == "quality screen" and r["check"] != "quality screen (all parts)"]
        out.append({"seed": ", ".join(s[:8] for s in sorted(seeds)) or "unrecorded", "kept in": where,
                    "finals from": fmt_iso(min(r["started_at"] for r in finals)),
                    "commit": ", ".join(sorted({(r.get("git") or {}).get("commit", "")[:8] for r in finals})),
                    **{c: _cell([r for r in rows["adaptive"] if r["comparison"] == c]) for c in COMPARISONS},
                    "study quality screen": _cell(quality),
                    "why superseded": "current" if folder is None else (_why(folder) or "not recorded")})
    return sorted(out, key=lambda r: r["finals from"])


def kept_folder_rows(runs_dir) -> list[dict]:
    """Every folder of kept runs (campaign folders' attempts, superseded seeds' runs): its runs by status and the
    span of their starts."""
    out: dict[str, dict] = {}
    for r in kept_runs(runs_dir):
        row = out.setdefault(r["kept_in"], {"kept in": r["kept_in"], "runs": 0, "statuses": {}, "starts": []})
        row["runs"] += 1
        row["statuses"][r["status"]] = row["statuses"].get(r["status"], 0) + 1
        if r.get("started_at"):
            row["starts"].append(r["started_at"])
    return [{"kept in": k, "runs": v["runs"],
             "statuses": ", ".join(f"{n} {s}" for s, n in sorted(v["statuses"].items())),
             "first started": fmt_iso(min(v["starts"])) if v["starts"] else "\u2014",
             "last started": fmt_iso(max(v["starts"])) if v["starts"] else "\u2014"} for k, v in sorted(out.items())]


def show_history(runs_dir) -> None:
    from IPython.display import HTML, display  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    rows = history_rows(runs_dir)
    if len(rows) <= 1:
        display(HTML("<p>Every final of this evidence ran on one seed: no superseded verdicts.</p>"
                     + (records_table(rows) if rows else "")))
        return
    kept = sum(1 for r in rows if r["kept in"] != "current")
    held = {c: sorted({r[c].split(" ")[0] for r in rows}) for c in (*COMPARISONS, "study quality screen")}
    varied = [c for c, v in held.items() if len(v) > 1]
    text = (f"The same contracts were scored on finals {len(rows)} times, on {len({r['seed'] for r in rows})} seeds; "
            f"{kept} of those are superseded and kept as evidence. "
            + (f"Verdicts that did not hold across them: {', '.join(varied)}." if varied
               else "Every verdict held across them."))
    folders = kept_folder_rows(runs_dir)
    display(HTML(f"<p>{html.escape(text)}</p>" + records_table(rows, table_id="kit-history")
                 + (f"<p>Every kept attempt, by the folder that keeps it ({sum(f['runs'] for f in folders)} runs):</p>"
                    + records_table(folders, table_id="kit-kept-folders") if folders else "")))
