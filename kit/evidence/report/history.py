"""Every seed each contract ran on, with its verdicts: the current runs and every kept folder of superseded
runs (read only through kit.evidence.run_index.kept_rows, which also sees archived folders), one row per folder
of finals, each with why it was superseded (the folder's superseded.json, beside its runs)."""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kit.digest import load_json_strict, sha256_json
from kit.evidence.report.format import fmt, fmt_iso, is_number, records_table
from kit.evidence.report.index import IndexedRun, index, kept, metric, run_contract
from kit.evidence.report.selection import Selected, Selection
from kit.evidence.report.verdict_rows import VerdictRow, verdict_rows

COMPARISONS = ("A_vs_seed", "B_vs_A", "growth_vs_control")
# the columns as a reviewer reads them (the contract's identifiers stay in the rows' keys)
LABELS = {"A_vs_seed": "cohort A vs the seed", "B_vs_A": "cohort B vs cohort A",
          "growth_vs_control": "growth vs its control", "contracts": "contract version"}


def _cell(rows: list[VerdictRow]) -> str:
    if not rows:
        return "\u2014"
    failed = [r for r in rows if r.verdict not in ("pass", "n/a")]
    if not failed:
        return "pass"
    parts = []
    for r in failed:
        v = r.value
        label = f"{r.check}: lost" if r.check == "generated" else r.check
        parts.append(f"{label} {fmt(v)}" if is_number(v) else r.check)
    return "fail (" + "; ".join(parts) + ")"


def _why(folder: Path) -> str:
    f = folder / "superseded.json"
    try:
        return str(load_json_strict(f).get("reason") or "")
    except (FileNotFoundError, ValueError):
        return ""


def _final_groups(runs_dir: Selected) -> list[tuple[str, Selected, Path | None]]:
    """(kept in, folder, kept folder or None) of the current selection and every kept folder holding finals."""
    groups: list[tuple[str, Selected, Path | None]] = [("current", runs_dir, None)]
    seen = set()
    for k in kept(runs_dir):
        d = k.run.dir.parent
        if d not in seen and ("gates" in k.run.metrics or "screen_quality" in k.run.metrics):
            seen.add(d)
            groups.append((str(k.kept_in), d, d))
    return groups


QUALITY = "study quality screen"  # the history's column of the study's quality screen


@dataclass(frozen=True, slots=True)
class HistoryRow:
    """One folder of finals (in memory; a row of the report's history table): its seeds, where it is kept, its
    contract versions, when its finals started and at which commits, the verdict cell of each comparison
    (COMPARISONS) and of the study's quality screen, and why it was superseded ("current": the selection's own)."""
    seed: str
    kept_in: str
    contracts: str
    finals_from: str
    commit: str
    comparisons: Mapping[str, str]  # comparison -> its verdict cell
    study_quality_screen: str
    why_superseded: str

    def cell(self, column: str) -> str:
        """The verdict cell of a comparison, or of the quality screen (QUALITY)."""
        return self.study_quality_screen if column == QUALITY else self.comparisons[column]

    def table_row(self) -> dict:
        """The row under the history's column names (the contracts' identifiers; LABELS reads them)."""
        return {"seed": self.seed, "kept in": self.kept_in, "contracts": self.contracts,
                "finals from": self.finals_from, "commit": self.commit, **self.comparisons,
                QUALITY: self.study_quality_screen, "why superseded": self.why_superseded}


def history_rows(runs_dir) -> list[HistoryRow]:
    """One row per folder of finals: the current selection, then each kept folder, oldest finals first."""
    out = []
    for where, d, folder in _final_groups(runs_dir):
        idx, rows = index(d), verdict_rows(d)
        finals = [r for r in idx.runs if metric(r, "gates") is not None or metric(r, "screen_quality") is not None]
        if not finals:
            continue
        seeds = {(run_contract(r) or {}).get("seed", {}).get("parameter_digest") for r in finals} - {None}
        quality = [r for r in rows.study if r.comparison == "quality screen" and r.check != "quality screen (all parts)"]
        contracts = contract_versions(finals)
        out.append(HistoryRow(
            seed=", ".join(s[:8] for s in sorted(seeds)) or "unrecorded", kept_in=where,
            contracts=", ".join(sorted(contracts)), finals_from=fmt_iso(min(r.started_at for r in finals)),
            commit=", ".join(sorted({r.git.get("commit", "")[:8] for r in finals})),
            comparisons={c: _cell([r for r in rows.adaptive if r.comparison == c]) for c in COMPARISONS},
            study_quality_screen=_cell(quality),
            why_superseded="current" if folder is None else (_why(folder) or "not recorded")))
    return sorted(out, key=lambda r: r.finals_from)


