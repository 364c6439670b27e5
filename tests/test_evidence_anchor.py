"""Evidence no edit survives (issue 61) and every evidence read bounded (issue 64 item 3): each single edit of the
issue's list fails `kit verify-evidence` naming the run or file, every reader refuses a linked run, self-consistent
forgeries fail `--root` and `--at`, a signed tag is verified, and hostile ledgers and archives are refused in one
line without reading past what the index or an absolute cap allows. Small copies of the committed evidence."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import lzma
import os
import shutil
import subprocess
import tarfile
import tracemalloc
from pathlib import Path

import pytest

from kit.cli import main
from kit.digest import load_json_strict, write_canonical_json
from kit.evidence import archive, root
from kit.evidence.anchor import at_report, root_report
from kit.evidence.archiving import archive_folders
from kit.evidence.chain import ledger_report
from kit.evidence.inspect import inspect_run
from kit.evidence.ledger import LEDGER_ENV, LedgerError, bound_guard_ledger, ledger_head, ledger_summary
from kit.evidence.ledger_chain import append_event
from kit.evidence.run_index import load_runs
from kit.evidence.tree import tree_report
from kit.evidence.verify import verify_evidence
from kit.status import status

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "runs"
LIVE = ("demo-adaptive-dev-A", "demo-adaptive-dev-B", "demo-adaptive-select")  # kit-run/3 records (select: events)
OLD = "medium-adaptive-select"  # a kit-run/2 record pinned in runs/MANIFESTS.json, with a GPU mode entry
GIT = ["git", "-c", "user.name=kit-test", "-c", "user.email=kit@test", "-c", "commit.gpgsign=false",
       "-c", "tag.gpgsign=false"]


def _pin(base: Path) -> None:
    spec = importlib.util.spec_from_file_location("pin_run_files", REPO / "tools" / "pin_run_files.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.pin(base, echo=lambda m: None) == 0


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A repository-like folder: two kit-run/3 runs, one older pinned run, the committed ledger, GPU_MODES.json
    with the older run's entry, one archived pilot folder; pinned by tools/pin_run_files.py."""
    base = tmp_path_factory.mktemp("anchor") / "repo"
    for name in (*LIVE, OLD):
        shutil.copytree(RUNS / name, base / "runs" / name)
    modes = load_json_strict(RUNS / "GPU_MODES.json")
    modes["runs"] = {k: v for k, v in modes["runs"].items() if k == f"runs/{OLD}"}
    write_canonical_json(base / "runs" / "GPU_MODES.json", modes)
    (base / "ledger").mkdir()
    shutil.copy(REPO / "ledger" / "exposed.jsonl", base / "ledger" / "exposed.jsonl")
    (base / "runs" / "pilot-x").mkdir()
    (base / "runs" / "pilot-x" / "notes.txt").write_text("a pilot's notes, archived\n")
    archive_folders(base / "runs", ["pilot-x"], "test pilot")
    _pin(base)
    return base


@pytest.fixture
def base(pristine, tmp_path) -> Path:
    out = tmp_path / "repo"
    shutil.copytree(pristine, out, symlinks=True)
    archive._UNPACKED.clear()
    return out


def _tree_failures(base: Path) -> dict[str, str]:
    report = tree_report(base / "runs", base)
    return {c["check"]: c["detail"] for c in report["checks"] if c["result"] == "fail"}


def _run_failures(run_dir: Path, base: Path) -> dict[str, str]:
    report = verify_evidence(run_dir, base)
    return {c["check"]: c["detail"] for c in report["checks"] if c["result"] == "fail" and c["check"] != "git"}


def _edit_record(run_dir: Path, edit) -> None:
    obj = load_json_strict(run_dir / "run.json")
    edit(obj)
    write_canonical_json(run_dir / "run.json", obj)  # canonical and valid: only the pins can tell


def test_the_copied_evidence_passes_every_new_check(base):
    assert _tree_failures(base) == {}
    for name in (*LIVE, OLD):
        failed = _run_failures(base / "runs" / name, base)
        assert not {"record", "place", "files", "gpu_mode"} & set(failed), failed
    assert all(c["result"] != "fail" for c in ledger_report(base)["checks"])


# -- deleted runs, pins of missing runs, the archive index ------------------------------------------------------


