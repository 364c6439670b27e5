"""The notebooks of notebooks/ and the plan of `kit demo` that strings them together.

Static checks on every notebook (one `parameters` cell of literal assignments, no outputs), the demo's
plan checked against the notebooks' parameter cells, the demo's refusals, and two real executions through
kit.evidence.runner: 00_seed in inspect mode on a fixture seed, and 90_inspect_failed_arm on a fixture
run that failed in its training cell.
"""

from __future__ import annotations

import ast
import json
from dataclasses import replace
from pathlib import Path

import nbformat
import pytest
import torch
from support.models import write_hf_llama

from kit.demo import SCALES, PlaceholderRoots, demo_steps, run_demo
from kit.digest import canonical_json, sha256_file, write_canonical_json
from kit.evidence.parameters import PARAMETERS_TAG, check_parameters
from kit.evidence.run_record import GitState, RunError, RunRecord, read_run_record, write_run_record
from kit.evidence.runner import load_plan, run_notebook
from kit.record import to_json

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
EXPECTED = ["00_seed", "10_adaptive_prepare", "11_adaptive_arm", "12_adaptive_migration",
            "13_adaptive_evaluate", "14_adaptive_select", "15_continued_prepare", "16_adaptive_dev_curve", "19_study_prepare",
            "20_study_arm",
            "21_study_evaluate", "22_study_replicate_dev", "30_report", "90_inspect_failed_arm"]
SHA = "ab" * 32
FAILURE = "worker rank 1 failed at step 4 (update)"


def literal_assignment(stmt: ast.stmt) -> bool:
    """`NAME = literal` (no annotation, one target, a value ast.literal_eval accepts)."""
    target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
    if not isinstance(target, ast.Name):
        return False
    try:
        ast.literal_eval(stmt.value)
    except (ValueError, TypeError, SyntaxError):
        return False
    return True


