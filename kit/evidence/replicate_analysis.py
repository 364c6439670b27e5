"""The replicate analysis over committed runs: per question the paired replicate differences, their mean, a t
interval with k - 1 degrees of freedom and a reading in words (kit/replicate_stats.py), with each replicate's
GPU numeric mode and code beside the committed run's and the plan's amendments. The source of the report's
replicate section (kit/evidence/report/noise.py) and of `kit replicates analyse PLAN`.

    result, words = analyse("runs", prefix="medium"), robustness_by_question("runs")

The decisions to know: replicates are scored on development roles only (the study's retention probes are
records the exposure ledger already holds), so every number here is a development number, never set
against a final effect. Replicate 0 of an arm is its committed run: scored by a `-dev-` run where one exists,
else by any committed development scoring of the same endpoint root on the same development tasks (the
study pilot's candidate c0 is `medium-study-single`'s endpoint), else said to be missing. Pairs: by index.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from kit.digest import load_json_strict, sha256_file
from kit.evidence import archive
from kit.evidence.replicate_design import design_runs
from kit.evidence.replicates import replicate_of
from kit.evidence.run_index import load_runs
from kit.replicate_stats import ANALYSIS_RULE, paired_interval, reading, shared_item_variance

ANALYSIS_FORMAT = "kit-replicate-analysis/1"
STUDY_ARMS = ("single", "dense", "powersgd")
SCOPE = ("development roles only: the study's replicates on its development tasks and on retention probes the "
         "exposure ledger already held (exposed before any replicate ran), the growth pair's on the adaptive job's "
         "dev.tasks and dev.retention; no final item is scored, so no final effect is read against these spreads")
PILOT_EVAL = "kit.study.dev-evaluation/1"
FOLDER_NOTE = "STUDY/replicates/dev"
_R = re.compile(r"-r(\d+)$")


def _sidecar(row: dict, name: str):
    path = Path(row["dir"]) / "metrics" / f"{name}.json"
    return load_json_strict(path) if path.is_file() else None


def _record(row: dict) -> dict:
    return load_json_strict(Path(row["dir"]) / "run.json")


def mode_of(row: dict | None) -> dict:
    """A training run's GPU numeric mode, code and compressor as recorded: {"run", "commit", "gpu_mode",
    "powersgd_orthonormalisation"} (None fields where the run is missing)."""
    if row is None:
        return {"run": None, "commit": None, "gpu_mode": None, "powersgd_orthonormalisation": None}
    rec = _record(row)
    gpu = (rec.get("numeric_profile") or {}).get("gpu")
    on_gpu = bool((rec.get("device") or {}).get("gpus")) or gpu is not None
    mode = ("CPU (no GPU in the run's device record)" if not on_gpu else
            "deterministic (KIT_GPU_DETERMINISTIC=1)" if (gpu or {}).get("deterministic") else
            "default (KIT_GPU_DETERMINISTIC unset; no GPU profile recorded)" if gpu is None else "default")
    ortho = None
    if (rec.get("parameters") or {}).get("ARM") == "powersgd" or "-powersgd" in row["run_id"]:
        ortho = ("Householder" if (Path(row["dir"]) / "metrics" / "powersgd_columns.json").is_file()
                 else "Gram-Schmidt (before the Householder change)")
    return {"run": row["run_id"], "commit": (rec.get("git") or {}).get("commit"), "gpu_mode": mode,
            "powersgd_orthonormalisation": ortho}


def _final_root(row: dict) -> str | None:
    produced = ((_record(row).get("checkpoint_roots") or {}).get("produced")) or []
    return produced[-1]["root"] if produced else None


def _pilot_scores(runs_dir: Path) -> list[tuple[Path, dict]]:
    """Every committed development evaluation file of a study pilot (tracked or archived folders)."""
    folders = [p for p in runs_dir.iterdir() if p.is_dir()] if runs_dir.is_dir() else []
    try:
        folders += archive.folder_paths(runs_dir)
    except (archive.ArchiveError, OSError, ValueError):
        pass
    out = []
    for folder in folders:
        for path in sorted(folder.glob("evals/*.json")):
            try:
                rec = load_json_strict(path)
            except (OSError, ValueError):
                continue
            if isinstance(rec, dict) and rec.get("format") == PILOT_EVAL:
                out.append((path, rec))
    return out


def _committed_copy(runs_dir: Path, name: str, sha256: str) -> Path | None:
    """A file named `name` with that sha256 among the runs folder's tracked or archived folders, else None."""
    folders = [p for p in runs_dir.iterdir() if p.is_dir()] if runs_dir.is_dir() else []
    try:
        folders += archive.folder_paths(runs_dir)
    except (archive.ArchiveError, OSError, ValueError):
        pass
    for folder in folders:
        for path in sorted(folder.rglob(name)):
            if path.is_file() and sha256_file(path) == sha256:
                return path
    return None


