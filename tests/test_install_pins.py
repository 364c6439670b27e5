"""The CPU install pins transformers to the tested range (issue 52, item 9): the GPU hosts and their records
have 5.17, the CPU install took whatever was newest before; the run record names the version that ran."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]


def test_transformers_is_pinned_to_the_tested_range():
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    spec = {Requirement(d).name: Requirement(d).specifier for d in deps}["transformers"]
    assert str(spec) == "<5.26,>=5.17"
    assert "5.17.0" in spec and "5.25.0" in spec and "5.26.0" not in spec and "4.57.0" not in spec


def test_installed_transformers_is_in_the_range():
    import transformers

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    spec = next(Requirement(d).specifier for d in deps if Requirement(d).name == "transformers")
    assert transformers.__version__ in spec, transformers.__version__
