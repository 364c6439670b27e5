"""The study's dense arm across two emulated hosts: two network namespaces joined by a veth pair
(kit/distributed/netns.py), one torchrun per namespace, each rank with its own copy of the seed and the
prepared study (nothing shared on disk), talking only over the veth. Root only (CI runs as root)."""

from __future__ import annotations

import shutil
import sys

import pytest
from support.models import REPO

from kit.study.prepare import prepare_study

sys.path.insert(0, str(REPO))
from bench.study_netns import run_arm_across
from kit.distributed.netns import Link, available

WHY = available()


@pytest.mark.skipif(WHY is not None, reason=f"two network namespaces cannot be made here: {WHY} "
                                            "(needs root and iproute2 `ip netns`)")
def test_dense_arm_across_two_namespaces_counts_at_least_the_logical_bytes(env, tmp_path):
    staging = tmp_path / "staging"
    prepare_study(env["contract"], env["seed"], env["source"], staging / "study", env["ledger"])
    hosts = []
    for name in ("hostA", "hostB"):
        shutil.copytree(env["seed"], tmp_path / name / "seed")
        shutil.copytree(staging / "study", tmp_path / name / "study")
        hosts.append(tmp_path / name)
    link = Link(tag="kxt", net=233).create()
    try:
        link.shape(1_000_000_000)
        run = run_arm_across(link, "dense", hosts, 29731, timeout_s=120, extra=("--until", "2"))
    finally:
        link.delete()
    assert all(p["returncode"] == 0 for p in run["processes"]), [p["stderr"][-2000:] for p in run["processes"]]
    rec = run["record"]
    assert rec["status"] == "partial" and rec["launcher"] == "torchrun" and len(rec["updates"]) == 2
    assert [h["rank"] for h in rec["hosts"]] == [0, 1]
    assert not (hosts[1] / "study" / "arms" / "dense" / "arm.json").exists()  # rank 0 writes the record
    logical = [r["sent_bytes_total"] for r in rec["traffic"]["logical_per_rank"]]
    assert min(logical) > 0
    for rank, (ns, dev) in enumerate(zip(link.ns, link.dev)):
        wire = run["wire_orchestrator"][ns]
        assert wire["tx_bytes"] >= logical[rank], (ns, wire, logical)
        # the rank's own /proc/net/dev delta (its namespace), gathered into rank 0's record
        own = rec["traffic"]["interfaces_per_rank"][rank]["interfaces"][dev]
        assert own["tx_bytes"] >= logical[rank] and own["rx_bytes"] >= logical[1 - rank]
