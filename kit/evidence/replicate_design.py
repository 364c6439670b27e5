"""A replicate design frozen before any of its replicates trains (`kit-replicate-design/1`, docs/formats/replicates.md;
the fields below): arms and k per arm with the `plan` inputs that chose it, pairing by data order, the analysis, a
stopping rule and fresh final task sets committed by digest; `design_reports` is `kit verify-evidence RUNS`'s check.

The decisions to know: k is never typed in: every `k_chosen_by` entry must equal kit.replicate_stats.plan of its
inputs, each arm's k the largest of the entries naming it. A fresh final set draws from a task stream (role, seed)
no contract and no ledger entry has used; committed is the digest of a *pool* (count plus a reserve, every task the
ledger prefix exposed excluded), and the set opened is the pool's first `count` tasks not among the seed's trained
tasks or the prepared jobs' sets (known only on the host): fixed now, a function of the pool later. "Frozen" is
checked against the evidence: no run whose id begins with `run_prefix` may have started before `frozen.at`.
"""

# Fields: `ReplicateDesign` and its parts below (JSON, indented), the table of docs/formats/replicates.md held
# against them by tests/test_format_docs_replicates.py; every k, time and digest is checked by `design_problems`.

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from kit.data.tasks import FAMILIES, generate_set, role_stream_seed
from kit.digest import load_json_strict, sha256_json, write_canonical_json
from kit.evidence.ledger import read_ledger, record
from kit.record import ContractError, MapOf, Record, Seq, build, spec_field, validate
from kit.replicate_stats import plan

DESIGN_FORMAT = "kit-replicate-design/1"
DESIGN_GLOB = "campaigns/*replicate*.json"
REQUIRED = {"format": str, "name": str, "scale": str, "frozen": dict, "contracts": dict, "run_prefix": str,
            "k": dict, "pairs": dict, "k_chosen_by": list, "replicates": dict, "pairing": str, "gpu_mode": dict,
            "analysis": dict, "stopping_rule": str, "final_sets": dict, "gpu_time": dict}
# the task roles an adaptive or continued-learning job draws from its contract's data_seeds.tasks
# (kit/adaptive/prepare.py, kit/adaptive/continued.py); a study contract names (role, seed) in each set itself
ADAPTIVE_ROLES = ("A.new", "B.new", "C.new", "dev.tasks", "final.tasks")
PLAN_FIELDS = ("sd", "effect", "margin", "alpha", "power", "one_sided")
_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
SPAN = Seq(float, min_len=2)  # [low, high] seconds


class DesignError(ValueError):
    pass


# -- the format, declared (the field list above; docs/formats/replicates.md holds the same table) -------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class Frozen(Record):
    at: str = spec_field(str, doc="UTC, YYYY-MM-DDTHH:MM:SSZ: no run of the design may start before it")
    rule: str = spec_field(str, doc="what freezing means, in words")


@dataclass(frozen=True, slots=True, kw_only=True)
class ContractRef(Record):
    path: str = spec_field(str, doc="the contract, relative to the repository")
    digest: str = spec_field(str, doc="sha256 of the contract's canonical JSON")


@dataclass(frozen=True, slots=True, kw_only=True)
class DesignContracts(Record):
    study: ContractRef = spec_field(ContractRef, doc="the study contract (its final set's ledger entries)")
    adaptive: ContractRef = spec_field(ContractRef, doc="the adaptive contract (the growth pairs' final set)")


@dataclass(frozen=True, slots=True, kw_only=True)
class Pair(Record):
    arms: tuple[str, ...] = spec_field(Seq(str), doc="the two sides")
    k: int = spec_field(int, doc="replicates of the pair, >= 2")
    start: str = spec_field(str, doc="what both sides resume from, in words")


@dataclass(frozen=True, slots=True, kw_only=True)
class DesignPairs(Record):
    growth_vs_control: Pair = spec_field(Pair, doc="cohort B's growth arm against its control")


