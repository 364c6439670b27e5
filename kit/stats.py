"""Statistics behind the gates and screens: per-token NLL change, its paired-bootstrap upper bound,
approximate normal bounds, accuracy tables, gained/lost counts, and the gates as pure functions.

The NLL change is a token-weighted ratio of sums; its upper bound resamples EXAMPLES with the same
indices for candidate and baseline (paired) and takes the percentile. Gates take thresholds from the
caller and return a record of inputs, rule and verdict; gain needs the bound strictly below its
threshold, retention at most its threshold, as the seeds say.
Details: the notes below. Layer 0: numpy and pandas only (scipy is the test oracle).

Notes: the bootstrap bound.

Each resample recomputes the ratio of sums; the one-sided upper bound at confidence c is the c-quantile (percentile
method), which equals the upper end of scipy's two-sided percentile interval at confidence 2c - 1 (the tests'
oracle). A gate's record states its inputs, rule and verdict, so a gates JSON can be checked by hand.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

BOOTSTRAP_METHODS = ("percentile",)
# Resample indices are drawn in chunks of at most this many entries (int64: 32 MiB), so memory stays
# bounded for any n_resamples; the chunk size depends only on n, so results depend only on the inputs.
_CHUNK_ENTRIES = 1 << 22


def _vector(name: str, values, integral: bool = False) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name}: expected a non-empty 1-D array, got shape {arr.shape}")
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"{name}: expected numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(
            f"{name}: expected finite values; entry {int(np.flatnonzero(~np.isfinite(arr))[0])} is not"
        )
    if integral and not np.all(arr == np.round(arr)):
        raise ValueError(f"{name}: expected integer counts")
    return arr


def _paired_nll(cand_nll, base_nll, tokens) -> tuple[np.ndarray, np.ndarray]:
    cand = _vector("cand_nll", cand_nll)
    base = _vector("base_nll", base_nll)
    tok = _vector("tokens", tokens, integral=True)
    if not cand.shape == base.shape == tok.shape:
        raise ValueError(
            f"cand_nll, base_nll, tokens: expected one entry per example each, got lengths "
            f"{cand.size}, {base.size}, {tok.size}"
        )
    if np.any(tok <= 0):
        first = int(np.flatnonzero(tok <= 0)[0])
        raise ValueError(
            f"tokens: expected a positive assistant-token count per example; entry {first} is {tok[first]:g}"
        )
    return cand - base, tok


def nll_change_per_token(cand_nll, base_nll, tokens) -> float:
    """sum(cand - base) / sum(tokens): the change in nats per assistant token (negative: candidate better)."""
    diff, tok = _paired_nll(cand_nll, base_nll, tokens)
    return float(diff.sum() / tok.sum())


@dataclass(frozen=True)
class BootstrapResult:
    estimate: float  # the ratio of sums on the original examples
    upper: float  # one-sided upper bound at `confidence`
    confidence: float
    n_resamples: int
    seed: int
    method: str
    n: int  # number of examples

    def to_dict(self) -> dict:
        return asdict(self)


def bootstrap_ratio_distribution(
    diff: np.ndarray, tokens: np.ndarray, n_resamples: int, seed: int
) -> np.ndarray:
    """sum(diff)/sum(tokens) over `n_resamples` paired resamples of the examples (vectorised, chunked)."""
    n = diff.size
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK_ENTRIES // n)
    out = np.empty(n_resamples, dtype=np.float64)
    for start in range(0, n_resamples, chunk):
        stop = min(start + chunk, n_resamples)
        idx = rng.integers(0, n, size=(stop - start, n))
        out[start:stop] = diff[idx].sum(axis=1) / tokens[idx].sum(axis=1)
    return out


def paired_bootstrap_upper(
    cand_nll,
    base_nll,
    tokens,
    confidence: float = 0.95,
    n_resamples: int = 10000,
    seed: int = 0,
    method: str = "percentile",
) -> BootstrapResult:
    """One-sided upper bound of the per-token NLL change by paired bootstrap over examples.

    upper = the `confidence` quantile (numpy's default linear interpolation, as scipy uses) of the
    ratio of sums over resamples of example indices drawn with np.random.default_rng(seed).
    """
    diff, tok = _paired_nll(cand_nll, base_nll, tokens)
    if method not in BOOTSTRAP_METHODS:
        raise ValueError(f"paired_bootstrap_upper: method = {method!r}; expected one of {BOOTSTRAP_METHODS}")
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0.5 <= confidence < 1:
        raise ValueError(
            f"paired_bootstrap_upper: confidence = {confidence!r}; expected a number in [0.5, 1)"
        )
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 1:
        raise ValueError(f"paired_bootstrap_upper: n_resamples = {n_resamples!r}; expected an integer >= 1")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"paired_bootstrap_upper: seed = {seed!r}; expected an integer >= 0")
    stats = bootstrap_ratio_distribution(diff, tok, n_resamples, seed)
    return BootstrapResult(
        estimate=float(diff.sum() / tok.sum()),
        upper=float(np.quantile(stats, confidence)),
        confidence=float(confidence),
        n_resamples=n_resamples,
        seed=seed,
        method=method,
        n=int(diff.size),
    )


def normal_upper_bound(diff_values, multiplier: float) -> tuple[float, float]:
    """(mean, mean + multiplier * sd / sqrt(n)) with the sample sd (ddof=1): the approximate normal bound."""
    d = _vector("diff_values", diff_values)
    _check_multiplier(multiplier)
    if d.size < 2:
        raise ValueError(f"diff_values: expected at least 2 values for a standard deviation, got {d.size}")
    mean = float(d.mean())
    return mean, mean + multiplier * float(d.std(ddof=1)) / math.sqrt(d.size)


def ratio_change_normal_upper(diff_sums, tokens, multiplier: float) -> tuple[float, float]:
    """(R, upper) for the token-weighted change R = sum d / sum t, with the delta-method normal upper
    bound: `normal_upper_bound` on z_i = R + (d_i - R t_i) / mean(t) (mean(z) = R exactly)."""
    d = np.asarray(diff_sums, dtype=np.float64)
    t = np.asarray(tokens, dtype=np.float64)
    ratio = float(d.sum() / t.sum())
    z = ratio + (d - ratio * t) / t.mean()
    _, upper = normal_upper_bound(z, multiplier)
    return ratio, upper


def _check_multiplier(multiplier) -> None:
    if (
        isinstance(multiplier, bool)
        or not isinstance(multiplier, (int, float))
        or not (math.isfinite(multiplier) and multiplier > 0)
    ):
        raise ValueError(f"multiplier = {multiplier!r}; expected a finite number > 0")


def _binary(name: str, values) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name}: expected a non-empty 1-D array of booleans, got shape {arr.shape}")
    if arr.dtype != bool:
        if not np.issubdtype(arr.dtype, np.number) or not np.all(np.isin(arr, (0, 1))):
            raise ValueError(f"{name}: expected booleans or 0/1 per example")
        arr = arr.astype(bool)
    return arr


def _paired_binary(cand, other, names: tuple[str, str]) -> tuple[np.ndarray, np.ndarray]:
    a, b = _binary(names[0], cand), _binary(names[1], other)
    if a.size != b.size:
        raise ValueError(
            f"{names[0]}, {names[1]}: expected paired arrays of equal length, got {a.size} and {b.size}"
        )
    return a, b


def normal_noninferiority(cand_correct, ctrl_correct, margin: float, multiplier: float) -> dict:
    """Paired accuracy difference d_i = cand_i - ctrl_i; lower = mean - multiplier * sd/sqrt(n) (ddof=1);
    noninferior when lower > -margin (margin as a fraction, e.g. 0.03 for three percentage points)."""
    a, b = _paired_binary(cand_correct, ctrl_correct, ("cand_correct", "ctrl_correct"))
    _check_multiplier(multiplier)
    if (
        isinstance(margin, bool)
        or not isinstance(margin, (int, float))
        or not (math.isfinite(margin) and margin >= 0)
    ):
        raise ValueError(f"margin = {margin!r}; expected a finite number >= 0")
    if a.size < 2:
        raise ValueError(f"cand_correct: expected at least 2 paired examples, got {a.size}")
    d = a.astype(np.float64) - b.astype(np.float64)
    mean = float(d.mean())
    lower = mean - multiplier * float(d.std(ddof=1)) / math.sqrt(d.size)
    return {
        "n": int(d.size),
        "mean_difference": mean,
        "lower": lower,
        "margin": float(margin),
        "multiplier": float(multiplier),
        "noninferior": bool(lower > -margin),
        "rule": "noninferior when mean - multiplier * sd / sqrt(n) > -margin (paired differences, sd ddof=1)",
    }


def accuracy_by_family(records: Iterable[Mapping] | pd.DataFrame) -> pd.DataFrame:
    """Columns family, n, correct, accuracy; one row per family (sorted) and a final "all" row."""
    frame = records if isinstance(records, pd.DataFrame) else pd.DataFrame(list(records))
    for col in ("family", "correct"):
        if col not in frame.columns:
            raise ValueError(
                f"accuracy_by_family: records lack field {col!r}; expected 'family' and 'correct'"
            )
    if frame.empty:
        raise ValueError("accuracy_by_family: no records")
    if (frame["family"] == "all").any():
        raise ValueError("accuracy_by_family: a record has family 'all', which names the total row")
    correct = _binary("accuracy_by_family 'correct'", frame["correct"].to_numpy())
    frame = pd.DataFrame({"family": frame["family"].astype(str), "correct": correct.astype(np.int64)})
    table = frame.groupby("family", sort=True)["correct"].agg(n="size", correct="sum").reset_index()
    table.loc[len(table)] = ["all", int(frame.shape[0]), int(frame["correct"].sum())]
    table["n"] = table["n"].astype(np.int64)
    table["correct"] = table["correct"].astype(np.int64)
    table["accuracy"] = table["correct"] / table["n"]
    return table


def gained_lost(cand_correct, base_correct) -> dict[str, int]:
    """Cases correct only for the candidate (gained), only for the baseline (lost), and gained - lost."""
    a, b = _paired_binary(cand_correct, base_correct, ("cand_correct", "base_correct"))
    gained, lost = int(np.sum(a & ~b)), int(np.sum(~a & b))
    return {"gained": gained, "lost": lost, "net": gained - lost}


def _finite(name: str, value) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.floating, np.integer))
        or not math.isfinite(value)
    ):
        raise ValueError(f"{name} = {value!r}; expected a finite number")
    return float(value)


def gate_gain(upper: float, threshold: float = -0.001) -> dict:
    """Final gain: the upper one-sided bound of the NLL change must be strictly below `threshold`."""
    upper, threshold = _finite("gate_gain upper", upper), _finite("gate_gain threshold", threshold)
    return {
        "name": "gain",
        "passed": upper < threshold,
        "inputs": {"upper": upper, "threshold": threshold},
        "rule": "passes when the upper bound (nats per assistant token) < threshold",
    }


def gate_retention(upper: float, threshold: float = 0.02) -> dict:
    """Retention: the upper bound of the NLL change must be at most `threshold`."""
    upper, threshold = _finite("gate_retention upper", upper), _finite("gate_retention threshold", threshold)
    return {
        "name": "retention",
        "passed": upper <= threshold,
        "inputs": {"upper": upper, "threshold": threshold},
        "rule": "passes when the upper bound (nats per assistant token) <= threshold",
    }


def _count(name: str, counts: Mapping[str, int], key: str) -> int:
    """The count `key` of a gained/lost mapping, refused naming `name` unless it is an integer >= 0."""
    value = counts.get(key) if isinstance(counts, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name}: field {key!r} = {value!r}; expected a count >= 0")
    return int(value)


def gate_generated(gained_lost: Mapping[str, int]) -> dict:
    """Generated answers must not lose correct cases in aggregate: lost <= gained."""
    gained, lost = (_count("gate_generated", gained_lost, key) for key in ("gained", "lost"))
    return {
        "name": "generated",
        "passed": lost <= gained,
        "inputs": {"gained": gained, "lost": lost, "net": gained - lost},
        "rule": "passes when lost <= gained (no net loss of correct generated answers)",
    }
