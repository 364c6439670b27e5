"""`kit adaptive train` under torchrun (gloo, CPU): each process is one worker; the result equals the
local launcher's bit for bit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from kit.adaptive.train import CohortRequest, train


def test_torchrun_matches_the_local_launcher(prepared, tmp_path):
    p = tmp_path / "prepared"
    shutil.copytree(prepared["out"], p)
    local = train(CohortRequest(str(p), str(prepared["seed"]), str(tmp_path / "local"), "A", 2, until=1))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "KIT_RUN_DIR")}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "kit",
         "adaptive", "train", "--prepared", str(p), "--seed", str(prepared["seed"]), "--home",
         str(tmp_path / "tr"), "--cohort", "A", "--workers", "2", "--until", "1"],
        env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    commits = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert commits[-1]["learned_state_root"] == local[-1]["learned_state_root"]
    (attempt,) = list((tmp_path / "tr" / "attempts").iterdir())
    rec = json.loads((attempt / "attempt.json").read_text())
    assert rec["status"] == "completed" and rec["launcher"] == "torchrun"
    # every rank's own traffic and times are gathered into rank 0's record
    assert [h["rank"] for h in rec["hosts"]] == [0, 1]
    assert all(h["group_bytes_sent"] > 0 and h["wall_seconds"] > 0 and h["interfaces"] for h in rec["hosts"])


def test_nccl_socket_ifname_is_completed_from_gloo_and_said(capsys):
    from kit.distributed.group import socket_interfaces

    env = {"GLOO_SOCKET_IFNAME": "ens5"}
    got = socket_interfaces("nccl", env)
    assert env["NCCL_SOCKET_IFNAME"] == "ens5" and got["nccl_from_gloo"] is True
    assert "NCCL_SOCKET_IFNAME" in capsys.readouterr().err
    env = {"GLOO_SOCKET_IFNAME": "ens5", "NCCL_SOCKET_IFNAME": "ens6"}  # the user's own setting wins
    assert socket_interfaces("nccl", env)["NCCL_SOCKET_IFNAME"] == "ens6" and env["NCCL_SOCKET_IFNAME"] == "ens6"
    env = {"GLOO_SOCKET_IFNAME": "ens5"}  # gloo reads its own variable; nothing to complete
    assert socket_interfaces("gloo", env)["nccl_from_gloo"] is False and "NCCL_SOCKET_IFNAME" not in env
