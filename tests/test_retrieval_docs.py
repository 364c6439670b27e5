"""The small seed's retrieval documents (kit/data/retrieval.py): pure, answerable, and not task examples."""

import re

import pytest

from kit.data.retrieval import recall_document, repeat_document, retrieval_documents

TASK_WORDS = ("table", "value of", "numbers:", "keep", "total", "prices", "sort")


def test_same_documents_every_time_and_alternating_kinds():
    docs = retrieval_documents(40, 7)
    assert docs == retrieval_documents(40, 7) and docs != retrieval_documents(40, 8)
    assert all(d.startswith("memo:") for d in docs[::2]) and all(d.startswith("list:") for d in docs[1::2])
    assert docs[4] == recall_document(7, 2) and docs[5] == repeat_document(7, 2)


def test_every_query_is_answered_by_its_memo():
    for i in range(200):
        memo, queries = recall_document(3, i, max_pairs=6).split("\n")
        pairs = dict(p.split(" ") for p in memo.removeprefix("memo: ").removesuffix(".").split("; "))
        assert 2 <= len(pairs) <= 6
        asked = re.findall(r"(\w{3})\? (\d+)\.", queries)
        assert asked and all(pairs[k] == v for k, v in asked)


def test_repeat_documents_repeat_exactly():
    for i in range(100):
        first, second = repeat_document(3, i).split("\n")
        assert first.removeprefix("list: ") == second.removeprefix("again: ")


def test_no_document_reads_like_a_task_prompt():
    assert not any(w in d for d in retrieval_documents(400, 0) for w in TASK_WORDS)


@pytest.mark.parametrize("count, pairs, message", [(-1, 12, "count"), (True, 12, "count"), (3, 1, "max_pairs"),
                                                   (3, 27, "max_pairs")])
def test_bad_arguments_are_refused(count, pairs, message):
    with pytest.raises(ValueError, match=message):
        retrieval_documents(count, 0, pairs)
