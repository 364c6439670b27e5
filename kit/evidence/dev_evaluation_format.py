"""A study's development scoring, `kit.study.dev-evaluation/1` (`python -m kit.study.dev --out FILE`, kit/study/dev.py),
declared once: kit.study writes it and the replicate analysis reads the ones committed under a pilot folder's evals/
(kit/evidence/replicate_analysis.py). Its per-task rows are also the rows of the study's model scores
(kit/study/formats.py ModelScores): kit.evaluation.scoring's TaskAnswer and NllScore as JSON.
"""

# spec_field returns a dataclasses.field, not a shared mutable default: ruff's RUF009 cannot see that for a field
# whose type is a class of this module

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kit.record import Either, Omittable, OneOf, Record, Seq, spec_field

DEV_EVALUATION_FORMAT = "kit.study.dev-evaluation/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskScore(Record):
    """One task as a model answered it (kit.evaluation.scoring.TaskAnswer's JSON)."""
    id: str = spec_field(str, doc="the task record")
    family: str = spec_field(str, doc="its family")
    reply: str = spec_field(str, doc="the greedy reply")
    correct: bool = spec_field(bool, doc="the reply equals the answer")


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeScore(Record):
    """One conversation's summed NLL over its assistant tokens (kit.evaluation.scoring.NllScore's JSON)."""
    id: str = spec_field(str, doc="the conversation (a task or a retention probe)")
    nll_sum: float = spec_field(float, doc="summed NLL (nats) of its assistant target tokens")
    tokens: int = spec_field(int, doc="how many")
    family: str | None = spec_field(Omittable(str), doc="a task's family (absent for probes)")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSource(Record):
    """A scored commit."""
    home: str = spec_field(str, doc="its checkpoint home")
    full_root: str = spec_field(str, doc="its full root")


@dataclass(frozen=True, slots=True, kw_only=True)
class SeedSource(Record):
    """The scored seed."""
    seed_dir: str = spec_field(str, doc="the seed folder")
    parameter_digest: str = spec_field(str, doc="its parameter digest")


@dataclass(frozen=True, slots=True, kw_only=True)
class DevEvaluation(Record):
    """A development scoring: the seed or a commit on the study's development tasks, written anywhere but
    STUDY/evaluation (a study pilot commits its own under its folder's evals/)."""
    FORMAT: ClassVar[str] = DEV_EVALUATION_FORMAT
    format: str = spec_field(OneOf(DEV_EVALUATION_FORMAT), doc=DEV_EVALUATION_FORMAT)
    label: str = spec_field(OneOf("seed", "commit"), doc="what was scored")
    source: SeedSource | ModelSource = spec_field(Either(SeedSource, ModelSource), doc="what was scored")
    dev_tasks_sha256: str = spec_field(str, doc="sha256 of prepared/dev_tasks.jsonl")
    tasks: tuple[TaskScore, ...] = spec_field(Seq(TaskScore), doc="per task, the reply and verdict")
    task_nll: tuple[ProbeScore, ...] = spec_field(Seq(ProbeScore), doc="per task, the answer's NLL, with its family")
    seconds: float = spec_field(float, doc="the scoring's time")
    device: str | None = spec_field(Omittable(str), doc="where it was scored (absent: CPU)")
