"""Training noise as data: the between-replicate spread of the development scores, and each frozen verdict
read against it (the runs: campaigns/medium-replicates-plan.json; the notes in kit/replicates.py).

One call, from the run rows of `kit.evidence.run_index.load_runs` (sidecars read from each row's dir/metrics/):

    spread = replicate_spread(load_runs("runs"), prefix="medium")

It returns {"format", "prefix", "rule", "arms", "comparisons", "noise_floor", "verdicts"}: per arm and per
comparison the mean and between-replicate sd of pooled and per-family development accuracy and of the NLL
change; the dense-vs-single comparison as the noise floor; and per frozen verdict (the committed final runs)
its effect, the spread of its measure and whether the effect exceeds twice it (`RULE`). Fields: the function.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from kit.digest import load_json_strict

SPREAD_FORMAT = "kit-replicate-spread/1"
RULE = ("exceeds: |effect| > 2 x the between-replicate sd of the same measure on development roles (the sd of "
        "the paired difference across replicates for a comparison of two arms; of the arm's own score for a "
        "comparison against a fixed baseline); 2 sd is about the range one more replicate falls in by noise alone")
STUDY_ARMS = ("single", "dense", "powersgd")
_SUFFIX = re.compile(r"-r(\d+)$")


def _stat(values: list[float]) -> dict:
    n = len(values)
    mean = sum(values) / n if n else None
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n >= 2 else None
    return {"values": values, "n": n, "mean": mean, "sd": sd}


def _sidecar(row: dict, name: str) -> dict | None:
    path = Path(row["dir"]) / "metrics" / f"{name}.json"
    return load_json_strict(path) if path.is_file() else None


def replicate_of(row: dict) -> int:
    """A run's replicate index: parameter REPLICATE, else the run id's `-r<k>` suffix, else 0."""
    value = (row.get("parameters") or {}).get("REPLICATE")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    m = _SUFFIX.search(row["run_id"])
    return int(m.group(1)) if m else 0


def _scores(row: dict, side: str, nll_sidecar: str) -> dict | None:
    """(pooled accuracy, per family, task and retention NLL change) of one side of a development scoring."""
    acc, nll = _sidecar(row, "accuracy_by_family"), _sidecar(row, nll_sidecar) or {}
    if not acc or "all" not in acc:
        return None

    def change(part):
        return (nll.get(part) or {}).get("change_nats_per_token")

    return {"pooled": acc["all"][f"accuracy_{side}"],
            "by_family": {f: v[f"accuracy_{side}"] for f, v in acc.items() if f != "all"},
            "task_nll_change": change("tasks"), "retention_nll_change": change("retention")}


def _arm_entry(by_k: dict[int, dict], runs: dict[int, str], nll: bool = True) -> dict:
    ks = sorted(by_k)
    families = sorted({f for s in by_k.values() for f in s["by_family"]})
    entry = {"replicates": ks, "runs": [runs[k] for k in ks],
             "pooled_accuracy": _stat([by_k[k]["pooled"] for k in ks]),
             "accuracy_by_family": {f: _stat([by_k[k]["by_family"][f] for k in ks if f in by_k[k]["by_family"]])
                                    for f in families}}
    if nll:
        for part in ("task_nll_change", "retention_nll_change"):
            entry[part] = _stat([by_k[k][part] for k in ks if by_k[k][part] is not None])
    return entry


def _collect(rows: list[dict], prefix: str) -> tuple[dict, dict, dict]:
    """{arm: {k: scores}}, {arm: {k: run id}}, {k: growth-vs-control effect scores} of the completed runs."""
    arms: dict[str, dict[int, dict]] = {}
    runs: dict[str, dict[int, str]] = {}
    growth: dict[int, dict] = {}
    study = re.compile(rf"^{re.escape(prefix)}-study-dev-({'|'.join(STUDY_ARMS)})-r\d+$")
    dev = re.compile(rf"^{re.escape(prefix)}-adaptive-dev-([BG])(-r\d+)?$")
    for row in rows:
        if row.get("status") != "completed":
            continue
        k = replicate_of(row)
        if m := study.match(row["run_id"]):
            s = _scores(row, "candidate", "nll_change")
            if s:
                arms.setdefault(f"study/{m.group(1)}", {})[k] = s
                runs.setdefault(f"study/{m.group(1)}", {})[k] = row["run_id"]
        elif m := dev.match(row["run_id"]):
            name = "B-control" if m.group(1) == "B" else "B-growth"
            s = _scores(row, "candidate", "nll_change_bounds")
            if s:
                arms.setdefault(f"adaptive/{name}", {})[k] = s
                runs.setdefault(f"adaptive/{name}", {})[k] = row["run_id"]
            if m.group(1) == "G" and s:
                base = _scores(row, "baseline", "nll_change_bounds")
                growth[k] = {**s, "difference": s["pooled"] - base["pooled"]}
    return arms, runs, growth


def _verdicts(rows: list[dict], prefix: str, arm_stats: dict, comparisons: dict) -> list[dict]:
    """Each frozen verdict's effect (the committed final runs) beside the replicate spread of its measure."""
    by_id = {r["run_id"]: r for r in rows if r.get("status") == "completed"}
    out = []

    def add(verdict, measure, effect, stat, spread_from):
        sd = (stat or {}).get("sd")
        out.append({"verdict": verdict, "measure": measure, "effect": effect, "spread_sd": sd,
                    "spread_from": spread_from, "ratio": None if not sd else abs(effect) / sd,
                    "exceeds": None if sd is None else abs(effect) > 2 * sd})

    study = by_id.get(f"{prefix}-study-evaluate")
    paired = _sidecar(study, "paired_task_change") if study else None
    for name, change in sorted((paired or {}).items()):
        a, _, b = name.partition(" vs ")
        if b == "seed":
            add(f"study: {name}", "final task accuracy gain over the seed", change["difference"],
                (arm_stats.get(f"study/{a}") or {}).get("pooled_accuracy"), f"study/{a} pooled accuracy")
        elif a in STUDY_ARMS and b in STUDY_ARMS and STUDY_ARMS.index(a) > STUDY_ARMS.index(b):
            key = f"study/{a} vs {b}"
            add(f"study: {name}", "final task accuracy difference", change["difference"],
                (comparisons.get(key) or {}).get("accuracy_difference"), key)
    retention = _sidecar(study, "retention_change") if study else None
    for arm, change in sorted((retention or {}).items()):
        add(f"study: {arm} retention", "retention NLL change against the seed", change["change_nats_per_token"],
            (arm_stats.get(f"study/{arm}") or {}).get("retention_nll_change"), f"study/{arm} retention NLL change")
    growth = comparisons.get("adaptive/growth vs control") or {}
    for run, label, key in ((f"{prefix}-adaptive-final-G", "growth vs control", None),
                            (f"{prefix}-adaptive-final-B", "B vs A", "adaptive/B-control")):
        row = by_id.get(run)
        acc = _sidecar(row, "accuracy_by_family") if row else None
        nll = (_sidecar(row, "nll_change_bounds") or {}) if row else {}
        if not acc:
            continue
        diff = acc["all"]["accuracy_candidate"] - acc["all"]["accuracy_baseline"]
        if key is None:
            add(f"adaptive: {label}", "final task accuracy difference", diff, growth.get("accuracy_difference"),
                "adaptive/growth vs control")
            for part in ("task", "retention"):
                effect = (nll.get("tasks" if part == "task" else "retention") or {}).get("change_nats_per_token")
                if effect is not None:
                    add(f"adaptive: {label}", f"{part} NLL change", effect, growth.get(f"{part}_nll_change"),
                        "adaptive/growth vs control")
        else:
            add(f"adaptive: {label}", "final task accuracy difference", diff,
                (arm_stats.get(key) or {}).get("pooled_accuracy"), f"{key} pooled accuracy")
    return out


