"""The campaign of a frozen replicate design (kit-replicate-design/1) in blocks: one block is one device session
(a fresh machine, at most `SESSION_S` device seconds, calls of at most `CALL_S`), planned from the design's measured
durations (`gpu_time.measured`); one block runs per invocation and resumes from committed runs.

    python -m kit.replicate_campaign plan --design D [--runs-dir runs] [--scores DIR]   the blocks left, printed
    python -m kit.replicate_campaign run --design D --block N --out W --seed S --runs-dir R [--scores DIR] [--dry-run]

The decision to know: the plan is made over what is *not yet completed* (a replicate index is done when its trainings
and their development scorings all completed after the design froze; a final label when its score file exists), so a
block cut off midway is planned again with only what is missing, and nothing beyond the design's indexes ever runs.
"""

# Notes. Each part runs as its own `python -m kit.replicates --design` process (which refuses an index beyond k, another
# GPU mode or scale): replicates and scorings with the design's `gpu_mode` set, the re-derived inputs (prepare, cohort
# A's endpoint: replays of committed runs) with it unset, every part on the ledger beside the committed runs. A host
# keeps no checkpoint of an earlier session, so a training committed but not scored is re-derived (same parts and mode,
# into OUT/rederived-runs) before its scoring, and the finals blocks, planned once every replicate is committed,
# re-derive the endpoints they score; the fresh final sets open at the first batch (open_final_set's guard) and are read
# back at the later ones (`score_final_set(batch=True)`), each label scored once.

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from kit.demo import demo_ledger
from kit.digest import load_json_strict, write_canonical_json
from kit.evidence.ledger import LEDGER_ENV
from kit.evidence.replicate_design import (
    DesignError,
    MeasuredPart,
    ReplicateDesign,
    committed_problems,
    read_design,
)
from kit.record import Num, Record, Seq, spec_field
from kit.replicates import _Layout
from kit.study.arms import arm_dir

SESSION_S, CALL_S = 1800, 600
FOLLOW_S = 570  # a follow call's wait: the call's limit less the packing of what comes back
SIDE_BY_SIDE = 6  # study arms trained at once in one wave (measured: six in 130-161 s)


Span = tuple[float, float]  # [low, high] device seconds of a step, a unit or a block
NOTHING: Span = (0.0, 0.0)


@dataclass(frozen=True, slots=True)
class MeasuredSeconds:
    """The design's `gpu_time.measured` durations the plan needs, each [low, high] seconds."""
    machine_start: Span
    seed_rebuild: Span
    prepare_both_jobs: Span
    cohort_a_endpoint: Span
    six_study_arms_side_by_side: Span
    growth_pair_side_by_side: Span
    scoring: Span


def _span(part: MeasuredPart, name: str, path: Path) -> Span:
    if len(part.seconds) != 2:
        raise DesignError(f"{path}: field 'gpu_time.measured.{name}.seconds' = {list(part.seconds)!r}; expected "
                          "[low, high] seconds")
    return float(part.seconds[0]), float(part.seconds[1])


def measured(design: ReplicateDesign, path: Path) -> MeasuredSeconds:
    """The design's `gpu_time.measured` [low, high] seconds (read_design checked that every name is there)."""
    m = design.gpu_time.measured
    return MeasuredSeconds(
        machine_start=_span(m.machine_start, "machine_start", path),
        seed_rebuild=_span(m.seed_rebuild, "seed_rebuild", path),
        prepare_both_jobs=_span(m.prepare_both_jobs, "prepare_both_jobs", path),
        cohort_a_endpoint=_span(m.cohort_a_endpoint, "cohort_a_endpoint", path),
        six_study_arms_side_by_side=_span(m.six_study_arms_side_by_side, "six_study_arms_side_by_side", path),
        growth_pair_side_by_side=_span(m.growth_pair_side_by_side, "growth_pair_side_by_side", path),
        scoring=_span(m.scoring, "scoring", path))


