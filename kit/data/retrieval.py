"""In-context retrieval documents for the small seed's pretraining: key-value recall and repetition.

Why: a small model trained only on the four task families and a little general text does not form
the retrieval ("induction") circuits those families need within a short budget. These documents
reward exactly that circuit from the first update, in surface forms of their own, so the seed gains
the capacity without being taught the cohorts' tasks: no document is a lookup, filtering, arithmetic
or sorting example, and none uses their prompt words. Every document is plain text (every token a
target) and a pure function of (kind, seed, index), drawn from the raw PCG64 stream as kit.data.tasks does.
"""

from __future__ import annotations

from kit.data.tasks import Draws

KINDS = ("recall", "repeat")
GENERATOR = "kit.data.retrieval/1"  # part of every RNG key
LETTERS = "abcdefghijklmnopqrstuvwxyz"
LEXICON = ("red", "blue", "green", "tall", "small", "wet", "dry", "old", "new", "warm", "cold", "soft",
           "hard", "dark", "light", "fast", "slow", "round", "flat", "loud")


def _name(draw: Draws) -> str:
    return "".join(LETTERS[draw.below(26)] for _ in range(3))


def recall_document(seed: int, index: int, max_pairs: int = 12) -> str:
    """Between 2 and `max_pairs` "name value" pairs, then up to four queries "name? value" of them."""
    draw = Draws({"kind": "recall", "seed": seed, "index": index, "max_pairs": max_pairs, "generator": GENERATOR})
    n = draw.between(2, max_pairs)
    names: list[str] = []
    while len(names) < n:  # distinct names, so every query has one answer
        name = _name(draw)
        if name not in names:
            names.append(name)
    values = [draw.between(0, 999) for _ in names]
    memo = "; ".join(f"{k} {v}" for k, v in zip(names, values))
    asked = draw.sample(range(n), min(n, 4))
    queries = " ".join(f"{names[i]}? {values[i]}." for i in asked)
    return f"memo: {memo}.\n{queries}"


def repeat_document(seed: int, index: int, max_items: int = 24) -> str:
    """A random list of 4..`max_items` words and numbers, then the same list again after "again:"."""
    draw = Draws({"kind": "repeat", "seed": seed, "index": index, "max_items": max_items, "generator": GENERATOR})
    n = draw.between(4, max_items)
    items = [LEXICON[draw.below(len(LEXICON))] if draw.below(2) else str(draw.between(0, 99)) for _ in range(n)]
    line = " ".join(items)
    return f"list: {line}\nagain: {line}"


def retrieval_documents(count: int, seed: int, max_pairs: int = 12) -> list[str]:
    """`count` documents alternating recall and repeat (recall first): the same list on every platform."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"retrieval document count {count!r}; expected an int >= 0")
    if isinstance(max_pairs, bool) or not isinstance(max_pairs, int) or not 2 <= max_pairs <= 26:
        raise ValueError(f"retrieval max_pairs {max_pairs!r}; expected an int in [2, 26]")
    return [recall_document(seed, i // 2, max_pairs) if i % 2 == 0 else repeat_document(seed, i // 2)
            for i in range(count)]
