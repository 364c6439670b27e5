"""The reviewer's half of `kit report`: verdict tables, the scope paragraph, run sections.

Everything here runs inside the report's kernel and reads only committed evidence: run records
(runs/*/run.json, kit-run/2 and kit-bench/1), metric sidecars, and the contracts (the contract a
run names by digest, from contracts/ at HEAD or at the commit the run records).

    verdict_rows(runs_dir)   the rows of the verdict tables, computed from gates.json (adaptive
                             and continued learning), comparison.json (migration and growth) and
                             screen_quality.json / screen_speed.json (the study); the page shows
                             exactly these values (the test parses them back)
    fmt(value, key)          the one number format of the page: integers with thousands separators,
                             other numbers with 4 significant digits in fixed notation (scientific
                             only below 1e-9 or at 1e15 and above), epoch seconds in `*_at`/`now`
                             fields as UTC times, None as an em dash
"""

from __future__ import annotations

import base64
import datetime as _dt
import functools
import html
import io
import json
import math
import re
import subprocess
from pathlib import Path
from typing import Any

from kit.digest import load_json_strict, loads_strict, sha256_json
from kit.evidence import records

HEX64 = re.compile(r"^[0-9a-f]{64}$")
TIME_KEYS = re.compile(r"(_at|^now)$")
NONE = "\u2014"
REPO = Path(__file__).resolve().parents[2]


