"""The data order of a replicate run: the committed order for replicate 0, a derived one for replicate k > 0.

A replicate re-runs a frozen arm with only its training-data order changed (training noise measured by
randomising the order, Bouthillier et al. 2021). The decision to know: the order seed is
*derived*, never chosen: `replicate_seed(contract_seed, k)` is the first 8 bytes of
sha256(canonical_json(["kit-replicate/1", contract_seed, k])), and the new order is a function of the
committed one and that seed alone. Replicate 0 returns the committed steps unchanged (the same list), so
a run with REPLICATE = 0 is the committed run, root for root.

What is reordered keeps its composition: every document is still trained exactly once, and each update
keeps its count per role (the adaptive schedule's new / replay parts; the study has one role), so only
which documents meet in which update, and in which position, differs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kit.digest import sha256_json

DERIVATION = "kit-replicate/1"
RULE = ("order seed = int(sha256(canonical_json(['kit-replicate/1', contract_seed, replicate]))[:16 hex]); each "
        "role's documents ranked by sha256_json([order_seed, 'role', role, id]) and dealt to the updates in their "
        "committed per-role counts, then each update ranked by sha256_json([order_seed, 'update', k, role, id]); "
        "replicate 0: the committed order unchanged")


class ReplicateRefused(ValueError):
    pass


def check_replicate(value, where: str = "REPLICATE") -> int:
    """The replicate index as an int >= 0; bad input is refused naming `where`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ReplicateRefused(f"{where} = {value!r}; expected an int >= 0 (0: the committed run)")
    return value


def replicate_seed(contract_seed: int, replicate: int) -> int | None:
    """The derived order seed of replicate `replicate` (None for 0: the committed order)."""
    if check_replicate(replicate) == 0:
        return None
    return int(sha256_json([DERIVATION, int(contract_seed), replicate])[:16], 16)


def reorder_steps(steps: Sequence[Sequence], contract_seed: int, replicate: int,
                  role_of: Callable = lambda e: "", key: Callable = lambda e: e) -> list:
    """The steps of a replicate: `steps` itself for replicate 0, else the same documents in the derived
    order (module docstring). `role_of(entry)` names an entry's role (its per-update count is kept),
    `key(entry)` its id."""
    seed = replicate_seed(contract_seed, replicate)
    if seed is None:
        return steps  # type: ignore[return-value]
    pools: dict[str, list] = {}
    for step in steps:
        for entry in step:
            pools.setdefault(role_of(entry), []).append(entry)
    # sorted() calls each key function before the next iteration, so the lambdas read this iteration's values
    ranked = {role: iter(sorted(pool, key=lambda e: sha256_json([seed, "role", role, key(e)])))
              for role, pool in pools.items()}
    out = []
    for k, step in enumerate(steps, start=1):
        dealt = [next(ranked[role_of(entry)]) for entry in step]  # the committed step's roles, one each
        out.append(sorted(dealt, key=lambda e: sha256_json([seed, "update", k, role_of(e), key(e)])))
    return out


def describe(contract_seed: int, replicate: int, steps: Sequence[Sequence], key: Callable = lambda e: e) -> dict:
    """What a replicate's record says about its order: index, seeds, the rule and the order's digest (the
    ids per update), so a reader sees that two replicates' orders differ without the prepared files."""
    return {"index": replicate, "contract_seed": int(contract_seed), "order_seed": replicate_seed(contract_seed, replicate),
            "rule": RULE, "order_sha256": sha256_json([[key(e) for e in step] for step in steps])}
