"""Memory sizes written by people: `80GiB`, `80GB`, `80000MB`, `0.5TiB`, parsed to a whole number of bytes.

Both families of units are accepted and mean what they say: B, kB, MB, GB, TB are powers of 1000
(GB = 10^9 bytes, what disk and some GPU vendors print), KiB, MiB, GiB, TiB powers of 1024
(GiB = 2^30 bytes, what nvidia-smi and the planner's messages print). Case is not significant except
that the `i` must be there for the binary units. A bare letter (`80G`, `80M`) is refused, because
it is exactly the ambiguity the two families exist to remove. A bare number takes the caller's
`bare_unit` (the planner's `--worker` keeps its historic GiB), or is refused when there is none.

Pure and exact (decimal arithmetic, no floats): `parse_size("1.5GiB") == 1610612736`.
"""

from __future__ import annotations

import re
from decimal import Decimal

UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
CANONICAL = {"b": "B", "kb": "kB", "mb": "MB", "gb": "GB", "tb": "TB",
             "kib": "KiB", "mib": "MiB", "gib": "GiB", "tib": "TiB"}
EXPECTED = ("a size such as 80GiB (GiB = 2^30 bytes) or 80GB (GB = 10^9 bytes); units B, kB, MB, GB, TB "
            "(powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024)")
_SIZE_RE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*")


class SizeError(ValueError):
    """A size that is not a number with one of the accepted units; the message says what was expected."""


def parse_size(text: str, bare_unit: str | None = None) -> int:
    """Bytes of `text` (e.g. "80GiB" -> 85899345920, "80GB" -> 80000000000); `bare_unit` (e.g. "GiB") is
    the unit of a bare number, None to refuse one. Refuses negative, fractional-byte and unknown sizes."""
    m = _SIZE_RE.fullmatch(text) if isinstance(text, str) else None
    if not m:
        raise SizeError(f"{text!r}: expected {EXPECTED}")
    number, unit = m.groups()
    if not unit:
        if bare_unit is None:
            raise SizeError(f"{text!r}: no unit; expected {EXPECTED}")
        unit = bare_unit
    key = unit.lower()
    if key not in UNITS:
        if key in ("k", "m", "g", "t", "ki", "mi", "gi", "ti"):  # a prefix without B: which family was meant?
            power = "kmgt".index(key[0]) + 1
            dec, binary = CANONICAL[key[0] + "b"], CANONICAL[key[0] + "ib"]
            raise SizeError(f"{text!r}: the unit {unit!r} is ambiguous; expected {number}{dec} "
                            f"({dec} = 10^{3 * power} bytes) or {number}{binary} ({binary} = 2^{10 * power} bytes)")
        raise SizeError(f"{text!r}: unknown unit {unit!r}; expected {EXPECTED}")
    value = Decimal(number) * UNITS[key]  # exact: the pattern admits only plain decimal numbers
    if value != value.to_integral_value():
        raise SizeError(f"{text!r}: is {value} bytes, not a whole number of bytes; expected {EXPECTED}")
    return int(value)


def format_gib(n_bytes: int) -> str:
    """`n_bytes` in GiB with three decimals, the unit the planner's messages use ("79.500 GiB")."""
    return f"{n_bytes / 2**30:.3f} GiB"
