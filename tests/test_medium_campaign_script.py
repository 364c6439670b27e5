"""campaigns/medium_campaign.sh's `follow` and `pack` on a host folder with no campaign running: it returns at
once (a missing or stale pid once made it wait out a whole device call) and packs what is there."""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_follow_returns_at_once_without_a_campaign_and_packs_the_evidence(tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "campaigns").mkdir(parents=True)
    shutil.copy(REPO / "campaigns" / "medium_campaign.sh", checkout / "campaigns")
    w = checkout / "build" / "medium"
    (w / "runs" / "medium-seed").mkdir(parents=True)
    (w / "runs" / "medium-seed" / "run.json").write_text("{}")
    (w / "ledger").mkdir()
    (w / "ledger" / "exposed.jsonl").write_text("")
    (w / "work" / "adaptive").mkdir(parents=True)
    (w / "work" / "adaptive" / "final-A.json").write_text("{}")
    host_logs = ["work/adaptive/prepared/prepared.json", "work/adaptive/prepared/selections.jsonl",
                 "work/adaptive/prepared/final-access.jsonl", "work/adaptive/prepared/final-evaluations.jsonl",
                 "work/adaptive/A3/attempts/0001/updates.jsonl", "work/study/arms/dense/arm.json",
                 "work/study/arms/dense/attempts/001.json"]
    for name in [*host_logs, "work/adaptive/A3/objects/ab/cd", "work/adaptive/prepared/roles/tasks.json"]:
        (w / name).parent.mkdir(parents=True, exist_ok=True)
        (w / name).write_text("{}\n")
    (w / "campaign.log").write_text("medium-seed: completed in 1.0 s\n")
    out = tmp_path / "out"
    for pid in (None, "999999999"):  # no pid file; a pid that names no process
        if pid:
            (w / "campaign.pid").write_text(pid)
        t0 = time.monotonic()
        done = subprocess.run(["bash", str(checkout / "campaigns" / "medium_campaign.sh"), "follow", "120"],
                              env={"PATH": "/usr/bin:/bin", "OUT": str(out)}, capture_output=True, text=True,
                              check=True)
        assert time.monotonic() - t0 < 30 and "no campaign process running" in done.stdout
        assert "medium-seed: completed in 1.0 s" in done.stdout
    with tarfile.open(out / "medium-evidence.tgz") as tar:
        names = set(tar.getnames())
    assert {"runs/medium-seed/run.json", "ledger/exposed.jsonl", "work/adaptive/final-A.json",
            "campaign.log", *host_logs} <= names
    assert not any("objects" in n or "roles" in n for n in names)  # no checkpoint bytes, no role data
    assert (out / "campaign.log").read_text() == "medium-seed: completed in 1.0 s\n"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout.strip()