# --- formatting ------------------------------------------------------------------------------
def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def fmt_time(v: float) -> str:
    return _dt.datetime.fromtimestamp(v, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def fmt_iso(text: str | None) -> str:
    """A run record's ISO-8601 time as "YYYY-MM-DD HH:MM:SS UTC" (as recorded when it does not parse)."""
    if not text:
        return NONE
    try:
        t = _dt.datetime.fromisoformat(str(text))  # Python 3.11 reads a trailing Z
    except ValueError:
        return str(text)
    if t.tzinfo is None:
        return str(text)
    return fmt_time(t.timestamp())


def fmt(v: Any, key: str | None = None) -> str:
    """One format for every number on the page (see the module docstring)."""
    if v is None:
        return NONE
    if isinstance(v, bool):
        return "yes" if v else "no"
    if _is_number(v) and key is not None and TIME_KEYS.search(key) and v > 1e9:
        return fmt_time(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        if v == 0:
            return "0"
        a = abs(v)
        if a < 1e-9 or a >= 1e15:
            return f"{v:.3e}"
        decimals = max(0, 3 - math.floor(math.log10(a)))
        return f"{v:,.{decimals}f}"
    return str(v)


def short(root: str) -> str:
    return root[:12]


def root_html(root: str, runs_by_root: dict | None = None) -> str:
    """A root as the run(s) that produced it, linked, with the short root in a monospace tooltip."""
    names = (runs_by_root or {}).get(root, [])
    code = f'<code class="kit-root" title="{html.escape(root)}">{short(root)}</code>'
    if not names:
        return code
    return ", ".join(run_link(n) for n in names) + " " + code


def run_link(name: str) -> str:
    return f'<a href="#run-{html.escape(name)}">{html.escape(name)}</a>'


def cell_html(v: Any, key: str | None = None, runs_by_root: dict | None = None) -> str:
    if isinstance(v, str) and HEX64.match(v):
        return root_html(v, runs_by_root)
    if isinstance(v, str) and v.startswith("seed:"):
        return html.escape(v)
    if isinstance(v, (dict, list)):
        text = json.dumps(v, sort_keys=True)
        text = re.sub(r"[0-9a-f]{64}", lambda m: short(m.group(0)) + "\u2026", text)
        return f'<span class="kit-json">{html.escape(text)}</span>'
    return html.escape(fmt(v, key))


def table_html(columns: list[str], rows: list[list[Any]], *, table_id: str | None = None,
               classes: str = "kit-table kit-metric", runs_by_root: dict | None = None,
               index: bool = False, caption: str | None = None) -> str:
    """A table in its own scroll box; cells through cell_html (roots as run names, one number format)."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for i, (c, v) in enumerate(zip(columns, row)):
            tag = "th" if index and i == 0 else "td"
            num = ' class="num"' if _is_number(v) else ""
            key = str(row[0]) if index else str(c)  # a table on its side: the field is the row's label
            cells.append(f"<{tag}{num}>{cell_html(v, key, runs_by_root)}</{tag}>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    tid = f' id="{table_id}"' if table_id else ""
    cap = f"<caption>{caption}</caption>" if caption else ""
    return (f'<div class="kit-scroll"><table{tid} class="{classes}">{cap}<thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def records_table(recs: list[dict], **kw) -> str:
    """Records as a table; one with many fields and few records is turned on its side (fields as rows)."""
    cols: list[str] = []
    for r in recs:
        cols += [k for k in r if k not in cols]
    if len(cols) > 8 and len(recs) <= len(cols) // 2:
        label = next((k for k in ("row", "arm", "rank", "family", "name", "method") if k in cols), None)
        heads = [f"{label} {fmt(r.get(label))}" if label else str(i) for i, r in enumerate(recs)]
        rows = [[k] + [r.get(k) for r in recs] for k in cols if k != label]
        return table_html(["field"] + heads, rows, index=True, **kw)
    return table_html(cols, [[r.get(c) for c in cols] for r in recs], **kw)


def kv_table(obj: dict, **kw) -> str:
    return table_html(["field", "value"], [[k, v] for k, v in obj.items()], index=True, **kw)


def img_html(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode()
    return f'<img class="kit-figure" src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


# --- the runs directory as an index ----------------------------------------------------------
@functools.lru_cache(maxsize=8)
def _index_cached(runs_dir: str, stamp: float) -> dict:
    from kit.evidence.run_index import load_runs

    runs = load_runs(runs_dir)
    by_id = {r["run_id"]: r for r in runs}
    runs_by_root: dict[str, list[str]] = {}
    parent_of_root: dict[str, str] = {}
    for r in runs:
        for p in (r.get("checkpoint_roots") or {}).get("produced", []):
            runs_by_root.setdefault(p["root"], []).append(r["run_id"])
        commits = _metric(r, "commits")
        if isinstance(commits, dict) and "rows" in commits:
            for row in commits["rows"]:
                rec = dict(zip(commits["columns"], row))
                for k in ("full_root", "learned_state_root"):
                    if rec.get(k) and r["run_id"] not in runs_by_root.setdefault(rec[k], []):
                        runs_by_root[rec[k]].append(r["run_id"])
    for r in runs:
        if (r.get("parameters") or {}).get("MODE") == "build" and (r.get("parameters") or {}).get("SEED_DIR"):
            runs_by_root.setdefault("seed:" + r["parameters"]["SEED_DIR"], []).append(r["run_id"])
    return {"runs": runs, "by_id": by_id, "runs_by_root": runs_by_root, "parent_of_root": parent_of_root}


def index(runs_dir) -> dict:
    p = Path(runs_dir)
    return _index_cached(str(p.resolve()), p.stat().st_mtime if p.exists() else 0.0)


def _metric(row: dict, name: str):
    if name not in (row.get("metrics") or {}):
        return None
    try:
        return load_json_strict(records.metric_path(row["dir"], name))
    except (FileNotFoundError, ValueError):
        return None


def model_html(spec: str, idx: dict) -> str:
    if spec.startswith("seed:"):
        names = idx["runs_by_root"].get(spec, [])
        return (", ".join(run_link(n) for n in names) + " " if names else "") + f"<code>{html.escape(spec)}</code>"
    return root_html(spec, idx["runs_by_root"])


def producer(root: str, idx: dict) -> str | None:
    names = idx["runs_by_root"].get(root) or []
    return names[0] if names else None


# --- contracts and scale ---------------------------------------------------------------------
@functools.lru_cache(maxsize=64)
def contract_for(digest: str, commit: str | None) -> dict | None:
    """The contract file whose canonical digest is `digest`: in contracts/ now, else at `commit`."""
    cdir = REPO / "contracts"
    for f in sorted(cdir.glob("*.json")):
        try:
            obj = load_json_strict(f)
        except ValueError:
            continue
        if sha256_json(obj) == digest:
            return {"file": f"contracts/{f.name}", "commit": None, **obj}
    if commit:
        for f in sorted(cdir.glob("*.json")):
            try:
                text = subprocess.run(["git", "-C", str(REPO), "show", f"{commit}:contracts/{f.name}"],
                                      capture_output=True, text=True, timeout=20, check=True).stdout
                obj = loads_strict(text)
            except (subprocess.SubprocessError, OSError, ValueError):
                continue
            if sha256_json(obj) == digest:
                return {"file": f"contracts/{f.name}", "commit": commit, **obj}
    return None


def run_contract(row: dict) -> dict | None:
    digest = row.get("contract_digest")
    if not digest:
        return None
    return contract_for(digest, (row.get("git") or {}).get("commit"))


def is_cpu(row: dict) -> bool:
    dev = row.get("device") or {}
    return not dev.get("gpu_count") and not dev.get("gpus")


# --- verdicts --------------------------------------------------------------------------------
def verdict_rows(runs_dir) -> dict[str, list[dict]]:
    """{"adaptive": rows, "study": rows}; each row: experiment, check, statistic, value (a number or
    None), threshold (text), threshold_value, verdict ("pass"/"fail"/...), runs (names), source
    (run and sidecar the numbers come from)."""
    idx = index(runs_dir)
    adaptive, study = [], []
    for r in idx["runs"]:
        gates = _metric(r, "gates")
        if isinstance(gates, dict):
            gv = _metric(r, "gate_verdict") or {}
            comp = gv.get("comparison") or r["run_id"]
            cand, base = gv.get("candidate"), gv.get("baseline")
            runs = [r["run_id"]] + [n for m in (cand, base) if m for n in idx["runs_by_root"].get(m, [])]
            for name, g in gates.items():
                if not isinstance(g, dict):
                    continue
                row = {"experiment": "adaptive", "comparison": comp, "check": name, "runs": runs,
                       "candidate": cand, "baseline": base, "source": f"{r['run_id']}/metrics/gates.json",
                       "verdict": "pass" if g.get("passed") else "fail"}
                if "upper" in g:
                    op = "<" if "< threshold" in g.get("rule", "") else "\u2264"
                    row.update(statistic="upper 95% bootstrap bound, NLL change (nats/token)", value=g["upper"],
                               threshold=f"{op} {fmt(g.get('threshold'))}", threshold_value=g.get("threshold"))
                elif "lost" in g:
                    row.update(statistic="correct generated answers lost", value=g["lost"],
                               threshold=f"\u2264 gained ({g.get('gained')})", threshold_value=g.get("gained"))
                else:
                    num = {k: v for k, v in g.items() if _is_number(v)}
                    k, v = next(iter(num.items()), (None, None))
                    row.update(statistic=k or "", value=v, threshold=g.get("rule", ""), threshold_value=None)
                adaptive.append(row)
        comparison = _metric(r, "comparison")
        if isinstance(comparison, dict) and "learned_state_equal" in comparison:
            params = r.get("parameters") or {}
            cand = [producer(comparison.get("candidate_learned_state_root") or "", idx)
                    or producer(params.get("CANDIDATE_ROOT", ""), idx)]
            ctrl = [producer(comparison.get("control_learned_state_root") or "", idx)
                    or producer(params.get("CONTROL_ROOT", ""), idx)]
            runs = [r["run_id"]] + [n for n in cand + ctrl if n]
            src = f"{r['run_id']}/metrics/comparison.json"
            if comparison.get("same_parameter_names"):
                adaptive.append({"experiment": "adaptive", "comparison": f"migration, cohort {comparison.get('cohort')}",
                                 "check": "learned state equal to the uninterrupted control",
                                 "statistic": "max |parameter difference|",
                                 "value": comparison.get("max_abs_parameter_difference"),
                                 "threshold": "= 0 (equal learned-state roots)", "threshold_value": 0,
                                 "verdict": "pass" if comparison["learned_state_equal"] else "fail",
                                 "runs": runs, "source": src})
            else:
                adaptive.append({"experiment": "adaptive", "comparison": f"growth, cohort {comparison.get('cohort')}",
                                 "check": "structure vs the fixed-depth control",
                                 "statistic": "parameter names and shapes differ (appended blocks): "
                                              "not compared elementwise",
                                 "value": None, "threshold": "quality is judged by the growth gates",
                                 "threshold_value": None, "verdict": "n/a", "runs": runs, "source": src})
        if r.get("notebook") == "(benchmark script)":  # a GPU campaign's migration comparison (kit-bench/1)
            adaptive += _bench_comparison_rows(r, idx)
        for screen in ("screen_quality", "screen_speed"):
            s = _metric(r, screen)
            if isinstance(s, dict):
                study += _screen_rows(r, screen, s, idx)
    return {"adaptive": adaptive, "study": study}


def _bench_results(row: dict) -> list:
    try:
        rec = load_json_strict(Path(row["dir"]) / records.RUN_RECORD_NAME)
    except (FileNotFoundError, ValueError):
        return []
    res = rec.get("results")
    return res if isinstance(res, list) else []


def _bench_comparison_rows(r: dict, idx: dict) -> list[dict]:
    out = []
    for i, x in enumerate(_bench_results(r)):
        if not (isinstance(x, dict) and "learned_state_equal" in x):
            continue
        same = x.get("parameters_differing") is not None
        out.append({"experiment": "adaptive", "comparison": f"GPU campaign {x.get('phase', 'comparison')}",
                    "check": "learned state equal to the uninterrupted control" if same else
                             "structure vs the control (not compared elementwise)",
                    "statistic": "max |parameter difference|", "value": x.get("max_abs_parameter_difference"),
                    "threshold": "= 0 (equal learned-state roots)" if same else "n/a", "threshold_value": 0 if same else None,
                    "verdict": ("pass" if x["learned_state_equal"] else "fail") if same else "n/a",
                    "runs": [r["run_id"]], "source": f"{r['run_id']}/run.json#results/{i}"})
    return out


def _arm_runs(r: dict, idx: dict) -> dict[str, str]:
    study_dir = (r.get("parameters") or {}).get("STUDY_DIR")
    return {x["parameters"]["ARM"]: x["run_id"] for x in idx["runs"]
            if (x.get("parameters") or {}).get("ARM") and (x.get("parameters") or {}).get("STUDY_DIR") == study_dir}


def _screen_rows(r: dict, screen: str, s: dict, idx: dict) -> list[dict]:
    arms = _arm_runs(r, idx)
    src = f"{r['run_id']}/metrics/{screen}.json"
    t, inp = s.get("thresholds") or {}, s.get("inputs") or {}
    base = {"experiment": "study", "comparison": f"{s.get('name', screen)} screen", "source": src}
    out = []
    if screen == "screen_speed":
        out.append({**base, "check": "speed: candidate / single-GPU active throughput",
                    "statistic": (f"ratio ({fmt(inp.get('candidate_active_tokens_per_s'))} / "
                                  f"{fmt(inp.get('baseline_active_tokens_per_s'))} tokens/s)"),
                    "value": s.get("ratio"), "threshold": f"\u2265 {fmt(t.get('min_speedup'))}",
                    "threshold_value": t.get("min_speedup"), "verdict": s.get("verdict"),
                    "runs": [r["run_id"]] + [arms[a] for a in ("powersgd", "single") if a in arms]})
        return out
    checks = s.get("checks") or {}
    for name, ok in checks.items():
        row = {**base, "check": name, "verdict": "pass" if ok else "fail",
               "runs": [r["run_id"]] + ([arms["powersgd"]] if "powersgd" in arms else [])}
        if name == "task_gain":
            row.update(statistic="task accuracy gain over the seed", value=inp.get("task_gain"),
                       threshold=f"\u2265 {fmt(t.get('min_task_gain'))}", threshold_value=t.get("min_task_gain"))
        elif name == "retention":
            row.update(statistic="retention upper bound (nats/token, normal)", value=inp.get("retention_upper"),
                       threshold=f"\u2264 {fmt(t.get('max_retention_upper_nats'))}",
                       threshold_value=t.get("max_retention_upper_nats"))
        elif name.startswith("noninferior_to_"):
            ctrl = name[len("noninferior_to_"):]
            margin = t.get("noninferiority_margin")
            row.update(statistic=f"accuracy difference vs {ctrl}, lower bound",
                       value=(inp.get("noninferiority_lower") or {}).get(ctrl),
                       threshold=f"> {fmt(-margin) if _is_number(margin) else NONE}",
                       threshold_value=-margin if _is_number(margin) else None)
            if ctrl in arms:
                row["runs"] = row["runs"] + [arms[ctrl]]
        else:
            row.update(statistic=name, value=None, threshold=s.get("rule", ""), threshold_value=None)
        out.append(row)
    out.append({**base, "check": "quality screen (all parts)", "statistic": s.get("rule", ""), "value": None,
                "threshold": "every part passes", "threshold_value": None, "verdict": s.get("verdict"),
                "runs": [r["run_id"]]})
    return out


VERDICT_COLUMNS = ["comparison", "check", "statistic", "value", "threshold", "verdict", "runs"]


def verdict_table_html(rows: list[dict], table_id: str, idx: dict) -> str:
    head = "".join(f"<th>{c}</th>" for c in VERDICT_COLUMNS)
    body = []
    for v in rows:
        value = v.get("value")
        data = f' data-value="{html.escape(repr(value))}"' if _is_number(value) else ""
        tv = v.get("threshold_value")
        tdata = f' data-value="{html.escape(repr(tv))}"' if _is_number(tv) else ""
        runs = ", ".join(run_link(n) for n in dict.fromkeys(v["runs"]))
        verdict = str(v.get("verdict"))
        body.append(
            f'<tr data-source="{html.escape(v["source"])}"><td>{html.escape(v["comparison"])}</td>'
            f'<td>{html.escape(v["check"])}</td><td>{html.escape(v["statistic"])}</td>'
            f'<td class="num value"{data}>{html.escape(fmt(value))}</td>'
            f'<td class="threshold"{tdata}>{html.escape(v["threshold"])}</td>'
            f'<td class="verdict verdict-{html.escape(verdict)}">{html.escape(verdict)}</td><td>{runs}</td></tr>')
    return (f'<div class="kit-scroll"><table id="{table_id}" class="kit-table kit-verdicts"><thead><tr>{head}'
            f'</tr></thead><tbody>{"".join(body)}</tbody></table></div>')


def show_verdicts(runs_dir) -> None:
    from IPython.display import HTML, display

    idx = index(runs_dir)
    rows = verdict_rows(runs_dir)
    parts = []
    for exp, title in (("adaptive", "Adaptive sharded learning: final gates, migration equality, growth vs control"),
                       ("study", "Shared-gradient method study: quality and speed screens")):
        if rows[exp]:
            parts.append(f"<h3>{title}</h3>" + verdict_table_html(rows[exp], f"kit-verdicts-{exp}", idx))
    if not parts:
        parts.append("<p>No gate or screen has been computed in this runs directory.</p>")
    display(HTML("".join(parts)))


# --- what the evidence shows -----------------------------------------------------------------
SCALE_TEXT = {
    "tiny": ("tiny scale: the kit's tiny seed, a few updates on CPU cores. This shows that the whole "
             "pipeline runs and that every record, checkpoint root, gate and screen is computed from committed "
             "inputs; it does not measure learning quality. The tiny seed answers none of the generated tasks, so "
             "accuracies of 0 are expected here, and a gate or screen that fails (or passes) at this scale says "
             "nothing about the method at full scale."),
    "medium": ("medium scale: the full contract's structure with fewer updates and examples. Verdicts are "
               "indicative for the method, not the frozen trial's result."),
    "full": ("full scale: the frozen contract. The verdicts below are the trial's result, on public task "
             "families only; they do not establish general assistant capability."),
}


def scope_paragraphs(runs_dir) -> list[str]:
    idx = index(runs_dir)
    rows = verdict_rows(runs_dir)
    out = []
    experiments = []
    for r in idx["runs"]:
        if _metric(r, "gates") is not None or _metric(r, "screen_quality") is not None:
            c = run_contract(r)
            key = (c or {}).get("file") or r.get("contract_digest")
            if key not in [e[0] for e in experiments]:
                experiments.append((key, c, r))
    for key, c, r in experiments:
        scale = (c or {}).get("scale")
        name = (c or {}).get("file") or f"contract {short(r.get('contract_digest') or '')}"
        where = f" at commit {c['commit'][:10]}" if c and c.get("commit") else ""
        is_study = _metric(r, "screen_quality") is not None
        exp = "study" if is_study else "adaptive"
        text = [f"<b>{html.escape(name)}</b>{where}: " + (SCALE_TEXT.get(scale) or
                                                          f"scale {html.escape(str(scale))} (not described).")]
        mine = [v for v in rows[exp] if "#results/" not in v["source"]]  # GPU campaign rows: their own records
        acc = _max_accuracy(idx, exp, r.get("contract_digest"))
        if acc is not None:
            text.append(f"Measured: the highest task accuracy of any model and family is {fmt(acc)}.")
        passed = sum(1 for v in mine if v["verdict"] == "pass")
        failed = sum(1 for v in mine if v["verdict"] == "fail")
        text.append(f"{passed} check(s) pass and {failed} fail in the table above.")
        if not is_study:
            mig = [v for v in rows["adaptive"] if v["comparison"].startswith("migration")]
            if mig:
                text.append("Migration equality is exact at every scale: the migrated run's learned state "
                            + ("equals" if all(v["verdict"] == "pass" for v in mig) else "does not equal")
                            + " the uninterrupted control bit for bit.")
        else:
            speed = [v for v in rows["study"] if v["check"].startswith("speed")]
            cpu = all(is_cpu(x) for x in idx["runs"] if (x.get("parameters") or {}).get("ARM"))
            if speed and scale == "tiny":
                text.append(f"The speed ratio ({fmt(speed[0]['value'])}) at tiny scale measures start-up and "
                            "per-update overhead on " + ("CPU" if cpu else "the device")
                            + ", not the throughput of a 1.7B update; GPU cost is not shown for CPU runs.")
            elif speed:
                text.append(f"The speed ratio is {fmt(speed[0]['value'])}; GPU time and cost are reported per "
                            "arm, separately from the screen.")
        out.append(" ".join(text))
    return out


def _max_accuracy(idx: dict, exp: str, digest: str | None) -> float | None:
    vals = []
    for r in idx["runs"]:
        if r.get("contract_digest") != digest:
            continue
        acc = _metric(r, "accuracy_by_family")
        if isinstance(acc, dict):
            vals += [v for row in acc.values() if isinstance(row, dict) for k, v in row.items()
                     if k.startswith("accuracy") and _is_number(v)]
        elif isinstance(acc, list):
            vals += [x["accuracy"] for x in acc if isinstance(x, dict) and _is_number(x.get("accuracy"))]
    return max(vals) if vals else None


def show_scope(runs_dir) -> None:
    from IPython.display import HTML, display

    paras = scope_paragraphs(runs_dir)
    if not paras:
        paras = ["No gate or screen was computed: this directory holds runs without a final comparison."]
    display(HTML("".join(f'<p class="kit-scope">{p}</p>' for p in paras)))


# --- run sections ----------------------------------------------------------------------------
def lineage(row: dict, idx: dict) -> dict | None:
    """Where a resumed, migrated or grown run started: parent run and root, and the updates it did itself."""
    p = row.get("parameters") or {}
    resume = p.get("RESUME")
    if not resume:
        return None
    parent = producer(resume, idx)
    parent_row = idx["by_id"].get(parent) if parent else None
    kinds = ["resumed"]
    if p.get("GROW"):
        kinds.append("grown (blocks appended)")
    pw = ((parent_row or {}).get("parameters") or {}).get("WORKERS")
    if pw and p.get("WORKERS") and pw != p.get("WORKERS"):
        kinds.append(f"migrated from {pw} to {p['WORKERS']} workers")
    if parent_row and (parent_row.get("parameters") or {}).get("COHORT") not in (None, p.get("COHORT")):
        kinds.append(f"new cohort {p.get('COHORT')} after cohort {parent_row['parameters']['COHORT']}")
    own = None
    thr, commits = _metric(row, "throughput"), _metric(row, "commits")
    if isinstance(thr, dict) and _is_number(thr.get("updates")) and isinstance(commits, dict) and commits.get("rows"):
        cols = commits["columns"]
        last = max(dict(zip(cols, r)).get("cohort_step", 0) for r in commits["rows"])
        own = (last - thr["updates"] + 1, last)
    return {"parent": parent, "root": resume, "kind": ", ".join(kinds), "own_updates": own}


def show_run(runs_dir, run_id: str) -> None:
    """The run's anchor and a one-table header: status, time, device, commit, contract, lineage."""
    from IPython.display import HTML, display

    idx = index(runs_dir)
    row = idx["by_id"][run_id]
    dev = row.get("device") or {}
    gpus = [g.get("name") for g in dev.get("gpus") or [] if isinstance(g, dict)]
    device = f"{len(gpus)} GPU ({', '.join(dict.fromkeys(gpus))})" if gpus else f"CPU ({dev.get('cpu', 'unknown')})"
    git = row.get("git") or {}
    c = run_contract(row)
    info = [["status", row["status"] + (f": {row['reason']}" if row.get("reason") else "")],
            ["notebook", row.get("notebook") or NONE],
            ["started", fmt_iso(row.get("started_at"))],
            ["duration (s)", row.get("duration_s")],
            ["device", device],
            ["git commit", f"{(git.get('commit') or '')[:10]}{' (dirty)' if git.get('dirty') else ''}" or NONE]]
    if c:
        info.append(["contract", f"{c['file']} (scale {c.get('scale')})"])
    lin = lineage(row, idx)
    out = [f'<a id="run-{html.escape(run_id)}"></a>']
    rows_html = "".join(f"<tr><th>{html.escape(k)}</th><td>{cell_html(v, k)}</td></tr>" for k, v in info)
    if lin:
        parent = run_link(lin["parent"]) if lin["parent"] else "(not in this directory)"
        rows_html += (f"<tr><th>lineage</th><td>{html.escape(lin['kind'])} from {parent} at root "
                      f"{root_html(lin['root'])}</td></tr>")
        if lin["own_updates"]:
            a, b = lin["own_updates"]
            rows_html += (f"<tr><th>this run's updates</th><td>cohort updates {a}\u2013{b} (earlier updates in its "
                          f"plots belong to its parent, drawn dashed)</td></tr>")
    used = [u["root"] for u in (row.get("checkpoint_roots") or {}).get("used", [])]
    produced = [u["root"] for u in (row.get("checkpoint_roots") or {}).get("produced", [])]
    for label, roots in (("checkpoints used", used), ("checkpoints produced", produced)):
        if roots:
            rows_html += (f"<tr><th>{label}</th><td>"
                          + "; ".join(root_html(x, idx["runs_by_root"]) for x in dict.fromkeys(roots)) + "</td></tr>")
    out.append(f'<div class="kit-scroll"><table class="kit-table kit-run-header">{rows_html}</table></div>')
    if row.get("notebook") == "(benchmark script)":
        out.append(_bench_html(row))
    display(HTML("".join(out)))


def _bench_html(row: dict) -> str:
    """A kit-bench/1 record: its command, and its result rows grouped by row name."""
    try:
        rec = load_json_strict(Path(row["dir"]) / records.RUN_RECORD_NAME)
    except (FileNotFoundError, ValueError) as e:
        return f"<p>{html.escape(str(e))}</p>"
    parts = [(f"<p>Benchmark command: <code>{html.escape(str(rec.get('command')))}</code>; "
              f"ended {html.escape(fmt_iso(rec.get('ended_at')))}; raw output "
              f"<code>{html.escape(json.dumps(rec.get('raw_output')))}</code>.</p>")]
    if rec.get("errors"):
        parts.append("<p>Errors: " + html.escape(json.dumps(rec["errors"])) + "</p>")
    results = rec.get("results")
    if isinstance(results, list):
        groups: dict[str, list] = {}
        for r in results:
            if isinstance(r, dict):
                groups.setdefault(str(r.get("row", r.get("method", "result"))), []).append(r)
        for name, recs in groups.items():
            parts.append(f"<h4>{html.escape(name)}</h4>")
            curves = [x for x in recs if _is_number(x.get("cohort_step")) and _is_number(x.get("ce_per_token"))]
            for phase in dict.fromkeys(str(x.get("phase", "")) for x in curves):
                mine = [{"update": x["cohort_step"], **{k: v for k, v in x.items() if k not in ("cohort_step", "step")}}
                        for x in curves if str(x.get("phase", "")) == phase]
                fig = learning_figure(mine, f"{row['run_id']}: {phase or 'updates'}", None)
                if fig:
                    parts.append(img_html(*fig))
            parts.append(records_table(recs))
    elif isinstance(results, dict):
        for k, v in results.items():
            parts.append(f"<h4>{html.escape(k)}</h4>")
            if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
                parts.append(records_table(v))
            elif isinstance(v, dict):
                parts.append(kv_table(v))
            else:
                parts.append(f"<p>{cell_html(v, k)}</p>")
    return "".join(parts)


# --- metric views a reviewer expects ---------------------------------------------------------
def _wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if not n:
        return 0.0, 0.0
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


def accuracy_figure(obj, title: str) -> tuple[bytes, str] | None:
    """Bars per family and model (candidate vs baseline, or every study model) with 95% Wilson intervals."""
    from matplotlib.figure import Figure

    series: dict[str, dict[str, tuple[int, int]]] = {}
    if isinstance(obj, dict):
        for fam, r in obj.items():
            for who in ("baseline", "candidate"):
                if f"correct_{who}" in r:
                    series.setdefault(who, {})[fam] = (r[f"correct_{who}"], r["n"])
    elif isinstance(obj, list):
        for r in obj:
            if {"model", "family", "correct", "n"} <= set(r):
                series.setdefault(str(r["model"]), {})[r["family"]] = (r["correct"], r["n"])
    if not series:
        return None
    fams = list(dict.fromkeys(f for s in series.values() for f in s))
    fig = Figure(figsize=(min(12, 2 + 1.6 * len(fams)), 3.2), dpi=90, layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / len(series)
    desc = []
    for i, (who, s) in enumerate(series.items()):
        xs = [j - 0.4 + width * (i + 0.5) for j in range(len(fams))]
        ks = [s.get(f, (0, 0)) for f in fams]
        acc = [k / n if n else 0 for k, n in ks]
        lo_hi = [_wilson(k, n) for k, n in ks]
        ax.bar(xs, acc, width, label=who)
        ax.errorbar(xs, acc, yerr=[[a - lo for a, (lo, _) in zip(acc, lo_hi)], [hi - a for a, (_, hi) in zip(acc, lo_hi)]],
                    fmt="none", ecolor="black", capsize=3, linewidth=1)
        desc.append(f"{who}: " + ", ".join(f"{f} {k}/{n}" for f, (k, n) in zip(fams, ks)))
    ax.set_xticks(range(len(fams)), fams)
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy (95% Wilson interval)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    alt = f"{title}: bar chart of task accuracy by family with 95% intervals; correct/total, " + "; ".join(desc)
    return _png(fig), alt


def bootstrap_figure(bounds: dict, gates: dict | None, dist: dict | None, title: str) -> tuple[bytes, str] | None:
    """Per part, the distribution of the per-token NLL change with its 95% upper bound and the gate threshold.

    With a bootstrap_distribution sidecar the histogram of the resampled statistic is drawn; without one
    (evidence recorded before the sidecar existed) the normal approximation the record states beside
    the bootstrap (its change and normal upper bound), labelled as such."""
    import numpy as np
    from matplotlib.figure import Figure

    parts = [p for p in ("tasks", "retention") if isinstance(bounds.get(p), dict)]
    if not parts:
        return None
    gate_of = {"tasks": "gain", "retention": "retention"}
    fig = Figure(figsize=(5 * len(parts), 3.2), dpi=90, layout="constrained")
    desc = []
    for i, part in enumerate(parts):
        b = bounds[part]
        ax = fig.add_subplot(1, len(parts), i + 1)
        est, upper = b["change_nats_per_token"], b["bootstrap_upper"]
        d = (dist or {}).get(part)
        if isinstance(d, dict) and d.get("counts"):
            edges = d["edges"]
            ax.stairs(d["counts"], edges, fill=True, alpha=0.5, label=f"bootstrap ({fmt(b.get('resamples'))} resamples)")
            how = "histogram of the bootstrap resamples"
        else:
            sd = max((b["normal_upper"] - est) / b.get("normal_multiplier", 1.645), 1e-12)
            xs = np.linspace(est - 4 * sd, est + 4 * sd, 200)
            ax.plot(xs, np.exp(-0.5 * ((xs - est) / sd) ** 2), label="normal approximation")
            how = "normal approximation (bootstrap resamples not recorded for this run)"
            ax.text(0.01, 0.02, "normal approximation:\nresamples not recorded", transform=ax.transAxes, fontsize=7,
                    color="gray")
        ax.axvline(est, color="tab:blue", linestyle=":", label=f"change {fmt(est)}")
        ax.axvline(upper, color="tab:orange", label=f"95% upper {fmt(upper)}")
        g = (gates or {}).get(gate_of[part])
        thr = g.get("threshold") if isinstance(g, dict) else None
        if _is_number(thr):
            ax.axvline(thr, color="tab:red", linestyle="--", label=f"threshold {fmt(thr)}")
        ax.set_title(f"{part}: NLL change (nats/token)", fontsize=10)
        ax.set_yticks([])
        ax.legend(fontsize=7)
        desc.append(f"{part}: {how}, change {fmt(est)}, 95% bootstrap upper bound {fmt(upper)}"
                    + (f", threshold {fmt(thr)} ({'passes' if g.get('passed') else 'fails'})" if _is_number(thr) else ""))
    fig.suptitle(title)
    return _png(fig), f"{title}: distribution of the paired per-token NLL change. " + "; ".join(desc)


def learning_figure(curve: list[dict], title: str, own: tuple[int, int] | None) -> tuple[bytes, str] | None:
    """New-data cross entropy and replay KL, then the other per-update fields; the run's own updates shaded."""
    from matplotlib.figure import Figure

    x_key = "update" if all(_is_number(r.get("update")) for r in curve) else "step"
    if not all(_is_number(r.get(x_key)) for r in curve):
        return None
    xs = [r[x_key] for r in curve]
    names = [k for k in curve[0] if k != x_key and all(_is_number(r.get(k)) for r in curve)]
    split = [k for k in ("ce_per_token", "kl_per_token") if k in names]
    panels = ([("new data vs replay", split)] if split else []) + [(k, [k]) for k in names if k not in split]
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig = Figure(figsize=(4.4 * cols, 3.0 * rows), dpi=90, layout="constrained")
    labels = {"ce_per_token": "new data: cross entropy / token", "kl_per_token": "replay: KL to reference / token"}
    for i, (ptitle, keys) in enumerate(panels):
        ax = fig.add_subplot(rows, cols, i + 1)
        for k in keys:
            ys = [r[k] for r in curve]
            if own:
                mine = [(x, y) for x, y in zip(xs, ys) if x >= own[0] - 1]
                theirs = [(x, y) for x, y in zip(xs, ys) if x <= own[0] - 1]
                line, = ax.plot(*zip(*mine), marker=".", linewidth=1.2, label=labels.get(k, k))
                if theirs:
                    ax.plot(*zip(*theirs), linestyle="--", color=line.get_color(), alpha=0.5)
            else:
                ax.plot(xs, ys, marker="." if len(xs) <= 64 else None, linewidth=1.2, label=labels.get(k, k))
        if own:
            ax.axvspan(own[0] - 0.5, own[1] + 0.5, color="tab:green", alpha=0.08)
        ax.set_xlabel(x_key)
        ax.set_title(ptitle, fontsize=10)
        if len(keys) > 1:
            ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    desc = []
    for k in names:
        desc.append(f"{labels.get(k, k)} from {fmt(curve[0][k])} to {fmt(curve[-1][k])}")
    ownt = (f"; updates {own[0]}\u2013{own[1]} are this run's own (shaded), earlier ones its parent's (dashed)"
            if own else "")
    alt = (f"{title}: learning curves over {x_key}s {fmt(xs[0])}\u2013{fmt(xs[-1])}: " + "; ".join(desc) + ownt)
    return _png(fig), alt


def curves_alt(x_name: str, x: list, series: dict, title: str) -> str:
    return (f"{title}: line plots against {x_name} {fmt(x[0])}\u2013{fmt(x[-1])}: "
            + "; ".join(f"{k} from {fmt(v[0])} to {fmt(v[-1])}" for k, v in series.items()))


GROWTH_NOTE = ("The grown model has more blocks than its fixed-depth control, so their parameter names and shapes "
               "differ: the learned states are not compared elementwise (maximum difference and differing count "
               "are not defined, shown as \u2014). Growth is judged by its final gates against the control.")


def show_metric(runs_dir, run_id: str, name: str) -> bool:
    """A reviewer's view of a known sidecar; False when the generic view applies."""
    from IPython.display import HTML, display

    idx = index(runs_dir)
    row = idx["by_id"][run_id]
    obj = _metric(row, name)
    rbr = idx["runs_by_root"]
    title = f"{run_id}: {name}"
    if name == "loss_curves" and isinstance(obj, list) and obj:
        lin = lineage(row, idx)
        fig = learning_figure(obj, title, lin["own_updates"] if lin else None)
        if fig:
            display(HTML(img_html(*fig)))
            return True
    if name == "accuracy_by_family":
        fig = accuracy_figure(obj, title)
        if fig:
            if isinstance(obj, dict):
                recs = [{"family": f, **v} for f, v in obj.items()]
            else:
                recs = obj
            display(HTML(img_html(*fig) + records_table(recs, runs_by_root=rbr)))
            return True
    if name == "nll_change_bounds" and isinstance(obj, dict):
        fig = bootstrap_figure(obj, _metric(row, "gates"), _metric(row, "bootstrap_distribution"), title)
        recs = [{"part": k, **v} for k, v in obj.items() if isinstance(v, dict)]
        display(HTML((img_html(*fig) if fig else "") + records_table(recs, runs_by_root=rbr)))
        return True
    if name == "bootstrap_distribution":
        display(HTML("<p>Drawn with nll_change_bounds above.</p>"))
        return True
    if name == "comparison" and isinstance(obj, dict):
        note = "" if obj.get("same_parameter_names", True) else f'<p class="kit-note">{GROWTH_NOTE}</p>'
        display(HTML(kv_table(obj, runs_by_root=rbr) + note))
        return True
    if name in ("cost", "cost_total") and is_cpu(row):
        drop = lambda d: {k: v for k, v in d.items() if not k.startswith("gpu_")}
        note = ('<p class="kit-note">This run used no GPU: GPU hours and GPU cost are not shown (the total is '
                'the contract\'s projected price, not money spent).</p>')
        if isinstance(obj, list):
            display(HTML(records_table([drop(x) for x in obj], runs_by_root=rbr) + note))
            return True
        if isinstance(obj, dict):
            display(HTML(kv_table(drop(obj), runs_by_root=rbr) + note))
            return True
    if isinstance(obj, list) and obj and all(isinstance(r, dict) for r in obj) and not any(
            _is_number(r.get("update")) or _is_number(r.get("step")) for r in obj[:1]):
        display(HTML(records_table(obj, runs_by_root=rbr)))
        return True
    if isinstance(obj, dict) and obj and not any(isinstance(v, list) for v in obj.values()):
        if all(isinstance(v, dict) for v in obj.values()):
            display(HTML(records_table([{"": k, **v} for k, v in obj.items()], runs_by_root=rbr)))
        else:
            note = ""
            if name == "projection" and obj.get("clock_started_at") is None:
                note = '<p class="kit-note">clock_started_at \u2014: the study clock had not started.</p>'
            display(HTML(kv_table(obj, runs_by_root=rbr) + note))
        return True
    if isinstance(obj, dict) and set(obj) >= {"columns", "rows"}:
        display(HTML(table_html(obj["columns"], obj["rows"], runs_by_root=rbr)))
        return True
    return False
