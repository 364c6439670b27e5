"""Evidence that cannot be edited unnoticed (#47): each attack of the issue, tried on copies of the committed
runs and ledger, fails verification naming the file, or is refused; pins and the ledger chain are read by a
verifier written here from docs/formats/run-records.md and docs/formats/exposure-ledger.md alone."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from support.adaptive import private_job

from kit.digest import canonical_json, sha256_file, write_canonical_json
from kit.evidence import run_record
from kit.evidence.chain import ledger_report
from kit.evidence.manifest import file_manifest
from kit.evidence.verify import verify_evidence

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "runs"
SELECT, FINAL, PRODUCER = "demo-adaptive-select", "demo-adaptive-final-A", "demo-adaptive-A3-migrated"
OLD = "medium-adaptive-select"  # a record made before run manifests: pinned in runs/MANIFESTS.json only


def _tool(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def base(tmp_path):
    """A repository-like folder: the committed demo runs (each kit-run/3 record's materials are other demo
    runs), one run recorded before manifests existed (OLD) and the committed ledger, pinned by the tool."""
    for run in [*sorted(RUNS.glob("demo-*")), RUNS / OLD]:
        if run.is_dir():
            shutil.copytree(run, tmp_path / "runs" / run.name)
    (tmp_path / "ledger").mkdir()
    shutil.copy(REPO / "ledger" / "exposed.jsonl", tmp_path / "ledger" / "exposed.jsonl")
    assert _tool("pin_run_files").pin(tmp_path, echo=lambda m: None) == 0
    return tmp_path


def _failed(report: dict) -> list[str]:
    return [f"{c['check']}: {c['detail']}" for c in report["checks"] if c["result"] == "fail" and c["check"] != "git"]


def _edit_json_line(path: Path, edit) -> None:
    lines = path.read_text().splitlines(keepends=True)
    obj = json.loads(lines[0])
    edit(obj)
    path.write_text(json.dumps(obj) + "\n" + "".join(lines[1:]))


def _flip_base_correct(d: Path) -> Path:
    path = d / "files" / "final-A.json"
    obj = json.loads(path.read_text())
    obj["tasks"][0]["base_correct"] = not obj["tasks"][0]["base_correct"]
    path.write_bytes(canonical_json(obj))
    return path


def _change_learned_root(d: Path) -> Path:
    path = d / "files" / "selection.json"
    obj = json.loads(path.read_text())
    obj["candidates"]["A"]["learned_state_root"] = "0" * 64
    path.write_bytes(canonical_json(obj))
    return path


def _forge_selection_line(d: Path) -> Path:
    path = d / "files" / "selections.jsonl"
    path.write_text(path.read_text() + json.dumps({"selection": "forged.json", "sha256": "f" * 64}) + "\n")
    return path


def _change_access_time(d: Path) -> Path:
    path = d / "files" / "final-access.jsonl"
    _edit_json_line(path, lambda e: e.update(time=e["time"] + 1))
    return path


def _change_used_root(d: Path) -> Path:
    path = d / run_record.RUN_RECORD_NAME
    obj = json.loads(path.read_text())
    obj["checkpoint_roots"]["used"][0]["root"] = "a" * 64
    path.write_bytes(canonical_json(obj))
    return path


@pytest.mark.parametrize("run,attack", [(FINAL, _flip_base_correct), (SELECT, _change_learned_root),
                                        (SELECT, _forge_selection_line), (FINAL, _change_access_time),
                                        (FINAL, _change_used_root)])
def test_each_file_attack_of_the_issue_fails_naming_the_file(base, run, attack):
    d = base / "runs" / run
    assert _failed(verify_evidence(d, base)) == []  # pinned as committed
    path = attack(d)
    failed = _failed(verify_evidence(d, base))
    assert any(str(path) in f for f in failed), failed


def test_an_added_or_removed_file_fails_and_an_unpinned_run_fails_loudly(base):
    d = base / "runs" / FINAL
    (d / "files" / "extra.json").write_text("{}")
    assert any("extra.json: added" in f for f in _failed(verify_evidence(d, base)))
    (d / "files" / "extra.json").unlink()
    (d / "files" / "final-evaluations.jsonl").unlink()
    assert any("final-evaluations.jsonl: removed" in f for f in _failed(verify_evidence(d, base)))
    (base / "runs" / "MANIFESTS.json").unlink()
    assert any("not pinned" in f for f in _failed(verify_evidence(base / "runs" / OLD, base)))
    assert not any("not pinned" in f for f in _failed(verify_evidence(base / "runs" / SELECT, base)))  # kit-run/3


def test_removing_the_last_ledger_line_fails_in_either_form(base):
    ledger = base / "ledger" / "exposed.jsonl"
    assert ledger_report(base)["ok"]
    lines = ledger.read_bytes().splitlines(keepends=True)
    ledger.write_bytes(b"".join(lines[:-1]))
    report = ledger_report(base)
    assert not report["ok"] and "do not hash to the head" in report["checks"][-1]["detail"]


def _compacted(base: Path) -> list[bytes]:
    """The committed ledger compacted by the tool, pinned, as events: [header + records bytes]."""
    ledger = base / "ledger" / "exposed.jsonl"
    _tool("compact_ledger").compact_file(ledger, ledger)
    (base / "runs" / "MANIFESTS.json").unlink()
    assert _tool("pin_run_files").pin(base, echo=lambda m: None) == 0
    events, lines = [], ledger.read_bytes().splitlines(keepends=True)
    while lines:
        n = json.loads(lines[0])["count"]
        events.append(b"".join(lines[:n + 1]))
        lines = lines[n + 1:]
    return events


@pytest.mark.parametrize("how", ["remove a middle event", "edit an event", "reorder two events", "drop the last"])
def test_the_chained_ledger_fails_on_a_removed_edited_or_reordered_event(base, how):
    events = _compacted(base)
    assert ledger_report(base)["ok"] and len(events) > 3
    if how == "remove a middle event":
        events.pop(1)
    elif how == "edit an event":
        events[1] = events[1].replace(b"final.task", b"final.tusk", 1)
    elif how == "reorder two events":
        events[1], events[2] = events[2], events[1]
    else:
        events.pop()
    (base / "ledger" / "exposed.jsonl").write_bytes(b"".join(events))
    assert not ledger_report(base)["ok"]


def test_an_independent_reader_verifies_the_pins_and_the_chained_ledger(base):
    """docs/formats/run-records.md ("Run manifests") and docs/formats/exposure-ledger.md as the only guide, no kit code."""
    events = _compacted(base)
    pins = json.loads((base / "runs" / "MANIFESTS.json").read_text())
    assert pins["format"] == "kit-run-pins/1"
    for key, entry in pins["runs"].items():
        d = base / key
        files = {p.relative_to(d).as_posix(): p for p in d.rglob("*") if p.is_file()}
        files = {k: p for k, p in files.items() if k not in ("run.json", "kernel.log")}
        assert sorted(files) == sorted(entry["files"])
        for rel, p in files.items():
            data = p.read_bytes()
            assert entry["files"][rel] == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        assert entry["run.json"]["sha256"] == hashlib.sha256((d / "run.json").read_bytes()).hexdigest()
    data = (base / "ledger" / "exposed.jsonl").read_bytes()
    assert hashlib.sha256(data[:pins["ledger"]["size"]]).hexdigest() == pins["ledger"]["sha256"]
    offset, exposures = 0, 0
    for raw in events:
        header_line, *records = raw.splitlines(keepends=True)
        header = json.loads(header_line)
        assert header["format"] == "kit-exposure/2" and header["count"] == len(records)
        assert header["prev"] == hashlib.sha256(data[:offset]).hexdigest()
        exposures += sum(1 for r in records if json.loads(r)[0] in ("final.task", "final.retention", "retention.probe"))
        offset += len(raw)
    committed = [json.loads(line) for line in (REPO / "ledger" / "exposed.jsonl").open()]  # either form
    assert offset == len(data) and exposures == sum(isinstance(x, list) or x.get("format") == "kit-exposure/1"
                                                    for x in committed)


def _as_new_record(d: Path, materials: list) -> None:
    """Rewrite a copied run's record as a kit-run/3 one would be (its manifest and materials)."""
    rec = run_record.read_run_record(d)
    rec = replace(rec, format=run_record.RUN_FORMAT, ledger_events=rec.ledger_events or (),
                  manifest={rel: run_record.ManifestEntry.from_json(e, str(d), rel)
                            for rel, e in file_manifest(d).items()},
                  materials=tuple(run_record.Material.from_json(m, "materials") for m in materials))
    run_record.write_run_record(d, rec)


