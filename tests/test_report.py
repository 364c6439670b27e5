"""`kit report`: an offline HTML page over a fixture runs dir, opened in headless Chromium.

The fixture run records are written directly (no notebook is executed for them); rendering runs
one kernel. Chromium is Debian's `chromium` package, which the Makefile's test target installs;
its absence is a failure, not a skip.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import numpy as np
import pytest
from PIL import Image

from kit.cli import main
from kit.digest import sha256_file, write_canonical_json
from kit.evidence import run_record
from kit.evidence.archive import resolve
from kit.evidence.report.format import fmt
from kit.evidence.report.page import external_resources
from kit.evidence.report.sidecars import metric_view
from kit.evidence.report.verdict_rows import verdict_rows
from kit.evidence.run_record import (
    CheckpointRoot,
    CheckpointRoots,
    GitState,
    RunError,
    RunRecord,
    write_run_record,
)

REPO = Path(__file__).resolve().parents[1]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_INSTALL = "apt-get update && apt-get install -y chromium"
CURVE = [{"update": u, "loss": 2.0 / (u + 1), "kl": 0.01 * u, "grad_norm": 1.0 + 0.1 * (u % 3)} for u in range(12)]
ACCURACY = {"columns": ["family", "accuracy", "n"],
            "rows": [["arithmetic", 0.75, 40], ["copy-reverse", 0.5, 40], ["sort-words", 0.875, 40]]}
ROOT = "e" * 64


def write_run(runs: Path, run_id: str, status: str, *, error=None, reason=None, metrics=None, produced=()):
    run_dir = runs / run_id
    (run_dir / "metrics").mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nbformat.write(nb, run_dir / "arm.ipynb")
    for name, obj in (metrics or {}).items():
        write_canonical_json(run_dir / "metrics" / f"{name}.json", obj)
    write_run_record(run_dir, RunRecord(
        run_id=run_id, notebook="notebooks/arm.ipynb", notebook_sha256="0" * 64, executed_notebook="arm.ipynb",
        executed_notebook_sha256=sha256_file(run_dir / "arm.ipynb"), parameters={"arm": run_id}, status=status,
        reason=reason, error=error and RunError.from_json(error, "the fixture's error"), started_at=f"2026-01-01T00:00:0{len(list(runs.iterdir()))}.000Z",
        ended_at="2026-01-01T00:01:00.000Z", duration_s=12.5, git=GitState(commit="1" * 40, dirty=False),
        versions={"python": "3.11"}, device={"cpu": "test cpu", "cpu_count": 2, "gpus": [], "gpu_count": 0},
        checkpoint_roots=CheckpointRoots(produced=tuple(CheckpointRoot(root=r, home=None) for r in produced), used=()),
        metrics={n: sha256_file(run_dir / "metrics" / f"{n}.json") for n in metrics or {}},
    ))


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    work = tmp_path_factory.mktemp("report")
    runs = work / "runs"
    runs.mkdir()
    write_run(runs, "cohort-a", "completed", metrics={"accuracy": ACCURACY, "training": CURVE}, produced=[ROOT])
    write_run(runs, "cohort-b", "failed", reason="RuntimeError: loss is not finite",
              error={"cell_index": 4, "execution_count": 5, "ename": "RuntimeError", "evalue": "loss is not finite"})
    write_run(runs, "study-8gpu", "unavailable", reason="needs 8 GPUs, host has 0",
              error={"cell_index": 2, "execution_count": 3, "ename": "ArmUnavailable",
                     "evalue": "needs 8 GPUs, host has 0"})
    out = work / "reports" / "r1"
    assert main(["report", "--runs", str(runs), "--out", str(out)]) == 0
    return {"work": work, "index": out / "index.html"}


class _Dom(HTMLParser):
    """Rows of each table (by id, else by class) and the src of each <img>."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.images: list[str] = []
        self.alts: list[str] = []
        self.titles: list[str] = []
        self.values: dict[str, list[dict]] = {}  # table -> per row: the row's attributes and its cells' data-value
        self._table = None
        self._row = None
        self._in_cell = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self._table = attrs.get("id") or attrs.get("class", "")
            self.tables.setdefault(self._table, [])
        elif tag == "tr" and self._table is not None:
            self._row = []
            self.tables[self._table].append(self._row)
            self.values.setdefault(self._table, []).append({"source": attrs.get("data-source"), "cells": []})
        elif tag in ("td", "th") and self._row is not None:
            self._row.append("")
            self._in_cell = True
            self.values[self._table][-1]["cells"].append(attrs.get("data-value"))
        elif tag == "img":
            self.images.append(attrs.get("src", ""))
            self.alts.append(attrs.get("alt", ""))
        elif tag == "code" and attrs.get("title"):
            self.titles.append(attrs["title"])

    def handle_endtag(self, tag):
        if tag == "table":
            self._table = self._row = None
        elif tag in ("td", "th") and self._row:
            self._row[-1] = self._row[-1].strip()
            self._in_cell = False

    def handle_data(self, data):
        if self._in_cell and self._row:
            self._row[-1] += data


