"""The exposure ledger a preparation read, given back on replay (kit.evidence.ledger LEDGER_INPUT,
lines_with_digest; kit.evidence.replay Replayer._restore_ledger): the block of committed lines whose bytes
have the recorded digest is found and written as the replay's own ledger, and a digest that names no such
block is refused."""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from kit.evidence.ledger import EMPTY_SHA256, LEDGER_INPUT, LEDGER_RELATIVE, lines_with_digest, read_digest
from kit.evidence.replay import Replayer, ReplayError

LINES = [f'{{"id":"x:{i}","n":{i}}}\n'.encode() for i in range(6)]


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


@pytest.fixture
def ledger(tmp_path) -> Path:
    path = tmp_path / "repo" / LEDGER_RELATIVE
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(LINES))
    return path


def test_the_empty_ledger_and_an_absent_one_have_the_empty_digest(ledger, tmp_path):
    assert read_digest(None) == EMPTY_SHA256 == _sha(b"")
    assert read_digest("a" * 64) == "a" * 64
    assert lines_with_digest(ledger, EMPTY_SHA256) == b""
    assert lines_with_digest(tmp_path / "absent.jsonl", EMPTY_SHA256) == b""


@pytest.mark.parametrize("i, j", [(0, 6), (0, 2), (2, 5), (5, 6)])
def test_any_block_of_whole_lines_is_found_by_its_digest(ledger, i, j):
    block = b"".join(LINES[i:j])
    assert lines_with_digest(ledger, _sha(block)) == block


def test_bytes_that_are_not_whole_consecutive_lines_are_not_found(ledger):
    assert lines_with_digest(ledger, _sha(LINES[0] + LINES[2])) is None  # not consecutive
    assert lines_with_digest(ledger, _sha(LINES[1][:-1])) is None  # not a whole line
    assert lines_with_digest(ledger, _sha(b"".join(LINES) + LINES[0])) is None  # longer than the ledger


def _replayer(repo: Path, work: Path) -> Replayer:
    (repo / "runs").mkdir(exist_ok=True)
    return Replayer(repo / "runs", work, log=lambda m: None)


def test_a_replay_gives_the_preparation_the_lines_it_read(ledger, tmp_path):
    work = tmp_path / "work"
    block = b"".join(LINES[1:4])
    r = _replayer(ledger.parents[1], work)
    r._restore_ledger(SimpleNamespace(input_digests={LEDGER_INPUT: _sha(block)}), Path("runs/p"))
    assert (work / LEDGER_RELATIVE).read_bytes() == block
    r._restore_ledger(SimpleNamespace(input_digests={LEDGER_INPUT: EMPTY_SHA256}), Path("runs/p"))
    assert not (work / LEDGER_RELATIVE).exists()  # no lines read: absent, as the preparation found it


def test_a_record_without_the_digest_leaves_the_replays_ledger_as_it_is(ledger, tmp_path):
    work = tmp_path / "work"
    (work / LEDGER_RELATIVE).parent.mkdir(parents=True)
    (work / LEDGER_RELATIVE).write_bytes(LINES[0])
    _replayer(ledger.parents[1], work)._restore_ledger(SimpleNamespace(input_digests={}), Path("runs/p"))
    assert (work / LEDGER_RELATIVE).read_bytes() == LINES[0]


def test_a_digest_the_committed_ledger_does_not_hold_is_refused(ledger, tmp_path):
    r = _replayer(ledger.parents[1], tmp_path / "work")
    with pytest.raises(ReplayError, match=r"runs/p: input_digests\['exposure_ledger'\] = 0{64}: no consecutive lines"):
        r._restore_ledger(SimpleNamespace(input_digests={LEDGER_INPUT: "0" * 64}), Path("runs/p"))
    assert not (tmp_path / "work" / LEDGER_RELATIVE).exists()
