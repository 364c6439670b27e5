"""Issue 9, cases 1 and 3: a writer SIGKILLed in every phase of a commit, and a disk that fills up.

Case 1. Real subprocesses receive a real SIGKILL (`os.kill(pid, SIGKILL)`, exit status -9), at chosen
points (half-way through writing an object's temporary, the manifest's, HEAD's; right after HEAD was
replaced but before the lock is released) and at arbitrary points of a loop of commits. Afterwards
HEAD names the previous commit or the complete new one, that commit verifies, the learned-state root
recomputed from the tensors a resume loads equals the recorded one, the temporaries left behind are
never read (a complete temporary of a missing object or of a newer HEAD changes nothing), and
`kit checkpoint gc` removes them and the dead writer's lock, after which the commit can be redone.
(tests/test_store.py already covers the `KIT_FAULT_POINT` exits at the three hook points.)

Case 3. ENOSPC is injected at each write of a commit (object, manifest, HEAD.lock record, HEAD), and,
where this host lets root mount one, a real 1 MiB tmpfs is filled so that the commit runs out of space
at every page it needs. The previous commit still loads and verifies, nothing partial stays behind
(no temporary, no lock), and once space is back the same commit succeeds.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.reliability import commit, learned_root_from_loaded, stage_commit, worker_env

from kit.cli import main as kit_main
from kit.store import commits, objects
from kit.store.commits import read_commit, read_head, verify_commit, write_commit
from kit.store.objects import ObjectMissing, ObjectStore

KILL_POINTS = ("object", "manifest", "head", "head_installed")

# Runs in a fresh interpreter: stages commit 2 and writes it; the wrapped write/install SIGKILL the
# process itself at the chosen point, after leaving a partial (or, for HEAD, complete) temporary.
KILL_SCRIPT = r"""
import hashlib, json, os, signal, sys
from pathlib import Path
import kit.numerics
kit.numerics.apply()  # a script of one's own applies the profile before computing roots
import kit.store.commits as commits
import kit.store.objects as objects
from support.reliability import stage_commit

a = json.loads(sys.argv[1])
home, point = Path(a["home"]), a["point"]
objects_written = 0
real_write, real_install = objects.write_durably, objects.install