@dataclass(frozen=True, slots=True, kw_only=True)
class KChoice(Record):
    """A `k_chosen_by` entry: the `kit replicates plan` inputs, the k they give and the arms it applies to."""
    question: str = spec_field(str, doc="the question the k is chosen for")
    applies_to: tuple[str, ...] = spec_field(Seq(str), doc='arms ("study/<arm>") or "pairs.<name>"')
    sd: float = spec_field(float, doc="plan input: sd of one replicate difference")
    effect: float = spec_field(float, doc="plan input: the true difference to detect")
    margin: float = spec_field(float, doc="plan input: the noninferiority margin (0: none)")
    alpha: float = spec_field(float, doc="plan input: the test's level")
    power: float = spec_field(float, doc="plan input: the power wanted")
    one_sided: bool = spec_field(bool, doc="plan input: a one-sided test")
    k: int = spec_field(int, doc="plan's k of these inputs")
    power_at_k: float = spec_field(float, doc="plan's power at that k")


@dataclass(frozen=True, slots=True, kw_only=True)
class DesignReplicates(Record):
    study: tuple[int, ...] = spec_field(Seq(int), doc="the study arms' indexes, 0..k-1")
    growth_vs_control: tuple[int, ...] = spec_field(Seq(int), doc="the growth pairs' indexes, 0..k-1")
    replicate_zero: str = spec_field(str, doc="what replicate 0 is, in words")


@dataclass(frozen=True, slots=True, kw_only=True)
class Analysis(Record):
    rule: str = spec_field(str, doc="kit.replicate_stats.ANALYSIS_RULE")
    level: float = spec_field(float, doc="the intervals' level")
    questions: tuple[str, ...] = spec_field(Seq(str), doc="the questions, in words")
    per_item: str = spec_field(str, doc="what per-item results are committed")


@dataclass(frozen=True, slots=True, kw_only=True)
class ExcludedLedger(Record):
    path: str = spec_field(str, doc="the ledger, relative to the repository")
    entries: int = spec_field(int, doc="its first entries, whose task digests the pool excludes")
    prefix_sha256: str = spec_field(str, doc="sha256_json of their [kind, digest] pairs")


@dataclass(frozen=True, slots=True, kw_only=True)
class Excluded(Record):
    ledger: ExcludedLedger = spec_field(ExcludedLedger, doc="the ledger prefix the pool excludes")


@dataclass(frozen=True, slots=True, kw_only=True)
class FinalSet(Record):
    """A `final_sets` entry: a fresh pool of a task stream no contract or ledger entry used, committed by digest."""
    role: str = spec_field(str, doc="the task stream's role")
    seed: int = spec_field(int, doc="the task stream's seed")
    stream_seed: str = spec_field(str, doc="role_stream_seed(seed, role), as a string")
    difficulty: int = spec_field(int, doc="the tasks' difficulty")
    families: tuple[str, ...] = spec_field(Seq(str), doc="the task families the pool is spread over")
    count: int = spec_field(int, doc="the tasks the set opens")
    reserve: int = spec_field(int, doc="pool tasks beyond count (the host's exclusions)")
    pool_sha256: str = spec_field(str, doc="sha256_json of the pool's task digests, in order")
    excluded: Excluded = spec_field(Excluded, doc="what the pool excludes")
    opens: str = spec_field(str, doc="when and how the set opens, in words")


@dataclass(frozen=True, slots=True, kw_only=True)
class MeasuredPart(Record):
    seconds: tuple[float, ...] = spec_field(SPAN, doc="[low, high] device seconds")
    where: str = spec_field(str, doc="the sessions it was measured in")


@dataclass(frozen=True, slots=True, kw_only=True)
class Measured(Record):
    """The measured durations the campaign's block plan is made of (kit/replicate_campaign.py)."""
    machine_start: MeasuredPart = spec_field(MeasuredPart, doc="a fresh machine's start")
    seed_rebuild: MeasuredPart = spec_field(MeasuredPart, doc="the seed built again")
    prepare_both_jobs: MeasuredPart = spec_field(MeasuredPart, doc="the study and adaptive preparations")
    cohort_a_endpoint: MeasuredPart = spec_field(MeasuredPart, doc="cohort A's endpoint re-derived")
    six_study_arms_side_by_side: MeasuredPart = spec_field(MeasuredPart, doc="a wave of six study arms")
    growth_pair_side_by_side: MeasuredPart = spec_field(MeasuredPart, doc="one growth pair, both sides at once")
    scoring: MeasuredPart = spec_field(MeasuredPart, doc="one development scoring")