@pytest.mark.parametrize("name", [OLD, LIVE[0]])
def test_a_deleted_run_fails_naming_its_pin(base, name):
    shutil.rmtree(base / "runs" / name)
    failed = _tree_failures(base)
    assert f"'runs/{name}', which is no run folder" in failed["pins name runs"]


def test_a_pin_naming_a_run_that_never_existed_fails(base):
    pins = load_json_strict(base / "runs" / "MANIFESTS.json")
    pins["runs"]["runs/made-up"] = pins["runs"][f"runs/{OLD}"]
    write_canonical_json(base / "runs" / "MANIFESTS.json", pins)
    assert "'runs/made-up', which is no run folder" in _tree_failures(base)["pins name runs"]


def test_removed_archive_index_fails_where_archives_exist(base):
    (base / "runs" / "archive" / "index.json").unlink()
    assert "index.json: missing; 1 archive(s)" in _tree_failures(base)["archive index"]


def test_an_archive_the_index_does_not_list_fails(base):
    index = load_json_strict(base / "runs" / "archive" / "index.json")
    index["archives"] = []
    write_canonical_json(base / "runs" / "archive" / "index.json", index)
    assert "an archive the index" in _tree_failures(base)["archive index"]


# -- run.json pinned, its place, links ------------------------------------------------------------------------


@pytest.mark.parametrize("edit", [
    lambda o: o.update(status="failed", error={"cell_index": 1, "execution_count": 1, "ename": "E", "evalue": "x"}),
    lambda o: o.update(duration_s=o["duration_s"] + 1),
    lambda o: o.update(notes={"forged": True}),
    lambda o: o.update(ledger_events=[]),
    lambda o: o.update(materials=[]),
    lambda o: o["git"].update(commit="0" * 40),
], ids=["status", "duration", "notes", "ledger_events", "materials", "commit"])
def test_an_edited_kit_run_3_record_fails_its_pin(base, edit):
    run = base / "runs" / LIVE[2]
    _edit_record(run, edit)
    assert "RECORD_PINS.json records['runs/demo-adaptive-select'] pins" in _run_failures(run, base)["files"]


def test_an_edited_older_record_fails_its_pin(base):
    run = base / "runs" / OLD
    _edit_record(run, lambda o: o.update(started_at="2000-01-01T00:00:00Z"))
    assert "MANIFESTS.json" in _run_failures(run, base)["files"]


def test_run_json_replaced_by_a_link_to_a_forged_record_fails(base, tmp_path):
    run = base / "runs" / LIVE[0]
    forged = tmp_path / "forged.json"
    shutil.copy(run / "run.json", forged)
    (run / "run.json").unlink()
    (run / "run.json").symlink_to(forged)
    assert "a symbolic link" in _run_failures(run, base)["record"]
    assert "a symbolic link" in _tree_failures(base)["links"]


def test_a_moved_run_folder_fails_its_place(base):
    moved = base / "runs" / "demo-adaptive-dev-Q"
    (base / "runs" / LIVE[0]).rename(moved)
    failed = _run_failures(moved, base)
    assert "field 'run_id' is 'demo-adaptive-dev-A'; its folder is named 'demo-adaptive-dev-Q'" in failed["place"]
    assert "demo-adaptive-dev-A" in _tree_failures(base)["pins name runs"]


def test_two_swapped_run_folders_fail_their_places(base):
    a, b = (base / "runs" / n for n in LIVE[:2])
    a.rename(base / "runs" / "swap")
    b.rename(a)
    (base / "runs" / "swap").rename(b)
    assert "place" in _run_failures(a, base) and "place" in _run_failures(b, base)


