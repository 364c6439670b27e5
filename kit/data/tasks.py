"""The four public generated task families (lookup, filtering, arithmetic totals, sorting) and their checker.

Example sets of different roles must be disjoint by construction and by content, and answers are
scored exactly from greedy text; every example is a pure function of (family, seed, index,
difficulty), pinned by its content digest. The decision to know: draws come from the raw PCG64
stream through this module's own rejection sampling, never `numpy.random.Generator` methods, whose
streams may change between numpy releases and would silently change committed sets.
Details: the notes below.

Notes: seeding, and the wordings.

Each example has its own PCG64 seeded with the sha256 of canonical JSON {family, seed, index, difficulty,
generator}; numpy's stream policy (NEP 19) lets `Generator.integers` / `choice` change between releases, while the
raw PCG64 stream and SeedSequence seeding are stable (docs/design.md, "Determinism"). Prompts use lowercase letters,
a few short words, digits and simple punctuation, so tiny vocabularies can learn them.
Every role of every contract is drawn in `CONTRACT_WORDING`: changing it re-draws every committed set. A rewording
consumes the same draws in the same order, so twins share numbers, items and answer; `generate_twin_sets` selects
on the contract-worded twin, so no reworded example rewords an excluded one. It tests whether a seed has a skill in
other words; the seed recipe no longer uses it (kit.data.practice replaced it; kit.seed.small says why).
"""

from __future__ import annotations

import hashlib
import multiprocessing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from kit.digest import canonical_json, sha256_json

FAMILIES = ("lookup", "filtering", "arithmetic", "sorting")
GENERATOR = "kit.data.tasks/1"  # part of every RNG key: bump only to deliberately re-draw every task set
EMPTY_ANSWER = "none"  # a filtering answer when no number is kept

KEYS = "abcdefghijklmnopqrstuvwxyz"
ITEMS = ("pen", "cup", "hat", "box", "bag", "map", "key", "jar", "mug", "pot", "cap", "fan")
WORDS = (
    "ant", "bee", "cat", "cow", "dog", "eel", "elk", "emu", "fox", "gnu", "hen", "jay",
    "kid", "owl", "pig", "ram", "rat", "yak", "bat", "ape", "cod", "doe", "hog", "ewe",
)  # fmt: skip


@dataclass(frozen=True)
class _Level:
    lookup_pairs: int
    filter_items: int
    total_terms: int
    sort_items: int
    max_value: int  # numbers are drawn from 1..max_value (lookup values from 0..max_value)


LEVELS = {1: _Level(3, 5, 3, 4, 50), 2: _Level(5, 7, 4, 6, 99), 3: _Level(8, 10, 6, 8, 999)}


@dataclass(frozen=True)
class TaskExample:
    """One generated question with its canonical answer; `digest` pins family, prompt and answer."""

    id: str
    family: str
    role: str
    difficulty: int
    prompt: str
    answer: str
    digest: str

    def to_conversation(self) -> dict:
        return {
            "id": self.id,
            "messages": [
                {"role": "user", "content": self.prompt},
                {"role": "assistant", "content": self.answer},
            ],
            "family": self.family,
            "source": "task",
            "digest": self.digest,
        }


def content_digest(family: str, prompt: str, answer: str) -> str:
    return sha256_json({"family": family, "prompt": prompt, "answer": answer})


class Draws:
    """Uniform draws from the raw PCG64 stream (see the module docstring for why not Generator methods)."""

    def __init__(self, key: dict):
        seed = int.from_bytes(hashlib.sha256(canonical_json(key)).digest(), "big")
        self._bits = np.random.PCG64(seed)

    def below(self, n: int) -> int:
        """Uniform integer in [0, n), by rejection so that no value is favoured by the modulo."""
        limit = (1 << 64) - (1 << 64) % n
        while True:
            x = int(self._bits.random_raw())
            if x < limit:
                return x % n

    def between(self, low: int, high: int) -> int:
        return low + self.below(high - low + 1)

    def sample(self, pool: Sequence, k: int) -> list:
        """k distinct elements in draw order (partial Fisher-Yates)."""
        items = list(pool)
        for i in range(k):
            j = i + self.below(len(items) - i)
            items[i], items[j] = items[j], items[i]
        return items[:k]


@dataclass(frozen=True)
class Wording:
    """The words around a task's draws. Every wording consumes the same draws in the same order, so an
    example and its rewording share their numbers, items and answer: only the prompt's words differ."""

    lookup: str  # {pairs}, {key}
    lookup_pair: str  # {key}, {value}
    lookup_sep: str
    filtering: str  # {numbers}, {rule}
    keep_greater: str  # {threshold}
    keep_less: str  # {threshold}
    keep_even: str
    keep_odd: str
    total: str  # {terms}, joined by " + "
    prices: str  # {items}
    price_item: str  # {item}, {price}
    sort: str  # {direction}, {values}
    ascending: str
    descending: str