def test_sync_brings_a_stale_host_git_to_the_carried_commit_clean(tmp_path):
    """`make medium-bundle` carries the last commit without its files (its object and tree listing: the
    history, then the files twice, no longer fit in a call); `sync` on a host copy whose .git holds unrelated
    history rebuilds that commit from the working tree and makes it HEAD, with a clean status, so that the
    host's run records name it with dirty: false; a file that differs is refused by name."""
    here = tmp_path / "here"
    (here / "campaigns").mkdir(parents=True)
    shutil.copy(REPO / "campaigns" / "medium_campaign.sh", here / "campaigns")
    (here / ".gitignore").write_text("build/\n")
    _git(here, "init", "-q")
    for n in range(3):  # history the host must not need
        (here / "notes.txt").write_text(f"version {n}\n")
        _git(here, "add", "-A")
        _git(here, "commit", "-q", "-m", f"commit {n}")
    head = _git(here, "rev-parse", "HEAD")
    subprocess.run(["make", "-f", str(REPO / "Makefile"), "-C", str(here), "medium-bundle"], check=True,
                   capture_output=True)
    assert {p.name for p in (here / "build" / "bundle").iterdir()} == {"commit", "tree", "commit.sha"}
    (here / "run.sh").write_text("#!/bin/sh\n")  # an executable file: its mode is part of the commit
    (here / "run.sh").chmod(0o755)
    _git(here, "add", "-A")
    _git(here, "commit", "-q", "-m", "with an executable")
    head = _git(here, "rev-parse", "HEAD")
    subprocess.run(["make", "-f", str(REPO / "Makefile"), "-C", str(here), "medium-bundle"], check=True,
                   capture_output=True)

    host = tmp_path / "host"  # the device copy: the working tree, the carried build/, a stale .git
    shutil.copytree(here, host, ignore=shutil.ignore_patterns(".git"))
    _git(host, "init", "-q")
    _git(host, "commit", "-q", "--allow-empty", "-m", "stale")
    done = subprocess.run(["bash", str(host / "campaigns" / "medium_campaign.sh"), "sync"], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, check=False)
    assert done.returncode == 0, done.stderr
    assert _git(host, "rev-parse", "HEAD") == head
    assert _git(host, "status", "--porcelain") == ""
    assert (host / "build" / "medium" / "base-commit").read_text().strip() == head

    bare = tmp_path / "bare-host"  # a device copy that has no .git at all
    shutil.copytree(here, bare, ignore=shutil.ignore_patterns(".git"))
    done = subprocess.run(["bash", str(bare / "campaigns" / "medium_campaign.sh"), "sync"], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, check=False)
    assert done.returncode == 0, done.stderr
    assert _git(bare, "rev-parse", "HEAD") == head and _git(bare, "status", "--porcelain") == ""
    _git(bare, "commit", "-q", "--allow-empty", "-m", "a host commit")  # on top of it, bundled for the way back
    _git(bare, "bundle", "create", str(tmp_path / "back.bundle"), f"{head}..HEAD")
    _git(here, "fetch", "-q", str(tmp_path / "back.bundle"), "HEAD")
    assert _git(here, "rev-parse", "FETCH_HEAD^") == head

    lost = tmp_path / "lost-bit-host"  # a copy that lost the executable bit: the same commit all the same
    shutil.copytree(here, lost, ignore=shutil.ignore_patterns(".git"))
    (lost / "run.sh").chmod(0o644)
    done = subprocess.run(["bash", str(lost / "campaigns" / "medium_campaign.sh"), "sync"], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, check=False)
    assert done.returncode == 0, done.stderr
    assert _git(lost, "rev-parse", "HEAD") == head and _git(lost, "status", "--porcelain") == ""

    fresh = tmp_path / "fresh-host"  # a file edited before the first sync: its blob is nowhere, refused by name
    shutil.copytree(here, fresh, ignore=shutil.ignore_patterns(".git"))
    (fresh / "notes.txt").write_text("edited before the sync\n")
    refused = subprocess.run(["bash", str(fresh / "campaigns" / "medium_campaign.sh"), "sync"], capture_output=True,
                             text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, check=False)
    assert refused.returncode == 2 and "notes.txt" in refused.stderr

    (host / "notes.txt").write_text("edited on the host\n")  # a tree that is not the carried commit: refused
    refused = subprocess.run(["bash", str(host / "campaigns" / "medium_campaign.sh"), "sync"], capture_output=True,
                             text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, check=False)
    assert refused.returncode == 2 and "notes.txt" in refused.stderr


FAKE_PYTHON = r"""#!/bin/bash
# the host's python3 for campaigns/medium_campaign.sh: the GPU steps recorded and faked, anything else real
echo "$*" >>"$FAKE_LOG"
if [ "$1" = -m ] && [ "$2" != json ]; then
    mod=$2; sub=${3:-}; shift 2
    out=""; config=""; parts=""; study=""
    while [ $# -gt 0 ]; do
        case $1 in --out) out=$2; shift ;; --config) config=$2; shift ;; --parts) parts=$2; shift ;;
                   --study-pilot) study=1 ;; esac
        shift
    done
    case $mod in
        kit)
            if [ "$sub" = demo ]; then  # a trial: the adaptive one records the seed's inspection run first
                if [ "$parts" = adaptive ]; then
                    sleep 1; mkdir -p build/medium/runs/medium-seed
                    echo '{"status":"completed"}' >build/medium/runs/medium-seed/run.json
                else  # the study reuses that run: it must not start before it completed
                    [ -f build/medium/runs/medium-seed/run.json ] || exit 9
                    echo "$parts" >build/medium/study-started-after-the-seed-run
                fi
                exit 0
            fi
            # seed build: a probe's recipe (--config) gives another digest than the pinned defaults
            mkdir -p "$out" && echo '{}' >"$out/config.json" && echo '{"record": "full"}' >"$out/seed_build.json"
            if [ -n "$config" ]; then echo '{"parameter_digest": "b0b0"}'; else echo '{"parameter_digest": "a0a0"}'; fi ;;
        campaigns.medium_pilot|campaigns.study_pilot) mkdir -p "$out" && echo '{"status": "completed"}' >"$out/run.json" ;;
        kit.replicate_campaign) ;;  # a block of the confirmatory campaign: its command line is what is checked
        campaigns.medium_freeze)  # FAKE_FREEZE=1: the positive control held
            [ "${FAKE_FREEZE:-0}" = 1 ] || exit 1
            if [ -n "$study" ]; then echo '{}' >contracts/shared-gradient.medium.json
            else echo '{}' >contracts/adaptive-shards.medium.json; fi ;;
        *) exit 3 ;;
    esac
    exit 0
fi
exec "$REAL_PYTHON" "$@"
"""