def test_a_linked_run_folder_is_refused_by_the_verifier_and_every_reader(base, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(base / "runs" / LIVE[0], elsewhere)
    link = base / "runs" / "demo-adaptive-linked"
    link.symlink_to(elsewhere)
    assert "demo-adaptive-linked: a symbolic link" in _tree_failures(base)["links"]
    assert "a symbolic link" in _run_failures(link, base)["record"]
    row = next(r for r in load_runs(base / "runs") if Path(r["dir"]).name == link.name)  # report and results
    assert row["status"] == "unrecorded" and "a symbolic link" in row["reason"]
    with pytest.raises(ValueError, match="a symbolic link"):
        inspect_run(base / "runs", link.name)
    with pytest.raises(ValueError, match="a symbolic link"):
        status(link)


# -- notes taken on trust -----------------------------------------------------------------------------------------


def _git_check(run_dir: Path, base: Path) -> dict:
    return next(c for c in verify_evidence(run_dir, base)["checks"] if c["check"] == "git")


def _note(commit: str, name: str) -> dict:
    return {"format": "kit-superseded/1", "reason": "forged", "unreachable_commits": [commit],
            "replaced_by": {name: name}}


def test_a_superseded_note_in_the_runs_folder_skips_no_live_run(base):
    run = base / "runs" / LIVE[0]
    commit = load_json_strict(run / "run.json")["git"]["commit"]
    (base / "runs" / "superseded.json").write_text(json.dumps(_note(commit, LIVE[0]), indent=1))
    check = _git_check(run, base)
    assert check["result"] == "fail" and "in the runs folder itself" in check["detail"]


def test_a_self_declared_superseded_folder_with_a_forged_run_fails(base):
    folder = base / "runs" / "superseded-2026-12-05-forged"
    shutil.copytree(base / "runs" / LIVE[0], folder / LIVE[0])
    commit = load_json_strict(folder / LIVE[0] / "run.json")["git"]["commit"]
    (folder / "superseded.json").write_text(json.dumps(_note(commit, LIVE[0]), indent=1))
    check = _git_check(folder / LIVE[0], base)
    assert check["result"] == "fail" and "not pinned" in check["detail"]
    assert "does not pin" in _tree_failures(base)["record pins"]
    assert "no entry 'runs/superseded-2026-12-05-forged/demo-adaptive-dev-A'" in \
        _run_failures(folder / LIVE[0], base)["files"]


def test_an_edited_gpu_modes_index_fails(base):
    path = base / "runs" / "GPU_MODES.json"
    modes = load_json_strict(path)
    entry = modes["runs"][f"runs/{OLD}"]
    entry["deterministic"] = not entry["deterministic"]
    write_canonical_json(path, modes)
    assert "GPU_MODES.json: sha256" in _tree_failures(base)["record pins"]


def test_a_missing_record_pins_file_fails_beside_manifests(base):
    (base / "runs" / "RECORD_PINS.json").unlink()
    assert "RECORD_PINS.json: missing beside" in _tree_failures(base)["record pins"]


def test_a_selection_after_a_final_access_of_its_job_fails_the_ledger_order(tmp_path):
    ledger = tmp_path / "ledger" / "exposed.jsonl"
    append_event(ledger, {"event": "selection", "job": "j" * 64, "selection_sha256": "a" * 64}, [])
    append_event(ledger, {"event": "final-access", "job": "j" * 64, "selection_sha256": "a" * 64}, [])
    append_event(ledger, {"event": "selection", "job": "k" * 64, "selection_sha256": "b" * 64}, [])  # another job
    order = next(c for c in ledger_report(tmp_path)["checks"] if c["check"] == "ledger order")
    assert order["result"] == "pass"
    append_event(ledger, {"event": "selection", "job": "j" * 64, "selection_sha256": "c" * 64}, [])
    order = next(c for c in ledger_report(tmp_path)["checks"] if c["check"] == "ledger order")
    assert order["result"] == "fail" and "exposed.jsonl:4: a selection event for job jjjjjjjjjjjj" in order["detail"]


def test_an_archived_folder_named_like_a_live_one_is_two_runs_under_one_key(base):
    (base / "runs" / "pilot-x").mkdir()
    (base / "runs" / "pilot-x" / "notes.txt").write_text("a live folder of the archived folder's name\n")
    assert "pilot-x: live and also archived" in _tree_failures(base)["one key per run"]


# -- the final-role guard bound to the job's ledger ---------------------------------------------------------------


def test_the_final_role_guard_refuses_another_ledger_and_a_replaced_one(tmp_path, monkeypatch):
    ledger = tmp_path / "job-ledger.jsonl"
    append_event(ledger, {"event": "selection", "job": "j" * 64, "selection_sha256": "a" * 64}, [])
    locations = {"ledger": str(ledger), "ledger_head": ledger_head(ledger_summary(ledger))}
    append_event(ledger, {"event": "final-access", "job": "j" * 64, "selection_sha256": "a" * 64}, [])
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    assert bound_guard_ledger(tmp_path, locations) == ledger
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    monkeypatch.setenv(LEDGER_ENV, str(empty))  # the attack: the job's ledger swapped for an empty one
    with pytest.raises(LedgerError, match=r"^\$KIT_LEDGER=.*empty.jsonl: names another ledger .*prepared.json field "
                                          r"'locations.ledger'") as e:
        bound_guard_ledger(tmp_path, locations)
    assert "\n" not in str(e.value)
    monkeypatch.delenv(LEDGER_ENV)
    shutil.move(ledger, tmp_path / "moved-away.jsonl")
    ledger.write_bytes(b"")
    with pytest.raises(LedgerError, match="does not begin with the .* bytes .* the ledger was replaced or rewritten"):
        bound_guard_ledger(tmp_path, locations)
    # a job prepared before the head was recorded keeps the old rule: $KIT_LEDGER first
    monkeypatch.setenv(LEDGER_ENV, str(empty))
    assert bound_guard_ledger(tmp_path, {"ledger": str(ledger)}) == empty


def test_select_refuses_an_environment_naming_another_ledger(prepared, tmp_path, monkeypatch):
    from kit.adaptive.selection import FinalRolesRefused, write_selection

    job = tmp_path / "job"
    shutil.copytree(prepared["out"], job)  # bound to the session's ledger it was prepared against
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "another.jsonl"))
    with pytest.raises(FinalRolesRefused, match="names another ledger than the one this job was prepared against"):
        write_selection(job, {"A": {"home": str(tmp_path / "h"), "root": "a" * 64}}, tmp_path / "sel.json")
    assert not (tmp_path / "another.jsonl").exists() and not (tmp_path / "sel.json").exists()