def test_a_new_record_chains_to_what_it_consumed(base):
    """A kit-run/3 final evaluation: its selection and commits are materials, found in the evidence; a forged
    selection digest or a changed used root breaks the chain, with no checkpoint store present."""
    d = base / "runs" / FINAL
    selection = sha256_file(base / "runs" / SELECT / "files" / "selection.json")
    used = run_record.read_run_record(d).checkpoint_roots.used[0].root
    _as_new_record(d, [{"role": "selection", "kind": "file", "digest": selection},
                       {"role": "scored", "kind": "commit", "digest": used}])
    pins = json.loads((base / "runs" / "RECORD_PINS.json").read_text())  # the new record, pinned as committed
    del pins["records"][f"runs/{FINAL}"]
    write_canonical_json(base / "runs" / "RECORD_PINS.json", pins)
    assert _tool("pin_run_files").pin(base, echo=lambda m: None) == 0
    assert _failed(verify_evidence(d, base)) == []
    path = d / run_record.RUN_RECORD_NAME
    obj = json.loads(path.read_text())
    obj["checkpoint_roots"]["used"][0]["root"] = "a" * 64
    write_canonical_json(path, obj)
    failed = _failed(verify_evidence(d, base))
    assert any(f.startswith("roots used") for f in failed) and any(f.startswith("selection binding") for f in failed)
    obj["checkpoint_roots"]["used"][0]["root"] = used
    obj["materials"][0]["digest"] = "e" * 64
    write_canonical_json(path, obj)
    assert any(f.startswith("materials") and "selection file eeeeeeeeeeee" in f for f in _failed(verify_evidence(d, base)))


