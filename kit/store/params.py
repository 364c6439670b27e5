"""Parameter I/O of the checkpoint store: each parameter's FP32 tensors (param, exp_avg, exp_avg_sq)
as objects, and back. `load_parameters` reads the `param` objects only (evaluation, comparison,
export and the frozen reference never need the Adam moments).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import torch

from kit.record import build
from kit.store.manifest import (
    LEARNED_DTYPE,
    STATE_KEYS,
    TENSOR_FIELDS,
    ParamEntry,
    RecordError,
    _exact_keys,
    validate_param_entries,
)
from kit.store.objects import ObjectStore

# -- parameter states ----------------------------------------------------------------------------


IO_THREADS = max(1, min(8, os.cpu_count() or 1))  # sha256, file I/O and device copies release the GIL


def _parallel(fn, items: list) -> list:
    """`fn` over `items` on a few threads, results in input order (deterministic records)."""
    if len(items) < 2 or IO_THREADS == 1:
        return [fn(x) for x in items]

    with ThreadPoolExecutor(IO_THREADS) as pool:
        return list(pool.map(fn, items))


class NonFiniteState(RecordError):
    """A parameter or Adam moment holds NaN or an infinity: never committed, never exported."""


def non_finite(tensor: torch.Tensor, what: str) -> str | None:
    """None when every value of `tensor` is finite, else "WHAT: N of M values are not finite (first: V)"."""
    if tensor.numel() == 0:
        return None
    low, high = torch.aminmax(tensor)  # NaN propagates into both; no tensor-sized temporary on the passing path
    if math.isfinite(low.item()) and math.isfinite(high.item()):
        return None
    bad = tensor[~torch.isfinite(tensor)]
    return f"{what}: {bad.numel()} of {tensor.numel()} values are not finite (first: {bad.flatten()[0].item()})"


def save_param_states(store: ObjectStore, states: dict[str, dict]) -> list[dict]:
    """Write each parameter's FP32 tensors as objects; returns the learned-state entries, by name.

    Objects are written on a few threads (hashing, writing and fsync of different tensors overlap);
    the entries do not depend on the order in which they finish."""
    shapes = {}
    for name in sorted(states):
        state, where = states[name], f"param state {name!r}"
        _exact_keys(state, STATE_KEYS, where)
        shape = None
        for field in TENSOR_FIELDS:
            tensor = state[field]
            if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.float32:
                raise RecordError(f"{where}.{field}: expected a float32 tensor, got {getattr(tensor, 'dtype', tensor)!r}")
            shape = list(tensor.shape) if shape is None else shape
            if list(tensor.shape) != shape:
                raise RecordError(f"{where}.{field}: shape {list(tensor.shape)} differs from param shape {shape}")
        shapes[name] = shape
    jobs = [(name, field) for name in sorted(states) for field in TENSOR_FIELDS]
    bad = [problem for problem in _parallel(lambda j: non_finite(states[j[0]][j[1]], f"{j[0]}.{j[1]}"), jobs)
           if problem]
    if bad:  # before any object is written: a commit never holds a NaN or an infinity
        raise NonFiniteState(f"{len(bad)} tensor(s) hold non-finite values, refusing to commit them: "
                             + "; ".join(bad[:3]) + ("; ..." if len(bad) > 3 else ""))
    digests = dict(zip(jobs, _parallel(lambda j: store.put_tensor(states[j[0]][j[1]]), jobs)))
    entries = [
        {
            "name": name,
            "dtype": LEARNED_DTYPE,
            "shape": shapes[name],
            "group": states[name]["group"],
            "age": states[name]["age"],
            **{field: digests[(name, field)] for field in TENSOR_FIELDS},
        }
        for name in sorted(states)
    ]
    validate_param_entries(entries, "save_param_states")
    return entries


def param_entries(entries: Sequence[ParamEntry | dict], source: str) -> list[ParamEntry]:
    """The declared entries; entries given as JSON (another store's, a test's) are validated first."""
    if all(isinstance(e, ParamEntry) for e in entries):
        return [e for e in entries if isinstance(e, ParamEntry)]
    validate_param_entries(entries, source)
    return [build(e, ParamEntry) for e in entries]


def load_param_states(store: ObjectStore, entries: Sequence[ParamEntry | dict],
                      names: set[str] | None = None) -> dict[str, dict]:
    """Load the named parameters' tensors (all when `names` is None); no other object is read."""
    by_name = {e.name: e for e in param_entries(entries, "load_param_states")}
    wanted = sorted(by_name) if names is None else sorted(names)
    missing = [n for n in wanted if n not in by_name]
    if missing:
        raise RecordError(f"load_param_states: no entry for parameters {missing[:5]} ({len(missing)} missing)")
    out = {}
    for name in wanted:
        e = by_name[name]
        out[name] = {"group": e.group, "age": e.age}
        for field, digest in zip(TENSOR_FIELDS, e.tensor_digests()):
            out[name][field] = store.get_tensor(digest, e.dtype, list(e.shape))
    return out




def parameter_tensor(store: ObjectStore, entry: ParamEntry | dict) -> torch.Tensor:
    """One learned-state entry's parameter tensor (its `param` object only)."""
    (e,) = param_entries([entry], "parameter_tensor")
    return store.get_tensor(e.param, e.dtype, list(e.shape))


def load_parameters(store: ObjectStore, entries: Sequence[ParamEntry], model: torch.nn.Module, source: str) -> None:
    """Copy the entries' `param` objects into `model`'s parameters, by name; the Adam moments are never
    read. A parameter the entries lack is refused naming `source`."""
    by_name = {e.name: e for e in entries}
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n not in by_name:
                raise ValueError(f"{source} has no parameter {n!r}")
            p.copy_(parameter_tensor(store, by_name[n]))
