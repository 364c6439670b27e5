"""`kit demo`, the embedded default: both experiments' tiny contracts end to end, through the notebooks.

Every step is a notebook of `notebooks/` executed by kit.evidence.runner into `runs/demo-<step>/`, so
the demo leaves exactly the evidence a batch on a GPU host leaves, and the report is rendered from it
at the end. The decision to know: a step's parameters name earlier steps' checkpoint roots read from
their run records, and a rerun reuses a completed run with the same parameters but refuses one with
other parameters: evidence is never overwritten.
Steps, outputs and progress: the notes below; files: docs/formats/demo-plan.md, "Demo plan".

Notes: what the plan guarantees, and why steps run at once only as they do.

The sequence mirrors examples/adaptive_tiny.sh and examples/gradient_study_tiny.sh; OUT/demo-plan.json, literal
roots included, is a valid `kit batch` plan. A study arm's own outcome (e.g. `unavailable`) does not stop the demo;
a failed step does, and the report is still rendered and lists it.
Steps at once (medium scale only): a step marked `concurrent_with_next` starts with the next, and no root of a chain
is read before the whole chain ends. The seed's inspection runs beside the first preparation only for a seed built
before; cohort A's 2-worker control never runs beside the migrated run, which copies its source home's update logs
when it starts (where the control writes its own). Each step of a chain is its own `python -m kit batch` process,
since run_notebook sets the kernel's environment in os.environ, which threads would share; a step's outcome is the
record its own process wrote, never one an earlier attempt left. Evaluations and finals stay one at a time (the
score cache; ledger lines in the plan's order); the tiny demo runs in the order its committed evidence was made.
Kernels run with KIT_PROGRESS=0, so the executed notebooks kept as evidence hold no progress bar.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from kit.adaptive.schema import load_adaptive_contract
from kit.digest import sha256_file, write_canonical_json
from kit.evidence.ledger import LEDGER_ENV, LEDGER_RELATIVE
from kit.evidence.report.page import render_report
from kit.evidence.run_record import RunRecord, read_run_record
from kit.evidence.runner import PlanArm, run_notebook, run_notebooks_at_once
from kit.evidence.runtime import KERNEL_LOG_NAME, ensure_runtime, quiet_kernels, repository_root

ADAPTIVE_CONTRACT = "contracts/adaptive-shards.tiny.json"
CONTINUED_CONTRACT = "contracts/continued-learning.tiny.json"
STUDY_CONTRACT = "contracts/shared-gradient.tiny.json"
STUDY_ARMS = ("single", "dense", "powersgd")
PUBLIC_SOURCE = Path("data") / "alpaca_5000.json"  # in the repository (data/SOURCE.md), so a bare clone runs
PARTS = ("adaptive", "study")


@dataclass(frozen=True)
class Scale:
    """What differs between the embedded tiny demo and the medium campaign on a two-GPU host; the steps,
    notebooks and evidence are the same. `name` prefixes every run id and names the report folder."""
    name: str
    adaptive_contract: str
    study_contract: str
    continued_contract: str | None  # the continued-learning contract exists at tiny scale only
    seed: dict  # 00_seed.ipynb's parameters besides SEED_DIR
    device: str  # where evaluation scores ("cpu": the tiny demo's bit-pinned records)
    title: str
    # independent adaptive steps run at the same time (Step.concurrent_with_next): on a GPU host the arms
    # leave the device half idle, and one block of device time must hold the whole trial; the tiny demo
    # keeps one step at a time on the 2 cores CI has
    concurrent: bool = False

    def plan_file(self, parts=None) -> str:
        return f"{self._files_tag(parts)}-plan.json"

    def timing_file(self, parts=None) -> str:
        return f"{self._files_tag(parts)}-timing.json"

    def _files_tag(self, parts) -> str:
        """The scale's name, and the parts when not all of them run: two demos of one scale side by side
        (`--parts adaptive` and `--parts study` on one host) then keep a plan and a timing file each."""
        if parts is None or set(parts) == set(PARTS):
            return self.name
        return "-".join([self.name] + [p for p in PARTS if p in parts])


SCALES = {
    "tiny": Scale("demo", ADAPTIVE_CONTRACT, STUDY_CONTRACT, CONTINUED_CONTRACT, {"MODE": "build"}, "cpu",
                  "kit demo: both tiny contracts end to end"),
    # shared/DESIGN.md, Scales: the trial's counts on the ~126M small seed, on one host with two GPUs
    "medium": Scale("medium", "contracts/adaptive-shards.medium.json", "contracts/shared-gradient.medium.json", None,
                    {"MODE": "build", "SIZE": "medium", "DEVICE": "cuda"}, "cuda",
                    "Medium scale: both trials' real counts on the small seed, two H200s", concurrent=True),
}
TINY = SCALES["tiny"]


class DemoStopped(RuntimeError):
    """A step the rest of the demo depends on did not complete."""


@dataclass(frozen=True)
class Step:
    run_id: str
    notebook: str  # file name in notebooks/
    parameters: dict
    may_fail: bool = False  # its outcome is a result of the experiment (a study arm), not a broken demo
    # True: the next step needs nothing this one produces, so both start together; the demo waits for
    # every step of such a chain before it reads any root of theirs (run_demo)
    concurrent_with_next: bool = False


def shown_path(path: str | os.PathLike) -> str:
    """`path` relative to the current directory when inside it (records stay portable), else absolute.

    Kernels start in the current directory (papermill's default), so a relative path means the same there."""
    path = Path(os.path.abspath(path))
    try:
        return path.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return str(path)


class RecordedRoots:
    """The endpoint roots earlier steps produced, read from their run records in `runs_dir`."""

    def __init__(self, runs_dir: Path):
        self.runs_dir = Path(runs_dir)

    def endpoint(self, run_id: str) -> str:
        record = read_run_record(self.runs_dir / run_id)
        produced = record.checkpoint_roots.produced
        if record.status != "completed" or not produced:
            raise DemoStopped(f"{self.runs_dir / run_id}: status {record.status}, no endpoint root to "
                              "continue from")
        return produced[-1].root

    def produced(self, run_id: str) -> list[str]:
        """Every root the run committed, in training order (its endpoint last)."""
        self.endpoint(run_id)  # refuses an unfinished run as endpoint() does
        return [p.root for p in read_run_record(self.runs_dir / run_id).checkpoint_roots.produced]


class PlaceholderRoots:
    """Stands in for roots not produced yet: counts the steps and checks their parameters before any runs."""

    def endpoint(self, run_id: str) -> str:
        return "0" * 64

    def produced(self, run_id: str) -> list[str]:
        return ["0" * 64]


@dataclass(frozen=True)
class _AdaptiveLayout:
    """Where the adaptive steps of one demo keep their data, and their run ids' parts."""
    run: str  # the scale's name: every run id starts with it
    seed: str
    ad: Path  # OUT/adaptive
    prepared: str
    two: int  # the migration's worker counts and step
    three: int
    at: int
    a_from: str  # the homes: cohort A on two workers, on three, cohort B's control, cohort B's growth
    a_to: str
    b_home: str
    g_home: str
    b_workers: int
    device: dict  # the evaluations' DEVICE parameter ({} on CPU: the tiny records keep their parameters)

    def arm(self, **parameters) -> dict:
        return {"PREPARED_DIR": self.prepared, "SEED_DIR": self.seed, **parameters}

    @property
    def a_mid(self) -> str:  # cohort A's run on two workers up to the migration step
        return f"{self.run}-adaptive-A{self.two}-to-step{self.at}"

    @property
    def a_migrated(self) -> str:  # its continuation on three workers
        return f"{self.run}-adaptive-A{self.three}-migrated"

    @property
    def a_control(self) -> str:  # its uninterrupted continuation on two workers
        return f"{self.run}-adaptive-A{self.two}-control"


def _adaptive_steps(out: Path, seed: str, public_source: Path, roots, scale: Scale = TINY) -> Iterator[Step]:
    """examples/adaptive_tiny.sh, step by step."""
    contract_path = repository_root() / scale.adaptive_contract
    terms = load_adaptive_contract(contract_path).terms
    two, three = terms.migration.from_workers, terms.migration.to_workers
    ad = out / "adaptive"
    a_from, a_to, b_home, g_home = (shown_path(ad / home) for home in (f"A{two}", f"A{three}", "B", "G"))
    lay = _AdaptiveLayout(scale.name, seed, ad, shown_path(ad / "prepared"), two, three, terms.migration.at_step,
                          a_from, a_to, b_home, g_home,
                          terms.cohorts.B.workers, {} if scale.device == "cpu" else {"DEVICE": scale.device})
    yield Step(f"{lay.run}-adaptive-prepare", "10_adaptive_prepare.ipynb",
               {"CONTRACT": shown_path(contract_path), "SEED_DIR": seed,
                "PUBLIC_SOURCE": shown_path(public_source), "OUT_DIR": lay.prepared})
    a_end, b_end, g_end = yield from _cohort_steps(lay, roots, scale)
    yield from _evaluation_steps(lay, a_end, b_end, g_end, roots)
    if scale.continued_contract:
        yield from _continued_steps(out, seed, public_source, lay.prepared, lay.a_to, a_end,
                                    shown_path(ad / "final-A.json"), roots, scale.continued_contract)


def _cohort_steps(lay: _AdaptiveLayout, roots, scale: Scale):
    """Cohort A to the migration step, its migrated and 2-worker continuations and their comparison, then
    cohort B's fixed-depth control and growth and theirs; returns the endpoints (A migrated, B, growth)."""
    run, mid, migrated, control = lay.run, lay.a_mid, lay.a_migrated, lay.a_control
    yield Step(mid, "11_adaptive_arm.ipynb", lay.arm(HOME=lay.a_from, COHORT="A", WORKERS=lay.two, UNTIL=lay.at))
    a_mid = roots.endpoint(mid)
    migrated_step = Step(migrated, "11_adaptive_arm.ipynb",
                         lay.arm(HOME=lay.a_to, COHORT="A", WORKERS=lay.three, RESUME=a_mid, SOURCE_HOME=lay.a_from))
    control_step = Step(control, "11_adaptive_arm.ipynb",
                        lay.arm(HOME=lay.a_from, COHORT="A", WORKERS=lay.two, RESUME=a_mid))

    def migration_step(a_end: str, a_ctl: str) -> Step:
        # Bit-equal learned states are the CPU promise; on GPUs the comparison reports the largest difference.
        return Step(f"{run}-adaptive-migration", "12_adaptive_migration.ipynb",
                    {"CANDIDATE_HOME": lay.a_to, "CANDIDATE_ROOT": a_end, "CONTROL_HOME": lay.a_from,
                     "CONTROL_ROOT": a_ctl, "COHORT": "A", "REQUIRE_EQUAL": scale.device == "cpu",
                     "OUT": shown_path(lay.ad / "migration-comparison.json")})

    def b_steps(a_end: str) -> tuple[Step, Step]:
        # Cohort B continues the committed A endpoint (the migrated run) with it as the frozen reference.
        b = lay.arm(COHORT="B", WORKERS=lay.b_workers, RESUME=a_end, REFERENCE=a_end, SOURCE_HOME=lay.a_to)
        return (Step(f"{run}-adaptive-B-control", "11_adaptive_arm.ipynb", {**b, "HOME": lay.b_home},
                     concurrent_with_next=scale.concurrent),
                Step(f"{run}-adaptive-B-growth", "11_adaptive_arm.ipynb",
                     {**b, "HOME": lay.g_home, "REFERENCE_HOME": lay.a_to, "GROW": True},
                     concurrent_with_next=scale.concurrent))

    if scale.concurrent:
        # The 2-worker control runs beside cohort B, not beside the migrated run: a migrated run copies the
        # update logs of every attempt in its source home when it starts (kit/adaptive/train.py), and the
        # control writes its own into that home. Cohort B reads only the migrated run's home.
        yield migrated_step
        a_end = roots.endpoint(migrated)
        yield from b_steps(a_end)
        yield control_step  # ends the chain: the three run at once
        yield migration_step(a_end, roots.endpoint(control))
    else:
        yield migrated_step
        yield control_step
        a_end = roots.endpoint(migrated)
        yield migration_step(a_end, roots.endpoint(control))
        yield from b_steps(a_end)
    b_end, g_end = roots.endpoint(f"{run}-adaptive-B-control"), roots.endpoint(f"{run}-adaptive-B-growth")
    yield Step(f"{run}-adaptive-growth-comparison", "12_adaptive_migration.ipynb",
               {"CANDIDATE_HOME": lay.g_home, "CANDIDATE_ROOT": g_end, "CONTROL_HOME": lay.b_home,
                "CONTROL_ROOT": b_end, "COHORT": "B", "REQUIRE_EQUAL": False,
                "OUT": shown_path(lay.ad / "growth-comparison.json")})
    return a_end, b_end, g_end


def _evaluation_steps(lay: _AdaptiveLayout, a_end: str, b_end: str, g_end: str, roots) -> Iterator[Step]:
    """The three comparisons on the development roles, the selection, the finals with their gates, and the
    development curve of every arm's lineage."""
    run, ad, prepared, device = lay.run, lay.ad, lay.prepared, lay.device
    # The seed's three comparisons: the A endpoint vs the seed, B vs A, growth vs its fixed-depth control.
    comparisons = {"A": (f"{lay.a_to}:{a_end}", f"seed:{lay.seed}", "A_vs_seed"),
                   "B": (f"{lay.b_home}:{b_end}", f"{lay.a_to}:{a_end}", "B_vs_A"),
                   "G": (f"{lay.g_home}:{g_end}", f"{lay.b_home}:{b_end}", "growth_vs_control")}
    # The evaluations stay one at a time: each endpoint is scored once and read back from the score cache
    # by the next comparison (cached_scores), and the finals' exposure-ledger lines keep the plan's order.
    for name, (cand, base, label) in comparisons.items():
        yield Step(f"{run}-adaptive-dev-{name}", "13_adaptive_evaluate.ipynb",
                   {"PREPARED_DIR": prepared, "CANDIDATE": cand, "BASELINE": base, "SPLIT": "dev",
                    "COMPARISON": label, "OUT": shown_path(ad / f"dev-{name}.json"), **device})
    selection = shown_path(ad / "selection.json")
    yield Step(f"{run}-adaptive-select", "14_adaptive_select.ipynb",
               {"PREPARED_DIR": prepared, "CANDIDATES": {name: spec[0] for name, spec in comparisons.items()},
                "DEV_EVALUATIONS": [shown_path(ad / f"dev-{name}.json") for name in comparisons],
                "OUT": selection})
    for name, (cand, base, label) in comparisons.items():
        yield Step(f"{run}-adaptive-final-{name}", "13_adaptive_evaluate.ipynb",
                   {"PREPARED_DIR": prepared, "CANDIDATE": cand, "BASELINE": base, "SPLIT": "final",
                    "SELECTION": selection, "COMPARISON": label,
                    "OUT": shown_path(ad / f"final-{name}.json"), **device})
    # the development curve: every commit of each arm's lineage on the development roles (docs/formats/adaptive-evaluation.md).
    # It describes how the arms got to their endpoints and informs nothing the selection or the finals use,
    # so it runs after them: on a device block of fixed length the verdicts come first.
    def specs(home: str, run_id: str) -> list[str]:
        return [f"{home}:{root}" for root in roots.produced(run_id)]

    start_a, start_b = [f"seed:{lay.seed}"] + specs(lay.a_from, lay.a_mid), [f"{lay.a_to}:{a_end}"]
    lineages = {f"A{lay.three}-migrated": start_a + specs(lay.a_to, lay.a_migrated),
                f"A{lay.two}-control": start_a + specs(lay.a_from, lay.a_control),
                "B-control": start_b + specs(lay.b_home, f"{run}-adaptive-B-control"),
                "B-growth": start_b + specs(lay.g_home, f"{run}-adaptive-B-growth")}
    yield Step(f"{run}-adaptive-dev-curve", "16_adaptive_dev_curve.ipynb",
               {"PREPARED_DIR": prepared, "LINEAGES": lineages, "OUT": shown_path(ad / "dev-curve.json"), **device})


def _continued_steps(out: Path, seed: str, public_source: Path, start_prepared: str, a_home: str, a_end: str,
                     a_final: str, roots, contract: str = CONTINUED_CONTRACT) -> Iterator[Step]:
    """The continued-learning contract from the selected A endpoint: prepare -> cohort C -> dev -> select -> final."""
    cd = out / "continued"
    prepared, home = shown_path(cd / "prepared"), shown_path(cd / "C")
    yield Step("demo-continued-prepare", "15_continued_prepare.ipynb",
               {"CONTRACT": shown_path(repository_root() / contract), "START_PREPARED": start_prepared,
                "START": f"{a_home}:{a_end}", "START_EVALUATION": a_final, "SEED_DIR": seed,
                "PUBLIC_SOURCE": shown_path(public_source), "OUT_DIR": prepared})
    yield Step("demo-continued-C", "11_adaptive_arm.ipynb",
               {"PREPARED_DIR": prepared, "SEED_DIR": seed, "HOME": home, "COHORT": "C", "WORKERS": 2,
                "RESUME": a_end, "REFERENCE": a_end, "SOURCE_HOME": a_home})
    cand = f"{home}:{roots.endpoint('demo-continued-C')}"
    base = f"{a_home}:{a_end}"
    yield Step("demo-continued-dev-C", "13_adaptive_evaluate.ipynb",
               {"PREPARED_DIR": prepared, "CANDIDATE": cand, "BASELINE": base, "SPLIT": "dev",
                "COMPARISON": "C_vs_A", "OUT": shown_path(cd / "dev-C.json")})
    selection = shown_path(cd / "selection.json")
    yield Step("demo-continued-select", "14_adaptive_select.ipynb",
               {"PREPARED_DIR": prepared, "CANDIDATES": {"C": cand}, "DEV_EVALUATIONS": [shown_path(cd / "dev-C.json")],
                "OUT": selection})
    yield Step("demo-continued-final-C", "13_adaptive_evaluate.ipynb",
               {"PREPARED_DIR": prepared, "CANDIDATE": cand, "BASELINE": base, "SPLIT": "final",
                "SELECTION": selection, "COMPARISON": "C_vs_A", "OUT": shown_path(cd / "final-C.json")})


def _study_steps(out: Path, seed: str, public_source: Path, scale: Scale = TINY) -> Iterator[Step]:
    """examples/gradient_study_tiny.sh, step by step."""
    run = scale.name  # every run id starts with it
    study = shown_path(out / "study")
    yield Step(f"{run}-study-prepare", "19_study_prepare.ipynb",
               {"CONTRACT": shown_path(repository_root() / scale.study_contract), "SEED_DIR": seed,
                "PUBLIC_SOURCE": shown_path(public_source), "STUDY_DIR": study})
    for name in STUDY_ARMS:
        yield Step(f"{run}-study-{name}", "20_study_arm.ipynb",
                   {"STUDY_DIR": study, "SEED_DIR": seed, "ARM": name}, may_fail=True)
    device = {} if scale.device == "cpu" else {"DEVICE": scale.device}
    yield Step(f"{run}-study-evaluate", "21_study_evaluate.ipynb", {"STUDY_DIR": study, "SEED_DIR": seed, **device})


def demo_steps(out: Path, public_source: Path, roots, scale: Scale = TINY, parts=PARTS,
               seed_dir: Path | None = None) -> Iterator[Step]:
    """The demo's steps in order. A generator: a step's roots are read (`roots.endpoint(run_id)`) only
    after the steps before it have run. `parts` picks the experiments (the seed step always runs first).
    `seed_dir`: a seed built before (the medium pilot's, on the same host), inspected instead of built."""
    if seed_dir is None:
        seed, seed_step = shown_path(Path(out) / "seed"), scale.seed
    else:
        seed, seed_step = shown_path(seed_dir), {"MODE": "inspect"}
    # A seed built before is only inspected (held-out scoring and samples, on the GPU), and the preparation
    # after it reads the seed's files, not its run: the two run at once. A seed this step builds comes first.
    yield Step(f"{scale.name}-seed", "00_seed.ipynb", {"SEED_DIR": seed, **seed_step},
               concurrent_with_next=scale.concurrent and seed_dir is not None)
    if "adaptive" in parts:
        yield from _adaptive_steps(Path(out), seed, Path(public_source), roots, scale)
    if "study" in parts:
        yield from _study_steps(Path(out), seed, Path(public_source), scale)


# parameters renamed since runs were committed (old name -> new name): a run recorded under the old
# name is the same step, so `kit demo` from the repository root still reuses the committed evidence
RENAMED_PARAMETERS = {"SOURCE": "PUBLIC_SOURCE"}  # 19_study_prepare, 2026-12-01


def _current_names(parameters: dict) -> dict:
    return {RENAMED_PARAMETERS.get(k, k): v for k, v in parameters.items()}


def _reusable(runs_dir: Path, step: Step) -> bool:
    """True when the step's run id already completed with these parameters; refuses other parameters."""
    run_dir = runs_dir / step.run_id
    try:
        record = read_run_record(run_dir)
    except (FileNotFoundError, ValueError):
        return False
    if record.status != "completed":
        return False  # the runner replaces an unfinished or failed attempt
    if _current_names(record.parameters) != step.parameters:
        raise ValueError(f"{run_dir}: completed by an earlier demo with other parameters "
                         f"({record.parameters}); evidence is never overwritten: remove that run (and the "
                         "runs after it) to run the demo afresh")
    return True


def pinned_public_sha256(scale: Scale = TINY) -> str:
    """The sha256 the scale's adaptive contract pins for the public conversation source."""
    return load_adaptive_contract(repository_root() / scale.adaptive_contract).terms.evaluation.final.retention.sha256


def check_demo_inputs(out: Path, public_source: Path, runs_dir: Path, scale: Scale = TINY,
                      parts=PARTS, seed_dir: Path | None = None) -> None:
    """Refuse, before anything runs (the seed build takes minutes), a missing contract, a missing or
    different public source, or earlier runs of these steps without their data dir."""
    for contract in (scale.adaptive_contract, scale.study_contract):
        if not (repository_root() / contract).is_file():
            raise FileNotFoundError(f"{contract}: missing; the {scale.name} steps run on it (a medium contract is "
                                    "frozen from its draft by campaigns/medium_freeze.py after the committed pilot, "
                                    "docs/contracts.md \"Medium scale\")")
    if not Path(public_source).is_file():
        raise FileNotFoundError(f"{public_source}: the pinned public conversation source (alpaca_5000.json from "
                                f"tatsu-lab/stanford_alpaca, see data/SOURCE.md; sha256 in {scale.adaptive_contract}) "
                                "is needed by both experiments; the repository carries it as data/alpaca_5000.json")
    expected, actual = pinned_public_sha256(scale), sha256_file(public_source)
    if actual != expected:
        raise ValueError(f"{public_source}: sha256 {actual}, but {scale.adaptive_contract} pins the public source at "
                         f"{expected}; give the pinned file (data/alpaca_5000.json, see data/SOURCE.md)")
    if seed_dir is not None and not (Path(seed_dir) / "config.json").is_file():
        raise FileNotFoundError(f"{seed_dir}/config.json: missing; --seed-dir expects a built seed directory")
    ids = [s.run_id for s in demo_steps(out, public_source, PlaceholderRoots(), scale, parts, seed_dir)]
    earlier = [i for i in ids if (Path(runs_dir) / i).is_dir()]
    if earlier and not Path(out).is_dir():
        raise ValueError(f"{runs_dir}: holds runs of an earlier demo ({', '.join(earlier[:3])}, ...) but "
                         f"their working directory {out} is gone; remove {runs_dir}/{scale.name}-* to run the demo "
                         "afresh")


def demo_ledger(out: Path, runs_dir: Path) -> Path:
    """The exposure ledger the demo's steps use: `$KIT_LEDGER` when given; else the one beside `runs_dir`
    (`kit run`'s rule: `demo-out/ledger/` for `make demo`, a campaign's own folder); but never the
    repository's `ledger/exposed.jsonl` - it holds every committed campaign's exposures, which would empty
    the tiny finals, and the committed demo evidence was prepared against a ledger of the demo's own - so
    a demo whose runs folder is the repository's `runs/` uses OUT/ledger/exposed.jsonl."""
    if os.environ.get(LEDGER_ENV):
        return Path(os.environ[LEDGER_ENV])
    beside = Path(runs_dir).absolute().parent / LEDGER_RELATIVE
    if beside.resolve() == (repository_root() / LEDGER_RELATIVE).resolve():
        return Path(out) / LEDGER_RELATIVE
    return beside


def run_demo(out: Path, progress: bool = True, *, runs_dir: Path = Path("runs"),
             reports_dir: Path = Path("reports"), public_source: Path | None = None, scale: str = "tiny",
             parts=PARTS, report: bool = True, seed_dir: Path | None = None) -> int:
    """Run every step (module docstring), render reports_dir/<scale name>/index.html and print its path.

    `public_source` defaults to data/alpaca_5000.json in the repository. `scale` "medium" runs the medium
    contracts (two GPUs, the small seed built on the first); `seed_dir` inspects a seed built before instead
    of building one. Returns 0 when every step completed (or
    was reused), 1 when a step failed or the demo stopped."""
    if scale not in SCALES:
        raise ValueError(f"scale {scale!r}; expected one of {sorted(SCALES)}")
    sc = SCALES[scale]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown or not parts:
        raise ValueError(f"parts {list(parts)}; expected a non-empty subset of {list(PARTS)}")
    ensure_runtime()  # papermill and a kernel, before anything is written
    out, runs_dir, reports_dir = Path(out), Path(runs_dir), Path(reports_dir)
    public_source = Path(public_source) if public_source else repository_root() / PUBLIC_SOURCE
    check_demo_inputs(out, public_source, runs_dir, sc, parts, seed_dir)
    out.mkdir(parents=True, exist_ok=True)
    notebooks = repository_root() / "notebooks"
    total = sum(1 for _ in demo_steps(out, public_source, PlaceholderRoots(), sc, parts, seed_dir))
    saved_ledger = os.environ.get(LEDGER_ENV)
    ledger = demo_ledger(out, runs_dir)
    os.environ[LEDGER_ENV] = str(ledger.absolute())  # kernels inherit it: every step prepares and records there
    saved = os.environ.get("KIT_PROGRESS")
    bar = _bar(progress and saved != "0", total)
    os.environ["KIT_PROGRESS"] = "0"  # kernels inherit it: no bars in the executed notebooks kept as evidence
    plan: list[dict] = []
    timing: list[dict] = []
    stopped = None
    t0 = time.perf_counter()
    try:
        for chain in step_chains(demo_steps(out, public_source, RecordedRoots(runs_dir), sc, parts, seed_dir)):
            plan += [{"notebook": shown_path(notebooks / step.notebook), "run_id": step.run_id,
                      "parameters": step.parameters} for step in chain]
            write_canonical_json(out / sc.plan_file(parts), plan)
            bar.set_description(" + ".join(s.run_id for s in chain))
            stopped = _note_outcomes(_run_chain(chain, notebooks, runs_dir, out), timing, bar, runs_dir)
            write_canonical_json(out / sc.timing_file(parts), {"steps": timing})  # a killed campaign keeps its times
            if stopped:
                break
    except DemoStopped as e:
        stopped = (timing[-1]["run_id"] if timing else "", str(e))
    finally:
        bar.close()
        for key, value in (("KIT_PROGRESS", saved), (LEDGER_ENV, saved_ledger)):
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    steps_s = time.perf_counter() - t0
    index = None
    if report:
        with quiet_kernels(reports_dir / sc.name / KERNEL_LOG_NAME):  # the report kernel's warnings, not the terminal
            # each scale's report covers its own runs only: the tiny contracts' verdicts are not mixed with
            # GPU-host and benchmark records, which `kit report --select '[!dm]*'` renders apart
            index = render_report(runs_dir, reports_dir / sc.name, title=sc.title, select=f"{sc.name}-*")
    write_canonical_json(out / sc.timing_file(parts), {"steps": timing, "steps_seconds": round(steps_s, 1),
                                                "with_report_seconds": round(time.perf_counter() - t0, 1)})
    print(f"{len(timing)} of {total} step(s) in {steps_s / 60:.1f} min; plan: {out / sc.plan_file(parts)}")
    if stopped:
        # the inspection run records into the demo's own runs folder (never the committed runs/ of a `make demo`)
        print(f"demo stopped: {stopped[1]}\ninspect it: kit run notebooks/90_inspect_failed_arm.ipynb "
              f"-p RUN_ID {stopped[0]} --runs-dir {runs_dir}", file=sys.stderr)
    if index:
        print(index)
    return 1 if stopped or any(t["status"] == "failed" for t in timing) else 0


def step_chains(steps: Iterable[Step]) -> Iterator[list[Step]]:
    """The steps in the groups that start together: a step with concurrent_with_next joins the step after
    it, and the last step ends its group whatever it says (nothing follows it to start beside). Lazy: the
    step after a group is asked for only once the caller comes back for the next group, since that step
    may read the roots of the group before it (RecordedRoots)."""
    chain: list[Step] = []
    for step in steps:
        chain.append(step)
        if not step.concurrent_with_next:
            yield chain
            chain = []
    if chain:
        yield chain


def _note_outcomes(outcomes: list[tuple[Step, RunRecord | None]], timing: list[dict], bar, runs_dir: Path):
    """Append each step's timing entry and console line; returns (run id, why) of the first step whose
    failure stops the demo, or None."""
    stopped = None
    for step, record in outcomes:
        if record is None:
            timing.append({"run_id": step.run_id, "status": "reused", "seconds": 0.0})
            bar.write(f"{step.run_id}: completed before, reused")
        else:
            timing.append({"run_id": step.run_id, "status": record.status, "seconds": record.duration_s})
            bar.write(f"{step.run_id}: {record.status} in {record.duration_s:.1f} s"
                      + (f" ({record.reason})" if record.reason else ""))
            if record.status != "completed" and not step.may_fail and stopped is None:
                stopped = (step.run_id, f"{runs_dir / step.run_id}: {record.status} ({record.reason})")
        bar.update()
    return stopped


def _run_chain(chain: list[Step], notebooks: Path, runs_dir: Path, out: Path) -> list[tuple[Step, RunRecord | None]]:
    """Run the steps of a chain that did not complete before, at the same time when there are several
    (each in its own process, kit.evidence.runner.run_notebooks_at_once); [(step, its RunRecord, or None
    when it was reused)] in the chain's order."""
    to_run = [step for step in chain if not _reusable(runs_dir, step)]
    if len(to_run) == 1:
        step = to_run[0]
        records = [run_notebook(Path(shown_path(notebooks / step.notebook)), step.parameters, step.run_id, runs_dir)]
    elif to_run:
        arms = [PlanArm(notebook=shown_path(notebooks / s.notebook), run_id=s.run_id, parameters=s.parameters)
                for s in to_run]
        records = run_notebooks_at_once(arms, runs_dir, out / "at-once")
    else:
        records = []
    by_id = {step.run_id: record for step, record in zip(to_run, records)}
    return [(step, by_id.get(step.run_id)) for step in chain]


def _bar(show: bool, total: int):
    return tqdm(total=total, unit="step", disable=not show, dynamic_ncols=True, file=sys.stderr)