def contract_versions(finals: list[IndexedRun]) -> set[str]:
    """The versions of the contracts behind some finals, each the digest (8 hex digits) of the contract without its
    seed: two seeds scored under otherwise equal contracts share a version."""
    out = set()
    for r in finals:
        c = run_contract(r)
        if c:
            out.add(sha256_json({k: v for k, v in c.items() if k not in ("seed", "file", "commit")})[:8])
    return out


def question_key(row: VerdictRow) -> str:
    """The key of one verdict row's question, shared by the first screen and the readings keyed by question:
    "<comparison>/<check>", e.g. "A_vs_seed/gain" or "quality screen/noninferior_to_dense"."""
    return f"{row.comparison}/{row.check}"


@dataclass(frozen=True, slots=True)
class FinalsGroup:
    """The finals of one folder (the selection's own, or a kept folder's), in memory: when they started, whether
    they are the selection's, the contract bodies by file (without seed), the seeds (8 hex digits each, joined),
    the contract versions (contract_versions) and their verdict rows."""
    start: str
    current: bool
    bodies: dict[str | None, dict]  # by contract file (contract_for always names one)
    seed: str
    contracts: set[str]
    rows: list[VerdictRow]


@dataclass(frozen=True, slots=True)
class SeedVerdict:
    """One question's verdict on one seed's finals: the seed, the verdict, whether these are the selection's own
    finals (current), whether their contracts are the current ones (same_contract) and the contract fields in
    which they differ."""
    seed: str
    verdict: str
    current: bool
    same_contract: bool
    differs: list[str]


def seed_verdicts(runs_dir) -> dict[str, list[SeedVerdict]]:
    """Per question key, the verdict on every seed whose finals this evidence keeps, oldest finals first."""
    groups: list[FinalsGroup] = []
    for where, d, folder in _final_groups(runs_dir):
        idx = index(d)
        finals = [r for r in idx.runs if metric(r, "gates") is not None or metric(r, "screen_quality") is not None]
        if not finals:
            continue
        rows = verdict_rows(d)
        seeds = {(run_contract(r) or {}).get("seed", {}).get("parameter_digest") for r in finals} - {None}
        bodies = {}
        for r in finals:
            c = run_contract(r)
            if c:
                bodies[c.get("file")] = {k: v for k, v in c.items() if k not in ("seed", "file", "commit")}
        groups.append(FinalsGroup(start=min(r.started_at for r in finals), current=folder is None, bodies=bodies,
                                  seed=", ".join(s[:8] for s in sorted(seeds)) or "unrecorded",
                                  contracts=contract_versions(finals), rows=rows.all()))
    now = next((g for g in groups if g.current), None)
    now_contracts, now_bodies = (now.contracts, now.bodies) if now else (set(), {})
    out: dict[str, list[SeedVerdict]] = {}
    for g in sorted(groups, key=lambda g: g.start):
        differs = sorted({p for f, b in g.bodies.items() for p in _differing(b, now_bodies.get(f) or {})})
        for v in g.rows:
            out.setdefault(question_key(v), []).append(
                SeedVerdict(seed=g.seed, verdict=str(v.verdict), current=g.current,
                            same_contract=bool(g.contracts & now_contracts), differs=differs))
    return out


def _differing(a: dict, b: dict, depth: int = 2, prefix: str = "") -> list[str]:
    """The fields (dotted, at most `depth` deep) in which two contract bodies differ."""
    out = []
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k), b.get(k)
        if x == y:
            continue
        if depth > 1 and isinstance(x, dict) and isinstance(y, dict):
            out += _differing(x, y, depth - 1, f"{prefix}{k}.")
        else:
            out.append(prefix + k)
    return out


def seed_reading(entries: list[SeedVerdict]) -> str:
    """One question's verdicts across seeds in words: "passed on this seed only (fail on the 2 earlier seeds)";
    where the contracts pin no seed, across the earlier scorings of the finals."""
    now = next((e for e in entries if e.current), None)
    earlier = [e for e in entries if not e.current]
    if now is None:
        return ""
    seeds = all(e.seed != "unrecorded" for e in entries)
    this, them = ("this seed", "seeds") if seeds else ("these finals", "earlier scorings of the finals")
    if not earlier:
        return f"one {'seed' if seeds else 'scoring of the finals'}: nothing earlier to compare"
    same = sum(e.verdict == now.verdict for e in earlier)
    word = {"pass": "passed", "fail": "failed"}.get(now.verdict, now.verdict)
    other = [e.verdict for e in earlier if e.verdict != now.verdict]
    changed = ""  # whether the earlier contracts differed beyond the seed: said once (contracts_note)
    n = len(earlier)
    if same == n:
        return (f"{word} on all {n + 1} seeds" if seeds else f"{word} here and in all {n} {them}") + changed
    if same == 0:
        return (f"{word} on {this} only ({', '.join(sorted(set(other)))} on the {n} earlier "
                f"{'seeds' if seeds else them.replace('earlier ', '')}{changed})")
    return f"{word} on {this} and {same} of {n} {'earlier seeds' if seeds else them}{changed}"


