"""Issue 9, cases 4 (prepared-job files), 12 and 13: a prepared job's files, the final-role guard, and
the commitments checked before the first update.

One preparation of the tiny contract (as tests/test_adaptive_prepare.py makes it), but from copies this
module owns: the contract, the public source, the seed and a replay file reached through a symlink.

Case 4. A flipped bit, a truncation and a deletion of a role file, prepared.json, the contract and a
selection record: refused, naming the file and the expected digest, by `kit adaptive train` before
anything is created and by the role reader the workers use; a damaged selection record (every sampled
bit) never opens the final roles.

Case 12 (beyond tests/test_adaptive_guards.py). Final roles opened with a selection record that was
not written by `kit adaptive select` for this job (hand-made, edited, or copied from another job), with
a second selection after scoring under the first, or with prepared.json missing: refused, and every
attempt, allowed or not, is a line of the access log.

Case 13 (beyond tests/test_adaptive_guards.py and tests/test_provenance.py). One changed byte in
*each* committed file (contract, every seed file, replay, public source, development retention, every
prepared file) and in *each* file of the kit's source, and a symlink swapped after preparation to a
file with identical bytes: training refuses before the first update; the kit-source check also with a
changed byte in the kit that actually runs (a copy of the package run in a subprocess).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from support.adaptive import PUBLIC, TINY, distinct, make_seed, planted, private_job, seed_tasks
from support.reliability import corrupt, model_commit, run_python

from kit.adaptive import prepare as prep
from kit.adaptive.bindings import check_inputs
from kit.adaptive.selection import (
    ACCESS_LOG,
    FinalRolesRefused,
    access_entries,
    open_final_roles,
    write_selection,
)
from kit.adaptive.train import CohortRequest, adaptive_worker, train
from kit.data.conversations import read_jsonl, synthetic_conversations, write_jsonl
from kit.digest import DigestMismatch, load_json_strict, sha256_file, write_canonical_json
from kit.provenance import CommitmentMismatch, check_commitments, kit_package_dir

DAMAGES = ("bit_flip", "truncate", "delete")
A_END = {"step": 8, "cohort": 0, "cohort_step": 8}  # the tiny contract's cohort-A endpoint cursor


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("job")
    contract = root / "contract.json"
    shutil.copyfile(TINY, contract)
    public = root / "public.json"
    shutil.copyfile(PUBLIC, public)
    synthetic = distinct(synthetic_conversations(200, 11))
    replay = synthetic[:29] + planted(PUBLIC) + seed_tasks()
    seed = make_seed(root, replay)
    data = root / "data"
    data.mkdir()
    shutil.copyfile(seed / "trained_conversations.jsonl", data / "replay_v1.jsonl")
    os.symlink(data / "replay_v1.jsonl", data / "replay.jsonl")
    dev = root / "dev_retention.jsonl"
    write_jsonl(dev, distinct(synthetic_conversations(300, 12), {c.digest for c in replay})[:40])
    prep.prepare(contract, seed, data / "replay.jsonl", dev, public, root / "out")
    return {"root": root, "out": root / "out", "seed": seed, "contract": contract, "data": data,
            "commitments": load_json_strict(root / "out" / prep.COMMITMENTS_FILE)}


@pytest.fixture
def restore():
    """Files a test damages, put back afterwards (the job is shared by the module)."""
    saved: dict[Path, bytes] = {}

    def keep(path: Path) -> Path:
        saved.setdefault(path, path.read_bytes())
        return path
    yield keep
    for path, data in saved.items():
        path.write_bytes(data)


def _refused_before_training(job, tmp_path, match: str) -> None:
    home = tmp_path / "home"
    with pytest.raises(CommitmentMismatch, match=match):
        train(CohortRequest(str(job["out"]), str(job["seed"]), str(home), "A", 2))
    assert not home.exists()  # no attempt record, no store, no worker


def _file_of(job, kind: str) -> tuple[Path, str, str]:
    """(path, label in the refusal, recorded sha256) of a committed file kind."""
    c = job["commitments"]
    if kind == "contract":
        return job["contract"], "contract 'contract'", c["contract"]["sha256"]
    name = {"role file": "A.new", "prepared.json": "prepared"}[kind]
    return job["out"] / c["prepared"][name]["path"], f"prepared file '{name}'", c["prepared"][name]["sha256"]


# -- case 4: prepared-job files ------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("kind", ["role file", "prepared.json", "contract"])
def test_damaged_prepared_file_is_refused_before_training(job, tmp_path, restore, kind, damage):
    path, label, sha = _file_of(job, kind)
    corrupt(restore(path), damage)
    expected = "file missing; expected sha256 " if damage == "delete" else "sha256 mismatch: expected "
    _refused_before_training(job, tmp_path, re.escape(f"{label} ({path}): {expected}{sha}"))
    if kind == "role file":  # the reader the workers use re-hashes against prepared.json before parsing
        pj = load_json_strict(job["out"] / "prepared.json")
        error = FileNotFoundError if damage == "delete" else DigestMismatch
        with pytest.raises(error, match=re.escape(str(path)) + (": file not found" if damage == "delete" else
                                                                f": sha256 mismatch: expected {sha}, actual")):
            read_jsonl(path, pj["roles"]["A.new"]["sha256"])


@pytest.fixture
def selection(job, tmp_path):
    """A selection record written by `kit adaptive select` (write_selection) for a tiny commit, in a
    private copy of the prepared job (so the access log starts empty)."""
    prepared = private_job(job["out"], tmp_path / "prepared")  # bound to this test's own ledger
    home = tmp_path / "store"
    root = model_commit(home, job["seed"], 2, seed=1, cursor=A_END)  # at the contract's A endpoint
    path = tmp_path / "selection.json"
    write_selection(prepared, {"A": {"home": str(home), "root": root}}, path, {"note": "dev checks passed"})
    return {"prepared": prepared, "path": path, "root": root, "home": home, "seed": job["seed"]}


def test_damaged_selection_record_never_opens_the_final_roles(selection):
    prepared, path, root = selection["prepared"], selection["path"], selection["root"]
    original = path.read_bytes()
    expected_sha = sha256_file(path)
    positions = sorted(set(range(0, len(original), max(1, len(original) // 60))) | {len(original) - 1})
    for i in positions:
        path.write_bytes(original[:i] + bytes([original[i] ^ (1 << (i % 8))]) + original[i + 1:])
        with pytest.raises(FinalRolesRefused, match=re.escape(str(path))):
            open_final_roles(prepared, path, [root], f"flip {i}")
    path.write_bytes(original[:-1])
    with pytest.raises(FinalRolesRefused, match=re.escape(str(path)) + ": unreadable selection record"):
        open_final_roles(prepared, path, [root], "truncated")
    path.unlink()
    with pytest.raises(FinalRolesRefused, match="need a selection record"):
        open_final_roles(prepared, path, [root], "deleted")
    log = access_entries(prepared)
    assert len(log) == len(positions) + 2 and not any(e["allowed"] for e in log)  # every refusal logged
    # a flip that keeps the record well-formed is named with the digest `kit adaptive select` recorded
    assert any(expected_sha in e["reason"] for e in log)
    path.write_bytes(original)
    open_final_roles(prepared, path, [root], "intact")
    assert access_entries(prepared)[-1]["allowed"] is True


# -- case 12: the final-role guard ---------------------------------------------------------------------------------


def test_hand_made_or_copied_selection_is_refused_and_logged(selection, job, tmp_path):
    prepared, path, root = selection["prepared"], selection["path"], selection["root"]
    record = load_json_strict(path)
    made = tmp_path / "hand-made.json"  # the same content written by hand: not registered by select
    write_canonical_json(made, {**record, "development": {"note": "chosen by hand"}})
    with pytest.raises(FinalRolesRefused, match=re.escape(str(made)) + r": sha256 [0-9a-f]{64} is not a selection"):
        open_final_roles(prepared, made, [root], "scoring")
    other = private_job(job["out"], tmp_path / "other-job")  # another job (prepared.json differs), own selection
    pj = load_json_strict(other / "prepared.json")
    write_canonical_json(other / "prepared.json", {**pj, "note": "prepared elsewhere"})
    copied = tmp_path / "from-other-job.json"
    write_selection(other, {"A": {"home": str(selection["home"]), "root": root}}, copied)
    with pytest.raises(FinalRolesRefused, match="binds prepared job"):
        open_final_roles(prepared, copied, [root], "scoring")
    log = access_entries(prepared)
    assert [e["allowed"] for e in log] == [False, False]
    assert "not a selection" in log[0]["reason"] and "binds prepared job" in log[1]["reason"]
    # a byte-identical copy of this job is this job: its selections are in the same ledger chain, and the
    # chain allows one final access per prepared job whichever copy asks (test_no_second_selection_after_scoring)


def test_no_second_selection_after_scoring(selection, tmp_path):
    prepared, path, root, home = selection["prepared"], selection["path"], selection["root"], selection["home"]
    second_root = model_commit(home, selection["seed"], 2, seed=2, parent=root, cursor=A_END)
    second = tmp_path / "second.json"  # written before any scoring, so select accepts it
    write_selection(prepared, {"A": {"home": str(home), "root": second_root}}, second)
    open_final_roles(prepared, path, [root], "final scoring")  # scoring happens under the first
    open_final_roles(prepared, path, [root], "final scoring again")  # the same selection may re-open
    with pytest.raises(FinalRolesRefused, match=re.escape(str(second)) + ": final roles were already opened under"):
        open_final_roles(prepared, second, [second_root], "a better-looking candidate")
    assert [e["allowed"] for e in access_entries(prepared)] == [True, True, False]


def test_missing_prepared_json_is_refused_and_logged(selection):
    prepared, path, root = selection["prepared"], selection["path"], selection["root"]
    (prepared / "prepared.json").unlink()
    with pytest.raises(FinalRolesRefused, match=re.escape(str(prepared / "prepared.json"))):
        open_final_roles(prepared, path, [root], "scoring")
    (entry,) = access_entries(prepared)
    assert entry["allowed"] is False and "prepared.json" in entry["reason"]
    lines = (prepared / ACCESS_LOG).read_bytes().splitlines()
    assert len(lines) == 1 and json.loads(lines[0]) == entry


# -- case 13: commitments before the first update -------------------------------------------------------------------


def _committed_files(job) -> list[tuple[str, str, Path]]:
    c = job["commitments"]
    out = [("contract", "contract", Path(c["contract"]["path"]))]
    out += [("input", name, Path(e["path"])) for name, e in sorted(c["inputs"].items())]
    out += [("prepared file", name, job["out"] / e["path"]) for name, e in sorted(c["prepared"].items())]
    return out


def test_one_changed_byte_in_any_committed_file_refuses_training(job, tmp_path, restore):
    files = _committed_files(job)
    assert {label for _, label, _ in files} >= {"contract", "seed/config.json", "seed/model.safetensors",
                                                  "seed/tokenizer.json", "replay", "public_source", "dev_retention",
                                                  "prepared", "schedule", "ownership", "A.new", "final.retention"}
    for kind, label, path in files:
        original = restore(path).read_bytes()
        corrupt(path, "bit_flip", offset=len(original) - 2)
        _refused_before_training(job, tmp_path, re.escape(f"{kind} '{label}' (") + ".*sha256 mismatch")
        path.write_bytes(original)
    check_inputs(job["out"])  # all restored


def test_symlink_swapped_to_identical_bytes_refuses_training(job, tmp_path, restore):
    data = job["data"]
    link = data / "replay.jsonl"
    shutil.copyfile(data / "replay_v1.jsonl", data / "replay_v2.jsonl")
    try:
        os.unlink(link)
        os.symlink(data / "replay_v2.jsonl", link)
        _refused_before_training(job, tmp_path, r"input 'replay' .*resolves to .*replay_v2\.jsonl; expected realpath "
                                                r".*replay_v1\.jsonl")
    finally:
        os.unlink(link)
        os.symlink(data / "replay_v1.jsonl", link)
    check_inputs(job["out"])


def test_workers_check_before_their_first_update(job, tmp_path, restore):
    """`adaptive_worker` (what every launched worker runs) refuses before migrating, loading or updating."""
    path = restore(job["out"] / "schedule.json")
    corrupt(path, "bit_flip")

    class Progress:
        def __init__(self):
            self.phases = []

        def progress(self, step=None, phase=None):
            self.phases.append((step, phase))

    ctx = Progress()
    args = {"prepared": str(job["out"]), "seed_dir": str(job["seed"]), "home": str(tmp_path / "home")}
    with pytest.raises(CommitmentMismatch, match=r"prepared file 'schedule'"):
        adaptive_worker(object(), args, ctx)  # no group is ever used
    assert ctx.phases == [(None, "check-inputs")]
    assert not (tmp_path / "home").exists()


def test_one_changed_byte_in_any_kit_source_file(job, tmp_path):
    package = tmp_path / "kit"
    shutil.copytree(kit_package_dir(), package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    c, resolve = job["commitments"], (lambda p: job["out"] / p)
    check_commitments(c, resolve, package)  # the copy is the kit that prepared
    files = sorted(p for p in package.rglob("*") if p.is_file())
    assert len(files) > 40
    for path in files:
        original = path.read_bytes()
        corrupt(path, "bit_flip", offset=len(original) - 1)
        rel = path.relative_to(package).as_posix()
        with pytest.raises(CommitmentMismatch, match=re.escape(f"kit source file {rel!r}") + " .*expected sha256"):
            check_commitments(c, resolve, package)
        path.write_bytes(original)


TRAIN_WITH_THIS_KIT = r"""
import sys
import kit
from kit.adaptive.train import CohortRequest, train
from kit.provenance import CommitmentMismatch
print(kit.__file__)
try:
    train(CohortRequest(sys.argv[1], sys.argv[2], sys.argv[3], "A", 2))
except CommitmentMismatch as e:
    print("REFUSED", e)
"""


def test_a_changed_byte_in_the_running_kit_refuses_training(job, tmp_path):
    site = tmp_path / "site"
    shutil.copytree(kit_package_dir(), site / "kit", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    target = site / "kit" / "train" / "loss.py"
    # one letter of the module docstring ("Assistant" -> "@ssistant"): the file still imports (kit.adaptive.train
    # imports kit.train.loss at module level), so the refusal is the commitment check's, not a SyntaxError
    corrupt(target, "bit_flip", offset=3)
    home = tmp_path / "home"
    done = run_python(TRAIN_WITH_THIS_KIT, str(job["out"]), str(job["seed"]), str(home),
                      env={"PYTHONPATH": str(site)}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    running, refusal = done.stdout.splitlines()[:2]
    assert running == str(site / "kit" / "__init__.py")
    assert refusal.startswith("REFUSED kit source file 'train/loss.py' under " + str(site / "kit"))
    assert not home.exists()
