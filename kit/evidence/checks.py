"""What `kit verify-evidence` reports (docs/formats/verify-evidence.md): one report per run folder, ledger, replicate
design, runs folder or anchor, each a list of named checks, and `--replay`'s result per run. `--json` prints these
as JSON; the functions that make them give the JSON (`report_json`), the command reads them declared."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kit.record import Omittable, OneOf, Opt, Record, Seq, build, spec_field

RESULTS = ("pass", "fail", "skipped")


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckResult(Record):
    """One check of a report."""

    check: str = spec_field(str, doc="its name (`files`, `ledger chain`, ...)")
    result: str = spec_field(OneOf(*RESULTS), doc="pass, fail or skipped")
    detail: str = spec_field(str, doc="what was found: the first problem, or what passed")


@dataclass(frozen=True, slots=True, kw_only=True)
class EvidenceReport(Record):
    """The checks of one run folder (or of the ledger, a replicate design, a runs folder, an anchor)."""

    run_dir: str = spec_field(str, doc="the folder or file checked")
    run_id: str | None = spec_field(Omittable(Opt(str)), doc="the run's id; null (or absent) where no run")
    ok: bool = spec_field(bool, doc="no check failed")
    checks: tuple[CheckResult, ...] = spec_field(Seq(CheckResult), doc="in the order they ran")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayResult(Record):
    """`kit verify-evidence --replay`: one run replayed and compared, or listed as not replayed (`ok` null)."""

    run_id: str = spec_field(str, doc="the run")
    ok: bool | None = spec_field(Opt(bool), doc="replayed equal; null: not replayed")
    not_replayed: str | None = spec_field(Omittable(str), doc="why it was not replayed (ok null only)")
    mismatches: tuple[str, ...] = spec_field(Seq(str), doc="one line per field that differs")
    compared: tuple[str, ...] = spec_field(Seq(str), doc="the fields compared")


def report_json(run_dir: str, run_id: str | None, checks: Iterable[dict | CheckResult]) -> dict:
    """A report's JSON: `ok` when no check failed."""
    typed = tuple(c if isinstance(c, CheckResult) else build(c, CheckResult) for c in checks)
    return EvidenceReport(run_dir=run_dir, run_id=run_id, ok=all(c.result != "fail" for c in typed),
                          checks=typed).to_json()


def read_report(report: dict) -> EvidenceReport:
    """A report's JSON (as the functions above give it) declared; a replicate design's report names no run id."""
    return build(report, EvidenceReport)