def _shown(path: Path, runs_dir: Path) -> str:
    real = archive.origin(path) or path
    try:
        return str(real.relative_to(runs_dir.parent.resolve() if real.is_absolute() else runs_dir.parent))
    except ValueError:
        return str(real)


def _study(rows: dict, runs_dir: Path, prefix: str) -> dict:
    """{arm: {k: scores}} of the study's development scorings, replicate 0 found as the module docstring says."""
    arms: dict[str, dict[int, dict]] = {a: {} for a in STUDY_ARMS}
    dev_sha = None
    for run_id, row in rows.items():
        m = re.fullmatch(rf"{re.escape(prefix)}-study-dev-({'|'.join(STUDY_ARMS)})-r\d+", run_id)
        if not m or row.get("status") != "completed":
            continue
        acc, nll = _sidecar(row, "accuracy_by_family"), _sidecar(row, "nll_change") or {}
        if not acc:
            continue
        k = replicate_of(row)
        dev_sha = dev_sha or (_record(row).get("input_digests") or {}).get("dev_tasks")
        arms[m.group(1)][k] = {
            "k": k, "scored_by": run_id, "n": acc["all"]["n"], "correct": acc["all"]["correct_candidate"],
            "seed_correct": acc["all"]["correct_baseline"],
            "retention": (nll.get("retention") or {}).get("change_nats_per_token"),
            "training": mode_of(rows.get(f"{prefix}-study-{m.group(1)}-r{k}")),
            "per_item": f"not committed: notebook 22 wrote them on the host only ({FOLDER_NOTE}/{m.group(1)}-r{k}.json, "
                        "no digest recorded); re-deriving them needs the replicate's endpoint, i.e. a GPU re-run"}
    pilots = _pilot_scores(runs_dir) if dev_sha else []
    for arm in STUDY_ARMS:
        if 0 in arms[arm] or f"{prefix}-study-{arm}" not in rows:
            continue
        committed = rows[f"{prefix}-study-{arm}"]
        root = _final_root(committed)
        for path, rec in pilots:
            source = rec.get("source") or {}
            if root and dev_sha and source.get("full_root") == root and rec.get("dev_tasks_sha256") == dev_sha:
                seed = next((r for p, r in pilots if p.parent == path.parent and "parameter_digest" in
                             (r.get("source") or {}) and r.get("dev_tasks_sha256") == dev_sha), None)
                arms[arm][0] = {
                    "k": 0, "scored_by": _shown(path, runs_dir), "n": len(rec["tasks"]),
                    "correct": sum(bool(t["correct"]) for t in rec["tasks"]),
                    "seed_correct": sum(bool(t["correct"]) for t in seed["tasks"]) if seed else None,
                    "retention": None, "training": mode_of(committed),
                    "per_item": f"committed: {_shown(path, runs_dir)} (correct bits, replies and per-item NLL)",
                    "note": f"the committed run's endpoint {root[:12]} scored on the same development tasks "
                            f"(sha256 {dev_sha[:12]}) by {_shown(path, runs_dir)}"}
                break
    return arms