def _pilots_host(tmp_path: Path, name: str, extra: dict[str, str] | None = None) -> tuple[Path, dict]:
    """A device copy ready for `pilots-run`: the script, the adaptive draft, a probe config, the carried bundle
    of its one commit, and a PATH whose python3 and nvidia-smi stand in for the GPU host's."""
    import sys

    here = tmp_path / f"{name}-here"
    (here / "campaigns" / "seed-probes").mkdir(parents=True)
    (here / "contracts").mkdir()
    shutil.copy(REPO / "campaigns" / "medium_campaign.sh", here / "campaigns")
    shutil.copy(REPO / "contracts" / "adaptive-shards.medium.draft.json", here / "contracts")
    (here / "campaigns" / "seed-probes" / "p9.json").write_text('{"task_epochs": 8}\n')
    (here / "campaigns" / "seed-probes" / "p10.json").write_text('{"reworded_tasks": 8}\n')
    (here / ".gitignore").write_text("build/\n")
    for rel, text in (extra or {}).items():  # more files of the carried commit
        (here / rel).parent.mkdir(parents=True, exist_ok=True)
        (here / rel).write_text(text)
    for rel, text in (extra or {}).items():  # more files of the carried commit
        (here / rel).parent.mkdir(parents=True, exist_ok=True)
        (here / rel).write_text(text)
    _git(here, "init", "-q")
    _git(here, "add", "-A")
    _git(here, "commit", "-q", "-m", "carried")
    subprocess.run(["make", "-f", str(REPO / "Makefile"), "-C", str(here), "medium-bundle"], check=True,
                   capture_output=True)
    host = tmp_path / f"{name}-host"
    shutil.copytree(here, host, ignore=shutil.ignore_patterns(".git"))
    fake = tmp_path / f"{name}-bin"
    fake.mkdir()
    (fake / "python3").write_text(FAKE_PYTHON)
    (fake / "nvidia-smi").write_text("#!/bin/bash\necho 'NVIDIA H200, 143771 MiB'\n")
    for f in fake.iterdir():
        f.chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "HOME": str(tmp_path), "FAKE_LOG": str(tmp_path / f"{name}.log"),
           "REAL_PYTHON": sys.executable, "PILOTS": "adaptive", "ELSE_PROBE": "p9 campaigns/seed-probes/p9.json"}
    return host, env


