"""The figures a reviewer expects, drawn from metric sidecars: per-family accuracy bars with Wilson
intervals, the bootstrap distribution of a gate's statistic with its bound and threshold, learning
curves with the replay/new split (and a resumed run's own updates marked), and generic curves of any
sidecar shaped as curves. Each returns PNG bytes and the alt text that describes the values."""

from __future__ import annotations

import math

import numpy as np

from kit.evidence.report.format import fmt, is_number, png_bytes

# --- metric views a reviewer expects ---------------------------------------------------------
UNITS = (("tokens_per_s", "tokens/s"), ("per_token", "nats/token"), ("loss", "nats/token"), ("nll", "nats/token"),
         ("seconds", "seconds"), ("_s", "seconds"), ("tokens", "tokens"), ("bytes", "bytes"), ("lr", "learning rate"),
         ("grad_norm", "L2 norm"), ("accuracy", "fraction correct"), ("objective", "nats/token"),
         ("clip_factor", "ratio, 1 = not clipped"))


def axis_unit(key: str) -> str | None:
    return next((u for k, u in UNITS if k in key), None)


def axis_label(keys: list[str]) -> str:
    """A y-axis label naming what is drawn and its unit, from the sidecar's field names."""
    name = "cross entropy and KL" if set(keys) == {"ce_per_token", "kl_per_token"} else ", ".join(keys)
    if name == "objective":
        name = "training loss, objective"
    units = {axis_unit(k) for k in keys}
    unit = units.pop() if len(units) == 1 else None
    return f"{name} ({unit})" if unit and unit != name else name
def _wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if not n:
        return 0.0, 0.0
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


def accuracy_figure(obj, title: str, names: dict[str, str] | None = None,
                    skip_empty: bool = False) -> tuple[bytes, str] | None:
    """Bars per family and model (candidate vs baseline, or every study model) with 95% Wilson intervals; the
    legend names each model (`names`: baseline/candidate -> its name). None when there is nothing to draw, or
    with `skip_empty` (the report, which says why in a sentence) when every model answered none correctly;
    notebook 13 draws that chart too, so its committed outputs replay unchanged."""
    from matplotlib.figure import Figure  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

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
    if not series or (skip_empty and not any(k for s in series.values() for k, _ in s.values())):
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
        ax.bar(xs, acc, width, label=(names or {}).get(who, who))
        ax.errorbar(xs, acc, yerr=[[a - lo for a, (lo, _) in zip(acc, lo_hi)], [hi - a for a, (_, hi) in zip(acc, lo_hi)]],
                    fmt="none", ecolor="black", capsize=3, linewidth=1)
        desc.append(f"{who}: " + ", ".join(f"{f} {k}/{n}" for f, (k, n) in zip(fams, ks)))
    ax.set_xticks(range(len(fams)), fams)
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy (fraction, 95% CI)")
    ax.set_xlabel("task family")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    alt = f"{title}: bar chart of task accuracy by family with 95% intervals; correct/total, " + "; ".join(desc)
    return png_bytes(fig), alt


