"""A newcomer's first hour (issue 64 item 6) on the committed evidence: the failed runs the medium report lists are
archived (runs/archive/), and `kit status` and `kit run notebooks/90_inspect_failed_arm.ipynb -p RUN_ID ...` read
them in place, as `kit.run_notebook` did (the command line's pre-check answered "no such run"); a run id archived
below a folder is named in the refusal; runs/archive/index.md is what its generator writes from index.json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kit.cli.handlers.evidence import _inspection_parameters
from kit.evidence import archive
from kit.evidence.archiving import index_markdown

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "90_inspect_failed_arm.ipynb"
# failed runs the medium report lists "kept in" an archived folder (reports/medium/index.html)
ARCHIVED = ("medium-pilot-2026-12-01-e83d0af3", "medium-campaign-2026-12-02/runs/medium-adaptive-B-growth",
            "medium-campaign-2026-12-03-block1/runs/medium-study-prepare")


def kit(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO), KIT_PROGRESS="0")
    return subprocess.run([sys.executable, "-m", "kit", *map(str, args)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600, check=False)


@pytest.mark.parametrize("run_id", ARCHIVED)
def test_kit_status_reads_an_archived_run_by_its_place_in_runs(run_id):
    for given in (f"runs/{run_id}", run_id):  # a path, or an id of runs/ as kit run takes it
        p = kit("status", given, "--json")
        assert p.returncode == 0, p.stderr
        entry = json.loads(p.stdout)["entries"][0]
        assert entry["kind"] == "run" and entry["status"] == "failed" and entry["run_id"] == run_id.split("/")[-1]
        assert entry["path"] == f"runs/{run_id}"  # named where it was, not in the temporary unpacked tree


@pytest.mark.parametrize("run_id", ARCHIVED)
def test_kit_run_pre_check_accepts_an_archived_run(run_id):
    params = {"RUN_ID": run_id, "RUNS_DIR": "runs", "OUT_DIR": ""}
    assert _inspection_parameters(NOTEBOOK, params, ["RUN_ID"], REPO / "runs")["RUN_ID"] == run_id


def test_kit_run_names_where_a_run_id_is_archived():
    p = kit("run", NOTEBOOK, "-p", "RUN_ID", "medium-adaptive-prepare-nonesuch", "--runs-dir", "runs")
    assert p.returncode == 2 and "no such run" in p.stderr
    with pytest.raises(ValueError, match="archived as seed-rebuilds-2026-12-01/rebuild4-d1b9f8b-killed: -p RUN_ID "
                                         "seed-rebuilds-2026-12-01/rebuild4-d1b9f8b-killed"):
        _inspection_parameters(NOTEBOOK, {"RUN_ID": "rebuild4-d1b9f8b-killed", "RUNS_DIR": "runs", "OUT_DIR": ""},
                               ["RUN_ID"], REPO / "runs")


def test_the_archive_index_page_is_its_generators_output():
    index = archive.read_index(REPO / "runs")
    page = (REPO / "runs" / "archive" / "index.md").read_text()
    assert index is not None and page == index_markdown(index)
    assert "(docs/formats/archived-evidence.md, \"Archived evidence\")" in page.split("\n## ")[0]
    old = "docs/" + "formats.md"  # now a folder; archived reasons below the header quote their own time
    assert old not in page.split("\n## ")[0]


@pytest.mark.parametrize("selection", ["demo-*", "medium-*"])
def test_results_have_one_split_vocabulary_and_one_kind_of_model(selection):
    """The README's `df.split == "final"` keeps the study's finals (they were `"study evaluation"`), and `model` is
    "seed" or the run that produced the scored commit for both experiments (the study's held arm names)."""
    from kit import results
    from kit.evidence.run_index import kept_runs, load_runs

    df = results(REPO / "runs" / selection)
    assert set(df["split"]) == {"dev", "final"}
    finals = df[(df["kept_in"] == "") & (df["split"] == "final")]
    prefix = selection.split("-")[0]
    assert set(finals[finals["contract"].str.contains("shared-gradient")]["model"]) == \
        {"seed", f"{prefix}-study-single", f"{prefix}-study-dense", f"{prefix}-study-powersgd"}
    run_ids = {r["run_id"] for r in load_runs(REPO / "runs" / selection)} | \
        {r["run_id"] for r in kept_runs(REPO / "runs" / selection)}
    assert set(df["model"]) - {"seed"} <= run_ids, set(df["model"]) - {"seed"} - run_ids
