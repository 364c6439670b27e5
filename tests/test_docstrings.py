"""Module docstrings stay short, and the kit's code carries no history: no issue numbers, no run ids.

A module docstring says what the module is for and the one decision a reader must know, and its notes
(headed "Notes:", so `help()` shows them), in at most 30 lines; the longer explanations live in docs/
(docs/design.md and the documents it names).
Issue numbers and run ids belong in commit messages and docs, so no file under kit/ mentions them.
"""

from __future__ import annotations

import ast
import re

from support.models import REPO

MAX_DOCSTRING_LINES = 30

# "issue 17", "issues 3", "Issue #17", "PR #5", "(#17)", "fixed in #4". A bare "#333" is not one: CSS
# colours are written that way, and so are format specs ("{n:#x}") and anchors ("formats.md#store").
ISSUE = re.compile(r"(?i:\bissues?|\bpull requests?)\s*#?\d+(?![\d.])|\bPRs?\s*#?\d+\b|\(#\d+\)"
                   r"|(?i:\b(?:see|in|from|by|fixe[sd]|fix|close[sd]))\s+#\d+\b")
# A run id: a lower-case slug that ends in a date, optionally with a suffix after it, as the folders of
# runs/ are named ("seed-small-h200-2026-11-30", "medium-pilot-2026-12-01-b", "runs/x-2026-11-29").
# Undated names the kit itself generates ("demo-seed", "medium-study-dense") are not run ids.
RUN_ID = re.compile(r"\b[a-z][a-z0-9]*(?:-[a-z0-9]+)*-20\d\d-[01]\d-[0-3]\d(?:-[a-z0-9]+)*\b")


def _kit_files():
    return sorted((REPO / "kit").rglob("*.py"))


def docstring_problems(path, root=REPO) -> list[str]:
    doc = ast.get_docstring(ast.parse(path.read_text(), str(path)))
    if not doc:
        return [f"{path.relative_to(root)}: no module docstring"]
    n = len(doc.strip().splitlines())
    return [f"{path.relative_to(root)}: module docstring of {n} lines"] if n > MAX_DOCSTRING_LINES else []


def history_mentions(text: str) -> list[str]:
    return [m.group(0) for pattern in (ISSUE, RUN_ID) for m in pattern.finditer(text)]


def test_every_kit_module_has_a_short_docstring():
    problems = [p for path in _kit_files() for p in docstring_problems(path)]
    assert problems == [], "\n".join(problems)


def test_no_kit_file_mentions_an_issue_number_or_a_run_id():
    found = [f"{path.relative_to(REPO)}:{i}: {hit}" for path in _kit_files()
             for i, line in enumerate(path.read_text().splitlines(), 1) for hit in history_mentions(line)]
    assert found == [], "\n".join(found)


def test_the_patterns_find_history_and_nothing_else():
    history = ["the vocabulary size (issue 17)", "see Issue #28", "fixed in #4", "issues 3 and 5",
               "runs/seed-small-h200-2026-11-30", "as medium-pilot-2026-12-01-b chose",
               "superseded-2026-11-30-orphan-commit", "(runs/bench-update-2026-11-29)", "the gate (#12)",
               "PR 7"]
    assert [len(history_mentions(t)) for t in history] == [1] * len(history)
    clean = ["color='#1f77b4'", "'#333'", "f'{n:#x}'", "an issue with the cache", "runs/demo-seed",
             "runs/medium-campaign-DATE", "medium-study-dense", "created 2026-11-30T10:00:00Z",
             "docs/formats/checkpoint-store.md#objects", "&#8212;", "step 17 of the issue", "# 1. the first step",
             "color: #333;", "2 PRNG draws", "pr 0.5"]
    assert [t for t in clean if history_mentions(t)] == []


def test_the_docstring_check_counts_lines(tmp_path):
    n = MAX_DOCSTRING_LINES
    files = {"long.py": '"""' + "\n".join(f"line {i}" for i in range(n + 1)) + '"""\n', "bare.py": "X = 1\n",
             "short.py": '"""' + "\n".join(f"line {i}" for i in range(n)) + '"""\n'}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    problems = [p for name in sorted(files) for p in docstring_problems(tmp_path / name, tmp_path)]
    assert problems == ["bare.py: no module docstring", f"long.py: module docstring of {n + 1} lines"]
