"""Background commits (kit.engine.commit): same roots as the synchronous commit, training goes on
while the objects are written, errors surface naming the step, and a SIGKILL during the background
write leaves HEAD on the previous commit with a store that verifies."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from support.engine import OPT
from support.engine_workers import engine_config, launch_env
from support.models import write_hf_llama
from support.session import BATCHES, LAYERS, make_session, update

from kit.distributed.group import Group
from kit.engine.commit import AsyncCommitter
from kit.engine.session import Session
from kit.model.shard import even_layout
from kit.store import commits
from kit.train.optim import GroupConfig

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    root = tmp_path_factory.mktemp("async-seeds")
    return (write_hf_llama(root / "student", layers=LAYERS, seed=0),
            write_hf_llama(root / "reference", layers=LAYERS, seed=1))


def sync_roots(seeds, home: Path) -> list[tuple[str, str]]:
    """Reference: updates 1, 2 committed synchronously after each update."""
    s = make_session(*seeds, home)
    out = []
    for _ in range(2):
        update(s)
        out.append(s.commit())
    return out


class GatedWriter:
    """The store's object writer, held at a gate: records the thread it ran on and when it started."""

    def __init__(self, fail: OSError | None = None):
        self.started, self.release = threading.Event(), threading.Event()
        self.thread: int | None = None
        self.fail = fail

    def __call__(self, store, states):
        self.thread = threading.get_ident()
        self.started.set()
        assert self.release.wait(60), "the test never released the writer"
        if self.fail is not None:
            raise self.fail
        return commits.save_param_states(store, states)


def test_background_commit_gives_the_synchronous_roots(tmp_path, seeds):
    expected = sync_roots(seeds, tmp_path / "sync")
    s = make_session(*seeds, tmp_path / "async")
    update(s)
    assert s.commit(background=True) is None
    assert s.wait_commit() == expected[0]
    update(s)
    s.commit(background=True)
    polls = 0
    while s.committer.inflight is not None:  # completes through the updates' polls alone
        s.committer.inflight.job.wait()  # (so that the number of polls is known)
        update(s)
        polls += 1
    assert polls == 2  # one poll gathers the entries and starts HEAD's move, the next one learns the outcome
    assert (s.committer.last["full_root"], s.committer.last["learned_state_root"]) == expected[1]
    assert commits.read_head(tmp_path / "async") == expected[1][0]
    a = (tmp_path / "sync" / "commits" / f"{expected[1][0]}.json").read_bytes()
    b = (tmp_path / "async" / "commits" / f"{expected[1][0]}.json").read_bytes()
    assert a == b  # byte-identical manifests, parent chain included
    assert commits.verify_commit(tmp_path / "async")["full_root"] == expected[1][0]


def test_training_continues_while_the_background_thread_writes(tmp_path, seeds):
    expected = sync_roots(seeds, tmp_path / "sync")
    s = make_session(*seeds, tmp_path / "async")
    update(s)
    s.commit()  # step 1, synchronous: HEAD = expected[0]
    update(s)
    writer = GatedWriter()
    s.committer = AsyncCommitter(s.store, writer)
    s.commit(background=True)  # step 2
    assert writer.started.wait(60)
    before = {n: st["param"].clone() for n, st in s.engine.optimizer.param_states().items()}
    update(s)  # step 3 runs while the writer is held: the commit is still writing its objects
    assert s.committer.inflight is not None and s.committer.inflight.stage == "objects"
    assert not s.committer.inflight.job.done()
    assert writer.thread != threading.get_ident()  # the I/O and hashing ran on another thread
    changed = any(not st["param"].equal(before[n]) for n, st in s.engine.optimizer.param_states().items())
    assert changed  # the update really moved the live parameters under the snapshot being written
    assert commits.read_head(tmp_path / "async") == expected[0][0]  # HEAD waits for the write
    writer.release.set()
    assert s.wait_commit() == expected[1]  # the snapshot of step 2, not the parameters of step 3
    assert commits.read_head(tmp_path / "async") == expected[1][0]


def test_background_error_surfaces_at_the_next_update_naming_the_step(tmp_path, seeds):
    s = make_session(*seeds, tmp_path / "home")
    update(s)
    head = s.commit()[0]
    update(s)
    writer = GatedWriter(fail=OSError(errno.ENOSPC, "No space left on device"))
    writer.release.set()
    s.committer = AsyncCommitter(s.store, writer)
    s.commit(background=True)
    s.committer.inflight.job.wait()
    with pytest.raises(commits.CommitError, match=r"step 2 failed, HEAD unchanged: rank 0: OSError.*No space"):
        update(s)
    assert commits.read_head(tmp_path / "home") == head
    assert s.committer.inflight is None  # the failed commit is dropped; the next one can run
    s.committer.write_objects = commits.save_param_states
    s.commit(background=True)
    assert s.wait_commit()[0] == commits.read_head(tmp_path / "home") != head