@dataclass(frozen=True, slots=True, kw_only=True)
class TimePart(Record):
    count: int = spec_field(int, doc="how many")
    seconds: tuple[float, ...] = spec_field(SPAN, doc="[low, high] device seconds of them all")
    each: str = spec_field(str, doc="the measured duration each takes")


@dataclass(frozen=True, slots=True, kw_only=True)
class Sessions(Record):
    count: tuple[float, ...] = spec_field(SPAN, doc="[low, high] sessions")
    rule: str = spec_field(str, doc="what one session runs, in words")


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuTime(Record):
    measured: Measured = spec_field(Measured, doc="measured durations")
    parts: Mapping[str, TimePart] = spec_field(MapOf(TimePart), doc="the work, by part")
    work_seconds: tuple[float, ...] = spec_field(SPAN, doc="[low, high] seconds of the parts")
    fixed_per_session_seconds: tuple[float, ...] = spec_field(SPAN, doc="[low, high] seconds every session pays")
    sessions: Sessions = spec_field(Sessions, doc="the sessions it takes")
    total_device_seconds: tuple[float, ...] = spec_field(SPAN, doc="[low, high] device seconds in all")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicateDesign(Record):
    """`campaigns/*replicate*.json` (`kit-replicate-design/1`): a replicate design frozen before its runs."""
    FORMAT = DESIGN_FORMAT
    format: str = spec_field(str, doc=DESIGN_FORMAT)
    name: str = spec_field(str, doc="the design's name (its ledger purposes name it)")
    scale: str = spec_field(str, doc="the demo scale its runs use")
    frozen: Frozen = spec_field(Frozen, doc="when and how it was frozen")
    contracts: DesignContracts = spec_field(DesignContracts, doc="the contracts, by digest")
    run_prefix: str = spec_field(str, doc="the run ids of its runs begin with it")
    k: Mapping[str, int] = spec_field(MapOf(int), doc='"study/<arm>" -> replicates, >= 2')
    pairs: DesignPairs = spec_field(DesignPairs, doc="the paired arms")
    k_chosen_by: tuple[KChoice, ...] = spec_field(Seq(KChoice), doc="the plans every k comes from")
    replicates: DesignReplicates = spec_field(DesignReplicates, doc="the replicate indexes that run, no more")
    pairing: str = spec_field(str, doc="how replicates pair, in words")
    gpu_mode: Mapping[str, str] = spec_field(MapOf(str), doc="environment variable -> value; applies_to: where")
    analysis: Analysis = spec_field(Analysis, doc="the analysis, fixed before any result")
    stopping_rule: str = spec_field(str, doc="when the campaign stops, in words")
    final_sets: Mapping[str, FinalSet] = spec_field(MapOf(FinalSet), doc="fresh final task sets, by name")
    gpu_time: GpuTime = spec_field(GpuTime, doc="the device time it takes, each [low, high]")

    @classmethod
    def from_json(cls, value: Any, source: str, path: str = "") -> Self:
        """The design's own checks first (`check_design_json`: its messages), then every declared field."""
        check_design_json(value, source)
        try:
            validate(value, cls, path, source)
        except ContractError as e:
            raise DesignError(str(e)) from None
        return build(value, cls)


