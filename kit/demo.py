"""`kit demo`, the embedded default: both experiments' tiny contracts end to end, through the notebooks.

Every step is a notebook of `notebooks/` executed by kit.evidence.runner into `runs/demo-<step>/`, so the
demo leaves exactly the evidence a batch on a GPU host leaves (run records, executed notebooks, metric
sidecars, checkpoint roots), and `reports/demo/index.html` is rendered from it at the end:

    seed (build)  ->  adaptive: prepare -> cohort A on 2 workers to the migration step -> the 3-worker
    continuation (migrated) -> the uninterrupted 2-worker control -> migration comparison -> cohort B
    fixed-depth control -> cohort B growth -> growth comparison -> dev evaluations -> selection -> final
    evaluations with gates  ->  gradient study: prepare -> single, dense, PowerSGD arms -> evaluation and
    screens  ->  report

The sequence mirrors examples/adaptive_tiny.sh and examples/gradient_study_tiny.sh. A step's parameters
name the checkpoint roots of earlier steps, read from their run records (`checkpoint_roots.produced`), so
each run.json says exactly which commit it continued from. The plan actually executed (literal roots
included) is written to OUT/demo-plan.json, a `kit batch` plan.

Working data (seed, prepared jobs, checkpoint stores) goes under `out`; run records under `runs_dir`, the
report under `reports_dir`. A rerun reuses a run id already `completed` with the same parameters (as
`kit batch` does) and refuses one completed with different parameters, since evidence is never
overwritten. The demo stops at the first failed step (a study arm's own outcome, e.g. `unavailable`, does
not stop it) and still renders the report, which lists the failure; inspect it with
notebooks/90_inspect_failed_arm.ipynb.

Progress: a bar over the steps on the console (tqdm), off with `progress=False` or KIT_PROGRESS=0. Kernels
always run with KIT_PROGRESS=0, so the executed notebooks kept as evidence hold no progress-bar output.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kit.digest import load_json_strict, write_canonical_json

ADAPTIVE_CONTRACT = "contracts/adaptive-shards.tiny.json"
STUDY_CONTRACT = "contracts/shared-gradient.tiny.json"
STUDY_ARMS = ("single", "dense", "powersgd")
PUBLIC_SOURCE = Path("shared") / "data" / "alpaca_5000.json"  # beside the repository, as the examples expect
REPORT_ID = "demo"
PLAN_FILE = "demo-plan.json"


class DemoStopped(RuntimeError):
    """A step the rest of the demo depends on did not complete."""


@dataclass(frozen=True)
class Step:
    run_id: str
    notebook: str  # file name in notebooks/
    parameters: dict
    may_fail: bool = False  # its outcome is a result of the experiment (a study arm), not a broken demo


def _shown(path: Path) -> str:
    """`path` relative to the current directory when inside it (records stay portable), else absolute.

    Kernels start in the current directory (papermill's default), so relative paths mean the same there."""
    path = Path(os.path.abspath(path))
    try:
        return path.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return str(path)


class _Roots:
    """The checkpoint roots earlier steps produced, read from their run records."""

    def __init__(self, runs_dir: Path):
        self.runs_dir = runs_dir

    def endpoint(self, run_id: str) -> str:
        from kit.evidence.records import read_run_record

        record = read_run_record(self.runs_dir / run_id)
        if record.status != "completed" or not record.checkpoint_roots["produced"]:
            raise DemoStopped(f"{self.runs_dir / run_id}: status {record.status}, no endpoint root to continue from")
        return record.checkpoint_roots["produced"][-1]["root"]


class _PlaceholderRoots:
    """Stands in for roots not produced yet, to count the steps (and show the plan's shape) before running."""

    def endpoint(self, run_id: str) -> str:
        return "0" * 64


def demo_steps(out: Path, public_source: Path, roots: _Roots) -> Iterator[Step]:
    """The demo's steps in order. A generator: a step's roots are read once the steps before it have run."""
    from kit.adaptive.schema import load_adaptive_contract

    from kit.evidence.runtime import repository_root

    contract_path = repository_root() / ADAPTIVE_CONTRACT
    contract = load_adaptive_contract(contract_path).data
    mig = contract["migration"]
    two, three, at = mig["from_workers"], mig["to_workers"], mig["at_step"]
    b_workers = contract["cohorts"]["B"]["workers"]
    seed, ad, study = _shown(out / "seed"), out / "adaptive", _shown(out / "study")
    prepared = _shown(ad / "prepared")
    home = {name: _shown(ad / name) for name in (f"A{two}", f"A{three}", "B", "G")}
    a_from, a_to = home[f"A{two}"], home[f"A{three}"]
    arm = {"PREPARED_DIR": prepared, "SEED_DIR": seed}

    yield Step("demo-seed", "00_seed.ipynb", {"SEED_DIR": seed, "MODE": "build"})
    yield Step("demo-adaptive-prepare", "10_adaptive_prepare.ipynb",
               {"CONTRACT": _shown(contract_path), "SEED_DIR": seed, "PUBLIC_SOURCE": _shown(public_source),
                "OUT_DIR": prepared})
    mid_run = f"demo-adaptive-A{two}-to-step{at}"
    yield Step(mid_run, "11_adaptive_arm.ipynb", {**arm, "HOME": a_from, "COHORT": "A", "WORKERS": two, "UNTIL": at})
    a_mid = roots.endpoint(mid_run)
    yield Step(f"demo-adaptive-A{three}-migrated", "11_adaptive_arm.ipynb",
               {**arm, "HOME": a_to, "COHORT": "A", "WORKERS": three, "RESUME": a_mid, "SOURCE_HOME": a_from})
    yield Step(f"demo-adaptive-A{two}-control", "11_adaptive_arm.ipynb",
               {**arm, "HOME": a_from, "COHORT": "A", "WORKERS": two, "RESUME": a_mid})
    a_end, a_ctl = roots.endpoint(f"demo-adaptive-A{three}-migrated"), roots.endpoint(f"demo-adaptive-A{two}-control")
    yield Step("demo-adaptive-migration", "12_adaptive_migration.ipynb",
               {"CANDIDATE_HOME": a_to, "CANDIDATE_ROOT": a_end, "CONTROL_HOME": a_from, "CONTROL_ROOT": a_ctl,
                "COHORT": "A", "REQUIRE_EQUAL": True, "OUT": _shown(ad / "migration-comparison.json")})
    b_common = {**arm, "COHORT": "B", "WORKERS": b_workers, "RESUME": a_end, "REFERENCE": a_end, "SOURCE_HOME": a_to}
    yield Step("demo-adaptive-B-control", "11_adaptive_arm.ipynb", {**b_common, "HOME": home["B"]})
    yield Step("demo-adaptive-B-growth", "11_adaptive_arm.ipynb",
               {**b_common, "HOME": home["G"], "REFERENCE_HOME": a_to, "GROW": True})
    b_end, g_end = roots.endpoint("demo-adaptive-B-control"), roots.endpoint("demo-adaptive-B-growth")
    yield Step("demo-adaptive-growth-comparison", "12_adaptive_migration.ipynb",
               {"CANDIDATE_HOME": home["G"], "CANDIDATE_ROOT": g_end, "CONTROL_HOME": home["B"], "CONTROL_ROOT": b_end,
                "COHORT": "B", "REQUIRE_EQUAL": False, "OUT": _shown(ad / "growth-comparison.json")})
    # The seed's three comparisons: A endpoint vs the seed, B vs A, growth vs its fixed-depth control.
    comparisons = {"A": (f"{a_to}:{a_end}", f"seed:{seed}", "A_vs_seed"),
                   "B": (f"{home['B']}:{b_end}", f"{a_to}:{a_end}", "B_vs_A"),
                   "G": (f"{home['G']}:{g_end}", f"{home['B']}:{b_end}", "growth_vs_control")}
    for name, (cand, base, label) in comparisons.items():
        yield Step(f"demo-adaptive-dev-{name}", "13_adaptive_evaluate.ipynb",
                   {"PREPARED_DIR": prepared, "CANDIDATE": cand, "BASELINE": base, "SPLIT": "dev", "COMPARISON": label,
                    "OUT": _shown(ad / f"dev-{name}.json")})
    selection = _shown(ad / "selection.json")
    yield Step("demo-adaptive-select", "14_adaptive_select.ipynb",
               {"PREPARED_DIR": prepared, "CANDIDATES": {n: c[0] for n, c in comparisons.items()},
                "DEV_EVALUATIONS": [_shown(ad / f"dev-{n}.json") for n in comparisons], "OUT": selection})
    for name, (cand, base, label) in comparisons.items():
        yield Step(f"demo-adaptive-final-{name}", "13_adaptive_evaluate.ipynb",
                   {"PREPARED_DIR": prepared, "CANDIDATE": cand, "BASELINE": base, "SPLIT": "final",
                    "SELECTION": selection, "COMPARISON": label, "OUT": _shown(ad / f"final-{name}.json")})

    yield Step("demo-study-prepare", "19_study_prepare.ipynb",
               {"CONTRACT": _shown(repository_root() / STUDY_CONTRACT), "SEED_DIR": seed, "SOURCE": _shown(public_source), "STUDY_DIR": study})
    for name in STUDY_ARMS:
        yield Step(f"demo-study-{name}", "20_study_arm.ipynb", {"STUDY_DIR": study, "SEED_DIR": seed, "ARM": name},
                   may_fail=True)
    yield Step("demo-study-evaluate", "21_study_evaluate.ipynb", {"STUDY_DIR": study, "SEED_DIR": seed})


def _reusable(runs_dir: Path, step: Step) -> bool:
    """True when the step's run id already completed with these parameters; refuses other parameters."""
    from kit.evidence.records import read_run_record

    run_dir = runs_dir / step.run_id
    try:
        record = read_run_record(run_dir)
    except (FileNotFoundError, ValueError):
        return False
    if record.status != "completed":
        return False  # the runner replaces an unfinished or failed attempt
    if record.parameters != step.parameters:
        raise ValueError(f"{run_dir}: completed by an earlier demo with other parameters ({record.parameters}); "
                         f"evidence is never overwritten: remove {runs_dir}/demo-* to run the demo afresh")
    return True


def _check_inputs(out: Path, public_source: Path, runs_dir: Path) -> None:
    if not public_source.is_file():
        raise FileNotFoundError(f"{public_source}: the pinned public conversation source (alpaca_5000.json, sha256 in "
                                f"{ADAPTIVE_CONTRACT}) is needed by both experiments; put a local copy there")
    earlier = sorted(p.name for p in runs_dir.glob("demo-*")) if runs_dir.is_dir() else []
    if earlier and not out.is_dir():
        raise ValueError(f"{runs_dir}: holds runs of an earlier demo ({', '.join(earlier[:3])}, ...) whose working "
                         f"directory {out} is gone; remove {runs_dir}/demo-* to run the demo afresh, or pass that --out")


def run_demo(out: Path, progress: bool = True, *, runs_dir: Path = Path("runs"), reports_dir: Path = Path("reports"),
             public_source: Path | None = None) -> int:
    """Run every step (module docstring), render reports_dir/demo/index.html and print its path.

    Returns 0 when every step completed (or was reused), 1 when a step failed or stopped the demo."""
    from kit.evidence.report import render_report
    from kit.evidence.runner import run_notebook
    from kit.evidence.runtime import ensure_runtime, repository_root

    ensure_runtime()  # papermill and a kernel, before anything is written
    out, runs_dir, reports_dir = Path(out), Path(runs_dir), Path(reports_dir)
    public_source = Path(public_source) if public_source else repository_root().parent / PUBLIC_SOURCE
    _check_inputs(out, public_source, runs_dir)
    out.mkdir(parents=True, exist_ok=True)
    notebooks = repository_root() / "notebooks"
    show = progress and os.environ.get("KIT_PROGRESS", "1") != "0"
    saved = os.environ.get("KIT_PROGRESS")
    os.environ["KIT_PROGRESS"] = "0"  # kernels inherit it: no bars in the executed notebooks kept as evidence
    plan, outcome, failed = [], [], None
    t0 = time.perf_counter()
    total = sum(1 for _ in demo_steps(out, public_source, _PlaceholderRoots()))
    bar = _bar(show, total)
    try:
        for step in demo_steps(out, public_source, _Roots(runs_dir)):
            notebook = _shown(notebooks / step.notebook)
            plan.append({"notebook": notebook, "run_id": step.run_id, "parameters": step.parameters})
            write_canonical_json(out / PLAN_FILE, plan)
            bar.set_description(step.run_id)
            if _reusable(runs_dir, step):
                outcome.append((step.run_id, "completed (reused)", 0.0))
                bar.write(f"{step.run_id}: completed before, reused")
                bar.update()
                continue
            record = run_notebook(Path(notebook), step.parameters, step.run_id, runs_dir)
            outcome.append((step.run_id, record.status, record.duration_s))
            bar.write(f"{step.run_id}: {record.status} in {record.duration_s:.1f} s"
                      + (f" ({record.reason})" if record.reason else ""))
            bar.update()
            if record.status != "completed" and not step.may_fail:
                failed = f"{runs_dir / step.run_id}: {record.status} ({record.reason})"
                break
    except DemoStopped as e:
        failed = str(e)
    finally:
        bar.close()
        if saved is None:
            os.environ.pop("KIT_PROGRESS", None)
        else:
            os.environ["KIT_PROGRESS"] = saved
    seconds = time.perf_counter() - t0
    index = render_report(runs_dir, reports_dir / REPORT_ID, title="kit demo: both tiny contracts end to end")
    write_canonical_json(out / "demo-timing.json", {"steps": [{"run_id": r, "status": s, "seconds": d}
                                                              for r, s, d in outcome],
                                                    "steps_seconds": round(seconds, 1),
                                                    "total_seconds": round(time.perf_counter() - t0, 1)})
    print(f"{len(outcome)} step(s) in {seconds / 60:.1f} min; plan: {out / PLAN_FILE}")
    if failed:
        print(f"demo stopped: {failed}\ninspect it: kit run notebooks/90_inspect_failed_arm.ipynb -p RUN_ID "
              f"{outcome[-1][0] if outcome else '<run id>'}", file=sys.stderr)
    print(index)
    return 1 if failed or any(s == "failed" for _, s, _ in outcome) else 0


def _bar(show: bool, total: int):
    from tqdm import tqdm

    return tqdm(total=total, unit="step", disable=not show, dynamic_ncols=True, file=sys.stderr)
