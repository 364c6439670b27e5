"""kit/sizes.py: memory sizes with units, exact bytes, and one-line refusals that say what was expected."""

from __future__ import annotations

import pytest

from kit.sizes import SizeError, format_gib, parse_size


@pytest.mark.parametrize("text,expected", [
    ("80GiB", 80 * 2**30), ("80GB", 80 * 10**9), ("80000MB", 80 * 10**9), ("80000MiB", 80000 * 2**20),
    ("1.5GiB", 3 * 2**29), ("0.5TiB", 2**39), ("2TB", 2 * 10**12), ("512KiB", 2**19), ("4kB", 4000),
    ("4KB", 4000), ("123B", 123), ("80 gib", 80 * 2**30), ("80gb", 80 * 10**9), (" 7GiB ", 7 * 2**30),
    (".5GiB", 2**29), ("1.GB", 10**9),
])
def test_units_mean_what_they_say(text, expected):
    assert parse_size(text) == expected


def test_gb_and_gib_differ_by_the_ratio_of_their_definitions():
    assert parse_size("1GiB") - parse_size("1GB") == 2**30 - 10**9 == 73741824


def test_a_bare_number_takes_the_callers_unit_or_is_refused():
    assert parse_size("80", bare_unit="GiB") == 80 * 2**30
    assert parse_size("80", bare_unit="GB") == 80 * 10**9
    with pytest.raises(SizeError, match=r"'80': no unit; expected a size such as 80GiB"):
        parse_size("80")


@pytest.mark.parametrize("text,message", [
    ("80G", r"'80G': the unit 'G' is ambiguous; expected 80GB \(GB = 10\^9 bytes\) or 80GiB \(GiB = 2\^30 bytes\)"),
    ("3m", r"the unit 'm' is ambiguous; expected 3MB \(MB = 10\^6 bytes\) or 3MiB \(MiB = 2\^20 bytes\)"),
    ("1Ti", r"the unit 'Ti' is ambiguous; expected 1TB \(TB = 10\^12 bytes\) or 1TiB"),
    ("80XB", r"'80XB': unknown unit 'XB'; expected a size such as 80GiB \(GiB = 2\^30 bytes\) or 80GB"),
    ("-1GB", r"'-1GB': expected a size"), ("GB", r"'GB': expected a size"), ("", r"'': expected a size"),
    ("1e9B", r"'1e9B': expected a size"), ("1.5B", r"'1.5B': is 1.5 bytes, not a whole number of bytes"),
    ("80 GiB x", r"expected a size"),
])
def test_bad_sizes_are_refused_in_one_line(text, message):
    with pytest.raises(SizeError, match=message) as e:
        parse_size(text, bare_unit="GiB")
    assert "\n" not in str(e.value)


def test_format_gib():
    assert format_gib(79 * 2**30 + 2**29) == "79.500 GiB"
    assert format_gib(parse_size("80GB")) == "74.506 GiB"
