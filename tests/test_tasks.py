"""Generated task families: determinism, golden examples, set disjointness, exact counts and the checker."""

from __future__ import annotations

import dataclasses

import pytest

from kit.data.tasks import (
    FAMILIES,
    TaskExample,
    assert_disjoint,
    check_answer,
    content_digest,
    family_counts_for,
    generate,
    generate_set,
    normalize_answer,
    role_stream_seed,
)
from kit.digest import sha256_json


def _example(family: str, answer: str) -> TaskExample:
    prompt = f"hand-written {family} question"
    return TaskExample(f"{family}/test/0/d1/0", family, "test", 1, prompt, answer,
                       content_digest(family, prompt, answer))  # fmt: skip


# ---- determinism and golden examples -------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_same_arguments_give_identical_example(family):
    assert generate(family, 11, 3, 2, "dev") == generate(family, 11, 3, 2, "dev")


@pytest.mark.parametrize("family", FAMILIES)
def test_different_index_or_seed_gives_different_example(family):
    base = generate(family, 11, 3)
    assert generate(family, 11, 4).digest != base.digest
    assert generate(family, 12, 3).digest != base.digest
    assert generate(family, 11, 4).id != base.id


def test_role_only_labels_generate():
    a, b = generate("lookup", 5, 0, role="final"), generate("lookup", 5, 0, role="train")
    assert (a.prompt, a.answer, a.digest) == (b.prompt, b.answer, b.digest)
    assert (a.id, b.id) == ("lookup/final/5/d1/0", "lookup/train/5/d1/0")


def test_digest_is_sha256_of_family_prompt_answer():
    e = generate("sorting", 3, 9)
    assert e.digest == sha256_json({"family": "sorting", "prompt": e.prompt, "answer": e.answer})