def _adaptive(rows: dict, runs_dir: Path, prefix: str) -> dict:
    """{"B_vs_A" | "growth_vs_control": {k: scores}} of the growth pair's development comparisons."""
    out: dict[str, dict[int, dict]] = {"B_vs_A": {}, "growth_vs_control": {}}
    for run_id, row in rows.items():
        m = re.fullmatch(rf"{re.escape(prefix)}-adaptive-dev-([BG])(-r\d+)?", run_id)
        if not m or row.get("status") != "completed":
            continue
        acc, nll = _sidecar(row, "accuracy_by_family"), _sidecar(row, "nll_change_bounds") or {}
        gen = _sidecar(row, "generated_answers") or {}
        ev = _sidecar(row, "evaluation_file") or {}
        copy = (_committed_copy(runs_dir, Path(ev["path"]).name, ev["sha256"])
                if ev.get("path") and ev.get("sha256") else None)
        if not acc:
            continue
        k = replicate_of(row)
        suffix = f"-r{k}" if k else ""
        name, train = (("B_vs_A", f"{prefix}-adaptive-B-control{suffix}") if m.group(1) == "B"
                       else ("growth_vs_control", f"{prefix}-adaptive-B-growth{suffix}"))
        a = acc["all"]

        def part(p, nll=nll):
            b = nll.get(p) or {}
            se = None
            if b.get("normal_upper") is not None and b.get("normal_multiplier"):
                se = (b["normal_upper"] - b["change_nats_per_token"]) / b["normal_multiplier"]
            return b.get("change_nats_per_token"), se, b.get("bootstrap_upper")

        out[name][k] = {"k": k, "scored_by": run_id, "n": a["n"],
                        "accuracy_difference": (a["correct_candidate"] - a["correct_baseline"]) / a["n"],
                        "gained": gen.get("gained"), "lost": gen.get("lost"),
                        "task_nll": part("tasks"), "retention_nll": part("retention"),
                        "training": mode_of(rows.get(train)),
                        "per_item": (f"committed: {_shown(copy, runs_dir)} (the evaluation file its "
                                     "evaluation_file sidecar pins by sha256)" if copy else
                                     f"not committed: the evaluation file {Path(str(ev.get('path'))).name} (sha256 "
                                     f"{str(ev.get('sha256'))[:12]}..., pinned by the run's evaluation_file sidecar) "
                                     "stayed on the GPU host; its bytes cannot be re-derived without a GPU re-run")}
    return out


def _binary_item_variance(pairs: list[tuple[float, float]], n: int) -> float:
    """Shared item variance bound of an accuracy difference from aggregates only: the unpaired one-scoring item
    variance (pA(1-pA) + pB(1-pB)) / n, averaged over the replicates (an upper bound where items correlate)."""
    return sum(a * (1 - a) + b * (1 - b) for a, b in pairs) / len(pairs) / n if pairs else 0.0


def _question(key, subject, values: dict[int, float], item_variance, item_basis, measure, unit, scale, *,
              threshold=None, holds=None, holds_rule=None, margin=None, higher="beats", lower="trails",
              decimals=1) -> dict:
    """One question's entry; `holds` {k: bool}: the committed check's rule applied to replicate k's own
    development scoring (`holds_rule` says how)."""
    ks = sorted(values)
    interval = paired_interval([values[k] for k in ks], item_variance or 0.0)
    held = None if holds is None else sum(bool(holds[k]) for k in ks if k in holds)
    return {"key": list(key), "subject": subject, "measure": measure, "unit": unit, "scale": scale,
            "replicates": ks, "differences": [values[k] for k in ks], "threshold": threshold,
            "passes_in": held, "holds_rule": holds_rule, "interval": interval, "item_variance_basis": item_basis,
            "reading": reading(subject, interval, unit, scale, higher, lower, margin, decimals)}