def write_durably(temp, chunks):
    global objects_written
    purpose = temp.name.split(".")[0]
    data = b"".join(bytes(c) for c in chunks)
    objects_written += purpose == "object"
    if purpose == point and (point != "object" or objects_written == a["nth_object"]):
        Path(a["side"]).write_text(json.dumps({"temp": str(temp), "sha256": hashlib.sha256(data).hexdigest(),
                                               "data": data.decode("latin-1")}))
        with open(temp, "xb") as f:
            f.write(data if point == "head" else data[: len(data) // 2])
            f.flush()
            os.fsync(f.fileno())
        os.kill(os.getpid(), signal.SIGKILL)
    real_write(temp, [data])

def install(temp, final):
    real_install(temp, final)
    if point == "head_installed" and final.name == "HEAD":
        os.kill(os.getpid(), signal.SIGKILL)

objects.write_durably = commits.write_durably = write_durably
objects.install = commits.install = install
ls, layout, rng = stage_commit(home, seed=2)
print(commits.write_commit(home, ls, layout, a["parent"], rng))
"""


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """One store per kill point, each with commit 1; the killed writers run concurrently (torch imports)."""
    base = tmp_path_factory.mktemp("killed")
    runs = {}
    for point in KILL_POINTS:
        home = base / point / "home"
        first = commit(home, seed=1, parent=None)
        expected = write_commit_root(base / point / "oracle", seed=2)  # the root commit 2 must have
        args = {"home": str(home), "point": point, "parent": first, "nth_object": 5, "side": str(base / point / "side")}
        proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, json.dumps(args)], env=worker_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        runs[point] = {"home": home, "first": first, "expected": expected, "proc": proc, "side": Path(args["side"])}
    for run in runs.values():
        run["stdout"], run["stderr"] = run["proc"].communicate(timeout=120)
    return runs


def write_commit_root(home: Path, seed: int) -> str:
    """The full root of commit `seed` on top of commit 1, computed in a separate store."""
    first = commit(home, seed=1, parent=None)
    return commit(home, seed=seed, parent=first)


def assert_head_is_complete(home: Path, allowed: set[str]) -> str:
    head = read_head(home)
    assert head in allowed
    report = verify_commit(home)  # every object re-hashed, both roots recomputed
    manifest = read_commit(home, head)
    assert report["full_root"] == head
    assert learned_root_from_loaded(home, manifest) == manifest["learned_state_root"]
    return head


@pytest.mark.parametrize("point", KILL_POINTS)
def test_sigkill_in_each_phase_leaves_a_complete_head(killed, point, capsys):
    run = killed[point]
    home, first, expected = run["home"], run["first"], run["expected"]
    assert run["proc"].returncode == -signal.SIGKILL, run["stderr"]
    head = assert_head_is_complete(home, {expected} if point == "head_installed" else {first})
    assert head == (expected if point == "head_installed" else first)
    leftovers = sorted((home / "tmp").iterdir())
    if point != "head_installed":
        side = json.loads(run["side"].read_text())
        # the killed write's temporary is left (objects are written on a few threads, so other
        # objects' temporaries in flight at the kill may be left beside it), and nothing else
        assert Path(side["temp"]) in leftovers
        assert all(p.name.startswith(point if point != "object" else "object") for p in leftovers)
        if point == "object":  # the half-written object is not in the store, and is never read from tmp/
            with pytest.raises(ObjectMissing, match=side["sha256"]):
                ObjectStore(home).get_bytes(side["sha256"])
            Path(side["temp"]).write_bytes(side["data"].encode("latin-1"))  # even complete bytes in tmp/ ...
            with pytest.raises(ObjectMissing, match=side["sha256"]):
                ObjectStore(home).get_bytes(side["sha256"])  # ... are not an object
        if point == "head":  # the temporary holds the complete new HEAD; HEAD itself still names commit 1
            assert Path(side["temp"]).read_bytes() == expected.encode() + b"\n"
            assert read_head(home) == first
    else:
        assert leftovers == []
    lock = home / "HEAD.lock"
    assert lock.exists() == (point in ("head", "head_installed"))  # the dead writer held it
    assert kit_main(["checkpoint", "gc", "--home", str(home)]) == 0
    printed = capsys.readouterr().out
    assert all(str(p) in printed for p in leftovers)
    assert list((home / "tmp").iterdir()) == [] and not lock.exists()
    # the interrupted commit can be redone (a no-op when HEAD already names it)
    ls, layout, rng = stage_commit(home, seed=2)
    assert write_commit(home, ls, layout, first, rng) == expected
    assert_head_is_complete(home, {expected})


# Commits in a loop from HEAD; the test kills it after the n-th commit, wherever it then is.
LOOP_SCRIPT = r"""
import sys
from pathlib import Path
import kit.numerics
kit.numerics.apply()  # a script of one's own applies the profile before computing roots
from kit.store.commits import read_commit, read_head, write_commit
from support.reliability import stage_commit

home = Path(sys.argv[1])
head = read_head(home)
seed = read_commit(home, head)["learned_state"]["cursor"]["step"] + 1
while True:
    ls, layout, rng = stage_commit(home, seed=seed)
    head = write_commit(home, ls, layout, head, rng)
    print(seed, head, flush=True)
    seed += 1
"""


def test_sigkill_at_arbitrary_points_of_repeated_commits(tmp_path):
    home = tmp_path / "home"
    commit(home, seed=1, parent=None)
    reported: dict[str, int] = {}
    for kill_after in (1, 2, 3):
        proc = subprocess.Popen([sys.executable, "-c", LOOP_SCRIPT, str(home)], env=worker_env(),
                                stdout=subprocess.PIPE, text=True)
        for _ in range(kill_after):  # the kill then lands somewhere in the next commit
            seed, root = proc.stdout.readline().split()
            reported[root] = int(seed)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
        proc.stdout.close()
        head = assert_head_is_complete(home, set(reported) | set(commits.list_commits(home)))
        assert kit_main(["checkpoint", "gc", "--home", str(home)]) == 0
        assert list((home / "tmp").iterdir()) == [] and not (home / "HEAD.lock").exists()
    # every reported commit is on HEAD's chain, which is intact down to the first commit
    chain, root = [], head
    while root is not None:
        chain.append(root)
        root = read_commit(home, root)["parent"]
    assert set(reported) <= set(chain) and len(chain) >= 1 + 1 + 2 + 3
    steps = [read_commit(home, r)["learned_state"]["cursor"]["step"] for r in reversed(chain)]
    assert steps == list(range(1, len(chain) + 1))


# -- case 3: disk full -------------------------------------------------------------------------------------


class _FullFile:
    """A file object whose writes fail as on a full disk (for the HEAD.lock record)."""

    def __init__(self, f):
        self.f = f

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()

    def write(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def inject_enospc(monkeypatch, purpose: str, nth: int = 1) -> None:
    """The `nth` write of a temporary named `purpose` (object, manifest, head), or the HEAD.lock record
    for "lock", fails with ENOSPC after half its bytes reached the file, as a full disk does."""
    real_write, real_fdopen = objects.write_durably, os.fdopen
    count = {"n": 0}

    def write_durably(temp, chunks):
        if temp.name.split(".")[0] == purpose:
            count["n"] += 1
            if count["n"] == nth:
                data = b"".join(bytes(c) for c in chunks)
                with open(temp, "xb") as f:
                    f.write(data[: len(data) // 2])
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(temp))
        real_write(temp, chunks)

    def fdopen(fd, *a, **k):
        f = real_fdopen(fd, *a, **k)
        if purpose == "lock" and os.readlink(f"/proc/self/fd/{fd}").endswith("HEAD.lock"):
            return _FullFile(f)
        return f

    monkeypatch.setattr(objects, "write_durably", write_durably)
    monkeypatch.setattr(commits, "write_durably", write_durably)
    monkeypatch.setattr(os, "fdopen", fdopen)


def assert_nothing_partial(home: Path) -> None:
    assert list((home / "tmp").iterdir()) == [], "a partial temporary was left behind"
    assert not (home / "HEAD.lock").exists(), "a HEAD.lock was left behind"


@pytest.mark.parametrize("purpose", ["object", "manifest", "lock", "head"])
def test_injected_enospc_keeps_the_previous_commit(tmp_path, monkeypatch, purpose):
    home = tmp_path / "home"
    first = commit(home, seed=1, parent=None)
    with monkeypatch.context() as m:
        inject_enospc(m, purpose, nth=3 if purpose == "object" else 1)
        with pytest.raises(OSError) as info:
            ls, layout, rng = stage_commit(home, seed=2)
            write_commit(home, ls, layout, first, rng, lock_timeout_s=1.0)
    assert info.value.errno == errno.ENOSPC
    assert_nothing_partial(home)
    assert assert_head_is_complete(home, {first}) == first
    ls, layout, rng = stage_commit(home, seed=2)  # space is back: the same commit goes through at once
    second = write_commit(home, ls, layout, first, rng, lock_timeout_s=1.0)
    assert assert_head_is_complete(home, {second}) == second


PAGE = 4096


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real 1 MiB tmpfs, when this host lets us mount one (root, mount allowed); else skipped."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root; the injected-ENOSPC test covers the same paths")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}); the injected-ENOSPC test covers it")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(mnt: Path, leave_pages: int) -> Path:
    """Fill the file system so that exactly `leave_pages` pages stay free."""
    st = os.statvfs(mnt)
    free = st.f_bavail * st.f_frsize
    filler = mnt / "filler"
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave_pages * PAGE))
    assert os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize == leave_pages * PAGE
    return filler


def test_real_full_tmpfs_at_every_page_of_a_commit(small_tmpfs):
    """With 0, 1, 2, ... free pages the commit fails at each write in turn (objects, manifest, lock,
    HEAD) until it fits; every failure leaves the previous commit loadable and nothing partial."""
    failures = []
    for pages in range(40):
        home = small_tmpfs / "home"
        shutil.rmtree(home, ignore_errors=True)
        first = commit(home, seed=1, parent=None)
        filler = _fill(small_tmpfs, pages)
        try:
            ls, layout, rng = stage_commit(home, seed=2)
            second = write_commit(home, ls, layout, first, rng, lock_timeout_s=1.0)
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
            failures.append(pages)
            filler.unlink()  # a reader needs no space, but gc and the checks below may
            assert_nothing_partial(home)
            assert assert_head_is_complete(home, {first}) == first
            continue
        filler.unlink()
        assert assert_head_is_complete(home, {second}) == second
        assert_nothing_partial(home)
        break
    else:
        pytest.fail("the commit never fitted")
    # 9 tensor objects and 2 RNG objects, the manifest, the lock record and HEAD each need a page
    assert failures == list(range(len(failures))) and len(failures) >= 12, failures
