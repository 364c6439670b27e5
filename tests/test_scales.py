"""One vocabulary of scales (issue 52, item 8): tiny, medium, full for contracts, seeds, the demo and the
campaigns; the medium seed's old name `small` still works, with a deprecation warning."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from kit.contract import SCALES, scale_name

REPO = Path(__file__).resolve().parents[1]


def scale_options(parser: argparse.ArgumentParser, name: str = "kit"):
    for action in parser._actions:
        if "--scale" in action.option_strings:
            yield name, action
        if isinstance(action, argparse._SubParsersAction):
            for sub, p in action.choices.items():
                yield from scale_options(p, f"{name} {sub}")


def test_every_scale_option_speaks_the_vocabulary():
    from kit.cli import build_parser

    found = dict(scale_options(build_parser()))
    assert set(found) == {"kit seed build", "kit demo"}
    for name, action in found.items():
        assert set(action.choices) <= set(SCALES), (name, action.choices)
    from kit.adaptive.schema import AdaptiveContract

    assert set(AdaptiveContract.spec()["scale"].values) == set(SCALES)
    for path in sorted((REPO / "contracts").glob("*.json")):
        assert json.loads(path.read_text())["scale"] in SCALES, path


def test_old_name_maps_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match=r"--scale 'small' is deprecated; use 'medium'"):
        assert scale_name("small", "--scale") == "medium"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [scale_name(s) for s in SCALES] == list(SCALES)
        assert scale_name("huge") == "huge"  # the caller's choices refuse it


def test_seed_build_small_is_medium_on_the_command_line(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-m", "kit", "seed", "build", "--scale", "small", "--test-size", "--out",
                        str(tmp_path / "s")], capture_output=True, text=True, env=env, timeout=120, check=False)
    # small was read as medium: the medium build's own refusal of --test-size, after one warning line
    assert p.returncode == 2 and not (tmp_path / "s").exists()
    lines = p.stderr.strip().splitlines()
    assert lines[0] == ("warning: --scale 'small' is deprecated; use 'medium' (the scales are tiny, medium, full)")
    assert "--test-size is for --scale tiny; a short medium build" in lines[1] and len(lines) == 2
    p = subprocess.run([sys.executable, "-m", "kit", "demo", "--scale", "large"], capture_output=True, text=True,
                       env=env, timeout=120, check=False)
    assert p.returncode == 2 and "invalid choice: 'large'" in p.stderr


def test_seed_notebook_reads_size_through_the_vocabulary():
    nb = json.loads((REPO / "notebooks" / "00_seed.ipynb").read_text())
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert 'SIZE = scale_name(SIZE, "SIZE")' in code
    assert 'SIZES = {"tiny": SeedBuildConfig.tiny, "test": SeedBuildConfig.test, "medium": None}' in code
    assert 'SIZE == "small"' not in code and 'SIZE != "small"' not in code
