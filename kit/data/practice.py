"""Practice families: the four task families' primitives in computations that none of them asks for.

A seed that learned the contracts' families at the contracts' difficulty, in any words, already knows what a
cohort is meant to teach; one that learned only the easier difficulty does not carry it to the larger sizes
in a cohort's updates. Each family here exercises one family's primitive at the contracts' sizes and number
ranges (kit.data.tasks `LEVELS`) without computing that family's answer: `which_key` (lookup's binding, asked
from the value), `count_kept` (filtering's comparisons, counted), `plus_minus` (multi-digit addition and a
subtraction), `kth` (one rank of a list instead of the ordered list). Their prompts share no word with the
contracts' wordings and their digests carry their own family names, so none is, or rewords, a task of any
role. Every example is a pure function of (family, seed, index, difficulty), drawn as kit.data.tasks draws.
Details and the probes behind it: the notes below, "kit.seed.small").

Notes: why, and how a set is drawn.

Why (kit.seed.small): a medium seed must retrieve and compute in context at the contracts' sizes without having
learned the four families there. `which_key` values are distinct, so the answer is one letter; `plus_minus` never
goes below zero; `kth` counts from either end, over numbers or words. Draws use generator "kit.data.practice/1".
`practice_set` spreads the count evenly over the families (the remainder to the first), in index order, skipping
repeats and excluded digests; its spawn pool gives the same set. tests/test_practice.py checks that no prompt uses a
word of the contracts' or the rewording's templates.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterable

from kit.data.tasks import (
    KEYS,
    LEVELS,
    WORDS,
    Draws,
    TaskExample,
    content_digest,
    normalize_answer,
    role_stream_seed,
)

PRACTICE_FAMILIES = ("which_key", "count_kept", "plus_minus", "kth")
GENERATOR = "kit.data.practice/1"  # part of every RNG key
POOL_MIN = 10000  # a family's count from which the worker processes pay for their start


def _ordinal(k: int) -> str:
    """1st, 2nd, 3rd, 4th, ... (ranks go up to 10, the largest list of LEVELS)."""
    suffix = {1: "st", 2: "nd", 3: "rd"}.get(k if k < 20 else k % 10, "th")
    return f"{k}{suffix}"


def _which_key(draw: Draws, level) -> tuple[str, str]:
    keys = draw.sample(KEYS, level.lookup_pairs)
    values = draw.sample(range(level.max_value + 1), level.lookup_pairs)  # distinct: one letter per value
    asked = draw.below(len(keys))
    codes = ", ".join(f"{k} means {v}" for k, v in zip(keys, values))
    return f"codes: {codes}. which letter means {values[asked]}?", keys[asked]


def _count_kept(draw: Draws, level) -> tuple[str, str]:
    numbers = [draw.between(1, level.max_value) for _ in range(level.filter_items)]
    rule = draw.below(4)
    if rule < 2:
        threshold = draw.between(level.max_value // 5, level.max_value * 4 // 5)
        if rule == 0:
            count, text = sum(x > threshold for x in numbers), f"bigger than {threshold}"
        else:
            count, text = sum(x < threshold for x in numbers), f"smaller than {threshold}"
    elif rule == 2:
        count, text = sum(x % 2 == 0 for x in numbers), "multiples of 2"
    else:
        count, text = sum(x % 2 == 1 for x in numbers), "not multiples of 2"
    return f"in {' '.join(map(str, numbers))}, how many are {text}?", str(count)


def _plus_minus(draw: Draws, level) -> tuple[str, str]:
    a, b = draw.between(1, level.max_value), draw.between(1, level.max_value)
    c = draw.between(1, min(level.max_value, a + b))  # never below zero
    return f"compute {a} plus {b} minus {c}.", str(a + b - c)


def _kth(draw: Draws, level) -> tuple[str, str]:
    words = draw.below(2) == 1
    values: list = draw.sample(WORDS, level.sort_items) if words else draw.sample(range(1, level.max_value + 1),
                                                                                   level.sort_items)
    from_top = draw.below(2) == 1
    k = 1 + draw.below(len(values))
    ranked = sorted(values, reverse=from_top)
    if words:
        where = "from the end of the alphabet" if from_top else "from the start of the alphabet"
    else:
        where = "from the largest" if from_top else "from the smallest"
    return f"in {' '.join(map(str, values))}, which is {_ordinal(k)} {where}?", str(ranked[k - 1])


_BUILDERS = {"which_key": _which_key, "count_kept": _count_kept, "plus_minus": _plus_minus, "kth": _kth}


def generate_practice(family: str, seed: int, index: int, difficulty: int, role: str) -> TaskExample:
    """Example `index` of practice family `family` under stream `seed`; id "<family>/<role>/<seed>/d<difficulty>/<index>"."""
    if family not in _BUILDERS:
        raise ValueError(f"unknown practice family {family!r}; expected one of {', '.join(PRACTICE_FAMILIES)}")
    if isinstance(difficulty, bool) or difficulty not in LEVELS:
        raise ValueError(f"practice difficulty {difficulty!r} is not one of {', '.join(map(str, LEVELS))}")
    draw = Draws({"family": family, "seed": seed, "index": index, "difficulty": difficulty, "generator": GENERATOR})
    prompt, answer = _BUILDERS[family](draw, LEVELS[difficulty])
    assert normalize_answer(answer) == answer, f"non-canonical answer {answer!r} for {family}"
    return TaskExample(id=f"{family}/{role}/{seed}/d{difficulty}/{index}", family=family, role=role,
                       difficulty=difficulty, prompt=prompt, answer=answer,
                       digest=content_digest(family, prompt, answer))


def _practice_range(args: tuple) -> list[TaskExample]:
    family, stream, start, stop, difficulty, role = args
    return [generate_practice(family, stream, i, difficulty, role) for i in range(start, stop)]


def practice_set(count: int, seed: int, role: str, difficulty: int, exclude_digests: Iterable[str] = frozenset(),
                 workers: int = 1) -> list[TaskExample]:
    """`count` practice examples spread evenly over PRACTICE_FAMILIES (the remainder to the first ones), each
    family in index order of stream (seed, role), repeats and `exclude_digests` skipped so counts stay exact.
    `workers` > 1 draws large families in that many processes: the same set (each example is a pure
    function of its index), faster."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"practice set count {count!r} is not a non-negative integer")
    stream = role_stream_seed(seed, role)
    base, extra = divmod(count, len(PRACTICE_FAMILIES))
    excluded, seen, out = frozenset(exclude_digests), set(), []
    pool = None
    if workers > 1 and base >= POOL_MIN:
        pool = multiprocessing.get_context("spawn").Pool(workers)  # spawn: the caller may hold CUDA threads
    try:
        for i, family in enumerate(PRACTICE_FAMILIES):
            wanted = base + (1 if i < extra else 0)
            ahead = wanted + wanted // 20 + 100  # the first draws at once; repeats are rare at these sizes
            if pool is not None:
                chunk = -(-ahead // (workers * 4))
                jobs = [(family, stream, a, min(a + chunk, ahead), difficulty, role) for a in range(0, ahead, chunk)]
                drawn = [e for part in pool.imap(_practice_range, jobs) for e in part]
            else:
                drawn = _practice_range((family, stream, 0, min(ahead, wanted), difficulty, role))
            index, taken, max_index = len(drawn), 0, 100 * wanted + 1000
            candidates = iter(drawn)
            while taken < wanted:
                example = next(candidates, None)
                if example is None:
                    if index >= max_index:
                        raise ValueError(f"practice set {role!r}: only {taken} of {wanted} distinct {family} "
                                         f"examples at difficulty {difficulty} within {max_index} draws")
                    example, index = generate_practice(family, stream, index, difficulty, role), index + 1
                if example.digest in seen or example.digest in excluded:
                    continue
                seen.add(example.digest)
                out.append(example)
                taken += 1
    finally:
        if pool is not None:
            pool.terminate()
    return out
