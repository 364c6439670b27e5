"""The README's "From Python" example runs as written: a fresh process executes exactly that code block
from the repository root, and the commit it reads is a verified commit of the store it trained into."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import kit

REPO = Path(__file__).resolve().parents[1]


def readme_python_blocks() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = re.search(r"^## From Python\n(.*?)(?=^## )", text, re.DOTALL | re.MULTILINE)
    assert section, "README.md has no '## From Python' section"
    blocks = re.findall(r"^```python\n(.*?)^```$", section.group(1), re.DOTALL | re.MULTILINE)
    assert len(blocks) == 2, f"expected two python blocks in 'From Python' (training, results), found {len(blocks)}"
    return blocks


def readme_python_block() -> str:
    return readme_python_blocks()[0]


def test_the_readme_results_example_prints_the_final_accuracies():
    """The second block (kit.results) runs as written from the repository root and prints, per final
    evaluation and model, an accuracy for every family."""
    code = readme_python_blocks()[1]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    # pandas abbreviates the middle columns: 5 = the four families and `all`; one row per final run and model:
    # the adaptive trial's 4 and the study's evaluation of the seed and its 3 arms (split "final" too)
    assert "[8 rows x 5 columns]" in done.stdout and "sorting" in done.stdout
    assert "medium-adaptive-final-A" in done.stdout and "medium-study-evaluate" in done.stdout


def test_the_readme_python_example_runs_and_commits(tmp_path):
    code = readme_python_block()
    ast.parse(code)
    # a fresh process, without the profile's variables: the block itself must apply the profile
    env = {k: v for k, v in os.environ.items() if k not in kit.NUMERIC_ENV and k not in ("RANK", "WORLD_SIZE")}
    env.update(PYTHONPATH=str(REPO), TMPDIR=str(tmp_path), KIT_PROGRESS="0")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    cursor, root = done.stdout.strip().splitlines()[-1].rsplit(" ", 1)
    assert ast.literal_eval(cursor) == {"cohort": 0, "cohort_step": 2, "step": 2}
    (out,) = tmp_path.glob("kit-python-*")  # tempfile.mkdtemp honours TMPDIR
    from kit.store.commits import verify_commit

    report = verify_commit(out / "A2", root)  # every object re-hashed, both roots recomputed
    assert (report["full_root"], report["workers"], report["num_layers"]) == (root, 2, 4)
    (attempt,) = (out / "A2" / "attempts").glob("*/attempt.json")
    record = json.loads(attempt.read_text())
    assert (record["status"], record["workers"], record["until"]) == ("completed", 2, 2)
    assert [c["full_root"] for c in record["commits"]][-1] == root