GOLDEN = {
    "lookup": ("table: o=3, p=58, a=41, n=5, d=61. value of n?", "5"),
    "filtering": ("numbers: 41 79 36 41 4 45 51. keep the even ones.", "36 4"),
    "arithmetic": ("total of 65 + 46 + 20 + 56?", "187"),
    "sorting": ("sort descending: cow emu eel hen ewe bat", "hen ewe emu eel cow bat"),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_golden_example_per_family(family):
    e = generate(family, 2024, 5, 2, "dev")
    assert (e.prompt, e.answer) == GOLDEN[family]
    assert e.id == f"{family}/dev/2024/d2/5"


def test_golden_digest_and_role_set():
    assert generate("lookup", 2024, 5, 2).digest == (
        "793862298b531e20d6f876e92a8c096617feef8c250d77397519c6f49523f756"
    )
    assert role_stream_seed(2024, "final") == 12619359160039900361
    got = [(e.id, e.prompt, e.answer) for e in generate_set(4, 2024, "final")]
    s = "12619359160039900361"
    assert got == [
        (f"lookup/final/{s}/d1/0", "table: r=32, d=49, e=21. value of r?", "32"),
        (f"filtering/final/{s}/d1/0", "numbers: 15 22 26 11 4. keep the even ones.", "22 26 4"),
        (f"arithmetic/final/{s}/d1/0", "prices: pen 20, key 7, cup 47. total cost?", "74"),
        (f"sorting/final/{s}/d1/0", "sort ascending: 45 47 28 41", "28 41 45 47"),
    ]


def test_to_conversation():
    e = generate("arithmetic", 1, 0)
    assert e.to_conversation() == {
        "id": e.id,
        "messages": [{"role": "user", "content": e.prompt}, {"role": "assistant", "content": e.answer}],
        "family": "arithmetic",
        "source": "task",
        "digest": e.digest,
    }


# ---- sizes, answers are correct, refusals --------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_difficulty_grows_prompt_and_difficulty_one_is_short(family):
    mean_len = {d: sum(len(generate(family, 1, i, d).prompt) for i in range(50)) / 50 for d in (1, 2, 3)}
    assert mean_len[1] < mean_len[2] < mean_len[3]
    assert max(len(generate(family, 1, i, 1).prompt) for i in range(200)) < 160
    assert max(len(generate(family, 1, i, 1).answer) for i in range(200)) < 40


def test_answers_recomputed_from_prompts():
    # An independent oracle parses each prompt and recomputes the answer.
    for i in range(100):
        e = generate("arithmetic", 8, i, 3)
        numbers = [int(t.strip("?.,")) for t in e.prompt.split() if t.strip("?.,").isdigit()]
        assert e.answer == str(sum(numbers))
        e = generate("sorting", 8, i, 2)
        head, items = e.prompt.split(": ")
        values = [int(v) for v in items.split()] if items.split()[0].isdigit() else items.split()
        assert e.answer == " ".join(map(str, sorted(values, reverse=head.endswith("descending"))))
        e = generate("lookup", 8, i, 1)
        table = dict(p.split("=") for p in e.prompt[len("table: "):].split(". ")[0].split(", "))
        assert e.answer == table[e.prompt.rstrip("?").split()[-1]]


def test_filtering_empty_result_is_none():
    answers = {generate("filtering", 4, i).answer for i in range(300)}
    assert "none" in answers
    assert all(a == "none" or all(t.isdigit() for t in a.split()) for a in answers)


def test_generate_refuses_unknown_family():
    with pytest.raises(ValueError, match="unknown task family 'poetry'"):
        generate("poetry", 1, 0)


@pytest.mark.parametrize("bad", [0, 4, -1, True, "2"])
def test_generate_refuses_bad_difficulty(bad):
    with pytest.raises(ValueError, match=f"difficulty {bad!r} is not one of 1, 2, 3"):
        generate("lookup", 1, 0, bad)


def test_generate_refuses_negative_seed_and_index():
    with pytest.raises(ValueError, match="seed -1 is not a non-negative integer"):
        generate("lookup", -1, 0)
    with pytest.raises(ValueError, match="index 1.5 is not a non-negative integer"):
        generate("lookup", 1, 1.5)


# ---- sets: counts, disjointness, exclusion -------------------------------------------------------


def test_int_count_spreads_remainder_to_first_families():
    assert family_counts_for(10) == {"lookup": 3, "filtering": 3, "arithmetic": 2, "sorting": 2}
    counts = {f: 0 for f in FAMILIES}
    for e in generate_set(10, 1, "train"):
        counts[e.family] += 1
    assert counts == family_counts_for(10)


def test_dict_counts_and_refusals():
    s = generate_set({"sorting": 3, "lookup": 2}, 1, "train", difficulty=2)
    assert [e.family for e in s] == ["lookup"] * 2 + ["sorting"] * 3
    assert {e.difficulty for e in s} == {2} and {e.role for e in s} == {"train"}
    with pytest.raises(ValueError, match="unknown task family 'maths'"):
        generate_set({"maths": 3}, 1, "train")
    with pytest.raises(ValueError, match="count for lookup -2 is not a non-negative integer"):
        generate_set({"lookup": -2}, 1, "train")
    with pytest.raises(ValueError, match="role '' must be a non-empty string"):
        generate_set(4, 1, "")


def test_two_roles_are_disjoint_by_id_and_digest():
    dev = generate_set(500, 7, "dev")
    final = generate_set(500, 7, "final", exclude_digests={e.digest for e in dev})
    assert len(dev) == len(final) == 500
    assert len({e.digest for e in dev}) == 500 and len({e.digest for e in final}) == 500
    assert not {e.id for e in dev} & {e.id for e in final}
    assert not {e.digest for e in dev} & {e.digest for e in final}
    assert_disjoint(dev, final)
    # By construction as well: without exclusion the role streams differ at every position.
    plain_final = generate_set(500, 7, "final")
    assert sum(a.digest == b.digest for a, b in zip(dev, plain_final)) == 0


def test_exclusion_keeps_count_exact_by_drawing_next_indices():
    full = generate_set({"filtering": 40}, 3, "study")
    excluded = {e.digest for e in full[:10]}
    again = generate_set({"filtering": 40}, 3, "study", exclude_digests=excluded)
    assert len(again) == 40
    assert not excluded & {e.digest for e in again}
    assert [e.id for e in again[:30]] == [e.id for e in full[10:]]
    assert [int(e.id.rsplit("/", 1)[1]) for e in again[30:]] == list(range(40, 50))


def test_assert_disjoint_names_roles_and_ids():
    a = generate_set(8, 1, "cohort-a")
    b = generate_set(8, 1, "cohort-b")
    assert_disjoint(a, b, [])
    clash = dataclasses.replace(a[3], id="lookup/cohort-b/x/d1/99", role="cohort-b")
    with pytest.raises(ValueError, match=r"roles 'cohort-a' and 'cohort-b' share a content digest: .*"
                                         r"'lookup/cohort-b/x/d1/99'"):
        assert_disjoint(a, b + [clash])
    with pytest.raises(ValueError, match=r"share an id: example '" + a[0].id):
        assert_disjoint(a, [a[0]])


# ---- answer checker ------------------------------------------------------------------------------

CHECKS = {
    "lookup": ("15", ["  15 ", "15.", "15\nbecause k7 is 15", "\n15 .\n", "15,"],
               ["16", "14", "15 16", "1 5", "", "value 15", "51"]),
    "filtering": ("45 30 22", ["45, 30, 22", "45,30,22.", "  45  30\t22 ", "45 30 22\n7"],
                  ["30 45 22", "45 30", "45 30 22 7", "45 30 23", "45 30 22 22", "none"]),
    "arithmetic": ("187", [" 187", "187.", "187\n= 65 + 46 + 20 + 56", "187 "],
                   ["186", "188", "18 7", "1,87", "187 188", "the total is 187"]),
    "sorting": ("3 8 15", ["3, 8, 15", "3 8 15.", "3  8 15\nthat is sorted", " 3,8,15 "],
                ["8 3 15", "15 8 3", "3 8", "3 8 15 16", "3 8 16", "3 15"]),
}  # fmt: skip


@pytest.mark.parametrize("family", FAMILIES)
def test_checker_accepts_answer_and_harmless_variants(family):
    answer, variants, _ = CHECKS[family]
    e = _example(family, answer)
    assert check_answer(e, answer)
    for text in variants:
        assert check_answer(e, text), text


@pytest.mark.parametrize("family", FAMILIES)
def test_checker_rejects_wrong_answers(family):
    answer, _, wrong = CHECKS[family]
    e = _example(family, answer)
    for text in wrong:
        assert not check_answer(e, text), text


def test_checker_word_case_and_empty_filter():
    words = _example("sorting", "apple fig pear")
    assert check_answer(words, "Apple, Fig, Pear.") and check_answer(words, "APPLE FIG PEAR")
    assert not check_answer(words, "fig apple pear") and not check_answer(words, "apple fig")
    empty = _example("filtering", "none")
    assert check_answer(empty, "None.") and check_answer(empty, " NONE\n")
    assert not check_answer(empty, "0") and not check_answer(empty, "") and not check_answer(empty, "none 3")


def test_normalize_answer_exact_forms():
    assert normalize_answer("  3,  8 ,15.\nmore") == "3 8 15"
    assert normalize_answer("1,234") == "1 234"  # thousands separators are not forgiven
    assert normalize_answer("\n\n") == ""


@pytest.mark.parametrize("family", FAMILIES)
def test_generated_answers_are_canonical_and_self_check(family):
    for i in range(50):
        e = generate(family, 2, i, 3)
        assert normalize_answer(e.answer) == e.answer
        assert check_answer(e, e.answer + ".\nmore text")


def test_a_set_drawn_by_several_processes_is_the_same_set(monkeypatch):
    """generate_set(workers=N) draws candidates ahead in a process pool; skips (duplicates, exclusions)
    and the order must come out exactly as one process draws them."""
    from kit.data import tasks

    monkeypatch.setattr(tasks, "POOL_MIN", 50)  # a pool for small families, so the test stays fast
    counts = {"lookup": 120, "sorting": 90, "arithmetic": 0}
    one = tasks.generate_set(counts, 7, "pooltest", 1)
    excluded = {one[3].digest, one[150].digest}  # forces skips in both families
    serial = tasks.generate_set(counts, 7, "pooltest", 1, excluded)
    pooled = tasks.generate_set(counts, 7, "pooltest", 1, excluded, workers=2)
    assert pooled == serial and len(serial) == 210 and not excluded & {t.digest for t in pooled}
    with pytest.raises(ValueError, match="workers"):
        tasks.generate_set(counts, 7, "pooltest", 1, workers=0)
