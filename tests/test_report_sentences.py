"""Every claim of the report's scope paragraphs is computed from the evidence: the paragraphs rendered from
a copy of the committed demo runs change, sentence by sentence, when the evidence behind each is altered
(no kernel: kit.evidence.report.scope.scope_paragraphs is what the report's cell calls)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from kit.evidence.report.scope import scope_paragraphs

REPO = Path(__file__).resolve().parents[1]


def _copy_demo(dest: Path) -> Path:
    runs = dest / "runs"
    for d in sorted((REPO / "runs").glob("demo-*")):
        shutil.copytree(d, runs / d.name)
    return runs


def _edit(path: Path, change) -> None:
    obj = json.loads(path.read_text())
    change(obj)
    path.write_text(json.dumps(obj))


def _sentences(runs: Path) -> list[str]:
    return [s for p in scope_paragraphs(runs) for s in p.split(". ")]


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    runs = _copy_demo(tmp_path_factory.mktemp("original"))
    return _sentences(runs)


def _changed(original: list[str], altered: list[str]) -> tuple[set, set]:
    return set(original) - set(altered), set(altered) - set(original)


def test_the_original_sentences_state_the_recorded_numbers(original):
    text = " ".join(original)
    final_a = json.loads((REPO / "runs/demo-adaptive-final-A/metrics/accuracy_by_family.json").read_text())["all"]
    seed_answers = final_a["correct_baseline"] or "none"  # the report writes a zero count as "none of N"
    assert f"{seed_answers} of {final_a['n']} on the final split (demo-adaptive-final-A)" in text
    assert "Migration equality is exact at 1 of 1 scale(s) in this evidence: tiny (equal: demo-adaptive-migration" in text
    assert "every scale" not in text and "answers none of the generated tasks, so" not in text
    # one pass/fail sentence per contract, each naming its contract: none repeated for two contracts
    counts = [s for s in original if s.startswith("Of the ")]
    assert len(counts) == len(set(counts)) == 3


@pytest.mark.parametrize("alteration", ["dev accuracy", "seed answers", "migration", "gate", "speed", "caveat"])
def test_each_sentence_changes_with_the_evidence_behind_it(alteration, original, tmp_path):
    runs = _copy_demo(tmp_path)
    if alteration == "dev accuracy":
        _edit(runs / "demo-adaptive-dev-B/metrics/accuracy_by_family.json",
              lambda o: o["sorting"].update(accuracy_candidate=0.75))
        expect = "dev 0.7500 (demo-adaptive-dev-B, candidate, sorting)"
    elif alteration == "seed answers":
        _edit(runs / "demo-adaptive-final-A/metrics/accuracy_by_family.json",
              lambda o: o["all"].update(correct_baseline=7))
        expect = "7 of 96 on the final split (demo-adaptive-final-A)"
    elif alteration == "migration":
        _edit(runs / "demo-adaptive-migration/metrics/comparison.json",
              lambda o: o.update(learned_state_equal=False, max_abs_parameter_difference=0.25))
        expect = "exact at 0 of 1 scale(s) in this evidence: tiny (not equal: demo-adaptive-migration, " \
                 "max |parameter difference| 0.2500)"
    elif alteration == "gate":
        gates = json.loads((runs / "demo-adaptive-final-A/metrics/gates.json").read_text())
        assert not gates["gain"]["passed"]
        _edit(runs / "demo-adaptive-final-A/metrics/gates.json", lambda o: o["gain"].update(passed=True))
        # the committed count, read from the original sentence, moves by one row from fail to pass
        (count,) = [x for x in original if x.startswith("Of the ") and "adaptive-shards.tiny.json" in x]
        passed, failed = (int(w) for w in re.search(r"(\d+) pass and (\d+) fail", count).groups())
        expect = f"contracts/adaptive-shards.tiny.json, {passed + 1} pass and {failed - 1} fail"
    elif alteration == "caveat":  # the scope caveat names the families the contract's runs scored
        _edit(runs / "demo-study-evaluate/metrics/accuracy_by_family.json",
              lambda o: [x.update(family="ordering") for x in o if x["family"] == "sorting"])
        expect = "task families arithmetic, filtering, lookup, ordering only: they do not establish general assistant"
    else:
        _edit(runs / "demo-study-evaluate/metrics/screen_speed.json", lambda o: o.update(ratio=0.5))
        expect = "The speed ratio (0.5000, demo-study-evaluate)"
    gone, new = _changed(original, _sentences(runs))
    # exactly the sentences that stand on the altered file: a migration that fails also moves the count
    assert len(gone) == len(new) == (2 if alteration == "migration" else 1), (gone, new)
    assert any(expect in s for s in new), new
