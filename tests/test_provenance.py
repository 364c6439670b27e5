"""kit.provenance: the kit source digest and the input commitments re-checked before training."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from kit.provenance import (
    CommitmentMismatch,
    check_commitments,
    input_commitments,
    kit_package_dir,
    source_digest,
)

KIT = Path(__file__).resolve().parents[1] / "kit"


def _copy_kit(dst: Path) -> Path:
    shutil.copytree(KIT, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dst


def test_source_digest_matches_an_independent_computation(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_bytes(b"x = 1\n")
    (pkg / "sub" / "b.py").write_bytes(b"y = 2\n")
    (pkg / "sub" / "template.json").write_bytes(b"{}")
    # none of these can change behaviour, so none is hashed
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "a.cpython-312.pyc").write_bytes(b"\x00")
    (pkg / "sub" / "b.pyc").write_bytes(b"\x00")
    (pkg / ".a.py.swp").write_bytes(b"swap")
    digest, rows = source_digest(pkg)
    expected_rows = sorted([p, hashlib.sha256(data).hexdigest()] for p, data in
                           (("a.py", b"x = 1\n"), ("sub/b.py", b"y = 2\n"), ("sub/template.json", b"{}")))
    assert rows == expected_rows
    canonical = json.dumps(expected_rows, sort_keys=True, separators=(",", ":")).encode()
    assert digest == hashlib.sha256(canonical).hexdigest()
    (pkg / "sub" / "b.py").write_bytes(b"y = 3\n")
    assert source_digest(pkg)[0] != digest


def test_running_kit_is_the_package_dir():
    assert kit_package_dir() == KIT.resolve()
    _, rows = source_digest(KIT)
    assert ["provenance.py", hashlib.sha256((KIT / "provenance.py").read_bytes()).hexdigest()] in rows


@pytest.fixture
def job(tmp_path):
    """Inputs (one behind a symlink), a prepared directory and a private copy of the kit package."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "replay_v1.jsonl").write_bytes(b'{"id": "a"}\n')
    (data / "public.json").write_bytes(b"[1, 2, 3]")
    os.symlink(data / "replay_v1.jsonl", data / "replay.jsonl")
    contract = tmp_path / "contract.json"
    contract.write_bytes(b'{"kind": "x"}')
    prepared = tmp_path / "prepared"
    (prepared / "roles").mkdir(parents=True)
    (prepared / "roles" / "A.new.jsonl").write_bytes(b'{"id": "t"}\n')
    (prepared / "prepared.json").write_bytes(b'{"format": "p"}')
    pkg = _copy_kit(tmp_path / "kit")
    commitments = input_commitments(contract, "c" * 64, {"replay": data / "replay.jsonl", "public_source":
                                                         data / "public.json"},
                                    prepared, {"A.new": "roles/A.new.jsonl", "prepared": "prepared.json"}, pkg)
    return {"tmp": tmp_path, "data": data, "prepared": prepared, "pkg": pkg, "c": commitments,
            "resolve": lambda p: prepared / p}


def test_unchanged_job_passes_and_records_what_it_should(job):
    c = job["c"]
    check_commitments(c, job["resolve"], job["pkg"])
    replay = c["inputs"]["replay"]
    assert replay["path"] == str(job["data"] / "replay.jsonl")
    assert replay["realpath"] == os.path.realpath(job["data"] / "replay_v1.jsonl")
    assert replay["sha256"] == hashlib.sha256(b'{"id": "a"}\n').hexdigest()
    assert c["prepared"]["A.new"] == {"path": "roles/A.new.jsonl", "realpath": None,
                                      "sha256": hashlib.sha256(b'{"id": "t"}\n').hexdigest(), "bytes": 12}
    assert c["contract"]["digest"] == "c" * 64
    assert c["kit_source"]["digest"] == source_digest(job["pkg"])[0]


def test_moved_prepared_directory_still_passes(job):
    moved = job["tmp"] / "elsewhere"
    shutil.move(job["prepared"], moved)
    check_commitments(job["c"], lambda p: moved / p, job["pkg"])


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))


