"""Training noise as data: the between-replicate spread of the development scores, and each frozen verdict
read against it (the runs: campaigns/medium-replicates-plan.json; the notes in kit/replicates.py).

One call, from the run rows of `kit.evidence.run_index.load_runs` (sidecars read from each row's dir/metrics/):

    spread = replicate_spread(load_runs("runs"), prefix="medium")

It returns {"format", "prefix", "rule", "arms", "comparisons", "noise_floor"}: per arm and per comparison the
mean and between-replicate sd of pooled and per-family development accuracy and of the NLL change, and the
dense-vs-single comparison as the noise floor. Descriptive only: what the replicates say about each question
(t intervals with k - 1 df, readings) is kit/evidence/replicate_analysis.py's; no final effect is read against
these development spreads. Fields: the function.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from kit.digest import load_json_strict

SPREAD_FORMAT = "kit-replicate-spread/2"
RULE = ("descriptive: per arm and per paired comparison the development values of each replicate, their mean and "
        "their sd (ddof 1); inference is kit.evidence.replicate_analysis's (t intervals with k - 1 df)")
STUDY_ARMS = ("single", "dense", "powersgd")
_SUFFIX = re.compile(r"-r(\d+)$")


def _stat(values: list[float]) -> dict:
    n = len(values)
    mean = sum(values) / n if n else None
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n >= 2 and mean is not None else None
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
                assert base is not None, "the scoring that gave the candidate's scores gives the baseline's"
                growth[k] = {**s, "difference": s["pooled"] - base["pooled"]}
    return arms, runs, growth


def replicate_spread(rows: list[dict], prefix: str = "medium") -> dict:
    """The spread of the replicates among `rows` (load_runs' rows).

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
    - `noise_floor`: comparisons["study/dense vs single"] (the same update in exact arithmetic) or None."""
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
            "noise_floor": comparisons.get("study/dense vs single")}