def check_design_json(design: Any, source: str) -> None:
    """What the design's checks rest on, with their own messages (one line naming the file, the field and what
    was expected): an object, the top-level fields' types, the format, `frozen.at` a UTC time, every k an int >= 2
    and every `k_chosen_by` entry with its plan inputs."""
    if not isinstance(design, dict):
        raise DesignError(f"{source}: not a JSON object; expected a {DESIGN_FORMAT} design")
    for field, kind in REQUIRED.items():
        if not isinstance(design.get(field), kind):
            raise DesignError(f"{source}: field {field!r} = {design.get(field)!r}; expected a {kind.__name__} "
                              f"(docs/formats/replicates.md)")
    if design["format"] != DESIGN_FORMAT:
        raise DesignError(f"{source}: field 'format' = {design['format']!r}; expected {DESIGN_FORMAT!r}")
    if not _TIME.match(str(design["frozen"].get("at"))):
        raise DesignError(f"{source}: field 'frozen.at' = {design['frozen'].get('at')!r}; expected a UTC time "
                          "YYYY-MM-DDTHH:MM:SSZ")
    for name, k in [*design["k"].items(), *((f"pairs.{p}", v.get("k")) for p, v in design["pairs"].items())]:
        if isinstance(k, bool) or not isinstance(k, int) or k < 2:
            raise DesignError(f"{source}: field 'k' of {name!r} = {k!r}; expected an int >= 2")
    for i, entry in enumerate(design["k_chosen_by"]):
        missing = [f for f in (*PLAN_FIELDS, "k", "applies_to", "question") if f not in entry]
        if missing:
            raise DesignError(f"{source}: field 'k_chosen_by[{i}]' lacks {', '.join(missing)}; expected the plan "
                              f"inputs {', '.join(PLAN_FIELDS)}, its k, applies_to and question")


def read_design(path: str | os.PathLike) -> ReplicateDesign:
    """The design file as its declared class: the design's checks (`check_design_json`), then every field; a
    DesignError of one line naming the file, the field and what was expected."""
    path = Path(path)
    try:
        design = load_json_strict(path)
    except (OSError, ValueError) as e:
        raise DesignError(f"{path}: not a JSON file ({e}); expected a {DESIGN_FORMAT} design") from None
    return ReplicateDesign.from_json(design, str(path))


def load_design(path: str | os.PathLike) -> dict:
    """The design file as plain JSON, checked as `read_design` checks it (for the callers that read it as a dict;
    `read_design` gives the declared class)."""
    return read_design(path).to_json()


def pool(spec: FinalSet, ledger: str | os.PathLike) -> list:
    """The fresh final set's pool: count + reserve tasks of the stream (role, seed), every task digest of the
    ledger's first `excluded.ledger.entries` entries excluded (kit.data.tasks.generate_set, spread over
    `families`): later entries, the design's own opening included, do not move it."""
    return _draw(spec.role, spec.seed, spec.difficulty, spec.count + spec.reserve, spec.families, ledger,
                 spec.excluded.ledger.entries)


def _draw(role: str, seed: int, difficulty: int, total: int, families, ledger: str | os.PathLike,
          entries: int | None) -> list:
    """`total` tasks of the stream (role, seed) spread over `families` (every family when empty), every task digest
    of the ledger's first `entries` entries (all of them when None) excluded."""
    families = list(families or FAMILIES)
    base, extra = divmod(total, len(families))
    counts = {f: base + (1 if i < extra else 0) for i, f in enumerate(families)}
    exposed = {e["digest"] for e in read_ledger(ledger)[:entries]}
    return generate_set(counts, seed, role, difficulty, exclude_digests=exposed)


def final_set_record(role: str, seed: int, difficulty: int, count: int, reserve: int, ledger: Path, base: Path,
                     families=None) -> dict:
    """A `final_sets` entry (docs/formats/replicates.md) as JSON, its pool drawn now."""
    families = tuple(families or FAMILIES)
    entries = read_ledger(ledger)
    tasks = _draw(role, seed, difficulty, count + reserve, families, ledger, None)
    return FinalSet(
        role=role, seed=seed, stream_seed=str(role_stream_seed(seed, role)), difficulty=difficulty, families=families,
        count=count, reserve=reserve, pool_sha256=sha256_json([t.digest for t in tasks]),
        excluded=Excluded(ledger=ExcludedLedger(path=str(ledger.relative_to(base)), entries=len(entries),
                                                prefix_sha256=_prefix_sha(entries))),
        opens="once, after every replicate of this design is committed: the pool's first `count` tasks not among "
              "the seed's trained tasks or the prepared jobs' task sets, through the final-role guard").to_json()


def _prefix_sha(entries: list[dict]) -> str:
    return sha256_json([[e["kind"], e["digest"]] for e in entries])