@dataclass(frozen=True, slots=True)
class Unit:
    """A whole unit of work a block packs: a study wave or a growth pair with its scorings, or the seed scored."""
    kind: str  # "study", "growth" or "seed"
    indexes: tuple[int, ...]  # the replicate indexes it trains (or re-derives)
    seconds: Span
    what: str  # the step in words, as the plan prints it
    with_seed: bool = False  # a finals study wave that also scores the seed


@dataclass(frozen=True, slots=True, kw_only=True)
class Block(Record):
    """One device session of the plan (`plan_blocks`), also the `block` of OUT/confirm-block-<n>.json."""
    study: tuple[int, ...] = spec_field(Seq(Num(0, integer=True)), doc="study replicate indexes")
    growth: tuple[int, ...] = spec_field(Seq(Num(0, integer=True)), doc="growth pair replicate indexes")
    seed: bool = spec_field(bool, doc="the seed scored on the fresh final set")
    finals: bool = spec_field(bool, doc="a finals block (re-derive and score) rather than a training one")
    seconds: Span = spec_field(Seq(float, min_len=2), doc="[low, high] device seconds")
    steps: tuple[str, ...] = spec_field(Seq(str), doc="the steps in words")
    block: int = spec_field(Num(1, integer=True), doc="its number in the plan")
    calls: int = spec_field(Num(1, integer=True), doc="device calls it takes")


def _done(runs_dir: Path, run_id: str, frozen_at: str) -> bool:
    rec = runs_dir / run_id / "run.json"
    if not rec.is_file():
        return False
    data = load_json_strict(rec)
    return data.get("status") == "completed" and str(data.get("started_at", "")) >= frozen_at


def study_arms(design: ReplicateDesign) -> list[str]:
    return [a.split("/", 1)[1] for a in sorted(design.k) if a.startswith("study/")]


def index_runs(design: ReplicateDesign, group: str, k: int) -> list[str]:
    """The runs that make replicate index k of `group` done: its training runs and their development scorings."""
    p = design.run_prefix
    if group == "study":
        return [f"{p}study{kind}-{arm}-r{k}" for arm in study_arms(design) for kind in ("", "-dev")]
    return [f"{p}adaptive-{r}-r{k}" for r in ("B-control", "B-growth", "dev-B", "dev-G")]


def trained(design: ReplicateDesign, runs_dir: Path | None, group: str, k: int) -> list[str]:
    """The training runs of index k already completed in `runs_dir` (the rest of the index not): a host of a later
    session lacks their checkpoint homes, which their development scorings read, so the block re-derives them."""
    if runs_dir is None:
        return []
    return [r for r in index_runs(design, group, k) if "-dev-" not in r and _done(runs_dir, r, design.frozen.at)]


@dataclass(frozen=True, slots=True)
class Pending:
    """The replicate indexes left to train (`pending`) or to score on the fresh final sets (`finals_pending`)."""
    study: list[int]
    growth: list[int]
    seed: bool = False  # the seed not yet scored (finals only)


def pending(design: ReplicateDesign, runs_dir: Path | None) -> Pending:
    """The design's replicate indexes not yet done in `runs_dir` (every index when None), in order; never an
    index outside the design's `replicates`."""
    frozen = design.frozen.at

    def left(group: str, indexes: tuple[int, ...]) -> list[int]:
        return [k for k in indexes if runs_dir is None or
                not all(_done(runs_dir, r, frozen) for r in index_runs(design, group, k))]

    return Pending(study=left("study", design.replicates.study),
                   growth=left("growth", design.replicates.growth_vs_control))


def finals_pending(design: ReplicateDesign, scores_dir: Path | None) -> Pending:
    """What is not yet scored on the fresh final sets, by replicate index (an index is left while any of its runs
    lacks a score file in `scores_dir`), and whether the seed is."""
    p = design.run_prefix

    def scored(name: str, label: str) -> bool:
        return scores_dir is not None and (scores_dir / name / f"{label}.json").is_file()

    final_sets, replicates = design.final_sets, design.replicates
    study = [k for k in replicates.study if "study" in final_sets
             and not all(scored("study", f"{p}study-{a}-r{k}") for a in study_arms(design))]
    growth = [k for k in replicates.growth_vs_control if "growth" in final_sets
              and not all(scored("growth", f"{p}adaptive-B-{side}-r{k}") for side in ("control", "growth"))]
    return Pending(study=study, growth=growth, seed="study" in final_sets and not scored("study", "seed"))