def bootstrap_figure(bounds: dict, gates: dict | None, dist: dict | None, title: str) -> tuple[bytes, str] | None:
    """Per part, the distribution of the per-token NLL change with its 95% upper bound and the gate threshold.

    With a bootstrap_distribution sidecar the histogram of the resampled statistic is drawn; without one
    (evidence recorded before the sidecar existed) the normal approximation the record states beside
    the bootstrap (its change and normal upper bound), labelled as such."""
    from matplotlib.figure import Figure  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

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
        lo, hi = ax.get_xlim()  # zoomed to the data: a threshold far from it is marked at the axis's edge
        if is_number(thr) and lo <= thr <= hi:
            ax.axvline(thr, color="tab:red", linestyle="--", label=f"threshold {fmt(thr)}")
        elif is_number(thr):
            right = thr > hi
            ax.annotate(f"threshold {fmt(thr)} \u2192" if right else f"\u2190 threshold {fmt(thr)}",
                        xy=(0.99 if right else 0.01, 0.92), xycoords="axes fraction", color="tab:red", fontsize=8,
                        ha="right" if right else "left")
            ax.set_xlim(lo, hi)
        ax.set_title(f"{part}: NLL change", fontsize=10)
        ax.set_xlabel("NLL change, candidate minus baseline (nats/token)")
        ax.set_ylabel("bootstrap resamples (count)" if "histogram" in how else "density (normal approximation)")
        ax.set_yticks([])
        ax.legend(fontsize=7)
        desc.append(f"{part}: {how}, change {fmt(est)}, 95% bootstrap upper bound {fmt(upper)}"
                    + (f", threshold {fmt(thr)} ({'passes' if (g or {}).get('passed') else 'fails'})"
                       if is_number(thr) else ""))
    fig.suptitle(title)
    return png_bytes(fig), f"{title}: distribution of the paired per-token NLL change. " + "; ".join(desc)


def learning_figure(curve: list[dict], title: str, own: tuple[int, int] | None,
                    overlay: tuple[str, list[dict]] | None = None) -> tuple[bytes, str] | None:
    """New-data cross entropy and replay KL, then the other per-update fields; the run's own updates shaded.
    Per-update seconds are drawn on a log axis, labelled: the first update's one-time compile and set-up
    costs (tens of seconds against fractions of one) would flatten a linear panel. `overlay`: (name, curve) of another run drawn over this one
    in every panel (a migrated run's uninterrupted control)."""
    from matplotlib.figure import Figure  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    x_key = "update" if all(is_number(r.get("update")) for r in curve) else "step"
    if not all(is_number(r.get(x_key)) for r in curve):
        return None
    xs = [r[x_key] for r in curve]
    names = [k for k in curve[0] if k != x_key and all(is_number(r.get(k)) for r in curve)]
    split = [k for k in ("ce_per_token", "kl_per_token") if k in names]
    panels = ([("new data vs replay", split)] if split else []) + [(k, [k]) for k in names if k not in split]
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig = Figure(figsize=(4.4 * cols, 3.0 * rows), dpi=90, layout="constrained")
    labels = {"ce_per_token": "new data: cross entropy / token", "kl_per_token": "replay: KL to reference / token"}
    log_seconds = "seconds" in names and all(r["seconds"] > 0 for r in curve)
    for i, (ptitle, keys) in enumerate(panels):
        ax = fig.add_subplot(rows, cols, i + 1)
        if keys == ["seconds"] and log_seconds:
            ptitle = "seconds per update (log scale)"
            ax.set_yscale("log")
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
            if overlay and all(is_number(r.get(k)) and is_number(r.get(x_key)) for r in overlay[1]):
                pts = [(r[x_key], r[k]) for r in overlay[1]]
                ax.plot(*zip(*pts), color="black", linestyle=":", linewidth=1.0, label=f"control: {overlay[0]}" if k == keys[0] else "_nolegend_")
        if own:
            ax.axvspan(own[0] - 0.5, own[1] + 0.5, color="tab:green", alpha=0.08)
        if overlay and i == 0:
            ax.legend(fontsize=7)
        ax.set_xlabel(x_key)
        ax.set_ylabel(axis_label(keys))
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
    alt = (f"{title}: learning curves over {x_key}s {fmt(xs[0])}\u2013{fmt(xs[-1])}: " + "; ".join(desc) + ownt
           + ("; seconds per update on a log axis" if log_seconds else "")
           + (f"; the control {overlay[0]} drawn dotted over it" if overlay else ""))
    return png_bytes(fig), alt