def _used_streams(base: Path) -> set[str]:
    """Every task stream seed a contract of the repository or an entry of its ledger has used."""
    used = set()
    for path in sorted((base / "contracts").glob("*.json")):
        data = load_json_strict(path)
        stack = [data]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                seeds = node.get("data_seeds")
                if isinstance(seeds, dict) and isinstance(seeds.get("tasks"), int):
                    used |= {str(role_stream_seed(seeds["tasks"], r)) for r in ADAPTIVE_ROLES}
                if isinstance(node.get("role"), str) and isinstance(node.get("seed"), int):
                    used.add(str(role_stream_seed(node["seed"], node["role"])))
                stack += list(node.values())
            elif isinstance(node, list):
                stack += node
    ledger = base / "ledger" / "exposed.jsonl"
    if ledger.is_file():
        for e in read_ledger(ledger):
            parts = str(e.get("id", "")).split("/")
            if len(parts) >= 3:
                used.add(parts[2])
    return used


def design_problems(path: str | os.PathLike, base: str | os.PathLike, runs_dir: str | os.PathLike | None = None,
                    check_pool: bool = True) -> list[str]:
    """What is wrong with the design at `path` in the repository `base` (empty: it holds): its fields, the
    contracts' digests, every k recomputed by `plan`, the replicate indexes, each final set's stream unused and
    pool digest, and no run of it started before it was frozen."""
    path, base = Path(path), Path(base)
    try:
        d = read_design(path)
    except DesignError as error:
        return [str(error)]
    out = []
    for name, c in (("adaptive", d.contracts.adaptive), ("study", d.contracts.study)):
        file = base / c.path
        got = sha256_json(load_json_strict(file)) if file.is_file() else None
        if got != c.digest:
            out.append(f"{path}: field 'contracts.{name}.digest' = {c.digest!r}; the contract {file} has {got!r}")
    wanted: dict[str, int] = {}
    for i, e in enumerate(d.k_chosen_by):
        try:
            k = plan(e.sd, e.effect, margin=e.margin, alpha=e.alpha, power=e.power, one_sided=e.one_sided)["k"]
        except ValueError as err:
            out.append(f"{path}: field 'k_chosen_by[{i}]': {err}")
            continue
        if k != e.k:
            out.append(f"{path}: field 'k_chosen_by[{i}].k' = {e.k}; plan of its inputs gives {k}")
        for arm in e.applies_to:
            wanted[arm] = max(wanted.get(arm, 0), k)
    ks = {**d.k, "pairs.growth_vs_control": d.pairs.growth_vs_control.k}
    for arm, k in ks.items():
        if arm not in wanted:
            out.append(f"{path}: field 'k' of {arm!r}: no k_chosen_by entry applies to it; expected one")
        elif wanted[arm] != k:
            out.append(f"{path}: field 'k' of {arm!r} = {k}; the largest k of its k_chosen_by entries is {wanted[arm]}")
    for group, indexes in (("growth_vs_control", d.replicates.growth_vs_control), ("study", d.replicates.study)):
        arms = [a for a in ks if a.startswith(f"{group}/") or a == f"pairs.{group}"]
        need = max((ks[a] for a in arms), default=None)
        if need is not None and list(indexes) != list(range(need)):
            out.append(f"{path}: field 'replicates.{group}' = {list(indexes)}; expected 0..{need - 1} (k = {need})")
    used = _used_streams(base)
    for name, spec in d.final_sets.items():
        where = f"{path}: field 'final_sets.{name}"
        stream = str(role_stream_seed(spec.seed, spec.role))
        if spec.stream_seed != stream:
            out.append(f"{where}.stream_seed' = {spec.stream_seed!r}; (role, seed) gives {stream}")
        if stream in used:
            out.append(f"{where}': the stream of role {spec.role!r}, seed {spec.seed} is already used by a "
                       "contract or the exposure ledger; expected a range no earlier set used")
        excluded = spec.excluded.ledger
        ledger = base / excluded.path
        if check_pool and ledger.is_file():
            n = excluded.entries
            if _prefix_sha(read_ledger(ledger)[:n]) != excluded.prefix_sha256:
                out.append(f"{where}.excluded.ledger.prefix_sha256': {ledger}'s first {n} entries differ from the "
                           "ones the pool excluded (entries removed or edited)")
            else:
                got = sha256_json([t.digest for t in pool(spec, ledger)])
                if got != spec.pool_sha256:
                    out.append(f"{where}.pool_sha256' = {spec.pool_sha256[:12]}...; the pool drawn again has "
                               f"{got[:12]}... (the ledger changed the exclusions, or the generator)")
    if runs_dir is not None and Path(runs_dir).is_dir():
        for run in sorted(Path(runs_dir).glob(f"{d.run_prefix}*/run.json")):
            started = str(load_json_strict(run).get("started_at", ""))
            if started < d.frozen.at:
                out.append(f"{run}: started {started}, before the design {path} was frozen ({d.frozen.at})")
    return out


