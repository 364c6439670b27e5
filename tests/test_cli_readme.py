"""README.md's command reference is the parser's: generated from it, and checked both ways here."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from kit.cli import build_parser
from kit.cli.args import leaf_parsers
from kit.cli.reference import command_reference, readme_block

README = Path(__file__).resolve().parents[1] / "README.md"


def _section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("## Command line\n")
    return text[start:text.index("\n## ", start + 1)]


def test_readme_reference_is_generated_from_the_parser():
    assert readme_block(README) == command_reference(), \
        "README.md's command reference is stale: run `python -m kit.cli.reference --write` and commit README.md"


def test_every_subcommand_and_option_is_in_the_readme_and_vice_versa():
    section = _section()
    options = set()
    for words, leaf in leaf_parsers(build_parser()):
        assert f"kit {' '.join(words)}\n" in section, f"kit {' '.join(words)} is not in README.md"
        for action in leaf._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            options.update(action.option_strings)
            for name in action.option_strings:
                assert name in section, f"kit {' '.join(words)} {name} is not in README.md"
    for name in ("--reference-home", "--dev-eval", "--tokenizer"):  # the ones issue 16 found missing
        assert name in section
    mentioned = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", section)) - {"--help", "--write"}
    assert mentioned <= options, f"README.md names options the parser lacks: {sorted(mentioned - options)}"
