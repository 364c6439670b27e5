"""docs/ stays a reference: a line budget, an index of the formats, and no dangling docs path.

Every `docs/...md` path named in the kit, its tests, tools, campaigns, benchmarks, README, Makefile and
notebooks must exist, so a split or a rename cannot leave readers pointing at nothing; every file of
docs/formats/ is listed in its index, so none is unreachable. runs/ and reports/ are committed evidence
and keep the paths they were written with.
"""

from __future__ import annotations

import math
import re

from support.models import REPO

# Issue 53 asks for 3,000 lines in all, counted as displayed at 120 columns (see displayed_lines); docs/ held 3,096, not
# there yet. This ceiling is a ratchet: lower it as the reference is condensed; raised only where a new format or
# guarantee must be documented, by what it measured (2026-12-05: +3 for the replicate design format and its check,
# +21 for the gc, rate, non-finite, template and message rows of docs/reliability.md and the rate bounds' reasons,
# +33 for the evidence root, the anchors and what each proves and cannot, the runs-folder checks, the record pins
# and the ledger binding, +4 for the fresh final set's guard and the replicate final-scores format).
TOTAL_BUDGET = 3_157
TOTAL_BUDGET += 335  # issue 62: the three contracts' field tables (docs/contracts.md), held against their classes
TOTAL_BUDGET += 137  # issue 62: the field tables of the sidecars the report reads (docs/formats/metric-sidecars.md)
TOTAL_BUDGET += 185  # issue 62: field tables of prepared.json (adaptive, continued), schedule, ownership, worker plan, selection
TOTAL_BUDGET += 97  # issue 62: the arm record's and the freeze's field tables (study-records.md), net
TOTAL_BUDGET += 17  # issue 62, engine part: the worker status field table of docs/formats/launcher-files.md (net)
TOTAL_BUDGET += 58  # issue 62: field tables of run.json, batch plans, the archive index, superseded notes (+51 net); replay at the recorded commit (+7)
TOTAL_BUDGET += 65  # issue 62, adaptive part: the evaluation record's, the development curve's and inherited.json's field tables (net)
TOTAL_BUDGET += 156  # issue 62, study part: kit status's field tables (kit-status.md), study-prepared.md, net
TOTAL_BUDGET += 47  # issue 62, report part: the study screens' field tables (docs/formats/metric-sidecars.md)
TOTAL_BUDGET += 30  # issue 65: the AdamW step that writes the cache, its two records and the profile (docs/performance.md)
TOTAL_BUDGET += 99  # issue 62: the replicate design's field table (docs/formats/replicates.md), held against its class
TOTAL_BUDGET += 251  # issue 62, study part: the arm record's projection, traffic and hosts rows; study-screens.md (screens.json field by field, its prose moved from study-records.md)
TOTAL_BUDGET += 80  # issue 62, evidence part: field tables of the ledger's header and entry, the pins, GPU modes, reports
TOTAL_BUDGET += 69  # issue 62, report part: the training sidecars the report reads (docs/formats/report-sidecars.md)
FILE_BUDGET = 600
FORMATS_FILE_BUDGET = 300
SOURCES = ("kit", "tests", "tools", "campaigns", "bench", "notebooks", "examples", "README.md", "Makefile")
DOCS_PATH = re.compile(r"docs/[a-z_/-]*\.md")
SUFFIXES = {".py", ".md", ".sh", ".ipynb", ".json", ".txt", ".toml", ""}


WIDTH = 120


def displayed_lines(text: str) -> int:
    """Lines as a reader sees them in a 120-column view: a source line counts ceil(len / 120), at least 1.

    Counting source lines alone rewards joining a wrapped paragraph into one long line: the same words on fewer
    lines. Counting what is displayed makes the budget measure the text, not its line breaks.
    """
    return sum(max(1, math.ceil(len(line) / WIDTH)) for line in text.splitlines())


def long_prose_lines(text: str) -> list[int]:
    """1-based numbers of prose or list lines wider than WIDTH; table rows and fenced code are exempt."""
    found, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and not line.lstrip().startswith("|") and len(line) > WIDTH:
            found.append(number)
    return found


def _lines(path) -> int:
    return displayed_lines(path.read_text())


def _source_files():
    for name in SOURCES:
        path = REPO / name
        if path.is_file():
            yield path
        elif path.is_dir():
            yield from (p for p in sorted(path.rglob("*")) if p.is_file() and p.suffix in SUFFIXES
                        and "__pycache__" not in p.parts)


def named_docs_paths(files) -> dict[str, list[str]]:
    """docs path -> the files (relative to the repository) that name it."""
    found: dict[str, list[str]] = {}
    for path in files:
        for hit in DOCS_PATH.findall(path.read_text(errors="replace")):
            found.setdefault(hit, []).append(str(path.relative_to(REPO)))
    return found


def test_docs_line_budget():
    docs = sorted((REPO / "docs").rglob("*.md"))
    counts = {str(p.relative_to(REPO)): _lines(p) for p in docs}
    over = {k: n for k, n in counts.items()
            if n > (FORMATS_FILE_BUDGET if k.startswith("docs/formats/") else FILE_BUDGET)}
    assert over == {}, f"docs files over their budget ({FILE_BUDGET}; formats {FORMATS_FILE_BUDGET}): {over}"
    assert sum(counts.values()) <= TOTAL_BUDGET, f"docs/ holds {sum(counts.values())} lines, budget {TOTAL_BUDGET}"


def test_docs_prose_is_wrapped():
    long = {str(p.relative_to(REPO)): lines for p in sorted((REPO / "docs").rglob("*.md"))
            if (lines := long_prose_lines(p.read_text()))}
    assert long == {}, f"docs prose or list lines over {WIDTH} characters (file: line numbers): {long}"


def test_the_measure_counts_what_is_displayed():
    wrapped = "- " + "word " * 23 + "\n  " + "word " * 23 + "\n"
    joined = "- " + "word " * 46 + "\n"
    assert displayed_lines(wrapped) == 2 and displayed_lines(joined) == 2
    assert displayed_lines("\n\nx" + "y" * 240 + "\n") == 2 + 3
    table, fence = "| " + "a" * 130 + " |", "```\n" + "b" * 130 + "\n```"
    assert long_prose_lines("\n".join([table, fence, "c" * 121, "d" * 120])) == [5]


def test_every_named_docs_path_exists():
    missing = {p: sorted(set(where)) for p, where in named_docs_paths(_source_files()).items()
               if not (REPO / p).is_file()}
    assert missing == {}, f"docs paths named but absent: {missing}"


def test_the_check_finds_a_dangling_path(tmp_path):
    # written in pieces, so that this file itself names no absent path
    gone, kept = "docs/" + "formats.md", "docs/" + "formats/run-records.md"
    (tmp_path / "a.py").write_text(f'see {gone}, "Run records"; x = "{kept}"  # docs/engine.md\n')
    found = {p for p in DOCS_PATH.findall((tmp_path / "a.py").read_text())}
    assert found == {gone, kept, "docs/engine.md"}
    assert [p for p in sorted(found) if not (REPO / p).is_file()] == [gone]


def test_every_formats_file_is_in_the_index():
    index = (REPO / "docs" / "formats" / "README.md").read_text()
    listed = set(re.findall(r"\]\(([a-z0-9-]+\.md)\)", index))
    files = {p.name for p in (REPO / "docs" / "formats").glob("*.md")} - {"README.md"}
    assert files - listed == set(), f"docs/formats files missing from docs/formats/README.md: {files - listed}"
    assert listed - files == set(), f"docs/formats/README.md lists absent files: {listed - files}"
