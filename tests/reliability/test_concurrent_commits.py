"""Issue 9, case 6: two processes commit to one home at the same moment, 100 times.

Two real writer processes stage their own commit on the same parent (same parameter objects, their
own RNG objects and cursor, so the two commits differ), then are released together; each calls
`write_commit` directly. Exactly one must win each round (the other gets HeadMoved), HEAD must then
name the winner's commit, and a third observer, reading HEAD in a loop in this process for the whole
time, must only ever see 64 hex digits and a newline naming a manifest whose every object verifies.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from support.reliability import worker_env

from kit.store.commits import HEAD_RE, read_commit, read_head, verify_commit

ROUNDS = 100

WRITER = r"""
import sys
from pathlib import Path
import kit.numerics
kit.numerics.apply()  # a script of one's own applies the profile before computing roots
from kit.store.commits import HeadMoved, write_commit
from support.reliability import stage_commit

home, me = Path(sys.argv[1]), sys.argv[2]
print("ready", flush=True)
for line in sys.stdin:
    cmd, rnd, parent = line.split()
    if cmd == "stage":
        staged = stage_commit(home, seed=int(rnd), tag=me)
        print("staged", flush=True)
    else:
        ls, layout, rng = staged
        try:
            print("won", write_commit(home, ls, layout, None if parent == "-" else parent, rng), flush=True)
        except HeadMoved:
            print("lost", "-", flush=True)
"""


class HeadObserver(threading.Thread):
    """Reads HEAD continuously; records every state that is not a complete commit."""

    def __init__(self, home: Path):
        super().__init__(daemon=True)
        self.home, self.stop, self.seen, self.bad = home, threading.Event(), set(), []

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                data = (self.home / "HEAD").read_bytes()
            except FileNotFoundError:
                continue  # before the first commit
            if not HEAD_RE.fullmatch(data):
                self.bad.append(f"HEAD bytes {data!r}")
                continue
            root = data[:64].decode()
            try:
                verify_commit(self.home, root)
            except ValueError as e:
                self.bad.append(f"{root}: {e}")
            self.seen.add(root)


def _send(procs, line: str, first: int = 0) -> list[list[str]]:
    for p in procs[first:] + procs[:first]:  # back to back, so that both act at the same moment
        p.stdin.write(line + "\n")
        p.stdin.flush()
    return [p.stdout.readline().split() for p in procs]


def test_two_writers_race_one_winner_each_time(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(home), str(w)], env=worker_env(),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for w in (1, 2)]
    observer = HeadObserver(home)
    try:
        assert [p.stdout.readline().strip() for p in procs] == ["ready", "ready"]
        observer.start()
        winners, parent = [], None
        for rnd in range(1, ROUNDS + 1):
            assert _send(procs, f"stage {rnd} -") == [["staged"], ["staged"]]
            outcomes = _send(procs, f"go {rnd} {parent or '-'}", first=rnd % 2)  # alternate who hears first
            won = [(w, o[1]) for w, o in enumerate(outcomes, start=1) if o[0] == "won"]
            assert len(won) == 1 and sorted(o[0] for o in outcomes) == ["lost", "won"], (rnd, outcomes)
            writer, root = won[0]
            assert read_head(home) == root
            manifest = read_commit(home, root)
            assert manifest["parent"] == parent and manifest["learned_state"]["cursor"] == {"step": rnd, "writer": writer}
            winners.append(writer)
            parent = root
    finally:
        observer.stop.set()
        for p in procs:
            p.stdin.close()
            p.wait(timeout=30)
    observer.join(timeout=30)
    assert observer.bad == []
    assert len(observer.seen) > 10  # the observer really watched HEAD move
    assert verify_commit(home)["full_root"] == parent
    assert not (home / "HEAD.lock").exists() and list((home / "tmp").iterdir()) == []
    assert [p.returncode for p in procs] == [0, 0]
    # both writers won some rounds (which writer hears 'go' first alternates)
    assert set(winners) == {1, 2}, winners
