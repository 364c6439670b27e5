"""Two scorings recording to one exposure ledger at once (the campaign's side-by-side trials on one host):
whole blocks, no line interleaved or written twice for a contract (kit/evidence/ledger.py, record)."""

from __future__ import annotations

import multiprocessing

from kit.evidence.ledger import read_ledger, record


def _writer(path: str, contract: str, n: int, rounds: int) -> None:
    for r in range(rounds):
        # every round repeats the earlier items: only the new one may be written
        items = [("final.task", f"{contract}-{i:04d}", f"id-{i}") for i in range((r + 1) * n)]
        record(items, contract, "job", "test", path, run="run", time="2026-12-02T00:00:00Z")


def test_two_processes_recording_at_once_keep_whole_lines_and_no_duplicates(tmp_path):
    path = str(tmp_path / "exposed.jsonl")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, c, 50, 8)) for c in ("a" * 64, "b" * 64)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    entries = read_ledger(path)  # every line parses as one entry
    for c in ("a" * 64, "b" * 64):
        mine = [e["digest"] for e in entries if e["contract_digest"] == c]
        assert sorted(mine) == [f"{c}-{i:04d}" for i in range(400)]  # each exactly once
