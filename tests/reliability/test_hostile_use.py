"""Hostile input and daily use, second round (issue #64, items 1, 2, 4 and 5): gc and damaged stores,
learning rates and weight decay out of bounds, non-finite parameters, chat templates, and the messages
of a full disk, a busy home, a CPU build asked for CUDA, a report title and a hostile run.json.

Each test reproduces one case of the issue; a refusal is one line `kit ...: error: ...` naming the file or
field, exit 2, never a traceback, and nothing committed is lost or changed.
"""

from __future__ import annotations

import errno
import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from support.reliability import commit, model_commit, random_states, write_seed

from kit.cli import main
from kit.store import commits
from kit.store.objects import ObjectStore


def refused(capsys, argv: list[str], *needles: str, rc: int = 2) -> str:
    """Run `kit ARGV` in-process: exit `rc`, one line `kit ...: error: ...` holding every needle."""
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    assert code == rc, (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kit ") and ": error: " in lines[0], err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# -- 1. gc never deletes what HEAD or a manifest names ------------------------------------------------


def two_commits(tmp_path: Path) -> tuple[Path, str, str, set[str]]:
    """A store with commits first <- second (HEAD) and one stray object; returns (home, first, second,
    every object present)."""
    home = tmp_path / "store"
    first = commit(home, seed=1, parent=None)
    second = commit(home, seed=2, parent=first)
    ObjectStore(home).put_bytes(b"an object no manifest names")
    return home, first, second, set(ObjectStore(home).digests())


def test_gc_objects_refuses_when_heads_manifest_is_missing(tmp_path, capsys):
    home, first, second, before = two_commits(tmp_path)
    (home / "commits" / f"{second}.json").unlink()
    refused(capsys, ["checkpoint", "gc", "--home", str(home), "--objects"], str(home / "HEAD"), second,
            "does not exist", "refused")
    assert set(ObjectStore(home).digests()) == before  # not one object of HEAD's commit deleted


def test_gc_objects_refuses_when_every_manifest_is_gone(tmp_path, capsys):
    home, _, _, before = two_commits(tmp_path)
    for path in (home / "commits").glob("*.json"):
        path.unlink()
    refused(capsys, ["checkpoint", "gc", "--home", str(home), "--objects"], "refused")
    (home / "HEAD").unlink()  # HEAD gone too: objects but no record of any commit
    refused(capsys, ["checkpoint", "gc", "--home", str(home), "--objects"], str(home / "commits"),
            "no commit manifest", "refused")
    assert set(ObjectStore(home).digests()) == before


@pytest.mark.parametrize("objects", [False, True])
def test_gc_refuses_a_linked_commits_folder(tmp_path, capsys, objects):
    home, _, _, before = two_commits(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    shutil.rmtree(home / "commits")
    (home / "commits").symlink_to(empty)
    refused(capsys, ["checkpoint", "gc", "--home", str(home), *(["--objects"] if objects else [])],
            str(home / "commits"), "symbolic link")
    assert set(ObjectStore(home).digests()) == before


def test_gc_objects_keeps_every_object_a_manifest_or_head_names(tmp_path, capsys):
    home, first, second, before = two_commits(tmp_path)
    stray = before - set(commits.object_digests(commits.read_commit(home, first))) \
        - set(commits.object_digests(commits.read_commit(home, second)))
    assert main(["checkpoint", "gc", "--home", str(home), "--objects"]) == 0
    assert set(ObjectStore(home).digests()) == before - stray and len(stray) == 1
    assert commits.verify_commit(home, first)["full_root"] == first
    assert commits.verify_commit(home)["full_root"] == second