def design_reports(base: str | os.PathLike, runs_dir: str | os.PathLike | None = None) -> list[dict]:
    """One verify-evidence report per design file of the repository (`DESIGN_GLOB` holding DESIGN_FORMAT)."""
    base = Path(base)
    reports = []
    for path in sorted(base.glob(DESIGN_GLOB)):
        try:
            fmt = load_json_strict(path).get("format")
        except (OSError, ValueError, AttributeError):
            continue
        if fmt != DESIGN_FORMAT:
            continue
        problems = design_problems(path, base, runs_dir if runs_dir is not None else base / "runs")
        reports.append({"run_dir": str(path), "ok": not problems, "checks": [
            {"check": "replicate design", "result": "fail" if problems else "pass",
             "detail": "; ".join(problems) or "frozen before its runs; k recomputed by plan; fresh final pools "
                                               "drawn again equal"}]})
    return reports


@dataclass(frozen=True, slots=True)
class FinalDesign:
    """What the final-set analysis needs of a design (kit.evidence.replicate_analysis.final_analysis): its name,
    the run prefix, k per arm ("study/<arm>") and the growth pair's k (0: no pair). A view, so the analysis can be
    tested on a design smaller than a frozen one."""
    name: str
    run_prefix: str
    k: Mapping[str, int]
    growth_pairs_k: int = 0

    @classmethod
    def of(cls, d: ReplicateDesign) -> FinalDesign:
        return cls(d.name, d.run_prefix, d.k, d.pairs.growth_vs_control.k)

    def run_ids(self) -> list[str]:
        """`<run_prefix>study-<arm>-r<k>` for each study arm and k < its k, then `<run_prefix>adaptive-B-control-r<k>`
        and `-B-growth-r<k>` for k < the pair's k."""
        p = self.run_prefix
        out = [f"{p}study-{arm.split('/', 1)[1]}-r{k}" for arm, n in sorted(self.k.items()) for k in range(n)]
        return out + [f"{p}adaptive-B-{side}-r{k}" for k in range(self.growth_pairs_k) for side in ("control", "growth")]


def design_runs(design: ReplicateDesign) -> list[str]:
    """The training runs a design needs before its final sets open (`FinalDesign.run_ids`)."""
    return FinalDesign.of(design).run_ids()


def _design_ledgers(path: Path, spec: FinalSet, ledger: Path, base: Path) -> list[Path]:
    """The ledgers an opening is looked for in: the one it records to and the design's own (its pool's)."""
    own = base / spec.excluded.ledger.path
    return [ledger] + ([own] if own.is_file() and own.resolve() != ledger.resolve() else [])


def committed_problems(d: ReplicateDesign, runs_dir: Path) -> list[str]:
    """Why the design's runs are not all committed in `runs_dir` (empty: every run of `design_runs` has a
    completed run.json that started after `frozen.at`)."""
    out = []
    for r in design_runs(d):
        rec = runs_dir / r / "run.json"
        data = load_json_strict(rec) if rec.is_file() else {}
        if data.get("status") != "completed":
            out.append(f"{r} not completed")
        elif str(data.get("started_at", "")) < d.frozen.at:
            out.append(f"{r} started {data.get('started_at')}, before the design was frozen ({d.frozen.at})")
    return out