def _thresholds(rows: dict, prefix: str) -> dict:
    """The committed verdicts' thresholds and outcomes: {(comparison, check): (threshold, passed)}."""
    out = {}
    study = rows.get(f"{prefix}-study-evaluate")
    s = _sidecar(study, "screen_quality") if study else None
    if s:
        t = s.get("thresholds") or {}
        for check, ok in (s.get("checks") or {}).items():
            value = {"task_gain": t.get("min_task_gain"), "retention": t.get("max_retention_upper_nats")}.get(
                check, t.get("noninferiority_margin"))
            out[("quality screen", check)] = (value, ok)
        out[("quality screen", "normal_multiplier")] = (t.get("normal_multiplier"), None)
    for cohort in ("A", "B", "G"):
        row = rows.get(f"{prefix}-adaptive-final-{cohort}")
        gates, gv = (_sidecar(row, "gates"), _sidecar(row, "gate_verdict")) if row else (None, None)
        for check, g in (gates or {}).items():
            out[((gv or {}).get("comparison", cohort), check)] = (g.get("threshold"), g.get("passed"))
    return out


def _study_questions(arms: dict, thresholds: dict) -> list[dict]:
    """The study's questions: each arm against the seed (gain, retention) and each pair of arms."""
    questions = []
    acc = {a: {k: s["correct"] / s["n"] for k, s in by.items()} for a, by in arms.items()}
    seed = {a: {k: s["seed_correct"] / s["n"] for k, s in by.items() if s["seed_correct"] is not None}
            for a, by in arms.items()}
    n_study = next((s["n"] for by in arms.values() for s in by.values()), 0)
    unpaired = "bound: unpaired one-scoring item variance (the replicates' per-item results are not committed)"
    gain_t, _ = thresholds.get(("quality screen", "task_gain"), (None, None))
    margin, _ = thresholds.get(("quality screen", "noninferior_to_single"), (None, None))
    ret_t, _ = thresholds.get(("quality screen", "retention"), (None, None))
    for arm in STUDY_ARMS:
        vals = {k: acc[arm][k] - seed[arm][k] for k in acc[arm] if k in seed[arm]}
        if vals:
            key = ("quality screen", "task_gain") if arm == "powersgd" else ("study", f"{arm}_gain")
            questions.append(_question(
                key, f"study {arm} vs the seed (development accuracy)", vals,
                _binary_item_variance([(acc[arm][k], seed[arm][k]) for k in vals], n_study), unpaired,
                "accuracy difference", "points", 100.0, threshold=gain_t,
                holds={k: v >= gain_t for k, v in vals.items()} if gain_t is not None else None,
                holds_rule="the screen's rule on the replicate's development gain: gain >= threshold"))
        ret = {k: s["retention"] for k, s in arms[arm].items() if s["retention"] is not None}
        if ret:
            key = ("quality screen", "retention") if arm == "powersgd" else ("study", f"{arm}_retention")
            questions.append(_question(
                key, f"study {arm} retention NLL change vs the seed (probes already exposed)", ret, None,
                "none: the per-probe NLL of the replicates is not committed (the spread holds the per-replicate part)",
                "NLL change", "nats/token", 1.0, threshold=ret_t, higher="forgets", lower="improves", decimals=4,
                holds={k: v <= ret_t for k, v in ret.items()} if ret_t is not None else None,
                holds_rule="the replicate's point change <= threshold (its per-probe values, hence the screen's "
                           "normal bound, are not committed)"))
    for i, a in enumerate(STUDY_ARMS):
        for b in STUDY_ARMS[:i]:
            ks = sorted(set(acc[a]) & set(acc[b]))
            if not ks:
                continue
            key = ("quality screen", f"noninferior_to_{b}") if a == "powersgd" else ("study", f"{a}_vs_{b}")
            ni = a == "powersgd" and margin is not None
            diffs = {k: acc[a][k] - acc[b][k] for k in ks}
            z = thresholds.get(("quality screen", "normal_multiplier"), (None, None))[0] or 1.645
            holds = {k: d - z * _binary_item_variance([(acc[a][k], acc[b][k])], n_study) ** 0.5 > -margin
                     for k, d in diffs.items()} if ni else None
            questions.append(_question(
                key, f"study {a} vs {b} (development accuracy)", diffs,
                _binary_item_variance([(acc[a][k], acc[b][k]) for k in ks], n_study), unpaired,
                "accuracy difference", "points", 100.0, margin=margin if ni else None,
                threshold=-margin if ni else None, holds=holds,
                holds_rule=f"the screen's rule on the replicate's development scoring: difference - {z} x its item "
                           "standard error > -margin (the unpaired item variance: the replicates' per-item results "
                           "are not committed)" if ni else None))
    return questions


