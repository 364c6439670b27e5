"""Evidence layer: parameter checks, run records for every ending, batches and verify-evidence.

Fixture notebooks are written into tmp dirs with nbformat. Papermill executions are few (each
starts a kernel, ~1.5 s): one completed run, one batch of three arms plus its rerun, one kernel death.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest
from support.notebooks import write_notebook

import kit
from kit.cli import main
from kit.digest import canonical_json, load_canonical_json, sha256_file, write_canonical_json
from kit.evidence import notebook, run_record, runtime
from kit.evidence.parameters import ParameterError, check_parameters, parse_assignments, parse_cli_value
from kit.evidence.run_record import RunRecordError, read_run_record
from kit.evidence.runner import load_plan, run_notebook
from kit.evidence.verify import expand_run_dirs, verify_evidence

RECORD_CELL = (
    "from kit.evidence.notebook import record_metric, record_roots, record_inputs\n"
    "record_metric('echo', {'count': count, 'ratio': ratio, 'name': name, 'flag': flag, 'items': items,\n"
    "                       'mapping': mapping, 'anything': anything})\n"
    "record_metric('curve', [{'update': i, 'loss': 1.0 / (i + 1)} for i in range(count)])\n"
    "if anything:\n"
    "    record_roots(produced=[anything['root']], home=anything['home'])\n"
    "    record_roots(used=['b' * 64], home=anything['absent_home'])\n"
    "    record_inputs(input_digests={'seed': 'c' * 64})\n"
    "print('recorded')\n"
)
FAIL_CELL = (
    "if flag:\n"
    "    raise KeyError('boom \"quoted\"')\n"
    "if name == 'unavailable':\n"
    "    from kit.evidence.notebook import ArmUnavailable\n"
    "    raise ArmUnavailable('needs 8 GPUs, host has 0')\n"
)
GIT = ["git", "-c", "user.name=kit-test", "-c", "user.email=kit@test", "-c", "commit.gpgsign=false"]


def git_repo(path: Path) -> str:
    """Make `path` a repository with one commit of everything in it; returns the commit."""
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run([*GIT, "-C", str(path), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(path), "commit", "-qm", "fixture"], check=True)
    return subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


# --- parameters: no kernel needed -----------------------------------------------------------
def test_parameters_cell_parsing_and_type_rules(tmp_path):
    nb = write_notebook(tmp_path / "p.ipynb", "pass")
    assert check_parameters(nb, {"ratio": 3, "anything": {"x": [1]}, "items": ["a"]})["count"] == 2  # int for float
    with pytest.raises(ParameterError, match=r"p\.ipynb: parameter 'count' expects int \(default 2\), got float"):
        check_parameters(nb, {"count": 2.5})
    with pytest.raises(ParameterError, match=r"parameter 'count' expects int .* got bool"):
        check_parameters(nb, {"count": True})
    with pytest.raises(ParameterError, match=r"parameter 'ratio' expects float \(or int\)"):
        check_parameters(nb, {"ratio": "0.1"})
    with pytest.raises(ParameterError, match=r"parameter 'flag' expects bool"):
        check_parameters(nb, {"flag": 1})
    with pytest.raises(ParameterError, match=r"parameter 'name' expects str"):
        check_parameters(nb, {"name": 3})
    with pytest.raises(ParameterError, match=r"parameter 'items' expects list"):
        check_parameters(nb, {"items": {"a": 1}})
    with pytest.raises(ParameterError, match=r"parameter 'mapping' expects dict"):
        check_parameters(nb, {"mapping": []})
    with pytest.raises(ParameterError, match=r"parameter 'anything' value nan is not JSON"):
        check_parameters(nb, {"anything": float("nan")})
    with pytest.raises(ParameterError, match=r"line 2: only `NAME = literal`"):
        parse_assignments("a = 1\nimport os\n", "nb")
    with pytest.raises(ParameterError, match=r"parameter 'b' \(line 1\) has a default that is not a literal"):
        parse_assignments("b = Path('x')\n", "nb")
    assert parse_assignments("# comment\nx: int = 3\ny = (1, 'a')\n", "nb") == {"x": 3, "y": (1, "a")}


def test_cli_values_are_read_against_the_default():
    assert parse_cli_value("42", "text") == "42"  # a str default takes the text verbatim
    assert parse_cli_value("42", 1) == 42
    assert parse_cli_value("1e-3", 0.1) == 0.001
    assert parse_cli_value("true", False) is True
    assert parse_cli_value("True", False) is True
    assert parse_cli_value("null", None) is None
    assert parse_cli_value('[1, "a"]', []) == [1, "a"]
    assert parse_cli_value("(1, 2)", []) == [1, 2]
    assert parse_cli_value("abc", None) == "abc"
    assert parse_cli_value("NaN", 0.5) == "NaN"  # and check_parameters then refuses the str


def test_unknown_or_mistyped_parameter_is_refused_before_anything_is_created(tmp_path, capsys):
    nb = write_notebook(tmp_path / "p.ipynb", "pass")
    runs = tmp_path / "runs"
    with pytest.raises(ParameterError, match=r"p\.ipynb: unknown parameter\(s\) cuont; the parameters cell "
                                             r"declares: anything, count, flag, items, mapping, name, ratio"):
        run_notebook(nb, {"cuont": 3}, "r1", runs, {})
    with pytest.raises(ParameterError, match="parameter 'count' expects int"):
        run_notebook(nb, {"count": "3"}, "r1", runs, {})
    assert main(["run", str(nb), "-p", "count", "2.5", "--runs-dir", str(runs)]) == 2
    assert "parameter 'count' expects int (default 2), got float 2.5" in capsys.readouterr().err
    assert not runs.exists()


def test_missing_runtime_fails_at_once_naming_the_modules(tmp_path, monkeypatch, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text("[]")
    monkeypatch.setattr(runtime, "RUN_MODULES", ("papermill", "kit_no_such_module_a", "kit_no_such_module_b"))
    monkeypatch.setattr(runtime, "repository_root", lambda: tmp_path)
    assert main(["batch", str(plan), "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "kit_no_such_module_a, kit_no_such_module_b are not importable" in err
    assert f"{tmp_path / '.whl'} offers nothing" in err
    assert not (tmp_path / "runs").exists()


def test_wheel_dir_supplies_missing_modules(tmp_path, monkeypatch):
    """`.whl/site/` (unpacked) and `.whl/*.whl` (zip import) both make a module importable."""
    site = tmp_path / ".whl" / "site" / "kit_fixture_unpacked"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("VALUE = 1\n")
    with zipfile.ZipFile(tmp_path / ".whl" / "kit_fixture_zipped-1.0-py3-none-any.whl", "w") as z:
        z.writestr("kit_fixture_zipped/__init__.py", "VALUE = 2\n")
    monkeypatch.setattr(runtime, "repository_root", lambda: tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    added = runtime.ensure_runtime(("kit_fixture_unpacked", "kit_fixture_zipped"))
    assert [p.name for p in added] == ["site", "kit_fixture_zipped-1.0-py3-none-any.whl"]
    import kit_fixture_unpacked
    import kit_fixture_zipped

    assert (kit_fixture_unpacked.VALUE, kit_fixture_zipped.VALUE) == (1, 2)
    assert runtime.kernel_pythonpath().split(":")[:3] == [str(runtime.repository_root()), *map(str, added)]
    for name in ("kit_fixture_unpacked", "kit_fixture_zipped"):
        sys.modules.pop(name)


def test_record_calls_outside_a_run_write_nothing_and_check_values(monkeypatch):
    monkeypatch.delenv(notebook.RUN_DIR_ENV, raising=False)
    assert notebook.record_metric("ok", {"a": 1}) is None
    assert notebook.record_roots(produced=["a" * 64]) is None
    with pytest.raises(RunRecordError, match=r"record_metric\('bad'\): not canonical JSON"):
        notebook.record_metric("bad", {"loss": float("nan")})
    with pytest.raises(RunRecordError, match="checkpoint root 'abc' is not 64 lowercase hex"):
        notebook.record_roots(produced=["abc"])
    with pytest.raises(RunRecordError, match="name '../x' must match"):
        notebook.record_metric("../x", 1)


# --- one completed run ----------------------------------------------------------------------
TRICKY = {
    "name": "quote \" apostrophe ' backslash \\ newline\n tab\t unicode é ☃ \u2028 end",
    "items": ["a\"b", "c\nd", {"k": "v'"}, 1, 2.5, None, True],
    "mapping": {"key with \"quotes\"\n": ["é"]},
    "ratio": 3,
}


@pytest.fixture(scope="module")
def completed(tmp_path_factory):
    """A git repository with a notebook, a checkpoint home with one commit, and one completed run."""
    from support.store import commit

    repo = tmp_path_factory.mktemp("repo")
    nb = write_notebook(repo / "study.ipynb", RECORD_CELL, FAIL_CELL)
    (repo / ".gitignore").write_text("home/\n")
    git_commit = git_repo(repo)
    home = repo / "home"
    root = commit(home, seed=1, parent=None)
    anything = {"root": root, "home": str(home), "absent_home": str(repo / "absent-home")}
    params = {**TRICKY, "anything": anything}
    extra = {"contract_digest": "d" * 64, "notes": {"purpose": "test"}}
    record = run_notebook(nb, params, "ok-run", repo / "runs", extra)
    return {"repo": repo, "record": record, "params": params, "root": root, "commit": git_commit,
            "run_dir": repo / "runs" / "ok-run", "notebook": nb}


def test_completed_run_writes_every_field(completed):
    run_dir, record = completed["run_dir"], completed["record"]
    assert record.status == "completed" and record.error is None and record.reason is None
    on_disk = load_canonical_json(run_dir / "run.json")  # canonical bytes, so it can be pinned
    assert on_disk == record.to_json() == read_run_record(run_dir).to_json()
    assert set(on_disk) == {
        "format", "run_id", "notebook", "notebook_sha256", "executed_notebook", "executed_notebook_sha256",
        "parameters", "status", "reason", "error", "started_at", "ended_at", "duration_s", "git", "versions",
        "device", "contract_digest", "input_digests", "checkpoint_roots", "metrics", "notes", "numeric_profile",
        "manifest", "materials", "ledger_events"}
    # every file of the folder but run.json and kernel.log, pinned (docs/formats/run-records.md, "Run manifests")
    assert on_disk["manifest"] == {p.relative_to(run_dir).as_posix(): {"sha256": sha256_file(p), "size": p.stat().st_size}
                                   for p in run_dir.rglob("*") if p.is_file() and p.name not in ("run.json", "kernel.log")}
    assert "metrics/curve.json" in on_disk["manifest"] and on_disk["materials"] == on_disk["ledger_events"] == []
    assert on_disk["notebook"] == "study.ipynb"  # relative to the repository
    assert on_disk["notebook_sha256"] == sha256_file(completed["notebook"])
    assert on_disk["executed_notebook_sha256"] == sha256_file(run_dir / "study.ipynb")
    assert on_disk["git"] == {"commit": completed["commit"], "dirty": False}  # runs/ does not make it dirty
    assert on_disk["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert on_disk["versions"]["torch"].startswith("2.") and on_disk["versions"]["papermill"]
    assert on_disk["device"]["gpu_count"] == len(on_disk["device"]["gpus"]) and on_disk["device"]["cpu_count"] >= 1
    assert on_disk["started_at"].endswith("Z") and on_disk["started_at"] <= on_disk["ended_at"]
    assert 0 < on_disk["duration_s"] < 120
    assert on_disk["contract_digest"] == "d" * 64 and on_disk["input_digests"] == {"seed": "c" * 64}
    assert on_disk["notes"] == {"purpose": "test"}
    assert on_disk["numeric_profile"]["name"] == kit.NUMERIC_PROFILE
    assert on_disk["checkpoint_roots"] == {"produced": [{"root": completed["root"], "home": "home"}],
                                           "used": [{"root": "b" * 64, "home": "absent-home"}]}
    assert on_disk["metrics"] == {n: sha256_file(run_dir / "metrics" / f"{n}.json") for n in ("curve", "echo")}
    assert not (run_dir / notebook.KERNEL_ROOTS_NAME).exists()  # merged into run.json, then removed
    executed = nbformat.read(run_dir / "study.ipynb", as_version=4)
    assert any("recorded" in o.get("text", "") for c in executed.cells for o in c.get("outputs", []))


def test_tricky_parameters_are_injected_exactly(completed):
    run_dir, params = completed["run_dir"], completed["params"]
    executed = nbformat.read(run_dir / "study.ipynb", as_version=4)
    nbformat.validate(executed)
    assert executed.metadata.papermill.parameters == params
    injected = [c for c in executed.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert parse_assignments(injected[0].source, "injected") == params
    # what the kernel saw, echoed back through a metric sidecar
    echo = load_canonical_json(run_dir / "metrics" / "echo.json")
    assert canonical_json({k: echo[k] for k in params}) == canonical_json(params)
    assert echo["count"] == 2 and echo["flag"] is False


def test_verify_evidence_passes_on_a_good_run(completed, capsys):
    report = verify_evidence(completed["run_dir"])
    results = {c["check"]: c["result"] for c in report["checks"]}
    assert report["ok"], report
    assert results == {"record": "pass", "executed_notebook": "pass", "parameters": "pass", "injected_cell": "pass",
                       "metric curve": "pass", "metric echo": "pass", f"root produced {completed['root'][:12]}": "pass",
                       f"root used {'b' * 12}": "skipped", "git": "pass", "files": "pass", "copies": "pass",
                       "materials": "pass", "ledger events": "pass", "place": "pass"}
    assert "home absent" in next(c["detail"] for c in report["checks"] if c["check"].startswith("root used"))
    assert main(["verify-evidence", str(completed["repo"] / "runs")]) == 0
    assert "runs/ok-run: ok" in capsys.readouterr().out


def test_verify_evidence_takes_a_campaign_folder_for_the_runs_nested_in_it(completed, capsys):
    campaign = completed["repo"] / "runs" / "campaign-1"  # no run.json of its own; runs two levels down
    shutil.rmtree(campaign, ignore_errors=True)
    shutil.copytree(completed["run_dir"], campaign / "superseded" / "ok-run")
    (campaign / "superseded" / "ok-run" / "metrics" / "inner").mkdir()  # never looked into: inside a run
    (campaign / "study" / "evaluation").mkdir(parents=True)
    (campaign / "study" / "screens.json").write_text("{}")
    (campaign / "study" / "loop").symlink_to("..")  # not followed: would list the run again
    assert expand_run_dirs([str(campaign)]) == [campaign / "superseded" / "ok-run"]
    assert main(["verify-evidence", str(campaign)]) == 1  # but refused: a link is not evidence (issue 61)
    assert "study/loop: a symbolic link (to ..)" in capsys.readouterr().out
    (campaign / "study" / "loop").unlink()
    assert main(["verify-evidence", str(campaign)]) == 0
    assert "campaign-1/superseded/ok-run: ok" in capsys.readouterr().out
    crashed = campaign / "superseded" / "crashed-run"  # an executed notebook and no record: checked, fails
    crashed.mkdir()
    (crashed / "arm.ipynb").write_text("{}")
    assert expand_run_dirs([str(campaign)]) == [crashed, campaign / "superseded" / "ok-run"]
    assert main(["verify-evidence", str(campaign)]) == 1
    assert "crashed-run: FAILED" in capsys.readouterr().out
    shutil.rmtree(crashed)
    assert expand_run_dirs([str(campaign / "study")]) == [campaign / "study"]  # nothing under it
    assert main(["verify-evidence", str(campaign / "study")]) == 1
    assert "no run record" in capsys.readouterr().out
    shutil.rmtree(campaign)  # the fixture's repository is shared by the module's tests


def test_verify_evidence_fails_on_edited_parameters_sidecars_or_commit(completed):
    runs = completed["repo"] / "runs-edited"
    run_dir = runs / "ok-run"
    shutil.copytree(completed["run_dir"], run_dir)
    obj = load_canonical_json(run_dir / "run.json")
    obj["parameters"]["ratio"] = 3.0  # equal as a number, not as recorded evidence
    write_canonical_json(run_dir / "run.json", obj)
    failed = {c["check"] for c in verify_evidence(run_dir)["checks"] if c["result"] == "fail"}
    assert failed == {"parameters", "injected_cell"}
    (run_dir / "metrics" / "curve.json").write_text("[]")
    obj["git"]["commit"] = "0" * 40
    write_canonical_json(run_dir / "run.json", obj)
    failed = {c["check"] for c in verify_evidence(run_dir)["checks"] if c["result"] == "fail"}
    assert failed == {"parameters", "injected_cell", "metric curve", "files", "git"}  # files: the manifest too
    (run_dir / "run.json").write_text(json.dumps(obj, indent=1))  # not canonical
    assert main(["verify-evidence", str(run_dir)]) == 1


def test_completed_run_id_is_never_overwritten(completed):
    with pytest.raises(ValueError, match="run 'ok-run' already completed; choose another --run-id"):
        run_notebook(completed["notebook"], {}, "ok-run", completed["repo"] / "runs", {})


# --- a batch: completed, failed and unavailable arms ----------------------------------------
@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    work = tmp_path_factory.mktemp("batch")
    nb = write_notebook(work / "arm.ipynb", "print('before the failure')", RECORD_CELL, FAIL_CELL)
    plan = [
        {"notebook": str(nb), "run_id": "arm-ok", "parameters": {"count": 3}},
        {"notebook": str(nb), "run_id": "arm-fail", "parameters": {"flag": True}},
        {"notebook": str(nb), "run_id": "arm-na", "parameters": {"name": "unavailable"}},
    ]
    plan_path = work / "plan.json"
    plan_path.write_text(json.dumps(plan))
    status = main(["batch", str(plan_path), "--runs-dir", str(work / "runs")])
    return {"work": work, "plan": plan_path, "status": status, "runs": work / "runs"}


def test_failing_cell_gives_failed_with_cell_and_partial_notebook(batch):
    record = read_run_record(batch["runs"] / "arm-fail")
    assert record.status == "failed"
    # source cells: markdown, parameters, print, record, fail -> index 4; In [n]: injected cell runs second
    assert record.error is not None and record.error.to_json() == {
        "cell_index": 4, "execution_count": 5, "ename": "KeyError", "evalue": "'boom \"quoted\"'"}
    assert record.reason == "KeyError: 'boom \"quoted\"'"
    partial = nbformat.read(batch["runs"] / "arm-fail" / "arm.ipynb", as_version=4)
    outputs = [o for c in partial.cells for o in c.get("outputs", [])]
    assert any(o.get("text") == "before the failure\n" for o in outputs)
    assert any(o.get("ename") == "KeyError" for o in outputs)
    assert set(record.metrics) == {"curve", "echo"}  # sidecars written before the failure are kept


def test_arm_unavailable_gives_unavailable_with_reason(batch):
    record = read_run_record(batch["runs"] / "arm-na")
    assert record.status == "unavailable"
    assert record.reason == "needs 8 GPUs, host has 0"
    assert record.error.ename == "ArmUnavailable" and record.error.cell_index == 4


def test_batch_continues_past_failure_exits_nonzero_and_skips_completed_on_rerun(batch, capsys):
    assert batch["status"] == 1
    assert {d.name for d in batch["runs"].iterdir() if not d.name.startswith(".")} == {"arm-ok", "arm-fail", "arm-na"}
    assert read_run_record(batch["runs"] / "arm-ok").status == "completed"
    first_ok = (batch["runs"] / "arm-ok" / "run.json").read_bytes()
    capsys.readouterr()
    assert main(["batch", str(batch["plan"]), "--runs-dir", str(batch["runs"])]) == 1
    out = capsys.readouterr().out
    assert "arm-ok: skipped (completed before)" in out
    assert "arm-fail: failed" in out and "arm-na: unavailable" in out
    assert (batch["runs"] / "arm-ok" / "run.json").read_bytes() == first_ok
    # the re-run kept each earlier attempt that did not complete, whole, beside the new record
    for run_id in ("arm-fail", "arm-na"):
        kept = batch["runs"] / f"{run_id}.superseded" / "attempt-1"
        assert read_run_record(kept).status == read_run_record(batch["runs"] / run_id).status != "completed"
        assert read_run_record(kept).started_at < read_run_record(batch["runs"] / run_id).started_at
    assert not (batch["runs"] / "arm-ok.superseded").exists()
    assert run_record.superseded_attempt_dir(batch["runs"] / "arm-fail").name == "attempt-2"


def test_plan_is_checked_before_any_arm_runs(batch, tmp_path):
    nb = batch["work"] / "arm.ipynb"
    bad = tmp_path / "plan.json"
    bad.write_text(json.dumps([{"notebook": str(nb), "run_id": "a"}, {"notebook": str(nb), "run_id": "b",
                                                                       "parameters": {"cuont": 1}}]))
    with pytest.raises(ParameterError, match="unknown parameter"):
        load_plan(bad)
    bad.write_text(json.dumps([{"notebook": str(nb), "run_id": "a"}, {"notebook": str(nb), "run_id": "a"}]))
    with pytest.raises(ValueError, match=r"arm 1: run_id 'a' appears twice"):
        load_plan(bad)
    yaml_plan = tmp_path / "plan.yaml"
    yaml_plan.write_text(f"- notebook: {nb}\n  run_id: y1\n  parameters: {{count: 4}}\n")
    assert [arm.to_json() for arm in load_plan(yaml_plan)] == [{"notebook": str(nb), "run_id": "y1",
                                                               "parameters": {"count": 4}}]


# --- a kernel that dies ---------------------------------------------------------------------
def test_kernel_death_gives_failed_and_keeps_partial_notebook(tmp_path):
    nb = write_notebook(tmp_path / "die.ipynb", "print('alive')", "import os\nos._exit(3)", "print('never')",
                        parameters=None)
    record = run_notebook(nb, {}, "dies", tmp_path / "runs", {})
    assert record.status == "failed"
    assert record.error.ename == "DeadKernelError" and record.error.cell_index == 2
    # papermill saves the dying cell's count only if the kernel answered before it died; the source
    # cell index (above) is what names the cell either way.
    assert record.error.execution_count in (2, None)
    partial = nbformat.read(tmp_path / "runs" / "dies" / "die.ipynb", as_version=4)
    assert partial.cells[1].outputs[0]["text"] == "alive\n"
    assert partial.cells[3].get("execution_count") is None
    assert read_run_record(tmp_path / "runs" / "dies").to_json() == record.to_json()


def test_a_superseded_runs_root_that_its_replacement_overwrote_is_skipped_a_corrupt_one_fails(completed):
    """A run re-made under the same run id writes into the same checkpoint home, so the superseded record's roots
    may no longer be there: skipped for a run in a superseded folder, a failure anywhere else; a manifest that is
    present and does not verify fails in both."""
    repo = completed["repo"]
    kept = repo / "runs" / "superseded-2026-01-01-test"
    plain = repo / "runs-plain"
    try:
        for folder in (kept, plain):
            shutil.copytree(completed["run_dir"], folder / "ok-run")
            obj = load_canonical_json(folder / "ok-run" / "run.json")
            obj["checkpoint_roots"]["produced"] = [{"root": "e" * 64, "home": "home"}]  # a root the home lacks
            write_canonical_json(folder / "ok-run" / "run.json", obj)
        (kept / "superseded.json").write_text(json.dumps(
            {"format": "kit-superseded/1", "reason": "re-made under the same run ids", "unreachable_commits": [],
             "replaced_by": {"ok-run": "ok-run"}}))
        root_check = f"root produced {'e' * 12}"

        def checks(run_dir):
            report = verify_evidence(run_dir)
            return report["ok"], {c["check"]: c for c in report["checks"]}

        ok, by_name = checks(kept / "ok-run")
        assert ok and by_name[root_check]["result"] == "skipped"
        assert "re-made into the same home" in by_name[root_check]["detail"]
        ok, by_name = checks(plain / "ok-run")
        assert not ok and by_name[root_check]["result"] == "fail"
        assert "no manifest for commit " + "e" * 64 in by_name[root_check]["detail"]

        corrupt_home = repo / "home-corrupt"
        shutil.copytree(repo / "home", corrupt_home)
        objects = sorted(p for p in corrupt_home.rglob("*") if p.is_file() and "commits" not in p.parts
                         and p.name != "HEAD")
        assert objects, "the fixture's home holds objects"
        for p in objects:
            p.write_bytes(p.read_bytes() + b"x")
        obj = load_canonical_json(kept / "ok-run" / "run.json")
        obj["checkpoint_roots"]["produced"] = [{"root": completed["root"], "home": "home-corrupt"}]
        write_canonical_json(kept / "ok-run" / "run.json", obj)
        ok, by_name = checks(kept / "ok-run")
        assert not ok and by_name[f"root produced {completed['root'][:12]}"]["result"] == "fail"
    finally:
        for folder in (kept, plain, repo / "home-corrupt"):
            shutil.rmtree(folder, ignore_errors=True)
