"""Every figure the report draws labels both axes (with a unit where the field has one), a figure zoomed to its data
still marks a threshold that lies off it, a candidate and its control share one panel with the difference's sign
said, and an accuracy chart with nothing to draw is left to a sentence. Synthetic sidecars: no committed evidence."""

from __future__ import annotations

import pytest

from kit.evidence.report import figures


@pytest.fixture
def drawn(monkeypatch):
    """The matplotlib Figures the figure functions hand to png_bytes, instead of their bytes."""
    out = []
    monkeypatch.setattr(figures, "png_bytes", lambda fig: out.append(fig) or b"png")
    return out


def _axes(fig):
    return [ax for ax in fig.axes if ax.get_visible()]


def _labelled(fig) -> list[tuple[str, str]]:
    return [(ax.get_xlabel(), ax.get_ylabel()) for ax in _axes(fig)]


CURVE = [{"update": u, "ce_per_token": 2.0 / u, "kl_per_token": 0.01 * u, "objective": 2.0 / u + 0.01,
          "grad_norm": 1.0, "clip_factor": 1.0, "seconds": 0.2 + (u == 1)} for u in range(1, 9)]
BOUNDS = {"tasks": {"change_nats_per_token": -5.6, "bootstrap_upper": -5.48, "normal_upper": -5.48,
                    "normal_multiplier": 1.645, "resamples": 100, "n": 64}}
GATES = {"gain": {"threshold": -0.001, "passed": True, "upper": -5.48}}
DIST = {"tasks": {"edges": [-5.8, -5.7, -5.6, -5.5, -5.4], "counts": [10, 40, 40, 10]}}
DEV = {"columns": ["arm", "step", "family", "accuracy"],
       "rows": [["A", 0, "all", 0.1], ["A", 32, "all", 0.3], ["B", 32, "all", 0.3], ["B", 64, "all", 0.5]]}


def test_every_figure_labels_both_axes(drawn):
    figures.accuracy_figure({"sorting": {"correct_baseline": 3, "correct_candidate": 9, "n": 24}}, "t",
                            {"baseline": "baseline: the seed", "candidate": "candidate: run-A"})
    figures.bootstrap_figure(BOUNDS, GATES, DIST, "t")
    figures.bootstrap_figure(BOUNDS, GATES, None, "t")  # the normal approximation
    figures.learning_figure(CURVE, "t", (5, 8), overlay=("control-run", CURVE))
    figures.curves_png("update", list(range(4)), {"candidate_objective": [1, 2, 3, 4], "control_objective": [1, 2, 2, 4],
                                                  "objective_difference": [0, 0, 1, 0], "tokens_per_s": [5, 6, 7, 8]}, "t")
    figures.dev_curve_figure(DEV, "t")
    assert len(drawn) == 6
    for fig in drawn:
        assert all(x and y for x, y in _labelled(fig)), _labelled(fig)
    units = " ".join(y for fig in drawn for _, y in _labelled(fig))
    for unit in ("nats/token", "fraction", "seconds", "tokens/s", "L2 norm"):
        assert unit in units, (unit, units)


def test_bounds_are_zoomed_to_the_data_and_a_far_threshold_is_marked_at_the_edge(drawn):
    figures.bootstrap_figure(BOUNDS, GATES, DIST, "t")
    ax = _axes(drawn[0])[0]
    lo, hi = ax.get_xlim()
    assert -5.9 < lo and hi < -5.3  # the data, not the data and a threshold at -0.001
    assert any("threshold -0.001000 \u2192" == t.get_text() for t in ax.texts)


def test_a_candidate_and_its_control_share_one_panel_and_the_difference_says_its_sign(drawn):
    figures.curves_png("update", [1, 2], {"candidate_objective": [1.0, 2.0], "control_objective": [1.0, 1.5],
                                          "objective_difference": [0.0, 0.5]}, "t",
                       {"candidate": "candidate: grown", "control": "control: fixed"})
    axes = _axes(drawn[0])
    assert len(axes) == 2
    assert [t.get_text() for t in axes[0].get_legend().get_texts()] == ["candidate: grown", "control: fixed"]
    assert "candidate \u2212 control" in axes[1].get_ylabel() and "> 0: candidate higher" in axes[1].get_title()


def test_a_chart_of_empty_bars_is_not_drawn_in_the_report(drawn):
    empty = {"sorting": {"correct_baseline": 0, "correct_candidate": 0, "n": 24}}
    assert figures.accuracy_figure(empty, "t", skip_empty=True) is None
    assert drawn == []
    # notebook 13 still draws it: its committed outputs (an image) must replay unchanged
    assert figures.accuracy_figure(empty, "t") is not None and len(drawn) == 1