def test_changed_input_byte_fails_naming_the_file_and_both_digests(job):
    expected = job["c"]["inputs"]["public_source"]["sha256"]
    _flip_last_byte(job["data"] / "public.json")
    actual = hashlib.sha256((job["data"] / "public.json").read_bytes()).hexdigest()
    with pytest.raises(CommitmentMismatch, match=rf"input 'public_source' \(.*public\.json\): sha256 mismatch: "
                                                 rf"expected {expected}, actual {actual}"):
        check_commitments(job["c"], job["resolve"], job["pkg"])


def test_changed_prepared_file_and_contract_fail(job, tmp_path):
    _flip_last_byte(job["prepared"] / "roles" / "A.new.jsonl")
    with pytest.raises(CommitmentMismatch, match=r"prepared file 'A.new' .*A\.new\.jsonl\): sha256 mismatch"):
        check_commitments(job["c"], job["resolve"], job["pkg"])
    _flip_last_byte(job["prepared"] / "roles" / "A.new.jsonl")  # restored
    check_commitments(job["c"], job["resolve"], job["pkg"])
    _flip_last_byte(tmp_path / "contract.json")
    with pytest.raises(CommitmentMismatch, match=r"contract 'contract' .*contract\.json\): sha256 mismatch"):
        check_commitments(job["c"], job["resolve"], job["pkg"])


def test_missing_input_fails(job):
    (job["data"] / "public.json").unlink()
    with pytest.raises(CommitmentMismatch, match=r"input 'public_source' .*: file missing; expected sha256"):
        check_commitments(job["c"], job["resolve"], job["pkg"])


def test_changed_kit_source_fails_naming_the_file(job):
    expected = job["c"]["kit_source"]["files"]
    before = dict(expected)["digest.py"]
    with open(job["pkg"] / "digest.py", "ab") as f:
        f.write(b"# edited after preparation\n")
    with pytest.raises(CommitmentMismatch, match=rf"kit source file 'digest\.py' .*expected sha256 {before}, actual "
                                                 r"[0-9a-f]{64}"):
        check_commitments(job["c"], job["resolve"], job["pkg"])


def test_added_kit_source_file_fails(job):
    (job["pkg"] / "adaptive" / "extra.py").write_text("print('new behaviour')\n")
    with pytest.raises(CommitmentMismatch, match=r"kit source file 'adaptive/extra\.py' .*expected sha256 absent"):
        check_commitments(job["c"], job["resolve"], job["pkg"])


def test_symlink_swapped_to_other_bytes_is_detected(job):
    data = job["data"]
    (data / "replay_v2.jsonl").write_bytes(b'{"id": "b"}\n')
    os.unlink(data / "replay.jsonl")
    os.symlink(data / "replay_v2.jsonl", data / "replay.jsonl")
    with pytest.raises(CommitmentMismatch, match=r"input 'replay' .*resolves to .*replay_v2\.jsonl; expected realpath "
                                                 r".*replay_v1\.jsonl"):
        check_commitments(job["c"], job["resolve"], job["pkg"])
    # Relocated on purpose (resolve_path maps it elsewhere): the realpath is not compared, the hash still is.
    with pytest.raises(CommitmentMismatch, match=r"input 'replay' .*: sha256 mismatch"):
        check_commitments(job["c"], lambda p: Path(str(p).replace("replay.jsonl", "replay_v2.jsonl"))
                          if str(p).endswith("replay.jsonl") else job["prepared"] / p, job["pkg"])


def test_symlink_swapped_to_identical_bytes_is_still_detected(job):
    data = job["data"]
    shutil.copy(data / "replay_v1.jsonl", data / "replay_copy.jsonl")
    os.unlink(data / "replay.jsonl")
    os.symlink(data / "replay_copy.jsonl", data / "replay.jsonl")
    with pytest.raises(CommitmentMismatch, match=r"resolves to .*replay_copy\.jsonl"):
        check_commitments(job["c"], job["resolve"], job["pkg"])


def test_unknown_format_is_refused(job):
    with pytest.raises(CommitmentMismatch, match=r"format 'other/1'"):
        check_commitments({**job["c"], "format": "other/1"}, job["resolve"], job["pkg"])
