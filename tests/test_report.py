"""`kit report`: an offline HTML page over a fixture runs dir, opened in headless Chromium.

The fixture run records are written directly (no notebook is executed for them); rendering runs
one kernel. Chromium is Debian's `chromium` package, which the Makefile's test target installs;
its absence is a failure, not a skip.
"""

from __future__ import annotations

import base64
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import numpy as np
import pytest
from PIL import Image

from kit.cli import main
from kit.digest import sha256_file, write_canonical_json
from kit.evidence import records
from kit.evidence.records import RunRecord, write_run_record
from kit.evidence.report import external_resources, metric_view

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
        reason=reason, error=error, started_at=f"2026-01-01T00:00:0{len(list(runs.iterdir()))}.000Z",
        ended_at="2026-01-01T00:01:00.000Z", duration_s=12.5, git={"commit": "1" * 40, "dirty": False},
        versions={"python": "3.11"}, device={"cpu": "test cpu", "cpu_count": 2, "gpus": [], "gpu_count": 0},
        checkpoint_roots={"produced": [{"root": r, "home": None} for r in produced], "used": []},
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
        elif tag in ("td", "th") and self._row is not None:
            self._row.append("")
            self._in_cell = True
        elif tag == "img":
            self.images.append(attrs.get("src", ""))

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
    assert runs["study-8gpu"][3] == "needs 8 GPUs, host has 0" and runs["cohort-a"][8] == ROOT


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
    metric = dom.tables["dataframe kit-table kit-metric"]
    assert metric == [["family", "accuracy", "n"], ["arithmetic", "0.750", "40"], ["copy-reverse", "0.500", "40"],
                      ["sort-words", "0.875", "40"]]
    pngs = [src for src in dom.images if src.startswith("data:image/png;base64,")]
    assert len(pngs) == 1  # the training curves; the accuracy sidecar is a table
    assert base64.b64decode(pngs[0].split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"


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
    assert records.list_run_dirs(tmp_path) == []