def chromium(*args: str, tmp: Path) -> subprocess.CompletedProcess:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: the report test needs Debian's chromium ({CHROMIUM_INSTALL}); "
                    f"the Makefile's test target installs it")
    return subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp / 'chromium-profile'}", *args],
        capture_output=True, text=True, timeout=120, check=False)


def test_report_page_is_offline_and_holds_tables_and_images(report):
    page = report["index"].read_text(encoding="utf-8")
    assert external_resources(page) == []
    assert "<script src=" not in page and "show_runs(" not in page  # inputs hidden by tag
    dom = _Dom()
    dom.feed(page)
    runs = {row[0]: row for row in dom.tables["kit-runs"][1:]}
    assert {r: row[2] for r, row in runs.items()} == {"cohort-a": "completed", "cohort-b": "failed",
                                                      "study-8gpu": "unavailable"}
    assert runs["study-8gpu"][3] == "needs 8 GPUs, host has 0"
    assert runs["cohort-a"][8] == ROOT[:12] and ROOT in dom.titles  # short root, the full one in its tooltip
    assert ROOT not in page.replace(f'title="{ROOT}"', "")  # never a bare 64-hex root
    assert '<a id="run-cohort-a">' in page and 'href="#run-cohort-a"' in page


def test_report_renders_in_headless_chromium(report, tmp_path):
    url = report["index"].resolve().as_uri()
    shot = tmp_path / "shot.png"
    done = chromium(f"--screenshot={shot}", "--window-size=1280,2000", url, tmp=tmp_path)
    assert shot.exists(), done.stderr[-2000:]
    assert shot.stat().st_size > 20_000
    pixels = np.asarray(Image.open(shot).convert("RGB"))
    assert pixels.shape == (2000, 1280, 3)
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50  # text, table colours and plots, not a blank page

    done = chromium("--dump-dom", url, tmp=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    dom = _Dom()
    dom.feed(done.stdout)
    statuses = [row[2] for row in dom.tables["kit-runs"][1:]]
    assert sorted(statuses) == ["completed", "failed", "unavailable"]
    failures = {row[0]: row for row in dom.tables["kit-failures"][1:]}
    assert failures["cohort-b"][1:] == ["failed", "4", "5", "RuntimeError", "loss is not finite"]
    metric = dom.tables["kit-table kit-metric"]
    assert metric == [["family", "accuracy", "n"], ["arithmetic", "0.7500", "40"], ["copy-reverse", "0.5000", "40"],
                      ["sort-words", "0.8750", "40"]]
    pngs = [src for src in dom.images if src.startswith("data:image/png;base64,")]
    assert len(pngs) == 1  # the training curves; the accuracy sidecar is a table
    assert base64.b64decode(pngs[0].split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert dom.alts[0].startswith("cohort-a: training: line plots against update 0\u201311: ")
    assert "loss from 2.000 to 0.1667" in dom.alts[0]


def test_metric_shapes_choose_their_view():
    assert metric_view(CURVE)[0] == "curves"
    x_name, x, series = metric_view(CURVE)[1]
    assert x_name == "update" and x == list(range(12)) and set(series) == {"loss", "kl", "grad_norm"}
    assert metric_view({"loss": [3.0, 2.0, 1.5], "kl": [0, 0.1, 0.2]})[0] == "curves"
    kind, df = metric_view({"arithmetic": {"acc": 0.5}, "copy": {"acc": 0.25}})
    assert kind == "table" and df.loc["copy", "acc"] == 0.25
    kind, df = metric_view({"gate": "G1", "passed": True, "inputs": {"n": 3}})
    assert kind == "table" and df.loc["inputs", "value"] == '{"n": 3}'
    assert metric_view([{"family": "a", "acc": 0.1}])[0] == "table"
    assert metric_view(3.5) == ("json", 3.5)
    assert external_resources('<script src="https://cdn.example/x.js"></script><img src="data:image/png;base64,AA">') \
        == ['<script src="https://cdn.example/x.js"']


def test_report_of_a_missing_runs_dir_is_an_error(tmp_path, capsys):
    assert main(["report", "--runs", str(tmp_path / "nope"), "--out", str(tmp_path / "out")]) == 2
    assert "nope: runs directory not found" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert run_record.list_run_dirs(tmp_path) == []


def test_one_number_format():
    assert [fmt(v) for v in (None, True, 0, 1234567, 0.0, 0.75, -0.001, 1234.5678, 12345.678, 2.5e-7, 3e-12)] == [
        "\u2014", "yes", "0", "1,234,567", "0", "0.7500", "-0.001000", "1,235", "12,346", "0.0000002500", "3.000e-12"]
    assert fmt(1796065062.6, "deadline_at") == "2026-11-30 18:57:42 UTC" and fmt(1796065062.6, "x") == "1,796,065,063"


# --- the committed demo evidence: verdict tables and layout ----------------------------------
@pytest.fixture(scope="module")
def demo_report(tmp_path_factory):
    """The report over a copy of the committed runs/ (demo runs with gates and screens, benchmark records)."""
    work = tmp_path_factory.mktemp("demo-report")
    runs = work / "demo-out" / "runs"
    shutil.copytree(REPO / "runs", runs)
    out = work / "reports" / "demo"
    assert main(["report", "--runs", str(runs), "--out", str(out)]) == 0
    return {"runs": runs, "index": out / "index.html"}


def _sidecar(runs: Path, source: str):
    run, _, rest = source.partition("/")
    rest, _, row = rest.partition("#results/")
    obj = json.loads(resolve(runs / run / rest).read_text())  # an archived run read in its unpacked folder
    return obj["results"][int(row)] if row else obj  # a benchmark record's result row


def test_verdict_tables_open_the_page_and_equal_the_gates_and_screens(demo_report):
    runs = demo_report["runs"]
    page = demo_report["index"].read_text(encoding="utf-8")
    assert "The evidence in <code>" in page and "demo-out/runs</code>" in page  # the directory as given
    assert page.index('id="kit-verdicts-adaptive"') < page.index('id="kit-runs"')
    assert page.index('id="kit-verdicts-study"') < page.index('id="kit-runs"')
    dom = _Dom()
    dom.feed(page)
    checked = 0
    for exp in ("adaptive", "study"):
        rows = dom.tables[f"kit-verdicts-{exp}"]
        assert rows[0] == ["comparison", "check", "statistic", "value", "threshold", "which side passes", "verdict",
                           "runs"]
        meta = dom.values[f"kit-verdicts-{exp}"][1:]
        assert len(rows) - 1 == len({"adaptive": verdict_rows(runs).adaptive, "study": verdict_rows(runs).study}[exp]) > 0
        for text, m in zip(rows[1:], meta):
            obj = _sidecar(runs, m["source"])
            value = None if m["cells"][3] is None else float(m["cells"][3])
            threshold = None if m["cells"][4] is None else float(m["cells"][4])
            if m["source"].endswith("gates.json"):
                g = obj[text[1]]
                expect = g.get("upper", g.get("lost"))
                assert value == expect and text[3] == fmt(expect)
                assert threshold == g.get("threshold", g.get("gained"))
                # a generated-answers gate with no discordant answer weighs nothing: not evaluable, whatever it recorded
                no_data = "lost" in g and not g["lost"] and not g.get("gained")
                assert text[6] == ("not evaluable" if no_data else "pass" if g["passed"] else "fail")
            elif m["source"].endswith("comparison.json") or "#results/" in m["source"]:
                elementwise = obj.get("same_parameter_names", obj.get("parameters_differing") is not None)
                assert value == obj["max_abs_parameter_difference"] or (value is None and not elementwise)
                assert text[6] == ("n/a" if not elementwise else "pass" if obj["learned_state_equal"] else "fail")
            elif m["source"].endswith("screen_speed.json"):
                assert value == obj["ratio"] and threshold == obj["thresholds"]["min_speedup"]
                assert text[3] == fmt(obj["ratio"]) and text[6] == obj["verdict"]
            elif m["source"].endswith("screen_quality.json"):
                name, t, inp = text[1], obj["thresholds"], obj["inputs"]
                if name == "task_gain":
                    assert (value, threshold) == (inp["task_gain"], t["min_task_gain"])
                elif name == "retention":
                    assert (value, threshold) == (inp["retention_upper"], t["max_retention_upper_nats"])
                elif name.startswith("noninferior_to_"):
                    assert value == inp["noninferiority_lower"][name[len("noninferior_to_"):]]
                    assert threshold == -t["noninferiority_margin"]
                else:
                    assert text[6] == obj["verdict"]
                    continue
                assert text[6] == ("pass" if obj["checks"][name] else "fail")
            assert text[5].endswith(".") or text[1] == "quality screen (all parts)" or text[6] == "n/a"
            checked += 1
            for name in text[7].split(", "):  # every run named is linked to its section
                assert f'href="#run-{name}"' in page and f'<a id="run-{name}">' in page
    assert checked >= 10
    gates = sorted(p.parent.parent.name for p in runs.glob("*/metrics/gates.json"))
    assert {m["source"].split("/")[0] for m in dom.values["kit-verdicts-adaptive"][1:] if m["source"]} >= set(gates)
    assert "tiny scale: the kit&#x27;s tiny seed" in page or "tiny scale: the kit's tiny seed" in page  # scope paragraph
    assert "No description has been provided" not in page
    assert len([a for a in dom.alts if a]) == len(dom.images) > 10
    assert "deadline_at" in page and "1796" not in "".join(r[1] for r in dom.tables.get("kit-table kit-metric", [])
                                                          if len(r) > 1 and r[0].endswith("_at"))
    for bench in (p.parent.name for p in runs.glob("*/run.json") if '"kit-bench/1"' in p.read_text()):
        assert f'<a id="run-{bench}">' in page  # every benchmark record has a section


LAYOUT_JS = """<script>
window.addEventListener('load', () => {
  const bad = [];
  for (const t of document.querySelectorAll('table, img, pre')) {
    const r = t.getBoundingClientRect();
    let box = t.parentElement, scrolled = false;
    while (box && box !== document.body) {  // a scroll box of its own, not the page
      if (['auto', 'scroll'].includes(getComputedStyle(box).overflowX) && box.getBoundingClientRect().right <= 1400) {
        scrolled = true; break; }
      box = box.parentElement; }
    if (r.right > 1400 && !scrolled) bad.push(t.tagName + ' ' + (t.id || t.className) + ' ' + Math.round(r.right));
  }
  const out = document.createElement('pre');
  out.id = 'kit-layout';
  out.textContent = JSON.stringify({scrollWidth: document.documentElement.scrollWidth, bad: bad});
  document.body.appendChild(out);
});
</script>"""


def test_nothing_overflows_at_1400_px(demo_report, tmp_path):
    probe = demo_report["index"].with_name("layout-probe.html")
    probe.write_text(demo_report["index"].read_text(encoding="utf-8").replace("</body>", LAYOUT_JS + "</body>"),
                     encoding="utf-8")
    done = chromium("--window-size=1400,1000", "--virtual-time-budget=10000", "--dump-dom", probe.as_uri(),
                    tmp=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    found = done.stdout.split('<pre id="kit-layout">', 1)
    assert len(found) == 2, "the layout probe did not run"
    layout = json.loads(html_unescape(found[1].split("</pre>", 1)[0]))
    assert layout["scrollWidth"] <= 1400, layout
    assert layout["bad"] == [], layout
    shot = tmp_path / "top.png"
    chromium(f"--screenshot={shot}", "--window-size=1400,1200", demo_report["index"].as_uri(), tmp=tmp_path)
    assert np.asarray(Image.open(shot).convert("RGB")).shape == (1200, 1400, 3)


def html_unescape(text: str) -> str:
    import html

    return html.unescape(text)


def test_bootstrap_figure_draws_recorded_resamples_with_the_threshold():
    from kit.evidence.report.figures import bootstrap_figure

    bounds = {"tasks": {"change_nats_per_token": -0.01, "bootstrap_upper": 0.004, "normal_upper": 0.005,
                        "normal_multiplier": 1.645, "resamples": 100}}
    gates = {"gain": {"passed": False, "threshold": -0.001, "upper": 0.004}}
    dist = {"tasks": {"counts": [10, 40, 40, 10], "edges": [-0.03, -0.02, -0.01, 0.0, 0.01], "resamples": 100}}
    png, alt = bootstrap_figure(bounds, gates, dist, "r: nll_change_bounds")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert "histogram of the bootstrap resamples" in alt and "threshold -0.001000 (fails)" in alt
    _, alt = bootstrap_figure(bounds, gates, None, "r: nll_change_bounds")
    assert "normal approximation (bootstrap resamples not recorded" in alt


def test_figures_are_palette_pngs_keeping_the_most_frequent_colours_exactly():
    """png_bytes: the same figure gives the same bytes; the PALETTE_COLOURS most frequent colours of the figure on white are
    kept exactly, and every other pixel gets the nearest of them (squared distance in RGB)."""
    import io

    from matplotlib.figure import Figure

    from kit.evidence.report.format import PALETTE_COLOURS, png_bytes

    def figure():
        fig = Figure(figsize=(3, 2), dpi=90)
        ax = fig.add_subplot()
        for i, colour in enumerate(("#1f77b4", "#ff7f0e", "#2ca02c")):
            ax.plot([0, 1, 2], [i, i + 1, i * 0.5], color=colour, linewidth=2 + i)
        ax.set_title("three lines, anti-aliased")
        fig.patch.set_alpha(0.0)  # a transparent figure: composited on the page's white
        return fig

    png = png_bytes(figure())
    assert png == png_bytes(figure())
    out = Image.open(io.BytesIO(png))
    assert out.mode == "P"
    buf = io.BytesIO()
    figure().savefig(buf, format="png")
    rgba = Image.open(io.BytesIO(buf.getvalue())).convert("RGBA")
    on_white = np.asarray(Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba)
                          .convert("RGB")).reshape(-1, 3).astype(int)
    got = np.asarray(out.convert("RGB")).reshape(-1, 3).astype(int)
    colours, counts = np.unique(on_white, axis=0, return_counts=True)
    assert len(colours) > PALETTE_COLOURS  # anti-aliasing makes more than a palette holds, so the mapping is exercised
    order = sorted(range(len(colours)), key=lambda i: (-counts[i], tuple(colours[i])))
    kept = colours[order[:PALETTE_COLOURS]]
    is_kept = (on_white[:, None, :] == kept[None, :, :]).all(axis=2).any(axis=1)
    assert (got[is_kept] == on_white[is_kept]).all()
    assert (got[(on_white == 255).all(axis=1)] == 255).all()  # the background stays white
    rest, mapped = on_white[~is_kept], got[~is_kept]
    nearest = ((rest[:, None, :] - kept[None, :, :]) ** 2).sum(axis=2).min(axis=1)
    assert (((rest - mapped) ** 2).sum(axis=1) == nearest).all()
