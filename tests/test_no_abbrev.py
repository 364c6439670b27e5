"""Every argparse parser in the repository refuses abbreviated options (issue 52, item 5): a mistyped
`--worker 2` once ran as `--workers 2`. The walk runs each script that builds a parser (kit/, campaigns/,
tools/, bench/) as `__main__` in one child process, stops it at its first parse, and checks that parser and
every subparser below it."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

WALK = r"""
import argparse, json, runpy, sys

class Parsed(BaseException):
    pass

def stop(self, args=None, namespace=None):
    raise Parsed(self)

argparse.ArgumentParser.parse_known_args = stop
out = {}
for path in sys.argv[1:]:
    sys.argv = [path]
    try:
        runpy.run_path(path, run_name="__main__")
        out[path] = "no parse"
    except Parsed as e:
        seen, todo = [], [(e.args[0].prog, e.args[0])]
        while todo:
            name, p = todo.pop()
            seen.append([name, p.allow_abbrev])
            for a in p._actions:
                if isinstance(a, argparse._SubParsersAction):
                    todo += [(f"{name} {k}", sp) for k, sp in a.choices.items()]
        out[path] = seen
print("WALK" + json.dumps(out))
"""


def parser_scripts() -> list[str]:
    """Every file under kit/, campaigns/, tools/, bench/ that calls ArgumentParser(...) or kit's Parser(...)."""
    found = []
    for top in ("kit", "campaigns", "tools", "bench"):
        for path in sorted((REPO / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                f = getattr(node, "func", None)
                name = getattr(f, "attr", None) or getattr(f, "id", None)
                if isinstance(node, ast.Call) and name in ("ArgumentParser", "Parser"):
                    found.append(str(path.relative_to(REPO)))
                    break
    return found


def test_every_parser_refuses_abbreviations():
    scripts = parser_scripts()
    assert {"kit/cli/__init__.py", "tools/gpu_wheels.py", "bench/seed_pack.py", "campaigns/medium_pilot.py"} <= set(scripts)
    env = dict(os.environ, PYTHONPATH=str(REPO), KIT_PROGRESS="0")
    p = subprocess.run([sys.executable, "-c", WALK, *scripts], check=False, cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=300)
    walked = json.loads(p.stdout.split("WALK", 1)[1])
    assert set(walked) == set(scripts), p.stderr[-2000:]
    unparsed = [s for s, v in walked.items() if v == "no parse"]
    assert not unparsed, f"never reached its parser: {unparsed}"
    abbrev = [name for parsers in walked.values() for name, allowed in parsers if allowed is not False]
    assert not abbrev, f"parsers that accept abbreviations: {abbrev}"
    kit_parsers = [name for name, _ in walked["kit/cli/__init__.py"]]
    assert "kit adaptive train" in " | ".join(kit_parsers) and len(kit_parsers) > 30


def test_mistyped_option_is_refused_not_abbreviated(tmp_path):
    from kit.model.config import toy_shape

    config = tmp_path / "config.json"
    config.write_text(json.dumps(toy_shape().to_hf_dict()))
    kit = [sys.executable, "-m", "kit", "plan", "--config", str(config), "--worker", "80GiB"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    whole = subprocess.run(kit + ["--json"], check=False, cwd=REPO, capture_output=True, text=True, env=env, timeout=120)
    assert whole.returncode == 0 and json.loads(whole.stdout)
    p = subprocess.run(kit + ["--jso"], check=False, cwd=REPO, capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 2 and p.stdout == ""
    assert "unrecognized arguments: --jso" in p.stderr and len(p.stderr.strip().splitlines()) == 1