def check_committed(path: Path, d: ReplicateDesign, name: str, runs_dir: Path) -> None:
    """The guard's first refusal: one line naming the first of the design's runs not committed."""
    missing = committed_problems(d, runs_dir)
    if missing:
        raise DesignError(f"{path}: final set {name!r} stays closed: {len(missing)} of the design's runs are not "
                          f"completed in {runs_dir} (first: {missing[0]}); expected every replicate committed first")


def _final_set(path: Path, d: ReplicateDesign, name: str) -> FinalSet:
    """The design's final set `name`; DesignError naming the field for a set the design does not have."""
    if name not in d.final_sets:
        raise DesignError(f"{path}: field 'final_sets' has no {name!r}; expected one of {sorted(d.final_sets)}")
    return d.final_sets[name]


def _committed_set(path: Path, name: str, runs_dir: Path, base) -> tuple[ReplicateDesign, FinalSet, str, Path]:
    """(design, the final set's spec, its ledger purpose, the repository base) once every run of the design is
    committed (check_committed); DesignError naming the field for a set the design does not have."""
    d = read_design(path)
    spec = _final_set(path, d, name)
    check_committed(path, d, name, runs_dir)
    purpose = f"replicate design {d.name}: final set {name} (pool {spec.pool_sha256[:16]})"
    return d, spec, purpose, Path(base) if base is not None else path.resolve().parents[1]


def open_final_set(path: str | os.PathLike, name: str, runs_dir: str | os.PathLike, ledger: str | os.PathLike,
                   exclude_digests=frozenset(), base: str | os.PathLike | None = None) -> list:
    """Open the design's fresh final set `name` once: refused unless every run of `design_runs` is completed in
    `runs_dir` (started after the design froze) and neither `ledger` nor the design's own ledger records an earlier
    opening of it; the set is the pool's first `count` tasks not in `exclude_digests` (the seed's trained tasks
    and the prepared jobs' sets, on the host), recorded in the exposure ledger as final tasks under the contract
    the set belongs to, the check and the record under the ledger's lock (two openings at once: one wins);
    returns the tasks. Scoring on the set goes through `score_final_set`, which opens it here."""
    path, runs_dir, ledger = Path(path), Path(runs_dir), Path(ledger)
    d, spec, purpose, base = _committed_set(path, name, runs_dir, base)
    ledgers = _design_ledgers(path, spec, ledger, base)

    def refuse_if_opened(entries=None) -> None:
        for each in ledgers:
            held = entries if entries is not None and each == ledger else read_ledger(each)
            if any(e.get("purpose") == purpose for e in held):
                raise DesignError(f"{each}: final set {name!r} of {path} was opened already; a fresh set opens once")

    refuse_if_opened()
    tasks = [t for t in pool(spec, base / spec.excluded.ledger.path) if t.digest not in set(exclude_digests)]
    if len(tasks) < spec.count:
        raise DesignError(f"{path}: final set {name!r}: {len(tasks)} pool tasks left after the exclusions, "
                          f"{spec.count} wanted; expected a larger `reserve` in a new design")
    tasks = tasks[:spec.count]
    contract = (d.contracts.study if name == "study" else d.contracts.adaptive).digest

    def check(entries) -> None:  # under the ledger's lock: no opening can pass between this check and the record
        refuse_if_opened(entries)
        seen = {e["digest"]: e for e in entries}
        exposed = [t for t in tasks if t.digest in seen]
        if exposed:
            raise DesignError(f"{ledger}: task {exposed[0].id} of final set {name!r} of {path} was exposed after the "
                              f"design froze (purpose {seen[exposed[0].digest].get('purpose')!r}); expected a fresh set")

    record([("final.task", t.digest, t.id) for t in tasks], contract, spec.pool_sha256, purpose, ledger, check=check)
    return tasks