def _adaptive_questions(adaptive: dict, thresholds: dict) -> list[dict]:
    """The growth pair's questions: B vs A and growth vs control, answers and both NLL changes."""
    questions = []
    for comp, by in adaptive.items():
        if not by:
            continue
        subject = "B vs A" if comp == "B_vs_A" else "growth vs control"
        accs = {k: s["accuracy_difference"] for k, s in by.items()}
        var = [(((s["gained"] + s["lost"]) / s["n"]) - s["accuracy_difference"] ** 2) / s["n"]
               for s in by.values() if s["gained"] is not None]
        questions.append(_question(
            (comp, "generated"), f"{subject} (development accuracy)", accs, sum(var) / len(var) if var else None,
            "bound: one scoring's paired item variance from gained and lost, averaged", "accuracy difference",
            "points", 100.0, threshold=0.0,
            holds={k: s["lost"] <= s["gained"] for k, s in by.items() if s["gained"] is not None},
            holds_rule="the gate's rule on the replicate's development answers: lost <= gained"))
        for part, check in (("task_nll", "gain"), ("retention_nll", "retention")):
            vals = {k: s[part][0] for k, s in by.items() if s[part][0] is not None}
            ses = [s[part][1] for s in by.values() if s[part][1] is not None]
            t, _ = thresholds.get((comp, check), (None, None))
            holds = None if t is None else {k: (s[part][2] < t if check == "gain" else s[part][2] <= t)
                                            for k, s in by.items() if s[part][2] is not None}
            questions.append(_question(
                (comp, check), f"{subject} {'task' if part == 'task_nll' else 'retention'} NLL change (development)",
                vals, sum(x * x for x in ses) / len(ses) if ses else None,
                "bound: one scoring's normal item variance (the sidecar's normal bound), averaged",
                "NLL change", "nats/token", 1.0, threshold=t, holds=holds, higher="worse (NLL up)",
                holds_rule=f"the gate's rule on the replicate's development scoring: its bootstrap upper bound "
                           f"{'<' if check == 'gain' else '<='} threshold",
                lower="better (NLL down)", decimals=4))
    return questions


def analyse(runs_dir, prefix: str = "medium", plan: dict | None = None) -> dict:
    """The analysis (module docstring) as a JSON-ready dict: {"format", "prefix", "rule", "scope", "arms":
    {arm: [{k, scored_by, n, correct, seed_correct, retention, training: mode_of(...), per_item (committed or
    why not), note?}]}, "missing": [sentences], "questions": [{key, subject, measure, unit, scale, replicates, differences, threshold,
    passes_in, holds_rule, interval (kit.replicate_stats.paired_interval), item_variance_basis, reading}], "modes":
    [sentences], "amendments": [the plan's]}."""
    runs_dir = Path(runs_dir)
    rows = {r["run_id"]: r for r in load_runs(runs_dir)}
    arms, adaptive = _study(rows, runs_dir, prefix), _adaptive(rows, runs_dir, prefix)
    thresholds = _thresholds(rows, prefix)
    questions, missing = [], []
    for arm in STUDY_ARMS:
        if arms[arm] and 0 not in arms[arm]:
            missing.append(f"study/{arm}: replicate 0 (the committed run {prefix}-study-{arm}) has no development "
                           "score in the evidence (no -dev- run and no pilot scoring of its endpoint root)")
    questions += _study_questions(arms, thresholds) + _adaptive_questions(adaptive, thresholds)
    return {"format": ANALYSIS_FORMAT, "prefix": prefix, "rule": ANALYSIS_RULE, "scope": SCOPE,
            "arms": {**{f"study/{a}": [arms[a][k] for k in sorted(arms[a])] for a in STUDY_ARMS},
                     **{f"adaptive/{c}": [adaptive[c][k] for k in sorted(adaptive[c])] for c in adaptive}},
            "missing": missing, "questions": questions, "modes": mode_sentences(arms, adaptive),
            "amendments": list((plan or {}).get("amendments") or [])}


