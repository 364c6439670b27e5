"""No tracked file is a symbolic link to an absolute path (issue 52, item 10): such a link names one machine
(`.venv-shared` -> /tmp/clean/.venv was tracked) and dangles in every other clone."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def absolute_links(repo: Path) -> list[str]:
    """Tracked links (mode 120000) whose target, as git stores it, is an absolute path."""
    staged = subprocess.run(["git", "ls-files", "-s", "-z"], cwd=repo, capture_output=True, check=True).stdout
    out = []
    for entry in filter(None, staged.split(b"\0")):
        meta, path = entry.split(b"\t", 1)
        mode, blob = meta.split()[:2]
        if mode == b"120000":
            target = subprocess.run(["git", "cat-file", "blob", blob], cwd=repo, capture_output=True,
                                    check=True).stdout
            if target.startswith(b"/"):
                out.append(f"{path.decode()} -> {target.decode()}")
    return out


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="not a git checkout")
def test_no_tracked_link_to_an_absolute_path():
    assert absolute_links(REPO) == []


def test_the_check_finds_one(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "shared").symlink_to("/tmp/clean/.venv")
    (tmp_path / "near").symlink_to("shared")
    subprocess.run(["git", "add", "shared", "near"], cwd=tmp_path, check=True)
    assert absolute_links(tmp_path) == ["shared -> /tmp/clean/.venv"]