def test_replay_compares_every_sidecar_field_and_the_output_text(tmp_path):
    """The issue's rewritten-result attack: dev-A's accuracy set to 64/64, its answers to 'gained 64', an
    output replaced and run.json's digests updated; the replay (here: the committed folder, which is what the
    re-run computed) must name the fields."""
    from kit.evidence.replay import compare

    tampered = tmp_path / "demo-adaptive-dev-A"
    shutil.copytree(RUNS / "demo-adaptive-dev-A", tampered)
    acc = json.loads((tampered / "metrics" / "accuracy_by_family.json").read_text())
    acc["all"].update(correct_candidate=64, accuracy_candidate=1.0)
    write_canonical_json(tampered / "metrics" / "accuracy_by_family.json", acc)
    write_canonical_json(tampered / "metrics" / "generated_answers.json", {"gained": 64, "lost": 0, "net": 64})
    rec = run_record.read_run_record(tampered)
    nb_path = tampered / rec.executed_notebook
    nb = json.loads(nb_path.read_text())
    out = next(o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])
               if o.get("name") == "stdout" and "generated answers" in "".join(o["text"]))
    out["text"] = ["generated answers, candidate vs baseline: {'gained': 64, 'lost': 0, 'net': 64}\n"]
    nb_path.write_text(json.dumps(nb))
    rewritten = {name: sha256_file(tampered / "metrics" / f"{name}.json")
                 for name in ("accuracy_by_family", "generated_answers")}
    rec = replace(rec, metrics={**rec.metrics, **rewritten}, executed_notebook_sha256=sha256_file(nb_path))
    original = run_record.read_run_record(RUNS / "demo-adaptive-dev-A")
    result = compare(rec, original, str(tampered), tampered, RUNS / "demo-adaptive-dev-A")
    assert not result["ok"]
    text = "\n".join(result["mismatches"])
    assert "accuracy_by_family.json: field .all.correct_candidate: committed 64, replayed 1" in text
    assert "generated_answers.json: field .gained: committed 64, replayed 1" in text
    assert "output text differs" in text
    same = compare(original, original, "x", RUNS / "demo-adaptive-dev-A", RUNS / "demo-adaptive-dev-A")
    assert same["ok"] and len(same["compared"]) > 20


