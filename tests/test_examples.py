"""examples/*.sh run from a bare copy of the repository (the files a clone has, no runs/, no build
outputs), on a test-size seed with the tiny contract's 4 blocks, each with its own output folder and
exposure ledger: the committed ledger/exposed.jsonl is neither emptying their finals nor written."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kit.digest import sha256_file
from kit.evidence.ledger import read_ledger

REPO = Path(__file__).resolve().parents[1]
CLONED = ("kit", "examples", "contracts", "data", "ledger", "pyproject.toml")  # what the scripts read


def _tracked(rel: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", rel],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if (REPO / line).is_file()]


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """The repository's tracked files (as a clone has them) and a seed built outside it."""
    from kit.seed.build import SeedBuildConfig, build_seed

    root = tmp_path_factory.mktemp("clone")
    for rel in CLONED:
        for name in _tracked(rel):
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(REPO / name, root / name)
    seed = tmp_path_factory.mktemp("seed") / "seed"
    # the test-size seed with the tiny contract's 4 blocks (3 workers, copy_block 3): seconds, not minutes
    build_seed(seed, dataclasses.replace(SeedBuildConfig.test(), num_hidden_layers=4), progress=False)
    return root, seed


def _run(clone_root: Path, script: str, *args, python: str | None = None, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("KIT_LEDGER", "KIT_RUN_DIR", "PYTHONPATH")}
    environ |= {"PYTHON": python or sys.executable, "PYTHONPATH": str(clone_root), "KIT_PROGRESS": "0", **env}
    return subprocess.run(["bash", str(clone_root / "examples" / script), *map(str, args)], cwd=clone_root,
                          env=environ, capture_output=True, text=True, timeout=540, check=False)


def _example(clone, out: Path, script: str) -> tuple[Path, str, subprocess.CompletedProcess]:
    """(the clone's root, the committed ledger's sha256 before, the finished run of `script` into `out`)."""
    root, seed = clone
    committed = sha256_file(root / "ledger" / "exposed.jsonl")
    done = _run(root, script, out, seed)
    assert done.returncode == 0, done.stderr[-3000:]
    return root, committed, done


def test_adaptive_example_runs_from_a_bare_clone_with_its_own_ledger(clone, tmp_path):
    out = tmp_path / "adaptive"
    root, committed, done = _example(clone, out, "adaptive_tiny.sh")
    gates = json.loads((out / "gates.json").read_text())
    assert set(gates["comparisons"]) == {"A_vs_seed", "B_vs_A", "growth_vs_control"}
    assert json.loads((out / "migration-comparison.json").read_text())["learned_state_equal"] is True
    homes = [out / h for h in ("A2", "A3", "B", "G")]
    commits = [f"verified {h} {r.stem}" for h in homes for r in (h / "commits").glob("*.json")]
    assert len(commits) >= 8 and all(c in done.stdout for c in commits)  # every commit of the four homes
    ledger = read_ledger(out / "ledger" / "exposed.jsonl")
    assert len([e for e in ledger if e["kind"] == "final.task"]) == 96  # the three final scorings, once each
    assert sha256_file(root / "ledger" / "exposed.jsonl") == committed  # the committed ledger is untouched
    pj = json.loads((out / "prepared" / "prepared.json").read_text())
    assert pj["ledger"]["entries"] == 0 and pj["exclusions"]["final.retention"]["excluded"]["ledger"] == 0


def test_gradient_study_example_runs_from_a_bare_clone_on_a_copy_of_the_committed_ledger(clone, tmp_path):
    out = tmp_path / "study"
    root, committed, _ = _example(clone, out, "gradient_study_tiny.sh")
    screens = json.loads((out / "study" / "screens.json").read_text())
    assert {a["arm"] for a in screens["arms"]} == {"single", "dense", "powersgd"}
    # the exposed probes came from the committed ledger's copy; the study's scoring appended to the copy only
    assert sha256_file(root / "ledger" / "exposed.jsonl") == committed
    copy = (out / "ledger" / "exposed.jsonl").read_bytes()
    assert copy.startswith((root / "ledger" / "exposed.jsonl").read_bytes()) and b'"retention.probe"' in copy


def test_examples_refuse_a_python_without_the_kit(clone, tmp_path):
    root, seed = clone
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 1\n")  # a Python that cannot import the kit
    fake.chmod(0o755)
    for script in ("adaptive_tiny.sh", "gradient_study_tiny.sh"):
        done = _run(root, script, tmp_path / "o", seed, python=str(fake))
        assert done.returncode == 2 and "cannot import the kit" in done.stderr and "make" in done.stderr
        assert "Traceback" not in done.stderr