# The contracts' words: every role of every contract is drawn in them (changing them re-draws every set).
CONTRACT_WORDING = Wording(
    lookup="table: {pairs}. value of {key}?", lookup_pair="{key}={value}", lookup_sep=", ",
    filtering="numbers: {numbers}. {rule}.", keep_greater="keep those greater than {threshold}",
    keep_less="keep those less than {threshold}", keep_even="keep the even ones", keep_odd="keep the odd ones",
    total="total of {terms}?", prices="prices: {items}. total cost?", price_item="{item} {price}",
    sort="sort {direction}: {values}", ascending="ascending", descending="descending")
# Other words for the same computations: a seed may learn a family's larger sizes in these, so that it has
# the skill while the contracts' words at that size are still for a cohort to teach (kit/seed/small.py).
REWORDED = Wording(
    lookup="pairs: {pairs}. what is {key}?", lookup_pair="{key} is {value}", lookup_sep="; ",
    filtering="from {numbers}, pick the {rule}.", keep_greater="ones above {threshold}",
    keep_less="ones below {threshold}", keep_even="even ones", keep_odd="odd ones",
    total="add up {terms}.", prices="bill: {items}. amount due?", price_item="{item} at {price}",
    sort="put in {direction} order: {values}", ascending="increasing", descending="decreasing")
WORDINGS = {"contract": CONTRACT_WORDING, "reworded": REWORDED}


def _lookup(draw: Draws, level: _Level, words: Wording) -> tuple[str, str]:
    keys = draw.sample(KEYS, level.lookup_pairs)
    values = [draw.between(0, level.max_value) for _ in keys]
    asked = draw.below(len(keys))
    table = words.lookup_sep.join(words.lookup_pair.format(key=k, value=v) for k, v in zip(keys, values))
    return words.lookup.format(pairs=table, key=keys[asked]), str(values[asked])