def test_replay_masks_the_printed_speed_verdict_but_not_the_quality_verdict(tmp_path):
    """The speed screen's verdict is derived from two measured rates alone (its sidecar's `verdict` is left
    out already); printed by notebooks/21 it must be masked too, while the quality verdict, which the scores
    decide, still counts: a replay under load printed 'speed screen: pass' against a committed 'fail'."""
    from kit.evidence.replay_fields import compare_outputs

    def notebook(name, quality, speed):
        cell = {"cell_type": "code", "source": [], "metadata": {}, "execution_count": 1,
                "outputs": [{"output_type": "stream", "name": "stdout",
                             "text": [f"quality screen: {quality}\n", f"speed screen: {speed}\n"]}]}
        path = tmp_path / name
        path.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
        return path

    committed = notebook("committed.ipynb", "fail", "fail")
    assert compare_outputs(committed, notebook("speed.ipynb", "fail", "pass"))[1] == []
    found = compare_outputs(committed, notebook("quality.ipynb", "pass", "fail"))[1]
    assert len(found) == 1 and "quality screen: pass" in found[0]


def _commit(tmp_path, seed, lr=1e-3):
    """A commit of the seed's weights at the tiny contract's cohort-A endpoint (`lr` makes another one)."""
    import torch
    from support.engine_workers import engine_config

    from kit.distributed.group import Group
    from kit.engine.session import Session
    from kit.model.shard import even_layout
    from kit.store.start import start_from_seed
    from kit.train.optim import GroupConfig

    home = tmp_path / f"store-{lr}"
    opt = {"lr": lr, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.0}
    s = Session(Group(0, 1, torch.device("cpu")), str(home), even_layout(4, 1), start_from_seed(str(seed)),
                engine_config({"microbatch_size": 2, "max_grad_norm": 1.0}), {"default": GroupConfig(**opt)})
    root, _ = s.commit({"step": 8, "cohort": 0, "cohort_step": 8})
    return str(home), root


def test_the_prepared_folder_s_logs_cannot_admit_a_forged_selection_or_reopen_final_roles(prepared, tmp_path):
    """Both attacks of the issue on the prepared folder: a forged selection's sha256 appended to
    selections.jsonl by hand; final-access.jsonl moved away after a final scoring, then another selection."""
    from kit.adaptive.selection import SELECTIONS_LOG, FinalRolesRefused, open_final_roles, write_selection

    p = private_job(prepared["out"], tmp_path / "prepared")  # bound to this test's own ledger
    home, root = _commit(tmp_path, prepared["seed"])
    write_selection(p, {"A": {"home": home, "root": root}}, tmp_path / "sel.json")
    forged = json.loads((tmp_path / "sel.json").read_text())
    forged["development"] = {"dev_evaluations": {"hand-made.json": "0" * 64}}
    sha = write_canonical_json(tmp_path / "forged.json", forged)
    with open(p / SELECTIONS_LOG, "a") as f:
        f.write(json.dumps({"sha256": sha}) + "\n")
    with pytest.raises(FinalRolesRefused, match="not a selection record `kit adaptive select` wrote"):
        open_final_roles(p, tmp_path / "forged.json", [root], "final scoring")
    open_final_roles(p, tmp_path / "sel.json", [root], "final scoring")  # the real one opens
    (p / "final-access.jsonl").rename(tmp_path / "moved-away.jsonl")
    other_home, other = _commit(tmp_path, prepared["seed"], lr=2e-3)
    with pytest.raises(FinalRolesRefused, match="its chain holds 1 final access"):
        write_selection(p, {"A": {"home": other_home, "root": other}}, tmp_path / "sel2.json")


