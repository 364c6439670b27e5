"""`kit verify-evidence --replay` against the committed demo evidence (runs/): the arm
demo-adaptive-A2-to-step4 is re-executed with the seed build and the prepare it depends on, on
whatever x86 CPU runs the suite, and must give the committed digests and roots; a tampered root fails."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from kit.digest import load_json_strict, write_canonical_json
from kit.evidence import run_record
from kit.evidence.replay import ReplayError, replay_runs

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "runs"
ARM = "demo-adaptive-A2-to-step4"
CHAIN = ("demo-seed", "demo-adaptive-prepare", ARM)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("replay")


@pytest.fixture(scope="module")
def replayed(work):
    return replay_runs([RUNS / ARM], work, log=lambda m: None)


def test_committed_seed_and_arm_replay_to_the_committed_roots(replayed, work):
    (arm,) = replayed
    assert arm["ok"], arm["mismatches"]
    assert "checkpoint_roots.produced" in arm["compared"] and "input_digests['seed.parameter_digest']" in arm["compared"]
    committed = run_record.read_run_record(RUNS / ARM)
    assert committed.checkpoint_roots.produced, "the committed arm produced roots to compare"
    again = run_record.read_run_record(work / "runs" / ARM)
    assert [e.root for e in again.checkpoint_roots.produced] == \
        [e.root for e in committed.checkpoint_roots.produced]
    seed = run_record.read_run_record(work / "runs" / "demo-seed")  # the dependency was replayed too
    assert seed.input_digests["seed.parameter_digest"] == \
        run_record.read_run_record(RUNS / "demo-seed").input_digests["seed.parameter_digest"]


def test_a_tampered_root_fails_the_replay_naming_the_field(replayed, work, tmp_path):
    runs = tmp_path / "runs"
    for name in CHAIN:
        shutil.copytree(RUNS / name, runs / name)
    path = runs / ARM / run_record.RUN_RECORD_NAME
    record = load_json_strict(path)
    real = record["checkpoint_roots"]["produced"][0]["root"]
    forged = ("0" if real[0] != "0" else "1") + real[1:]
    record["checkpoint_roots"]["produced"][0]["root"] = forged
    write_canonical_json(path, record)
    (arm,) = replay_runs([runs / ARM], work, log=lambda m: None)  # same work dir: compared, not re-executed
    assert not arm["ok"]
    assert any("field checkpoint_roots.produced" in m and forged in m and real in m for m in arm["mismatches"])


def test_replay_refuses_a_record_of_another_numeric_profile(tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(RUNS / "demo-seed", runs / "demo-seed")
    path = runs / "demo-seed" / run_record.RUN_RECORD_NAME
    record = load_json_strict(path)
    record["numeric_profile"]["name"] = "native"
    write_canonical_json(path, record)
    with pytest.raises(ReplayError, match=r"demo-seed: field numeric_profile.name = 'native'"):
        replay_runs([runs / "demo-seed"], tmp_path / "work", log=lambda m: None)


def test_the_study_preparation_replays_on_the_ledger_it_read(replayed, work):
    """Its exposed retention probes are drawn from the exposure ledger: the replay gives it back the committed
    ledger's lines it recorded reading (input exposure_ledger), where an empty ledger refused it."""
    (prep,) = replay_runs([RUNS / "demo-study-prepare"], work, log=lambda m: None)  # the seed: compared again
    assert prep["ok"], prep["mismatches"]
    assert "input_digests['exposure_ledger']" in prep["compared"]
    committed = run_record.read_run_record(RUNS / "demo-study-prepare").input_digests["exposure_ledger"]
    assert hashlib.sha256((work / "ledger" / "exposed.jsonl").read_bytes()).hexdigest() == committed
    assert (work / "ledger" / "exposed.jsonl").stat().st_size > 0  # the adaptive finals' exposures


def test_a_runs_folder_replays_its_cpu_runs_and_lists_the_others_as_not_replayed(replayed, work, tmp_path):
    """`kit verify-evidence --replay runs`: a runs directory also holds benchmark records and GPU runs; they
    are listed with the reason instead of stopping the replay, while a run named on its own is refused."""
    runs = tmp_path / "runs"
    for name in (*CHAIN, "medium-seed", "bench-update-2026-11-29"):
        shutil.copytree(RUNS / name, runs / name)
    results = {r["run_id"]: r for r in replay_runs(sorted(runs.iterdir()), work, log=lambda m: None,
                                                   whole_folder=True)}
    assert [results[name]["ok"] for name in CHAIN] == [True, True, True]  # compared again, not re-executed
    assert results["medium-seed"]["ok"] is None
    assert results["medium-seed"]["not_replayed"].endswith("this host has 0 GPU(s); GPU roots repeat only on the same "
                                                           "layout and hardware, in the recorded mode (docs/engine.md "
                                                           "'Determinism')")
    assert results["bench-update-2026-11-29"]["ok"] is None
    assert results["bench-update-2026-11-29"]["not_replayed"].startswith("no kit run record (a benchmark record")
    with pytest.raises(ReplayError, match="medium-seed: ran on a GPU host"):
        replay_runs([runs / "medium-seed"], work, log=lambda m: None)