# -- the evidence root and its anchors -----------------------------------------------------------------------------


def test_the_root_changes_with_any_added_deleted_moved_linked_or_edited_file(base, tmp_path):
    runs = base / "runs"
    before = root.evidence_root(runs)
    assert before == root.evidence_root(runs, base / "ledger") and len(before) == 64
    (runs / OLD / "kernel.log").write_text("ignored by git, not evidence\n")
    assert root.evidence_root(runs) == before
    seen = {before}

    def changed(step):
        step()
        now = root.evidence_root(runs)
        assert now not in seen
        seen.add(now)

    changed(lambda: (runs / "added.txt").write_text("x"))
    changed(lambda: (runs / "GPU_MODES.json").unlink())
    changed(lambda: (runs / LIVE[0]).rename(runs / "moved"))
    changed(lambda: (runs / "moved" / "run.json").rename(runs / "moved" / "run2.json"))
    changed(lambda: (runs / "linked").symlink_to(tmp_path))
    changed(lambda: (base / "ledger" / "exposed.jsonl").write_bytes(b""))
    changed(lambda: (runs / "archive" / "index.md").write_text("edited"))


def _forge_record(base: Path) -> None:
    """A run's record edited and its pin recomputed (runs/RECORD_PINS.json re-made by the tool)."""
    _edit_record(base / "runs" / LIVE[1], lambda o: o.update(notes={"forged": True}))
    (base / "runs" / "RECORD_PINS.json").unlink()
    _pin(base)


def _forge_ledger(base: Path) -> None:
    """A ledger event appended, chained, and the head re-pinned in runs/MANIFESTS.json."""
    append_event(base / "ledger" / "exposed.jsonl", {"event": "selection", "job": "f" * 64,
                                                      "selection_sha256": "f" * 64}, [])
    pins = load_json_strict(base / "runs" / "MANIFESTS.json")
    data = (base / "ledger" / "exposed.jsonl").read_bytes()
    pins["ledger"].update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    write_canonical_json(base / "runs" / "MANIFESTS.json", pins)


def _forge_run(base: Path) -> None:
    """A whole new run (a copy under its own run_id, its record re-made) and its pin added by the tool."""
    new = base / "runs" / "demo-adaptive-dev-N"
    shutil.copytree(base / "runs" / LIVE[0], new)
    _edit_record(new, lambda o: o.update(run_id="demo-adaptive-dev-N"))
    _pin(base)