def test_a_gpu_host_s_numeric_mode_is_stated_in_full(monkeypatch):
    """What a GPU run record's numeric_profile.gpu holds (docs/formats/run-records.md, "Run records"), in both modes; a
    host without GPUs records none. The attention backend comes from the probe (a child process on CUDA)."""
    from kit.evidence.environment import gpu_numeric_mode

    h200 = [{"index": 0, "name": "NVIDIA H200", "memory_mib": 143771, "driver": "570.133.20"}]
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    for name in [k for k in os.environ if k.startswith("TORCHINDUCTOR_")]:  # an earlier compile in this worker
        monkeypatch.delenv(name)
    monkeypatch.setenv("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
    monkeypatch.setenv("KIT_GPU_DETERMINISTIC", "1")
    mode = gpu_numeric_mode(h200, probe=lambda: "FLASH_ATTENTION")
    assert mode == {"deterministic": True, "cublas_workspace_config": ":4096:8", "attention_backend": "FLASH_ATTENTION",
                    "compile": {"blocks": mode["compile"]["blocks"], "inductor_deterministic": True,
                                "inductor_environment": {"TORCHINDUCTOR_FX_GRAPH_CACHE": "1"}},
                    "driver": "570.133.20", "gpu": "NVIDIA H200", "gpu_count": 1}
    monkeypatch.delenv("KIT_GPU_DETERMINISTIC")
    unset = gpu_numeric_mode(h200, probe=lambda: "CUDNN_ATTENTION")
    assert unset["deterministic"] is False and unset["cublas_workspace_config"] is None
    assert gpu_numeric_mode([]) is None


def test_a_gpu_run_replays_in_its_recorded_mode():
    from kit.evidence.replay import gpu_mode_environment

    rec = run_record.read_run_record(RUNS / "medium-adaptive-A2-to-step64")
    assert rec.device["gpu_count"] and "gpu" not in rec.numeric_profile  # recorded before the mode was
    said = []
    assert gpu_mode_environment(rec, said.append) == {} and "states no GPU numeric mode" in said[0]
    # its mode as runs/GPU_MODES.json states it: flag off and cuBLAS's workspace unset, as the campaign ran it
    legacy = gpu_mode_environment(rec, said.append, RUNS / "medium-adaptive-A2-to-step64", RUNS.parent)
    assert legacy == {"KIT_GPU_DETERMINISTIC": "0", "CUBLAS_WORKSPACE_CONFIG": None} and "GPU_MODES.json" in said[1]
    for flag, value in ((True, "1"), (False, "0")):
        profile = rec.numeric_profile
        rec = replace(rec, numeric_profile=run_record.NumericProfile(name=profile.name, environment=profile.environment,
                                                                    gpu={"deterministic": flag}))
        assert gpu_mode_environment(rec) == {"KIT_GPU_DETERMINISTIC": value}


def test_a_current_gpu_run_whose_mode_is_stated_nowhere_fails_verification(tmp_path):
    """A GPU run record made before numeric_profile.gpu passes through its entry in runs/GPU_MODES.json; the
    same record without that entry fails, naming the run and the index; an edited entry is refused."""
    import shutil

    from kit.evidence.gpu_mode import MODES_RELATIVE
    from kit.evidence.verify import verify_evidence

    def mode_check(base):
        found = verify_evidence(base / "runs" / "medium-adaptive-select", base)
        return next(c for c in found["checks"] if c["check"] == "gpu_mode")

    here = mode_check(RUNS.parent)
    assert here["result"] == "pass" and "deterministic flag off" in here["detail"]
    base = tmp_path / "repo"
    shutil.copytree(RUNS / "medium-adaptive-select", base / "runs" / "medium-adaptive-select")
    missing = mode_check(base)
    assert missing["result"] == "fail" and "'runs/medium-adaptive-select'" in missing["detail"]
    modes = json.loads((RUNS.parent / MODES_RELATIVE).read_text())
    modes["runs"]["runs/medium-adaptive-select"]["deterministic"] = "no"
    (base / MODES_RELATIVE).write_text(json.dumps(modes))
    edited = mode_check(base)
    assert edited["result"] == "fail" and "field 'deterministic'" in edited["detail"]
