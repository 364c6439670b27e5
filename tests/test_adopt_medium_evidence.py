"""campaigns/adopt_medium_evidence.py: a returned medium campaign replaces the top-level medium runs, the old ones
move (unchanged) to the superseded folder of their seed, the ledger only grows; refusals leave everything as it was."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from campaigns import adopt_medium_evidence as adopt_mod
from campaigns.adopt_medium_evidence import AdoptionRefused, adopt
from kit.evidence.verify import superseded_note

OLD_SEED, NEW_SEED = "8" * 64, "d" * 64


def _run(runs: Path, run_id: str, seed: str | None = None, status: str = "completed") -> None:
    d = runs / run_id
    d.mkdir(parents=True)
    record = {"run_id": run_id, "status": status, "input_digests": {"seed.parameter_digest": seed} if seed else {}}
    (d / "run.json").write_text(json.dumps(record))


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def repo(tmp_path):
    runs, ledger = tmp_path / "runs", tmp_path / "ledger" / "exposed.jsonl"
    _run(runs, "medium-seed", OLD_SEED)
    for r in ("medium-adaptive-prepare", "medium-study-single"):
        _run(runs, r)
    _run(runs, "medium-pilot-2026-12-02")  # a pilot record: not a trial run, stays
    ledger.parent.mkdir(parents=True)
    ledger.write_text('{"kind": "final.task", "digest": "a"}\n')
    pack = tmp_path / "pack"
    _run(pack / "runs", "medium-seed", NEW_SEED)
    for r in ("medium-adaptive-prepare", "medium-adaptive-final-A", "medium-study-single"):
        _run(pack / "runs", r, status="failed" if r.endswith("final-A") else "completed")
    (pack / "work").mkdir()
    (pack / "work" / "medium-adaptive-plan.json").write_text(json.dumps(
        [{"run_id": r} for r in ("medium-seed", "medium-adaptive-prepare", "medium-adaptive-final-A")]))
    (pack / "work" / "medium-study-plan.json").write_text(json.dumps(
        [{"run_id": r} for r in ("medium-seed", "medium-study-single")]))
    (pack / "ledger").mkdir()
    (pack / "ledger" / "exposed.jsonl").write_text(ledger.read_text() + '{"kind": "final.task", "digest": "b"}\n')
    (pack / "campaign.log").write_text("trials started\n")
    return tmp_path, runs, ledger, pack


def test_adoption_moves_the_old_runs_unchanged_and_copies_the_new(repo):
    _, runs, ledger, pack = repo
    before = _tree(runs)
    out = adopt(pack, runs / "medium-campaign-X", runs, ledger, log=lambda m: None)
    superseded = runs / "medium-superseded-seed-88888888"
    assert out["superseded"] == ["medium-adaptive-prepare", "medium-seed", "medium-study-single"]
    assert out["ledger_lines_added"] == 1 and ledger.read_bytes() == (pack / "ledger" / "exposed.jsonl").read_bytes()
    for name in out["superseded"]:  # byte for byte what was committed
        assert _tree(superseded / name) == {k.split("/", 1)[1]: v for k, v in before.items() if k.startswith(name + "/")}
    for name in ("medium-seed", "medium-adaptive-prepare", "medium-adaptive-final-A", "medium-study-single"):
        assert _tree(runs / name) == _tree(pack / "runs" / name)
    assert (runs / "medium-pilot-2026-12-02" / "run.json").is_file()  # not a trial run: untouched
    assert (runs / "medium-campaign-X" / "campaign.log").read_text() == "trials started\n"
    assert (runs / "medium-campaign-X" / "work" / "medium-study-plan.json").is_file()
    # the folder's superseded.json names each moved run's replacement, as kit verify-evidence reads it
    note = superseded_note(superseded / "medium-seed")
    assert note is not None and note.format == "kit-superseded/1" and note.unreachable_commits == ()
    assert note.replaced_by == {n: n for n in out["superseded"]} and "88888888..." in note.reason


def test_an_existing_superseded_note_keeps_its_fields_and_gains_the_moved_runs(repo):
    _, runs, ledger, pack = repo
    superseded = runs / "medium-superseded-seed-88888888"
    superseded.mkdir()
    kept = {"format": "kit-superseded/1", "reason": "written before", "unreachable_commits": ["f" * 40],
            "replaced_by": {"medium-adaptive-final-B": "medium-adaptive-final-B"}}
    (superseded / "superseded.json").write_text(json.dumps(kept))
    adopt(pack, runs / "medium-campaign-X", runs, ledger, log=lambda m: None)
    note = json.loads((superseded / "superseded.json").read_text())
    assert {k: note[k] for k in ("format", "reason", "unreachable_commits")} == {
        k: kept[k] for k in ("format", "reason", "unreachable_commits")}
    assert note["replaced_by"] == {"medium-adaptive-final-B": "medium-adaptive-final-B", "medium-adaptive-prepare":
                                   "medium-adaptive-prepare", "medium-seed": "medium-seed",
                                   "medium-study-single": "medium-study-single"}


@pytest.mark.parametrize("spoil, match", [
    (lambda pack, ledger: (pack / "runs" / "medium-study-single" / "run.json").unlink(),
     r"no run record for medium-study-single"),
    (lambda pack, ledger: (pack / "ledger" / "exposed.jsonl").write_text('{"kind": "final.task", "digest": "z"}\n'),
     r"does not extend .*exposed.jsonl"),
    (lambda pack, ledger: (pack / "ledger" / "exposed.jsonl").write_text(ledger.read_text() + "not json\n"),
     r"line 2: not a JSON object"),
    (lambda pack, ledger: (pack / "runs" / "medium-seed" / "run.json").write_text(
        json.dumps({"input_digests": {"seed.parameter_digest": OLD_SEED}})), r"the same seed 888888888888"),
    (lambda pack, ledger: _run(pack / "runs", "medium-study-extra"), r"medium-study-extra not in the plans"),
    (lambda pack, ledger: _run(ledger.parents[1] / "runs" / "medium-superseded-seed-88888888", "medium-seed"),
     r"already holds medium-seed"),
])
def test_refusals_change_nothing(repo, spoil, match):
    root, runs, ledger, pack = repo
    spoil(pack, ledger)
    before = _tree(root)
    with pytest.raises(AdoptionRefused, match=match):
        adopt(pack, runs / "medium-campaign-X", runs, ledger, log=lambda m: None)
    assert _tree(root) == before


def test_a_failure_midway_undoes_every_step(repo, monkeypatch):
    root, runs, ledger, pack = repo
    before = _tree(root)

    def broken(src, dst, *a, **k):
        if Path(dst) == ledger:
            raise OSError(28, "No space left on device")
        return real(src, dst, *a, **k)
    real = adopt_mod.shutil.copyfile
    monkeypatch.setattr(adopt_mod.shutil, "copyfile", broken)
    with pytest.raises(OSError, match="No space left"):
        adopt(pack, runs / "medium-campaign-X", runs, ledger, log=lambda m: None)
    assert _tree(root) == before
    assert not (runs / "medium-campaign-X").exists() and not (runs / "medium-superseded-seed-88888888").exists()


def test_the_command_refuses_with_the_reason(repo, capsys):
    _, runs, ledger, pack = repo
    (pack / "work" / "medium-study-plan.json").write_text("[{}]")
    rc = adopt_mod.main([str(pack), "--campaign-folder", str(runs / "c"), "--runs", str(runs), "--ledger", str(ledger)])
    assert rc == 2 and "medium-study-plan.json: step 0: field run_id missing" in capsys.readouterr().err