def mode_sentences(arms: dict, adaptive: dict) -> list[str]:
    """Each replicate's training mode and code beside its committed run's, one sentence per arm."""
    out = []
    for name, by in [*((f"study/{a}", arms[a]) for a in STUDY_ARMS), *((f"adaptive/{c}", b) for c, b in adaptive.items())]:
        if not by:
            continue
        parts = []
        for k in sorted(by):
            t = by[k]["training"]
            if t["run"] is None:
                parts.append(f"r{k}: training run not in the evidence")
                continue
            ortho = f", PowerSGD {t['powersgd_orthonormalisation']}" if t["powersgd_orthonormalisation"] else ""
            parts.append(f"r{k} {t['run']}: GPU mode {t['gpu_mode']}, code {(t['commit'] or '?')[:8]}{ortho}")
        modes = {by[k]["training"]["gpu_mode"] for k in by if by[k]["training"]["run"]}
        differ = " (modes differ: the spread mixes training noise with the mode change)" if len(modes) > 1 else ""
        out.append(f"{name}: " + "; ".join(parts) + differ + ".")
    return out


def robustness_by_question(runs_dir, prefix: str = "medium", brief: bool = False) -> dict[tuple[str, str], str]:
    """Per frozen verdict key of the report's verdict rows (kit/evidence/report/verdict_rows.py: the row's
    (comparison, check), e.g. ("B_vs_A", "gain"), ("growth_vs_control", "retention"), ("quality screen",
    "noninferior_to_single"), ("quality screen", "task_gain")): a short reading in words of the replicates,
    "passes in 3 of 3 replicates (committed verdict: pass; development roles; mean -0.0513 nats/token, 95% t
    interval [-0.0870, -0.0155], 2 df)": the committed check's rule applied to each replicate's development
    scoring (the question's `holds_rule`), then the t interval of the replicates' mean.
    A key with fewer than 2 replicates is absent. Signature: robustness_by_question(runs_dir, prefix="medium") ->
    {(comparison, check): str}; the numbers are analyse(runs_dir, prefix)'s; `brief`: the count alone."""
    out = {}
    runs_dir = Path(runs_dir)
    committed = _thresholds({r["run_id"]: r for r in load_runs(runs_dir)}, prefix)
    for q in analyse(runs_dir, prefix)["questions"]:
        key = tuple(q["key"])
        iv, scale, unit = q["interval"], q["scale"], q["unit"]
        if q["passes_in"] is None or key[0] == "study" or iv["k"] < 2:  # one run is the verdict itself, not a spread
            continue
        d = 1 if scale == 100.0 else 4
        if brief:  # a verdict row's robustness column: the count; the interval is in the replicate section
            out[key] = f"passes in {q['passes_in']} of {iv['k']} replicates (development items)"
            continue
        verdict = {True: "pass", False: "fail"}.get(committed.get(key, (None, None))[1], "none")
        text = (f"passes in {q['passes_in']} of {iv['k']} replicates (committed verdict: {verdict}; development "
                f"roles; mean {scale * iv['mean']:+.{d}f} {unit}")
        if iv["estimable"]:
            text += f", 95% t interval [{scale * iv['lower']:+.{d}f}, {scale * iv['upper']:+.{d}f}], {iv['df']} df)"
        else:
            text += f"; {iv['why']})"
        out[key] = text
    return out


FINAL_SCOPE = ("the design's fresh final set, opened once after every replicate was committed (kit.evidence."
               "replicate_design.open_final_set) and every replicate scored on it once; the k replicates share its "
               "items, so the shared item-sampling variance comes from the per-item results (two-way decomposition)")


