"""Two scorings recording to one exposure ledger at once (the campaign's side-by-side trials on one host):
whole lines, and an item recorded for a contract exactly once even when both writers record it
(kit/evidence/ledger.py, record: what is already there is read under the same lock as the append)."""

from __future__ import annotations

import multiprocessing

from kit.evidence.ledger import read_ledger, record

CONTRACT = "c" * 64


def _writer(path: str, name: str, rounds: int, start) -> None:
    start.wait()  # both begin together, so their reads and appends interleave
    for r in range(rounds):
        # the same contract's items from both writers, each round repeating the earlier ones and adding 25
        items = [("final.task", f"task-{i:04d}", f"id-{i}") for i in range((r + 1) * 25)]
        record(items, CONTRACT, "job", f"test {name}", path, run=name, time="2026-12-02T00:00:00Z")


def test_two_processes_recording_the_same_items_at_once_write_each_once(tmp_path):
    path = str(tmp_path / "exposed.jsonl")
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(2)
    procs = [ctx.Process(target=_writer, args=(path, name, 8, start)) for name in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    digests = [e["digest"] for e in read_ledger(path)]  # every line parses as one entry
    assert sorted(digests) == [f"task-{i:04d}" for i in range(200)]  # each exactly once, none lost