def notebook_problems(path: Path) -> list[str]:
    """What keeps `path` from being a stored notebook of notebooks/ (empty when nothing does)."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    problems = []
    tagged = [i for i, c in enumerate(nb.cells) if PARAMETERS_TAG in c.metadata.get("tags", [])]
    if len(tagged) != 1:
        problems.append(f"{path.name}: {len(tagged)} cells tagged 'parameters', expected 1")
    for i in tagged:
        for stmt in ast.parse(nb.cells[i].source).body:
            if not literal_assignment(stmt):
                problems.append(f"{path.name}: parameters line {stmt.lineno} is not `NAME = literal`")
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count") is not None):
            problems.append(f"{path.name}: cell {i} has outputs or an execution count")
    return problems


# --- static -----------------------------------------------------------------------------------
def test_the_notebooks_are_all_there():
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == EXPECTED


@pytest.mark.parametrize("name", EXPECTED)
def test_notebook_has_one_literal_parameters_cell_and_no_outputs(name):
    path = NOTEBOOKS / f"{name}.ipynb"
    assert notebook_problems(path) == []
    assert nbformat.read(path, as_version=4).metadata.kernelspec.name == "python3"


def test_checker_names_every_problem(tmp_path):
    nb = nbformat.v4.new_notebook()
    first, second = nbformat.v4.new_code_cell("A = 1\nB = len('x')"), nbformat.v4.new_code_cell("C: int = 2")
    first.metadata["tags"] = second.metadata["tags"] = [PARAMETERS_TAG]
    done = nbformat.v4.new_code_cell("print(A)")
    done.outputs = [nbformat.v4.new_output("stream", name="stdout", text="1\n")]
    nb.cells = [first, second, done]
    nbformat.write(nb, tmp_path / "bad.ipynb")
    assert notebook_problems(tmp_path / "bad.ipynb") == [
        "bad.ipynb: 2 cells tagged 'parameters', expected 1",
        "bad.ipynb: parameters line 2 is not `NAME = literal`",
        "bad.ipynb: parameters line 1 is not `NAME = literal`",
        "bad.ipynb: cell 2 has outputs or an execution count",
    ]


# --- the demo's plan --------------------------------------------------------------------------
def test_demo_plan_fits_the_notebooks_and_mirrors_the_examples(tmp_path):
    steps = list(demo_steps(tmp_path / "out", tmp_path / "alpaca_5000.json", PlaceholderRoots()))
    ids = [s.run_id for s in steps]
    assert ids == ["demo-seed", "demo-adaptive-prepare", "demo-adaptive-A2-to-step4",
                   "demo-adaptive-A3-migrated", "demo-adaptive-A2-control", "demo-adaptive-migration",
                   "demo-adaptive-B-control", "demo-adaptive-B-growth", "demo-adaptive-growth-comparison",
                   "demo-adaptive-dev-A", "demo-adaptive-dev-B", "demo-adaptive-dev-G",
                   "demo-adaptive-select", "demo-adaptive-final-A", "demo-adaptive-final-B",
                   "demo-adaptive-final-G", "demo-adaptive-dev-curve", "demo-continued-prepare", "demo-continued-C", "demo-continued-dev-C",
                   "demo-continued-select", "demo-continued-final-C", "demo-study-prepare", "demo-study-single",
                   "demo-study-dense", "demo-study-powersgd", "demo-study-evaluate"]
    plan = [{"notebook": str(NOTEBOOKS / s.notebook), "run_id": s.run_id, "parameters": s.parameters}
            for s in steps]
    write_canonical_json(tmp_path / "plan.json", plan)
    assert len(load_plan(tmp_path / "plan.json")) == 27  # every name and type checked against its notebook
    by_id = {s.run_id: s.parameters for s in steps}
    assert by_id["demo-adaptive-A2-to-step4"]["UNTIL"] == 4  # the contract's migration step
    assert by_id["demo-adaptive-A3-migrated"]["WORKERS"] == 3
    assert by_id["demo-adaptive-migration"]["REQUIRE_EQUAL"] is True
    assert by_id["demo-adaptive-growth-comparison"]["REQUIRE_EQUAL"] is False
    assert by_id["demo-adaptive-B-growth"]["GROW"] is True and "GROW" not in by_id["demo-adaptive-B-control"]
    finals = [by_id[f"demo-adaptive-final-{n}"] for n in "ABG"]
    selected = by_id["demo-adaptive-select"]["CANDIDATES"].values()
    assert sorted(selected) == sorted(f["CANDIDATE"] for f in finals)
    assert {f["SELECTION"] for f in finals} == {by_id["demo-adaptive-select"]["OUT"]}
    assert [s.may_fail for s in steps].count(True) == 3  # the study arms: their outcome is the study's
    # continued learning starts from the selected A endpoint, by the A final evaluation, with no growth
    cont = by_id["demo-continued-prepare"]
    assert cont["START"] == by_id["demo-adaptive-final-A"]["CANDIDATE"]
    assert cont["START_EVALUATION"] == by_id["demo-adaptive-final-A"]["OUT"]
    c_arm = by_id["demo-continued-C"]
    assert c_arm["COHORT"] == "C" and "GROW" not in c_arm and c_arm["RESUME"] == c_arm["REFERENCE"]
    assert by_id["demo-continued-final-C"]["BASELINE"] == cont["START"]


def test_medium_plan_is_the_demo_on_the_medium_contracts_with_gpu_scoring(tmp_path):
    """`kit demo --scale medium`: the same steps on the medium contracts (the drafts stand in for the frozen
    ones, which exist only after the pilot), scored on CUDA, migration compared without the CPU's equality
    demand, no continued-learning part; --parts picks the experiments after the seed."""
    drafts = replace(SCALES["medium"], adaptive_contract="contracts/adaptive-shards.medium.draft.json",
                     study_contract="contracts/shared-gradient.medium.draft.json")
    steps = list(demo_steps(tmp_path / "out", tmp_path / "alpaca_5000.json", PlaceholderRoots(), drafts))
    ids = [s.run_id for s in steps]
    assert ids == ["medium-seed", "medium-adaptive-prepare", "medium-adaptive-A2-to-step64",
                   # cohort B's arms and the 2-worker control run at once (tests/test_run_at_once.py)
                   "medium-adaptive-A3-migrated", "medium-adaptive-B-control", "medium-adaptive-B-growth",
                   "medium-adaptive-A2-control", "medium-adaptive-migration", "medium-adaptive-growth-comparison",
                   "medium-adaptive-dev-A", "medium-adaptive-dev-B", "medium-adaptive-dev-G",
                   "medium-adaptive-select",
                   "medium-adaptive-final-A", "medium-adaptive-final-B", "medium-adaptive-final-G",
                   "medium-adaptive-dev-curve",
                   "medium-study-prepare", "medium-study-single", "medium-study-dense", "medium-study-powersgd",
                   "medium-study-evaluate"]
    plan = [{"notebook": str(NOTEBOOKS / s.notebook), "run_id": s.run_id, "parameters": s.parameters}
            for s in steps]
    write_canonical_json(tmp_path / "plan.json", plan)
    assert len(load_plan(tmp_path / "plan.json")) == 22  # every name and type checked against its notebook
    by_id = {s.run_id: s.parameters for s in steps}
    assert by_id["medium-seed"] == {"SEED_DIR": by_id["medium-adaptive-prepare"]["SEED_DIR"], "MODE": "build",
                                    "SIZE": "medium", "DEVICE": "cuda"}
    assert by_id["medium-adaptive-prepare"]["CONTRACT"].endswith("contracts/adaptive-shards.medium.draft.json")
    assert by_id["medium-adaptive-migration"]["REQUIRE_EQUAL"] is False
    evaluations = [p for i, p in by_id.items() if "-dev-" in i or "-final-" in i] + [by_id["medium-study-evaluate"]]
    assert len(evaluations) == 8 and {p["DEVICE"] for p in evaluations} == {"cuda"}
    study_only = [s.run_id for s in demo_steps(tmp_path / "out", tmp_path / "a.json", PlaceholderRoots(), drafts,
                                               ("study",))]
    assert study_only == ["medium-seed"] + ids[17:]
    # --seed-dir: the pilot's seed on the same host is inspected, not rebuilt, and every step reads it
    built = tmp_path / "pilot-seed"
    reused = list(demo_steps(tmp_path / "out", tmp_path / "a.json", PlaceholderRoots(), drafts, seed_dir=built))
    assert reused[0].parameters == {"SEED_DIR": str(built), "MODE": "inspect"}
    assert {s.parameters["SEED_DIR"] for s in reused if "SEED_DIR" in s.parameters} == {str(built)}
    # the tiny demo's parameters are unchanged by the scale's fields (its committed records stay reusable)
    tiny = {s.run_id: s.parameters for s in demo_steps(tmp_path / "out", tmp_path / "a.json", PlaceholderRoots())}
    assert tiny["demo-seed"] == {"SEED_DIR": str(tmp_path / "out" / "seed"), "MODE": "build"}
    assert not any("DEVICE" in p for p in tiny.values())


def test_medium_demo_refuses_an_unfrozen_contract_and_unknown_parts(tmp_path, monkeypatch):
    import kit.demo

    # before the pilot, the frozen contract does not exist: refused before anything is written
    unfrozen = replace(SCALES["medium"], adaptive_contract="contracts/adaptive-shards.unfrozen.json")
    monkeypatch.setitem(kit.demo.SCALES, "medium", unfrozen)
    with pytest.raises(FileNotFoundError, match=r"contracts/adaptive-shards\.unfrozen\.json: missing; .* frozen"):
        run_demo(tmp_path / "out", False, runs_dir=tmp_path / "runs", reports_dir=tmp_path / "reports",
                 scale="medium")
    with pytest.raises(ValueError, match=r"parts \['adaptive', 'sweep'\]"):
        run_demo(tmp_path / "out", False, runs_dir=tmp_path / "runs", parts=("adaptive", "sweep"))
    with pytest.raises(ValueError, match=r"scale 'huge'"):
        run_demo(tmp_path / "out", False, runs_dir=tmp_path / "runs", scale="huge")
    assert not (tmp_path / "out").exists() and not (tmp_path / "reports").exists()


def test_demo_refuses_a_missing_source_and_runs_without_their_data(tmp_path):
    kwargs = {"runs_dir": tmp_path / "runs", "reports_dir": tmp_path / "reports"}
    with pytest.raises(FileNotFoundError, match=r"absent\.json: the pinned public conversation source"):
        run_demo(tmp_path / "out", False, public_source=tmp_path / "absent.json", **kwargs)
    (tmp_path / "source.json").write_text("[]")  # another file: refused by its sha256 before the seed build
    with pytest.raises(ValueError, match=r"source\.json: sha256 [0-9a-f]{64}, but contracts/adaptive-shards\.tiny\.json "
                                         r"pins the public source at fc1add24"):
        run_demo(tmp_path / "out", False, public_source=tmp_path / "source.json", **kwargs)
    (tmp_path / "runs" / "demo-seed").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"earlier demo \(demo-seed, \.\.\.\) but their working directory"):
        run_demo(tmp_path / "out", False, public_source=REPO / "data" / "alpaca_5000.json", **kwargs)
    assert not (tmp_path / "out").exists() and not (tmp_path / "reports").exists()


def test_a_misspelt_parameter_is_refused_before_anything_runs():
    with pytest.raises(ValueError, match="unknown parameter"):
        check_parameters(NOTEBOOKS / "11_adaptive_arm.ipynb", {"WORKER": 3})


# --- real executions --------------------------------------------------------------------------
def fixture_seed(out: Path) -> Path:
    """A random Llama with a real tokenizer: the shape of a seed, nothing the kit trained."""
    from kit.data.chat import load_tokenizer
    from kit.data.tasks import generate_set
    from kit.data.tokenizer_build import build_tokenizer

    texts = [e.prompt + " " + e.answer for e in generate_set(40, 1, "fixture")] + ["the sky is blue"] * 5
    build_tokenizer(texts, 300, out)
    write_hf_llama(out, vocab=len(load_tokenizer(out)), hidden=32, layers=2)
    return out


def executed_text(run_dir: Path) -> str:
    record = read_run_record(run_dir)
    nb = nbformat.read(run_dir / record.executed_notebook, as_version=4)
    return "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def test_seed_notebook_inspects_a_fixture_seed(tmp_path):
    from kit.data.tasks import FAMILIES
    from kit.inventory import parameter_digest

    seed = fixture_seed(tmp_path / "seed")
    record = run_notebook(NOTEBOOKS / "00_seed.ipynb", {"SEED_DIR": str(seed), "SAMPLE_MAX_NEW_TOKENS": 4},
                          "seed-inspect", tmp_path / "runs")
    run_dir = tmp_path / "runs" / "seed-inspect"
    assert (record.status, record.error) == ("completed", None)
    digest = parameter_digest(seed)
    assert record.input_digests == {"seed.parameter_digest": digest}
    assert sorted(record.metrics) == ["seed_samples"]  # no seed_build.json: a seed the kit did not build
    samples = json.loads((run_dir / "metrics" / "seed_samples.json").read_text())
    assert [s["family"] for s in samples] == list(FAMILIES)
    assert all(s["expected"] and isinstance(s["correct"], bool) for s in samples)
    text = executed_text(run_dir)
    assert f"parameter digest: {digest}" in text and "2 layers, hidden 32" in text


def fixture_commit(home: Path) -> str:
    """One complete commit in `home` (two parameters, one worker), as a worker and the driver write it."""
    from kit.store.commits import save_param_states, write_commit
    from kit.store.objects import ObjectStore

    store = ObjectStore(home)
    g = torch.Generator().manual_seed(0)
    shapes = {"model.embed_tokens.weight": (4, 4), "model.norm.weight": (4,)}
    states = {name: {"group": "default", "age": 2, "param": torch.randn(shape, generator=g),
                     "exp_avg": torch.randn(shape, generator=g), "exp_avg_sq": torch.rand(shape, generator=g)}
              for name, shape in shapes.items()}
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 4, "hidden_size": 4,
              "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 1,
              "num_key_value_heads": 1, "max_position_embeddings": 16, "tie_word_embeddings": True}
    config_object = store.put_bytes(canonical_json(config))
    layout = {"blocks": [[0, 1]], "embedding_owner": 0, "model_config": config_object}
    learned = {"cursor": {"step": 2}, "params": save_param_states(store, states)}
    return write_commit(home, learned, layout, None, [store.put_bytes(b"rng of rank 0")])


def fixture_failed_run(runs: Path, home: Path) -> Path:
    """runs/arm-failed: 11_adaptive_arm.ipynb failed in its training cell after 3 logged updates."""
    attempt = home / "attempts" / "20260101T000000-00000000"
    attempt.mkdir(parents=True)
    write_canonical_json(attempt / "attempt.json", {"attempt": attempt.name, "status": "failed",
                                                    "commits": [], "error": f"WorkerFailure: {FAILURE}"})
    rows = [{"cohort": "A", "cohort_step": k, "step": k, "objective": 3.0 - 0.5 * k, "grad_norm": 1.0 + k,
             "ce_per_token": 2.0 - 0.1 * k, "kl_per_token": 0.01 * k, "clip_factor": 1.0, "seconds": 0.5,
             "ids": ["x"]} for k in (1, 2, 3)]
    (attempt / "updates.jsonl").write_bytes(b"".join(canonical_json(r) + b"\n" for r in rows))
    source = nbformat.read(NOTEBOOKS / "11_adaptive_arm.ipynb", as_version=4)
    train_cell = next(i for i, c in enumerate(source.cells) if c.source.startswith("commits = train_cohort("))
    executed = nbformat.read(NOTEBOOKS / "11_adaptive_arm.ipynb", as_version=4)
    injected = nbformat.v4.new_code_cell(f"HOME = {str(home)!r}\n")
    injected.metadata["tags"] = ["injected-parameters"]
    executed.cells.insert(2, injected)  # after the parameters cell, where papermill puts it
    executed.cells[train_cell + 1].outputs = [nbformat.v4.new_output(
        "error", ename="WorkerFailure", evalue=FAILURE, traceback=["WorkerFailure: ..."])]
    run_dir = runs / "arm-failed"
    run_dir.mkdir(parents=True)
    nbformat.write(executed, run_dir / "11_adaptive_arm.ipynb")
    write_run_record(run_dir, RunRecord(
        run_id="arm-failed", notebook="notebooks/11_adaptive_arm.ipynb", notebook_sha256=SHA,
        executed_notebook="11_adaptive_arm.ipynb",
        executed_notebook_sha256=sha256_file(run_dir / "11_adaptive_arm.ipynb"),
        parameters={"HOME": str(home), "COHORT": "A"}, status="failed", reason=f"WorkerFailure: {FAILURE}",
        error=RunError(cell_index=train_cell, execution_count=3, ename="WorkerFailure", evalue=FAILURE),
        started_at="2026-01-01T00:00:00.000Z", ended_at="2026-01-01T00:01:00.000Z", duration_s=60.0,
        git=GitState(commit=None, dirty=None), versions={}, device={"cpu": "fixture", "gpu_count": 0},
        contract_digest=SHA, input_digests={"prepared.json": "cd" * 32}))
    return run_dir


def test_inspect_failed_arm_notebook_on_a_fixture_run(tmp_path):
    home = tmp_path / "home"
    head = fixture_commit(home)
    fixture_failed_run(tmp_path / "runs", home)
    params = {"RUN_ID": "arm-failed", "RUNS_DIR": str(tmp_path / "runs")}
    record = run_notebook(NOTEBOOKS / "90_inspect_failed_arm.ipynb", params, "inspect", tmp_path / "out")
    run_dir = tmp_path / "out" / "inspect"
    assert (record.status, record.error) == ("completed", None)
    assert (record.contract_digest, record.input_digests) == (SHA, {"prepared.json": "cd" * 32})
    assert to_json(record.checkpoint_roots.used) == [{"root": head, "home": "home"}]  # relative to the runs base
    curves = json.loads((run_dir / "metrics" / "loss_curves.json").read_text())
    assert [(r["update"], r["objective"], r["grad_norm"]) for r in curves] == [(1, 2.5, 2.0), (2, 2.0, 3.0),
                                                                               (3, 1.5, 4.0)]
    last = json.loads((run_dir / "metrics" / "last_commit.json").read_text())
    assert (last["full_root"], last["parent"], last["workers"]) == (head, None, 1)
    text = executed_text(run_dir)
    assert f"WorkerFailure: {FAILURE}" in text
    assert "commits = train_cohort(request)" in text  # the source of the cell where it happened