def _per_item(records: dict, a: str, b: str, measure: str):
    """[per-item differences a - b] of two score records on one opened set, the row mean equal to the
    aggregate difference: correct bits for accuracy, NLL sums over the mean tokens for NLL per token."""
    ra, rb = records[a]["rows"], records[b]["rows"]
    if [r["id"] for r in ra] != [r["id"] for r in rb] or records[a]["tasks_sha256"] != records[b]["tasks_sha256"]:
        raise ValueError(f"final scores {a!r} and {b!r}: different tasks (field 'tasks_sha256'); expected one opened set")
    if measure == "accuracy":
        return [float(x["correct"]) - float(y["correct"]) for x, y in zip(ra, rb)]
    mean_tokens = sum(x["tokens"] for x in ra) / len(ra)
    return [(x["nll_sum"] - y["nll_sum"]) / mean_tokens for x, y in zip(ra, rb)]


def analyse_final(design: dict, scores: dict) -> dict:
    """The replicate analysis on a design's fresh final sets (kit/evidence/replicate_design.py, `score_final_set`'s
    records): {"format", "design", "rule", "scope", "questions"} with one question per pair of study arms and for
    growth vs control (and per study arm against the seed where "seed" was scored), each on accuracy and NLL per
    token: the k paired differences (pairs by replicate index), a
    t interval with k - 1 df plus the shared item variance from the per-item results, and the reading.
    `scores`: {set name: {label: record}}, labels the design's run ids."""
    p = design["run_prefix"]
    runs = set(design_runs(design))
    comparisons = []  # (set, subject, key, {k: (a label, b label)})
    arms = sorted(a.split("/", 1)[1] for a in design["k"])
    if "seed" in (scores.get("study") or {}):  # the seed scored once on the set: each replicate's gain over it
        comparisons += [("study", f"study {a} vs the seed", ("study", f"{a}_gain"),
                         {k: (f"{p}study-{a}-r{k}", "seed") for k in range(design["k"][f"study/{a}"])}) for a in arms]
    for i, a in enumerate(arms):
        for b in arms[i + 1:]:
            ks = range(min(design["k"][f"study/{a}"], design["k"][f"study/{b}"]))
            comparisons.append(("study", f"study {a} vs {b}", ("study", f"{a}_vs_{b}"),
                                {k: (f"{p}study-{a}-r{k}", f"{p}study-{b}-r{k}") for k in ks}))
    pair = design["pairs"].get("growth_vs_control")
    if pair:
        comparisons.append(("growth", "growth vs control", ("growth_vs_control", "final"),
                            {k: (f"{p}adaptive-B-growth-r{k}", f"{p}adaptive-B-control-r{k}") for k in range(pair["k"])}))
    questions = []
    for name, subject, key, by_k in comparisons:
        records = scores.get(name) or {}
        lacking = [lab for ab in by_k.values() for lab in ab if lab not in records and lab in runs]
        if lacking:
            raise ValueError(f"final scores of set {name!r}: no record of {lacking[0]}; expected every replicate scored")
        for measure, unit, scale, decimals, higher, lower in (
                ("accuracy", "points", 100.0, 1, "beats", "trails"),
                ("NLL per token", "nats/token", 1.0, 4, "worse (NLL up)", "better (NLL down)")):
            matrix = np.array([_per_item(records, a, b, measure) for a, b in by_k.values()])
            values = {k: float(row.mean()) for k, row in zip(by_k, matrix)}
            questions.append(_question(
                (*key, measure), f"{subject} on the fresh final set ({measure})", values,
                shared_item_variance(matrix), "the per-item results: two-way replicates x items decomposition",
                f"{measure} difference", unit, scale, higher=higher, lower=lower, decimals=decimals))
    return {"format": ANALYSIS_FORMAT, "design": design["name"], "rule": ANALYSIS_RULE, "scope": FINAL_SCOPE,
            "questions": questions}
