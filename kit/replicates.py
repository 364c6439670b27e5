"""Replicate runs: the frozen study arms and cohort B's growth pair again on derived data orders, scored on
development roles only (plan: campaigns/medium-replicates-plan.json, `campaign_plan()`; campaigns/logbook.md, "GPU
hosts: Replicates"). Re-exported entry points: `plan(sd, effect, margin=0, alpha=0.05, power=0.8, one_sided=False)`
(kit/replicate_stats.py), `analyse` and `robustness_by_question` (kit/evidence/replicate_analysis.py).

The decision to know: a replicate changes the data order alone (kit/replicate_order.py) and never opens a
final role: it is scored by notebook 22 (study) or notebook 13 with SPLIT "dev" (growth pair), and the
final-role guard refuses its commit. The steps come in parts, each its own process
(`python -m kit.replicates --part PART`), because the parts differ in GPU mode (the campaign sets
KIT_GPU_DETERMINISTIC per part); a part reads earlier parts' roots from their run records. Parts (`PARTS`):
prepare, a-endpoint (cohort A's endpoint), study, growth, study-dev, study-r0 (the committed-order arms again,
for their development scores), finals (a frozen design's fresh final sets: `run_finals`); the notes below.

Notes: , kit.replicate_order, kit.study.replicate_dev, kit.evidence.replicates.

Replicates randomise one source of variation, the data order (kit/replicate_order.py `RULE`), as Bouthillier et al.
(2021) ask; every other input is the committed one. Replicate 0 returns the committed steps object itself, so
REPLICATE = 0 takes the committed code path (roots equal, tested).
Finals stay closed: a study replicate lives in `arms/<arm>-r<k>/`, which `arm_statuses` (hence the freeze) never
lists; an adaptive replicate's attempt records `replicate`, which `open_final_roles` reads to refuse its commit.
Preparations are made again against the ledger as the committed ones read it (the plan's `inputs.ledger`) and
`--plan` compares them with the committed jobs and roots (OUT/replicates-checks.json). `replicate_spread` describes the
development spreads; kit/evidence/replicate_analysis.py reads them (t intervals, readings; the report's section).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kit.adaptive.formats import load_prepared
from kit.adaptive.schema import load_adaptive_contract
from kit.demo import (
    PUBLIC_SOURCE,
    SCALES,
    STUDY_ARMS,
    DemoStopped,
    RecordedRoots,
    Step,
    _note_outcomes,
    _run_chain,
    demo_ledger,
    shown_path,
    step_chains,
)
from kit.digest import load_json_strict, write_canonical_json
from kit.environ import temporary_environ
from kit.evidence.ledger import LEDGER_ENV
from kit.evidence.replicate_analysis import analyse, analyse_final, robustness_by_question
from kit.evidence.replicate_design import (
    DesignError,
    FinalDesign,
    ReplicateDesign,
    check_committed,
    read_design,
    score_final_set,
    set_runs,
)
from kit.evidence.replicates import PLAN_FORMAT, read_plan
from kit.evidence.runtime import ensure_runtime, repository_root
from kit.record import Opt, Record, spec_field
from kit.replicate_order import RULE, replicate_seed
from kit.replicate_stats import plan, power
from kit.study.arms import arm_dir
from kit.study.prepare import _seed_task_digests
from kit.study.replicate_dev import final_scorer
from kit.study.schema import load_study_contract

__all__ = ["analyse", "campaign_plan", "plan", "power", "replicate_steps", "robustness_by_question", "run_part"]
PARTS = ("prepare", "a-endpoint", "study", "growth", "study-dev", "study-r0", "finals")
SCORING_RULE = ("replicates are scored on development roles only: the study's on its development tasks (the prepared "
                "data.dev, else the study pilot's rule) and its retention probes (records the exposure ledger already "
                "holds), through notebook 22; the growth pair on the adaptive job's dev.tasks and dev.retention through "
                "notebook 13 with SPLIT 'dev'; no replicate is ever selected or scored on a final role, and the "
                "final-role guard refuses a replicate's commit (kit.adaptive.selection.open_final_roles)")


def _replicate_id(run_id: str, k: int) -> str:
    return f"{run_id}-r{k}"


class _Layout:
    """The folders and run ids of one replicate campaign at one scale (OUT is the campaign's work folder)."""

    def __init__(self, scale: str, out: Path, seed: Path, run_prefix: str | None = None, fixed: str | None = None):
        self.sc = SCALES[scale]
        self.name = self.sc.name
        # replicate run ids begin with `run` (a frozen design's `run_prefix`; else "<scale name>-"), the
        # re-derived inputs' (preparations, cohort A's endpoint) with `fixed` (a design's campaign names one per
        # session: a fresh host re-derives them, and a completed record of another host's would be reused)
        self.run = run_prefix if run_prefix is not None else f"{self.name}-"
        self.fixed = fixed if fixed is not None else f"{self.name}-replicates"
        self.out, self.seed = out, shown_path(seed)
        self.study = shown_path(out / "study")
        self.ad = out / "adaptive"
        self.prepared = shown_path(self.ad / "prepared")
        terms = load_adaptive_contract(repository_root() / self.sc.adaptive_contract).terms
        self.two, self.three, self.at = (terms.migration.from_workers, terms.migration.to_workers,
                                         terms.migration.at_step)
        self.b_workers = terms.cohorts.B.workers
        self.a_from, self.a_to = shown_path(self.ad / f"A{self.two}"), shown_path(self.ad / f"A{self.three}")
        self.device = {} if self.sc.device == "cpu" else {"DEVICE": self.sc.device}
        # the re-derived inputs carry the campaign's tag; the committed runs they repeat keep their own ids
        self.a_mid = f"{self.fixed}-A{self.two}-to-step{self.at}"
        self.a_end = f"{self.fixed}-A{self.three}-migrated"

    def arm(self, **parameters) -> dict:
        return {"PREPARED_DIR": self.prepared, "SEED_DIR": self.seed, **parameters}


def _prepare(lay: _Layout, public_source: Path) -> Iterator[Step]:
    root = repository_root()
    yield Step(f"{lay.fixed}-study-prepare", "19_study_prepare.ipynb",
               {"CONTRACT": shown_path(root / lay.sc.study_contract), "SEED_DIR": lay.seed,
                "PUBLIC_SOURCE": shown_path(public_source), "STUDY_DIR": lay.study}, concurrent_with_next=True)
    yield Step(f"{lay.fixed}-adaptive-prepare", "10_adaptive_prepare.ipynb",
               {"CONTRACT": shown_path(root / lay.sc.adaptive_contract), "SEED_DIR": lay.seed,
                "PUBLIC_SOURCE": shown_path(public_source), "OUT_DIR": lay.prepared})


def _a_endpoint(lay: _Layout, roots) -> Iterator[Step]:
    yield Step(lay.a_mid, "11_adaptive_arm.ipynb", lay.arm(HOME=lay.a_from, COHORT="A", WORKERS=lay.two, UNTIL=lay.at))
    yield Step(lay.a_end, "11_adaptive_arm.ipynb",
               lay.arm(HOME=lay.a_to, COHORT="A", WORKERS=lay.three, RESUME=roots.endpoint(lay.a_mid),
                       SOURCE_HOME=lay.a_from))


def _study(lay: _Layout, replicates: list[int], arm_names) -> Iterator[Step]:
    arms = [(name, k) for k in replicates for name in arm_names]
    for i, (name, k) in enumerate(arms):  # all at once: the arms leave the GPU mostly idle
        yield Step(_replicate_id(f"{lay.run}study-{name}", k), "20_study_arm.ipynb",
                   {"STUDY_DIR": lay.study, "SEED_DIR": lay.seed, "ARM": name, "REPLICATE": k},
                   may_fail=True, concurrent_with_next=i + 1 < len(arms))


def _study_dev(lay: _Layout, replicates: list[int], roots, arm_names) -> Iterator[Step]:
    for k in replicates:  # one at a time: the first scores the seed, the others read its record back
        for name in arm_names:
            arm_run = _replicate_id(f"{lay.run}study-{name}", k)
            home = shown_path(arm_dir(lay.study, name, k) / "home")
            try:
                endpoint = roots.endpoint(arm_run)
            except DemoStopped as e:  # an arm that did not complete has no score; the others still get theirs
                print(f"{arm_run}: no development score: {e}", flush=True)
                continue
            yield Step(_replicate_id(f"{lay.run}study-dev-{name}", k), "22_study_replicate_dev.ipynb",
                       {"STUDY_DIR": lay.study, "SEED_DIR": lay.seed, "ARM": name, "REPLICATE": k,
                        "CANDIDATE": f"{home}:{endpoint}", **lay.device}, may_fail=True)


def _growth(lay: _Layout, replicates: list[int], roots, train_only: bool = False) -> Iterator[Step]:
    a_end = roots.endpoint(lay.a_end)
    for k in replicates:
        b_home, g_home = shown_path(lay.ad / f"B-r{k}"), shown_path(lay.ad / f"G-r{k}")
        b = lay.arm(COHORT="B", WORKERS=lay.b_workers, RESUME=a_end, REFERENCE=a_end, SOURCE_HOME=lay.a_to,
                    REPLICATE=k)
        control, growth = (_replicate_id(f"{lay.run}adaptive-B-{arm}", k) for arm in ("control", "growth"))
        yield Step(control, "11_adaptive_arm.ipynb", {**b, "HOME": b_home}, concurrent_with_next=True)
        yield Step(growth, "11_adaptive_arm.ipynb", {**b, "HOME": g_home, "REFERENCE_HOME": lay.a_to, "GROW": True})
        if train_only:  # a re-derivation of the pair's endpoints for the fresh final sets: no development scoring
            continue
        b_end, g_end = roots.endpoint(control), roots.endpoint(growth)
        # the committed development comparisons, on this replicate's pair: B against A, growth against its control
        for name, cand, base, label in (("B", f"{b_home}:{b_end}", f"{lay.a_to}:{a_end}", "B_vs_A"),
                                        ("G", f"{g_home}:{g_end}", f"{b_home}:{b_end}", "growth_vs_control")):
            yield Step(_replicate_id(f"{lay.run}adaptive-dev-{name}", k), "13_adaptive_evaluate.ipynb",
                       {"PREPARED_DIR": lay.prepared, "CANDIDATE": cand, "BASELINE": base, "SPLIT": "dev",
                        "COMPARISON": label, "OUT": shown_path(lay.ad / f"dev-{name}-r{k}.json"), **lay.device})


def replicate_steps(part: str, out: Path, seed: Path, roots, scale: str = "medium", replicates=(1, 2),
                    public_source: Path | None = None, arms=STUDY_ARMS, run_prefix: str | None = None,
                    fixed: str | None = None, train_only: bool = False) -> Iterator[Step]:
    """The steps of one part (module docstring), in order; a generator, as kit.demo.demo_steps. `arms`: the
    study arms the study parts run (all three by default); `run_prefix`, `fixed`: the run ids' (`_Layout`)."""
    lay = _Layout(scale, Path(out), Path(seed), run_prefix, fixed)
    replicates = list(replicates)
    if part == "prepare":
        yield from _prepare(lay, Path(public_source) if public_source else repository_root() / PUBLIC_SOURCE)
    elif part == "a-endpoint":
        yield from _a_endpoint(lay, roots)
    elif part == "study":
        yield from _study(lay, replicates, arms)
    elif part == "growth":
        yield from _growth(lay, replicates, roots, train_only)
    elif part == "study-dev":
        yield from _study_dev(lay, replicates, roots, arms)
    elif part == "study-r0":
        yield from _study(lay, [0], arms)
        yield from _study_dev(lay, [0], roots, arms)
    elif part != "finals":  # finals runs no notebook: `run_finals` opens the design's sets and scores them
        raise ValueError(f"part {part!r}; expected one of {', '.join(PARTS)}")


def campaign_plan(scale: str = "medium", study_replicates=(1, 2), growth_replicates=(1, 2)) -> dict:
    """The executed campaign's plan (campaigns/medium-replicates-plan.json is `campaign_plan("medium")` plus its
    `inputs`): the runs, each replicate's derived order seed (recorded, kit/replicate_order.py) and the scoring
    rule."""
    sc, root = SCALES[scale], repository_root()
    study = load_study_contract(root / sc.study_contract)
    adaptive = load_adaptive_contract(root / sc.adaptive_contract)
    s_seed, a_seed = study.terms.schedule.order_seed, adaptive.terms.data_seeds.schedule
    lay_name = sc.name
    c = adaptive.terms.migration
    return {
        "format": PLAN_FORMAT, "scale": scale, "order_rule": RULE, "scoring_rule": SCORING_RULE,
        "study": {
            "contract": sc.study_contract, "contract_digest": study.digest,
            "contract_seed": {"field": "schedule.order_seed", "value": s_seed},
            "replicates": [{"index": k, "order_seed": replicate_seed(s_seed, k),
                            "runs": [_replicate_id(f"{lay_name}-study-{a}", k) for a in STUDY_ARMS],
                            "dev_runs": [_replicate_id(f"{lay_name}-study-dev-{a}", k) for a in STUDY_ARMS]}
                           for k in study_replicates],
            "committed": {a: f"{lay_name}-study-{a}" for a in STUDY_ARMS},
            "committed_order_dev_runs": [_replicate_id(f"{lay_name}-study-dev-{a}", 0) for a in STUDY_ARMS],
        },
        "adaptive": {
            "contract": sc.adaptive_contract, "contract_digest": adaptive.digest,
            "contract_seed": {"field": "data_seeds.schedule", "value": a_seed},
            "start": {"runs": [f"{lay_name}-replicates-A{c.from_workers}-to-step{c.at_step}",
                               f"{lay_name}-replicates-A{c.to_workers}-migrated"],
                      "repeats": [f"{lay_name}-adaptive-A{c.from_workers}-to-step{c.at_step}",
                                  f"{lay_name}-adaptive-A{c.to_workers}-migrated"],
                      "mode": "the committed runs' (KIT_GPU_DETERMINISTIC unset): a replay of their roots"},
            "replicates": [{"index": k, "order_seed": replicate_seed(a_seed, k),
                            "runs": [_replicate_id(f"{lay_name}-adaptive-B-{a}", k) for a in ("control", "growth")],
                            "dev_runs": [_replicate_id(f"{lay_name}-adaptive-dev-{n}", k) for n in ("B", "G")]}
                           for k in growth_replicates],
            "committed_dev_runs": {"B": f"{lay_name}-adaptive-dev-B", "G": f"{lay_name}-adaptive-dev-G"},
        },
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class InputCheck(Record):
    """One entry of OUT/replicates-checks.json: a re-derived input against the plan's."""
    expected: str = spec_field(str, doc="the plan's value")
    actual: str | None = spec_field(Opt(str), doc="the re-derived value (null: the file lacks it)")
    equal: bool = spec_field(bool, doc="whether they are equal")


def _check(expected: str, actual: str | None) -> InputCheck:
    return InputCheck(expected=expected, actual=actual, equal=actual == expected)


def record_checks(plan_file: Path, out: Path, runs_dir: Path) -> dict[str, InputCheck]:
    """Compare what the parts re-derived with the plan's `inputs` (the committed jobs and roots) and write
    OUT/replicates-checks.json: {name: {"expected", "actual", "equal"}} for each input present so far."""
    inputs = read_plan(plan_file).inputs
    checks = {}
    adaptive = out / "adaptive" / "prepared"
    if (adaptive / "prepared.json").is_file():
        checks["adaptive_job_digest"] = _check(inputs.adaptive_job_digest, load_prepared(adaptive).job_digest)
    study = out / "study" / "prepared" / "prepared.json"
    if study.is_file():
        files = load_json_strict(study)["files"]
        for name, want in inputs.study_prepared_files.items():
            checks[f"study_prepared:{name}"] = _check(want, files.get(name))
    for run_id, want in {**inputs.a_endpoint_roots, **inputs.study_committed_roots}.items():
        try:
            got = RecordedRoots(runs_dir).endpoint(run_id)
        except (DemoStopped, FileNotFoundError, ValueError):
            continue
        checks[f"root:{run_id}"] = _check(want, got)
    write_canonical_json(out / "replicates-checks.json", {name: c.to_json() for name, c in checks.items()})
    return checks


def run_part(part: str, out: Path, seed: Path, runs_dir: Path, scale: str = "medium", replicates=(1, 2),
             public_source: Path | None = None, plan_file: Path | None = None, arms=STUDY_ARMS,
             run_prefix: str | None = None, fixed: str | None = None, train_only: bool = False) -> int:
    """Run one part's steps (kit.demo's chains: steps marked concurrent start together); 0 when every step
    completed, 1 otherwise. The plan as executed and the steps' times go to OUT/replicates-<part>-*.json."""
    ensure_runtime()
    out, runs_dir = Path(out), Path(runs_dir)
    out.mkdir(parents=True, exist_ok=True)
    # a ledger of the campaign's own, and no bars in executed notebooks: for this part only (a caller in the
    # same process, a test, keeps its environment)
    with temporary_environ({LEDGER_ENV: str(demo_ledger(out, runs_dir).absolute()), "KIT_PROGRESS": "0"}):
        return _run_steps(part, out, seed, runs_dir, scale, replicates, public_source, plan_file, arms, run_prefix,
                          fixed, train_only)


def _run_steps(part: str, out: Path, seed: Path, runs_dir: Path, scale: str, replicates, public_source,
               plan_file, arms, run_prefix, fixed, train_only) -> int:
    notebooks = repository_root() / "notebooks"
    plan: list[dict] = []
    timing: list[dict] = []
    stopped = None

    class _Quiet:
        def write(self, line):
            print(line, flush=True)

        def update(self):
            pass

    steps = replicate_steps(part, out, seed, RecordedRoots(runs_dir), scale, replicates, public_source, arms,
                            run_prefix, fixed, train_only)
    try:
        for chain in step_chains(steps):
            plan += [{"notebook": shown_path(notebooks / s.notebook), "run_id": s.run_id, "parameters": s.parameters}
                     for s in chain]
            write_canonical_json(out / f"replicates-{part}-plan.json", plan)
            stopped = _note_outcomes(_run_chain(chain, notebooks, runs_dir, out), timing, _Quiet(), runs_dir)
            write_canonical_json(out / f"replicates-{part}-timing.json", {"steps": timing})
            if stopped:
                break
    except Exception as e:  # noqa: BLE001 - a root the part needs is missing: said, and the part fails
        stopped = ("", str(e))
    if stopped:
        print(f"replicates {part}: stopped: {stopped[1]}", file=sys.stderr)
    if plan_file is not None:
        for name, check in record_checks(Path(plan_file), out, runs_dir).items():
            print(f"check {name}: {'equal' if check.equal else 'DIFFERS'}", flush=True)
    return 1 if stopped or any(t["status"] == "failed" for t in timing) else 0


def _prepared_task_digests(out: Path) -> set[str]:
    """The task digests of the prepared jobs' files under OUT (study and adaptive): never part of a fresh set."""
    digests = set()
    for path in sorted([*(out / "study" / "prepared").glob("*.jsonl"), *(out / "adaptive" / "prepared").rglob("*.jsonl")]):
        for line in path.read_text(encoding="utf-8").splitlines():  # a digest excluded in excess only shrinks the pool
            row = json.loads(line) if line.strip() else None
            for holder in (row, row.get("meta")) if isinstance(row, dict) else ():
                if isinstance(holder, dict) and isinstance(holder.get("digest"), str):
                    digests.add(holder["digest"])
    return digests


def _final_home(lay: _Layout, run_id: str) -> Path:
    """The home a design's replicate run committed into (this layout's folders; the run id's tail names it)."""
    study = re.search(r"study-(\w+)-r(\d+)$", run_id)
    if study:
        return arm_dir(lay.study, study.group(1), int(study.group(2))) / "home"
    pair = re.search(r"adaptive-B-(control|growth)-r(\d+)$", run_id)
    assert pair is not None, f"{run_id}: a replicate run id names a study arm or a cohort B pair"
    return lay.ad / f"{'B' if pair.group(1) == 'control' else 'G'}-r{pair.group(2)}"


def design_part_problem(design: ReplicateDesign, path: Path, part: str, replicates, arms) -> str | None:
    """Why a design's part may not run these replicates (None: it may): the stopping rule's indexes only
    (`replicates`: 0..k-1 per group, none beyond k), the design's study arms only, and the design's GPU mode set
    in this process's environment (its `gpu_mode` variables; the re-derived inputs, prepare and a-endpoint,
    replay the committed runs' mode and are exempt)."""
    if part in ("study-r0", "finals"):
        return f"{path}: part {part!r} has no place in a design's campaign; expected study/study-dev with index 0"
    if part not in ("study", "study-dev", "growth"):
        return None
    group, allowed = (("study", design.replicates.study) if part != "growth" else
                      ("growth_vs_control", design.replicates.growth_vs_control))
    beyond = [k for k in replicates if k not in allowed]
    if beyond:
        return (f"{path}: field 'replicates.{group}' = {list(allowed)}; replicate {beyond[0]} is not among them (the "
                "stopping rule: no replicate beyond k)")
    if group == "study":
        named = {a.split("/", 1)[1] for a in design.k if a.startswith("study/")}
        extra = [a for a in arms if a not in named]
        if extra:
            return f"{path}: field 'k' has no 'study/{extra[0]}'; expected the design's arms {sorted(named)}"
    for var, want in design.gpu_mode.items():
        if var != "applies_to" and os.environ.get(var) != want:
            return (f"{path}: field 'gpu_mode.{var}' = {want!r}; the environment has {os.environ.get(var)!r} "
                    "(every replicate and scoring runs in the design's mode)")
    return None


def _final_labels(d: ReplicateDesign, name: str) -> list[str]:
    """The labels scored on the design's set `name`: its replicate runs, and the seed on the study's set."""
    return set_runs(d, name) + (["seed"] if name == "study" else [])


def run_finals(design_path: Path, out: Path, seed: Path, runs_dir: Path, scale: str = "medium", labels=None,
               rederived: Path | None = None, scores_dir: Path | None = None) -> dict:
    """The design's fresh final sets (kit/evidence/replicate_design.py): refused until every replicate run is
    committed in RUNS; then each set opened once through `score_final_set`, every replicate's endpoint (and the
    seed, the study's baseline) scored on it once into OUT/finals/<set>/<label>.json, and the analysis
    (`analyse_final`) written to OUT/replicates-final-analysis.json and returned.

    `labels`: score only these (a batch: the endpoints re-derived on this host; the set opens at the first batch
    and is read back at the later ones); `rederived`: the runs directory that re-derived them, each endpoint root
    checked equal to the committed run's before it is scored. The analysis follows the batch that scores the
    last label; before it, {"scored": n, "of": total, "questions": []} is returned. `scores_dir` (default
    OUT/finals): where the score files go (the campaign's committed folder), pinned by its SHA256SUMS (`sha256sum -c`
    format), written again after every batch."""
    out, runs_dir, seed = Path(out), Path(runs_dir), Path(seed)
    scores_dir = Path(scores_dir) if scores_dir is not None else out / "finals"
    scores_dir.mkdir(parents=True, exist_ok=True)
    d = read_design(design_path)
    lay = _Layout(scale, out, seed, d.run_prefix)
    ledger = demo_ledger(out, runs_dir)
    check_committed(Path(design_path), d, ", ".join(d.final_sets), runs_dir)
    roots, root = RecordedRoots(runs_dir), repository_root()
    study = load_study_contract(root / lay.sc.study_contract).terms
    adaptive = load_adaptive_contract(root / lay.sc.adaptive_contract).terms
    excluded = _seed_task_digests(seed)[0] | _prepared_task_digests(out)
    device = lay.device.get("DEVICE", "cpu")
    unknown = sorted(set(labels or ()) - {lab for n in d.final_sets for lab in _final_labels(d, n)})
    if unknown:
        raise DesignError(f"{design_path}: label {unknown[0]!r} is no run of its final sets; expected a replicate run "
                          "id of the design or 'seed'")
    for name in d.final_sets:
        wanted = [lab for lab in _final_labels(d, name) if labels is None or lab in labels]
        if not wanted:
            continue
        models = {}
        for r in wanted:
            if r == "seed":
                models[r] = "seed"
                continue
            committed = roots.endpoint(r)
            if rederived is not None and RecordedRoots(Path(rederived)).endpoint(r) != committed:
                raise DesignError(f"{Path(rederived) / r}: endpoint root {RecordedRoots(Path(rederived)).endpoint(r)}; "
                                  f"expected the committed {committed} ({runs_dir / r}): not re-derived bit for bit")
            models[r] = f"{shown_path(_final_home(lay, r))}:{committed}"
        if name == "study":
            score = final_scorer(seed, study.data.max_tokens, study.evaluation.max_new_tokens, device)
        else:
            score = final_scorer(seed, adaptive.training.max_tokens, adaptive.evaluation.max_new_tokens, device)
        score_final_set(design_path, name, runs_dir, ledger, models, score, scores_dir / name, excluded,
                        batch=labels is not None)
    files = {name: sorted((scores_dir / name).glob("*.json")) for name in d.final_sets}
    (scores_dir / "SHA256SUMS").write_text("".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {name}/{p.name}\n"
                                                   for name, ps in files.items() for p in ps), encoding="utf-8")
    scores = {name: {p.stem: load_json_strict(p) for p in ps} for name, ps in files.items()}
    total = sum(len(_final_labels(d, n)) for n in d.final_sets)
    scored = sum(len(v) for v in scores.values())
    if scored < total:
        return {"scored": scored, "of": total, "questions": []}
    result = analyse_final(FinalDesign.of(d), scores)
    write_canonical_json(out / "replicates-final-analysis.json", result)
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m kit.replicates", description=__doc__.split("\n\n")[0])
    p.add_argument("--part", required=True, choices=PARTS)
    p.add_argument("--scale", default="medium", choices=sorted(SCALES))
    p.add_argument("--out", required=True, help="the campaign's work folder (OUT/study, OUT/adaptive)")
    p.add_argument("--seed", required=True, help="the seed folder (built to the contracts' pin)")
    p.add_argument("--runs-dir", required=True, help="where the run records go")
    p.add_argument("--replicates", type=int, nargs="+", default=[1, 2], help="replicate indexes (> 0)")
    p.add_argument("--public-source", help="the pinned public source (default data/alpaca_5000.json)")
    p.add_argument("--arms", nargs="+", choices=STUDY_ARMS, default=list(STUDY_ARMS), help="the study arms (all)")
    p.add_argument("--plan", help="the committed plan whose `inputs` the re-derived jobs and roots are checked against")
    p.add_argument("--design", help="the frozen replicate design (kit-replicate-design/1): its run prefix names the "
                                    "runs, its indexes bound --replicates, its GPU mode is required; --part finals: "
                                    "whose fresh final sets open")
    p.add_argument("--labels", nargs="+", help="--part finals: score only these (run ids, 'seed'): a batch")
    p.add_argument("--scores", help="--part finals: the score files' folder (default OUT/finals)")
    p.add_argument("--rederived", help="--part finals: the runs directory that re-derived the batch's endpoints")
    p.add_argument("--train-only", action="store_true", help="--part growth: the pair only, no development scoring "
                                                             "(a finals block re-deriving endpoints)")
    p.add_argument("--fixed", help="with --design: the run-id stem of the re-derived inputs (prepare, a-endpoint), "
                                   "one per session (default: the design's run_prefix + 'inputs')")
    a = p.parse_args(argv)
    if a.part == "finals":
        if not a.design:
            print("python -m kit.replicates --part finals: --design missing; expected the frozen design's path",
                  file=sys.stderr)
            return 2
        try:
            result = run_finals(Path(a.design), Path(a.out), Path(a.seed), Path(a.runs_dir), a.scale, a.labels,
                                Path(a.rederived) if a.rederived else None, a.scores)
        except (DesignError, DemoStopped, ValueError) as e:
            print(f"python -m kit.replicates --part finals: {e}", file=sys.stderr)
            return 2
        if not result["questions"]:
            print(f"final scores: {result['scored']} of {result['of']}; the analysis follows the last")
        print("\n".join(q["reading"] for q in result["questions"]))
        return 0
    if a.design:
        try:
            design = read_design(a.design)
        except DesignError as e:
            print(f"python -m kit.replicates: {e}", file=sys.stderr)
            return 2
        problem = (f"{a.design}: field 'scale' = {design.scale!r}; expected --scale {a.scale!r}"
                   if design.scale != a.scale else
                   design_part_problem(design, Path(a.design), a.part, a.replicates, a.arms))
        if problem:
            print(f"python -m kit.replicates --part {a.part}: {problem}", file=sys.stderr)
            return 2
        return run_part(a.part, Path(a.out), Path(a.seed), Path(a.runs_dir), a.scale, a.replicates, a.public_source,
                        a.plan, a.arms, design.run_prefix, a.fixed or f"{design.run_prefix}inputs",
                        a.train_only)
    if any(k < 1 for k in a.replicates) and a.part in ("study", "growth", "study-dev"):
        print(f"python -m kit.replicates: --replicates {a.replicates}: expected indexes > 0 (replicate 0 is the "
              "committed run; --part study-r0 repeats it)", file=sys.stderr)
        return 2
    return run_part(a.part, Path(a.out), Path(a.seed), Path(a.runs_dir), a.scale, a.replicates, a.public_source,
                    a.plan, a.arms)


if __name__ == "__main__":
    sys.exit(main())