def opened_final_set(path: str | os.PathLike, name: str, runs_dir: str | os.PathLike, ledger: str | os.PathLike,
                     exclude_digests=frozenset(), base: str | os.PathLike | None = None) -> list:
    """The design's final set `name` as its one opening recorded it, for scoring it in batches: refused unless
    every run is committed and `ledger` (or the design's own) records exactly that opening, the set derived again
    (pool less `exclude_digests`) having the recorded tasks' digests in order; records nothing."""
    path, runs_dir, ledger = Path(path), Path(runs_dir), Path(ledger)
    _, spec, purpose, base = _committed_set(path, name, runs_dir, base)
    recorded = [e["digest"] for each in _design_ledgers(path, spec, ledger, base) for e in read_ledger(each)
                if e.get("purpose") == purpose]
    if not recorded:
        raise DesignError(f"{ledger}: final set {name!r} of {path} was not opened; expected its one opening first")
    tasks = [t for t in pool(spec, base / spec.excluded.ledger.path) if t.digest not in set(exclude_digests)]
    tasks = tasks[:spec.count]
    if [t.digest for t in tasks] != recorded[:spec.count]:
        raise DesignError(f"{ledger}: final set {name!r} of {path}: the tasks derived again differ from the ones its "
                          "opening recorded; expected the same exclusions (seed, prepared jobs) as at the opening")
    return tasks


SCORES_FORMAT = "kit-replicate-final-scores/1"


def set_runs(design: ReplicateDesign, name: str) -> list[str]:
    """The replicate runs scored on the final set `name`: the study's arms for "study", the growth pairs else."""
    return [r for r in design_runs(design) if ("-study-" in r) == (name == "study")]


def score_final_set(path: str | os.PathLike, name: str, runs_dir: str | os.PathLike, ledger: str | os.PathLike,
                    models: dict, score, out_dir: str | os.PathLike, exclude_digests=frozenset(),
                    base: str | os.PathLike | None = None, batch: bool = False) -> dict[str, dict]:
    """Score every replicate of the design's set `name` on its fresh final tasks, once: `models` {run id of
    `set_runs` (every one; a baseline such as "seed" may be added): what `score` loads}; refused before anything
    opens when one is missing or a score file of the set exists in `out_dir`; then the set is opened through
    `open_final_set` (the guard) and `score(tasks, model)` -> per-item rows [{id, correct, nll_sum, tokens}] runs
    once per model. Each record {format, design, set, pool_sha256, tasks_sha256, label, model, rows} goes to
    OUT_DIR/<label>.json; returns {label: record}.

    `batch`: the models are a part of the set's (a campaign whose endpoints cannot all be on one host at once):
    the set opens through `open_final_set` when it was never opened, else it is read back (`opened_final_set`,
    nothing recorded); a label with a score file in `out_dir` is refused (scored once, never again)."""
    path, out_dir = Path(path), Path(out_dir)
    d = read_design(path)
    spec = _final_set(path, d, name)
    lacking = [r for r in set_runs(d, name) if r not in models]
    if lacking and not batch:
        raise DesignError(f"models: {len(lacking)} replicate(s) of final set {name!r} of {path} not named (first: "
                          f"{lacking[0]}); expected every replicate scored in the one opening")
    done = sorted(out_dir.glob("*.json")) if out_dir.is_dir() else []
    if batch:
        done = [p for p in done if p.stem in models]
    if done:
        raise DesignError(f"{done[0]}: final set {name!r} was scored already; each replicate is scored on it once")
    try:
        tasks = opened_final_set(path, name, runs_dir, ledger, exclude_digests, base) if batch else None
    except DesignError as e:
        if "was not opened" not in str(e):
            raise
        tasks = None
    if tasks is None:
        tasks = open_final_set(path, name, runs_dir, ledger, exclude_digests, base)
    tasks_sha = sha256_json([t.digest for t in tasks])
    out_dir.mkdir(parents=True, exist_ok=True)
    records = {}
    for label, model in models.items():
        rows = score(tasks, model)
        if [r["id"] for r in rows] != [t.id for t in tasks]:
            raise DesignError(f"score({label!r}): rows for other tasks than the opened set; expected one per task, "
                              "in order")
        rec = {"format": SCORES_FORMAT, "design": d.name, "set": name, "pool_sha256": spec.pool_sha256,
               "tasks_sha256": tasks_sha, "label": label, "model": model, "rows": rows}
        write_canonical_json(out_dir / f"{label}.json", rec)
        records[label] = rec
    return records