# Runs in a fresh interpreter: commit step 1 synchronously, then commit step 2 in the background with
# a writer that stores half of the parameters' objects and then stalls; training goes on meanwhile.
# The test SIGKILLs the process once the writer reported that it is half-way.
KILL_SCRIPT = r"""
import json, sys, threading
from pathlib import Path
sys.path.insert(0, sys.argv[2])
import support.session as t
from kit.store import commits
from kit.engine.commit import AsyncCommitter

a = json.loads(sys.argv[1])
s = t.make_session(a["student"], a["reference"], a["home"])
t.update(s)
head, _ = s.commit()
Path(a["side"] + ".head").write_text(head)

def half_then_stall(store, states):
    names = sorted(states)[: len(states) // 2]
    commits.save_param_states(store, {n: states[n] for n in names})
    Path(a["side"]).write_text(json.dumps({"objects_written": len(names) * 3}))
    threading.Event().wait()

s.committer = AsyncCommitter(s.store, half_then_stall)
t.update(s)
s.commit(background=True)
while s.step < len(t.BATCHES):  # training continues while the writer stalls, until the kill
    t.update(s)
threading.Event().wait()
"""


def test_sigkill_during_the_background_write_leaves_head_on_the_previous_commit(tmp_path, seeds):
    home, side = tmp_path / "home", tmp_path / "side.json"
    args = {"student": str(seeds[0]), "reference": str(seeds[1]), "home": str(home), "side": str(side)}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)])}
    proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, json.dumps(args), str(TESTS)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not side.exists():
            if proc.poll() is not None:
                pytest.fail(f"child exited {proc.returncode} before the write: {proc.stderr.read()[-3000:]}")
            assert time.monotonic() < deadline, "the background writer never reached half-way"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(60) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    head = Path(str(side) + ".head").read_text()
    assert commits.read_head(home) == head  # the background commit never moved HEAD
    assert commits.list_commits(home) == [head]  # ... nor wrote a manifest
    report = commits.verify_commit(home)
    assert report["full_root"] == head
    written = json.loads(side.read_text())["objects_written"]
    named = set(commits.object_digests(commits.read_commit(home, head)))
    orphans = [d for d in commits.ObjectStore(home).digests() if d not in named]
    assert written and orphans  # the half-written commit's objects are there, unreferenced
    removed = commits.gc(home, unreferenced_objects=True)
    assert set(orphans) <= {Path(p).name for p in removed}
    assert not (home / "tmp").exists() or not any((home / "tmp").iterdir())
    assert commits.verify_commit(home)["full_root"] == head
    # the previous commit resumes and the next background commit completes
    from kit.store.start import start_from_commit

    groups = {"default": GroupConfig.from_json(OPT, "optimizer.default")}
    s = Session(Group(0, 1, torch.device("cpu")), str(home), even_layout(LAYERS, 1),
                start_from_commit(str(home), head), engine_config({"microbatch_size": 2, "max_grad_norm": 0.5}),
                groups, reference={"seed_dir": str(seeds[1])})
    assert s.step == 1
    update(s)
    s.commit(background=True)
    full, _ = s.wait_commit()
    assert commits.read_head(home) == full and commits.read_commit(home, full)["parent"] == head


def test_two_workers_background_commits_match_synchronous(tmp_path, seeds):
    """Two gloo workers: the flag and entry all-gathers of background commits run in the same order on
    both ranks, and every commit's roots equal those of the synchronous run."""
    from kit.distributed.launch import launch

    def args(home, background):
        return {"home": str(home), "layout": even_layout(LAYERS, 2).to_json(), "start": {"seed_dir": str(seeds[0])},
                "source_home": None, "reference": {"seed_dir": str(seeds[1])},
                "engine": {"microbatch_size": 2, "max_grad_norm": 0.5}, "optimizer": {"default": OPT},
                "batches": BATCHES, "until": 6, "commit_at": [2, 4], "timeout_s": 60,
                "background_commits": background}

    sync = launch("support.engine_workers:session_worker", args(tmp_path / "sync", False), 2, tmp_path / "run-sync", timeout_s=300,
                  env=launch_env())
    bg = launch("support.engine_workers:session_worker", args(tmp_path / "bg", True), 2, tmp_path / "run-bg", timeout_s=300,
                env=launch_env())
    assert [c["step"] for c in sync[0]["commits"]] == [2, 4, 6]
    assert bg[0]["commits"] == bg[1]["commits"] == sync[0]["commits"]
    assert commits.read_head(tmp_path / "bg") == sync[0]["commits"][-1]["full_root"]
    commits.verify_commit(tmp_path / "bg")
