"""What `kit digest`, `kit status`, `kit seed`, `kit checkpoint` (replay included), `kit plan` and `kit demo` run
(their parsers: kit/cli/__init__.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from kit.adaptive.replay import replay
from kit.cli.args import printable
from kit.demo import run_demo
from kit.inventory import parameter_digest
from kit.model.config import load_config
from kit.planner import MemoryModel, MicrobatchShape, Plan, WorkerCapacity, plan, shape_with_growth
from kit.seed.build import SeedBuildConfig, build_seed, describe_seed
from kit.seed.small import SmallSeedConfig, build_small_seed
from kit.sizes import format_gib
from kit.status import render, status
from kit.store import commits, export
from kit.store.commits import resolve_root


def _print_json(obj) -> None:
    print(json.dumps(obj, sort_keys=True))


def cmd_digest(a) -> int:
    print(parameter_digest(a.dir))
    return 0


def cmd_seed_build(a) -> int:
    if a.scale == "medium":
        if a.test_size:
            raise ValueError("--test-size is for --scale tiny; a short medium build takes --config FILE "
                             "(a JSON object of SmallSeedConfig fields, e.g. {\"max_updates\": 50})")
        cfg = SmallSeedConfig.from_json(a.config) if a.config else SmallSeedConfig.small()
        repo = Path(__file__).resolve().parents[3]  # the defaults travel in the repository, whatever the cwd
        _print_json(build_small_seed(Path(a.out), cfg, device=a.device,
                                     alpaca=Path(a.public_source or repo / "data" / "alpaca_5000.json"),
                                     text=Path(a.general_text or repo / "data" / "python3.11-doc.jsonl.xz"),
                                     contracts_dir=Path(a.contracts or repo / "contracts"),
                                     progress=not a.no_progress))
        return 0
    for flag, value, default in (("--config", a.config, None), ("--device", a.device, "cpu")):
        if value != default:
            raise ValueError(f"{flag} {value}: only with --scale medium (the tiny seed is built on the CPU with its own config)")
    tiny_cfg = SeedBuildConfig.tiny() if not a.test_size else SeedBuildConfig.test()
    _print_json(build_seed(Path(a.out), tiny_cfg, progress=not a.no_progress))
    return 0


def cmd_status(a) -> int:
    report = status(a.path)
    print(json.dumps(report.to_json(), indent=1, sort_keys=True) if a.json else printable(render(report)))  # a run.json's text, escaped
    return 0


def cmd_seed_show(a) -> int:
    print(describe_seed(Path(a.dir)))
    return 0


def cmd_checkpoint_verify(a) -> int:
    _print_json(commits.verify_commit(a.home, commits.resolve_root(a.home, a.root) if a.root else None,
                                      check_model=True))
    return 0


def cmd_checkpoint_show(a) -> int:
    print(json.dumps(commits.read_commit(a.home, _root_or_head(a)), indent=1, sort_keys=True))
    return 0


def cmd_checkpoint_export(a) -> int:
    print(export.export_hf(a.home, _root_or_head(a), a.out, extra_files_dir=a.tokenizer_from))
    return 0


def cmd_checkpoint_gc(a) -> int:
    for path in commits.gc(a.home, unreferenced_objects=a.objects):
        print(path)
    return 0


def cmd_checkpoint_list(a) -> int:
    for line in commit_lines(a.home):
        print(line)
    return 0


def commit_lines(home) -> list[str]:
    """`kit checkpoint list`: one line per commit, oldest first: its full root, its step (and cohort step where
    the cursor has one), when its manifest was written (UTC) and HEAD marked."""
    head = commits.read_head(home)
    rows = []
    for root in commits.list_commits(home):
        path = commits.commits_dir(Path(home)) / f"{root}.json"
        try:
            cursor = commits.read_commit(home, root)["learned_state"]["cursor"]
            step = f"step {cursor.get('step')}" + (f" (cohort step {cursor['cohort_step']})"
                                                    if "cohort_step" in cursor else "")
        except (ValueError, KeyError, TypeError) as e:  # a damaged manifest is listed, with why
            cursor, step = {}, f"unreadable: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
        mtime = path.stat().st_mtime
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(mtime))
        rows.append(((cursor.get("step", -1), mtime), f"{root}  {step}  {when}" + ("  HEAD" if root == head else "")))
    return [line for _, line in sorted(rows, key=lambda r: r[0])]


def _root_or_head(a) -> str:
    """The commit a show or export names: ROOT when given, else the store's HEAD (as verify does)."""
    root = commits.resolve_root(a.home, a.root) if a.root else commits.read_head(a.home)
    if root is None:
        raise ValueError(f"{a.home}: the store has no HEAD (no commit yet); name a commit root, or make "
                         "one with `kit adaptive train`")
    return root


def cmd_plan(a) -> int:
    shape = load_config(a.config)
    if a.grow:
        shape = shape_with_growth(shape, a.grow)
    workers = [WorkerCapacity(f"worker{i}", mem, speed) for i, (mem, speed) in enumerate(a.worker)]
    model = MemoryModel(**a.memory_model) if a.memory_model else MemoryModel()
    mb = MicrobatchShape(a.batch, a.seq_len, a.in_flight)
    planned = plan(shape, workers, mb, model)
    if a.json:
        print(json.dumps(planned.to_json(), indent=1, sort_keys=True))
    else:
        print(plan_table(planned))
    return 0


def plan_table(planned: Plan) -> str:
    """The plan for a person: one row per worker (sizes in GiB, 2^30 bytes), then the peak; --json has all."""
    rows = [("worker", "memory", "speed", "blocks", "embedding", "estimate", "utilisation")]
    for w, (start, stop), est, used in zip(planned.workers, planned.ranges, planned.estimates, planned.utilizations):
        rows.append((w.name, format_gib(w.memory_bytes), f"{w.speed:g}", f"[{start}, {stop})",
                     "yes" if est.owns_embedding else "no", format_gib(est.total), f"{used:.2%}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(n) for c, n in zip(r, widths)).rstrip() for r in rows]
    peak = max(zip(planned.workers, planned.utilizations), key=lambda wu: wu[1])[0].name
    lines.append(f"peak utilisation {planned.peak_utilization:.2%} ({peak}); the embeddings on worker"
                 f"{planned.embedding_owner}; GiB = 2^30 bytes; --json prints the whole record")
    return "\n".join(lines)


def cmd_demo(a) -> int:
    return run_demo(Path(a.out), progress=not a.no_progress, runs_dir=Path(a.runs_dir),
                    reports_dir=Path(a.reports_dir),
                    public_source=Path(a.public_source) if a.public_source else None, scale=a.scale,
                    parts=tuple(a.parts.split(",")), report=not a.no_report,
                    seed_dir=Path(a.seed_dir) if a.seed_dir else None)


def cmd_checkpoint_replay(a) -> int:
    rec = replay(a.home, resolve_root(a.home, a.root), a.from_root and resolve_root(a.home, a.from_root, "--from"),
                 a.workers)
    print(json.dumps({k: rec[k] for k in ("root", "from", "cohort", "cohort_steps", "equal",
                                          "max_abs_parameter_difference")}, sort_keys=True))
    return 0 if rec["equal"] or rec["device"] != "cpu" else 1
