"""The adaptive driver's refusals: changed source, changed input, missing or mismatched selection,
selection after scoring; every opening of final roles is logged; attempts leave records."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from support.adaptive import private_job
from support.engine_workers import engine_config

from kit import provenance
from kit.adaptive.bindings import check_inputs
from kit.adaptive.selection import FinalRolesRefused, access_entries, open_final_roles, write_selection
from kit.adaptive.train import CohortRequest, train
from kit.distributed.group import Group
from kit.engine.session import Session
from kit.model.shard import even_layout
from kit.provenance import CommitmentMismatch
from kit.store.start import start_from_seed
from kit.train.optim import GroupConfig


def _copy_prepared(prepared, tmp_path):
    return private_job(prepared["out"], tmp_path / "prepared")  # bound to this test's own ledger


def test_changed_input_refused_before_training(prepared, tmp_path):
    p = _copy_prepared(prepared, tmp_path)
    check_inputs(p)
    role = p / "roles" / "A.new.jsonl"
    data = bytearray(role.read_bytes())
    data[10] ^= 1
    role.write_bytes(bytes(data))
    home = tmp_path / "home"
    with pytest.raises(CommitmentMismatch, match="A.new"):
        train(CohortRequest(str(p), str(prepared["seed"]), str(home), "A", 1))
    assert not home.exists()  # refused before the attempt record, workers or store


def test_changed_kit_source_refused_before_training(prepared, tmp_path, monkeypatch):
    p = _copy_prepared(prepared, tmp_path)
    fake = tmp_path / "kit"
    shutil.copytree(provenance.kit_package_dir(), fake, ignore=shutil.ignore_patterns("__pycache__"))
    target = fake / "train" / "loss.py"
    target.write_text(target.read_text() + "\n# one changed line\n")
    monkeypatch.setattr(provenance, "kit_package_dir", lambda: fake)
    with pytest.raises(CommitmentMismatch, match="kit source"):
        train(CohortRequest(str(p), str(prepared["seed"]), str(tmp_path / "home"), "A", 1))


A_END = {"step": 8, "cohort": 0, "cohort_step": 8}  # the tiny contract's cohort-A endpoint cursor


def _commit(tmp_path, seed, cursor=A_END, name="store"):
    """A commit of the seed's weights in a fresh store; at the A endpoint's cursor unless told."""
    home = tmp_path / name
    opt = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.0}
    s = Session(Group(0, 1, torch.device("cpu")), str(home), even_layout(4, 1), start_from_seed(str(seed)),
                engine_config({"microbatch_size": 2, "max_grad_norm": 1.0}),
                {"default": GroupConfig(**opt)})
    root, _ = s.commit(dict(cursor))
    return str(home), root


def test_final_roles_need_a_matching_selection_and_no_selection_after_scoring(prepared, tmp_path):
    p = _copy_prepared(prepared, tmp_path)
    home, root = _commit(tmp_path, prepared["seed"])
    with pytest.raises(FinalRolesRefused, match="need a selection record"):
        open_final_roles(p, None, [root], "test")
    other = _copy_prepared(prepared, tmp_path / "other")
    pj = json.loads((other / "prepared.json").read_text())
    pj["created_at"] = "2000-01-01T00:00:00+00:00"
    (other / "prepared.json").write_text(json.dumps(pj))
    sel_other = write_selection(other, {"A": {"home": home, "root": root}}, tmp_path / "sel-other.json")
    assert sel_other["candidates"]["A"]["full_root"] == root
    with pytest.raises(FinalRolesRefused, match="binds prepared job"):
        open_final_roles(p, tmp_path / "sel-other.json", [root], "test")
    write_selection(p, {"A": {"home": home, "root": root}}, tmp_path / "sel.json")
    with pytest.raises(FinalRolesRefused, match="not bound by the selection"):
        open_final_roles(p, tmp_path / "sel.json", ["f" * 64], "test")
    open_final_roles(p, tmp_path / "sel.json", [root], "final scoring")  # allowed
    with pytest.raises(FinalRolesRefused, match="already opened"):
        write_selection(p, {"A": {"home": home, "root": root}}, tmp_path / "sel2.json")
    log = access_entries(p)
    assert [e["allowed"] for e in log] == [False, False, False, True]
    assert all(e["purpose"] for e in log)


def test_a_short_attempt_trains_and_leaves_its_record(prepared, tmp_path):
    p = _copy_prepared(prepared, tmp_path)
    home = tmp_path / "home"
    commits = train(CohortRequest(str(p), str(prepared["seed"]), str(home), "A", 2, until=1))
    assert commits[-1]["cohort_step"] == 1 and len(commits[-1]["full_root"]) == 64
    (attempt,) = list((home / "attempts").iterdir())
    rec = json.loads((attempt / "attempt.json").read_text())
    assert rec["status"] == "completed" and rec["commits"] == commits
    row = json.loads((attempt / "updates.jsonl").read_text().splitlines()[0])
    assert row["cohort_step"] == 1 and len(row["ids"]) == 16 and row["tokens"] > 0
    # cohort B without a reference is refused, and the refusal is itself not an attempt
    with pytest.raises(ValueError, match="cohort B needs --reference"):
        train(CohortRequest(str(p), str(prepared["seed"]), str(home), "B", 2, resume=commits[-1]["full_root"]))
