"""Every subcommand of `kit`, discovered from the parser, with bad paths: one line, no traceback, exit 2.

For each path-like option or positional (its argparse `type` is a kit.cli.args checker) the walk feeds
(a) a missing path, (b) a file where a folder belongs (or a folder where a file belongs), (c) garbage
JSON (a garbage file, and a folder whose marker file, e.g. prepared.json, is garbage), in process
through `kit.cli.main`. A second check makes sure no path-like option escaped the checkers.
"""

from __future__ import annotations

import argparse
import re

import pytest

from kit.cli import build_parser, main
from kit.cli.args import Dir, Named, PathArg, leaf_parsers

# Words in an option's name that say it takes a path (or HOME:ROOT / NAME=PATH holding one).
PATHISH = ("dir", "home", "out", "prepared", "seed", "contract", "source", "study", "plan", "notebook", "config",
           "eval", "selection", "tokenizer", "replay", "retention", "ledger", "runs", "work", "candidate",
           "baseline", "start")
NOT_PATHS = {"--memory-model", "--contract-digest"}  # JSON text and a sha256, not paths


def _path_actions(parser):
    return [a for a in parser._actions if isinstance(a.type, PathArg)]


def _argv(words, action, value):
    return [*words, *( [action.option_strings[0]] if action.option_strings else []), value]


def _cases(action, tmp):
    """(case name, value) pairs the checker of `action` must refuse."""
    t = action.type
    garbage = tmp / "garbage.json"
    out = []
    if t.kind == "input":
        out.append(("missing", t.sample(str(tmp / "does-not-exist"))))
    if t.wants_dir:
        out.append(("file-for-folder", t.sample(str(garbage))))
    else:
        out.append(("folder-for-file", t.sample(str(tmp / "a-folder"))))
    if t.kind == "input":
        out.append(("garbage-json", t.sample(str(garbage))))
        inner = t.inner if isinstance(t, Named) else t
        marker = getattr(inner, "marker", None) or getattr(getattr(inner, "store", None), "marker", None)
        if isinstance(inner, Dir) and marker:
            out.append(("garbage-marker", t.sample(str(tmp / "garbage-marker"))))
    return out


def _walk():
    for words, leaf in leaf_parsers(build_parser()):
        for action in _path_actions(leaf):
            yield words, action


WALK = list(_walk())


@pytest.fixture(scope="module")
def bad(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad")
    (tmp / "garbage.json").write_text("{not json at all\n")
    (tmp / "a-folder").mkdir()
    for marker in ("prepared.json", "config.json", "prepared/prepared.json"):
        (tmp / "garbage-marker" / marker).parent.mkdir(parents=True, exist_ok=True)
        (tmp / "garbage-marker" / marker).write_text("garbage")
    return tmp


def test_the_walk_covers_every_subcommand():
    leaves = {" ".join(w) for w, _ in leaf_parsers(build_parser())}
    walked = {" ".join(w) for w, _ in WALK}
    # every subcommand except those without a path argument
    assert leaves - walked == set(), leaves - walked
    assert len(WALK) >= 50


def test_every_path_like_argument_is_checked():
    unchecked = []
    for words, leaf in leaf_parsers(build_parser()):
        for action in leaf._actions:
            if isinstance(action, (argparse._HelpAction, argparse._StoreTrueAction)) or action.choices:
                continue
            name = (action.option_strings or [action.dest])[-1]
            if name in NOT_PATHS or isinstance(action.type, PathArg):
                continue
            words_of_name = re.split(r"[-_]", name.strip("-").lower())
            if any(w in PATHISH or w.rstrip("s") in PATHISH for w in words_of_name):
                unchecked.append(f"kit {' '.join(words)} {name}")
    assert not unchecked, unchecked


@pytest.mark.parametrize("words,action", WALK, ids=[f"{'-'.join(w)}:{(a.option_strings or [a.dest])[0]}"
                                                    for w, a in WALK])
def test_bad_path_is_one_line_exit_2(words, action, bad, capsys):
    for case, value in _cases(action, bad):
        status = main(_argv(words, action, value))
        err = capsys.readouterr().err
        where = f"kit {' '.join(words)} ({case}: {value})"
        assert status == 2, (where, err)
        assert "Traceback" not in err, where
        assert err.endswith("\n") and err.count("\n") == 1, (where, err)
        assert err.startswith(f"kit {' '.join(words)}: error: "), (where, err)
        assert "expected" in err, (where, err)
        path = value.partition("=")[2] if isinstance(action.type, Named) else value
        path = path.rpartition(":")[0] if path.endswith(":" + "0" * 64) else path
        assert path in err, (where, err)


def test_named_refusals(bad, tmp_path, capsys):
    """The cases of issue 16 by name."""
    assert main(["adaptive", "train", "--prepared", str(bad / "garbage.json"), "--seed", "s", "--home", "h"]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert main(["adaptive", "train", "--prepared", str(bad / "garbage-marker"), "--seed", "s", "--home", "h"]) == 2
    err = capsys.readouterr().err
    assert "prepared.json is not valid JSON" in err and "`kit adaptive prepare`" in err
    assert main(["checkpoint", "verify", "--home", "/nonexistent"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kit checkpoint verify: error:") and "/nonexistent: the folder does not exist" in err
    # the kit's own refusals name the subcommand too: an empty store has no HEAD
    (tmp_path / "store").mkdir()
    assert main(["checkpoint", "show", "--home", str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kit checkpoint show: error: ") and "no HEAD" in err and err.count("\n") == 1
    # usage errors are one line and name the subcommand
    assert main(["adaptive", "train"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kit adaptive train: error: the following arguments are required") and err.count("\n") == 1


def test_source_is_a_deprecated_alias(capsys):
    from pathlib import Path

    source = Path(__file__).resolve().parents[1] / "data" / "alpaca_5000.json"
    assert main(["study", "prepare", "--source", str(source)]) == 2  # other options missing: refused after
    err = capsys.readouterr().err
    assert "kit study prepare: warning: --source is deprecated; use --public-source" in err


def test_inspection_notebook_refuses_before_writing(tmp_path, capsys):
    """`kit run` of the inspection notebook: an unknown RUN_ID is refused with no run record written, and
    RUNS_DIR is --runs-dir (one setting): -p RUNS_DIR is refused."""
    from pathlib import Path

    nb = str(Path(__file__).resolve().parents[1] / "notebooks" / "90_inspect_failed_arm.ipynb")
    runs = tmp_path / "runs"
    (runs / "some-run").mkdir(parents=True)
    (runs / "some-run" / "run.json").write_text("{}")
    assert main(["run", nb, "-p", "RUN_ID", "no-such-run", "--runs-dir", str(runs)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kit run: error: ") and "no-such-run: no such run" in err and "some-run" in err
    assert err.count("\n") == 1
    assert sorted(p.name for p in runs.iterdir()) == ["some-run"]  # no failed record
    assert main(["run", nb, "-p", "RUN_ID", "some-run", "-p", "RUNS_DIR", str(runs), "--runs-dir", str(runs)]) == 2
    assert "give --runs-dir" in capsys.readouterr().err
