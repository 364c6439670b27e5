"""publish_dir: an output folder appears whole by one rename, or not at all."""

from __future__ import annotations

import pytest

from kit.publish import publish_dir


def test_publishes_on_success_and_leaves_no_staging(tmp_path):
    out = tmp_path / "out"
    with publish_dir(out) as staging:
        (staging / "a.txt").write_text("x")
        assert not out.exists()  # nothing visible at `out` until the body returns
    assert (out / "a.txt").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_failure_removes_staging_and_leaves_out_untouched(tmp_path):
    out = tmp_path / "out"
    out.mkdir()  # an empty target is allowed, and stays as it was when the body fails
    with pytest.raises(RuntimeError, match="boom"), publish_dir(out) as staging:
        (staging / "a.txt").write_text("x")
        raise RuntimeError("boom")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and not any(out.iterdir())


def test_refuses_a_non_empty_target_unless_replacing(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    with pytest.raises(ValueError, match=r"out: already exists and is not an empty directory"), publish_dir(out):
        pytest.fail("the body must not run")
    with publish_dir(out, replace=True) as staging:
        (staging / "new.txt").write_text("new")
    assert sorted(p.name for p in out.iterdir()) == ["new.txt"]
