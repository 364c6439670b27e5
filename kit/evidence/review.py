"""The reviewer's half of `kit report`: the runs as an index, the verdict rows and tables, the scope
paragraph (the verdict section is composed in kit.evidence.review_verdicts, the analyses in
kit.evidence.review_analysis, the run sections in kit.evidence.review_sections).

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

import functools
import html
import re
import subprocess
from pathlib import Path

from kit.digest import load_json_strict, loads_strict, sha256_json
from kit.evidence import records
from kit.evidence.review_format import (
    fmt,
    is_number,
    kv_table,
    records_table,
    root_html,
    run_link,
    short,
)

HEX64 = re.compile(r"^[0-9a-f]{64}$")
TIME_KEYS = re.compile(r"(_at|^now)$")
NONE = "\u2014"
REPO = Path(__file__).resolve().parents[2]


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
    from kit.evidence.run_index import split_selection

    p, pattern = split_selection(runs_dir)
    spec = str(p.resolve() / pattern) if pattern else str(p.resolve())
    return _index_cached(spec, p.stat().st_mtime if p.exists() else 0.0)


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


def recorded_contract(digest: str, commit: str | None, where: str) -> dict:
    """The contract a run recorded by canonical digest (contract_for), without the `file` and `commit`
    this module adds: the body its gates and roles were computed from. Refused, naming `where`, when no
    contracts/*.json now or at `commit` has that digest."""
    found = contract_for(digest, commit)
    if found is None:
        raise ValueError(f"{where}: no contracts/*.json (now or at the run's commit) has the recorded contract "
                         f"digest {digest}")
    return {k: v for k, v in found.items() if k not in ("file", "commit")}


def run_contract(row: dict) -> dict | None:
    digest = row.get("contract_digest")
    if not digest:
        return None
    return contract_for(digest, (row.get("git") or {}).get("commit"))


def gpu_names(row: dict) -> list[str]:
    """The names of the GPUs a run record's `device` lists (one per device the run saw), [] on CPU."""
    return [g.get("name") for g in (row.get("device") or {}).get("gpus") or [] if isinstance(g, dict)]


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
                    num = {k: v for k, v in g.items() if is_number(v)}
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


SPEED_CHECK = "speed: candidate / single-GPU active throughput"


def _screen_rows(r: dict, screen: str, s: dict, idx: dict) -> list[dict]:
    arms = _arm_runs(r, idx)
    src = f"{r['run_id']}/metrics/{screen}.json"
    t, inp = s.get("thresholds") or {}, s.get("inputs") or {}
    base = {"experiment": "study", "comparison": f"{s.get('name', screen)} screen", "source": src}
    out = []
    if screen == "screen_speed":
        out.append({**base, "check": SPEED_CHECK,
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
                       threshold=f"> {fmt(-margin) if is_number(margin) else NONE}",
                       threshold_value=-margin if is_number(margin) else None)
            if ctrl in arms:
                row["runs"] = row["runs"] + [arms[ctrl]]
        else:
            row.update(statistic=name, value=None, threshold=s.get("rule", ""), threshold_value=None)
        out.append(row)
    out.append({**base, "check": "quality screen (all parts)", "statistic": s.get("rule", ""), "value": None,
                "threshold": "every part passes", "threshold_value": None, "verdict": s.get("verdict"),
                "runs": [r["run_id"]]})
    return out


VERDICT_COLUMNS = ["comparison", "check", "statistic", "value", "threshold", "which side passes", "verdict", "runs"]


def direction_text(row: dict) -> str:
    """One sentence beside a threshold: which direction of the statistic is better, and what passing means,
    read from the row's check and threshold value."""
    check, tv = row.get("check", ""), row.get("threshold_value")
    t = fmt(tv) if is_number(tv) else ""
    if row.get("experiment") == "adaptive" and check == "gain":
        return (f"Lower is better: the upper bound of the NLL change must be below {t}, i.e. the candidate's NLL "
                "went down by more than that, with 95% confidence.")
    if check == "retention":
        return (f"Lower is better: the upper bound of the retention NLL change must be at most {t} nats/token "
                "(the candidate forgot at most that much).")
    if check == "generated":
        return "Fewer lost is better: it passes when no more correct answers were lost than gained."
    if check.startswith("learned state equal"):
        return "Only 0 passes: the learned states must be bit-equal."
    if check.startswith("speed"):
        return f"Higher is better: the candidate must reach at least {t} times single's active throughput."
    if check == "task_gain":
        return f"Higher is better: the task accuracy gain over the seed must be at least {t}."
    if check.startswith("noninferior_to_"):
        return (f"Higher is better: the lower bound of the accuracy difference must stay above {t} "
                "(not worse than the control by more than the margin).")
    return ""


def verdict_table_html(rows: list[dict], table_id: str, idx: dict) -> str:
    head = "".join(f"<th>{c}</th>" for c in VERDICT_COLUMNS)
    body = []
    for v in rows:
        value = v.get("value")
        data = f' data-value="{html.escape(repr(value))}"' if is_number(value) else ""
        tv = v.get("threshold_value")
        tdata = f' data-value="{html.escape(repr(tv))}"' if is_number(tv) else ""
        runs = ", ".join(run_link(n) for n in dict.fromkeys(v["runs"]))
        verdict = str(v.get("verdict"))
        body.append(
            f'<tr data-source="{html.escape(v["source"])}"><td>{html.escape(v["comparison"])}</td>'
            f'<td>{html.escape(v["check"])}</td><td>{html.escape(v["statistic"])}</td>'
            f'<td class="num value"{data}>{html.escape(fmt(value))}</td>'
            f'<td class="threshold"{tdata}>{html.escape(v["threshold"])}</td>'
            f'<td class="direction">{html.escape(direction_text(v))}</td>'
            f'<td class="verdict verdict-{html.escape(verdict)}">{html.escape(verdict)}</td><td>{runs}</td></tr>')
    return (f'<div class="kit-scroll"><table id="{table_id}" class="kit-table kit-verdicts"><thead><tr>{head}'
            f'</tr></thead><tbody>{"".join(body)}</tbody></table></div>')


def projection_html(idx: dict) -> str:
    """The study's projection to its seed's hardware (bench/study_projection.py, kit-bench/1 records with
    results.projection and results.validation): the link model validated on the emulated link, predicted
    beside measured; the projected study; and its assumptions."""
    parts = []
    for r in idx["runs"]:
        if r.get("notebook") != "(benchmark script)":
            continue
        try:
            rec = load_json_strict(Path(r["dir"]) / records.RUN_RECORD_NAME)
        except (FileNotFoundError, ValueError):
            continue
        res = rec.get("results")
        if not (isinstance(res, dict) and isinstance(res.get("projection"), list) and isinstance(res.get("validation"), list)):
            continue
        fit = res.get("fit") or {}
        parts.append(f"<h3>Shared-gradient study projected to two L40S hosts across zones ({html.escape(r['run_id'])})</h3>"
                     f"<p>Model: {html.escape(str(fit.get('model', '')))}; link efficiency "
                     f"{html.escape(fmt(fit.get('link_efficiency')))} fitted on the runs "
                     f"{html.escape(', '.join((rec.get('parameters') or {}).get('fit_runs', [])))}, validated on "
                     f"{html.escape(', '.join((rec.get('parameters') or {}).get('validation_runs', [])))} "
                     "(rows with held_out true). A projection, not a measurement on the seed's hosts.</p>")
        parts.append("<h4>Validation on the emulated link: predicted vs measured seconds per update</h4>"
                     + records_table(res["validation"]))
        parts.append("<h4>Projection: per-update time, speed screen, cross-zone transfer, 6 h and $100 bounds</h4>"
                     + records_table(res["projection"]))
        if isinstance(res.get("assumptions"), dict):
            parts.append("<h4>Assumptions</h4>" + kv_table(res["assumptions"]))
    return "".join(parts)


# --- what the evidence shows -----------------------------------------------------------------
SCALE_TEXT = {
    "tiny": ("tiny scale: the kit's tiny seed, a few updates on CPU cores. This shows that the whole "
             "pipeline runs and that every record, checkpoint root, gate and screen is computed from committed "
             "inputs; it does not measure learning quality: a gate or screen that fails (or passes) at this "
             "scale says nothing about the method at full scale."),
    "medium": ("medium scale: the frozen trial's structure and exact counts on the kit's small seed (about "
               "126M parameters, pretrained on one H200), with the free choices fixed by a committed pilot on "
               "development roles. Verdicts speak about the method at that model size, not the trial's 1.7B result."),
    "full": ("full scale: the frozen contract. The verdicts below are the trial's result, on public task "
             "families only; they do not establish general assistant capability."),
}


def row_contract_digest(row: dict, idx: dict) -> str | None:
    """The contract digest of the first run behind a verdict row that records one (a comparison run
    records none; the runs it compares do)."""
    for name in row.get("runs") or []:
        digest = (idx["by_id"].get(name) or {}).get("contract_digest")
        if digest:
            return digest
    return None


def _runs_text(names) -> str:
    return ", ".join(dict.fromkeys(names))


def scope_paragraphs(runs_dir) -> list[str]:
    """One paragraph per contract with gates or screens. Every claim in it is computed from the evidence
    and names the runs it stands on; only the scale's description (what a scale can and cannot show)
    is fixed text."""
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
    migration_said = False
    for key, c, r in experiments:
        scale = (c or {}).get("scale")
        digest = r.get("contract_digest")
        name = (c or {}).get("file") or f"contract {short(digest or '')}"
        where = f" at commit {c['commit'][:10]}" if c and c.get("commit") else ""
        is_study = _metric(r, "screen_quality") is not None
        exp = "study" if is_study else "adaptive"
        text = [f"<b>{html.escape(name)}</b>{where}: " + (SCALE_TEXT.get(scale) or
                                                          f"scale {html.escape(str(scale))} (not described).")]
        text += [html.escape(t) for t in (seed_sentence(idx, digest), accuracy_sentence(idx, digest)) if t]
        mine = [v for v in rows[exp] if row_contract_digest(v, idx) == digest]
        passed = sum(1 for v in mine if v["verdict"] == "pass")
        failed = sum(1 for v in mine if v["verdict"] == "fail")
        text.append(html.escape(f"Of the {len(mine)} verdict row(s) of {name}, {passed} pass and {failed} fail "
                                f"(from {_runs_text(v['source'].split('/')[0] for v in mine) or 'no run'})."))
        if not is_study and not migration_said:
            sentence = migration_sentence(rows["adaptive"], idx)
            if sentence:
                text.append(html.escape(sentence))
                migration_said = True
        elif is_study:
            speed = [v for v in mine if v["check"].startswith("speed")]
            arms = [x for x in idx["runs"] if (x.get("parameters") or {}).get("ARM") and x.get("contract_digest") == digest]
            cpu = all(is_cpu(x) for x in arms)
            if speed and cpu:
                text.append(html.escape(
                    f"The speed ratio ({fmt(speed[0]['value'])}, {speed[0]['source'].split('/')[0]}) was measured on "
                    f"CPU ({_runs_text(x['run_id'] for x in arms)}): it measures start-up and per-update overhead "
                    "there, not the throughput of the contract's GPUs; no GPU cost is priced for CPU runs."))
            elif speed:
                text.append(html.escape(
                    f"The speed ratio is {fmt(speed[0]['value'])} ({speed[0]['source'].split('/')[0]}); GPU time "
                    "and cost are reported per arm, separately from the screen."))
        out.append(" ".join(text))
    return out


def _split_of(r: dict) -> str:
    """Which split an evaluation run scored: its SPLIT parameter (adaptive dev/final), else the study's
    evaluation (the screens' held-out items)."""
    return str((r.get("parameters") or {}).get("SPLIT") or "study evaluation")


def accuracy_points(idx: dict, digest: str | None) -> list[dict]:
    """Every per-family task accuracy recorded by a run of the contract `digest`: {run, split, model,
    family, accuracy, correct, n}; the "all" row included (family "all")."""
    out = []
    for r in idx["runs"]:
        if r.get("contract_digest") != digest:
            continue
        acc = _metric(r, "accuracy_by_family")
        split = _split_of(r)
        params = r.get("parameters") or {}
        if isinstance(acc, dict):
            models = {"baseline": "seed" if str(params.get("BASELINE", "")).startswith("seed:") else "baseline",
                      "candidate": "candidate"}
            for family, row in acc.items():
                if not isinstance(row, dict):
                    continue
                for side, model in models.items():
                    if is_number(row.get(f"accuracy_{side}")):
                        out.append({"run": r["run_id"], "split": split, "model": model, "family": family,
                                    "accuracy": row[f"accuracy_{side}"], "correct": row.get(f"correct_{side}"),
                                    "n": row.get("n")})
        elif isinstance(acc, list):
            out += [{"run": r["run_id"], "split": split, "model": x.get("model"), "family": x.get("family"),
                     "accuracy": x["accuracy"], "correct": x.get("correct"), "n": x.get("n")}
                    for x in acc if isinstance(x, dict) and is_number(x.get("accuracy"))]
    return out


def accuracy_sentence(idx: dict, digest: str | None) -> str | None:
    """The highest task accuracy per split, with the run, model and family that reached it."""
    points = [p for p in accuracy_points(idx, digest) if p["family"] != "all"]
    parts = []
    for split in dict.fromkeys(p["split"] for p in points):
        best = max((p for p in points if p["split"] == split), key=lambda p: p["accuracy"])
        parts.append(f"{split} {fmt(best['accuracy'])} ({best['run']}, {best['model']}, {best['family']})")
    return ("Measured: the highest task accuracy of any model and family, per split: " + "; ".join(parts) + "."
            if parts else None)


def seed_sentence(idx: dict, digest: str | None) -> str | None:
    """How many generated tasks the seed answers, per split, from its overall ("all") rows."""
    seeds = [p for p in accuracy_points(idx, digest) if p["model"] == "seed" and p["family"] == "all"
             and is_number(p.get("correct")) and is_number(p.get("n"))]
    groups: dict[tuple, list[str]] = {}
    for p in seeds:
        groups.setdefault((p["split"], p["correct"], p["n"]), []).append(p["run"])
    parts = [f"{'none' if correct == 0 else fmt(correct)} of {fmt(n)} on the {split} split ({_runs_text(runs)})"
             for (split, correct, n), runs in groups.items()]
    return "Measured: of the generated tasks, the seed answers " + "; ".join(parts) + "." if parts else None


def migration_sentence(rows: list[dict], idx: dict) -> str | None:
    """Migration equality per scale, each scale with the comparisons it stands on: "exact at N of M
    scale(s)" counts only scales whose every elementwise comparison found equal learned states."""
    mig = [v for v in rows if v["check"] == "learned state equal to the uninterrupted control"]
    if not mig:
        return None
    by_scale: dict[str, list[dict]] = {}
    for v in mig:
        c = None
        for n in v["runs"]:
            c = run_contract(idx["by_id"][n]) if n in idx["by_id"] else None
            if c:
                break
        where = (c or {}).get("scale") or ("GPU campaign" if "#results/" in v["source"] else "unrecorded scale")
        by_scale.setdefault(where, []).append(v)
    exact = [s for s, vs in by_scale.items() if all(v["verdict"] == "pass" for v in vs)]
    parts = [f"{s} ({'equal' if s in exact else 'not equal'}: "
             f"{_runs_text(v['source'].split('/')[0] for v in vs)}, max |parameter difference| "
             f"{fmt(max(v['value'] for v in vs if is_number(v['value'])) if any(is_number(v['value']) for v in vs) else None)})"
             for s, vs in by_scale.items()]
    return (f"Migration equality is exact at {len(exact)} of {len(by_scale)} scale(s) in this evidence: "
            + "; ".join(parts) + ". No other scale was measured.")


def show_scope(runs_dir) -> None:
    from IPython.display import HTML, display

    paras = scope_paragraphs(runs_dir)
    if not paras:
        paras = ["No gate or screen was computed: this directory holds runs without a final comparison."]
    display(HTML("".join(f'<p class="kit-scope">{p}</p>' for p in paras)))