def replicate_spread(rows: list[dict], prefix: str = "medium") -> dict:
    """The spread of the replicates among `rows` (load_runs' rows) and the frozen verdicts against it.

    Counted: completed development scorings only, the study's notebook-22 runs `<prefix>-study-dev-<arm>-r<k>`
    (sidecars `accuracy_by_family`, `nll_change`) and the growth pair's notebook-13 runs
    `<prefix>-adaptive-dev-B[-r<k>]` and `-dev-G[-r<k>]` (`accuracy_by_family`, `nll_change_bounds`; the committed
    ones are replicate 0); the index is parameter REPLICATE, else the `-r<k>` suffix, else 0.
    Returned (accuracies as fractions, NLL changes in nats per assistant token), S = {"values", "n", "mean",
    "sd"} with sd between replicates (ddof 1; None below two values):
    - `arms`: {"study/<arm>" | "adaptive/B-control" | "adaptive/B-growth": {"replicates", "runs",
      "pooled_accuracy": S, "accuracy_by_family": {family: S}, "task_nll_change": S, "retention_nll_change": S}}
      (the study's changes against the seed, B's control's against A, the growth arm's against its control);
    - `comparisons`: {"study/<a> vs <b>": {"replicates", "accuracy_difference": S}, "adaptive/growth vs control":
      {..., "task_nll_change": S, "retention_nll_change": S}}, paired by replicate index;
    - `noise_floor`: comparisons["study/dense vs single"] (the same update in exact arithmetic) or None;
    - `verdicts`: [{"verdict", "measure", "effect", "spread_sd", "spread_from", "ratio", "exceeds"}] for the
      committed `<prefix>-study-evaluate`, `-adaptive-final-G` and `-final-B`; `exceeds` None without a spread."""
    arms, runs, growth = _collect(rows, prefix)
    arm_stats = {name: _arm_entry(by_k, runs[name]) for name, by_k in sorted(arms.items())}
    comparisons = {}
    for i, a in enumerate(STUDY_ARMS):
        for b in STUDY_ARMS[:i]:
            ka, kb = arms.get(f"study/{a}", {}), arms.get(f"study/{b}", {})
            ks = sorted(set(ka) & set(kb))
            if ks:
                comparisons[f"study/{a} vs {b}"] = {
                    "replicates": ks, "accuracy_difference": _stat([ka[k]["pooled"] - kb[k]["pooled"] for k in ks])}
    if growth:
        ks = sorted(growth)
        comparisons["adaptive/growth vs control"] = {
            "replicates": ks, "accuracy_difference": _stat([growth[k]["difference"] for k in ks]),
            **{part: _stat([growth[k][part] for k in ks if growth[k][part] is not None])
               for part in ("task_nll_change", "retention_nll_change")}}
    return {"format": SPREAD_FORMAT, "prefix": prefix, "rule": RULE, "arms": arm_stats, "comparisons": comparisons,
            "noise_floor": comparisons.get("study/dense vs single"),
            "verdicts": _verdicts(rows, prefix, arm_stats, comparisons)}