@pytest.mark.parametrize(("forge", "named"), [(_forge_record, "runs/RECORD_PINS.json: file sha256"),
                                               (_forge_ledger, "ledger/exposed.jsonl: file sha256"),
                                               (_forge_run, "runs/RECORD_PINS.json: file sha256")],
                         ids=["record", "ledger", "new-run"])
def test_self_consistent_forgery_passes_alone_and_fails_root_and_at(base, capsys, forge, named):
    _git(base, "init", "-q")
    _git(base, "add", "-A")
    _git(base, "commit", "-qm", "evidence")
    held = root.evidence_root(base / "runs")
    assert main(["evidence-root", str(base / "runs")]) == 0 and capsys.readouterr().out.strip() == held
    assert root_report(base / "runs", None, held)["ok"]
    assert at_report(base / "runs", None, "HEAD")["ok"]
    forge(base)
    assert _tree_failures(base) == {}  # every covering digest recomputed: no check without an anchor sees it
    assert all(c["result"] != "fail" for c in ledger_report(base)["checks"])
    report = root_report(base / "runs", None, held)
    assert not report["ok"] and f"--root expects {held}" in report["checks"][0]["detail"]
    at = {c["check"]: c for c in at_report(base / "runs", None, "HEAD")["checks"]}
    assert at["at commit"]["result"] == "fail"
    assert named in at["at commit"]["detail"]
    assert main(["verify-evidence", str(base / "runs"), "--root", held]) == 1
    assert "FAILED" in capsys.readouterr().out


def test_a_single_edit_fails_the_command_naming_the_file(base, capsys):
    _edit_record(base / "runs" / LIVE[0], lambda o: o.update(duration_s=o["duration_s"] + 1))
    assert main(["verify-evidence", str(base / "runs")]) == 1
    out = capsys.readouterr().out
    assert f"runs/{LIVE[0]}: FAILED" in out and f"{LIVE[0]}/run.json: sha256" in out


def test_a_fifo_in_place_of_a_sidecar_is_refused_without_blocking(base):
    run = base / "runs" / LIVE[0]
    sidecar = min((run / "metrics").glob("*.json"))
    sidecar.unlink()
    os.mkfifo(sidecar)  # opening it to read would wait for a writer forever
    failed = _run_failures(run, base)
    assert f"{sidecar}: bytes do not hash" in failed[f"metric {sidecar.stem}"]
    assert f"{sidecar}: sha256 not read: no" in failed["files"]
    assert f"{sidecar.name}: neither a regular file nor a folder" in _tree_failures(base)["links"]


def _git(repo: Path, *args: str, env=None) -> str:
    return subprocess.run([*GIT, "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def test_a_signed_tag_states_a_root_that_recomputes_and_its_signature_verifies(base, tmp_path):
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen absent")
    key = tmp_path / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "reviewer", "-f", str(key)], check=True)
    signers = tmp_path / "allowed_signers"
    signers.write_text(f"kit@test {(tmp_path / 'key.pub').read_text()}")
    other = tmp_path / "other_signers"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k2")], check=True)
    other.write_text(f"kit@test {(tmp_path / 'k2.pub').read_text()}")
    _git(base, "init", "-q")
    _git(base, "add", "-A")
    _git(base, "commit", "-qm", "evidence")
    held = root.evidence_root(base / "runs")
    sign = ["-c", "gpg.format=ssh", "-c", f"user.signingkey={key}"]
    _git(base, *sign, "tag", "-s", "v1", "-m", f"Evidence root {held}")
    _git(base, *sign, "tag", "-s", "v-wrong", "-m", f"Evidence root {'0' * 64}")
    checks = {c["check"]: c for c in at_report(base / "runs", None, "v1", str(signers))["checks"]}
    assert [checks[n]["result"] for n in ("at commit", "commit root", "tag signature")] == ["pass"] * 3
    checks = {c["check"]: c for c in at_report(base / "runs", None, "v1", str(other))["checks"]}
    assert checks["tag signature"]["result"] == "fail" and "does not verify" in checks["tag signature"]["detail"]
    checks = {c["check"]: c for c in at_report(base / "runs", None, "v-wrong", str(signers))["checks"]}
    assert checks["commit root"]["result"] == "fail" and f"its files give {held}" in checks["commit root"]["detail"]


# -- bounded reads -------------------------------------------------------------------------------------------------


