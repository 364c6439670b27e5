"""The metric sidecars the report reads by name, declared (docs/formats/metric-sidecars.md, "Sidecars the report
reads"), and `sidecar(row, Gates)`, the typed accessor: the run's `metrics/<name>.json` validated and built, or None
where the run records no such sidecar.

Every other sidecar stays plain JSON, drawn by its shape (kit/evidence/report/sidecars.py): the report reads no field
of those. A declared sidecar that does not match its class stops the report with the file and the dotted field (the
validator's messages, kit/record.py), rather than showing a verdict computed from a field that is not there.

Committed runs under runs/ span kit versions; the classes read all of them: a field that appeared later is
`Omittable` (`gate_verdict.exploratory` and `note`, the study arm's `measurement.workers` and `compile_cache`), and
the measurement of an arm that never reported a rank has its own, shorter shape (`UnmeasuredArm`).
"""

# spec_field returns a dataclasses.field, not a shared mutable default: ruff's RUF009 cannot see that for a field
# whose type is a class of this module

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from kit.evidence import run_record as records
from kit.evidence.run_index import IndexedRun, metric
from kit.record import (
    BYTES,
    ContractError,
    Either,
    MapOf,
    Num,
    Omittable,
    OneOf,
    Opt,
    Record,
    Seq,
    build,
    spec_field,
    validate,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Sidecar(Record):
    """A metric sidecar's format: `NAME` is its file's stem under the run's metrics/."""

    NAME: ClassVar[str] = ""


S = TypeVar("S", bound=Sidecar)
M = TypeVar("M", bound=Record)


def sidecar(row: IndexedRun | None, cls: type[S]) -> S | None:
    """The sidecar `cls.NAME` of an index row (kit/evidence/report/index.py), built; None when there is no row (a
    run not in the index), the run records none or its file does not parse (as `metric`); a ContractError naming
    the file when it is not of its declared form."""
    value = metric(row, cls.NAME) if row is not None else None
    if row is None or value is None:
        return None
    return cls.from_json(value, source=str(records.metric_path(row.dir, cls.NAME)))


def sidecar_map(row: IndexedRun | None, name: str, item: type[M]) -> Mapping[str, M] | None:
    """A sidecar that maps names to records of one form (`paired_task_change`: "powersgd vs seed" -> its counts),
    built as a read-only mapping; None and errors as `sidecar`."""
    value = metric(row, name) if row is not None else None
    if row is None or value is None:
        return None
    validate(value, MapOf(item), "", str(records.metric_path(row.dir, name)))
    return build(value, MapOf(item))


# --- gates.json and gate_verdict.json: an adaptive or continued-learning final's gates ---------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class BoundGate(Record):
    """A gate on the one-sided 95% bootstrap upper bound of an NLL change (nats/token)."""

    passed: bool = spec_field(bool, doc="whether the bound is on the passing side of the threshold")
    rule: str = spec_field(str, doc="the rule, in words (`< threshold` or `<= threshold`)")
    threshold: float = spec_field(float, doc="the contract's threshold")
    upper: float = spec_field(float, doc="the bound")


@dataclass(frozen=True, slots=True, kw_only=True)
class GeneratedGate(Record):
    """The gate on generated answers: no more correct answers lost than gained."""

    gained: int = spec_field(int, doc="final tasks the candidate answers right and the baseline wrong")
    lost: int = spec_field(int, doc="final tasks the baseline answers right and the candidate wrong")
    net: int = spec_field(int, doc="gained - lost")
    passed: bool = spec_field(bool, doc="lost <= gained")
    rule: str = spec_field(str, doc="the rule, in words")


@dataclass(frozen=True, slots=True, kw_only=True)
class Gates(Sidecar):
    NAME: ClassVar[str] = "gates"

    # continued learning (cohort C) has no gain gate: its comparison is about keeping what A learned
    gain: BoundGate | None = spec_field(Omittable(BoundGate), doc="the task NLL change (absent: continued learning)")
    generated: GeneratedGate = spec_field(GeneratedGate, doc="the generated answers")
    retention: BoundGate = spec_field(BoundGate, doc="the retention (chat) NLL change")

    def checks(self) -> tuple[tuple[str, BoundGate | GeneratedGate], ...]:
        """(check name, gate) of each gate present, in the file's (sorted) order: the verdict table's rows."""
        named: tuple[tuple[str, BoundGate | GeneratedGate | None], ...] = (
            ("gain", self.gain), ("generated", self.generated), ("retention", self.retention))
        return tuple((name, gate) for name, gate in named if gate is not None)


@dataclass(frozen=True, slots=True, kw_only=True)
class GateVerdict(Sidecar):
    NAME: ClassVar[str] = "gate_verdict"

    baseline: str = spec_field(str, doc="the baseline model (`seed:DIGEST` or a learned-state root)")
    candidate: str = spec_field(str, doc="the candidate model, likewise")
    comparison: str = spec_field(str, doc="the contract's comparison (`B_vs_A`)")
    passed: bool = spec_field(bool, doc="every gate passed")
    exploratory: bool | None = spec_field(Omittable(bool), doc="a comparison the contract does not gate on")
    note: str | None = spec_field(Omittable(str), doc="why it is exploratory")


# --- comparison.json: migration (learned states compared elementwise) and growth (structures compared) ---------
@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison(Sidecar):
    NAME: ClassVar[str] = "comparison"

    candidate_layout: tuple[tuple[int, ...], ...] = spec_field(Seq(Seq(int)), doc="the candidate's blocks per stage")
    candidate_learned_state_root: str = spec_field(str, doc="the candidate's learned-state root")
    cohort: str = spec_field(str, doc="the cohort compared")
    control_layout: tuple[tuple[int, ...], ...] = spec_field(Seq(Seq(int)), doc="the control's blocks per stage")
    control_learned_state_root: str = spec_field(str, doc="the control's learned-state root")
    learned_state_equal: bool = spec_field(bool, doc="the two roots are equal")
    max_abs_parameter_difference: float | None = spec_field(
        Opt(float), doc="largest elementwise difference (null: not compared, the names differ)")
    parameters_differing: int | None = spec_field(Opt(int), doc="parameters that differ (null: not compared)")
    same_parameter_names: bool = spec_field(bool, doc="same parameter names and shapes (false: growth)")
    torch: str = spec_field(str, doc="the torch version that compared them")


# --- nll_change_bounds.json: the bootstrap bounds the gates test ---------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class NllChangeBound(Record):
    bootstrap_seed: int = spec_field(int, doc="the resampling seed")
    bootstrap_upper: float = spec_field(float, doc="the one-sided bootstrap upper bound")
    change_nats_per_token: float = spec_field(float, doc="the estimate: candidate minus baseline NLL")
    confidence: float = spec_field(float, doc="the bound's confidence")
    n: int = spec_field(int, doc="examples scored")
    normal_multiplier: float = spec_field(float, doc="the normal approximation's multiplier")
    normal_upper: float = spec_field(float, doc="the normal approximation's upper bound")
    resamples: int = spec_field(int, doc="bootstrap resamples")
    tokens: int = spec_field(int, doc="assistant tokens scored")


@dataclass(frozen=True, slots=True, kw_only=True)
class NllChangeBounds(Sidecar):
    NAME: ClassVar[str] = "nll_change_bounds"

    retention: NllChangeBound = spec_field(NllChangeBound, doc="on the retention (chat) probes")
    tasks: NllChangeBound = spec_field(NllChangeBound, doc="on the final tasks")

    def part(self, name: str) -> NllChangeBound:
        """The bound of a gate's part: "tasks" or "retention"."""
        return {"tasks": self.tasks, "retention": self.retention}[name]


# --- paired_task_change.json and retention_change.json: the study's arms against each other and the seed --------
@dataclass(frozen=True, slots=True, kw_only=True)
class TaskChange(Record):
    """One pair "CANDIDATE vs REFERENCE" of `paired_task_change`: paired task accuracy on the final tasks."""

    candidate_correct: int = spec_field(int, doc="tasks the candidate answers right")
    difference: float = spec_field(float, doc="candidate minus reference accuracy")
    gained: int = spec_field(int, doc="right for the candidate only")
    lost: int = spec_field(int, doc="right for the reference only")
    n: int = spec_field(int, doc="tasks scored")
    net: int = spec_field(int, doc="gained - lost")
    noninferiority_lower: float = spec_field(float, doc="one-sided 95% lower bound of the difference")
    reference_correct: int = spec_field(int, doc="tasks the reference answers right")


def paired_task_changes(row: IndexedRun | None) -> Mapping[str, TaskChange] | None:
    """The study evaluation's `paired_task_change` sidecar: "CANDIDATE vs REFERENCE" -> TaskChange."""
    return sidecar_map(row, "paired_task_change", TaskChange)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionChange(Record):
    """One arm of `retention_change`: its retention NLL change against the seed, with the normal upper bound."""

    change_nats_per_token: float = spec_field(float, doc="the arm's minus the seed's NLL")
    multiplier: float = spec_field(float, doc="the normal multiplier of the bound")
    n: int = spec_field(int, doc="retention probes scored")
    rule: str = spec_field(str, doc="the bound, in words")
    tokens: int = spec_field(int, doc="assistant tokens scored")
    upper: float = spec_field(float, doc="the one-sided upper bound")


def retention_changes(row: IndexedRun | None) -> Mapping[str, RetentionChange] | None:
    """The study evaluation's `retention_change` sidecar: arm -> RetentionChange."""
    return sidecar_map(row, "retention_change", RetentionChange)


# --- measurement.json: a study arm's time and throughput -----------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement(Sidecar):
    """An arm whose ranks reported (kit/study/measurement.py summarise); a count of none leaves the rates null."""

    NAME: ClassVar[str] = "measurement"

    active_gpu_seconds_per_update: float | None = spec_field(Opt(float), doc="active seconds x devices / updates")
    active_seconds: float = spec_field(float, doc="update time only (no setup, no commits)")
    active_target_tokens_per_s: float | None = spec_field(Opt(float), doc="target tokens per active second")
    active_tokens_per_s: float | None = spec_field(Opt(float), doc="input tokens per active second")
    active_tokens_per_s_after_first_update: float | None = spec_field(
        Opt(float), doc="the same without the first update")
    checkpoint_seconds: float = spec_field(float, doc="commit time")
    compile_cache: str | None = spec_field(Omittable(str), doc="the compile cache the workers used (absent: the "
                                                               "host's shared one, records before own caches)")
    device: str = spec_field(str, doc="the device of rank 0")
    devices: int = spec_field(int, doc="devices the workers used")
    first_update_seconds: float | None = spec_field(Opt(float), doc="the slowest rank's first update")
    gpu_seconds_per_update: float | None = spec_field(Opt(float), doc="wall seconds x devices / updates")
    input_tokens: int = spec_field(int, doc="input tokens trained on")
    rule: str = spec_field(str, doc="what active and GPU seconds count, in words")
    setup_seconds: float = spec_field(float, doc="the slowest rank's setup")
    steady_state_seconds: float | None = spec_field(Opt(float), doc="active seconds of the later updates")
    steady_state_tokens_per_s: float | None = spec_field(Opt(float), doc="input tokens per second of those")
    steady_state_updates: int = spec_field(int, doc="updates after the first")
    target_tokens: int = spec_field(int, doc="target tokens trained on")
    updates: int = spec_field(int, doc="updates made")
    wall_seconds: float = spec_field(float, doc="the arm's wall time")
    workers: int | None = spec_field(Omittable(int), doc="workers (absent: records before the field)")


@dataclass(frozen=True, slots=True, kw_only=True)
class UnmeasuredArm(Sidecar):
    """An arm no rank reported for (kit/study/arms.py): its wall time and resources only."""

    NAME: ClassVar[str] = "measurement"

    devices: int = spec_field(int, doc="devices the arm held")
    wall_seconds: float = spec_field(float, doc="the arm's wall time")
    workers: int = spec_field(int, doc="workers started")


def arm_measurement(row: IndexedRun) -> Measurement | UnmeasuredArm | None:
    """A study arm run's `measurement` sidecar: measured, unmeasured (no rank reported), or None (none recorded);
    a ContractError naming the file and both forms' first difference when it is neither."""
    try:
        return sidecar(row, Measurement)
    except ContractError as measured:
        try:
            return sidecar(row, UnmeasuredArm)
        except ContractError as unmeasured:
            raise ContractError(f"{unmeasured}; or else: {measured}") from None


# --- screen_quality.json and screen_speed.json: the study's screens (kit/study/screens.py writes them) ------------
@dataclass(frozen=True, slots=True, kw_only=True)
class NotCompletedArm(Record):
    """An arm of the study that did not complete, as the screens list it."""

    arm: str = spec_field(str, doc="the arm's name")
    status: str = spec_field(str, doc="its run's status")
    reason: str | None = spec_field(Opt(str), doc="why, as its run recorded")


@dataclass(frozen=True, slots=True, kw_only=True)
class QualityInputs(Record):
    noninferiority_lower: Mapping[str, float | None] = spec_field(
        MapOf(Opt(float)), doc="per control arm, the lower bound of the candidate's accuracy difference")
    retention_upper: float | None = spec_field(Opt(float), doc="the retention change's upper bound (nats/token)")
    task_gain: float | None = spec_field(Opt(float), doc="the candidate's task accuracy gain over the seed")


@dataclass(frozen=True, slots=True, kw_only=True)
class QualityThresholds(Record):
    max_retention_upper_nats: float = spec_field(float, doc="the contract's bound on the retention change")
    min_task_gain: float = spec_field(float, doc="the contract's least task gain")
    noninferiority_margin: float = spec_field(float, doc="the contract's noninferiority margin")
    normal_multiplier: float = spec_field(float, doc="the one-sided normal multiplier of the bounds")


@dataclass(frozen=True, slots=True, kw_only=True)
class ScreenQuality(Sidecar):
    """The quality screen (kit.study.screens.quality_screen; screens.json's `screens.quality` and the
    `screen_quality` sidecar)."""

    NAME: ClassVar[str] = "screen_quality"

    arms_not_completed: tuple[NotCompletedArm, ...] | None = spec_field(
        Omittable(Seq(NotCompletedArm)), doc="arms that did not complete (build_screens adds it: always written)")
    checks: Mapping[str, bool | None] = spec_field(
        MapOf(Opt(bool)), doc="per part (`task_gain`, `retention`, `noninferior_to_ARM`): passed, null when missing")
    inputs: QualityInputs = spec_field(QualityInputs, doc="the numbers the parts test")
    missing_inputs: tuple[str, ...] = spec_field(Seq(str), doc="the parts without an input")
    name: str = spec_field(OneOf("quality"), doc="`quality`")
    rule: str = spec_field(str, doc="the rule, in words")
    thresholds: QualityThresholds = spec_field(QualityThresholds, doc="the contract's thresholds")
    verdict: str = spec_field(str, doc="`pass`, `fail` or `not evaluable`")


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeedInputs(Record):
    baseline_active_tokens_per_s: float | None = spec_field(Opt(float), doc="the single arm's active throughput")
    candidate_active_tokens_per_s: float | None = spec_field(Opt(float), doc="the candidate arm's")


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeedThresholds(Record):
    min_speedup: float = spec_field(float, doc="the contract's least throughput ratio")


@dataclass(frozen=True, slots=True, kw_only=True)
class SharedGpuArm(Record):
    """Workers of an arm that shared fewer GPUs than there are workers (the arm record's `shared_gpus`;
    kit.study.measurement.shared_gpus and kit.study.arms.expected_sharing make it)."""

    gpus: int = spec_field(Num(1, integer=True), doc="the distinct (host, device) pairs they ran on")
    source: str = spec_field(str, doc="`ranks` (their reports) or the admission's count")
    transport: str = spec_field(str, doc="the group's backend, e.g. gloo (host-staged)")
    workers: int = spec_field(Num(1, integer=True), doc="the arm's workers")


@dataclass(frozen=True, slots=True, kw_only=True)
class ScreenSpeed(Sidecar):
    """The speed screen (kit.study.screens.speed_screen; screens.json's `screens.speed` and the `screen_speed`
    sidecar)."""

    NAME: ClassVar[str] = "screen_speed"

    arms_not_completed: tuple[NotCompletedArm, ...] | None = spec_field(
        Omittable(Seq(NotCompletedArm)), doc="arms that did not complete (build_screens adds it: always written)")
    inputs: SpeedInputs = spec_field(SpeedInputs, doc="the throughputs compared")
    name: str = spec_field(OneOf("speed"), doc="`speed`")
    ratio: float | None = spec_field(Opt(float), doc="candidate / baseline throughput (null: not measured)")
    # records made before the workers could share GPUs have neither field
    reason: str | None = spec_field(Omittable(Opt(str)), doc="why not measured (null: measured)")
    rule: str = spec_field(str, doc="the rule, in words")
    shared_gpus: Mapping[str, SharedGpuArm] | None = spec_field(
        Omittable(MapOf(SharedGpuArm)), doc="per arm whose workers shared GPUs, how")
    thresholds: SpeedThresholds = spec_field(SpeedThresholds, doc="the contract's threshold")
    verdict: str = spec_field(str, doc="`pass`, `fail` or `not evaluable`")


# --- commits.json and throughput.json: an adaptive training run's commits and its update time --------------------
CELL = Opt(Either(str, float))  # a table cell: a string, a number or null


@dataclass(frozen=True, slots=True, kw_only=True)
class Commits(Sidecar):
    """The checkpoints a training run committed, as a table (kit/adaptive/sidecars.py)."""

    NAME: ClassVar[str] = "commits"

    columns: tuple[str, ...] = spec_field(Seq(str), doc="`cohort`, `cohort_step`, `step`, `full_root`, "
                                                          "`learned_state_root`")
    rows: tuple[tuple[str | float | None, ...], ...] = spec_field(Seq(Seq(CELL)), doc="one row per commit")

    def cells(self, column: str, default: str | float | None = None) -> tuple[str | float | None, ...]:
        """The values of one column, a row each; `default` for every row where the table has no such column."""
        if column not in self.columns:
            return tuple(default for _ in self.rows)
        at = self.columns.index(column)
        return tuple(row[at] for row in self.rows)


@dataclass(frozen=True, slots=True, kw_only=True)
class Throughput(Sidecar):
    """A training run's update time and tokens (kit/adaptive/sidecars.py)."""

    NAME: ClassVar[str] = "throughput"

    assistant_tokens: int = spec_field(int, doc="assistant tokens trained on")
    assistant_tokens_per_s: float = spec_field(float, doc="those per second of update time")
    attempt: str = spec_field(str, doc="the attempt that wrote it")
    fetched_bytes: int = spec_field(BYTES, doc="bytes fetched from the store")
    status: str = spec_field(str, doc="the training's status")
    update_seconds: float = spec_field(float, doc="update time")
    updates: int = spec_field(int, doc="updates this run did")
    workers: int = spec_field(int, doc="workers")


# --- seed_build.json: the seed a build run trained --------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class SeedBuild(Sidecar):
    NAME: ClassVar[str] = "seed_build"

    kit_version: str = spec_field(str, doc="the kit's version")
    loss_final: float = spec_field(float, doc="the training loss at the end")
    loss_initial: float = spec_field(float, doc="the training loss at the start")
    parameter_digest: str = spec_field(str, doc="the seed's parameter digest")
    params: int = spec_field(BYTES, doc="its parameter count")
    seconds: float | Mapping[str, float] = spec_field(
        Either(float, MapOf(float)), doc="the build's wall time, or per stage (`total` among them)")
    threads: int | None = spec_field(Omittable(int), doc="CPU threads (absent: records before the field)")
    torch_version: str = spec_field(str, doc="the torch version")
    updates: int = spec_field(int, doc="training updates")
    vocab_size: int = spec_field(int, doc="the tokenizer's vocabulary")


# --- cost.json of a study arm: the contract's prices applied to what ran -----------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class ArmCost(Sidecar):
    """A study arm's projection (kit.study.cost.arm_cost); an evaluation's `cost` is a list, drawn by its shape."""

    NAME: ClassVar[str] = "cost"

    cross_zone_bytes: int = spec_field(BYTES, doc="every rank's estimated ring bytes")
    cross_zone_cost_usd: float = spec_field(float, doc="their price")
    cross_zone_gb: float = spec_field(float, doc="the same bytes in GB")
    gpu_cost_usd: float = spec_field(float, doc="at the seed's hosts' price")
    gpu_hours: float = spec_field(float, doc="wall seconds x GPUs / 3600")
    gpus: int | None = spec_field(Omittable(Num(0, integer=True)), doc="GPUs charged (absent: records before the field)")
    total_usd: float = spec_field(float, doc="GPU and cross-zone cost")


def arm_cost(row: IndexedRun) -> ArmCost | None:
    """A study arm run's `cost` sidecar; None where it records none, or records the list form (an evaluation's)."""
    return sidecar(row, ArmCost) if isinstance(metric(row, ArmCost.NAME), dict) else None


# --- evaluation_file.json: where a final evaluation's record is ---------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class EvaluationFile(Sidecar):
    """The evaluation record a final evaluation run scored (kit.adaptive.sidecars.evaluation_file); its run keeps a
    copy under files/."""

    NAME: ClassVar[str] = "evaluation_file"

    baseline: str = spec_field(str, doc="the baseline model")
    candidate: str = spec_field(str, doc="the candidate model")
    comparison: str = spec_field(str, doc="the contract's comparison")
    path: str = spec_field(str, doc="where the evaluation record was written")
    retention: int = spec_field(int, doc="retention probes scored")
    sha256: str = spec_field(str, doc="sha256 of the record")
    split: str = spec_field(str, doc="`dev` or `final`")
    tasks: int = spec_field(int, doc="tasks scored")