def _filtering(draw: Draws, level: _Level, words: Wording) -> tuple[str, str]:
    numbers = [draw.between(1, level.max_value) for _ in range(level.filter_items)]
    rule = draw.below(4)
    if rule < 2:  # a threshold inside the middle of the range keeps empty answers occasional, not common
        threshold = draw.between(level.max_value // 5, level.max_value * 4 // 5)
        if rule == 0:
            kept, text = [x for x in numbers if x > threshold], words.keep_greater.format(threshold=threshold)
        else:
            kept, text = [x for x in numbers if x < threshold], words.keep_less.format(threshold=threshold)
    elif rule == 2:
        kept, text = [x for x in numbers if x % 2 == 0], words.keep_even
    else:
        kept, text = [x for x in numbers if x % 2 == 1], words.keep_odd
    answer = " ".join(map(str, kept)) if kept else EMPTY_ANSWER
    return words.filtering.format(numbers=" ".join(map(str, numbers)), rule=text), answer


def _arithmetic(draw: Draws, level: _Level, words: Wording) -> tuple[str, str]:
    terms = [draw.between(1, level.max_value) for _ in range(level.total_terms)]
    if draw.below(2) == 0:
        prompt = words.total.format(terms=" + ".join(map(str, terms)))
    else:
        items = draw.sample(ITEMS, len(terms))
        prompt = words.prices.format(items=", ".join(words.price_item.format(item=i, price=p)
                                                     for i, p in zip(items, terms)))
    return prompt, str(sum(terms))


def _sorting(draw: Draws, level: _Level, words: Wording) -> tuple[str, str]:
    if draw.below(2) == 0:
        values: list = draw.sample(range(1, level.max_value + 1), level.sort_items)
    else:
        values = draw.sample(WORDS, level.sort_items)
    descending = draw.below(2) == 1
    ordered = sorted(values, reverse=descending)  # numbers numerically, words alphabetically
    direction = words.descending if descending else words.ascending
    return words.sort.format(direction=direction, values=" ".join(map(str, values))), " ".join(map(str, ordered))


_BUILDERS = {"lookup": _lookup, "filtering": _filtering, "arithmetic": _arithmetic, "sorting": _sorting}


def _check_family(family: str) -> None:
    if family not in FAMILIES:
        raise ValueError(f"unknown task family {family!r}; expected one of {', '.join(FAMILIES)}")


def _check_wording(wording: str) -> None:
    if wording not in WORDINGS:
        raise ValueError(f"unknown task wording {wording!r}; expected one of {', '.join(WORDINGS)}")


def _check_natural(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"task {name} {value!r} is not a non-negative integer")


def generate(family: str, seed: int, index: int, difficulty: int = 1, role: str = "train",
             wording: str = "contract") -> TaskExample:
    """Example `index` of `family`'s stream `seed`; content depends only on (family, seed, index, difficulty)
    and the wording (WORDINGS), which changes the prompt's words and never the draws or the answer.

    `role` only labels the example (its id and `role` field); `generate_set` mixes the role into the
    seed instead. The id is "<family>/<role>/<seed>/d<difficulty>/<index>", followed by "/<wording>"
    for a wording other than the contracts'.
    """
    _check_family(family)
    _check_natural("seed", seed)
    _check_natural("index", index)
    if isinstance(difficulty, bool) or difficulty not in LEVELS:
        raise ValueError(f"task difficulty {difficulty!r} is not one of {', '.join(map(str, LEVELS))}")
    _check_wording(wording)
    draw = Draws({"family": family, "seed": seed, "index": index, "difficulty": difficulty,
                   "generator": GENERATOR})  # fmt: skip
    prompt, answer = _BUILDERS[family](draw, LEVELS[difficulty], WORDINGS[wording])
    assert normalize_answer(answer) == answer, f"non-canonical answer {answer!r} for {family}"
    return TaskExample(
        id=f"{family}/{role}/{seed}/d{difficulty}/{index}" + ("" if wording == "contract" else f"/{wording}"),
        family=family,
        role=role,
        difficulty=difficulty,
        prompt=prompt,
        answer=answer,
        digest=content_digest(family, prompt, answer),
    )


def role_stream_seed(seed: int, role: str) -> int:
    """The 64-bit stream seed of `role` under the set seed `seed`: different roles draw different streams."""
    return int(sha256_json({"seed": seed, "role": role, "generator": GENERATOR})[:16], 16)


def family_counts_for(total: int) -> dict[str, int]:
    """Spread `total` evenly over FAMILIES; the remainder goes one each to the first families in order."""
    _check_natural("count", total)
    base, extra = divmod(total, len(FAMILIES))
    return {family: base + (1 if i < extra else 0) for i, family in enumerate(FAMILIES)}


POOL_MIN = 10000  # a family's count from which generate_set's workers pay for starting their processes


def _twins(family: str, stream: int, index: int, difficulty: int, role: str, wording: str):
    """Example `index` in the contracts' words, and in `wording` (None when that is the contracts')."""
    example = generate(family, stream, index, difficulty, role)
    return example, None if wording == "contract" else generate(family, stream, index, difficulty, role, wording)


def _generate_range(args: tuple) -> list[tuple]:
    family, stream, start, stop, difficulty, role, wording = args
    return [_twins(family, stream, i, difficulty, role, wording) for i in range(start, stop)]


def _candidates(family: str, stream: int, wanted: int, difficulty: int, role: str, wording: str, pool, workers: int):
    """Twins (`_twins`) 0, 1, 2, ... of one family's stream, in index order. With a process pool the first
    wanted + 1% are drawn there in chunks (each example is a pure function of its index, so the order and
    content are the same), the rest one at a time as the caller needs them."""
    index = 0
    if pool is not None and wanted >= POOL_MIN:
        ahead = wanted + wanted // 100 + 100
        chunk = -(-ahead // (workers * 4))
        jobs = [(family, stream, a, min(a + chunk, ahead), difficulty, role, wording) for a in range(0, ahead, chunk)]
        for part in pool.imap(_generate_range, jobs):
            yield from part
        index = ahead
    while True:
        yield _twins(family, stream, index, difficulty, role, wording)
        index += 1


def _pool(workers: int, counts: Mapping[str, int]):
    """A process pool when it pays (workers > 1 and some family of POOL_MIN or more), else None."""
    if workers > 1 and max(counts.values(), default=0) >= POOL_MIN:
        # spawn, not fork: the caller may hold CUDA or other threads that a forked child must not inherit
        return multiprocessing.get_context("spawn").Pool(workers)
    return None


def generate_set(
    family_counts: Mapping[str, int] | int,
    seed: int,
    role: str,
    difficulty: int = 1,
    exclude_digests: Iterable[str] = frozenset(),
    workers: int = 1,
    wording: str = "contract",
) -> list[TaskExample]:
    """The task set of one role: exactly the requested count per family, with distinct content digests.

    An int count is spread by `family_counts_for`. Each family draws indices 0, 1, 2, ... of stream
    `role_stream_seed(seed, role)`; an example whose digest is already in this set or in
    `exclude_digests` (e.g. every digest of the sets prepared before) is skipped and the next index
    drawn, so counts stay exact. Examples are grouped by family in FAMILIES order, each in index
    order; a training schedule shuffles them itself with its own recorded seed. `workers` > 1 draws a
    large set's examples in that many processes: the same set, faster (a seed build's 500,000).

    Another `wording` gives the same set reworded (`generate_twin_sets`).
    """
    contract, reworded = generate_twin_sets(family_counts, seed, role, difficulty, exclude_digests, workers, wording)
    return contract if wording == "contract" else reworded


def generate_twin_sets(
    family_counts: Mapping[str, int] | int,
    seed: int,
    role: str,
    difficulty: int = 1,
    exclude_digests: Iterable[str] = frozenset(),
    workers: int = 1,
    wording: str = "contract",
) -> tuple[list[TaskExample], list[TaskExample]]:
    """(the set in the contracts' words, the same set in `wording`; [] for the contracts' own), as
    generate_set. The selection (repeats, `exclude_digests`) is made on the contract-worded twins, so a
    reworded example is kept exactly when its twin is, and none is a rewording of an excluded example."""
    if not isinstance(role, str) or not role or "/" in role:
        raise ValueError(f"task set role {role!r} must be a non-empty string without '/'")
    _check_natural("seed", seed)
    counts = family_counts_for(family_counts) if isinstance(family_counts, int) else dict(family_counts)
    for family, count in counts.items():
        _check_family(family)
        _check_natural(f"count for {family}", count)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"task set workers {workers!r} is not a positive integer")
    _check_wording(wording)
    stream = role_stream_seed(seed, role)
    excluded = frozenset(exclude_digests)
    seen: set[str] = set()
    out: list[tuple] = []
    pool = _pool(workers, counts)
    try:
        _draw_families(out, seen, counts, stream, role, difficulty, wording, excluded, pool, workers)
    finally:
        if pool is not None:
            pool.terminate()
    return [c for c, _ in out], [r for _, r in out if r is not None]


def _draw_families(out, seen, counts, stream, role, difficulty, wording, excluded, pool, workers) -> None:
    """generate_set's loop: each family in FAMILIES order, index order, skipping repeats and exclusions."""
    for family in FAMILIES:
        wanted = counts.get(family, 0)
        # Every family's content space is far larger than any contract's count; the bound only turns a
        # mistaken request (e.g. excluding a whole space) into an error instead of an endless loop.
        max_index = 100 * wanted + 1000
        taken, index = 0, 0
        draws = _candidates(family, stream, wanted, difficulty, role, wording, pool, workers)  # lazy: nothing runs for 0
        while taken < wanted:
            if index >= max_index:
                raise ValueError(
                    f"task set {role!r}: only {taken} of {wanted} distinct {family} examples at difficulty "
                    f"{difficulty} within {max_index} draws; content space exhausted by exclude_digests?"
                )
            twins = next(draws)
            example = twins[0]
            index += 1
            if example.digest in seen or example.digest in excluded:
                continue
            seen.add(example.digest)
            out.append(twins)
            taken += 1
        draws.close()


def assert_disjoint(*sets: Sequence[TaskExample]) -> None:
    """Raise ValueError if two different sets share an example id or a content digest."""
    by_id: dict[str, tuple[int, TaskExample]] = {}
    by_digest: dict[str, tuple[int, TaskExample]] = {}
    for position, examples in enumerate(sets):
        for example in examples:
            for what, key, index in (("an id", example.id, by_id), ("a content digest", example.digest, by_digest)):
                first = index.setdefault(key, (position, example))
                if first[0] != position:
                    other = first[1]
                    raise ValueError(
                        f"task sets of roles {other.role!r} and {example.role!r} share {what}: "
                        f"example {other.id!r} and example {example.id!r}"
                    )


def normalize_answer(text: str) -> str:
    """The comparable form of an answer text. Exactly, in this order:

    1. strip leading and trailing whitespace (so leading blank lines are dropped), then keep only the
       first line: everything from the first line break on is ignored (models may ramble after);
    2. lowercase (word case does not matter: "Apple" == "apple", "None" == "none");
    3. replace every comma by a space, so "3, 8, 15", "3,8,15" and "3 8 15" agree (consequently a
       thousands separator is NOT accepted: "1,234" reads as the two numbers "1 234");
    4. collapse runs of whitespace to one space and strip;
    5. drop one trailing period ("15." == "15").

    Nothing else is forgiven: a different number, another order, a missing or extra item, a prefix
    such as "answer:" or words around the answer all make the text differ from the canonical answer.
    """
    lines = text.strip().splitlines()
    first = lines[0] if lines else ""
    collapsed = " ".join(first.lower().replace(",", " ").split())
    if collapsed.endswith("."):
        collapsed = collapsed[:-1].rstrip()
    return collapsed


def check_answer(example: TaskExample, generated: str) -> bool:
    """True iff the generated text's normalised first line equals the example's canonical answer."""
    return normalize_answer(generated) == normalize_answer(example.answer)