def test_a_ledger_linked_to_dev_zero_is_refused_in_one_line(base):
    ledger = base / "ledger" / "exposed.jsonl"
    ledger.unlink()
    ledger.symlink_to("/dev/zero")
    report = ledger_report(base)
    chain = next(c for c in report["checks"] if c["check"] == "ledger chain")
    assert chain["result"] == "fail" and "a symbolic link" in chain["detail"] and "\n" not in chain["detail"]
    events = _run_failures(base / "runs" / LIVE[0], base)["ledger events"]
    assert "a symbolic link" in events
    assert "exposed.jsonl: a symbolic link" in _tree_failures(base)["links"]


def _hostile_archive(runs: Path, files: list[tuple[str, bytes]], count=None, **index_fields) -> dict:
    """An archive of `files` (name, bytes), indexed with the true numbers unless `count` (for members) or
    `index_fields` override them."""
    members = files
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    data = lzma.compress(buf.getvalue(), format=lzma.FORMAT_XZ)
    sha = hashlib.sha256(data).hexdigest()
    (runs / "archive").mkdir(exist_ok=True)
    (runs / "archive" / f"{sha}.tar.xz").write_bytes(data)
    entry = {"file": f"{sha}.tar.xz", "sha256": sha, "size": len(data), "tar_sha256": "0" * 64, "why": "hostile",
             "folders": sorted({n.split("/")[0] for n, _ in members}), "members": len(members) if count is None else count,
             "unpacked_bytes": sum(len(d) for _, d in members), "references": [], "runs": [], **index_fields}
    write_canonical_json(runs / "archive" / "index.json", {"format": archive.INDEX_FORMAT, "archives": [entry]})
    archive._UNPACKED.clear()
    return entry


def test_a_small_archive_of_many_bytes_is_unpacked_as_a_stream(tmp_path):
    """The issue's 275 KB xz archive whose index claims 402 MB, scaled down: 48 MiB of zeros in a few KB of xz
    are unpacked without holding them (the reader decompressed the whole into memory), and an index claiming
    more than the archive holds is refused after streaming what it holds."""
    runs = tmp_path / "runs"
    runs.mkdir()
    _hostile_archive(runs, [("probe/zeros.bin", bytes(48 << 20))])
    tracemalloc.start()
    try:
        assert (archive.unpacked(runs) / "probe" / "zeros.bin").stat().st_size == 48 << 20
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak  # the reader held the whole 48 MiB and more
    _hostile_archive(runs, [("probe/zeros.bin", bytes(1 << 20))], unpacked_bytes=402_000_000)
    with pytest.raises(archive.ArchiveError, match="unpacked to 1048576 bytes; the index states 402000000"):
        archive.unpacked(runs)


@pytest.mark.parametrize("field", ["size", "unpacked_bytes", "members"])
def test_absurd_index_numbers_are_refused_in_one_line(tmp_path, capsys, field):
    runs = tmp_path / "runs"
    runs.mkdir()
    _hostile_archive(runs, [("probe/a.txt", b"a")], **{"count" if field == "members" else field: 10 ** 30})
    with pytest.raises(archive.ArchiveError, match=rf"field '{field}' is 1000000000000000000000000000000; expected "
                                                    "an integer from 0 to"):
        archive.read_index(runs)
    assert main(["verify-evidence", str(runs)]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and f"field '{field}'" in err


def test_a_duplicate_archive_member_is_named_not_the_temporary_tree(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    _hostile_archive(runs, [("probe/a.txt", b"a"), ("probe/a.txt", b"b")])
    with pytest.raises(archive.ArchiveError) as e:
        archive.unpacked(runs)
    assert "member 'probe/a.txt' appears twice" in str(e.value) and archive._TEMP_PREFIX not in str(e.value)


def test_a_full_temporary_folder_during_verify_is_one_line_naming_file_and_cause(base, monkeypatch, capsys):
    real = shutil.copyfileobj

    def full(src, dst, *a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(shutil, "copyfileobj", full)
    assert main(["verify-evidence", str(base / "runs")]) != 0
    monkeypatch.setattr(shutil, "copyfileobj", real)
    out, err = capsys.readouterr()
    assert out == ""  # no partial report
    assert err.count("\n") == 1 and "member 'pilot-x/notes.txt' could not be unpacked" in err
    assert "No space left on device" in err and "TMPDIR" in err