def _add(a: Span, b: Span, times: float = 1) -> Span:
    return (a[0] + b[0] * times, a[1] + b[1] * times)


def _units(m: MeasuredSeconds, arms: list[str], study: list[int], growth: list[int], finals: bool,
           seed: bool) -> list[Unit]:
    """Whole units of work: a study wave (up to six arms side by side, whole replicate indexes of every arm) and a
    growth pair (side by side), each followed by its scorings: the development ones when training, one fresh
    final scoring per endpoint when re-deriving for the finals (the seed's with the first wave)."""
    per_wave = max(1, SIDE_BY_SIDE // max(1, len(arms)))
    units = []
    for i in range(0, len(study), per_wave):
        ks = tuple(study[i:i + per_wave])
        with_seed = finals and seed and i == 0
        n = len(ks) * len(arms) + (1 if with_seed else 0)
        what = "re-derived, each scored on the fresh final set" if finals else "their development scorings"
        units.append(Unit("study", ks, _add(m.six_study_arms_side_by_side, m.scoring, n),
                          f"study r{','.join(map(str, ks))}: {len(ks) * len(arms)} arms side by side, {what}"
                          + (" (and the seed)" if with_seed else ""), with_seed=with_seed))
    if finals and seed and not study:
        units.append(Unit("seed", (), m.scoring, "the seed scored"))
    for k in growth:
        what = "re-derived, both scored on the fresh final set" if finals else "dev-B and dev-G"
        units.append(Unit("growth", (k,), _add(m.growth_pair_side_by_side, m.scoring, 2),
                          f"growth pair r{k}: control and growth side by side, {what}"))
    return units


@dataclass
class _Packing:
    """A block being packed (`_pack`): mutable until the plan numbers it."""
    seconds: Span
    steps: list[str]
    study: list[int]
    growth: list[int]
    seed: bool = False


def _pack(units: list[Unit], m: MeasuredSeconds, session_s: float, finals: bool) -> list[_Packing]:
    fixed = _add(_add(m.machine_start, m.seed_rebuild), m.prepare_both_jobs)
    blocks: list[_Packing] = []
    cur = None
    for u in units:
        a_end = m.cohort_a_endpoint if u.kind == "growth" and (cur is None or not cur.growth) else NOTHING
        if cur is None or cur.seconds[1] + a_end[1] + u.seconds[1] > session_s:
            cur = _Packing(fixed, ["machine start", "seed rebuild", "prepare both jobs"], [], [])
            blocks.append(cur)
            a_end = m.cohort_a_endpoint if u.kind == "growth" else NOTHING
        if any(a_end):
            cur.steps.append("cohort A's endpoint")
            cur.seconds = _add(cur.seconds, a_end)
        if u.kind == "seed" or (finals and u.with_seed):
            cur.seed = True
        if u.kind == "study":
            cur.study += u.indexes
        elif u.kind == "growth":
            cur.growth += u.indexes
        cur.seconds = _add(cur.seconds, u.seconds)
        cur.steps.append(u.what)
    return blocks


def plan_blocks(design: ReplicateDesign, path: Path, runs_dir: Path | None = None, scores_dir: Path | None = None,
                session_s: float = SESSION_S) -> list[Block]:
    """The blocks left to run, in order: the training blocks over the replicate indexes not yet done in
    `runs_dir`, then the finals blocks over what `scores_dir` does not hold yet. Each session pays the fixed part
    (machine start, seed rebuild, both preparations; cohort A's endpoint once where it trains growth pairs), then
    packs whole units (`_units`) while its *high* estimate stays within `session_s`. A finals block re-derives the
    endpoints it scores (the same parts, in the design's mode, into a runs directory of its own; each root must
    equal the committed one), because a host holds neither the earlier sessions' checkpoints nor room for all."""
    m = measured(design, path)
    arms = study_arms(design)
    todo = pending(design, runs_dir)
    units = _units(m, arms, todo.study, todo.growth, False, False)
    for i, u in enumerate(units):  # an index cut off between its training and its scorings: re-derived first
        if any(trained(design, runs_dir, "study" if u.kind == "study" else "growth", k) for k in u.indexes):
            again = m.six_study_arms_side_by_side if u.kind == "study" else m.growth_pair_side_by_side
            units[i] = replace(u, seconds=_add(u.seconds, again),
                               what=u.what + " (the committed trainings re-derived first)")
    left = finals_pending(design, scores_dir)
    packed = [(False, b) for b in _pack(units, m, session_s, False)]
    packed += [(True, b) for b in _pack(_units(m, arms, left.study, left.growth, True, left.seed), m, session_s,
                                        True)]
    return [Block(study=tuple(b.study), growth=tuple(b.growth), seed=b.seed, finals=finals, seconds=b.seconds,
                  steps=tuple(b.steps), block=i, calls=1 + math.ceil(max(0.0, b.seconds[1] - CALL_S) / FOLLOW_S))
            for i, (finals, b) in enumerate(packed, 1)]


def render(design: ReplicateDesign, blocks: list[Block]) -> str:
    total = [sum(b.seconds[0] for b in blocks), sum(b.seconds[1] for b in blocks)]
    lines = [(f"design {design.name} (run prefix {design.run_prefix}): {len(blocks)} block(s), one session "
              f"each (<= {SESSION_S} s, calls <= {CALL_S} s)")]
    for b in blocks:
        lines.append(f"block {b.block} ({'finals' if b.finals else 'training'}): {b.seconds[0] / 60:.1f}-"
                     f"{b.seconds[1] / 60:.1f} device min, {b.calls} device call(s); study {list(b.study) or '-'}, "
                     f"growth {list(b.growth) or '-'}{', seed' if b.seed else ''}")
        lines += [f"  - {s}" for s in b.steps]
    lines.append(f"total: {total[0] / 60:.1f}-{total[1] / 60:.1f} device min in {len(blocks)} session(s)")
    return "\n".join(lines)


def _homes(design: ReplicateDesign, out: Path, study: Sequence[int] = (), growth: Sequence[int] = ()) -> list[Path]:
    """The checkpoint homes the units of these replicate indexes fill (removed once scored: a host's disk holds
    few)."""
    homes = [arm_dir(out / "study", arm, k) / "home" for k in study for arm in study_arms(design)]
    return homes + [out / "adaptive" / f"{h}-r{k}" for k in growth for h in ("B", "G")]


def part_commands(design_path: Path, design: ReplicateDesign, block: Block, out: Path, seed: Path, runs_dir: Path,
                  scale: str, fixed: str, scores_dir: Path) -> list[tuple[dict, list[str]]]:
    """The block's steps in order: (environment changes {var: value, or None: unset}, argv), ({}, ["rm",
    paths...]) for the homes a finals block removes once scored, or ({}, ["copy", into, run folders...])."""
    py = [sys.executable, "-m", "kit.replicates", "--scale", scale, "--out", str(out), "--seed", str(seed),
          "--design", str(design_path)]
    made = Path(out) / "rederived-runs" if block.finals else runs_dir  # a finals block's own runs directory
    base = [*py, "--runs-dir", str(made), "--fixed", fixed]
    # one ledger for every part, the one beside the committed runs (kit.demo.demo_ledger): a finals block's own runs
    # folder would otherwise give its preparations another, and the re-derived jobs (and roots) would differ
    ledger = {LEDGER_ENV: str(demo_ledger(out, runs_dir).absolute())}
    mode: dict[str, str | None] = {**ledger, **{v: w for v, w in design.gpu_mode.items() if v != "applies_to"}}
    replay = {**ledger, **dict.fromkeys(set(mode) - set(ledger))}  # the re-derived inputs replay the committed
    # runs' mode: unset
    arms = ["--arms", *study_arms(design)]
    p = design.run_prefix
    cmds = [(replay, [*base, "--part", "prepare"])]
    if block.growth:
        cmds.append((replay, [*base, "--part", "a-endpoint"]))
    # a training block: indexes cut off between training and scoring get their committed trainings re-derived (same
    # parts and mode) into a runs folder of their own, which first receives this session's re-derived inputs
    redo = Path(out) / "rederived-runs"
    half = {} if block.finals else {
        (g, k): trained(design, runs_dir, g, k) for g, ks in (("study", block.study), ("growth", block.growth))
        for k in ks}
    half = {gk: runs for gk, runs in half.items() if runs}
    for (g, k), runs in half.items():
        if g == "growth" and len(runs) != 2:
            raise DesignError(f"{runs_dir / runs[0]}: completed, the other side of growth pair r{k} not; expected "
                              "both sides completed or neither (re-deriving one side alone is not supported)")
    if half:
        lay = _Layout(scale, Path(out), Path(seed), design.run_prefix, fixed)
        inputs = [f"{fixed}-study-prepare", f"{fixed}-adaptive-prepare"] + ([lay.a_mid, lay.a_end]
                                                                            if block.growth else [])
        cmds.append(({}, ["copy", str(redo), *(str(Path(runs_dir) / r) for r in inputs)]))
    again = [*py, "--runs-dir", str(redo), "--fixed", fixed]
    finals = [*py, "--runs-dir", str(runs_dir), "--part", "finals", "--scores", str(scores_dir), "--rederived",
              str(made), "--labels"]
    if block.finals and block.seed and not block.study:
        cmds.append((mode, [*finals, "seed"]))
    per_wave = max(1, SIDE_BY_SIDE // max(1, len(study_arms(design))))
    for i in range(0, len(block.study), per_wave):
        ks = block.study[i:i + per_wave]
        for k in ks:
            done = [r.rsplit("-r", 1)[0].rsplit("-", 1)[1] for r in half.get(("study", k), [])]
            if done:
                cmds.append((mode, [*again, "--part", "study", "--replicates", str(k), "--arms", *done]))
        cmds.append((mode, [*base, "--part", "study", "--replicates", *map(str, ks), *arms]))
        if block.finals:
            labels = [f"{p}study-{a}-r{k}" for k in ks for a in study_arms(design)]
            cmds.append((mode, [*finals, *labels, *(["seed"] if block.seed and i == 0 else [])]))
            cmds.append(({}, ["rm", *map(str, _homes(design, out, study=ks))]))
        else:  # then the homes go: nothing later reads them, and a host's disk holds about six
            cmds.append((mode, [*base, "--part", "study-dev", "--replicates", *map(str, ks), *arms]))
            cmds.append(({}, ["rm", *map(str, _homes(design, out, study=ks))]))
    for k in block.growth:
        if ("growth", k) in half:
            cmds.append((mode, [*again, "--part", "growth", "--replicates", str(k), "--train-only"]))
        cmds.append((mode, [*base, "--part", "growth", "--replicates", str(k),
                            *(["--train-only"] if block.finals else [])]))
        if block.finals:
            cmds.append((mode, [*finals, *(f"{p}adaptive-B-{s}-r{k}" for s in ("control", "growth"))]))
        cmds.append(({}, ["rm", *map(str, _homes(design, out, growth=[k]))]))
    return cmds


def run_block(design_path: Path, number: int, out: Path, seed: Path, runs_dir: Path, scores_dir: Path | None = None,
              scale: str | None = None, tag: str | None = None, dry_run: bool = False, execute=None) -> int:
    """Run block `number` of the plan over what `runs_dir` and `scores_dir` (default OUT/finals) hold now; 0 when
    every step succeeded. The block, its steps and their exit codes go to OUT/confirm-block-<n>.json.
    `execute(env_changes, argv) -> rc` (default: a subprocess) is the seam the tests use."""
    design = read_design(design_path)
    scores_dir = Path(scores_dir) if scores_dir is not None else Path(out) / "finals"
    blocks = plan_blocks(design, design_path, runs_dir, scores_dir)
    if not 1 <= number <= len(blocks):
        print(f"{design_path}: block {number}; expected 1..{len(blocks)} of the plan over {runs_dir} (what is "
              "left)", file=sys.stderr)
        return 2
    block = blocks[number - 1]
    if block.finals:
        missing = committed_problems(design, runs_dir)
        if missing:
            print(f"{design_path}: block {number} is a finals block; the fresh final sets stay closed: "
                  f"{len(missing)} of the design's runs are not completed in {runs_dir} (first: {missing[0]}); "
                  "expected every replicate committed first", file=sys.stderr)
            return 2
    fixed = f"{design.run_prefix}{tag or f'b{number}'}"
    cmds = part_commands(design_path, design, block, Path(out), Path(seed), Path(runs_dir), scale or design.scale,
                         fixed, scores_dir)
    print(render(design, [block]), flush=True)
    steps: list[dict] = []  # each step's environment changes, argv and exit code, as run

    def subprocess_execute(changes: dict, argv: list[str]) -> int:
        env = {k: v for k, v in os.environ.items() if k not in changes or changes[k] is not None}
        env.update({k: v for k, v in changes.items() if v is not None})
        return subprocess.run(argv, env=env, check=False).returncode

    execute = execute or subprocess_execute
    rc = 0
    Path(out).mkdir(parents=True, exist_ok=True)
    for changes, argv in cmds:
        shown = " ".join([*(f"{k}={v}" if v is not None else f"-u {k}" for k, v in changes.items()),
                          *(argv[1:] if argv[0] == sys.executable else argv)])
        print(f"step: {shown}", flush=True)
        if dry_run:
            got = None
        elif argv[0] == "copy":
            missing = [src for src in argv[2:] if not Path(src).is_dir()]
            for src in map(Path, argv[2:]):
                if src.is_dir():
                    shutil.copytree(src, Path(argv[1]) / src.name, dirs_exist_ok=True)
            if missing:
                print(f"{missing[0]}: no such run folder; expected this session's re-derived input", file=sys.stderr)
            got = 1 if missing else 0
        elif argv[0] == "rm":
            for home in map(Path, argv[1:]):
                if Path(out).resolve() not in home.resolve().parents:
                    raise DesignError(f"{home}: a home to remove outside OUT {out}; expected one under it")
                shutil.rmtree(home, ignore_errors=True)
            got = 0
        else:
            got = execute(changes, argv)
        steps.append({"env": changes, "argv": argv[1:] if argv[0] == sys.executable else argv, "rc": got})
        write_canonical_json(Path(out) / f"confirm-block-{number}.json",
                             {"block": block.to_json(), "fixed": fixed, "steps": steps})
        rc = rc or (got or 0)
        if got and block.finals:  # a batch not scored keeps its homes: nothing later may score them twice
            break
    return 1 if rc else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m kit.replicate_campaign",
                                description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pl = sub.add_parser("plan", allow_abbrev=False, help="print the block plan over what the runs directory holds")
    pl.add_argument("--design", required=True)
    pl.add_argument("--runs-dir", help="the committed runs (default: every index left)")
    pl.add_argument("--scores", help="the committed fresh-final score files (default: none scored)")
    r = sub.add_parser("run", allow_abbrev=False, help="run one block of the plan")
    r.add_argument("--design", required=True)
    r.add_argument("--block", type=int, default=1, help="the block of the plan over --runs-dir (1: the next)")
    r.add_argument("--out", required=True)
    r.add_argument("--seed", required=True)
    r.add_argument("--runs-dir", required=True)
    r.add_argument("--scores", help="the fresh-final score files (default OUT/finals)")
    r.add_argument("--scale", help="default: the design's")
    r.add_argument("--tag", help="the re-derived inputs' run-id stem after the prefix (default b<block>); one per "
                                 "session")
    r.add_argument("--dry-run", action="store_true", help="print the parts, run nothing")
    a = p.parse_args(argv)
    try:
        if a.cmd == "plan":
            design = read_design(a.design)
            print(render(design, plan_blocks(design, Path(a.design), Path(a.runs_dir) if a.runs_dir else None,
                                             Path(a.scores) if a.scores else None)))
            return 0
        return run_block(Path(a.design), a.block, Path(a.out), Path(a.seed), Path(a.runs_dir),
                         Path(a.scores) if a.scores else None, a.scale, a.tag, a.dry_run)
    except DesignError as e:
        print(f"python -m kit.replicate_campaign: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