def contracts_note(history: dict[str, list[SeedVerdict]]) -> str:
    """One sentence for the whole table: how many earlier scorings ran under contracts that differ beyond the
    seed (their verdicts are then not the same experiment's)."""
    earlier = {e.seed: e for entries in history.values() for e in entries if not e.current}
    differ = {s: e.differs for s, e in sorted(earlier.items()) if not e.same_contract and e.differs}
    if not differ:
        return ""
    # what changes a result: not the contract's names and texts, nor the pilot's bookkeeping beside its choice
    fields = sorted({f for fs in differ.values() for f in fs if f not in ("description", "name")
                     and (not f.startswith("pilot.") or f == "pilot.chosen")})
    return (f"The earlier finals on {', '.join(differ)} ran under contracts that differ from the current ones beyond "
            f"the seed (in {', '.join(fields)}): their verdicts come from other settings, not repetitions.")


@dataclass(frozen=True, slots=True)
class KeptFolder:
    """A folder of kept runs (in memory; a row of the report's kept-folders table): its runs, by status, and the
    span of their starts."""
    kept_in: str
    runs: int
    statuses: str
    first_started: str
    last_started: str

    def table_row(self) -> dict:
        return {"kept in": self.kept_in, "runs": self.runs, "statuses": self.statuses,
                "first started": self.first_started, "last started": self.last_started}


def kept_folder_rows(runs_dir) -> list[KeptFolder]:
    """Every folder of kept runs (campaign folders' attempts, superseded seeds' runs): its runs by status and the
    span of their starts."""
    statuses: dict[str, Counter[str]] = {}
    starts: dict[str, list[str]] = {}
    for k in kept(runs_dir):
        r, folder = k.run, str(k.kept_in)
        statuses.setdefault(folder, Counter())[r.status] += 1
        starts.setdefault(folder, [])
        if r.started_at:
            starts[folder].append(r.started_at)
    return [KeptFolder(kept_in=folder, runs=sum(counts.values()),
                       statuses=", ".join(f"{n} {s}" for s, n in sorted(counts.items())),
                       first_started=fmt_iso(min(starts[folder])) if starts[folder] else "\u2014",
                       last_started=fmt_iso(max(starts[folder])) if starts[folder] else "\u2014")
            for folder, counts in sorted(statuses.items())]


def show_history(runs_dir: Selected) -> None:
    from IPython.display import HTML, display  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    selection = Selection.of(runs_dir)  # the notebook cell's DIR/GLOB, parsed once
    rows = history_rows(selection)
    if len(rows) <= 1:
        display(HTML("<p>Every final of this evidence ran on one seed: no superseded verdicts.</p>"
                     + (records_table([r.table_row() for r in rows]) if rows else "")))
        return
    kept = sum(1 for r in rows if r.kept_in != "current")
    held = {c: sorted({r.cell(c).split(" ")[0] for r in rows}) for c in (*COMPARISONS, QUALITY)}
    varied = [LABELS.get(c, c) for c, v in held.items() if len(v) > 1]
    versions = len({r.contracts for r in rows})
    text = (f"Finals were scored {len(rows)} times, on {len({r.seed for r in rows})} seeds, under "
            + ("the same contracts" if versions == 1 else f"{versions} versions of the contracts") + f"; {kept} of those are superseded and kept as evidence. "
            + (f"Verdicts that did not hold across them: {', '.join(varied)}." if varied
               else "Every verdict held across them."))
    folders = kept_folder_rows(selection)
    # why each folder was superseded is the folder's own note (it names files and campaign steps): collapsed
    shown = [{LABELS.get(k, k): v for k, v in r.table_row().items() if k != "why superseded"} for r in rows]
    why = [{"seed": r.seed, "kept in": r.kept_in, "why superseded": r.why_superseded} for r in rows
           if r.kept_in != "current"]
    display(HTML(f"<p>{html.escape(text)}</p>" + records_table(shown, table_id="kit-history")
                 + ('<details class="kit-why"><summary>Why each earlier seed was superseded</summary>'
                    + records_table(why, table_id="kit-history-why") + "</details>" if why else "")
                 + (f"<p>Every kept attempt, by the folder that keeps it ({sum(f.runs for f in folders)} runs):</p>"
                    + records_table([f.table_row() for f in folders], table_id="kit-kept-folders") if folders else "")))