def curves_png(x_name: str, x: list, series: dict[str, list], title: str, names: dict[str, str] | None = None) -> bytes:
    """PNG of one panel per series against x (Agg canvas through Figure: no GUI, no pyplot state). A candidate_K and
    control_K pair shares one panel (one y-scale), its lines named by `names` (candidate/control -> a run's name);
    a difference series says its sign (candidate minus control)."""
    from matplotlib.figure import Figure  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    panels: list[tuple[str, list[tuple[str, str]]]] = []
    for name in series:
        if name.startswith("control_") and "candidate_" + name[len("control_"):] in series:
            continue  # drawn with its candidate
        if name.startswith("candidate_") and "control_" + name[len("candidate_"):] in series:
            k = name[len("candidate_"):]
            panels.append((k, [(name, (names or {}).get("candidate", "candidate")),
                               ("control_" + k, (names or {}).get("control", "control"))]))
        else:
            panels.append((name, [(name, name)]))
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig = Figure(figsize=(4.2 * cols, 3.0 * rows), dpi=90, layout="constrained")
    fig.suptitle(title)
    for i, (name, lines) in enumerate(panels):
        ax = fig.add_subplot(rows, cols, i + 1)
        for key, label in lines:
            ax.plot(x, series[key], marker="." if len(x) <= 64 else None, linewidth=1.2, label=label,
                    linestyle=":" if key.startswith("control_") else "-")
        ax.set_xlabel(x_name)
        if name.endswith("_difference"):
            what = name[:-len("_difference")]
            ax.set_ylabel(f"candidate \u2212 control ({axis_unit(what) or what})")
            ax.axhline(0, color="gray", linewidth=0.8)
            ax.set_title(f"{what}: candidate \u2212 control (> 0: candidate higher)", fontsize=9)
        else:
            ax.set_ylabel(axis_label([name]))
            ax.set_title(name)
        if len(lines) > 1:
            ax.legend(fontsize=7)
        if all(isinstance(v, int) for v in x):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    return png_bytes(fig)


def curves_alt(x_name: str, x: list, series: dict, title: str) -> str:
    return (f"{title}: line plots against {x_name} {fmt(x[0])}\u2013{fmt(x[-1])}: "
            + "; ".join(f"{k} from {fmt(v[0])} to {fmt(v[-1])}" for k, v in series.items()))


GROWTH_NOTE = ("The grown model has more blocks than its fixed-depth control, so their parameter names and shapes "
               "differ: the learned states are not compared elementwise (maximum difference and differing count "
               "are not defined, shown as \u2014). Growth is judged by its final gates against the control.")


def dev_curve_figure(table: dict, title: str) -> tuple[bytes, str] | None:
    """Development accuracy against updates since the seed: one panel per family ("all" first), one line
    per arm, from a `dev_curve` sidecar ({"columns", "rows"}, kit/adaptive/dev_curve.py)."""
    from matplotlib.figure import Figure  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    cols = table.get("columns") or []
    if not {"arm", "step", "family", "accuracy"} <= set(cols):
        return None
    at = {c: i for i, c in enumerate(cols)}
    series: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for r in table["rows"]:
        series.setdefault(r[at["family"]], {}).setdefault(r[at["arm"]], []).append((r[at["step"]], r[at["accuracy"]]))
    if not series:
        return None
    families = (["all"] if "all" in series else []) + sorted(f for f in series if f != "all")
    ncols = min(3, len(families))
    nrows = -(-len(families) // ncols)
    fig = Figure(figsize=(4.4 * ncols, 3.0 * nrows), dpi=90, layout="constrained")
    for i, family in enumerate(families):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        for arm, pts in series[family].items():
            ax.plot(*zip(*sorted(pts)), marker=".", linewidth=1.2, label=arm)
        ax.set_xlabel("updates since the seed")
        ax.set_ylabel("accuracy (fraction correct)")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"{family}: development accuracy", fontsize=10)
        ax.grid(alpha=0.3)
        if i == 0:
            ax.legend(fontsize=7)
    fig.suptitle(title)
    desc = [f"{arm} from {fmt(min(p)[1])} at update {min(p)[0]} to {fmt(max(p)[1])} at update {max(p)[0]}"
            for arm, p in series[families[0]].items()]
    return png_bytes(fig), f"{title}: {families[0]} development accuracy per arm: " + "; ".join(desc)