def test_pilots_chain_a_seed_probe_when_the_control_fails_and_keep_their_commits(tmp_path):
    """ELSE_PROBE: with no adaptive contract frozen, `pilots-run` goes on to `probe` on the same machine
    without a second sync (which would reset the pilots' commits away); the probe's draft pins the digest
    its build printed. With the contract frozen, no probe runs."""
    host, env = _pilots_host(tmp_path, "failed")
    script = str(host / "campaigns" / "medium_campaign.sh")
    done = subprocess.run(["bash", script, "pilots-run", "2099-01-01"], cwd=host, env=env, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    calls = Path(env["FAKE_LOG"]).read_text().splitlines()
    modules = [c.split()[1] for c in calls if c.startswith("-m ")]
    assert modules == ["kit", "campaigns.medium_pilot", "campaigns.medium_freeze", "kit", "campaigns.medium_pilot"]
    probe_build = next(c for c in calls if "--config" in c)
    assert "--config campaigns/seed-probes/p9.json" in probe_build and "build/medium/probe-p9/seed" in probe_build
    probe_pilot = [c for c in calls if "campaigns.medium_pilot" in c][1]
    assert "--draft build/medium/probe-p9/pilot/probe-draft.json" in probe_pilot
    assert "--run-id probe-p9" in probe_pilot and "--seed build/medium/probe-p9/seed" in probe_pilot
    draft = json.loads((host / "build/medium/probe-p9/pilot/probe-draft.json").read_text())
    assert draft["seed"]["parameter_digest"] == "b0b0" and draft["description"].startswith("PROBE (never frozen)")
    assert _git(host, "log", "-1", "--format=%s") == "Medium pilots 2099-01-01 on one GPU: their records, development roles only"
    assert _git(host, "status", "--porcelain") == ""
    out = host / "build" / "medium" / "out"
    assert {p.name for p in out.iterdir()} == {"seed-build.tgz", "medium-pilot-2099-01-01.tgz", "device.bundle",
                                               "probe-p9.tgz"}
    with tarfile.open(out / "probe-p9.tgz") as tar:
        assert {"probe-p9/pilot/probe-draft.json", "probe-p9/seed-build/record.json"} <= set(tar.getnames())
    with tarfile.open(out / "seed-build.tgz") as tar:  # the full record beside the printed summary
        assert tar.extractfile("seed-build/record.json").read() == b'{"record": "full"}\n'

    host, env = _pilots_host(tmp_path, "frozen")
    env["FAKE_FREEZE"] = "1"
    done = subprocess.run(["bash", str(host / "campaigns" / "medium_campaign.sh"), "pilots-run", "2099-01-01"],
                          cwd=host, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    calls = Path(env["FAKE_LOG"]).read_text().splitlines()
    assert not any("--config" in c for c in calls) and not (host / "build/medium/probe-p9").exists()
    assert _git(host, "log", "-1", "--format=%s").startswith("Adaptive medium contract frozen")


def test_then_trial_both_runs_the_two_trials_side_by_side_after_the_seed_run(tmp_path):
    """THEN_TRIAL=both: with both contracts frozen, the adaptive trial starts, the study trial once the seed's
    inspection run completed (it reuses that record), each a `kit demo` of its own parts; `follow` waits for
    both, since they run in the process the pid file names."""
    host, env = _pilots_host(tmp_path, "both", {"contracts/shared-gradient.medium.draft.json": "{}\n",
                                                "ledger/exposed.jsonl": ""})
    (tmp_path / "nbrt").mkdir()
    (tmp_path / "nbrt" / "env.sh").write_text("")
    env.update({"FAKE_FREEZE": "1", "PILOTS": "adaptive,study", "THEN_TRIAL": "both", "NBRT": str(tmp_path / "nbrt")})
    done = subprocess.run(["bash", str(host / "campaigns" / "medium_campaign.sh"), "pilots-run", "2099-01-01"],
                          cwd=host, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "trials done" in done.stdout
    demos = [c for c in Path(env["FAKE_LOG"]).read_text().splitlines() if c.startswith("-m kit demo")]
    assert len(demos) == 2 and "--parts adaptive" in demos[0] and "--parts study" in demos[1]
    assert "--no-report" in demos[1] and all("--seed build/medium/pilot-work/seed" in d for d in demos)
    assert (host / "build" / "medium" / "study-started-after-the-seed-run").read_text() == "study\n"
    assert _git(host, "log", "-1", "--format=%s").startswith("Study medium contract frozen")


def test_probe_with_two_recipes_syncs_once_and_runs_both_side_by_side(tmp_path):
    """`probe-run A CONFIG_A B CONFIG_B`: the host's git brought to the carried commit once, then each probe's
    seed build and pilot (its own folder, draft and archive); an odd argument list is refused before any work."""
    host, env = _pilots_host(tmp_path, "two")
    script = str(host / "campaigns" / "medium_campaign.sh")
    done = subprocess.run(["bash", script, "probe-run", "p9", "campaigns/seed-probes/p9.json",
                           "p10", "campaigns/seed-probes/p10.json"], cwd=host, env=env, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("git: ") == 1  # one sync
    calls = Path(env["FAKE_LOG"]).read_text().splitlines()
    for name in ("p9", "p10"):
        build = [c for c in calls if f"--config campaigns/seed-probes/{name}.json" in c]
        assert len(build) == 1 and f"build/medium/probe-{name}/seed" in build[0]
        pilot = [c for c in calls if f"--run-id probe-{name}" in c]
        assert len(pilot) == 1 and f"--draft build/medium/probe-{name}/pilot/probe-draft.json" in pilot[0]
        assert f"probe {name}: done" in done.stdout
    out = host / "build" / "medium" / "out"
    assert {p.name for p in out.iterdir()} == {"probe-p9.tgz", "probe-p10.tgz"}
    refused = subprocess.run(["bash", script, "probe-run", "p9", "campaigns/seed-probes/p9.json", "p10"], cwd=host,
                             env=env, capture_output=True, text=True, check=False)
    assert refused.returncode == 2 and "expected NAME CONFIG pairs" in refused.stdout


def test_pilots_run_in_a_checkout_of_their_own_that_a_later_call_s_copy_does_not_touch(tmp_path):
    """Every device call copies the local working tree over the host's copy: `pilots` syncs the copy, then
    runs in a checkout made from it (KIT_CAMPAIGN_DIR), where the host's commits and frozen contracts stay
    whatever a later copy does; `follow` from the copy reads and packs the campaign there."""
    host, env = _pilots_host(tmp_path, "checkout")
    env.update({"FAKE_FREEZE": "1", "KIT_CAMPAIGN_DIR": str(tmp_path / "campaign"), "OUT": str(tmp_path / "out")})
    env.pop("ELSE_PROBE")
    script = str(host / "campaigns" / "medium_campaign.sh")
    started = subprocess.run(["bash", script, "pilots", "2099-01-01"], cwd=host, env=env, capture_output=True,
                             text=True, check=False)
    assert started.returncode == 0, started.stdout + started.stderr
    assert "campaign checkout" in started.stdout
    # a later call's copy: the tree as committed locally, without what the host committed since
    shutil.rmtree(host / "contracts")
    followed = subprocess.run(["bash", script, "follow", "60"], cwd=host, env=env, capture_output=True, text=True,
                              check=False)
    assert followed.returncode == 0, followed.stdout + followed.stderr
    assert "pilots done" in followed.stdout and "no campaign process running" in followed.stdout
    campaign = tmp_path / "campaign"
    assert (campaign / "contracts" / "adaptive-shards.medium.json").is_file()
    assert _git(campaign, "log", "-1", "--format=%s").startswith("Adaptive medium contract frozen")
    assert _git(campaign, "status", "--porcelain") == ""
    assert {"device.bundle", "seed-build.tgz", "medium-pilot-2099-01-01.tgz"} <= {p.name for p in (tmp_path / "out").iterdir()}
    assert not (host / "build" / "medium" / "pilot").exists()  # nothing of the campaign ran in the copy


def test_resume_both_rebuilds_the_seed_then_runs_the_two_trials_side_by_side(tmp_path):
    """`resume both` on a fresh machine (the contracts committed): the seed built to its pin first, then the
    two trials as in THEN_TRIAL=both, with no pilot and no freeze."""
    host, env = _pilots_host(tmp_path, "resume", {"contracts/shared-gradient.medium.draft.json": "{}\n",
                                                  "contracts/adaptive-shards.medium.json": "{}\n",
                                                  "contracts/shared-gradient.medium.json": "{}\n",
                                                  "ledger/exposed.jsonl": ""})
    (tmp_path / "nbrt").mkdir()
    (tmp_path / "nbrt" / "env.sh").write_text("")
    env.update({"NBRT": str(tmp_path / "nbrt"), "KIT_CAMPAIGN_DIR": str(tmp_path / "campaign")})
    done = subprocess.run(["bash", str(host / "campaigns" / "medium_campaign.sh"), "resume-run", "both"], cwd=host,
                          env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    modules = [" ".join(c.split()[1:3]) for c in Path(env["FAKE_LOG"]).read_text().splitlines() if c.startswith("-m ")]
    assert modules == ["kit seed", "kit demo", "kit demo"]
    assert (host / "build" / "medium" / "study-started-after-the-seed-run").read_text() == "study\n"
    with tarfile.open(host / "build" / "medium" / "out" / "seed-build.tgz") as tar:
        assert "seed-build/seed_build.json" in tar.getnames()


def test_pilots_refuse_before_any_work_when_a_contract_is_already_frozen(tmp_path):
    """A frozen contract is never rewritten, so pilots over one could not freeze theirs: on 2026-12-03 the
    freeze refused and THEN_TRIAL started both trials on the old contracts, whose seed pin the new seed
    failed. Now `pilots-run` refuses first (no seed build, no pilot, no commit), naming the contract; and a
    trial starts only on a contract that this run froze."""
    host, env = _pilots_host(tmp_path, "stale", {"contracts/shared-gradient.medium.draft.json": "{}\n",
                                                 "contracts/shared-gradient.medium.json": '{"old": true}\n',
                                                 "ledger/exposed.jsonl": ""})
    env.update({"FAKE_FREEZE": "1", "PILOTS": "adaptive,study", "THEN_TRIAL": "both"})
    done = subprocess.run(["bash", str(host / "campaigns" / "medium_campaign.sh"), "pilots-run", "2099-01-01"],
                          cwd=host, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "contracts/shared-gradient.medium.json already frozen" in done.stderr
    assert not Path(env["FAKE_LOG"]).exists()  # no python3 call: no seed build, no pilot
    assert (host / "contracts" / "shared-gradient.medium.json").read_text() == '{"old": true}\n'
    assert _git(host, "log", "--format=%s") == "carried"  # synced to the carried commit, nothing committed
    # PILOTS=adaptive freezes only the adaptive contract, so the study's frozen one is no obstacle; and
    # THEN_TRIAL=both does not start the study trial on that old contract: the adaptive trial starts alone
    (tmp_path / "nbrt").mkdir()
    (tmp_path / "nbrt" / "env.sh").write_text("")
    env.update({"PILOTS": "adaptive", "THEN_TRIAL": "both", "NBRT": str(tmp_path / "nbrt")})
    done = subprocess.run(["bash", str(host / "campaigns" / "medium_campaign.sh"), "pilots-run", "2099-01-01"],
                          cwd=host, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "trials started" not in done.stdout and "campaign started" in done.stdout
    assert _git(host, "log", "-1", "--format=%s").startswith("Adaptive medium contract frozen")
    # (`start`, the adaptive trial alone, runs its demo in the background; its command is start()'s own)


def test_confirm_runs_the_next_block_over_the_committed_runs_and_final_scores(tmp_path):
    """`confirm TAG` on a fresh machine: the seed rebuilt to its pin, the committed `medium-confirm-*` runs and
    fresh-final scores brought into the campaign's folders (the plan is made over them), then block 1 of the plan
    (the next one) run by kit.replicate_campaign with this session's tag."""
    import hashlib

    plan = {"inputs": {"ledger": {"carried": "build/none.jsonl", "file": "ledger/exposed.jsonl", "entries": 0,
                                  "sha256": hashlib.sha256(b"").hexdigest()}}}
    host, env = _pilots_host(tmp_path, "confirm", {
        "ledger/exposed.jsonl": "", "campaigns/medium-replicates-plan.json": json.dumps(plan),
        "runs/medium-confirm-study-single-r0/run.json": '{"status": "completed"}\n',
        "runs/medium-study-single/run.json": '{"status": "completed"}\n',
        "campaigns/medium-confirm-finals/study/seed.json": "{}\n"})
    (tmp_path / "nbrt").mkdir()
    (tmp_path / "nbrt" / "env.sh").write_text("")
    env.update({"NBRT": str(tmp_path / "nbrt")})
    done = subprocess.run(["bash", str(host / "campaigns" / "medium_campaign.sh"), "confirm-run", "s7"], cwd=host,
                          env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    calls = [c for c in Path(env["FAKE_LOG"]).read_text().splitlines() if c.startswith("-m ")]
    assert [" ".join(c.split()[1:3]) for c in calls] == ["kit seed", "kit.replicate_campaign run"]
    assert calls[1].split()[3:] == ["--design", "campaigns/medium-replicate-design.json", "--block", "1", "--tag", "s7",
                                    "--out", "build/medium/work", "--seed", "build/medium/pilot-work/seed",
                                    "--runs-dir", "build/medium/runs", "--scores", "build/medium/finals"]
    w = host / "build" / "medium"
    assert (w / "runs" / "medium-confirm-study-single-r0" / "run.json").is_file()
    assert not (w / "runs" / "medium-study-single").exists()  # only the design's runs
    assert (w / "finals" / "study" / "seed.json").is_file()