def test_every_data_location_is_the_replay_s_own_and_names_its_producer(tmp_path):
    """The notebooks run in WORK/root, where `demo-out` (a data root) is the replay's WORK/data/demo-out and
    everything else the repository: so not only the folder-named parameters but an evaluation's `seed:PATH`
    and `PATH:ROOT` references, OUT, SELECTION, the selection's list of development evaluations and the
    continued preparation's START* inputs name the replay's data, unchanged. (Before, only the folder-named
    ones were moved: the rest read whatever demo-out/ lay in the caller's directory, or failed without one;
    and a moved `baseline` string changed the bytes that the selection digests.) Each location is traced
    to the run that made it."""
    from kit.evidence.replay import Replayer

    replayer = Replayer(RUNS, tmp_path, log=lambda m: None)
    assert {"demo-out", "build"} <= replayer.data_roots
    root = replayer.root()
    assert (root / "demo-out").resolve() == (tmp_path / "data" / "demo-out").resolve()
    assert (root / "contracts").resolve() == (REPO / "contracts").resolve()
    assert not (root / ".git").exists()
    final = replayer.records["demo-adaptive-final-A"][1]
    assert replayer._locations(final) == {
        "BASELINE": "demo-out/seed", "CANDIDATE": "demo-out/adaptive/A3", "OUT": "demo-out/adaptive/final-A.json",
        "PREPARED_DIR": "demo-out/adaptive/prepared", "SELECTION": "demo-out/adaptive/selection.json"}
    continued = replayer.records["demo-continued-prepare"][1]
    producers = {name: replayer._producer(location, continued).run_id
                 for name, location in replayer._locations(continued).items() if name.startswith("START")}
    assert producers == {"START": "demo-adaptive-A3-migrated", "START_EVALUATION": "demo-adaptive-final-A",
                         "START_PREPARED": "demo-adaptive-prepare"}
    assert replayer._producer("demo-out/adaptive/final-A.json", final) is None  # its own output: no producer
    select = replayer.records["demo-adaptive-select"][1]  # a list parameter: each entry is traced
    assert replayer._producer(replayer._locations(select)["DEV_EVALUATIONS[0]"], select).run_id == "demo-adaptive-dev-A"
    curve = replayer.records["demo-adaptive-dev-curve"][1]  # a dict of lists
    assert replayer._locations(curve)["LINEAGES['A2-control'][0]"] == "demo-out/seed"
    seed = replayer.records["demo-seed"][1]
    assert "MODE" not in replayer._locations(seed)  # 'build': a word that is also a data root's name


def test_the_runs_that_made_the_roots_a_run_used_are_its_dependencies_too(tmp_path):
    """A folder location names only its first writer (STUDY_DIR: the study preparation), so the study
    evaluation replayed alone refused: 'arm single is not run'. The roots it used (checkpoint_roots.used) name
    each arm exactly; the migration comparison's two trajectories the same way."""
    from kit.evidence.replay import Replayer

    replayer = Replayer(RUNS, tmp_path, log=lambda m: None)

    def makers(run_id):
        return [r.run_id for r in replayer._root_producers(replayer.records[run_id][1])]

    assert makers("demo-study-evaluate") == ["demo-study-single", "demo-study-dense", "demo-study-powersgd"]
    assert sorted(makers("demo-adaptive-migration")) == ["demo-adaptive-A2-control", "demo-adaptive-A3-migrated"]
    assert makers("demo-study-single") == [] and makers("demo-seed") == []


def test_an_archived_run_is_named_by_its_old_path_and_replays(replayed, work):
    """A run kept in an archived folder (runs/archive/) is named as before and replays like any run: the
    superseded demo set of 2026-12-03 built the same seed, which this module's replay re-derived into `work`."""
    from kit.evidence.archive import origin, resolve

    archived = resolve(RUNS / "demo-superseded-2026-12-03-path-dependent-job-digest" / "demo-seed")
    assert origin(archived) is not None and (archived / run_record.RUN_RECORD_NAME).is_file()
    (seed,) = replay_runs([archived], work, log=lambda m: None)
    assert seed["ok"], seed["mismatches"]
    assert "input_digests['seed.parameter_digest']" in seed["compared"]
