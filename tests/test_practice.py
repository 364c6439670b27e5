"""Practice families (kit/data/practice.py): answers checked by an independent parse of the prompt, purity,
the same set from any number of processes, and the distance from every contract task."""

import re

import pytest

from kit.data import practice
from kit.data.practice import PRACTICE_FAMILIES, generate_practice, practice_set
from kit.data.tasks import CONTRACT_WORDING, FAMILIES, LEVELS, REWORDED, generate_set


def _oracle(family: str, prompt: str) -> str:
    """The answer recomputed from the prompt's text alone (not from the draws)."""
    if family == "which_key":
        pairs = {v: k for k, v in re.findall(r"\b(\w) means (\d+)", prompt)}
        return pairs[re.search(r"which letter means (\d+)\?", prompt).group(1)]
    if family == "count_kept":
        numbers = [int(x) for x in re.search(r"^in ([\d ]+),", prompt).group(1).split()]
        rule = re.search(r"how many are (.*)\?$", prompt).group(1)
        if rule == "multiples of 2":
            return str(sum(x % 2 == 0 for x in numbers))
        if rule == "not multiples of 2":
            return str(sum(x % 2 for x in numbers))
        op, t = rule.rsplit(" ", 1)
        return str(sum(x > int(t) for x in numbers) if op == "bigger than" else sum(x < int(t) for x in numbers))
    if family == "plus_minus":
        a, b, c = map(int, re.fullmatch(r"compute (\d+) plus (\d+) minus (\d+)\.", prompt).groups())
        return str(a + b - c)
    items, k, where = re.fullmatch(r"in (.*), which is (\d+)(?:st|nd|rd|th) (.*)\?", prompt).groups()
    values = [int(x) if x.isdigit() else x for x in items.split()]
    return str(sorted(values, reverse=where in ("from the largest", "from the end of the alphabet"))[int(k) - 1])


@pytest.mark.parametrize("difficulty", sorted(LEVELS))
def test_answers_match_an_independent_reading_of_the_prompt(difficulty):
    level = LEVELS[difficulty]
    for family in PRACTICE_FAMILIES:
        for index in range(300):
            e = generate_practice(family, 5, index, difficulty, "seed-train-practice")
            assert e.answer == _oracle(family, e.prompt), (family, e.prompt, e.answer)
            assert e == generate_practice(family, 5, index, difficulty, "seed-train-practice")  # a pure function
            if family == "which_key":
                assert e.prompt.count(" means ") == level.lookup_pairs + 1
            if family == "kth":
                assert len(e.prompt.split(",")[0].split()) - 1 == level.sort_items
            if family == "plus_minus":
                assert int(e.answer) >= 0


def test_a_set_is_exact_distinct_and_the_same_from_any_number_of_processes(monkeypatch):
    one = practice_set(403, 3, "seed-train-practice", 2)
    assert len(one) == 403 and len({e.digest for e in one}) == 403
    assert [sum(e.family == f for e in one) for f in PRACTICE_FAMILIES] == [101, 101, 101, 100]
    monkeypatch.setattr(practice, "POOL_MIN", 50)  # force the process pool at test size
    assert practice_set(403, 3, "seed-train-practice", 2, workers=2) == one
    # an excluded digest moves the set on by one draw and keeps the count
    moved = practice_set(403, 3, "seed-train-practice", 2, exclude_digests={one[0].digest})
    assert one[0] not in moved and len(moved) == 403 and moved[:100] == one[1:101]
    assert practice_set(8, 3, "other-role", 2) != practice_set(8, 3, "seed-train-practice", 2)
    with pytest.raises(ValueError, match="unknown practice family 'lookup'"):
        generate_practice("lookup", 0, 0, 2, "r")
    with pytest.raises(ValueError, match="practice difficulty 4"):
        generate_practice("kth", 0, 0, 4, "r")


def test_no_practice_example_is_or_is_worded_as_a_task():
    """Different family names in every digest, and none of the contracts' or the rewording's prompt words."""
    examples = practice_set(400, 0, "seed-train-practice", 2)
    tasks = generate_set(400, 0, "any", 2)
    assert not {e.digest for e in examples} & {t.digest for t in tasks}
    assert not {e.family for e in examples} & set(FAMILIES)
    common = {"from", "the", "of", "what", "is", "in", "than", "those", "ones", "order", "up", "at"}
    words = set()
    for wording in (CONTRACT_WORDING, REWORDED):
        for text in vars(wording).values():
            words |= set(re.findall(r"[a-z]+", re.sub(r"\{\w+\}", " ", text))) - common
    assert {"table", "value", "keep", "greater", "total", "sort", "ascending", "pairs", "pick", "increasing"} <= words
    for e in examples:
        assert not set(re.findall(r"[a-z]+", e.prompt)) & words, e.prompt
